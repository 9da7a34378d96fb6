"""The hub's cluster proxy end to end: `tether proxy serve`, `tether kubeconfig`, the real kubectl.

One data dir runs `host` (the hub) and `member1` (joined in push mode with `tether join`). The
proxy runs as `tether proxy serve` on 127.0.0.1; `tether kubeconfig` issues the hub admin's
certificate (who reaches member1 as `tether:hub-admins`); an echo pod in member1 writes one access-log
line per request, which is how `logs -f` is shown to stream. The tunnel test starts a
`tether tunnel server` and `tether tunnel agent` on loopback, registers member1's API a second
time as the Pull cluster `pulled`, and proves the tunnel carried the traffic by the server's
dial counter (the member's API is on loopback too, so reachability alone proves nothing).
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from e2e_util import Collected, kubectl_binary, poll

pytestmark = pytest.mark.e2e

PROXY_PATH = "/apis/cluster.tether.io/v1alpha1/clusters/{}/proxy"
ANNOUNCE = re.compile(r"serving on (https://127\.0\.0\.1:\d+)")
FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)")


def tether(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                          timeout=timeout)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Proc(Collected):
    """A long-running process whose output lines (stdout and stderr) are collected."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        super().__init__(args, env=env, merge_stderr=True)

    def wait_for(self, predicate: Callable[[str], bool], *, timeout: float = 15.0) -> str:
        return self.wait_for_line(predicate, timeout=timeout)


@dataclass
class Hub:
    data_dir: Path
    kubeconfig: Path  # host + member1, admin credentials
    proxy_url: str
    proxy_kubeconfig: Path  # member1 through the proxy
    cache: Path
    tunnel_frontend: int
    tunnel_health: int

    def kubectl(self, *args: str, config: Path | None = None, context: str | None = None,
                check: bool = True, input: str | None = None, env: dict[str, str] | None = None,
                ) -> subprocess.CompletedProcess[str]:
        command = [kubectl_binary(), "--kubeconfig", str(config or self.proxy_kubeconfig)]
        if context:
            command += ["--context", context]
        full_env = {**os.environ, "KUBECACHEDIR": str(self.cache), **(env or {})}
        result = subprocess.run([*command, *args], input=input, capture_output=True, text=True,
                                timeout=60, env=full_env)
        if check:
            assert result.returncode == 0, result.stdout + result.stderr
        return result

    def host(self, *args: str, check: bool = True,
             input: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.kubectl(*args, config=self.kubeconfig, context="host", check=check, input=input)

    def streamed(self, *args: str, config: Path | None = None,
                 env: dict[str, str] | None = None) -> Proc:
        full_env = {**os.environ, "KUBECACHEDIR": str(self.cache), **(env or {})}
        return Proc([kubectl_binary(), "--kubeconfig", str(config or self.proxy_kubeconfig), *args],
                    env=full_env)

    def ca(self) -> ssl.SSLContext:
        doc = yaml.safe_load(self.proxy_kubeconfig.read_text())
        ca = base64.b64decode(doc["clusters"][0]["cluster"]["certificate-authority-data"]).decode()
        return ssl.create_default_context(cadata=ca)

    def admin_token(self) -> str:
        out = self.host("get", "secret", "-n", "tether-system", "tether-cluster-proxy-pki",
                        "-o", "jsonpath={.data.admin-token}").stdout
        return base64.b64decode(out).decode()

    def get(self, path: str, token: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(self.proxy_url + path, headers=headers, verify=self.ca(), timeout=30)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    data_dir = tmp_path_factory.mktemp("proxy-clusters")
    kubeconfig = data_dir / "kubeconfig"
    ok(tether("local", "up", "--data-dir", str(data_dir), "--name", "host", "--name", "member1"))
    proxy: Proc | None = None
    try:
        ok(tether("hub", "install", "--kubeconfig", str(kubeconfig), "--context", "host"))
        ok(tether("join", "member1", "--cluster-context", "member1", "--host-kubeconfig",
                  str(kubeconfig), "--host-context", "host"))
        frontend, health = free_port(), free_port()
        proxy = Proc([sys.executable, "-m", "tether", "proxy", "serve", "--host-kubeconfig",
                      str(kubeconfig), "--host-context", "host", "--port", "0",
                      "--tunnel-server", f"127.0.0.1:{frontend}"])
        announced = proxy.wait_for(lambda line: ANNOUNCE.search(line) is not None, timeout=30)
        found = ANNOUNCE.search(announced)
        assert found is not None
        out = data_dir / "member1-proxy.yaml"
        printed = ok(tether("kubeconfig", "member1", "--host-kubeconfig", str(kubeconfig),
                            "--host-context", "host", "--out", str(out))).strip()
        assert printed == str(out)
        started = Hub(data_dir, kubeconfig, found.group(1), out,
                      tmp_path_factory.mktemp("proxy-kubecache"), frontend, health)
        yield started
    finally:
        if proxy is not None:
            proxy.stop()
        tether("local", "down", "--data-dir", str(data_dir))


@pytest.fixture(scope="module")
def echo(hub: Hub) -> str:
    """An echo pod in member1, created through the proxy."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "echo", "labels": {"app": "echo"}},
           "spec": {"containers": [{"name": "echo", "image": "tether/echo",
                                    "ports": [{"containerPort": 8080}]}]}}
    hub.kubectl("create", "-f", "-", input=json.dumps(pod))

    def running() -> bool:
        phase = hub.kubectl("get", "pod", "echo", "-o", "jsonpath={.status.phase}", check=False)
        return phase.stdout.strip() == "Running"

    poll(running, timeout=60, interval=0.2, what="pod echo Running in member1")
    return "echo"


def request_echo(hub: Hub, path: str, config: Path | None = None) -> str:
    """A request to the echo pod through the member's pod proxy (itself through the hub proxy)."""
    return hub.kubectl("get", "--raw", f"/api/v1/namespaces/default/pods/echo:8080/proxy/{path}",
                       config=config).stdout


def test_kubeconfig_points_at_the_proxy(hub: Hub) -> None:
    doc = yaml.safe_load(hub.proxy_kubeconfig.read_text())
    assert doc["clusters"][0]["cluster"]["server"] == hub.proxy_url + PROXY_PATH.format("member1")
    assert oct(hub.proxy_kubeconfig.stat().st_mode & 0o777) == "0o600"


def test_get_pods(hub: Hub, echo: str) -> None:
    table = hub.kubectl("get", "pods").stdout
    assert re.search(r"^echo\s+1/1\s+Running", table, re.MULTILINE), table
    namespaces = hub.kubectl("get", "namespaces", "-o", "name").stdout.split()
    assert "namespace/tether-system" in namespaces  # member1's, made by the join


def test_logs_follow_streams_lines_as_written(hub: Hub, echo: str) -> None:
    with hub.streamed("logs", "-f", "echo") as follow:
        follow.wait_for(lambda line: "listening" in line)
        for n in range(3):
            marker = f"marker-{time.monotonic_ns()}-{n}"
            assert '"pod": "echo"' in request_echo(hub, marker)
            follow.wait_for(lambda line, m=marker: m in line, timeout=10)
        assert follow.proc.poll() is None  # still following


@pytest.mark.parametrize("websockets", ["true", "false"])
def test_exec_env(hub: Hub, echo: str, websockets: str) -> None:
    env = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": websockets}
    out = hub.kubectl("exec", "echo", "--", "env", env=env).stdout
    assert "HOSTNAME=echo" in out.splitlines(), out
    cat = hub.kubectl("exec", "-i", "echo", "--", "cat", input="through the hub\n", env=env)
    assert cat.stdout == "through the hub\n"
    failed = hub.kubectl("exec", "echo", "--", "sh", "-c", "exit 3", env=env, check=False)
    assert failed.returncode == 3, failed.stderr


def test_shortcuts(hub: Hub, echo: str) -> None:
    common = ("-C", "member1", "--host-kubeconfig", str(hub.kubeconfig), "--host-context", "host")
    env = {**os.environ, "KUBECACHEDIR": str(hub.cache)}
    ran = subprocess.run([sys.executable, "-m", "tether", "exec", "echo", *common, "--", "printenv",
                          "HOSTNAME"], capture_output=True, text=True, timeout=60, env=env)
    assert ran.returncode == 0 and ran.stdout == "echo\n", ran.stdout + ran.stderr
    logs = subprocess.run([sys.executable, "-m", "tether", "logs", "echo", *common, "--tail", "1"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert logs.returncode == 0 and len(logs.stdout.splitlines()) == 1, logs.stdout + logs.stderr


def test_get_watch_streams_an_event(hub: Hub, echo: str) -> None:
    with hub.streamed("get", "pods", "-w", "-o", "custom-columns=NAME:.metadata.name,"
                      "MARK:.metadata.labels.mark") as watching:
        watching.wait_for(lambda line: line.startswith("echo"))
        mark = f"m{time.monotonic_ns()}"
        hub.kubectl("label", "pod", "echo", f"mark={mark}", "--overwrite")
        watching.wait_for(lambda line: line.split() == ["echo", mark], timeout=10)


@pytest.mark.parametrize("websockets", ["true", "false"])
def test_port_forward(hub: Hub, echo: str, websockets: str) -> None:
    with hub.streamed("port-forward", "pod/echo", ":8080",
                      env={"KUBECTL_PORT_FORWARD_WEBSOCKETS": websockets}) as forwarding:
        line = forwarding.wait_for(lambda text: FORWARDING.search(text) is not None)
        found = FORWARDING.search(line)
        assert found is not None
        for n in range(2):
            answer = httpx.get(f"http://127.0.0.1:{found.group(1)}/forwarded-{n}", timeout=10)
            assert answer.status_code == 200 and answer.json()["pod"] == "echo"


def test_unauthenticated_is_401(hub: Hub) -> None:
    for token in (None, "not-a-token"):
        answer = hub.get(PROXY_PATH.format("member1") + "/api/v1/namespaces", token)
        assert answer.status_code == 401
        assert answer.json()["reason"] == "Unauthorized"


def _grant_proxy(hub: Hub, cluster: str, kind: str, name: str, namespace: str = "") -> None:
    """Hub RBAC: `clusters/proxy` on one cluster (resourceNames), as Karmada documents it."""
    subject = {"kind": kind, "name": name}
    if kind == "ServiceAccount":
        subject["namespace"] = namespace
    else:
        subject["apiGroup"] = "rbac.authorization.k8s.io"
    objs = [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": f"proxy-{cluster}"},
             "rules": [{"apiGroups": ["cluster.tether.io"], "resources": ["clusters/proxy"],
                        "resourceNames": [cluster], "verbs": ["*"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": f"proxy-{cluster}-{kind.lower()}-{name}"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": f"proxy-{cluster}"},
             "subjects": [subject]}]
    hub.host("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))


def test_bearer_tokens(hub: Hub, echo: str) -> None:
    admin = hub.get(PROXY_PATH.format("member1") + "/api/v1/namespaces/default/pods", hub.admin_token())
    assert admin.status_code == 200 and [p["metadata"]["name"] for p in admin.json()["items"]] == ["echo"]
    # A token the host cluster accepts (verified by a SelfSubjectReview on the host), for an
    # identity the hub's RBAC lets use member1's proxy.
    hub.host("create", "serviceaccount", "proxy-user", "-n", "default")
    host_token = hub.host("create", "token", "proxy-user", "-n", "default").stdout.strip()
    refused = hub.get(PROXY_PATH.format("member1") + "/version", host_token)
    assert refused.status_code == 403 and refused.json()["reason"] == "Forbidden"
    _grant_proxy(hub, "member1", "ServiceAccount", "proxy-user", "default")
    via_host = poll(lambda: (answer := hub.get(PROXY_PATH.format("member1") + "/version",
                                               host_token)).status_code == 200 and answer,
                    timeout=30, what="the grant to take effect (decisions are cached briefly)")
    assert via_host.json()["major"] == "1"
    # Karmada's group works too.
    karmada = hub.get("/apis/cluster.karmada.io/v1alpha1/clusters/member1/proxy/version", host_token)
    assert karmada.status_code == 200


def test_unknown_cluster_is_404_status(hub: Hub) -> None:
    answer = hub.get(PROXY_PATH.format("nope") + "/api/v1/pods", hub.admin_token())
    assert answer.status_code == 404
    status = answer.json()
    assert status["kind"] == "Status" and status["reason"] == "NotFound"
    assert status["message"] == 'clusters.cluster.tether.io "nope" not found'
    missing = tether("kubeconfig", "nope", "--host-kubeconfig", str(hub.kubeconfig),
                     "--host-context", "host")
    assert missing.returncode == 1 and "no cluster 'nope'" in missing.stderr


def test_unreachable_member_is_503(hub: Hub) -> None:
    dead = free_port()
    objs = [{"apiVersion": "v1", "kind": "Secret",
             "metadata": {"name": "ghost", "namespace": "tether-system"},
             "stringData": {"token": "unused"}},
            {"apiVersion": "cluster.tether.io/v1alpha1", "kind": "Cluster",
             "metadata": {"name": "ghost"},
             "spec": {"syncMode": "Push", "apiEndpoint": f"https://127.0.0.1:{dead}",
                      "secretRef": {"namespace": "tether-system", "name": "ghost"}}}]
    hub.host("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    answer = hub.get(PROXY_PATH.format("ghost") + "/api/v1/pods", hub.admin_token())
    assert answer.status_code == 503
    status = answer.json()
    assert status["reason"] == "ServiceUnavailable"
    assert 'cluster "ghost" is unreachable' in status["message"]
    assert f"127.0.0.1:{dead}" in status["message"]
    out = tether("kubeconfig", "ghost", "--host-kubeconfig", str(hub.kubeconfig),
                 "--host-context", "host", "--out", str(hub.data_dir / "ghost.yaml"))
    ok(out)
    seen = hub.kubectl("get", "--raw", "/version", config=hub.data_dir / "ghost.yaml", check=False)
    assert seen.returncode != 0 and 'cluster "ghost" is unreachable' in seen.stderr


def test_authorisation_by_hub_rbac(hub: Hub) -> None:
    """Who may use a cluster's proxy is the hub's RBAC on `clusters/proxy` (resourceNames)."""
    from tether.app.clusterproxy import HubPki

    secret = json.loads(hub.host("get", "secret", "-n", "tether-system",
                                 "tether-cluster-proxy-pki", "-o", "json").stdout)["data"]
    pki = HubPki(base64.b64decode(secret["ca.crt"]), base64.b64decode(secret["ca.key"]), "")
    certs: dict[str, tuple[Path, Path]] = {}
    for user, groups in (("alice", ("devs",)), ("bob", ())):
        cert, key = pki.issue(user, organizations=groups)
        certs[user] = (hub.data_dir / f"{user}.crt", hub.data_dir / f"{user}.key")
        certs[user][0].write_bytes(cert)
        certs[user][1].write_bytes(key)

    def status(user: str) -> int:
        context = hub.ca()
        context.load_cert_chain(*certs[user])
        url = hub.proxy_url + PROXY_PATH.format("member1") + "/version"
        return httpx.get(url, verify=context, timeout=30).status_code

    assert status("alice") == 403 and status("bob") == 403  # nobody without a grant
    _grant_proxy(hub, "member1", "Group", "devs")
    poll(lambda: status("alice") == 200, timeout=30, what="alice allowed")
    assert status("bob") == 403
    # the kubeconfig's user (the host admin) is in system:masters: always allowed
    hub.kubectl("get", "--raw", "/version")


def _dials(health_port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{health_port}/metrics", timeout=10).text
    found = re.search(r"^konnectivity_network_proxy_server_dial_duration_seconds_count (\S+)$", text,
                      re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_pull_member_through_the_tunnel(hub: Hub, echo: str) -> None:
    agent_port, admin, agent_health, agent_admin = (free_port() for _ in range(4))
    server = Proc([sys.executable, "-m", "tether", "tunnel", "server", "--allow-insecure",
                   "--server-bind-address", "127.0.0.1", "--server-port", str(hub.tunnel_frontend),
                   "--agent-bind-address", "127.0.0.1", "--agent-port", str(agent_port),
                   "--health-bind-address", "127.0.0.1", "--health-port", str(hub.tunnel_health),
                   "--admin-port", str(admin)])
    endpoint = hub.host("get", "cluster.cluster.tether.io", "member1",
                        "-o", "jsonpath={.spec.apiEndpoint}").stdout.strip()
    with server:
        poll(lambda: _health_ok(hub.tunnel_health), timeout=20, what="tunnel server health")
        pulled = {"apiVersion": "cluster.tether.io/v1alpha1", "kind": "Cluster",
                  "metadata": {"name": "pulled"},
                  "spec": {"syncMode": "Pull", "apiEndpoint": endpoint,
                           "secretRef": {"namespace": "tether-system", "name": "member1"}}}
        hub.host("apply", "-f", "-", input=json.dumps(pulled))
        config = hub.data_dir / "pulled.yaml"
        ok(tether("kubeconfig", "pulled", "--host-kubeconfig", str(hub.kubeconfig),
                  "--host-context", "host", "--out", str(config)))
        # No agent yet: the tunnel has no backend, so the proxy answers 503.
        before = hub.kubectl("get", "--raw", "/version", config=config, check=False)
        assert before.returncode != 0 and 'cluster "pulled" is unreachable' in before.stderr
        agent = Proc([sys.executable, "-m", "tether", "tunnel", "agent", "--allow-insecure",
                      "--proxy-server-host", "127.0.0.1", "--proxy-server-port", str(agent_port),
                      "--health-server-host", "127.0.0.1", "--health-server-port", str(agent_health),
                      "--admin-server-port", str(agent_admin),
                      "--agent-identifiers", "host=127.0.0.1",
                      "--drain-timeout", "0"])  # draining: tests/security/test_tunnel_security.py
        with agent:
            poll(lambda: hub.kubectl("get", "--raw", "/version", config=config,
                                     check=False).returncode == 0,
                 timeout=30, interval=0.5, what="the pull member through the tunnel")
            dials = _dials(hub.tunnel_health)
            assert dials >= 1
            table = hub.kubectl("get", "pods", config=config).stdout
            assert re.search(r"^echo\s+1/1\s+Running", table, re.MULTILINE), table
            out = hub.kubectl("exec", "echo", "--", "printenv", "HOSTNAME", config=config).stdout
            assert out == "echo\n"
            with hub.streamed("logs", "-f", "echo", config=config) as follow:
                follow.wait_for(lambda line: "listening" in line)
                marker = f"tunnel-{time.monotonic_ns()}"
                request_echo(hub, marker, config=config)
                follow.wait_for(lambda line: marker in line, timeout=10)
            assert _dials(hub.tunnel_health) > dials  # new connections went through the tunnel
    hub.host("delete", "cluster.cluster.tether.io", "pulled", "--ignore-not-found")


def _health_ok(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False



def test_issued_kubeconfigs_stay_under_their_data_dir(hub: Hub, tmp_path: Path) -> None:
    """`--data-dir` (else `$TETHER_HOME`) is the one root: two roots never see each other's files."""
    home, given, from_env = tmp_path / "home", tmp_path / "given", tmp_path / "from-env"
    base = {k: v for k, v in os.environ.items() if k not in ("TETHER_HOME", "XDG_DATA_HOME")}

    def issue(*extra: str, env: dict[str, str]) -> Path:
        result = subprocess.run([sys.executable, "-m", "tether", "kubeconfig", "member1", "--kubeconfig",
                                 str(hub.kubeconfig), "--context", "host", *extra],
                                capture_output=True, text=True, timeout=90, env={**base, **env})
        return Path(ok(result).strip())

    assert issue("--data-dir", str(given), env={"HOME": str(home)}) == given / "kubeconfigs" / "host--member1.yaml"
    assert issue(env={"HOME": str(home), "TETHER_HOME": str(from_env)}) \
        == from_env / "kubeconfigs" / "host--member1.yaml"
    assert issue(env={"HOME": str(home)}) == home / ".local" / "share" / "tether" / "kubeconfigs" / "host--member1.yaml"
    assert sorted(p.name for p in given.rglob("*")) == ["host--member1.yaml", "kubeconfigs"]
    assert sorted(p.name for p in from_env.rglob("*")) == ["host--member1.yaml", "kubeconfigs"]
