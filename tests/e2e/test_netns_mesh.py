"""The WireGuard mesh (`tether mesh local`) between three `--netns` clusters.

Starts `a`, `b` and `c` with `tether local up --netns --nodes 1`, then `tether mesh local
--clusters a,b,c`, and shows:

- the mesh comes up: every node annotates itself per remote (semaphore-wireguard's
  `<remote>.wireguard.semaphore.uw.io/pubKey` and `/endpoint`) and peers with the other nodes;
- a pod of a (its pod IP as source) reaches a pod of b by pod IP, and only through the mesh: on
  the underlay link between the two clusters' routers tcpdump sees only UDP between node
  addresses on the mesh ports, never the pod's TCP, and the underlay filter dropped nothing;
- the hub (cluster a here) gets `MeshReady=True` on its Cluster `b`;
- a malformed annotation on a node of b is skipped, the good peer stays;
- a node added to b is peered by a's node without a restart, and its peer goes when it does;
- after a restart of the manager, with the interfaces gone, the public keys are the same;
- `--cleanup` leaves no interface, route, annotation, underlay link or filter table.

Root, iproute2, nft, wireguard-go (or the kernel module), wireguard-tools and tcpdump needed;
run under `flock /tmp/tether-netns.lock`. Traffic stays in the namespaces the test creates.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import e2e_util
import pytest

from tether.local.network import ClusterNetwork

pytestmark = [*e2e_util.needs_netns("nft", "wg", "tcpdump"), e2e_util.needs_wireguard()]

WAIT_S = 90.0
DOMAIN = "wireguard.semaphore.uw.io"
run = e2e_util.run


def poll(check: Any, *, timeout: float = WAIT_S, what: str = "condition") -> Any:
    return e2e_util.poll(check, timeout=timeout, interval=0.3, what=what)



class Mesh(e2e_util.KubectlFleet):
    def __init__(self, data_dir: Path, cache: Path) -> None:
        super().__init__(data_dir, cache)
        self.networks: dict[str, ClusterNetwork] = {}
        self.process: subprocess.Popen[str] | None = None

    def mesh(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tether", "mesh", "local", "--data-dir", str(self.data_dir),
                               "--clusters", "a,b,c", *args], capture_output=True, text=True, timeout=120)

    def start(self) -> None:
        with open(self.data_dir / "mesh.log", "a") as log:  # the child keeps its own copy of the fd
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tether", "mesh", "local", "--data-dir", str(self.data_dir), "--clusters",
                 "a,b,c", "-v", "--kubeconfig", str(self.data_dir / "kubeconfig"), "--context", "a"],
                stdout=subprocess.DEVNULL, stderr=log, text=True)

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)
            self.process = None

    def node_ns(self, cluster: str, slot: int = 0) -> str:
        return f"tether-{self.networks[cluster].index}-n{slot}"

    def router(self, cluster: str) -> str:
        return f"tether-{self.networks[cluster].index}"

    def mesh_links(self, namespace: str) -> list[str]:
        links = json.loads(run("ip", "-n", namespace, "-j", "link", "show").stdout)
        return [str(x["ifname"]) for x in links if str(x["ifname"]).startswith(("wg.", "wireguard."))]

    def peers(self, namespace: str) -> dict[str, str]:
        """public key -> allowed IPs of every peer of every mesh interface in `namespace`."""
        found: dict[str, str] = {}
        for link in self.mesh_links(namespace):
            for line in run("wg", "show", link, "allowed-ips").stdout.splitlines():
                key, _, ips = line.partition("\t")
                found[key] = ips
        return found

    def annotations(self, cluster: str, node: str) -> dict[str, str]:
        meta = self.json(cluster, "get", "node", node)["metadata"]
        return {k: v for k, v in (meta.get("annotations") or {}).items() if DOMAIN in k}


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    data_dir = tmp_path_factory.mktemp("netns-mesh")
    m = Mesh(data_dir, tmp_path_factory.mktemp("kubecache-mesh"))
    with e2e_util.netns_clusters(data_dir, ("a", "b", "c"), meshed=True) as index:
        try:
            m.networks.update({name: ClusterNetwork.netns(i) for name, i in index.items()})
            for name in ("a", "b"):
                m.kubectl(name, "create", "deployment", "web", "--image=nginx", "--port=80")
            hub = e2e_util.tether_cli("hub", "install", "--kubeconfig", str(data_dir / "kubeconfig"), "--context", "a")
            assert hub.returncode == 0, hub.stdout + hub.stderr
            m.kubectl("a", "apply", "-f", "-", input=json.dumps({
                "apiVersion": "cluster.tether.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "b"},
                "spec": {"syncMode": "Pull"}}))
            m.start()
            yield m
        finally:
            m.stop()


def web_pod_ip(m: Mesh, cluster: str) -> str:
    def ready() -> str | None:
        for pod in m.json(cluster, "get", "pods", "-l", "app=web")["items"]:
            if any(c.get("type") == "Ready" and c.get("status") == "True"
                   for c in (pod.get("status") or {}).get("conditions") or []):
                return str(pod["status"]["podIP"])
        return None

    found: str = poll(ready, what=f"a ready web pod in {cluster}")
    return found


def pod_ns(m: Mesh, cluster: str, pod_ip: str) -> str:
    """The network namespace of the pod with `pod_ip` (every pod has its own in netns mode)."""
    from tether.local.netns import pod_namespace

    for pod in m.json(cluster, "get", "pods")["items"]:
        if (pod.get("status") or {}).get("podIP") == pod_ip:
            return pod_namespace(m.networks[cluster].index, str(pod["metadata"]["uid"]))
    raise AssertionError(f"no pod with IP {pod_ip} in {cluster}")


def fetch(m: Mesh, source_cluster: str, source_ip: str, target_ip: str) -> str:
    result = run("ip", "netns", "exec", pod_ns(m, source_cluster, source_ip), sys.executable, "-c", e2e_util.POD_HTTP_GET,
                 source_ip, target_ip, "80", check=False)
    return result.stdout.strip() or result.stderr.strip().splitlines()[-1]


def test_mesh_comes_up_and_carries_pod_traffic_only_inside_wireguard(mesh: Mesh) -> None:
    for cluster in ("a", "b", "c"):
        others = {"a", "b", "c"} - {cluster}
        keys = poll(lambda c=cluster, o=others: len(mesh.annotations(c, f"{c}-node-0")) == 4 and
                    mesh.annotations(c, f"{c}-node-0"), what=f"{cluster}'s node annotated for {others}")
        for other in others:
            endpoint = keys[f"{other}.{DOMAIN}/endpoint"]
            assert endpoint.startswith(mesh.networks[cluster].node_ip(0) + ":")
        poll(lambda c=cluster: len(mesh.peers(mesh.node_ns(c))) == 2, what=f"{cluster}'s node peered twice")
        clamp = run("ip", "netns", "exec", mesh.node_ns(cluster), "nft", "list", "table", "inet", "tether-mesh").stdout
        assert "maxseg size set rt mtu" in clamp
    target, source = web_pod_ip(mesh, "b"), web_pod_ip(mesh, "a")
    capture = mesh.data_dir / "underlay.pcap"
    link = f"ul-{mesh.networks['b'].index}"
    dump = subprocess.Popen(["ip", "netns", "exec", mesh.router("a"), "tcpdump", "-n", "-U", "--immediate-mode", "-i", link,
                             "-w", str(capture)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert dump.stderr is not None
        assert "listening" in dump.stderr.readline()
        answer = poll(lambda: (r := fetch(mesh, "a", source, target)).startswith("HTTP/") and r,
                      what="a's pod reaching b's pod")
        assert answer.startswith("HTTP/1.")
    finally:
        dump.send_signal(signal.SIGINT)
        _, summary = dump.communicate(timeout=10)
    lines = run("tcpdump", "-n", "-r", str(capture)).stdout.splitlines()
    assert lines, f"the pod's request crossed no underlay link: {summary}"
    fabric = {mesh.networks[c].fabric_cidr for c in ("a", "b")}
    for line in lines:
        assert " UDP, " in line, f"not WireGuard UDP on the underlay: {line}"
        src, dst = line.split(" IP ")[1].split(": ")[0].split(" > ")
        for endpoint in (src, dst):
            address, _port = endpoint.rsplit(".", 1)
            assert any(_in(address, f) for f in fabric), f"not a node address on the underlay: {line}"
        assert 51820 <= int(dst.rsplit(".", 1)[1]) <= 51851 or 51820 <= int(src.rsplit(".", 1)[1]) <= 51851
        assert source not in line and target not in line
    drops = run("ip", "netns", "exec", mesh.router("a"), "nft", "-j", "list", "table", "inet", "tether-underlay").stdout
    for item in json.loads(drops)["nftables"]:
        rule = item.get("rule")
        if rule and any("drop" in e for e in rule["expr"]):
            counter = next(e["counter"] for e in rule["expr"] if "counter" in e)
            assert counter["packets"] == 0, f"the underlay filter dropped something: {rule}"


def _in(address: str, network: Any) -> bool:
    import ipaddress

    return ipaddress.IPv4Address(address) in network


def test_the_hub_cluster_gets_a_mesh_ready_condition(mesh: Mesh) -> None:
    def ready() -> dict[str, Any] | None:
        conditions = (mesh.json("a", "get", "clusters.cluster.tether.io", "b").get("status") or {}).get("conditions")
        found = [c for c in conditions or [] if c.get("type") == "MeshReady"]
        return found[0] if found and found[0]["status"] == "True" else None

    condition = poll(ready, what="MeshReady=True on the hub's Cluster b")
    assert condition["reason"] == "MeshUp" and "to b" in condition["message"]


def test_a_malformed_annotation_is_skipped_and_other_peers_stay(mesh: Mesh) -> None:
    poll(lambda: len(mesh.peers(mesh.node_ns("a"))) == 2, what="a's node peered")
    mesh.kubectl("b", "create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "b-bogus", "labels": {"mesh.tether.io/managed": "false"}, "annotations": {
            f"a.{DOMAIN}/pubKey": "not a key", f"a.{DOMAIN}/endpoint": "10.1.2.3:51820"}}}))
    try:
        log = mesh.data_dir / "mesh.log"
        poll(lambda: "b-bogus skipped: malformed" in log.read_text(), what="the skip logged")
        assert mesh.process is not None and mesh.process.poll() is None
        assert len(mesh.peers(mesh.node_ns("a"))) == 2
        assert fetch(mesh, "a", web_pod_ip(mesh, "a"), web_pod_ip(mesh, "b")).startswith("HTTP/1.")
    finally:
        mesh.kubectl("b", "delete", "node", "b-bogus")


def test_a_node_added_to_b_is_peered_without_restart_and_unpeered_when_it_goes(mesh: Mesh) -> None:
    mesh.kubectl("b", "create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "b-extra"}}))
    cidr = poll(lambda: mesh.json("b", "get", "node", "b-extra")["spec"].get("podCIDR"), what="b-extra's podCIDR")
    a_ns = mesh.node_ns("a")
    poll(lambda: cidr in mesh.peers(a_ns).values(), what="a's node peering b-extra")
    mesh.kubectl("b", "delete", "node", "b-extra")
    poll(lambda: cidr not in mesh.peers(a_ns).values(), what="a's node dropping b-extra")


def test_keys_survive_a_restart(mesh: Mesh) -> None:
    before = {c: mesh.annotations(c, f"{c}-node-0") for c in ("a", "b", "c")}
    peers_before = mesh.peers(mesh.node_ns("a"))
    mesh.stop()
    # as after a node's reboot: the interfaces are gone, the key files stay
    for cluster in ("a", "b", "c"):
        for link in mesh.mesh_links(mesh.node_ns(cluster)):
            run("ip", "-n", mesh.node_ns(cluster), "link", "del", link)
    mesh.start()
    for cluster in ("a", "b", "c"):
        poll(lambda c=cluster: len(mesh.peers(mesh.node_ns(c))) == 2, what=f"{cluster}'s interfaces remade")
    after = poll(lambda: all(mesh.annotations(c, f"{c}-node-0") for c in ("a", "b", "c")) and
                 {c: mesh.annotations(c, f"{c}-node-0") for c in ("a", "b", "c")}, what="annotations")
    assert after == before
    assert mesh.peers(mesh.node_ns("a")) == peers_before
    own = {run("wg", "show", link, "public-key").stdout.strip() for link in mesh.mesh_links(mesh.node_ns("a"))}
    assert own == {before["a"][f"{r}.{DOMAIN}/pubKey"] for r in ("b", "c")}
    key_files = list((mesh.data_dir / "mesh" / "keys").rglob("*.key"))
    assert len(key_files) >= 6 and all(p.stat().st_mode & 0o777 == 0o600 for p in key_files)


def test_cleanup_leaves_nothing(mesh: Mesh) -> None:
    mesh.stop()
    result = mesh.mesh("--cleanup")
    assert result.returncode == 0, result.stdout + result.stderr
    for cluster in ("a", "b", "c"):
        assert mesh.mesh_links(mesh.node_ns(cluster)) == []
        node_tables = run("ip", "netns", "exec", mesh.node_ns(cluster), "nft", "list", "tables").stdout
        assert "tether-mesh" not in node_tables  # the MSS clamp
        routes = run("ip", "-n", mesh.node_ns(cluster), "route", "show", "proto", "116").stdout
        for other in {"a", "b", "c"} - {cluster}:
            assert str(mesh.networks[other].pod_cidr) not in routes
            assert str(mesh.networks[other].fabric_cidr) not in routes
        assert mesh.annotations(cluster, f"{cluster}-node-0") == {}
        links = run("ip", "-n", mesh.router(cluster), "-o", "link", "show").stdout
        assert " ul-" not in links
        tables = run("ip", "netns", "exec", mesh.router(cluster), "nft", "list", "tables").stdout
        assert "tether-underlay" not in tables
    web = run("ip", "netns", "exec", mesh.node_ns("a"), sys.executable, "-c", e2e_util.POD_HTTP_GET,
              mesh.networks["a"].node_pod_gateway(0), web_pod_ip(mesh, "b"), "80", check=False)
    assert web.returncode != 0  # unreachable again: nothing routes b's pods from a
