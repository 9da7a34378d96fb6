"""The routing proxy's pure decisions: route names, header and baggage matching, sniffing, the
park handshake, selector patches and listen ports."""

from __future__ import annotations

import pytest

from tether.bridge import routing
from tether.bridge.routing import ORIGINAL, Destination


@pytest.mark.parametrize("name", ["naison-e4be", "a", "dev-1", "x" * 40])
def test_valid_route_names(name: str) -> None:
    assert routing.validate_route_name(name) == name


@pytest.mark.parametrize("name, fragment", [
    ("", "empty"), ("Naison", "lower-case"), ("-dev", "starting"), ("dev-", "starting"),
    ("dev e4be", "header value"), ("dev\r\nx: y", "header value"), ("x" * 41, "longer than 40"),
    ("dev_1", "lower-case"),
])
def test_invalid_route_names(name: str, fragment: str) -> None:
    with pytest.raises(routing.RouteNameError, match=fragment):
        routing.validate_route_name(name)


@pytest.mark.parametrize("user, expected", [
    ("naison", "naison-e4be"), ("Jane.Doe", "jane-doe-e4be"), ("", "dev-e4be"), ("___", "dev-e4be"),
])
def test_default_route_name(user: str, expected: str) -> None:
    name = routing.default_route_name(user, "e4be")
    assert name == expected
    routing.validate_route_name(name)


@pytest.mark.parametrize("fields, expected", [
    ([("Kubernetes-Route-As", "naison-e4be")], "naison-e4be"),
    ([("kubernetes-route-as", " naison-e4be ")], "naison-e4be"),
    ([("baggage", "userId=alice,kubernetes-route-as=bob-1;ttl=3")], "bob-1"),
    ([("baggage", "kubernetes-route-as=bob%2D1")], "bob-1"),
    ([("baggage", "kubernetes-route-as=bob-1"), ("kubernetes-route-as", "alice")], "alice"),
    ([("baggage", "other=1")], None),
    ([("x-route-as", "alice")], None),
    ([], None),
])
def test_request_route(fields: list[tuple[str, str]], expected: str | None) -> None:
    assert routing.request_route(fields) == expected


@pytest.mark.parametrize("route, routes, expected", [
    ("alice", frozenset({"alice", "bob"}), Destination("developer", "alice")),
    ("bob", frozenset({"alice", "bob"}), Destination("developer", "bob")),
    ("carol", frozenset({"alice"}), ORIGINAL),
    (None, frozenset({"alice"}), ORIGINAL),
    ("", frozenset({""}), ORIGINAL),
])
def test_decide(route: str | None, routes: frozenset[str], expected: Destination) -> None:
    assert routing.decide(route, routes) == expected


@pytest.mark.parametrize("first, expected", [
    (b"GET / HTTP/1.1\r\n", routing.HTTP1),
    (b"POST /x HTTP/1.1\r\n", routing.HTTP1),
    (b"GE", routing.NEED_MORE),
    (b"", routing.NEED_MORE),
    (routing.H2_PREFACE, routing.H2C),
    (b"PRI * HT", routing.NEED_MORE),
    (b"\x16\x03\x01\x02\x00", routing.OTHER),  # TLS
    (b"hello\n", routing.OTHER),
    (b"SSH-2.0-OpenSSH\r\n", routing.OTHER),
    (b"RAW hello\r\n\r\n", routing.OTHER),  # a method-like word, but no request line
    (b"GET /very/long", routing.NEED_MORE),
    (b"GET / HTTP/1.1", routing.NEED_MORE),
    (b"GET / HTTP/2.0\r\n", routing.OTHER),
])
def test_sniff(first: bytes, expected: str) -> None:
    assert routing.sniff(first) == expected


def test_park_round_trip_and_authorization() -> None:
    park = routing.parse_park(routing.encode_park("alice", "t0ken"))
    assert park == routing.Park("alice", "t0ken")
    digests = {"alice": routing.token_digest("t0ken")}
    assert routing.authorize_park(park, digests) is None
    assert "wrong token" in (routing.authorize_park(routing.Park("alice", "other"), digests) or "")
    assert "not registered" in (routing.authorize_park(routing.Park("bob", "t0ken"), digests) or "")
    assert routing.parse_go(routing.encode_go("10.0.0.1:4242")) == "10.0.0.1:4242"


@pytest.mark.parametrize("line", [b"TETHER-PARK/1 alice\n", b"HELLO alice t\n", b"TETHER-PARK/1 Bad t\n",
                                  b"TETHER-PARK/1 alice t", b"x" * 600 + b"\n"])
def test_bad_park_lines(line: bytes) -> None:
    with pytest.raises(ValueError):
        routing.parse_park(line)


def test_leave_round_trip() -> None:
    assert routing.parse_leave(routing.encode_leave("alice", "t0ken")) == routing.Park("alice", "t0ken")


@pytest.mark.parametrize("line", [b"TETHER-LEAVE/1 alice\n", routing.encode_park("alice", "t"),
                                  b"TETHER-LEAVE/1 Bad t\n", b"TETHER-LEAVE/1alice t\n",
                                  b"TETHER-LEAVE/1 alice t"])
def test_bad_leave_lines(line: bytes) -> None:
    with pytest.raises(ValueError):
        routing.parse_leave(line)


@pytest.mark.parametrize("current, wanted, expected", [
    ({"app": "stats-api"}, {"tether.io/router": "r"}, {"app": None, "tether.io/router": "r"}),
    ({"tether.io/router": "r"}, {"app": "stats-api", "tier": "api"},
     {"tether.io/router": None, "app": "stats-api", "tier": "api"}),
    ({"app": "x"}, {"app": "y"}, {"app": "y"}),
])
def test_selector_patch(current: dict[str, str], wanted: dict[str, str], expected: dict[str, str | None]) -> None:
    assert routing.selector_patch(current, wanted) == expected


def test_names_stay_within_63_characters() -> None:
    assert routing.cloned_service_name("stats-api") == "stats-api-cloned-routing-svc"
    long = "s" * 60
    assert len(routing.cloned_service_name(long)) <= 63
    assert routing.cloned_service_name(long) != routing.cloned_service_name("s" * 59 + "t")
    assert len(routing.router_name(long)) <= 63


def test_listen_ports() -> None:
    ports = [{"port": 80, "targetPort": 8080}, {"port": 81, "targetPort": "http"}, {"port": 82}]
    assert routing.listen_ports(ports, {"http": 9090}) == {80: 8080, 81: 9090, 82: 82}
    with pytest.raises(ValueError, match="names no container port"):
        routing.listen_ports([{"port": 80, "targetPort": "web"}], {})


HOSTS = {"naison-e4be.todo.example.com": "naison-e4be"}


@pytest.mark.parametrize("route, host, expected", [
    (None, "naison-e4be.todo.example.com", Destination("developer", "naison-e4be")),
    (None, "NAISON-E4BE.todo.example.com:8080", Destination("developer", "naison-e4be")),
    (None, "todo.example.com", ORIGINAL),
    ("alice", "naison-e4be.todo.example.com", Destination("developer", "alice")),  # the header wins
    (None, None, ORIGINAL),
])
def test_decide_by_ingress_host(route: str | None, host: str | None, expected: Destination) -> None:
    assert routing.decide(route, frozenset({"naison-e4be", "alice"}), host, HOSTS) == expected


def test_a_host_of_a_route_that_left_goes_to_the_original() -> None:
    assert routing.decide(None, frozenset({"alice"}), "naison-e4be.todo.example.com", HOSTS) == ORIGINAL


@pytest.mark.parametrize("host, expected", [("a.b:80", "a.b"), ("A.B", "a.b"), ("[::1]:80", "[::1]"), ("::1", "::1")])
def test_host_name(host: str, expected: str) -> None:
    assert routing.host_name(host) == expected


def test_ingress_hosts() -> None:
    def rule(host: str, service: str) -> dict[str, object]:
        return {"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                                                   "backend": {"service": {"name": service, "port": {"number": 80}}}}]}}

    ingresses = [{"metadata": {"name": "web"}, "spec": {"rules": [rule("todo.example.com", "stats-api"),
                                                                    rule("other.example.com", "frontend"),
                                                                    rule("*.example.com", "stats-api"),
                                                                    {"http": {"paths": []}}]}}]
    assert routing.ingress_hosts("naison-e4be", ingresses, "stats-api") == [
        ("web", "todo.example.com", "naison-e4be.todo.example.com")]


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


SETTINGS = frame(0x4, 0, 0, b"")


@pytest.mark.parametrize("data, expected", [
    (routing.H2_PREFACE + SETTINGS + frame(0x1, 0x4, 1, b"abc"), b"abc"),
    (routing.H2_PREFACE + SETTINGS + frame(0x1, 0, 1, b"ab") + frame(0x9, 0x4, 1, b"cd"), b"abcd"),
    (routing.H2_PREFACE + frame(0x1, 0x4 | 0x8 | 0x20, 1, bytes([2]) + b"12345" + b"xy" + b"\0\0"), b"xy"),
    (routing.H2_PREFACE + SETTINGS + frame(0x1, 0, 1, b"ab"), None),  # CONTINUATION to come
    (routing.H2_PREFACE + SETTINGS[:5], None),
    (routing.H2_PREFACE + SETTINGS + frame(0x1, 0x4, 1, b"abc")[:10], None),
])
def test_h2c_first_header_block(data: bytes, expected: bytes | None) -> None:
    assert routing.h2c_first_header_block(data) == expected


@pytest.mark.parametrize("data", [
    b"GET / HTTP/1.1\r\n\r\n",
    routing.H2_PREFACE + frame(0x1, 0, 1, b"ab") + frame(0x0, 0, 1, b"data"),  # interrupted block
    routing.H2_PREFACE + frame(0x1, 0x4 | 0x8, 1, bytes([9]) + b"ab"),  # padding past the end
    routing.H2_PREFACE + (10**6).to_bytes(3, "big") + bytes([0x1, 0x4]) + (1).to_bytes(4, "big"),
])
def test_bad_h2c_preambles(data: bytes) -> None:
    with pytest.raises(ValueError):
        routing.h2c_first_header_block(data)
