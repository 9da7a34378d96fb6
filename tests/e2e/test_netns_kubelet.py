"""Netns mode and the kubelet: a process pod runs in its node's network namespace *and* its own
mount namespace, so a `python` pod finds its script from a ConfigMap at `/opt`, and a pod of the
tether image reaches the API server through the `kubernetes` Service with its ServiceAccount.

Root and iproute2 needed (CI runs as root); run under `flock /tmp/tether-netns.lock`.
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
from e2e_util import kubectl_binary, manifest, poll
from test_kubelet_fidelity import port_server, whoami_pod

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="netns mode and mount namespaces need root (CI runs as root)"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="netns mode needs `ip` (install iproute2)"),
]

NAME = "nk"
TIMEOUT_S = 60.0


class Cluster:
    def __init__(self, data_dir: Path, cache: Path) -> None:
        self.data_dir = data_dir
        self.cache = cache

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, KUBECONFIG=str(self.data_dir / "kubeconfig"), KUBECACHEDIR=str(self.cache))
        result = subprocess.run([kubectl_binary(), "--context", NAME, *args], input=input, capture_output=True,
                                text=True, timeout=TIMEOUT_S, env=env)
        assert result.returncode == 0, f"kubectl {' '.join(args)}:\n{result.stdout}{result.stderr}"
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)


def tether(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", "local", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data_dir = tmp_path_factory.mktemp("netns-kubelet")
    up = tether("up", "--netns", "--data-dir", str(data_dir), "--name", NAME)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert json.loads((data_dir / "clusters" / NAME / "network.json").read_text())["mode"] == "netns"
        yield Cluster(data_dir, tmp_path_factory.mktemp("kubecache-netns-kubelet"))
    finally:
        down = tether("down", "--data-dir", str(data_dir))
        assert down.returncode == 0, down.stdout + down.stderr


def phase_and_ready(pod: dict[str, Any]) -> tuple[str, bool]:
    conditions = pod.get("status", {}).get("conditions") or []
    return (pod.get("status", {}).get("phase", ""),
            any(c["type"] == "Ready" and c["status"] == "True" for c in conditions))


def test_python_pod_runs_a_script_from_a_configmap_in_netns_mode(cluster: Cluster) -> None:
    cluster.kubectl("create", "-f", "-", input=manifest(*port_server("default")))
    poll(lambda: phase_and_ready(cluster.json("get", "pod", "ps")) == ("Running", True), timeout=TIMEOUT_S,
         interval=0.3, what="the port-server pod Ready (its probe reached the script's server)")
    pod_ip = cluster.json("get", "pod", "ps")["status"]["podIP"]
    assert pod_ip.startswith("10.")  # a namespace address, not the host's loopback
    answer = cluster.kubectl("get", "--raw", "/api/v1/namespaces/default/pods/ps:8080/proxy/").stdout
    assert answer == "hello from ps\n"
    assert cluster.kubectl("exec", "ps", "--", "cat", "/opt/version").stdout == "1"


def test_tether_pod_reaches_the_api_through_the_kubernetes_service(cluster: Cluster) -> None:
    cluster.kubectl("create", "-f", "-", input=manifest(*whoami_pod("default")))
    poll(lambda: cluster.json("get", "pod", "who")["status"].get("phase") in ("Succeeded", "Failed"),
         timeout=TIMEOUT_S, interval=0.5, what="the tether pod to finish")
    out = cluster.kubectl("logs", "who").stdout
    assert cluster.json("get", "pod", "who")["status"]["phase"] == "Succeeded", out
    assert "user: system:serviceaccount:default:default" in out and "server: https://10." in out, out
