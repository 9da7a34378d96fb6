"""`tether connect`, `tether bridge status` and `tether quit` against a local cluster (rootless mode).

The namespace holds the todo sample app's five Services (`stats-queue` 5672, `frontend` 80,
`stats-api` 80, `todos-db` 27017, `stats-cache` 6379) in front of echo pods, a second namespace
one more.
`tether connect` runs as a process with its own state root, a temporary hosts file and its DNS
server on a free port:
- each Service answers on its 127.1.1.x address with its own port, by address and by the names
  in the hosts file and from the DNS server (`dig @...`); the other namespace's as `svc.other`;
- a Service created during the session is announced and answers, without reconnecting;
- `tether bridge status` shows the mappings and the bytes that went through;
- `tether env deploy/X --use-kubernetes-service-environment-variables` points the Service
  variables at the names and local ports;
- `tether quit` leaves the hosts file byte-identical to before, no state, no listener, no agent
  (Deployment or namespace) in the cluster;
- a session killed with SIGKILL leaves its block and agent; the next `connect` removes them, and
  so does `quit`;
- the Python API (`tether.bridge.connect`) through the `tether_connect` fixture: addresses,
  the environment rewritten; the agent pod deleted mid-session and the session recovering;
- two clusters in one session: their own address blocks, `svc.ns.<cluster>` names.
Traffic goes through the session's bridge agent (a port-forward through the API server).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_util import Collected, manifest, poll, unique

pytestmark = pytest.mark.e2e

TIMEOUT_S = 90.0
TODO_APP_SERVICES = {"stats-queue": 5672, "frontend": 80, "stats-api": 80, "todos-db": 27017, "stats-cache": 6379}
AVAILABLE = re.compile(r"Service '([^']+)' is available on (127\.1\.\d+\.\d+):(\d+)")
DNS_LINE = re.compile(r"DNS for these names on (\S+) port (\d+)")
HOSTS_BEFORE = b"127.0.0.1\tlocalhost\r\n# the user's own line, kept as it is\n::1 ip6-localhost"


def echo_app(namespace: str, services: dict[str, int]) -> str:
    objs: list[dict[str, Any]] = [{
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "echo", "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "echo"}},
                 "template": {"metadata": {"labels": {"app": "echo"}},
                              "spec": {"containers": [{"name": "echo", "image": "tether/echo",
                                                       "ports": [{"containerPort": 8080}]}]}}}}]
    for name, port in services.items():
        objs.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
                     "spec": {"selector": {"app": "echo"},
                              "ports": [{"name": "main", "port": port, "targetPort": 8080}]}})
    return manifest(*objs)


def http_get(host: str, port: int) -> str:
    with urllib.request.urlopen(f"http://{host}:{port}/", timeout=10) as response:
        return str(response.read().decode(errors="replace"))


def answers(host: str, port: int) -> bool:
    try:
        return "echo" in http_get(host, port)
    except OSError:
        return False


def hosts_names(path: Path) -> dict[str, str]:
    names: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("127.1."):
            address, *aliases = line.split()
            names.update(dict.fromkeys(aliases, address))
    return names


def dig(server: str, port: int, name: str) -> str:
    result = subprocess.run(["dig", f"@{server}", "-p", str(port), name, "+short", "+time=5", "+tries=2"],
                            capture_output=True, text=True, timeout=30)
    return result.stdout.strip()


class Session(Collected):
    def __init__(self, env: dict[str, str], *args: str) -> None:
        super().__init__([sys.executable, "-m", "tether", "connect", *args], env=env, merge_stderr=True)

    def mapped(self) -> dict[str, tuple[str, int]]:
        return {m.group(1): (m.group(2), int(m.group(3))) for line in self.snapshot()
                if (m := AVAILABLE.search(line))}

    def wait_mapped(self, count: int) -> None:
        try:
            poll(lambda: len(self.mapped()) >= count and self.running(), timeout=TIMEOUT_S, interval=0.2,
                 what=f"{count} Services announced")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; output:\n" + "\n".join(self.snapshot())) from None

    def dns(self) -> tuple[str, int]:
        found = next((m for line in self.snapshot() if (m := DNS_LINE.search(line))), None)
        assert found, "\n".join(self.snapshot())
        return found.group(1), int(found.group(2))


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TETHER_HOME": str(tmp_path / "state")}


@pytest.fixture
def hosts(tmp_path: Path) -> Path:
    path = tmp_path / "hosts"
    path.write_bytes(HOSTS_BEFORE)
    return path


@pytest.fixture
def app_namespaces(clusters: Any, ns: str) -> Iterator[tuple[str, str]]:
    other = unique("other")
    clusters.kubectl("create", "namespace", other)
    clusters.kubectl("apply", "-f", "-", input=echo_app(ns, TODO_APP_SERVICES))
    clusters.kubectl("apply", "-f", "-", input=echo_app(other, {"inventory": 8000}))
    for namespace in (ns, other):
        clusters.kubectl("rollout", "status", "-n", namespace, "deploy/echo", "--timeout=90s")
    yield ns, other
    clusters.kubectl("delete", "namespace", other, "--wait=false", check=False)


def tether(env: dict[str, str], *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def agents(clusters: Any) -> list[str]:
    """The bridge agents' Deployments in the cluster (none once every session is gone)."""
    listed = clusters.kubectl_json("get", "deployments", "-A", "-l", "app.kubernetes.io/component=bridge-agent")
    return [f"{d['metadata']['namespace']}/{d['metadata']['name']}" for d in listed["items"]]


def start(clusters: Any, env: dict[str, str], hosts: Path, *namespaces: str) -> Session:
    args = ["--kubeconfig", str(clusters.kubeconfig), "--context", clusters.names[0], "--hosts-file", str(hosts),
            "--dns", "--dns-port", "0"]
    for namespace in namespaces:
        args += ["--namespace", namespace]
    return Session(env, *args)


def test_connect_maps_services_by_address_and_name(clusters: Any, app_namespaces: tuple[str, str],
                                                   home: dict[str, str], hosts: Path) -> None:
    ns, other = app_namespaces
    session = start(clusters, home, hosts, ns, other)
    try:
        session.wait_mapped(6)
        mapped = session.mapped()
        # B2K's layout: 127.1.1.1 upwards, the Service's own port
        assert {name: port for name, (_, port) in mapped.items()} == {**TODO_APP_SERVICES, f"inventory.{other}": 8000}
        assert sorted(a for a, _ in mapped.values()) == [f"127.1.1.{i}" for i in range(1, 7)]
        names = hosts_names(hosts)
        dns_host, dns_port = session.dns()
        for name, port in TODO_APP_SERVICES.items():
            address, _ = mapped[name]
            poll(lambda a=address, p=port: answers(a, p), timeout=TIMEOUT_S, what=f"{name} on {address}:{port}")
            for alias in (name, f"{name}.{ns}", f"{name}.{ns}.svc", f"{name}.{ns}.svc.cluster.local"):
                assert names[alias] == address
            assert dig(dns_host, dns_port, name) == address
            assert dig(dns_host, dns_port, f"{name}.{ns}.svc.cluster.local") == address
        other_address, _ = mapped[f"inventory.{other}"]
        assert names[f"inventory.{other}"] == other_address and "inventory" not in names
        assert dig(dns_host, dns_port, f"inventory.{other}") == other_address
        assert answers(names[f"inventory.{other}"], 8000)

        # a Service created now appears without reconnecting
        clusters.kubectl("apply", "-f", "-", input=echo_app(ns, {"late-comer": 8081}).split("---")[-1])
        poll(lambda: "late-comer" in session.mapped(), timeout=TIMEOUT_S, what="late-comer announced")
        late_address, late_port = session.mapped()["late-comer"]
        assert (late_address, late_port) == ("127.1.1.7", 8081)
        poll(lambda: answers(late_address, late_port), timeout=TIMEOUT_S, what="late-comer answers")
        poll(lambda: hosts_names(hosts).get("late-comer") == late_address, timeout=TIMEOUT_S,
             what="late-comer in the hosts file")

        # and one deleted disappears
        clusters.kubectl("delete", "service", "-n", ns, "late-comer")
        poll(lambda: "late-comer" not in hosts_names(hosts), timeout=TIMEOUT_S, what="late-comer removed")

        status = json.loads(tether(home, "bridge", "status", "-o", "json"))
        assert len(status) == 1 and status[0]["alive"]
        by_name = {m["display"]: m for m in status[0]["mappings"]}
        assert by_name["frontend"]["bytesIn"] > 0 and by_name["frontend"]["connections"] >= 1
        text = tether(home, "bridge", "status")
        assert "stats-queue" in text and clusters.names[0] in text

        env_out = tether(home, "env", "deploy/echo", "-n", ns, "--kubeconfig", str(clusters.kubeconfig),
                         "--context", clusters.names[0], "--use-kubernetes-service-environment-variables")
        assert "TODOS_DB_PORT=tcp://todos-db:27017" in env_out
        assert "STATS_QUEUE_PORT_5672_TCP_ADDR=stats-queue" in env_out
        assert "STATS_QUEUE_SERVICE_HOST=stats-queue" in env_out

        assert len(agents(clusters)) == 1  # traffic went through the session's bridge agent
        assert "(connected)" in text
        out = tether(home, "quit")
        assert "stopping session" in out
        assert session.proc.wait(timeout=TIMEOUT_S) == 0
    finally:
        session.stop()
    assert hosts.read_bytes() == HOSTS_BEFORE
    assert agents(clusters) == []
    poll(lambda: clusters.kubectl("get", "namespace", "tether-bridge", check=False).returncode != 0,
         timeout=TIMEOUT_S, what="the agent's namespace removed")
    assert not list((Path(home["TETHER_HOME"]) / "bridge" / "sessions").glob("*.json"))
    with socket.socket() as probe:
        assert probe.connect_ex(mapped["frontend"]) != 0  # nothing listens any more


def test_killed_session_is_cleaned_by_the_next(clusters: Any, app_namespaces: tuple[str, str],
                                               home: dict[str, str], hosts: Path) -> None:
    ns, _ = app_namespaces
    first = start(clusters, home, hosts, ns)
    first.wait_mapped(5)
    poll(lambda: len(hosts_names(hosts)) >= 20, timeout=TIMEOUT_S, what="the first session's hosts block")
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait(timeout=TIMEOUT_S)
    assert f"pid={first.proc.pid}" in hosts.read_text()  # SIGKILL: nothing could clean up

    second = start(clusters, home, hosts, ns)
    try:
        second.wait_mapped(5)
        assert any(f"cleaned up after session {first.proc.pid}" in line for line in second.snapshot())
        assert any("removed the bridge agent" in line for line in second.snapshot())
        assert len(agents(clusters)) == 1  # the second session's own
        text = hosts.read_text()
        assert f"pid={first.proc.pid}" not in text and f"pid={second.proc.pid}" in text
        os.kill(second.proc.pid, signal.SIGKILL)
        second.proc.wait(timeout=TIMEOUT_S)
    finally:
        second.stop()
    out = tether(home, "quit")
    assert f"session {second.proc.pid}" in out and "removed the bridge agent" in out
    assert hosts.read_bytes() == HOSTS_BEFORE
    assert agents(clusters) == []


pytest_plugins = ["tether.bridge.pytest_plugin"]


def test_python_api_and_fixture(clusters: Any, app_namespaces: tuple[str, str], tether_connect: Any) -> None:
    ns, other = app_namespaces
    session = tether_connect(kubeconfig=clusters.kubeconfig, context=clusters.names[0], namespaces=[ns, other])
    assert session.address("todos-db") == ("127.1.1.5", 27017)  # (namespace, name) order: todos-db is 5th
    poll(lambda: answers(*session.address("frontend")), timeout=TIMEOUT_S, what="frontend through the API")
    assert answers(*session.address("inventory", namespace=other))
    env = session.environment("deploy/echo").as_dict()
    assert env["TODOS_DB_SERVICE_HOST"] == "todos-db" and env["TODOS_DB_SERVICE_PORT"] == "27017"
    names = {m.name for m in session.mappings}
    assert names == {*TODO_APP_SERVICES, "inventory"}


def test_agent_pod_deleted_mid_session_recovers(clusters: Any, app_namespaces: tuple[str, str],
                                                tether_connect: Any) -> None:
    ns, _ = app_namespaces
    session = tether_connect(kubeconfig=clusters.kubeconfig, context=clusters.names[0], namespaces=[ns])
    poll(lambda: answers(*session.address("frontend")), timeout=TIMEOUT_S, what="frontend before")
    before = clusters.kubectl_json("get", "pods", "-n", "tether-bridge", "-l",
                                   "app.kubernetes.io/component=bridge-agent")["items"]
    assert len(before) == 1
    clusters.kubectl("delete", "pod", "-n", "tether-bridge", before[0]["metadata"]["name"], "--wait=false")
    # the Deployment makes a new pod; once the old one is gone the channel reconnects to the new
    # one by itself, with the same addresses
    old = before[0]["metadata"]["name"]
    poll(lambda: clusters.kubectl("get", "pod", "-n", "tether-bridge", old, check=False).returncode != 0,
         timeout=TIMEOUT_S, what="the old agent pod gone")
    poll(lambda: answers(*session.address("frontend")), timeout=TIMEOUT_S, what="frontend through the new agent pod")
    assert session.address("frontend") == ("127.1.1.1", 80)


def test_two_clusters_in_one_session(clusters: Any, ns: str, home: dict[str, str], hosts: Path) -> None:
    first, second = clusters.names[:2]
    clusters.kubectl("create", "namespace", ns, context=second)
    try:
        for context, services in ((first, {"todos-db": 27017}), (second, {"todos-db": 27017, "billing": 8000})):
            clusters.kubectl("apply", "-f", "-", input=echo_app(ns, services), context=context)
            clusters.kubectl("rollout", "status", "-n", ns, "deploy/echo", "--timeout=90s", context=context)
        session = Session(home, "--kubeconfig", str(clusters.kubeconfig), "--context", first, "--context", second,
                          "-n", ns, "--hosts-file", str(hosts), "--no-dns")
        try:
            session.wait_mapped(3)
            mapped = session.mapped()
            # the first cluster's block from 127.1.1.1, the second's from 127.1.9.1
            assert mapped["todos-db"] == ("127.1.1.1", 27017)
            assert mapped[f"billing.{ns}.{second}"] == ("127.1.9.1", 8000)
            assert mapped[f"todos-db.{ns}.{second}"] == ("127.1.9.2", 27017)
            poll(lambda: len(hosts_names(hosts)) >= 7, timeout=TIMEOUT_S, what="the hosts block")
            names = hosts_names(hosts)
            assert names["todos-db"] == names[f"todos-db.{ns}.{first}"] == "127.1.1.1"
            assert names[f"todos-db.{ns}.{second}"] == "127.1.9.2" and "billing" not in names
            for name in (f"todos-db.{ns}.{first}", f"todos-db.{ns}.{second}", f"billing.{ns}.{second}"):
                port = 8000 if name.startswith("billing") else 27017
                poll(lambda n=name, p=port: answers(names[n], p), timeout=TIMEOUT_S, what=f"{name} answers")
            tether(home, "quit")
            assert session.proc.wait(timeout=TIMEOUT_S) == 0
        finally:
            session.stop()
        assert hosts.read_bytes() == HOSTS_BEFORE
    finally:
        clusters.kubectl("delete", "namespace", ns, "--wait=false", context=second, check=False)
