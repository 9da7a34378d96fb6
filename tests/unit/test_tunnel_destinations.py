"""Dial destinations, allow-list patterns, the CONNECT head parser and the CONNECT policy."""

from __future__ import annotations

import base64

import pytest

from tether.tunnel import packets as p
from tether.tunnel.connect import ConnectError, ConnectPolicy, parse_head, proxy_token, token_key
from tether.tunnel.destinations import (
    Destination,
    DestinationError,
    allows,
    check_dial,
    needs_resolution,
    parse_destination,
    parse_patterns,
)
from tether.tunnel.state import AgentState, Send, StartDial


@pytest.mark.parametrize(("address", "host", "port"), [
    ("127.0.0.1:443", "127.0.0.1", 443),
    ("[::1]:6443", "::1", 6443),
    ("[0:0::1]:1", "::1", 1),
    ("Api.Example.COM:65535", "api.example.com", 65535),
    ("kubernetes.default.svc.:443", "kubernetes.default.svc", 443),
    ("localhost:8080", "localhost", 8080),
    ("a-1.b:1", "a-1.b", 1),
])
def test_valid_destinations(address: str, host: str, port: int) -> None:
    dest = parse_destination(address)
    assert (dest.host, dest.port) == (host, port)


@pytest.mark.parametrize(("address", "reason"), [
    ("127.0.0.1:99999", "invalid port"),
    ("127.0.0.1:0", "invalid port"),
    ("127.0.0.1:-1", "invalid port"),
    ("127.0.0.1:+1", "invalid port"),
    ("127.0.0.1:0x50", "invalid port"),
    ("127.0.0.1: 80", "invalid port"),
    ("127.0.0.1:" + "9" * 400, "invalid port"),
    ("127.0.0.1", "missing port"),
    ("[::1]", "missing port"),
    ("[::1", "missing ']'"),
    ("::1:80", "too many colons"),
    ("[127.0.0.1]:80", "invalid IPv6"),
    ("[fe80::1%eth0]:80", "zone"),
    (":80", "invalid host"),
    ("a b:80", "invalid host"),
    ("-a:80", "invalid host"),
    ("a_b:80", "invalid host"),
    ("1.2.3.4.5:80", "invalid host"),
    ("999.1.1.1:80", "invalid host"),
    ("x" * 64 + ".com:80", "invalid host"),
    ("\0:80", "invalid host"),
    ("a" * 2000 + ":80", "too long"),
])
def test_invalid_destinations(address: str, reason: str) -> None:
    with pytest.raises(DestinationError, match=reason):
        parse_destination(address)


@pytest.mark.parametrize(("protocol", "address", "ok"), [
    ("tcp", "127.0.0.1:1", True), ("tcp4", "127.0.0.1:1", True), ("tcp6", "127.0.0.1:1", False),
    ("tcp6", "[::1]:1", True), ("tcp4", "[::1]:1", False), ("tcp4", "name:1", True),
    ("udp", "127.0.0.1:1", False), ("", "127.0.0.1:1", False), ("TCP", "127.0.0.1:1", False),
])
def test_check_dial_protocol_and_family(protocol: str, address: str, ok: bool) -> None:
    if ok:
        check_dial(protocol, address)
    else:
        with pytest.raises(DestinationError):
            check_dial(protocol, address)


PATTERNS = "10.0.0.0/8:443,192.168.1.10,[fd00::/8]:6443,::1,api.example.com:6443,*.svc,*:8443"


@pytest.mark.parametrize(("address", "allowed"), [
    ("10.1.2.3:443", True), ("10.1.2.3:80", False), ("192.168.1.10:1", True),
    ("192.168.1.11:1", False), ("[fd00::5]:6443", True), ("[fd00::5]:443", False),
    ("[::1]:22", True), ("api.example.com:6443", True), ("API.example.com:6443", True),
    ("api.example.com:443", False), ("x.api.example.com:6443", False), ("kube.svc:1", True),
    ("a.b.svc:1", True), ("svc:1", False), ("anything:8443", True), ("1.2.3.4:8443", True),
])
def test_allow_list(address: str, allowed: bool) -> None:
    assert allows(parse_patterns(PATTERNS), parse_destination(address)) is allowed


def test_names_are_resolved_only_when_a_network_pattern_could_allow_them() -> None:
    patterns = parse_patterns("10.0.0.0/8:443,api.internal")
    assert needs_resolution(patterns, parse_destination("kubernetes:443"))
    assert not needs_resolution(patterns, parse_destination("kubernetes:80"))
    assert not needs_resolution(patterns, parse_destination("api.internal:80"))  # allowed by name
    assert not needs_resolution(patterns, parse_destination("10.0.0.1:80"))  # an IP: no lookup
    import ipaddress

    dest = parse_destination("kubernetes:443")
    assert allows(patterns, dest, resolved=ipaddress.ip_address("10.96.0.1"))
    assert not allows(patterns, dest, resolved=ipaddress.ip_address("8.8.8.8"))


@pytest.mark.parametrize("text", ["10.0.0.1/8", "10.0.0.0/33", "10.0.0.0/8:99999", "[10.0.0.0/8]:1",
                                  "[fd00::/8", "bad host", "*.", "host:0", "::1:80x", ",,:"])
def test_bad_patterns(text: str) -> None:
    with pytest.raises(DestinationError):
        parse_patterns(text)


# -- the agent refuses what it must not dial ---------------------------------------------------

def test_agent_state_answers_invalid_dials_without_dialing() -> None:
    a = AgentState()
    assert a.server_packet(p.dial_req("127.0.0.1:99999", 7)) == [
        Send(p.dial_rsp(7, error="dial tcp 127.0.0.1:99999: invalid port 99999 (1-65535)"))]
    assert a.server_packet(p.dial_req("a\nb:1", 8)) == [
        Send(p.dial_rsp(8, error="dial tcp a\\nb:1: invalid host 'a\\\\nb'"))]
    start = a.server_packet(p.dial_req("127.0.0.1:80", 9))
    assert start == [StartDial(3, "tcp", "127.0.0.1:80")]
    assert isinstance(start[0], StartDial) and start[0].destination == Destination(
        "127.0.0.1", 80, parse_destination("127.0.0.1:80").ip)
    assert a.server_packet(p.dial_req("127.0.0.1:81", 9)) == [  # its random is in use
        Send(p.dial_rsp(9, error="dial tcp 127.0.0.1:81: duplicate dial random"))]
    assert list(a.conns) == [3] and a.dialing == {9: 3}


def test_agent_state_allow_list() -> None:
    a = AgentState(parse_patterns("127.0.0.1/32:6443,10.0.0.0/8"))
    assert a.server_packet(p.dial_req("127.0.0.1:22", 1)) == [
        Send(p.dial_rsp(1, error="dial tcp 127.0.0.1:22: destination not allowed by this agent"))]
    start = a.server_packet(p.dial_req("127.0.0.1:6443", 2))
    assert isinstance(start[0], StartDial) and not start[0].check_resolved
    start = a.server_packet(p.dial_req("kubernetes:6443", 3))  # only a network can allow it
    assert isinstance(start[0], StartDial) and start[0].check_resolved


# -- CONNECT -----------------------------------------------------------------------------------

def head(text: str) -> bytes:
    return text.replace("\n", "\r\n").encode()


def test_parse_connect_head() -> None:
    request = parse_head(head("CONNECT [::1]:6443 HTTP/1.1\nHost: x\nProxy-Authorization: Bearer t\n"
                              "Content-Length: 0\n\n"))
    assert request.target == "[::1]:6443" and request.destination.port == 6443
    assert request.header("proxy-authorization") == ["Bearer t"]


@pytest.mark.parametrize(("text", "status"), [
    ("GET / HTTP/1.1\n\n", 405),
    ("CONNECT 127.0.0.1:99999 HTTP/1.1\n\n", 400),
    ("CONNECT /x HTTP/1.1\n\n", 400),
    ("CONNECT 127.0.0.1:443 HTTP/2\n\n", 400),
    ("CONNECT  127.0.0.1:443 HTTP/1.1\n\n", 400),
    ("CONNECT 127.0.0.1:443\n\n", 400),
    ("CONNECT 127.0.0.1:443 HTTP/1.1\nContent-Length: -1\n\n", 400),
    ("CONNECT 127.0.0.1:443 HTTP/1.1\nContent-Length: 99999999999999999999999\n\n", 400),
    ("CONNECT 127.0.0.1:443 HTTP/1.1\nContent-Length: 5\n\n", 400),
    ("CONNECT 127.0.0.1:443 HTTP/1.1\nTransfer-Encoding: chunked\n\n", 400),
    ("CONNECT 127.0.0.1:443 HTTP/1.1\nHost: a\n folded\n\n", 400),
    ("CONNECT 127.0.0.1:443 HTTP/1.1\nBad Header: a\n\n", 400),
    ("CONNECT 127.0.0.1:443 HTTP/1.1\nHost: a\nHost: b\n\n", 400),
    ("CONNECT 127.0.0.1:443 HTTP/1.1\n" + "X: y\n" * 101 + "\n", 400),
    ("C\0NNECT 127.0.0.1:443 HTTP/1.1\n\n", 400),
])
def test_refused_connect_heads(text: str, status: int) -> None:
    with pytest.raises(ConnectError) as refused:
        parse_head(head(text))
    assert refused.value.status == status


def test_proxy_token_forms() -> None:
    basic = base64.b64encode(b"tether:secret").decode()
    assert proxy_token([f"Basic {basic}"]) == "secret"
    assert proxy_token(["Bearer secret"]) == "secret"
    assert proxy_token(["bearer  secret "]) == "secret"
    for bad in ("Basic !!!", "Basic " + base64.b64encode(b"nocolon").decode(), "Negotiate x", "",
                "Bearer", "Basic " + base64.b64encode(b"user:").decode()):
        assert proxy_token([bad]) is None, bad


def test_connect_policy() -> None:
    member = parse_destination("10.0.0.5:6443")
    policy = ConnectPolicy({token_key("t1"): frozenset({member})}, parse_patterns("10.1.0.0/16"))

    def decide(target: str, auth: str = "Bearer t1") -> int:
        try:
            policy.decide(parse_head(head(f"CONNECT {target} HTTP/1.1\nProxy-Authorization: {auth}\n\n")))
        except ConnectError as refused:
            return refused.status
        return 200

    assert decide("10.0.0.5:6443") == 200
    assert decide("10.0.0.5:22") == 403
    assert decide("10.0.0.6:6443") == 403
    assert decide("10.1.2.3:80") == 200  # widened for any authenticated caller
    assert decide("10.0.0.5:6443", "Bearer t2") == 407
    assert decide("10.1.2.3:80", "Bearer t2") == 407
    with pytest.raises(ConnectError) as refused:
        policy.decide(parse_head(head("CONNECT 10.0.0.5:6443 HTTP/1.1\n\n")))
    assert refused.value.status == 407
    assert ("Proxy-Authenticate", 'Basic realm="tether"') in refused.value.headers
