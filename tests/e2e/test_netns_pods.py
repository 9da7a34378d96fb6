"""Netns mode: every pod has its own network namespace, and Services are routed in the kernel.

One cluster with two nodes (`tether local up --netns --nodes 2`; root and iproute2 needed, CI
runs as root; run under `flock /tmp/tether-netns.lock`). A server pod on node 0 answers every
connection with the peer address it sees; a client pod on node 1 dials it by pod IP and by its
Service's ClusterIP. Proves:

- the pod runs in a namespace of its own (`tether-<i>-p<key>`) whose `eth0` holds its pod IP, and
  the server sees the client's pod IP (not the node's), directly and through the ClusterIP
  (kernel DNAT in the node, no proxy in between);
- the pod's namespace goes when the pod is deleted, and `tether local down` leaves none behind;
  one left by a crashed run is removed by the next `up`.

Traffic goes only to addresses inside the namespaces this test creates.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2e_util import kubectl_binary, poll

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="netns mode creates network namespaces: needs root (CI runs as root)"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="netns mode needs `ip` (install iproute2)"),
]

NAME = "np"
TIMEOUT_S = 60.0

ECHO_PEER = """
    import socket
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", 8080))
    server.listen(64)
    while True:
        conn, peer = server.accept()
        conn.sendall(peer[0].encode())
        conn.close()
"""


def tether(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", "local", *args], capture_output=True, text=True,
                          timeout=120)


def namespaces() -> set[str]:
    try:
        return {p.name for p in Path("/run/netns").iterdir()}
    except OSError:
        return set()


@dataclass
class Cluster:
    data_dir: Path
    cache: Path
    index: int

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, KUBECONFIG=str(self.data_dir / "kubeconfig"), KUBECACHEDIR=str(self.cache))
        result = subprocess.run([kubectl_binary(), "--context", NAME, *args], input=input, capture_output=True,
                                text=True, timeout=TIMEOUT_S, env=env)
        if check:
            assert result.returncode == 0, f"kubectl {' '.join(args)}:\n{result.stdout}{result.stderr}"
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def pod_namespaces(self) -> set[str]:
        return {n for n in namespaces() if n.startswith(f"tether-{self.index}-p")}

    def node_names(self) -> list[str]:
        return sorted(n["metadata"]["name"] for n in self.json("get", "nodes")["items"])

    def run_pod(self, name: str, script: str, node: str, labels: dict[str, str] | None = None) -> None:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {"app": name}},
               "spec": {"nodeName": node, "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "python:3.11",
                                        "command": ["python3", "-c", textwrap.dedent(script)]}]}}
        self.kubectl("create", "-f", "-", input=json.dumps(pod))

    def running_ip(self, name: str) -> str:
        def ip() -> str | None:
            status = self.json("get", "pod", name).get("status") or {}
            return status.get("podIP") if status.get("phase") == "Running" else None

        found: str = poll(ip, timeout=TIMEOUT_S, what=f"pod {name} running")
        return found

    def finished_logs(self, name: str) -> str:
        def done() -> dict[str, Any] | None:
            found: dict[str, Any] = self.json("get", "pod", name)
            return found if (found.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

        pod = poll(done, timeout=TIMEOUT_S, what=f"pod {name} to finish")
        logs = self.kubectl("logs", name).stdout
        assert pod["status"]["phase"] == "Succeeded", (pod["status"], logs)
        return logs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data_dir = tmp_path_factory.mktemp("netns-pods")
    up = tether("up", "--netns", "--data-dir", str(data_dir), "--name", NAME, "--nodes", "2")
    index = -1
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        index = json.loads((data_dir / "clusters" / NAME / "network.json").read_text())["index"]
        yield Cluster(data_dir, tmp_path_factory.mktemp("kubecache-netns-pods"), index)
    finally:
        down = tether("down", "--data-dir", str(data_dir))
        assert down.returncode == 0, down.stdout + down.stderr
        left = {n for n in namespaces() if n == f"tether-{index}" or n.startswith(f"tether-{index}-")}
        assert not left, f"namespaces left after `tether local down`: {sorted(left)}"


CLIENT = """
    import json, socket, time

    def peer_seen(host, port):
        for _ in range(100):
            try:
                with socket.create_connection((host, port), timeout=3) as conn:
                    return conn.getsockname()[0], conn.recv(100).decode()
            except OSError:
                time.sleep(0.2)
        return None, None

    source, direct = peer_seen({server!r}, 8080)
    _, service = peer_seen({service!r}, 8080)
    print(json.dumps({{"source": source, "direct": direct, "service": service}}))
"""


def test_pod_has_its_own_namespace_and_address(cluster: Cluster) -> None:
    nodes = cluster.node_names()
    cluster.run_pod("echo", ECHO_PEER, nodes[0])
    server_ip = cluster.running_ip("echo")
    cluster.kubectl("expose", "pod", "echo", "--port=8080")
    service_ip = cluster.json("get", "service", "echo")["spec"]["clusterIP"]
    uid = cluster.json("get", "pod", "echo")["metadata"]["uid"]
    own = [n for n in cluster.pod_namespaces()
           if subprocess.run(["ip", "-n", n, "-4", "-o", "addr", "show", "dev", "eth0"], capture_output=True,
                             text=True).stdout.count(f" {server_ip}/32 ") == 1]
    assert len(own) == 1, (uid, cluster.pod_namespaces())

    cluster.run_pod("client", CLIENT.format(server=server_ip, service=service_ip), nodes[1])
    seen = json.loads(cluster.finished_logs("client").strip().splitlines()[-1])
    client_ip = cluster.json("get", "pod", "client")["status"]["podIP"]
    assert seen["source"] == client_ip, seen
    assert seen["direct"] == client_ip, (seen, "the server must see the client's pod IP")
    assert seen["service"] == client_ip, (seen, "through the ClusterIP too: DNAT in the kernel, no proxy")

    cluster.kubectl("delete", "pod", "echo", "client", "--wait=true", "--timeout=60s")
    poll(lambda: not (set(own) & cluster.pod_namespaces()) or None, timeout=TIMEOUT_S,
         what="the pod's namespace removed with the pod")
