"""Connect end to end, rootless: clusters `aws` and `gcp`, the real kubectl.

The service mirror:

Cluster `aws` runs Service `fluentd` in `sys-log` (ports 8888 and 8889, labelled for mirroring)
backed by real pods (a small Python server answering on both ports of its pod IP). `tether
mirror` runs with the repository's semaphore-service-mirror configuration, unchanged, next to
a kubeconfig per cluster. In `gcp` it makes `sys-semaphore/aws-sys-log-73736d-fluentd` whose
EndpointSlices and Endpoints follow the remote pods, and whose ClusterIP (the local userspace
proxy) reaches them from the host.

The policy sets: pods in `gcp` labelled `policy.semaphore.uw.io/name=forwarder` become the
GlobalNetworkSet `gcp-sys-log-forwarder` in `aws` (written through projectcalico.org/v3, read
through crd.projectcalico.org/v1), and Kube-Semaphore's Calico NetworkPolicy `allow-to-fluentd` is
accepted as written.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2e_util import Collected, poll, root_conftest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "connect"
EXAMPLE = EXAMPLES / "semaphore-service-mirror.json"
MIRROR = "aws-sys-log-73736d-fluentd"
MIRROR_LABEL = "mirror.semaphore.uw.io/mirror-service"

def service(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "sys-log", "labels": {MIRROR_LABEL: "true"}},
            "spec": {"selector": {"app.kubernetes.io/name": "fluentd"}, "type": "NodePort",
                     "ports": [{"name": "forward", "port": 8888, "targetPort": "forward"},
                               {"name": "http", "port": 8889, "targetPort": "http"}]}}


@dataclass
class World:
    clusters: Any
    work: Path

    def aws(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.clusters.kubectl(*args, context="aws", **kw)  # type: ignore[no-any-return]

    def gcp(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.clusters.kubectl(*args, context="gcp", **kw)  # type: ignore[no-any-return]

    def gcp_json(self, *args: str) -> Any:
        return json.loads(self.gcp(*args, "-o", "json").stdout)

    def aws_json(self, *args: str) -> Any:
        return json.loads(self.aws(*args, "-o", "json").stdout)

    def apply(self, context: str, *objs: dict[str, Any]) -> None:
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})
        self.clusters.kubectl("apply", "-f", "-", context=context, input=body)

    def start_mirror(self, config: Path | None = None, *extra: str) -> tuple[Collected, int]:
        process = Collected([sys.executable, "-m", "tether", "mirror", "-config", str(config or self.work / EXAMPLE.name),
                             "-listen-address", "127.0.0.1:0", *extra], merge_stderr=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, cwd=self.work)
        line = process.wait_for_line(lambda text: "/healthz /metrics on http://" in text, timeout=60)
        return process, int(line.rsplit(":", 1)[1])

    def pod_ips(self) -> set[str]:
        pods = self.aws_json("get", "pods", "-n", "sys-log", "-l", "app.kubernetes.io/name=fluentd")["items"]
        return {p["status"]["podIP"] for p in pods if not p["metadata"].get("deletionTimestamp")
                and any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in p["status"].get("conditions") or [])}

    def mirror_slices(self, name: str = MIRROR, namespace: str = "sys-semaphore") -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.gcp_json("get", "endpointslices", "-n", namespace, "-l",
                                                    f"kubernetes.io/service-name={name}")["items"]
        return items

    def mirror_ips(self, name: str = MIRROR, namespace: str = "sys-semaphore", *, ready: bool = True) -> set[str]:
        return {a for s in self.mirror_slices(name, namespace) for e in s.get("endpoints") or []
                if bool(e.get("conditions", {}).get("ready", True)) == ready for a in e["addresses"]}

    def endpoints_ips(self, name: str = MIRROR, namespace: str = "sys-semaphore") -> set[str]:
        found = self.gcp("get", "endpoints", name, "-n", namespace, "-o", "json", check=False)
        if found.returncode != 0:
            return set()
        return {a["ip"] for s in json.loads(found.stdout).get("subsets") or [] for a in s.get("addresses") or []}

    def exists(self, kind: str, name: str, namespace: str = "sys-semaphore") -> bool:
        return self.gcp("get", kind, name, "-n", namespace, check=False).returncode == 0


def http(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def call(ip: str, port: int) -> str:
    with urllib.request.urlopen(f"http://{ip}:{port}/", timeout=5) as response:
        return str(response.read().decode().strip())


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = root_conftest()
    data_dir = tmp_path_factory.mktemp("connect")
    clusters = root.start_clusters(data_dir, ["aws", "gcp"], tmp_path_factory.mktemp("kubecache-connect"))
    work = tmp_path_factory.mktemp("mirror-work")
    for name in ("aws", "gcp"):
        flat = clusters.kubectl("config", "view", "--minify", "--flatten", "--context", name, context=name).stdout
        (work / f"{name}.kubeconfig").write_text(flat)
    shutil.copyfile(EXAMPLE, work / EXAMPLE.name)
    world = World(clusters, work)
    world.gcp("create", "namespace", "sys-semaphore")
    world.aws("apply", "-f", str(EXAMPLES / "fluentd.yaml"))
    world.aws("rollout", "status", "deploy/fluentd", "-n", "sys-log", "--timeout=90s", timeout=120)
    try:
        yield world
    finally:
        root.tether("local", "down", "--data-dir", str(data_dir))


def test_service_mirror_end_to_end(world: World) -> None:
    assert (world.work / EXAMPLE.name).read_bytes() == EXAMPLE.read_bytes()  # unchanged
    world.apply("aws", service("extra"))
    mirror, port = world.start_mirror()
    try:
        # the mirror Service: Semaphore's name, labels, ports (no nodePort), no selector
        poll(lambda: world.exists("service", MIRROR), timeout=60, what="the mirror Service")
        svc = world.gcp_json("get", "service", MIRROR, "-n", "sys-semaphore")
        assert svc["metadata"]["labels"] == {"mirrored-svc": "true", "mirror-svc-prefix-sync": "aws"}
        assert svc["spec"]["type"] == "ClusterIP" and "selector" not in svc["spec"]
        assert [(p["name"], p["port"], p["protocol"]) for p in svc["spec"]["ports"]] == [
            ("forward", 8888, "TCP"), ("http", 8889, "TCP")]
        assert all("nodePort" not in p for p in svc["spec"]["ports"])
        listed = world.gcp("get", "service", "-n", "sys-semaphore").stdout
        assert MIRROR in listed and "8888/TCP,8889/TCP" in listed

        # endpoints: the remote pod IPs, as slices and as Endpoints
        pods = world.pod_ips()
        assert len(pods) == 3
        poll(lambda: world.mirror_ips() == pods and world.endpoints_ips() == pods, timeout=60,
             what=f"mirror endpoints {pods}")
        (slice_,) = world.mirror_slices()
        assert slice_["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == "semaphore-service-mirror"
        assert sorted(p["port"] for p in slice_["ports"]) == [8888, 8889]
        described = world.gcp("describe", "service", MIRROR, "-n", "sys-semaphore").stdout
        assert "Endpoints:" in described

        # the ClusterIP carries a connection from the host to a remote pod
        cluster_ip = svc["spec"]["clusterIP"]
        answer = poll(lambda: _try_call(cluster_ip, 8889), timeout=30, what="a connection through the ClusterIP")
        assert answer.startswith("fluentd-") and answer.endswith(":8889")

        # health and metrics
        status, body = http(port, "/healthz")
        assert status == 200, body
        status, metrics = http(port, "/metrics")
        assert status == 200
        assert 'semaphore_service_mirror_kube_watcher_objects{kind="Service",runner="mirror-aws",' \
               'watcher="aws-serviceWatcher"} 2.0' in metrics
        assert 'tether_mirror_endpoints_state{cluster="aws",state="fresh"} 1.0' in metrics

        # a remote pod deleted: its IP leaves the mirror, its replacement's IP arrives
        victim_ip = sorted(pods)[0]
        victim = next(p["metadata"]["name"] for p in world.aws_json("get", "pods", "-n", "sys-log")["items"]
                      if p["status"].get("podIP") == victim_ip)
        world.aws("delete", "pod", victim, "-n", "sys-log", "--wait=false")
        poll(lambda: victim_ip not in world.mirror_ips() | world.endpoints_ips(), timeout=60,
             what=f"{victim_ip} to leave the mirror")
        poll(lambda: len(world.pod_ips()) == 3 and world.mirror_ips() == world.pod_ips()
             and world.endpoints_ips() == world.pod_ips(), timeout=90, what="the replacement pod in the mirror")
        assert world.exists("service", "aws-sys-log-73736d-extra")
    finally:
        mirror.stop()

    # restart: nothing duplicated, stale mirrors removed
    uid = world.gcp_json("get", "service", MIRROR, "-n", "sys-semaphore")["metadata"]["uid"]
    slice_names = {s["metadata"]["name"] for s in world.mirror_slices()}
    world.aws("delete", "service", "extra", "-n", "sys-log")
    ghost = {"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": "aws-sys-log-73736d-ghost", "namespace": "sys-semaphore",
                          "labels": {"mirrored-svc": "true", "mirror-svc-prefix-sync": "aws"}},
             "spec": {"ports": [{"port": 80}]}}
    world.apply("gcp", ghost)  # what an earlier mirror (upstream's: no annotations) left behind
    mirror, port = world.start_mirror()
    try:
        poll(lambda: not world.exists("service", "aws-sys-log-73736d-extra")
             and not world.exists("service", "aws-sys-log-73736d-ghost")
             and not world.exists("endpoints", "aws-sys-log-73736d-extra"), timeout=60,
             what="stale mirrors removed at start")
        poll(lambda: http(port, "/healthz")[0] == 200, timeout=30, what="healthy after restart")
        svc = world.gcp_json("get", "service", MIRROR, "-n", "sys-semaphore")
        assert svc["metadata"]["uid"] == uid  # kept, not recreated
        assert {s["metadata"]["name"] for s in world.mirror_slices()} == slice_names
        mirrors = [s["metadata"]["name"] for s in world.gcp_json("get", "services", "-n", "sys-semaphore")["items"]]
        assert mirrors == [MIRROR]

        # headless <-> ClusterIP: the mirror is recreated as headless
        world.apply("aws", {**service("solo"), "spec": {**service("solo")["spec"], "type": "ClusterIP",
                                                         "clusterIP": "None"}})
        poll(lambda: world.exists("service", "aws-sys-log-73736d-solo"), timeout=60, what="the solo mirror")
        assert world.gcp_json("get", "service", "aws-sys-log-73736d-solo", "-n", "sys-semaphore")["spec"][
            "clusterIP"] == "None"

        # the remote Service deleted: its mirror goes
        world.aws("delete", "service", "solo", "-n", "sys-log")
        poll(lambda: not world.exists("service", "aws-sys-log-73736d-solo")
             and not world.exists("endpoints", "aws-sys-log-73736d-solo")
             and not world.mirror_slices("aws-sys-log-73736d-solo"), timeout=60, what="the solo mirror removed")
    finally:
        mirror.stop()


def _try_call(ip: str, port: int) -> str | None:
    try:
        return call(ip, port)
    except OSError:
        return None


class Forwarder:
    """A TCP forwarder to a cluster's API server that the test can cut, as a network would."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.open = threading.Event()
        self.open.set()
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            if not self.open.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)  # watches are quiet for long stretches
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        self.open.clear()
        with self.lock:
            for conn in self.conns:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                conn.close()
            self.conns.clear()

    def restore(self) -> None:
        self.open.set()

    def close(self) -> None:
        self.cut()
        self.sock.close()


@pytest.mark.parametrize("policy", ["withdraw", "not-ready"])
def test_stale_endpoints_policy(world: World, policy: str) -> None:
    """The remote's API is cut: after `staleAfter` the mirror withdraws its endpoints (or marks
    them not ready), /healthz and the metrics say so; when it answers again they come back."""
    namespace = f"stale-{policy}"
    world.gcp("create", "namespace", namespace)
    server = world.clusters.servers["aws"]
    host, port = server.removeprefix("https://").rsplit(":", 1)
    forwarder = Forwarder((host, int(port)))
    kubeconfig = (world.work / "aws.kubeconfig").read_text().replace(server, f"https://127.0.0.1:{forwarder.port}")
    (world.work / f"aws-{policy}.kubeconfig").write_text(kubeconfig)
    config = json.loads(EXAMPLE.read_text())
    config["global"]["mirrorNamespace"] = namespace
    config["remoteClusters"][0].update(kubeConfigPath=f"aws-{policy}.kubeconfig", stalePolicy=policy,
                                       staleAfter="2s")
    path = world.work / f"stale-{policy}.json"
    path.write_text(json.dumps(config))
    mirror, http_port = world.start_mirror(path)
    try:
        poll(lambda: world.mirror_ips(namespace=namespace) == world.pod_ips(), timeout=60, what="mirrored endpoints")
        assert http(http_port, "/healthz")[0] == 200
        forwarder.cut()
        poll(lambda: http(http_port, "/healthz")[0] == 503, timeout=60, what="/healthz to report the remote down")
        if policy == "withdraw":
            poll(lambda: not world.mirror_slices(namespace=namespace) and not world.endpoints_ips(namespace=namespace),
                 timeout=60, what="endpoints withdrawn")
            assert world.exists("service", MIRROR, namespace)  # the Service (and its ClusterIP) stays
            state = "withdrawn"
        else:
            poll(lambda: not world.mirror_ips(namespace=namespace)
                 and world.mirror_ips(namespace=namespace, ready=False) == world.pod_ips(),
                 timeout=60, what="endpoints marked not ready")
            state = "not-ready"
        metrics = http(http_port, "/metrics")[1]
        assert f'tether_mirror_endpoints_state{{cluster="aws",state="{state}"}} 1.0' in metrics
        assert 'tether_mirror_remote_up{cluster="aws"} 0.0' in metrics
        forwarder.restore()
        poll(lambda: world.mirror_ips(namespace=namespace) == world.pod_ips(), timeout=90,
             what="endpoints back once the remote answers")
        poll(lambda: http(http_port, "/healthz")[0] == 200, timeout=60, what="healthy again")
    finally:
        mirror.stop()
        forwarder.close()
        print("\n".join(mirror.snapshot()[-60:]))  # shown when the test fails


def test_a_config_error_names_the_key_and_exits_non_zero(tmp_path: Path) -> None:
    config = json.loads(EXAMPLE.read_text())
    del config["remoteClusters"][0]["servicePrefix"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(config))
    result = subprocess.run([sys.executable, "-m", "tether", "mirror", "-config", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "remoteClusters[0].servicePrefix" in result.stderr


def test_config_is_required(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "tether", "mirror"], capture_output=True, text=True, timeout=60,
                            env={k: v for k, v in os.environ.items() if k != "SSM_CONFIG"})
    assert result.returncode != 0 and "-config is required" in result.stderr


def test_sigterm_stops_the_mirror(world: World) -> None:
    mirror, _ = world.start_mirror()
    mirror.proc.send_signal(signal.SIGTERM)
    assert mirror.proc.wait(timeout=30) == 0


# policy sets ---------------------------------------------------------------------------------

ALLOW_TO_FLUENTD = (EXAMPLES / "allow-to-fluentd.yaml").read_text()  # Kube-Semaphore's Calico policy, as written
SET = "gcp-sys-log-forwarder"
SET_LABELS = {"managed-by": "semaphore-policy", "policy.semaphore.uw.io/cluster": "gcp",
              "policy.semaphore.uw.io/name": "forwarder", "policy.semaphore.uw.io/namespace": "sys-log"}


def forwarder(name: str, *, host_network: bool = False, labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "forwarder", "image": "example.com/forwarder"}]}
    if host_network:
        spec["hostNetwork"] = True
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "sys-log",
                         "labels": labels if labels is not None else {"policy.semaphore.uw.io/name": "forwarder"}},
            "spec": spec}


def set_nets(world: World, resource: str = "globalnetworksets.projectcalico.org") -> set[str] | None:
    found = world.aws("get", resource, SET, "-o", "json", check=False)
    if found.returncode != 0:
        return None
    return set(json.loads(found.stdout)["spec"]["nets"])


def test_policy_sets(world: World) -> None:
    world.gcp("create", "namespace", "sys-log")
    world.apply("gcp", forwarder("forwarder-a"), forwarder("forwarder-b"), forwarder("forwarder-host", host_network=True))

    def ips() -> dict[str, str]:
        pods = world.clusters.kubectl_json("get", "pods", "-n", "sys-log", context="gcp")["items"]
        return {p["metadata"]["name"]: p["status"].get("podIP", "") for p in pods}

    poll(lambda: all(ips().get(n) for n in ("forwarder-a", "forwarder-b")), timeout=60, what="forwarder pod IPs")
    process = Collected([sys.executable, "-m", "tether", "policy-sets", "-target-cluster-name", "gcp",
                         "-target-kube-config", "gcp.kubeconfig", "-local-kube-config", "aws.kubeconfig",
                         "-listen-address", "127.0.0.1:0"], merge_stderr=True, cwd=world.work,
                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = process.wait_for_line(lambda text: "/healthz /metrics on http://" in text, timeout=60)
        port = int(line.rsplit(":", 1)[1])
        a, b = ips()["forwarder-a"], ips()["forwarder-b"]
        poll(lambda: set_nets(world) == {f"{a}/32", f"{b}/32"}, timeout=60, what="the set with both pods")
        # read through v1 what was written through v3, with the four labels
        v1 = json.loads(world.aws("get", "globalnetworksets.crd.projectcalico.org", SET, "-o", "json").stdout)
        assert v1["apiVersion"] == "crd.projectcalico.org/v1"
        assert v1["metadata"]["labels"] == SET_LABELS
        described = world.aws("describe", "GlobalNetworkSet", SET).stdout
        assert "managed-by=semaphore-policy" in described and "policy.semaphore.uw.io/cluster=gcp" in described
        assert http(port, "/healthz")[0] == 200
        assert "tether_policy_sets_nets" in http(port, "/metrics")[1]

        # a pod whose label changes leaves the set; a deleted pod leaves the set
        world.gcp("label", "pod", "forwarder-a", "-n", "sys-log", "policy.semaphore.uw.io/name=other", "--overwrite")
        poll(lambda: set_nets(world) == {f"{b}/32"}, timeout=60, what="the relabelled pod out of the set")
        poll(lambda: set_nets(world, "globalnetworksets.crd.projectcalico.org") is not None
             and "gcp-sys-log-other" in world.aws("get", "globalnetworksets").stdout, timeout=60,
             what="the other set")
        world.gcp("delete", "pod", "forwarder-b", "-n", "sys-log", "--wait=false")
        poll(lambda: set_nets(world) is None, timeout=60, what="the emptied set deleted")
    finally:
        process.stop()
        print("\n".join(process.snapshot()[-40:]))


def test_sets_written_through_v1_read_through_v3_and_the_allow_to_fluentd_policy(world: World) -> None:
    body = {"apiVersion": "crd.projectcalico.org/v1", "kind": "GlobalNetworkSet",
            "metadata": {"name": "written-through-v1", "labels": SET_LABELS},
            "spec": {"nets": ["10.4.5.2/32", "fd00::1/128"]}}
    world.apply("aws", body)
    v3 = json.loads(world.aws("get", "globalnetworksets.projectcalico.org", "written-through-v1", "-o", "json").stdout)
    assert v3["apiVersion"] == "projectcalico.org/v3"
    assert v3["metadata"]["labels"] == SET_LABELS and v3["spec"]["nets"] == ["10.4.5.2/32", "fd00::1/128"]
    applied = world.clusters.kubectl("apply", "-n", "sys-log", "-f", "-", context="aws", input=ALLOW_TO_FLUENTD)
    assert "networkpolicy.crd.projectcalico.org/allow-to-fluentd created" in applied.stdout
    stored = json.loads(world.aws("get", "networkpolicies.projectcalico.org", "allow-to-fluentd", "-n", "sys-log",
                                  "-o", "json").stdout)
    assert stored["spec"]["ingress"][0]["source"]["namespaceSelector"] == "global()"
    assert stored["spec"]["ingress"][0]["destination"]["ports"] == [8889]
    bad = ALLOW_TO_FLUENTD.replace("action: Allow", "action: Accept")
    refused = world.clusters.kubectl("apply", "-n", "sys-log", "-f", "-", context="aws", input=bad, check=False)
    assert refused.returncode != 0 and "spec.ingress[0].action" in refused.stderr


def test_global_service_merges_both_clusters(world: World) -> None:
    """A Service with the global label in both clusters becomes `gl-sys-log-73736d-glob` in gcp
    with the endpoints of both: gcp's hinted for its zones, aws's in zone `remote`."""
    global_labels = {"mirror.semaphore.uw.io/global-service": "true",
                     "mirror.semaphore.uw.io/global-service-routing-strategy": "local-first"}

    def glob(selector: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "glob", "namespace": "sys-log", "labels": global_labels},
                "spec": {"selector": selector, "ports": [{"name": "http", "port": 8889}]}}

    world.gcp("create", "namespace", "sys-log", check=False)
    labels = {"app.kubernetes.io/name": "glob"}
    world.apply("gcp", {"apiVersion": "apps/v1", "kind": "Deployment",
                        "metadata": {"name": "glob", "namespace": "sys-log"},
                        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                                 "template": {"metadata": {"labels": labels},
                                              "spec": {"containers": [{"name": "glob",
                                                                       "image": "example.com/glob"}]}}}},
                glob(labels))
    world.apply("aws", glob({"app.kubernetes.io/name": "fluentd"}))
    mirror, _ = world.start_mirror()
    try:
        name = "gl-sys-log-73736d-glob"
        poll(lambda: world.exists("service", name), timeout=60, what="the global Service")

        def by_cluster() -> dict[str, list[dict[str, Any]]]:
            out: dict[str, list[dict[str, Any]]] = {}
            for item in world.mirror_slices(name):
                out.setdefault(item["metadata"]["labels"]["mirror-endpointslice-sync-name"], []).append(item)
            return out

        poll(lambda: {c: sum(len(s["endpoints"]) for s in slices) for c, slices in by_cluster().items()}
             == {"aws": 3, "gcp": 1}, timeout=60, what="endpoints of both clusters behind the global Service")
        svc = world.gcp_json("get", "service", name, "-n", "sys-semaphore")
        assert svc["metadata"]["labels"] == {"global-svc": "true"}
        assert svc["metadata"]["annotations"]["global-svc-clusters"] == "aws,gcp"
        assert svc["metadata"]["annotations"]["service.kubernetes.io/topology-aware-hints"] == "auto"
        slices = by_cluster()
        remote = slices["aws"][0]["endpoints"][0]
        assert remote["zone"] == "remote" and remote["hints"] == {"forZones": [{"name": "remote"}]}
        assert slices["gcp"][0]["endpoints"][0]["hints"] == {"forZones": [{"name": "local"}]}
        assert all(s["metadata"]["name"].startswith("gl-") for items in slices.values() for s in items)

        world.aws("delete", "service", "glob", "-n", "sys-log")
        poll(lambda: set(by_cluster()) == {"gcp"} and world.gcp_json("get", "service", name, "-n", "sys-semaphore")[
            "metadata"]["annotations"]["global-svc-clusters"] == "gcp", timeout=60, what="aws's part gone")
    finally:
        mirror.stop()
