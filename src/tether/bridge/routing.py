"""Where an intercepted Service's traffic goes: the routing proxy's decisions, without I/O.

A request belongs to a developer when its `kubernetes-route-as` header (Bridge to Kubernetes'
name) or a `kubernetes-route-as=NAME` member of its W3C `baggage` header names a registered
route; everything else, and every connection that is not HTTP/1.1, goes to the original pods.
An `--all` intercept takes every connection of the Service, HTTP or not.

The router and the developer's machine speak a one-line handshake on parked connections (see
`docs/bridge.md`): the developer parks connections at the router ahead of time, so the router
never dials the developer and no port opens on the developer's machine.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ROUTE_HEADER = "kubernetes-route-as"
BAGGAGE_HEADER = "baggage"
MAX_ROUTE_NAME = 40  # leaves room for the object names derived from it (63-character limit)
_ROUTE_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_REQUEST_LINE = re.compile(rb"[A-Z]{1,20} [\x21-\x7e]+ HTTP/1\.[01]\r\n")
_REQUEST_LINE_START = re.compile(rb"[A-Z]{1,20}(?: [\x21-\x7e]*(?: [HTP/1.0]{0,8}\r?)?)?")
MAX_REQUEST_LINE = 8192
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

HTTP1, H2C, OTHER, NEED_MORE = "http1", "h2c", "other", "more"

PARK_MAGIC = "TETHER-PARK/1"
LEAVE_MAGIC = "TETHER-LEAVE/1"
MAX_PARK_LINE = 512


class RouteNameError(ValueError):
    """A route-as name tether cannot use."""


def validate_route_name(name: str) -> str:
    """A route name is a DNS label (it is a header value, part of object names and a subdomain)."""
    if not name:
        raise RouteNameError("the route-as name is empty")
    if len(name) > MAX_ROUTE_NAME:
        raise RouteNameError(f"route-as name {name[:60]!r} is longer than {MAX_ROUTE_NAME} characters")
    if not _ROUTE_NAME.fullmatch(name):
        raise RouteNameError(
            f"route-as name {name[:60]!r} is not usable as a header value and hostname label: use "
            "lower-case letters, digits and '-', starting and ending with a letter or digit "
            "(like naison-e4be)")
    return name


def default_route_name(user: str, suffix: str) -> str:
    """`$USER-<4 hex>` as Bridge to Kubernetes names it (`naison-e4be`), made a valid label."""
    cleaned = re.sub(r"[^a-z0-9-]+", "-", user.lower()).strip("-")[:MAX_ROUTE_NAME - 5].strip("-")
    return f"{cleaned or 'dev'}-{suffix}"


def baggage_route(value: str) -> str | None:
    """The `kubernetes-route-as` member of a W3C baggage header (`k=v;prop, k2=v2`), decoded."""
    for member in value.split(","):
        key, eq, rest = member.partition("=")
        if eq and key.strip() == ROUTE_HEADER:
            return urllib.parse.unquote(rest.split(";", 1)[0].strip())
    return None


def request_route(fields: Iterable[tuple[str, str]]) -> str | None:
    """The route a request asks for: the header first, else the baggage member."""
    from_baggage: str | None = None
    for name, value in fields:
        lowered = name.lower()
        if lowered == ROUTE_HEADER:
            return value.strip()
        if lowered == BAGGAGE_HEADER and from_baggage is None:
            from_baggage = baggage_route(value)
    return from_baggage


@dataclass(frozen=True)
class Destination:
    """`developer` with the route whose developer gets it, or `original` (the cloned Service)."""

    kind: str
    route: str = ""

    @property
    def developer(self) -> bool:
        return self.kind == "developer"


ORIGINAL = Destination("original")


def decide(route: str | None, routes: frozenset[str], host: str | None = None,
           hosts: Mapping[str, str] | None = None) -> Destination:
    """A request's destination, given the route it asks for, its Host, the routes registered
    and the `--ingress` hosts (`NAME.<ingress host>` -> NAME): the header wins over the host."""
    if route and route in routes:
        return Destination("developer", route)
    if host and hosts:
        by_host = hosts.get(host_name(host))
        if by_host and by_host in routes:
            return Destination("developer", by_host)
    return ORIGINAL


def host_name(host: str) -> str:
    """A Host header's name: lower case, without the port (IPv6 literals keep their brackets)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def ingress_hosts(route: str, ingresses: Iterable[Mapping[str, Any]], service: str) -> list[tuple[str, str, str]]:
    """(ingress name, its host, the subdomain host `route.host`) for every Ingress rule with a
    host whose paths send to `service` (wildcard hosts cannot take a subdomain: skipped)."""
    found: list[tuple[str, str, str]] = []
    for ingress in ingresses:
        for rule in (ingress.get("spec") or {}).get("rules") or []:
            host = str(rule.get("host") or "")
            paths = ((rule.get("http") or {}).get("paths")) or []
            if not host or host.startswith("*"):
                continue
            if any(((p.get("backend") or {}).get("service") or {}).get("name") == service for p in paths):
                found.append((str(ingress["metadata"]["name"]), host, f"{route}.{host}"))
    return found


def sniff(first: bytes) -> str:
    """What a connection speaks, from its first bytes: HTTP/1.x, h2c prior knowledge, other,
    or NEED_MORE to tell. HTTP/1.x starts with a whole request line (`METHOD target HTTP/1.x`)."""
    if not first:
        return NEED_MORE
    if H2_PREFACE.startswith(first[:len(H2_PREFACE)]) and first[:3] == b"PRI":
        return H2C if len(first) >= len(H2_PREFACE) else NEED_MORE
    if _REQUEST_LINE.match(first):
        return HTTP1
    if b"\n" not in first and len(first) < MAX_REQUEST_LINE and _REQUEST_LINE_START.fullmatch(first):
        return NEED_MORE
    return OTHER


# h2c (HTTP/2 with prior knowledge) ------------------------------------------------------------

H2_HEADERS, H2_CONTINUATION = 0x1, 0x9
H2_END_HEADERS, H2_PADDED, H2_PRIORITY = 0x4, 0x8, 0x20
MAX_H2_HEADER_BLOCK = 64 * 1024


def h2c_first_header_block(data: bytes) -> bytes | None:
    """The header block of the first HEADERS frame (with its CONTINUATIONs) after the client
    preface, or None until all of it has arrived; `ValueError` for frames that make no sense.
    The block is HPACK-coded: whoever decodes it must be the first decoder of this connection."""
    if not data.startswith(H2_PREFACE):
        raise ValueError("no HTTP/2 client preface")
    offset = len(H2_PREFACE)
    block = b""
    stream: int | None = None
    while True:
        if len(data) < offset + 9:
            return None
        length = int.from_bytes(data[offset:offset + 3], "big")
        kind, flags = data[offset + 3], data[offset + 4]
        stream_id = int.from_bytes(data[offset + 5:offset + 9], "big") & 0x7FFFFFFF
        if length > MAX_H2_HEADER_BLOCK:
            raise ValueError("HTTP/2 frame larger than tether reads before routing")
        if len(data) < offset + 9 + length:
            return None
        payload = data[offset + 9:offset + 9 + length]
        offset += 9 + length
        if stream is None and kind == H2_HEADERS:
            pad = 0
            if flags & H2_PADDED:
                if not payload:
                    raise ValueError("padded HEADERS frame without a pad length")
                pad, payload = payload[0], payload[1:]
            if flags & H2_PRIORITY:
                payload = payload[5:]
            if pad > len(payload):
                raise ValueError("HEADERS padding longer than the frame")
            block, stream = payload[:len(payload) - pad], stream_id
        elif stream is not None:
            if kind != H2_CONTINUATION or stream_id != stream:
                raise ValueError("a header block interrupted by another frame")
            block += payload
        if stream is not None and flags & H2_END_HEADERS:
            return block
        if len(block) > MAX_H2_HEADER_BLOCK:
            raise ValueError("HTTP/2 header block too large")


# the parked-connection handshake ------------------------------------------------------------


def token_digest(token: str) -> str:
    """What the session object records: the router compares digests, the token stays local."""
    return hashlib.sha256(token.encode()).hexdigest()


def encode_park(route: str, token: str) -> bytes:
    return f"{PARK_MAGIC} {route} {token}\n".encode()


@dataclass(frozen=True)
class Park:
    route: str
    token: str


def parse_park(line: bytes) -> Park:
    """The developer's first line on a parked connection; `ValueError` with a reason if bad."""
    if len(line) > MAX_PARK_LINE or not line.endswith(b"\n"):
        raise ValueError("park line too long or unterminated")
    parts = line.decode("ascii", "replace").strip().split(" ")
    if len(parts) != 3 or parts[0] != PARK_MAGIC:
        raise ValueError("not a park line")
    validate_route_name(parts[1])
    return Park(parts[1], parts[2])


def encode_leave(route: str, token: str) -> bytes:
    """Developer -> router, on a connection of its own: hand out none of my parked connections
    any more (I am about to close them); my requests go to the original pods."""
    return f"{LEAVE_MAGIC} {route} {token}\n".encode()


def parse_leave(line: bytes) -> Park:
    """A leave line (same fields as a park line); `ValueError` with a reason if bad."""
    if not line.startswith(LEAVE_MAGIC.encode() + b" "):
        raise ValueError("not a leave line")
    return parse_park(PARK_MAGIC.encode() + line[len(LEAVE_MAGIC):])


def authorize_park(park: Park, digests: Mapping[str, str]) -> str | None:
    """None when the park may serve its route, else why not."""
    expected = digests.get(park.route)
    if expected is None:
        return f"route {park.route!r} is not registered"
    if not hmac.compare_digest(token_digest(park.token), expected):
        return f"wrong token for route {park.route!r}"
    return None


def encode_go(peer: str) -> bytes:
    """Router -> developer: this parked connection now carries a connection from `peer`."""
    return f"GO {peer}\n".encode()


def parse_go(line: bytes) -> str:
    text = line.decode("ascii", "replace").strip()
    if not text.startswith("GO"):
        raise ValueError(f"unexpected line from the router: {text[:60]!r}")
    return text[3:]


# names ---------------------------------------------------------------------------------------


def _bounded(name: str, suffix: str) -> str:
    """`name + suffix` within 63 characters; a shortened name gets a hash so names stay unique."""
    if len(name) + len(suffix) <= 63:
        return name + suffix
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{name[:63 - len(suffix) - 7]}-{digest}{suffix}"


def cloned_service_name(service: str) -> str:
    return _bounded(service, "-cloned-routing-svc")


def router_name(service: str) -> str:
    return _bounded(service, "-tether-router")


def session_name(route: str) -> str:
    return f"tether-intercept-{route}"


def router_selector(service: str) -> dict[str, str]:
    return {"tether.io/router": router_name(service)}


def selector_patch(current: Mapping[str, str], wanted: Mapping[str, str]) -> dict[str, str | None]:
    """A merge patch turning selector `current` into exactly `wanted` (removed keys null)."""
    patch: dict[str, str | None] = {key: None for key in current if key not in wanted}
    patch.update(wanted)
    return patch


def listen_ports(service_ports: Sequence[Mapping[str, object]], named: Mapping[str, int]) -> dict[int, int]:
    """Service port -> the port the router listens on (the target port the Service sends to:
    a number, or a name resolved through the original pods' container ports in `named`)."""
    out: dict[int, int] = {}
    for port in service_ports:
        target = port.get("targetPort", port.get("port"))
        if isinstance(target, str) and not target.isdigit():
            if target not in named:
                raise ValueError(f"the Service's targetPort {target!r} names no container port of its pods")
            number = named[target]
        else:
            number = int(str(target))
        out[int(str(port["port"]))] = number
    return out
