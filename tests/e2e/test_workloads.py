"""Workload controllers through the real kubectl, on a local cluster this module starts.

Tests play kubelet: they patch pod status through the status subresource (Running + Ready, or
Succeeded) to drive rollouts and Jobs. They pass with or without a kubelet in the cluster, so
they check what the controllers guarantee, not who got a pod to Ready first; images unknown to
the local kubelet's image map run virtually there (Running and Ready, or Succeeded for Jobs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_util import kubectl_binary, poll, unique

pytestmark = pytest.mark.e2e

READY = json.dumps({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
SUCCEEDED = json.dumps({"status": {"phase": "Succeeded"}})


class Cluster:
    def __init__(self, data_dir: Path, cache: Path) -> None:
        self.data_dir = data_dir
        self.cache = cache
        self.namespace = "default"

    def kubectl(self, *args: str, check: bool = True, timeout: float = 60,
                input: str | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, KUBECONFIG=str(self.data_dir / "kubeconfig"), KUBECACHEDIR=str(self.cache))
        result = subprocess.run([kubectl_binary(), "--context", "w1", "-n", self.namespace, *args], input=input,
                                capture_output=True, text=True, timeout=timeout, env=env)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def pods(self, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.json("get", "pods", "-l", selector)["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def play_kubelet(self, selector: str, patch: str = READY) -> int:
        """Mark every pod matching `selector` that is not yet there; returns how many."""
        marked = 0
        for pod in self.pods(selector):
            status = pod.get("status") or {}
            want = json.loads(patch)["status"]["phase"]
            is_ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
            if status.get("phase") == want and (want != "Running" or is_ready):
                continue
            # The controller may delete the pod meanwhile (a rollout moving on): that is fine.
            result = self.kubectl("patch", "pod", pod["metadata"]["name"], "--subresource=status", "--type=merge",
                                  "-p", patch, check=False)
            if result.returncode == 0:
                marked += 1
            elif "NotFound" not in result.stderr:
                raise AssertionError(f"patching {pod['metadata']['name']} failed: {result.stderr}")
        return marked


def tether(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data_dir = tmp_path_factory.mktemp("workloads")
    started = tether("local", "up", "--data-dir", str(data_dir), "--name", "w1")
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        yield Cluster(data_dir, tmp_path_factory.mktemp("kubecache"))
    finally:
        tether("local", "down", "--data-dir", str(data_dir))


@pytest.fixture
def k(cluster: Cluster) -> Iterator[Cluster]:
    """The cluster, working in a fresh namespace."""
    cluster.namespace = "default"
    name = unique("wl")
    cluster.kubectl("create", "namespace", name)
    cluster.namespace = name
    yield cluster
    cluster.namespace = "default"
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def replicasets(k: Cluster, app: str) -> dict[str, dict[str, Any]]:
    return {rs["metadata"]["name"]: rs for rs in k.json("get", "rs", "-l", f"app={app}")["items"]}


def roll_until(k: Cluster, app: str, done: Any, *, timeout: float = 30) -> None:
    """Play kubelet for `app`'s pods until `done()` holds."""
    def step() -> bool:
        k.play_kubelet(f"app={app}")
        return bool(done())

    poll(step, timeout=timeout, interval=0.2, what=f"rollout of {app}")


def test_deployment_lifecycle(k: Cluster) -> None:
    k.kubectl("create", "deployment", "web", "--image=nginx", "--replicas=5")
    rs_list = poll(lambda: [rs for rs in replicasets(k, "web").values()
                            if (rs.get("status") or {}).get("replicas") == 5], what="the first ReplicaSet")
    assert len(replicasets(k, "web")) == 1
    rs = rs_list[0]
    deploy = k.json("get", "deployment", "web")
    pod_hash = rs["metadata"]["labels"]["pod-template-hash"]
    assert rs["metadata"]["name"] == f"web-{pod_hash}"
    assert rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    owner = rs["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"], owner["blockOwnerDeletion"]) == (
        "Deployment", deploy["metadata"]["uid"], True, True)
    pods = k.pods("app=web")
    assert len(pods) == 5
    for pod in pods:
        assert pod["metadata"]["name"].startswith(f"web-{pod_hash}-")
        assert pod["metadata"]["labels"] == {"app": "web", "pod-template-hash": pod_hash}
        assert pod["metadata"]["ownerReferences"][0]["uid"] == rs["metadata"]["uid"]

    # Readiness lets the rollout finish.
    k.play_kubelet("app=web")
    status = k.kubectl("rollout", "status", "deployment/web", "--timeout=20s", timeout=30)
    assert "successfully rolled out" in status.stdout
    row = k.kubectl("get", "deploy", "web", "--no-headers").stdout.split()
    assert row[1:4] == ["5/5", "5", "5"]
    conditions = {c["type"]: c["reason"] for c in k.json("get", "deploy", "web")["status"]["conditions"]}
    assert conditions == {"Available": "MinimumReplicasAvailable", "Progressing": "NewReplicaSetAvailable"}

    # Scale down deletes three pods.
    k.kubectl("scale", "deployment", "web", "--replicas=2")
    poll(lambda: len(k.pods("app=web")) == 2, what="scale down to 2")

    # A deleted pod comes back.
    victim = k.pods("app=web")[0]["metadata"]["name"]
    k.kubectl("delete", "pod", victim, "--wait=false")
    poll(lambda: len(k.pods("app=web")) == 2 and victim not in {p["metadata"]["name"] for p in k.pods("app=web")},
         what="the pod's replacement")

    # A new image rolls to a second ReplicaSet, and the first drains to zero.
    k.kubectl("set", "image", "deployment/web", "nginx=nginx:1.27")
    poll(lambda: len(replicasets(k, "web")) == 2, what="the second ReplicaSet")
    old_name = rs["metadata"]["name"]
    roll_until(k, "web", lambda: replicasets(k, "web")[old_name]["spec"]["replicas"] == 0
               and "successfully" in k.kubectl("rollout", "status", "deploy/web", "--watch=false").stdout)
    new_name = next(n for n in replicasets(k, "web") if n != old_name)
    assert replicasets(k, "web")[new_name]["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    images = {p["spec"]["containers"][0]["image"] for p in k.pods("app=web")}
    assert images == {"nginx:1.27"}
    events = k.kubectl("get", "events", "--field-selector", "involvedObject.kind=Deployment").stdout
    assert f"Scaled up replica set {new_name} to 1 from 0" in events
    assert f"Scaled down replica set {old_name} to 2 from 5" in events

    # rollout undo goes back to the first template, which becomes revision 3.
    k.kubectl("rollout", "undo", "deployment/web")
    roll_until(k, "web", lambda: replicasets(k, "web")[new_name]["spec"]["replicas"] == 0
               and "successfully" in k.kubectl("rollout", "status", "deploy/web", "--watch=false").stdout)
    assert replicasets(k, "web")[old_name]["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    assert {p["spec"]["containers"][0]["image"] for p in k.pods("app=web")} == {"nginx"}
    history = k.kubectl("rollout", "history", "deployment/web").stdout
    assert "2 " in history and "3 " in history


def test_replicaset_events_and_adoption(k: Cluster) -> None:
    orphan = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stray", "labels": {"app": "rs1"}},
              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    k.kubectl("create", "-f", "-", input=json.dumps(orphan))
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs1"},
          "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "rs1"}},
                   "template": {"metadata": {"labels": {"app": "rs1"}},
                                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}
    k.kubectl("create", "-f", "-", input=json.dumps(rs))
    poll(lambda: len(k.pods("app=rs1")) == 3, what="three pods")
    stray = k.json("get", "pod", "stray")
    assert stray["metadata"]["ownerReferences"][0]["name"] == "rs1"
    events = k.kubectl("get", "events", "--field-selector", "involvedObject.name=rs1").stdout
    assert events.count("SuccessfulCreate") == 2


def test_job_completes(k: Cluster) -> None:
    k.kubectl("create", "job", "pi", "--image=busybox", "--", "true")
    k.kubectl("patch", "job", "pi", "--type=merge", "-p", '{"spec":{"parallelism":2}}')
    poll(lambda: k.pods("job-name=pi"), what="the job's pod")
    k.play_kubelet("job-name=pi", SUCCEEDED)
    waited = k.kubectl("wait", "--for=condition=complete", "job/pi", "--timeout=20s", timeout=30)
    assert "condition met" in waited.stdout
    status = k.json("get", "job", "pi")["status"]
    assert status["succeeded"] == 1 and status.get("completionTime") and status.get("startTime")


def test_job_parallel_completions(k: Cluster) -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "batch"},
           "spec": {"completions": 4, "parallelism": 2, "template": {"spec": {
               "restartPolicy": "Never", "containers": [{"name": "c", "image": "example.com/worker:1"}]}}}}
    k.kubectl("create", "-f", "-", input=json.dumps(job))
    most_active = 0

    def complete() -> bool:
        nonlocal most_active
        running = [p for p in k.pods("job-name=batch") if p["status"].get("phase") not in ("Succeeded", "Failed")]
        most_active = max(most_active, len(running))
        k.play_kubelet("job-name=batch", SUCCEEDED)
        conditions = k.json("get", "job", "batch").get("status", {}).get("conditions") or []
        return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)

    poll(complete, timeout=30, interval=0.2, what="the job to complete")
    assert 1 <= most_active <= 2
    status = k.json("get", "job", "batch")["status"]
    assert status["succeeded"] == 4 and not status.get("active")
    assert len(k.pods("job-name=batch")) == 4
    k.kubectl("wait", "--for=condition=complete", "job/batch", "--timeout=20s", timeout=30)


def test_statefulset_ordinals(k: Cluster) -> None:
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
           "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                    "template": {"metadata": {"labels": {"app": "db"}},
                                 "spec": {"containers": [{"name": "c", "image": "example.com/db:1"}]}}}}
    k.kubectl("create", "-f", "-", input=json.dumps(sts))
    first = poll(lambda: k.pods("app=db"), what="db-0")
    # OrderedReady: a pod exists only once the one before it is Running and Ready.
    names = sorted(p["metadata"]["name"] for p in first)
    assert names[0] == "db-0"
    by_name = {p["metadata"]["name"]: p for p in first}
    for ordinal in range(1, len(names)):
        before = by_name[f"db-{ordinal - 1}"]["status"]
        assert before.get("phase") == "Running", names
    roll_until(k, "db", lambda: len(k.pods("app=db")) == 3 and all(
        p["status"].get("phase") == "Running" for p in k.pods("app=db")))
    pods = {p["metadata"]["name"]: p for p in k.pods("app=db")}
    assert sorted(pods) == ["db-0", "db-1", "db-2"]
    assert pods["db-1"]["spec"]["hostname"] == "db-1" and pods["db-1"]["spec"]["subdomain"] == "db"
    assert pods["db-1"]["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == "db-1"
    assert pods["db-1"]["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == "1"
    k.kubectl("rollout", "status", "statefulset/db", "--timeout=20s", timeout=30)
    k.kubectl("scale", "statefulset", "db", "--replicas=1")
    poll(lambda: [p["metadata"]["name"] for p in k.pods("app=db")] == ["db-0"], what="scale down to db-0")


def test_daemonset_one_pod_per_node(k: Cluster) -> None:
    nodes = [unique("wn"), unique("wn")]
    for name in nodes:
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"wl-test": "yes"}}}
        k.kubectl("create", "-f", "-", input=json.dumps(node))
    try:
        ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
              "spec": {"selector": {"matchLabels": {"app": "agent"}},
                       "template": {"metadata": {"labels": {"app": "agent"}},
                                    "spec": {"nodeSelector": {"wl-test": "yes"},
                                             "containers": [{"name": "c", "image": "agent"}]}}}}
        k.kubectl("create", "-f", "-", input=json.dumps(ds))
        poll(lambda: len(k.pods("app=agent")) == 2, what="one pod per node")
        targets = set()
        for pod in k.pods("app=agent"):
            terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            targets.add(terms["nodeSelectorTerms"][0]["matchFields"][0]["values"][0])
        assert targets == set(nodes)
        status = poll(lambda: (s := k.json("get", "ds", "agent").get("status") or {}).get(
            "currentNumberScheduled") == 2 and s, what="daemonset status")
        assert status["desiredNumberScheduled"] == 2
    finally:
        for name in nodes:
            k.kubectl("delete", "node", name, "--wait=false", check=False)
