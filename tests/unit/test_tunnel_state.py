"""The tunnel's state machines and routing, table-tested without I/O."""

from __future__ import annotations

import random

import pytest

from tether.tunnel import packets as p
from tether.tunnel.routing import (
    IdentifierError,
    Router,
    parse_identifiers,
    parse_strategies,
    remove_port_from_host,
)
from tether.tunnel.state import (
    AgentState,
    CancelDial,
    CloseTarget,
    Credit,
    EndFrontend,
    ReceiveWindow,
    Send,
    SendWindow,
    ServerState,
    StartDial,
    ToAgent,
    ToFrontend,
    WriteTarget,
)

R = 1234605616436508552


@pytest.mark.parametrize(("address", "host"), [
    ("a:1", "a"), ("1.2.3.4:5", "1.2.3.4"), ("[fd00::1]:443", "fd00::1"), ("fd00::1", "fd00::1"),
    ("host", "host"), ("Host.Example:80", "Host.Example"),
])
def test_remove_port_from_host(address: str, host: str) -> None:
    assert remove_port_from_host(address) == host


def test_identifiers() -> None:
    ids = parse_identifiers("host=a&host=b&ipv4=1.2.3.4&ipv6=fd00::1&cidr=10.0.0.0/8&default-route=true")
    assert ids.hosts == ("a", "b", "1.2.3.4", "fd00::1")
    assert ids.cidrs == ("10.0.0.0/8",) and ids.default_route
    assert not parse_identifiers("default-route=false").default_route
    assert parse_identifiers("").hosts == ()
    assert parse_identifiers("zone=x&host=a").hosts == ("a",)  # the server ignores unknown keys
    with pytest.raises(IdentifierError):
        parse_identifiers("zone=x", strict=True)
    with pytest.raises(IdentifierError):
        parse_identifiers("host=a;host=b")
    with pytest.raises(IdentifierError):
        parse_identifiers("default-route=maybe")


def test_strategies_parse() -> None:
    assert parse_strategies("destHost,default") == ("destHost", "default")
    for bad in ("", "destCIDR", "desthost"):
        with pytest.raises(ValueError):
            parse_strategies(bad)


def router(strategies: str, agents: dict[int, tuple[str, str]]) -> Router:
    r = Router(parse_strategies(strategies), random.Random(7))
    for backend, (agent_id, ids) in agents.items():
        r.add(backend, agent_id, parse_identifiers(ids))
    return r


@pytest.mark.parametrize(("strategies", "address", "expected"), [
    ("destHost", "10.0.0.1:6443", 1),
    ("destHost", "member2.example:443", 2),
    ("destHost", "MEMBER2.example:443", None),  # exact, case-sensitive
    ("destHost", "10.0.0.9:6443", None),
    ("destHost,defaultRoute", "10.0.0.9:6443", 3),
    ("defaultRoute", "anything:1", 3),
    ("destHost,default", "[fd00::1]:443", 2),
])
def test_strategy_selection(strategies: str, address: str, expected: int | None) -> None:
    r = router(strategies, {1: ("a", "host=10.0.0.1"),
                            2: ("b", "host=member2.example&ipv6=fd00::1"),
                            3: ("c", "default-route=true")})
    assert r.choose(address) == expected


def test_draining_preference_and_fallback() -> None:
    r = router("destHost", {1: ("a", "host=x"), 2: ("b", "host=x")})
    r.set_draining(1)
    assert r.choose("x:1") == 2
    r.set_draining(2)
    assert r.choose("x:1") == 1
    r.remove(1)
    r.remove(2)
    assert r.choose("x:1") is None and not r.ready()


def test_duplicate_agent_id_uses_first_backend() -> None:
    r = router("default", {1: ("a", ""), 2: ("a", "")})
    assert {r.choose("x:1") for _ in range(20)} == {1}
    r.remove(1)
    assert r.choose("x:1") == 2


def test_readiness_follows_first_strategy() -> None:
    assert not router("destHost,default", {1: ("a", "")}).ready()
    assert router("default,destHost", {1: ("a", "")}).ready()


# -- server ------------------------------------------------------------------------------------

def server(timeout_s: float = 0.0) -> ServerState:
    s = ServerState(router("default", {}), dial_timeout_s=timeout_s)
    s.agent_connected(1, "agent-1", parse_identifiers(""))
    s.frontend_opened(10)
    return s


def open_conn(s: ServerState, frontend: int = 10, random_: int = R, cid: int = 1) -> None:
    assert s.frontend_packet(frontend, p.dial_req("t:1", random_)) == [ToAgent(1, p.dial_req("t:1", random_))]
    assert s.agent_packet(1, p.dial_rsp(random_, connect_id=cid)) == [
        ToFrontend(frontend, p.dial_rsp(random_, connect_id=cid))]


def test_server_happy_path_and_client_close() -> None:
    s = server()
    open_conn(s)
    assert s.frontend_packet(10, p.data(1, b"x")) == [ToAgent(1, p.data(1, b"x"))]
    assert s.agent_packet(1, p.data(1, b"y")) == [ToFrontend(10, p.data(1, b"y"))]
    assert s.agent_packet(1, p.window(1, 100)) == [Credit(10, 100)]
    assert s.frontend_packet(10, p.close_req(1)) == [ToAgent(1, p.close_req(1))]
    assert s.agent_packet(1, p.close_rsp(1)) == [ToFrontend(10, p.close_rsp(1)), EndFrontend(10)]
    assert s.frontend_closed(10) == []
    assert not s.pending and not s.established and not s.frontends


def test_server_no_agent() -> None:
    s = ServerState(Router())
    s.frontend_opened(10)
    assert s.frontend_packet(10, p.dial_req("t:1", R)) == [
        ToFrontend(10, p.dial_rsp(R, error="No agent available")), EndFrontend(10)]
    assert s.failures.counts == {"no_agent": 1}


def test_server_single_use_and_mismatched_ids() -> None:
    s = server()
    open_conn(s)
    assert s.frontend_packet(10, p.dial_req("t:1", 5))[0].packet.payload.error  # type: ignore[union-attr]
    assert s.frontend_packet(10, p.data(2, b"x")) == [
        ToAgent(1, p.close_req(1)), ToFrontend(10, p.close_rsp(1, "mismatched connection IDs")),
        EndFrontend(10)]
    assert not s.established


def test_server_dial_error_is_forwarded() -> None:
    s = server()
    s.frontend_packet(10, p.dial_req("t:1", R))
    rsp = p.dial_rsp(R, error="dial tcp t:1: connect: connection refused")
    assert s.agent_packet(1, rsp) == [ToFrontend(10, rsp), EndFrontend(10)]
    assert not s.pending


def test_server_late_and_unknown_dial_responses_close_the_agent_connection() -> None:
    s = server()
    s.frontend_packet(10, p.dial_req("t:1", R))
    assert s.frontend_closed(10) == [ToAgent(1, p.dial_cls(R))]
    assert not s.pending
    assert s.agent_packet(1, p.dial_rsp(R, connect_id=4)) == [ToAgent(1, p.close_req(4))]
    assert s.agent_packet(1, p.dial_rsp(99)) == []


def test_server_dial_cancel_from_frontend() -> None:
    s = server()
    s.frontend_packet(10, p.dial_req("t:1", R))
    assert s.frontend_packet(10, p.dial_cls(R)) == [ToAgent(1, p.dial_cls(R)), EndFrontend(10)]
    assert not s.pending


def test_server_data_for_unknown_connection_closes_it_at_the_agent() -> None:
    s = server()
    assert s.agent_packet(1, p.data(3, b"x")) == [ToAgent(1, p.close_req(3))]
    assert s.agent_packet(1, p.data(0, b"x")) == []


def test_server_frontend_gone_closes_established() -> None:
    s = server()
    open_conn(s)
    assert s.frontend_closed(10) == [ToAgent(1, p.close_req(1))]
    assert not s.established
    assert s.agent_packet(1, p.close_rsp(1)) == []


def test_server_agent_gone_fails_pending_and_closes_established() -> None:
    s = server()
    open_conn(s)
    s.frontend_opened(11)
    s.frontend_packet(11, p.dial_req("t:1", 77))
    assert s.agent_disconnected(1) == [
        ToFrontend(10, p.close_rsp(1)), EndFrontend(10),
        ToFrontend(11, p.dial_rsp(77, error="agent disconnected")), EndFrontend(11)]
    assert not s.pending and not s.established and not s.backends
    assert s.agent_packet(1, p.data(1, b"late")) == []


def test_server_dial_timeout() -> None:
    s = server(timeout_s=5.0)
    s.frontend_packet(10, p.dial_req("t:1", R), now_s=100.0)
    assert s.expire(104.9) == []
    assert s.expire(105.0) == [
        ToFrontend(10, p.dial_rsp(R, error="timed out waiting for backend dial")),
        EndFrontend(10), ToAgent(1, p.dial_cls(R))]
    assert not s.pending


def test_server_agent_dial_cls_and_drain() -> None:
    s = server()
    s.frontend_packet(10, p.dial_req("t:1", R))
    assert s.agent_packet(1, p.dial_cls(R)) == [ToFrontend(10, p.dial_cls(R)), EndFrontend(10)]
    s.agent_packet(1, p.drain())
    assert s.router.is_draining(1)


def test_server_close_before_dial() -> None:
    s = server()
    assert s.frontend_packet(10, p.close_req(0)) == [
        ToFrontend(10, p.close_rsp(0, "backend uninitialized")), EndFrontend(10)]


def test_server_many_pending_dials_are_all_cleaned() -> None:
    s = server(timeout_s=1.0)
    for i in range(1, 1001):
        s.frontend_opened(100 + i)
        s.frontend_packet(100 + i, p.dial_req("t:1", i), now_s=0.0)
    for i in range(1, 501):
        s.agent_packet(1, p.dial_rsp(i, error="refused"))
        s.frontend_closed(100 + i)
    s.expire(2.0)
    for i in range(501, 1001):
        s.frontend_closed(100 + i)
    assert not s.pending and not s.established and not s.backends[1].pending
    assert set(s.frontends) == {10}


# -- agent -------------------------------------------------------------------------------------

def test_agent_dial_data_close() -> None:
    a = AgentState()
    assert a.server_packet(p.dial_req("t:1", R)) == [StartDial(1, "tcp", "t:1")]
    assert a.dial_done(1) == [Send(p.dial_rsp(R, connect_id=1))]
    assert a.server_packet(p.data(1, b"x")) == [WriteTarget(1, b"x")]
    assert a.server_packet(p.close_req(1)) == [CloseTarget(1)]
    assert a.server_packet(p.close_req(1)) == []
    assert a.target_closed(1) == [Send(p.close_rsp(1))]
    assert a.server_packet(p.close_req(1)) == [Send(p.close_rsp(1, "Unknown connectID"))]
    assert a.server_packet(p.data(1, b"x")) == [Send(p.close_rsp(1, "unrecognized connectID"))]


def test_agent_ids_are_consumed_by_failures() -> None:
    a = AgentState()
    a.server_packet(p.dial_req("t:1", 1))
    assert a.dial_done(1, "dial tcp t:1: connect: connection refused") == [
        Send(p.dial_rsp(1, error="dial tcp t:1: connect: connection refused"))]
    assert a.server_packet(p.dial_req("t:1", 2)) == [StartDial(2, "tcp", "t:1")]
    assert a.server_packet(p.dial_req("t:1", 3, protocol="udp")) == [
        Send(p.dial_rsp(3, error="dial udp t:1: unknown network udp"))]
    assert a.next_connect_id == 3


def test_agent_dial_cancel_and_remote_close() -> None:
    a = AgentState()
    a.server_packet(p.dial_req("t:1", R))
    assert a.server_packet(p.dial_cls(R)) == [CancelDial(1)]
    assert a.dial_done(1) == [CloseTarget(1)]  # connected anyway: closed, nothing sent
    a.server_packet(p.dial_req("t:1", 5))
    a.dial_done(2)
    assert a.target_closed(2) == [Send(p.close_rsp(2))]
    assert a.target_closed(2) == []


def test_agent_stream_lost() -> None:
    a = AgentState()
    a.server_packet(p.dial_req("t:1", 1))
    a.server_packet(p.dial_req("t:1", 2))
    a.dial_done(2)
    assert a.stream_lost() == [CancelDial(1), CloseTarget(2)]
    assert not a.conns and not a.dialing


def test_windows() -> None:
    w = SendWindow(100)
    w.sent(150)
    assert not w.can_send()
    w.credit(60)
    assert w.can_send()
    r = ReceiveWindow(100, max_chunk=50)
    assert r.received(150) and not r.received(1)
    assert r.consumed(10) == 0 and r.consumed(20) == 30
