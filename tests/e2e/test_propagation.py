"""Propagation end to end: `tether hub run` with both dialects on local clusters.

`host` and `cluster` run in one data dir, `cluster1` in another (as in test_registry). The hub
runs as `python -m tether hub run` (short timers) and is stopped with SIGTERM; everything the
module starts is torn down in fixtures.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from e2e_util import root_conftest

from tether.kube import KubeClient, NotFound

pytestmark = pytest.mark.e2e

WAIT_S = 90.0  # generous: on a loaded 2-core machine a member can take this long
WORK = "work.tether.io/v1alpha1"
MANAGED = "app.kubernetes.io/managed-by=tether"

# A KubeFed walk-through's manifests, verbatim as a user copies them: the FederatedNamespace
# (without the shell's `> ` heredoc prompts) and the FederatedDeployment with a per-cluster
# override exactly as the walk-through prints it.
FEDERATED_NAMESPACE = """\
apiVersion: types.kubefed.io/v1beta1
kind: FederatedNamespace
metadata:
  name: test-namespace
  namespace: test-namespace
spec:
  placement:
    clusters:
    - name: cluster
    - name: cluster1
"""
FEDERATED_DEPLOYMENT_AS_PRINTED = """\
apiVersion: types.kubefed.io/v1beta1
kind: FederatedDeployment
metadata:
  name: test-deployment
  namespace: test-namespace
spec:
  template:
    metadata:
      labels:
        app: nginx
    spec:
      replicas: 3
      selector:
        matchLabels:
          app: nginx
      template:
        metadata:
          labels:
            app: nginx
        spec:
          containers:
            - image: nginx:1.17
            name: nginx
  placement:
    clusters:
    - name: cluster
    - name: cluster1
  overrides:
  - clusterName: cluster
    clusterOverrides:
    - path: "/spec/replicas"
      value: 5
    - path: "/spec/template/spec/containers/0/image"
      value: "nginx:1.14.0-alpine"
    - path: "/metadata/annotations"
      op: "add"
      value:
        foo: bar
    - path: "/metadata/annotations/foo"
      op: "remove"
"""
# The printed text lost one indentation level (`name: nginx` belongs to the container); the only
# change a user has to make after kubectl rejects it.
FEDERATED_DEPLOYMENT_FIXED = FEDERATED_DEPLOYMENT_AS_PRINTED.replace(
    "            - image: nginx:1.17\n            name: nginx",
    "            - image: nginx:1.17\n              name: nginx")


def tether(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                          timeout=timeout)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@dataclass
class Fleet:
    main_dir: Path
    member_dir: Path
    kubeconfig: Path
    member_kubeconfig: Path
    cache: Path
    hub_proc: subprocess.Popen[bytes] | None = None
    hub_port: int = 0
    hub_runs: int = 0
    hub_args: tuple[str, ...] = ()  # extra `tether hub run` flags

    def kubeconfig_of(self, context: str) -> Path:
        return self.member_kubeconfig if context == "cluster1" else self.kubeconfig

    def kubectl(self, context: str, *args: str, check: bool = True,
                input: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig_of(context)),
               "KUBECACHEDIR": str(self.cache / context)}
        result = subprocess.run([root_conftest().kubectl_binary(), "--context", context, *args],
                                input=input, capture_output=True, text=True, timeout=60, env=env)
        if check:
            assert result.returncode == 0, result.stdout + result.stderr
        return result

    def apply(self, context: str, *objs: dict[str, Any]) -> None:
        for obj in objs:
            self.kubectl(context, "apply", "--server-side", "--field-manager", "test", "-f", "-",
                         input=json.dumps(obj))

    def client(self, context: str) -> KubeClient:
        return KubeClient.from_kubeconfig(self.kubeconfig_of(context), context)

    def hub_log(self, run: int) -> Path:
        return self.main_dir / f"hub-{run}.log"

    def start_hub(self) -> None:
        assert self.hub_proc is None
        self.hub_runs += 1
        log = self.hub_log(self.hub_runs)
        with log.open("wb") as out:
            self.hub_proc = subprocess.Popen(
                [sys.executable, "-m", "tether", "hub", "run", "--kubeconfig",
                 str(self.kubeconfig), "--context", "host", "--port", "0", "--health-period",
                 "0.5", "--health-threshold", "1", "--resync", "5", "--verbose", *self.hub_args],
                stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while "http://127.0.0.1:" not in log.read_text():
            assert self.hub_proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        line = next(x for x in log.read_text().splitlines() if "http://127.0.0.1:" in x)
        self.hub_port = int(line.rsplit(":", 1)[1].strip())

    def hub_tracebacks(self) -> list[str]:
        return [self.hub_log(i).read_text() for i in range(1, self.hub_runs + 1)
                if "Traceback" in self.hub_log(i).read_text()]

    def stop_hub(self) -> float:
        """SIGTERM; returns how long the hub took to exit."""
        proc, self.hub_proc = self.hub_proc, None
        if proc is None:
            return 0.0
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # stack dump into the log
            time.sleep(1)
            proc.kill()
            proc.wait()
            tail = self.hub_log(self.hub_runs).read_text()[-6000:]
            raise AssertionError(f"the hub did not stop within 15s of SIGTERM:\n{tail}") from None
        return time.monotonic() - started


async def until(check: Callable[[], Awaitable[Any]], what: str, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = await check()
        except NotFound as exc:
            last = exc
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last: {last!r}")
        await asyncio.sleep(0.2)


async def get(fleet: Fleet, context: str, api_version: str, kind: str, name: str,
              namespace: str | None = None) -> dict[str, Any] | None:
    async with fleet.client(context) as client:
        try:
            return await client.get(api_version, kind, name, namespace)
        except NotFound:
            return None


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    main_dir = tmp_path_factory.mktemp("prop-main")
    member_dir = tmp_path_factory.mktemp("prop-member")
    ok(tether("local", "up", "--data-dir", str(main_dir), "--name", "host", "--name", "cluster"))
    started: Fleet | None = None
    try:
        ok(tether("local", "up", "--data-dir", str(member_dir), "--name", "cluster1"))
        started = Fleet(main_dir, member_dir, main_dir / "kubeconfig", member_dir / "kubeconfig",
                        tmp_path_factory.mktemp("prop-kubecache"))
        ok(tether("hub", "install", "--kubeconfig", str(started.kubeconfig), "--context", "host"))
        for name, extra in (("cluster", []), ("cluster1", ["--cluster-kubeconfig",
                                                           str(started.member_kubeconfig)])):
            ok(tether("join", name, "--cluster-context", name, *extra,
                      "--host-kubeconfig", str(started.kubeconfig), "--host-context", "host"))
        started.start_hub()
        yield started
    finally:
        try:
            if started is not None:
                started.stop_hub()
        finally:
            tether("local", "down", "--data-dir", str(member_dir))
            tether("local", "down", "--data-dir", str(main_dir))


def annotation_report(obj: dict[str, Any] | None) -> dict[str, Any]:
    raw = ((obj or {}).get("metadata", {}).get("annotations") or {}).get(
        "tether.io/propagation-status")
    return json.loads(raw) if raw else {}


def deployment(name: str, namespace: str, replicas: int, image: str) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "web", "image": image}]}}}}


def policy(name: str, namespace: str, selectors: list[dict[str, Any]], clusters: list[str],
           **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"resourceSelectors": selectors,
                     "placement": {"clusterAffinity": {"clusterNames": clusters},
                                   **extra.pop("placement", {})}, **extra}}


async def test_hub_serves_health_and_becomes_ready(fleet: Fleet) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{fleet.hub_port}") as http:
        assert (await http.get("/healthz")).status_code == 200

        async def ready() -> bool:
            return (await http.get("/readyz")).status_code == 200

        await until(ready, "hub /readyz")

        async def clusters_ready() -> bool:
            text = (await http.get("/metrics")).text
            return "tether_clusters_ready 2" in text

        await until(clusters_ready, "both clusters ready in /metrics")


async def test_kubefed_federated_deployment_with_override_propagates(fleet: Fleet) -> None:
    fleet.kubectl("host", "create", "ns", "test-namespace")
    fleet.kubectl("host", "create", "-f", "-", input=FEDERATED_NAMESPACE)
    verbatim = fleet.kubectl("host", "create", "-f", "-", input=FEDERATED_DEPLOYMENT_AS_PRINTED,
                             check=False)
    assert verbatim.returncode != 0 and "yaml" in verbatim.stderr.lower(), verbatim.stderr
    assert yaml.safe_load(FEDERATED_DEPLOYMENT_FIXED)["spec"]["template"]["spec"][
        "template"]["spec"]["containers"] == [{"image": "nginx:1.17", "name": "nginx"}]
    fleet.kubectl("host", "create", "-f", "-", input=FEDERATED_DEPLOYMENT_FIXED)

    async def rolled_out(context: str, replicas: int, image: str) -> dict[str, Any] | None:
        obj = await get(fleet, context, "apps/v1", "Deployment", "test-deployment",
                        "test-namespace")
        if obj is None or obj["spec"]["replicas"] != replicas:
            return None
        if obj["spec"]["template"]["spec"]["containers"][0]["image"] != image:
            return None
        return obj if (obj.get("status") or {}).get("readyReplicas") == replicas else None

    big = await until(lambda: rolled_out("cluster", 5, "nginx:1.14.0-alpine"), "cluster: 5 x 1.14")
    await until(lambda: rolled_out("cluster1", 3, "nginx:1.17"), "cluster1: 3 x nginx:1.17")
    # the override's annotations result: `foo` added, then removed
    assert "foo" not in (big["metadata"].get("annotations") or {})
    assert big["metadata"]["labels"]["kubefed.io/managed"] == "true"
    ns = await get(fleet, "cluster1", "v1", "Namespace", "test-namespace")
    assert ns is not None and ns["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tether"

    async def propagated() -> dict[str, Any] | None:
        fed = await get(fleet, "host", "types.kubefed.io/v1beta1", "FederatedDeployment",
                        "test-deployment", "test-namespace")
        status = (fed or {}).get("status") or {}
        conds = status.get("conditions") or [{}]
        clusters = status.get("clusters") or []
        ready = [c for c in clusters if (c.get("remoteStatus") or {}).get("readyReplicas")]
        if conds[0].get("status") == "True" and len(ready) == 2:
            return fed
        return None

    fed = await until(propagated, "Propagation True with both clusters")
    assert [c["name"] for c in fed["status"]["clusters"]] == ["cluster", "cluster1"]
    assert fed["metadata"]["finalizers"] == ["tether.io/propagation"]
    out = ok(tether("status", "federateddeployment/test-deployment", "-n", "test-namespace",
                    "--kubeconfig", str(fleet.kubeconfig), "--context", "host"))
    lines = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert lines["cluster"][1:4] == ["yes", "AppliedSuccessful", "5/5"], out
    assert lines["cluster1"][1:4] == ["yes", "AppliedSuccessful", "3/3"], out
    assert lines["cluster"][5].endswith("s"), out


async def test_rsp_moves_running_replicas_only_when_rebalance_is_set(fleet: Fleet) -> None:
    """KubeFed's ReplicaSchedulingPreference: weights divide the total; without `rebalance`
    a change of weights leaves running replicas where they are; with it they move."""
    labels = {"app": "rsp-web"}
    fleet.apply("host", {
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedDeployment",
        "metadata": {"name": "rsp-web", "namespace": "test-namespace"},
        "spec": {"placement": {"clusters": [{"name": "cluster"}, {"name": "cluster1"}]},
                 "template": {"spec": {"replicas": 1, "selector": {"matchLabels": labels},
                                       "template": {"metadata": {"labels": labels}, "spec": {
                                           "containers": [{"name": "web", "image": "example.com/virtual:1"}]}}}}}})

    def rsp(weights: tuple[int, int], rebalance: bool) -> dict[str, Any]:
        return {"apiVersion": "scheduling.kubefed.io/v1alpha1", "kind": "ReplicaSchedulingPreference",
                "metadata": {"name": "rsp-web", "namespace": "test-namespace"},
                "spec": {"targetKind": "FederatedDeployment", "totalReplicas": 4, "rebalance": rebalance,
                         "clusters": {"cluster": {"weight": weights[0]}, "cluster1": {"weight": weights[1]}}}}

    async def replicas_are(want: tuple[int, int]) -> bool:
        got = []
        for context in ("cluster", "cluster1"):
            obj = await get(fleet, context, "apps/v1", "Deployment", "rsp-web", "test-namespace")
            got.append(obj["spec"]["replicas"] if obj else None)
        return tuple(got) == want

    fleet.apply("host", rsp((1, 1), rebalance=False))
    await until(lambda: replicas_are((2, 2)), "2 + 2 replicas by equal weights")
    fleet.apply("host", rsp((3, 1), rebalance=False))
    await asyncio.sleep(2.0)  # the hub has seen the new weights by now (its resync is 5 s)
    assert await replicas_are((2, 2)), "replicas moved without rebalance"
    fleet.apply("host", rsp((3, 1), rebalance=True))
    await until(lambda: replicas_are((3, 1)), "3 + 1 replicas after rebalance")


async def test_karmada_divided_with_image_override(fleet: Fleet) -> None:
    fleet.kubectl("host", "create", "ns", "kdemo")
    fleet.apply("host", deployment("web", "kdemo", 6, "nginx:1.17"))
    fleet.apply("host", policy(
        "web", "kdemo", [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}],
        ["cluster", "cluster1"],
        placement={"replicaScheduling": {
            "replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted",
            "weightPreference": {"staticWeightList": [
                {"targetCluster": {"clusterNames": ["cluster"]}, "weight": 2},
                {"targetCluster": {"clusterNames": ["cluster1"]}, "weight": 1}]}}}))
    fleet.apply("host", {
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "OverridePolicy",
        "metadata": {"name": "web-image", "namespace": "kdemo"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                        "name": "web"}],
                 "overrideRules": [{"overriders": {"imageOverrider": [
                     {"component": "Registry", "operator": "replace",
                      "value": "registry.example.com"}]}}]}})

    async def member(context: str, replicas: int) -> bool:
        obj = await get(fleet, context, "apps/v1", "Deployment", "web", "kdemo")
        return bool(obj and obj["spec"]["replicas"] == replicas
                    and obj["spec"]["template"]["spec"]["containers"][0]["image"]
                    == "registry.example.com/nginx:1.17"
                    and (obj.get("status") or {}).get("readyReplicas") == replicas)

    await until(lambda: member("cluster", 4), "cluster: 4 replicas, overridden image")
    await until(lambda: member("cluster1", 2), "cluster1: 2 replicas, overridden image")

    async def summed() -> dict[str, Any] | None:
        report = annotation_report(await get(fleet, "host", "apps/v1", "Deployment", "web",
                                             "kdemo"))
        agg = report.get("aggregatedStatus") or {}
        return report if agg.get("readyReplicas") == 6 else None

    report = await until(summed, "aggregated readyReplicas 6")
    assert report["conditions"][0]["status"] == "True"
    # `host` is a full cluster: its own Deployment controller owns the template's .status, so
    # the sum stays in the annotation and tether never writes .status there.
    template = await get(fleet, "host", "apps/v1", "Deployment", "web", "kdemo")
    assert template is not None
    assert "tether-propagation" not in {m.get("manager") for m in template["metadata"]["managedFields"]
                                        if m.get("subresource") == "status"}
    assert {c["name"]: c["replicas"] for c in report["clusters"]} == {"cluster": 4,
                                                                       "cluster1": 2}


async def test_bad_override_path_fails_only_that_cluster(fleet: Fleet) -> None:
    fleet.apply("host", {
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "OverridePolicy",
        "metadata": {"name": "bad-path", "namespace": "kdemo"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                        "name": "bad"}],
                 "overrideRules": [{"targetCluster": {"clusterNames": ["cluster1"]},
                                    "overriders": {"plaintext": [
                                        {"path": "/spec/template/spec/containers/7/image",
                                         "operator": "replace", "value": "x"}]}}]}})
    fleet.apply("host", deployment("bad", "kdemo", 1, "nginx:1.17"))
    fleet.apply("host", policy("bad", "kdemo", [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                 "name": "bad"}], ["cluster", "cluster1"]))

    async def failed() -> dict[str, Any] | None:
        report = annotation_report(await get(fleet, "host", "apps/v1", "Deployment", "bad",
                                             "kdemo"))
        cond = (report.get("conditions") or [{}])[0]
        return report if cond.get("status") == "False" and any(
            c.get("applied") for c in report.get("clusters", [])) else None

    report = await until(failed, "Propagated=False naming cluster1 and the path")
    message = report["conditions"][0]["message"]
    assert "cluster1" in message and "/spec/template/spec/containers/7" in message, message
    assert "cluster:" not in message
    assert await get(fleet, "cluster", "apps/v1", "Deployment", "bad", "kdemo") is not None
    assert await get(fleet, "cluster1", "apps/v1", "Deployment", "bad", "kdemo") is None


async def test_conflict_reported_then_overwrite_takes_over(fleet: Fleet) -> None:
    fleet.kubectl("cluster1", "create", "ns", "kdemo", check=False)
    fleet.apply("cluster1", {"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "settings", "namespace": "kdemo"},
                             "data": {"owner": "someone-else"}})
    fleet.apply("host", {"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "settings", "namespace": "kdemo"},
                         "data": {"owner": "tether"}})
    selectors = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "settings"}]
    fleet.apply("host", policy("settings", "kdemo", selectors, ["cluster", "cluster1"]))

    async def conflict() -> dict[str, Any] | None:
        report = annotation_report(await get(fleet, "host", "v1", "ConfigMap", "settings",
                                             "kdemo"))
        by = {c["name"]: c for c in report.get("clusters", [])}
        return report if by.get("cluster1", {}).get("reason") == "Conflict" and by.get(
            "cluster", {}).get("applied") else None

    report = await until(conflict, "conflict reported for cluster1")
    assert "ConfigMap kdemo/settings already exists" in report["conditions"][0]["message"]
    kept = await get(fleet, "cluster1", "v1", "ConfigMap", "settings", "kdemo")
    assert kept is not None and kept["data"] == {"owner": "someone-else"}
    fleet.apply("host", policy("settings", "kdemo", selectors, ["cluster", "cluster1"],
                               conflictResolution="Overwrite"))

    async def taken_over() -> bool:
        obj = await get(fleet, "cluster1", "v1", "ConfigMap", "settings", "kdemo")
        return bool(obj and obj["data"] == {"owner": "tether"})

    await until(taken_over, "Overwrite takes the object over")
    # a cluster leaving the placement loses its object
    fleet.apply("host", policy("settings", "kdemo", selectors, ["cluster"],
                               conflictResolution="Overwrite"))

    async def gone() -> bool:
        return await get(fleet, "cluster1", "v1", "ConfigMap", "settings", "kdemo") is None

    await until(gone, "object removed from the cluster that left the placement")
    assert await get(fleet, "cluster", "v1", "ConfigMap", "settings", "kdemo") is not None


async def test_member_edit_of_owned_field_is_reverted(fleet: Fleet) -> None:
    fleet.kubectl("cluster", "-n", "kdemo", "patch", "deployment", "web", "--type", "merge",
                  "-p", json.dumps({"spec": {"template": {"spec": {"containers": [
                      {"name": "web", "image": "evil:latest"}]}}}}))

    async def reverted() -> bool:
        obj = await get(fleet, "cluster", "apps/v1", "Deployment", "web", "kdemo")
        return bool(obj and obj["spec"]["template"]["spec"]["containers"][0]["image"]
                    == "registry.example.com/nginx:1.17")

    await until(reverted, "image reverted in the member")


async def test_deleting_the_template_removes_member_objects(fleet: Fleet) -> None:
    fleet.kubectl("host", "-n", "kdemo", "delete", "deployment", "bad", "--wait=false")

    async def gone() -> bool:
        member = await get(fleet, "cluster", "apps/v1", "Deployment", "bad", "kdemo")
        template = await get(fleet, "host", "apps/v1", "Deployment", "bad", "kdemo")
        return member is None and template is None

    await until(gone, "template and member object deleted")


async def test_hub_restart_mid_propagation_finishes_without_duplicates(fleet: Fleet) -> None:
    took = fleet.stop_hub()
    assert took < 10, took
    selectors = [{"apiVersion": "v1", "kind": "ConfigMap", "labelSelector": {
        "matchLabels": {"batch": "restart"}}}]
    fleet.apply("host", policy("restart", "kdemo", selectors, ["cluster", "cluster1"]))
    names = [f"restart-{i}" for i in range(10)]
    for name in names:
        fleet.apply("host", {"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": name, "namespace": "kdemo",
                                          "labels": {"batch": "restart"}},
                             "data": {"n": name}})
    fleet.start_hub()
    await asyncio.sleep(0.8)  # part of the work is done
    fleet.stop_hub()
    fleet.start_hub()

    async def all_there() -> bool:
        for context in ("cluster", "cluster1"):
            async with fleet.client(context) as member:
                listed = await member.list_objects("v1", "ConfigMap", "kdemo", "batch=restart")
            if len(listed) != len(names):
                return False
        return True

    await until(all_there, "every ConfigMap propagated after the restart")
    async with fleet.client("host") as host:
        works = await host.list_objects(WORK, "Work", None, "work.tether.io/source-kind=ConfigMap")
    restart_works = [w for w in works if w["metadata"]["name"].startswith("configmap-kdemo-restart")]
    assert len(restart_works) == 2 * len(names), [w["metadata"]["name"] for w in restart_works]
    async with fleet.client("cluster") as member:
        listed = await member.list_objects("v1", "ConfigMap", "kdemo", "batch=restart")
    assert sorted(c["metadata"]["name"] for c in listed) == names
    for obj in listed:
        managers = [(m["manager"], m["operation"]) for m in obj["metadata"]["managedFields"]]
        assert managers == [("tether", "Apply")], managers


async def test_rotated_credentials_are_taken_up_once_by_concurrent_workers(fleet: Fleet) -> None:
    """A new credentials Secret while many Works of the member are in flight: every executor
    worker must end up on the one new client (none closing another's)."""
    log = fleet.hub_log(fleet.hub_runs)
    log_offset = len(log.read_bytes())
    async with fleet.client("host") as host:
        cluster = await host.get("cluster.tether.io/v1alpha1", "Cluster", "cluster1")
        ref = cluster["spec"]["secretRef"]
        fleet.apply("host", policy("rotate", "kdemo", [{"apiVersion": "v1", "kind": "ConfigMap",
                                                        "labelSelector": {"matchLabels": {"batch": "rotate"}}}],
                                   ["cluster", "cluster1"]))
        rotated = await host.patch("v1", "Secret", ref["name"], {"metadata": {"annotations": {
            "tether.io/rotated-at": str(time.time())}}}, namespace=ref.get("namespace"))
        names = [f"rotate-{i}" for i in range(16)]
        await asyncio.gather(*(host.create({"apiVersion": "v1", "kind": "ConfigMap",
                                            "metadata": {"name": n, "namespace": "kdemo",
                                                         "labels": {"batch": "rotate"}}},
                                           field_manager="test") for n in names))

    async def all_there() -> bool:
        async with fleet.client("cluster1") as member:
            listed = await member.list_objects("v1", "ConfigMap", "kdemo", "batch=rotate")
        return len(listed) == len(names)

    await until(all_there, "every ConfigMap in cluster1 after the rotation")
    since = log.read_bytes()[log_offset:].decode(errors="replace")
    version = f"(credentials Secret version {rotated['metadata']['resourceVersion']})"
    new_clients = [line for line in since.splitlines()
                   if "cluster cluster1: new client" in line and line.endswith(version)]
    assert len(new_clients) == 1, since


async def test_unjoin_leaves_no_tether_object_in_member(fleet: Fleet) -> None:
    ok(tether("unjoin", "cluster1", "--host-kubeconfig", str(fleet.kubeconfig),
              "--host-context", "host"))
    await asyncio.sleep(1.0)  # a hub that raced the unjoin would have re-created something now
    left = fleet.kubectl("cluster1", "get", "deployments,configmaps,namespaces,services", "-A",
                         "-l", MANAGED, "-o", "name")
    assert left.stdout.strip() == "", left.stdout
    # the hub keeps working for the remaining member, and says where cluster1 went
    status = ok(tether("status", "deploy/web", "-n", "kdemo", "--kubeconfig",
                       str(fleet.kubeconfig), "--context", "host"))
    rows = {line.split()[0]: line.split() for line in status.splitlines()[2:]}
    assert rows["cluster"][1] == "yes", status


async def test_metrics_and_clean_logs(fleet: Fleet) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{fleet.hub_port}") as http:
        text = (await http.get("/metrics")).text
    assert 'tether_reconcile_total{controller="work-executor"}' in text
    assert 'tether_reconcile_total{controller="karmada-sync"}' in text
    assert 'tether_propagation_latency_seconds_count{dialect="karmada"}' in text
    # the only tracebacks allowed are the health controller racing unjoin's Cluster deletion
    for log in fleet.hub_tracebacks():
        for block in log.split("Traceback")[1:]:
            assert "health.py" in block and "NotFound" in block, block[:2000]
