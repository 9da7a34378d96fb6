"""Seed 000 as a user runs it, with tether's commands only: a pull member whose API only its own
network reaches, its agent a pod inside that network.

`tether local up --netns --name hub --name member --isolate-api member`; `tether local join`
gives the member's pods a way out (the hub's Services over a cluster join, the host's underlay
address over a host join, where `tether hub run` listens for agents); `tether local exec`
runs `tether register` and `kubectl apply` inside the member's network as its admin would; the
agent runs as a Deployment of tether's image; from the host, `kubectl` reaches the member only
through the hub's cluster proxy and the agent's tunnel.

Run it under `flock /tmp/tether-netns.lock` (fixed device names), as root.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import e2e_util
import pytest

from tether.local.network import UNDERLAY_HOST_IP

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="netns mode creates network namespaces: needs root (CI runs as root)"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="netns mode needs `ip` (install iproute2)"),
]
BIN = Path(sys.executable).parent
WAIT_S = 240


def test_seed_000_with_the_agent_as_a_pod(tmp_path: Path) -> None:
    """Also applies `deploy/dns` in the member: the tree's manifests run as written."""
    data = tmp_path / "clusters"
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
           "TETHER_HOME": str(tmp_path / "home"), "KUBECONFIG": str(data / "kubeconfig"),
           "KUBECACHEDIR": str(tmp_path / "kubecache")}

    def sh(*argv: str, input: str | None = None, check: bool = True,
           timeout: float = 300) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(list(argv), capture_output=True, text=True, env=env, input=input,
                                timeout=timeout)
        if check:
            assert result.returncode == 0, f"{argv}\n{result.stdout}\n{result.stderr}"
        return result

    inside = ["tether", "local", "exec", "--data-dir", str(data), "member", "--"]
    hub_log = tmp_path / "hub.log"
    hub: subprocess.Popen[bytes] | None = None
    sh("tether", "local", "up", "--netns", "--data-dir", str(data), "--name", "hub", "--name",
       "member", "--isolate-api", "member")
    try:
        sh("tether", "local", "join", "--data-dir", str(data), "member", "hub")
        sh("tether", "local", "join", "--data-dir", str(data), "member", "host")
        sh("tether", "hub", "install", "--context", "hub")
        with hub_log.open("wb") as log:
            hub = subprocess.Popen(
                ["tether", "hub", "run", "--context", "hub", "--port", "0", "--proxy-port", "0",
                 "--tunnel-agent-port", "0", "--tunnel-frontend-port", "0",
                 "--tunnel-bind-address", UNDERLAY_HOST_IP,
                 "--tunnel-advertise-address", UNDERLAY_HOST_IP, "--health-period", "2",
                 "--health-threshold", "2"], stdout=log, stderr=subprocess.STDOUT, env=env)
        e2e_util.poll(lambda: "cluster proxy on" in hub_log.read_text(), timeout=90,
                      what="the hub serving")
        # the hub's address as its own network (and a joined member) sees it
        printed = sh("tether", "local", "exec", "--data-dir", str(data), "hub", "--", "tether",
                     "token", "create", "--print-register-command", "--context", "hub",
                     "--cluster-name", "member").stdout.strip().splitlines()[-1]
        assert re.match(r"tether register https://10\.\d+\.0\.1:443 ", printed), printed
        # the member's admin, inside the member's network
        sh(*inside, *printed.split(), "--no-start")
        manifest = sh("tether", "agent", "manifest", "--cluster-name", "member").stdout
        sh(*inside, "kubectl", "--context", "member", "apply", "-f", "-", input=manifest)
        sh(*inside, "kubectl", "--context", "member", "-n", "tether-system", "rollout", "status",
           "deploy/tether-agent-member", f"--timeout={WAIT_S}s")
        sh("kubectl", "--context", "hub", "wait", "tcl/member", "--for=condition=Ready",
           f"--timeout={WAIT_S}s")
        # no agent process on the host: the one that reports is the pod
        assert "not running" in sh("tether", "agent", "stop", "--cluster-name", "member").stdout
        # from the host: the member only through the hub's cluster proxy and the agent's tunnel
        member = sh("tether", "kubeconfig", "member", "--context", "hub").stdout.strip()
        e2e_util.poll(lambda: "agent for cluster member running" in sh(
            "kubectl", "--kubeconfig", member, "-n", "tether-system", "logs",
            "deploy/tether-agent-member", check=False).stdout, timeout=WAIT_S,
            what="the agent pod's logs through the hub")
        pods = sh("kubectl", "--kubeconfig", member, "-n", "tether-system", "get", "pods", "-o",
                  "jsonpath={.items[*].status.containerStatuses[*].ready}").stdout
        assert pods.split() == ["true"], pods
        # the member's API stays unreachable from the host namespace
        isolated = sh("kubectl", "--context", "member", "get", "ns", "--request-timeout=5s",
                      check=False)
        assert isolated.returncode != 0
        # deploy/ as written runs here too: tether dns from the kustomize tree, hardened as on a
        # real cluster (read-only root, /tmp and the data directory as volumes), probes passing
        repo = Path(__file__).resolve().parents[2]
        sh(*inside, "kubectl", "--context", "member", "apply", "-k", str(repo / "deploy" / "dns"))
        sh(*inside, "kubectl", "--context", "member", "-n", "tether-system", "rollout", "status",
           "deploy/tether-dns", f"--timeout={WAIT_S}s")
        answer = sh(*inside, "kubectl", "--context", "member", "-n", "tether-system", "exec",
                    "deploy/tether-dns", "--", "python3", "-c",
                    "import urllib.request as u; print(u.urlopen('http://127.0.0.1:9153/ready').status)")
        assert answer.stdout.strip() == "200", answer.stdout + answer.stderr
    finally:
        if hub is not None:
            hub.send_signal(signal.SIGTERM)
            try:
                hub.wait(timeout=20)
            except subprocess.TimeoutExpired:
                hub.kill()
                hub.wait(timeout=5)
        sh("tether", "local", "down", "--data-dir", str(data), check=False)
