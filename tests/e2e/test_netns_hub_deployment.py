"""The hub as a Deployment (issue 17, item 3 in a cluster): `deploy/hub` applied to a `--netns`
local cluster, whose kubelet runs tether's image as this install of tether, two replicas in pods
of their own (own network namespaces, own loopback), with the pod's ServiceAccount.

The cluster is its own member, as KubeFed's host cluster usually is (joined with `tether join`,
its API endpoint the in-cluster `kubernetes.default.svc`, which the pods reach). Proves: both
replicas become Ready, exactly one holds the Lease (named after its pod); a FederatedConfigMap
propagates; deleting the leader's pod hands the Lease to another replica (released on SIGTERM),
and propagation goes on, updating the member's ConfigMap in place (same uid).

Needs root and iproute2; run under `flock /tmp/tether-netns.lock` (fixed device names).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_util import kubectl_binary, poll, unique

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="netns mode creates network namespaces: needs root (CI runs as root)"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="netns mode needs `ip` (install iproute2)"),
]

ROOT = Path(__file__).resolve().parents[2]
HUB_TREE = ROOT / "deploy" / "hub"
NAME = "hubd"
NS = "tether-system"
WAIT_S = 180.0


def tether(*args: str, timeout: float = 180) -> str:
    result = subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


class Cluster:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.kubeconfig = data_dir / "kubeconfig"

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([kubectl_binary(), "--kubeconfig", str(self.kubeconfig), "--context",
                                 NAME, *args], input=input, capture_output=True, text=True, timeout=60)
        if check:
            assert result.returncode == 0, result.stdout + result.stderr
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)


def hub_objects() -> list[dict[str, Any]]:
    """`kubectl kustomize deploy/hub`, with `--dashboard-port` left out while `hub run` does
    not have it (the dashboard lands separately)."""
    built = subprocess.run([kubectl_binary(), "kustomize", str(HUB_TREE)], capture_output=True,
                           text=True, timeout=60, check=True).stdout
    objects = [o for o in yaml.safe_load_all(built) if o]
    help_text = subprocess.run([sys.executable, "-m", "tether", "hub", "run", "--help"],
                               capture_output=True, text=True, timeout=60).stdout
    for obj in objects:
        if obj["kind"] == "Deployment":
            args = obj["spec"]["template"]["spec"]["containers"][0]["args"]
            args.append("--verbose")  # INFO logs, for the failure report
            if "--dashboard-port" in args and "--dashboard-port" not in help_text:
                at = args.index("--dashboard-port")
                del args[at:at + 2]
    return objects


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if not HUB_TREE.is_dir():
        pytest.skip("deploy/hub is not in this tree yet")
    data_dir = tmp_path_factory.mktemp("hub-deploy")
    tether("local", "up", "--netns", "--data-dir", str(data_dir), "--name", NAME, "--nodes", "2")
    try:
        c = Cluster(data_dir)
        kubeconfig = str(c.kubeconfig)
        tether("hub", "install", "--kubeconfig", kubeconfig, "--context", NAME)
        certs = data_dir / "tunnel-certs"
        tether("certs", "--out", str(certs), "--server-ip", "127.0.0.1")
        agent = certs / "agent"
        c.kubectl("-n", NS, "create", "secret", "generic", "tether-hub-tunnel-certs",
                  f"--from-file=ca.crt={agent / 'issued' / 'ca.crt'}",
                  f"--from-file=proxy-frontend.crt={agent / 'issued' / 'proxy-frontend.crt'}",
                  f"--from-file=proxy-frontend.key={agent / 'private' / 'proxy-frontend.key'}")
        # the hub cluster is its own member, reached from the pods as any in-cluster client
        tether("join", "self", "--cluster-context", NAME, "--host-kubeconfig", kubeconfig,
               "--host-context", NAME)
        c.kubectl("patch", "clusters.cluster.tether.io", "self", "--type=merge", "-p",
                  json.dumps({"spec": {"apiEndpoint": "https://kubernetes.default.svc:443"}}))
        yield c
    finally:
        subprocess.run([sys.executable, "-m", "tether", "local", "down", "--data-dir",
                        str(data_dir)], capture_output=True, timeout=180)


def ready_pods(c: Cluster) -> dict[str, str]:
    """Ready hub pods: name -> uid."""
    pods = c.json("-n", NS, "get", "pods", "-l", "app.kubernetes.io/name=tether-hub")["items"]
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods
            if not p["metadata"].get("deletionTimestamp")
            and any(cond["type"] == "Ready" and cond["status"] == "True"
                    for cond in (p.get("status") or {}).get("conditions") or [])}


def holder(c: Cluster) -> str:
    got = c.kubectl("-n", NS, "get", "lease", "tether-hub", "-o", "jsonpath={.spec.holderIdentity}",
                    check=False)
    return got.stdout.strip() if got.returncode == 0 else ""


def holder_pod(c: Cluster) -> str | None:
    """The Ready pod whose replica holds the Lease (identities are `<pod>_<uuid>`)."""
    pod = holder(c).rpartition("_")[0]
    return pod if pod in ready_pods(c) else None


def readyz(c: Cluster, pod: str) -> str:
    return c.kubectl("get", "--raw", f"/api/v1/namespaces/{NS}/pods/{pod}:8080/proxy/readyz").stdout


def federated(namespace: str, greeting: str) -> str:
    return json.dumps({"apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedConfigMap",
                       "metadata": {"name": "greeting", "namespace": namespace},
                       "spec": {"template": {"data": {"greeting": greeting}},
                                "placement": {"clusters": [{"name": "self"}]}}})


def member_copy(c: Cluster, namespace: str, greeting: str) -> str | None:
    got = c.kubectl("-n", namespace, "get", "configmap", "greeting", "-o", "json", check=False)
    if got.returncode != 0:
        return None
    obj = json.loads(got.stdout)
    return str(obj["metadata"]["uid"]) if (obj.get("data") or {}).get("greeting") == greeting else None


def hub_logs(c: Cluster, word: str) -> str:
    """Every hub pod's log lines (also of pods gone) that mention `word`."""
    lines = []
    for log in sorted((c.data_dir / "clusters" / NAME / "pods").glob("*/logs/hub/*.log")):
        lines += [f"{log.parts[-4][:8]} {line[:400]}" for line in log.read_text().splitlines()
                  if word in line]
    return "\n".join(lines[-80:])


def diagnose(c: Cluster) -> str:
    pods = c.kubectl("-n", NS, "get", "pods", "-o", "wide", check=False).stdout
    logs = c.kubectl("-n", NS, "logs", "-l", "app.kubernetes.io/name=tether-hub", "--tail", "20",
                     "--prefix", check=False)
    events = c.kubectl("-n", NS, "get", "events", check=False).stdout
    return f"{pods}\n{logs.stdout}{logs.stderr}\n{events[-3000:]}"


def test_hub_deployment_elects_one_leader_and_hands_over(cluster: Cluster) -> None:
    c = cluster
    for obj in hub_objects():  # the tree, as `kubectl apply -k deploy/hub` would apply it
        c.kubectl("apply", "-f", "-", input=json.dumps(obj))
    try:
        poll(lambda: len(ready_pods(c)) == 2, timeout=WAIT_S, interval=1.0, what="two Ready hub pods")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{diagnose(c)}") from None
    leader = poll(lambda: holder_pod(c), timeout=WAIT_S, interval=0.5, what="a leader pod")
    # each replica's /readyz (through the API server's pod proxy) says who leads
    identity = holder(c)
    for pod in ready_pods(c):
        body = readyz(c, pod)
        if pod == leader:
            assert f"leader: {identity} (this replica)" in body, body
        else:
            assert f"leader: {identity} (this replica {pod}_" in body and "follows" in body, body

    namespace = unique("hubd")
    c.kubectl("create", "namespace", namespace)
    c.kubectl("apply", "-f", "-", input=json.dumps(  # KubeFed: the namespace is federated first
        {"apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedNamespace",
         "metadata": {"name": namespace, "namespace": namespace},
         "spec": {"placement": {"clusters": [{"name": "self"}]}}}))
    c.kubectl("apply", "-f", "-", input=federated(namespace, "hello"))
    uid = poll(lambda: member_copy(c, namespace, "hello"), timeout=WAIT_S, interval=0.5,
               what="the ConfigMap propagated by the leader pod")

    c.kubectl("-n", NS, "delete", "pod", leader, "--wait=false")
    successor = poll(lambda: (p := holder_pod(c)) is not None and p != leader and p,
                     timeout=WAIT_S, interval=0.5, what="another replica leading")
    assert successor != leader
    assert f"leader: {holder(c)} (this replica)" in readyz(c, successor)
    c.kubectl("apply", "-f", "-", input=federated(namespace, "hello again"))
    again = poll(lambda: member_copy(c, namespace, "hello again"), timeout=WAIT_S, interval=0.5,
                 what="the update propagated by the new leader")
    assert again == uid, hub_logs(c, namespace)
    poll(lambda: len(ready_pods(c)) == 2, timeout=WAIT_S, interval=1.0,
         what="the Deployment back at two Ready pods")
