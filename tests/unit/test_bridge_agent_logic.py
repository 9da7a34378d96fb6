"""The bridge agent's pure parts: destination checks, where it listens, route names, its objects."""

from __future__ import annotations

import pytest

from tether.bridge import agent
from tether.bridge.agent import listen_hosts, refusal, valid_route
from tether.bridge.agentpods import AgentError, agent_objects, namespace_object


@pytest.mark.parametrize(("addresses", "port", "refused"), [
    (["10.0.0.5"], 80, None),
    (["10.0.0.5"], 7700, None),  # another pod's 7700 is fine
    (["127.0.0.1"], 7700, "the bridge agent itself"),
    (["::1"], 7701, "the bridge agent itself"),
    (["10.1.1.1"], 7700, "the bridge agent itself"),  # our own pod IP
    (["10.1.1.1"], 8080, None),
    (["0.0.0.0"], 80, "not a destination"),
    (["::"], 80, "not a destination"),
    (["10.0.0.5", "127.0.0.1"], 7701, "the bridge agent itself"),
    (["fe80::1%eth0"], 80, None),
])
def test_refusal(addresses: list[str], port: int, refused: str | None) -> None:
    reason = refusal(addresses, port, (7700, 7701), ("10.1.1.1",))
    assert (reason is None) if refused is None else (reason is not None and refused in reason)


@pytest.mark.parametrize(("host", "pod_ip", "expected"), [
    ("", "", ("127.0.0.1", False)),  # a real pod: only the kubelet's port-forward reaches the mux port
    ("", "127.50.1.7", ("127.50.1.7", True)),  # pods may share the machine's network
    ("127.0.0.1", "127.50.1.7", ("127.0.0.1", False)),  # explicit wins
])
def test_listen_hosts(host: str, pod_ip: str, expected: tuple[str, bool]) -> None:
    assert listen_hosts(host, pod_ip) == expected


@pytest.mark.parametrize(("route", "ok"), [
    ("naison-e4be", True), ("a.b_c", True), ("", False), ("a b", False), ("x" * 254, False), ("a/b", False),
])
def test_route_names(route: str, ok: bool) -> None:
    assert valid_route(route) is ok


def test_agent_objects_are_restricted_and_labelled() -> None:
    account, deployment = agent_objects("abc123", image="ghcr.io/tether-dev/tether:9", cluster_dns="10.96.0.10")
    labels = {"app.kubernetes.io/managed-by": "tether", "tether.io/bridge-session": "abc123",
              "app.kubernetes.io/component": "bridge-agent"}
    assert account["kind"] == "ServiceAccount" and account["metadata"]["labels"] == labels
    assert deployment["spec"]["selector"]["matchLabels"] == labels
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["args"] == ["bridge", "agent", "--listen", ":7700", "--control", ":7701",
                                 "--cluster-dns", "10.96.0.10"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"] == {"drop": ["ALL"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": 7701}
    assert "hostNetwork" not in pod and "privileged" not in security
    assert pod["automountServiceAccountToken"] is False  # the agent never calls the API
    assert namespace_object("tether-bridge")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_existing_service_account_is_used_not_made() -> None:
    (deployment,) = agent_objects("abc", service_account="router")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "router"


@pytest.mark.parametrize("session", ["", "UPPER", "a_b", "x" * 41, "-a"])
def test_bad_session_names(session: str) -> None:
    with pytest.raises(AgentError):
        agent_objects(session)


class _Link:
    """Stands in for a MuxConnection: ReverseRoutes looks only at `lost`."""

    def __init__(self) -> None:
        self.lost = False


def test_a_dropped_clients_routes_are_reserved_for_its_key_for_a_while() -> None:
    from typing import Any

    from tether.bridge.agent import ReverseRoutes, RouteTaken

    now = [100.0]
    routes = ReverseRoutes(reclaim_s=60, clock=lambda: now[0])
    alice, mallory, alice_again, later = _Link(), _Link(), _Link(), _Link()
    conn: Any = alice
    routes.register("alice", conn, "k1")
    alice.lost = True
    with pytest.raises(RouteTaken):  # lost, not yet dropped
        routes.register("alice", mallory, "k2")  # type: ignore[arg-type]
    routes.drop_connection(conn)
    with pytest.raises(RouteTaken):
        routes.register("alice", mallory, "")  # type: ignore[arg-type]
    routes.register("alice", alice_again, "k1")  # type: ignore[arg-type]
    assert "alice" in routes
    alice_again.lost = True
    routes.drop_connection(alice_again)  # type: ignore[arg-type]
    now[0] += 61  # never came back: the name is free again
    routes.register("alice", later, "k3")  # type: ignore[arg-type]
    assert "alice" in routes


@pytest.mark.parametrize(("peer", "allowed"), [
    ("127.0.0.1:51000", True),
    ("[::1]:51000", True),
    ("127.33.1.5:4000", True),  # all of 127/8 is this host's loopback
    ("10.244.1.7:51000", False),  # another pod
    ("192.168.1.9:80", False),
    ("", False),  # unknown peer: refuse
    ("not-an-address", False),
])
def test_only_loopback_callers_may_use_the_control_port(peer: str, allowed: bool) -> None:
    assert agent.control_allowed(peer) is allowed
