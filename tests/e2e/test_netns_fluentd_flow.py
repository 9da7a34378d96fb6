"""Kube-Semaphore's fluentd example end to end in `--netns` mode, with the real kubectl.

Clusters `aws` and `gcp` (`tether local up --netns --nodes 1`). In `aws`, the repository's
`examples/connect/fluentd.yaml` (Service `sys-log/fluentd`, ports 8888 and 8889, labelled for the
mirror); in `gcp`, `examples/connect/forwarder.yaml` (the `forwarder` DaemonSet labelled
`policy.semaphore.uw.io/name=forwarder`) and one pod without that label. Then, all as a user would:

- `tether mirror` with the unchanged semaphore-service-mirror example config makes
  `sys-semaphore/aws-sys-log-73736d-fluentd` in `gcp`;
- `gcp`'s `kube-system/coredns` Corefile gets Semaphore's documented `cluster.aws` stanza, so pods
  resolve `fluentd.sys-log.svc.cluster.aws` to the mirror's ClusterIP;
- `tether policy-sets` keeps the GlobalNetworkSet `gcp-sys-log-forwarder` in `aws`;
- `tether mesh local --clusters aws,gcp` meshes the nodes with WireGuard;
- `examples/connect/allow-to-fluentd.yaml`, Kube-Semaphore's Calico policy as written, is applied
  in `aws`.

Proves: before the policy both pods reach fluentd by name (so a later refusal is the policy's
doing, not the network's); with it, the forwarder's request to port 8889 is answered, the
unlabelled pod's is refused, and the forwarder's to port 8888 is refused.

Root, iproute2, nft, wireguard-go (or the kernel module) and wireguard-tools needed; run under
`flock /tmp/tether-netns.lock`. Traffic stays in the namespaces the test creates.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import e2e_util
import pytest

import semaphore_dns

pytestmark = [*e2e_util.needs_netns("nft", "wg"), e2e_util.needs_wireguard()]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "connect"
CONFIG = EXAMPLES / "semaphore-service-mirror.json"
MIRROR = semaphore_dns.SEMAPHORE_MIRROR
NAME = "fluentd.sys-log.svc.cluster.aws"
WAIT_S = 120.0
# Run in a pod's own network namespace: resolve through the pod's resolv.conf, then one HTTP GET.
SEND = """
import socket, sys
try:
    address = socket.getaddrinfo(sys.argv[1], int(sys.argv[2]), socket.AF_INET, socket.SOCK_STREAM)[0][4]
    s = socket.create_connection(address, timeout=4)
    s.sendall(b"GET / HTTP/1.0\\r\\nHost: fluentd\\r\\n\\r\\n")
    reply = b""
    while chunk := s.recv(4096):
        reply += chunk
    print("answered", address[0], reply.decode(errors="replace").rsplit("\\r\\n", 1)[-1].strip())
except OSError as exc:
    print("refused", type(exc).__name__, exc)
"""


run = e2e_util.run
tether = e2e_util.tether_cli


class Flow(e2e_util.KubectlFleet):
    def __init__(self, data_dir: Path, work: Path, cache: Path) -> None:
        super().__init__(data_dir, cache)
        self.work = work
        self.index: dict[str, int] = {}
        self.processes: list[e2e_util.Collected] = []

    def start(self, *args: str, ready: str | None = None) -> None:
        process = e2e_util.Collected([sys.executable, "-m", "tether", *args], merge_stderr=True, cwd=self.work,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.processes.append(process)
        if ready is not None:
            process.wait_for_line(lambda line: ready in line, timeout=WAIT_S)

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            if process.running():
                process.proc.send_signal(signal.SIGTERM)
            try:
                process.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.stop()
        self.processes.clear()

    def running_pods(self, cluster: str, *selector: str) -> dict[str, dict[str, Any]]:
        pods = self.json(cluster, "get", "pods", "-n", "sys-log", *selector)["items"]
        return {p["metadata"]["name"]: p for p in pods
                if (p.get("status") or {}).get("phase") == "Running" and (p.get("status") or {}).get("podIP")
                and not p["metadata"].get("deletionTimestamp")}

    def pod_namespace(self, cluster: str, pod: dict[str, Any]) -> str:
        from tether.local.netns import pod_namespace

        return pod_namespace(self.index[cluster], str(pod["metadata"]["uid"]))

    def send(self, pod: dict[str, Any], port: int) -> str:
        """`forward`'s view: resolve the Semaphore name in `gcp`'s pod and send it one request."""
        result = run("ip", "netns", "exec", self.pod_namespace("gcp", pod), sys.executable, "-c", SEND, NAME,
                     str(port), check=False)
        return (result.stdout.strip() or result.stderr.strip()).splitlines()[-1]


@pytest.fixture(scope="module")
def flow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flow]:
    data_dir = tmp_path_factory.mktemp("netns-fluentd")
    f = Flow(data_dir, tmp_path_factory.mktemp("fluentd-work"), tmp_path_factory.mktemp("kubecache-fluentd"))
    with e2e_util.netns_clusters(data_dir, ("aws", "gcp"), meshed=True) as index:
        f.index.update(index)
        try:
            for name in ("aws", "gcp"):
                flat = f.kubectl(name, "config", "view", "--minify", "--flatten", "--context", name)
                (f.work / f"{name}.kubeconfig").write_text(flat)
            shutil.copyfile(CONFIG, f.work / CONFIG.name)
            yield f
        finally:
            f.stop_all()
            for process in f.processes:
                print("\n".join(process.snapshot()[-30:]))


def test_forwarder_reaches_fluentd_by_name_and_only_it_passes_the_policy(flow: Flow) -> None:
    # the workloads, from the repository's manifests
    flow.kubectl("aws", "apply", "-f", str(EXAMPLES / "fluentd.yaml"))
    flow.kubectl("gcp", "apply", "-f", str(EXAMPLES / "forwarder.yaml"))
    flow.kubectl("gcp", "create", "namespace", "sys-semaphore")
    flow.kubectl("gcp", "run", "outsider", "-n", "sys-log", "--image=fluent/fluent-bit",
                 "--labels=app.kubernetes.io/name=outsider")
    flow.kubectl("aws", "rollout", "status", "deploy/fluentd", "-n", "sys-log", "--timeout=120s")
    fluentd_ips = {p["status"]["podIP"] for p in flow.running_pods("aws", "-l", "app.kubernetes.io/name=fluentd").values()}
    assert len(fluentd_ips) == 3

    # the controllers, as a user starts them
    assert (flow.work / CONFIG.name).read_bytes() == CONFIG.read_bytes()  # the example, unchanged
    flow.start("mirror", "-config", CONFIG.name, "-listen-address", "127.0.0.1:0", ready="/healthz /metrics on")
    flow.start("policy-sets", "-target-cluster-name", "gcp", "-target-kube-config", "gcp.kubeconfig",
               "-local-kube-config", "aws.kubeconfig", "-listen-address", "127.0.0.1:0",
               ready="/healthz /metrics on")
    flow.start("mesh", "local", "--data-dir", str(flow.data_dir), "--clusters", "aws,gcp", "-v")
    corefile = flow.json("gcp", "get", "configmap", "coredns", "-n", "kube-system")
    corefile["data"]["Corefile"] = semaphore_dns.SEMAPHORE_STANZA + corefile["data"]["Corefile"]
    corefile["metadata"].pop("resourceVersion", None)
    flow.kubectl("gcp", "replace", "-f", "-", input=json.dumps(corefile))

    # the mirror in gcp holds aws's pod IPs; the forwarders' set in aws holds the forwarder's /32
    def mirror_ips() -> set[str]:
        slices = flow.json("gcp", "get", "endpointslices", "-n", "sys-semaphore", "-l",
                           f"kubernetes.io/service-name={MIRROR}")["items"]
        return {a for s in slices for e in s.get("endpoints") or [] for a in e["addresses"]}

    e2e_util.poll(lambda: mirror_ips() == fluentd_ips, timeout=WAIT_S, interval=0.5, what="the mirror's endpoints")
    mirror_ip = flow.json("gcp", "get", "service", MIRROR, "-n", "sys-semaphore")["spec"]["clusterIP"]
    forwarder = e2e_util.poll(lambda: next(iter(flow.running_pods(
        "gcp", "-l", "policy.semaphore.uw.io/name=forwarder").values()), None), timeout=WAIT_S, what="a forwarder pod")
    outsider = e2e_util.poll(lambda: flow.running_pods("gcp").get("outsider"), timeout=WAIT_S, what="the outsider pod")

    def nets() -> list[str] | None:
        found = flow.kubectl("aws", "get", "globalnetworksets.crd.projectcalico.org", "gcp-sys-log-forwarder",
                             "-o", "json", check=False)
        return json.loads(found)["spec"]["nets"] if found else None

    e2e_util.poll(lambda: nets() == [f"{forwarder['status']['podIP']}/32"], timeout=WAIT_S, interval=0.5,
                  what="the GlobalNetworkSet gcp-sys-log-forwarder in aws")

    # before the policy: both pods reach fluentd by the Semaphore name, through the mirror and the mesh
    for pod in (forwarder, outsider):
        answer = e2e_util.poll(lambda p=pod: (r := flow.send(p, 8889)).startswith("answered") and r,
                               timeout=WAIT_S, interval=1.0, what=f"{pod['metadata']['name']} reaching fluentd")
        _, address, body = answer.split(" ", 2)
        assert address == mirror_ip  # resolved to the mirror's ClusterIP
        assert body.startswith("fluentd-") and body.endswith(":8889")  # answered by one of aws's pods
    assert flow.send(forwarder, 8888).startswith("answered")

    # Kube-Semaphore's Calico policy, as written
    applied = flow.kubectl("aws", "apply", "-n", "sys-log", "-f", str(EXAMPLES / "allow-to-fluentd.yaml"))
    assert "networkpolicy.crd.projectcalico.org/allow-to-fluentd created" in applied
    e2e_util.poll(lambda: flow.send(outsider, 8889).startswith("refused"), timeout=WAIT_S, interval=1.0,
                  what="the unlabelled pod refused")
    for _ in range(3):  # every fluentd pod's rule is in place, whichever the ClusterIP picks
        answer = flow.send(forwarder, 8889)
        assert answer.startswith(f"answered {mirror_ip} fluentd-"), answer
        assert flow.send(forwarder, 8888).startswith("refused"), "port 8888 is not allowed"
        assert flow.send(outsider, 8889).startswith("refused")
