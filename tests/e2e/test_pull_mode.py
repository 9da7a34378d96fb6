"""Pull mode end to end: `tether token create` → `tether register` → the agent process.

`host` (the hub) and `member1` run in separate data dirs. The hub runs as `python -m tether hub
run` with a tunnel server (ports picked by the kernel, agent port on 127.0.0.1) and short health
timers; the agent is the background process `tether register` starts, stopped by its recorded
pid. Everything the module starts is torn down in fixtures.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import e2e_util
import pytest
import yaml

from tether.federation.bootstrap import ca_cert_hash
from tether.federation.registry import member_client_from_hub
from tether.kube import ClusterCredentials, KubeClient, KubeError, NotFound

pytestmark = pytest.mark.e2e

CLUSTER = "cluster.tether.io/v1alpha1"
WORK = "work.tether.io/v1alpha1"
WAIT_S = 90.0  # generous: on a loaded 2-core machine a member can take this long
GRACE_S = 3.0
NAME = "member1"


def tether(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                          timeout=timeout)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@dataclass
class Setup:
    main_dir: Path
    member_dir: Path
    agents_dir: Path
    hub_log: Path
    command: str = ""  # the printed register command

    @property
    def kubeconfig(self) -> Path:
        return self.main_dir / "kubeconfig"

    @property
    def member_kubeconfig(self) -> Path:
        return self.member_dir / "kubeconfig"

    @property
    def agent_dir(self) -> Path:
        return self.agents_dir / "agents" / NAME

    def host(self) -> KubeClient:
        return KubeClient.from_kubeconfig(self.kubeconfig, "host")

    def member(self) -> KubeClient:
        return KubeClient.from_kubeconfig(self.member_kubeconfig, NAME)

    def register_args(self, command: str | None = None) -> list[str]:
        words = (command or self.command).split()
        assert words[0] == "tether" and words[1] == "register"
        return [*words[1:], "--kubeconfig", str(self.member_kubeconfig), "--context", NAME,
                "--data-dir", str(self.agents_dir), "--period", "0.5"]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def poll(check: Callable[[], Any], *, timeout: float = WAIT_S, what: str = "condition") -> Any:
    return e2e_util.poll(check, timeout=timeout, interval=0.2, what=what)



async def _cluster(setup: Setup) -> dict[str, Any]:
    async with setup.host() as host:
        return await host.get(CLUSTER, "Cluster", NAME)


def ready_status(setup: Setup) -> str:
    cluster = run(_cluster(setup))
    for condition in (cluster.get("status") or {}).get("conditions") or []:
        if condition["type"] == "Ready":
            return str(condition["status"])
    return ""


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    main_dir = tmp_path_factory.mktemp("pull-hub")
    member_dir = tmp_path_factory.mktemp("pull-member")
    agents_dir = tmp_path_factory.mktemp("pull-agents")
    ok(tether("local", "up", "--data-dir", str(main_dir), "--name", "host"))
    hub: subprocess.Popen[bytes] | None = None
    try:
        ok(tether("local", "up", "--data-dir", str(member_dir), "--name", NAME))
        s = Setup(main_dir, member_dir, agents_dir, main_dir / "hub.log")
        ok(tether("hub", "install", "--kubeconfig", str(s.kubeconfig), "--context", "host"))
        with s.hub_log.open("wb") as log:
            hub = subprocess.Popen(
                [sys.executable, "-m", "tether", "hub", "run", "--kubeconfig", str(s.kubeconfig),
                 "--context", "host", "--port", "0", "--tunnel-agent-port", "0",
                 "--tunnel-frontend-port", "0", "--tunnel-bind-address", "127.0.0.1",
                 "--data-dir", str(main_dir), "--health-period", "0.5",
                 "--health-threshold", "1", "--health-grace", str(GRACE_S), "--resync", "5",
                 "-v"], stdout=log, stderr=subprocess.STDOUT)
        poll(lambda: "tunnel server: agents at" in s.hub_log.read_text(), what="the hub's tunnel")
        yield s
    finally:
        tether("agent", "stop", "--cluster-name", NAME, "--data-dir", str(agents_dir))
        if hub is not None:
            hub.send_signal(signal.SIGTERM)
            try:
                hub.wait(timeout=15)
            except subprocess.TimeoutExpired:
                hub.kill()
                hub.wait(timeout=5)
        tether("local", "down", "--data-dir", str(member_dir))
        tether("local", "down", "--data-dir", str(main_dir))


@pytest.fixture(scope="module")
def registered(setup: Setup) -> Setup:
    out = ok(tether("token", "create", "--ttl", "1h", "--print-register-command",
                    "--kubeconfig", str(setup.kubeconfig), "--host-context", "host",
                    "--cluster-name", NAME))
    setup.command = out.strip().splitlines()[-1]
    out = ok(tether(*setup.register_args()))
    assert f"registered cluster {NAME} (Pull" in out
    assert "agent started (pid" in out
    assert setup.command.split("--token ")[1].split()[0] not in out  # the token is not echoed
    return setup


def test_token_create_prints_a_kubeadm_style_command(registered: Setup) -> None:
    words = registered.command.split()
    assert words[:2] == ["tether", "register"] and words[2].startswith("https://127.0.0.1:")
    token = words[words.index("--token") + 1]
    assert re.fullmatch(r"[a-z0-9]{6}\.\S+", token)
    hub_ca = yaml.safe_load(registered.kubeconfig.read_text())["clusters"]
    host = next(c for c in hub_ca if c["name"] == "host")["cluster"]
    expected = ca_cert_hash(base64.b64decode(host["certificate-authority-data"]))
    assert words[words.index("--ca-cert-hash") + 1] == expected
    assert words[words.index("--cluster-name") + 1] == NAME


def test_registered_cluster_is_pull_and_ready(registered: Setup) -> None:
    poll(lambda: ready_status(registered) == "True", what="Ready=True")
    cluster = run(_cluster(registered))
    spec, status = cluster["spec"], cluster["status"]
    assert spec["syncMode"] == "Pull"
    member_server = yaml.safe_load(registered.member_kubeconfig.read_text())["clusters"][0][
        "cluster"]["server"]
    assert spec["apiEndpoint"] == member_server
    assert spec["proxyURL"].startswith("http://127.0.0.1:")
    assert status["kubernetesVersion"] and status["nodeSummary"]["totalNum"] >= 1
    # Karmada's resourceSummary, as the agent reports it (dynamic replica division reads it)
    assert set(status["resourceSummary"]) == {"allocatable", "allocated", "allocating"}
    assert int(status["resourceSummary"]["allocatable"]["pods"]) >= 110
    pid = int((registered.agent_dir / "agent.pid").read_text())
    os.kill(pid, 0)
    assert (registered.agent_dir / "token").stat().st_mode & 0o077 == 0

    async def lease() -> dict[str, Any]:
        async with registered.host() as host:
            return await host.get("coordination.k8s.io/v1", "Lease", NAME, "tether-system")

    assert run(lease())["spec"]["holderIdentity"] == NAME
    clusters = ok(tether("clusters", "--host-kubeconfig", str(registered.kubeconfig),
                         "--host-context", "host"))
    assert re.search(rf"{NAME}\s+Pull\s+True", clusters), clusters


def test_hub_never_dials_a_new_member_with_a_connect_it_refuses(registered: Setup) -> None:
    """Right after the registration the hub's controllers (mirror, MCS, KubeFed DNS) watch the
    new member through the tunnel: with its proxy token from the start, never with a CONNECT
    the listener refuses (407 before the token reached its Secret, 403 before the grant)."""
    poll(lambda: ready_status(registered) == "True", what="Ready=True")
    poll(lambda: f"agent {NAME} connected" in registered.hub_log.read_text(), what="the agent's tunnel")
    refused = [line for line in registered.hub_log.read_text().splitlines()
               if re.search(r"refused CONNECT \S+: 40[37]", line)]
    # (a 500 "no tunnels available" before the agent is connected is the informers' quiet retry)
    assert not refused, "\n".join(refused[:5])


def test_hub_reaches_member_api_through_the_tunnel(registered: Setup) -> None:
    async def check() -> tuple[str, str, int]:
        async with registered.host() as host:
            member = await member_client_from_hub(host, NAME)
            assert member is not None
            async with member:
                version = await member.request("GET", "/version")
                names = await member.list_objects("v1", "Namespace")
                return (member.credentials.proxy_url or "", str(version["gitVersion"]),
                        len(names))

    proxy, version, count = run(check())
    assert proxy.startswith("http://127.0.0.1:") and version and count >= 1
    assert f"agent {NAME} connected" in registered.hub_log.read_text()


FEDERATED = """\
apiVersion: v1
kind: Namespace
metadata:
  name: pull-ns
---
apiVersion: types.kubefed.io/v1beta1
kind: FederatedNamespace
metadata:
  name: pull-ns
  namespace: pull-ns
spec:
  placement:
    clusters:
    - name: member1
---
apiVersion: types.kubefed.io/v1beta1
kind: FederatedDeployment
metadata:
  name: pull-deployment
  namespace: pull-ns
spec:
  template:
    metadata:
      labels:
        app: pull
    spec:
      replicas: 2
      selector:
        matchLabels:
          app: pull
      template:
        metadata:
          labels:
            app: pull
        spec:
          containers:
          - image: nginx:1.17
            name: nginx
  placement:
    clusters:
    - name: member1
"""


def test_federated_deployment_reaches_the_pull_member(registered: Setup) -> None:
    poll(lambda: ready_status(registered) == "True", what="Ready=True")

    async def apply() -> None:
        async with registered.host() as host:
            for doc in yaml.safe_load_all(FEDERATED):
                await host.apply(doc, field_manager="test")

    run(apply())

    async def work_applied() -> dict[str, Any] | None:
        async with registered.host() as host:
            for work in await host.list_objects(WORK, "Work", f"tether-es-{NAME}"):
                if "deployment" not in work["metadata"]["name"]:
                    continue
                conds = (work.get("status") or {}).get("conditions") or []
                statuses = (work.get("status") or {}).get("manifestStatuses") or []
                if any(c["type"] == "Applied" and c["status"] == "True" for c in conds) and \
                        statuses and statuses[0].get("applied"):
                    return work
        return None

    work = poll(lambda: run(work_applied()), what="the Work applied")
    assert work["status"]["manifestStatuses"][0]["identifier"]["kind"] == "Deployment"

    async def member_deployment() -> dict[str, Any] | None:
        async with registered.member() as member:
            try:
                return await member.get("apps/v1", "Deployment", "pull-deployment", "pull-ns")
            except Exception:
                return None

    deployment = poll(lambda: run(member_deployment()), what="the member's Deployment")
    assert deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tether"

    def member_status_reported() -> bool:
        found = run(work_applied())
        status = (found or {}).get("status", {}).get("manifestStatuses", [{}])[0].get("status")
        return bool(status) and status.get("readyReplicas") == 2

    poll(member_status_reported, what="the member's Deployment status on the hub Work")


def test_killed_agent_turns_unknown_then_ready_again(registered: Setup) -> None:
    poll(lambda: ready_status(registered) == "True", what="Ready=True")
    pid = int((registered.agent_dir / "agent.pid").read_text())
    os.kill(pid, signal.SIGKILL)  # a crash: no goodbye
    killed = time.monotonic()
    poll(lambda: ready_status(registered) == "Unknown", timeout=GRACE_S + 10, what="Unknown")
    assert time.monotonic() - killed >= GRACE_S - 1.0
    cluster = run(_cluster(registered))
    assert any(t["key"] == "cluster.karmada.io/unreachable" and t["effect"] == "NoSchedule"
               for t in cluster["spec"].get("taints", []))
    out = ok(tether("agent", "start", "--cluster-name", NAME, "--data-dir",
                    str(registered.agents_dir)))
    assert "agent started" in out
    poll(lambda: ready_status(registered) == "True", what="Ready=True again")
    poll(lambda: not any(t["key"] == "cluster.karmada.io/unreachable"
                         for t in run(_cluster(registered))["spec"].get("taints", [])),
         what="the unreachable taint removed")


def test_bad_token_is_refused_clearly(registered: Setup) -> None:
    args = registered.register_args()
    args[args.index("--token") + 1] = "abcdef.not-a-real-token"
    args[args.index("--cluster-name") + 1] = "intruder"
    result = tether(*args, "--no-start")
    assert result.returncode == 1
    assert "refused the bootstrap token" in result.stderr, result.stderr
    result = tether(*[("garbage" if a.startswith("abcdef.") else a) for a in args], "--no-start")
    assert result.returncode == 1 and "must look like" in result.stderr


def test_ca_hash_mismatch_is_refused(registered: Setup) -> None:
    args = registered.register_args()
    args[args.index("--cluster-name") + 1] = "intruder"
    args[args.index("--ca-cert-hash") + 1] = "sha256:" + "ab" * 32
    result = tether(*args, "--no-start")
    assert result.returncode == 1
    assert "refusing the hub" in result.stderr and "public key hash" in result.stderr
    # the member's API posing as the hub: its CA is not the pinned one
    member_server = yaml.safe_load(registered.member_kubeconfig.read_text())["clusters"][0][
        "cluster"]["server"]
    args = registered.register_args()
    args[1] = member_server
    args[args.index("--cluster-name") + 1] = "intruder"
    result = tether(*args, "--no-start")
    assert result.returncode == 1, result.stdout
    assert "refusing the hub" in result.stderr or "refused the bootstrap token" in result.stderr

    async def intruder() -> list[str]:
        async with registered.host() as host:
            return [c["metadata"]["name"] for c in await host.list_objects(CLUSTER, "Cluster")]

    assert "intruder" not in run(intruder())


def test_agent_with_another_identity_is_refused_by_the_tunnel(registered: Setup) -> None:
    """An agent holding member1's token may not serve another cluster's name; an agent without
    a token is refused."""
    from tether.tunnel.agent import AgentConfig, TunnelAgent
    from tether.tunnel.tls import ClientTLS

    files = json.loads((registered.agent_dir / "agent.json").read_text())
    host, _, port = files["tunnel_address"].rpartition(":")

    async def attempt(agent_id: str, token_path: str) -> bool:
        agent = TunnelAgent(AgentConfig(
            proxy_server_host=host, proxy_server_port=int(port),
            tls=ClientTLS(str(registered.agent_dir / "tunnel-ca.crt"), server_name=host),
            agent_id=agent_id, agent_identifiers="host=10.9.9.9", health_server_port=-1,
            admin_server_port=-1, token_path=token_path, sync_interval_s=0.2))
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop))
        try:
            async with asyncio.timeout(2.0):
                await agent.connected.wait()
            return True
        except TimeoutError:
            return False
        finally:
            stop.set()
            await asyncio.wait_for(task, 5.0)

    assert run(attempt("someone-else", str(registered.agent_dir / "token"))) is False
    assert "agent someone-else refused" in registered.hub_log.read_text()
    assert run(attempt("no-token", "")) is False  # no bearer token: refused too
    assert "agent no-token refused: a valid bearer token is required" in \
        registered.hub_log.read_text()


def test_agent_manifest_for_real_clusters(registered: Setup) -> None:
    out = ok(tether("agent", "manifest", "--cluster-name", NAME, "--data-dir",
                    str(registered.agents_dir), "--image", "example.com/tether:dev"))
    docs = list(yaml.safe_load_all(out))
    kinds = [d["kind"] for d in docs]
    assert {"Namespace", "ServiceAccount", "Secret", "Deployment"} <= set(kinds)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "example.com/tether:dev"
    assert container["args"][:4] == ["agent", "run", "--cluster-name", NAME]
    secret = next(d for d in docs if d["kind"] == "Secret")
    config = json.loads(base64.b64decode(secret["data"]["agent.json"]))
    assert config["member_in_cluster"] is True and config["cluster"] == NAME


def test_unjoin_removes_the_agents_hub_credentials(registered: Setup) -> None:
    """Last in the module: after unjoin, nothing register made is left on the hub and the
    agent's token no longer authenticates."""
    token = (registered.agent_dir / "token").read_text().strip()
    ok(tether("unjoin", NAME, "--host-kubeconfig", str(registered.kubeconfig), "--host-context", "host",
              "--cluster-kubeconfig", str(registered.member_kubeconfig), "--cluster-context", NAME))

    async def leftovers() -> list[str]:
        found = []
        async with registered.host() as host:
            for api_version, kind, name, namespace in (
                ("v1", "ServiceAccount", f"tether-agent-{NAME}", "tether-system"),
                ("v1", "Secret", f"tether-agent-{NAME}-token", "tether-system"),
                ("v1", "Secret", NAME, "tether-system"),
                ("rbac.authorization.k8s.io/v1", "ClusterRole", f"tether:agent:{NAME}", None),
                ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", f"tether:agent:{NAME}", None),
                (CLUSTER, "Cluster", NAME, None),
            ):
                try:
                    await host.get(api_version, kind, name, namespace)
                    found.append(f"{kind} {name}")
                except NotFound:
                    pass
        return found

    assert run(leftovers()) == []
    server = KubeClient.from_kubeconfig(registered.kubeconfig, "host").credentials

    async def agent_whoami() -> int:
        credentials = ClusterCredentials.from_token(server=server.server, token=token,
                                                    ca_bundle=server.ca_pem)
        async with KubeClient(credentials) as agent:
            try:
                await agent.get(CLUSTER, "Cluster", NAME)
            except KubeError as exc:
                return exc.code
        return 200

    assert run(agent_whoami()) == 401
