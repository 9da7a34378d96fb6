"""HTTP CONNECT requests: parsing the head, and who may tunnel where. No I/O.

`parse_head` takes the bytes up to and including the blank line and returns a `ConnectRequest`
or raises `ConnectError` with the status to answer (400 malformed, 405 not CONNECT). It is
strict where leniency would be ambiguous: one request line `CONNECT host:port HTTP/1.x` (the
authority form, validated by `destinations.parse_destination`), the header rules of
`tether.net.http1` (token names, no obsolete line folding), at most `MAX_HEADERS` fields, and
no content: a CONNECT request has none (RFC 9110 §9.3.6), so any `Transfer-Encoding` and any `Content-Length` but `0`
is refused instead of guessing where the tunnelled bytes begin.

`ConnectPolicy` decides a parsed request for a listener that requires credentials (the hub's
loopback listener): a bearer token in `Proxy-Authorization` (`Bearer <token>`, or `Basic` with
the token as the password, which is what a `http://user:token@host:port` proxy URL makes Go and
Python clients send) maps to the destinations it may reach; `allowed` patterns widen that for
every authenticated caller. No credential or an unknown one: 407; a destination outside the
grant: 403.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tether.net import http1
from tether.tunnel.destinations import (
    Destination,
    DestinationError,
    Pattern,
    allows,
    parse_destination,
    printable,
)

MAX_HEADERS = 100
AUTH_REALM = "tether"


class ConnectError(Exception):
    """A request to refuse: `status` and a plain-text reason; `headers` go into the answer."""

    def __init__(self, status: int, reason: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers = headers


@dataclass(frozen=True)
class ConnectRequest:
    target: str  # as sent
    destination: Destination
    headers: tuple[tuple[str, str], ...] = ()  # (lower-case name, value)

    def header(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k == name]


def _bad(reason: str) -> ConnectError:
    return ConnectError(400, reason)


def parse_head(head: bytes) -> ConnectRequest:
    """The request line and headers of one CONNECT request (`head` ends with CRLF CRLF)."""
    if not head.endswith(b"\r\n\r\n"):
        raise _bad("the request head must end with an empty line")
    try:
        request = http1.parse_request_head(head[:-4])
    except http1.ProtocolError as exc:
        raise _bad(printable(str(exc))) from None
    if request.method != "CONNECT":
        raise ConnectError(405, "this proxy only supports CONNECT passthrough")
    headers = _checked_headers(request.fields)
    try:
        destination = parse_destination(request.target)
    except DestinationError as exc:
        raise _bad(f"CONNECT needs an authority-form target host:port: {exc}") from None
    return ConnectRequest(request.target, destination, headers)


def _checked_headers(fields: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    if len(fields) > MAX_HEADERS:
        raise _bad(f"more than {MAX_HEADERS} header fields")
    out = tuple((name.lower(), value) for name, value in fields)
    names = [n for n, _ in out]
    if "transfer-encoding" in names:
        raise _bad("a CONNECT request has no content (Transfer-Encoding)")
    lengths = [v for n, v in out if n == "content-length"]
    if any(v != "0" for v in lengths):
        raise _bad(f"a CONNECT request has no content (Content-Length {printable(lengths[0])!r})")
    for single in ("host", "proxy-authorization"):
        if names.count(single) > 1:
            raise _bad(f"more than one {single} header")
    return out


# -- who may CONNECT where ---------------------------------------------------------------------

def token_key(token: str) -> str:
    """How a policy stores a token: its SHA-256, so lookups do not compare secrets byte by byte."""
    return hashlib.sha256(token.encode()).hexdigest()


def proxy_token(values: Iterable[str]) -> str | None:
    """The bearer token in a `Proxy-Authorization` value (Bearer, or Basic's password)."""
    for value in values:
        scheme, _, rest = value.strip().partition(" ")
        rest = rest.strip()
        if scheme.lower() == "bearer" and rest:
            return rest
        if scheme.lower() == "basic" and rest:
            try:
                decoded = base64.b64decode(rest, validate=True).decode("utf-8")
            except (binascii.Error, ValueError):
                return None
            _, sep, password = decoded.partition(":")
            return password if sep and password else None
    return None


@dataclass
class ConnectPolicy:
    """Token → destinations it may reach (`grants`, keyed by `token_key`), plus `allowed`
    patterns any authenticated caller may reach. Mutable: its owner refreshes `grants`."""

    grants: dict[str, frozenset[Destination]] = field(default_factory=dict)
    allowed: tuple[Pattern, ...] = ()
    realm: str = AUTH_REALM

    def replace_grants(self, grants: Mapping[str, Iterable[Destination]]) -> None:
        fresh = {key: frozenset(dests) for key, dests in grants.items()}
        if fresh != self.grants:
            self.grants.clear()
            self.grants.update(fresh)

    def decide(self, request: ConnectRequest) -> None:
        """Return when the request may go on; raise ConnectError (407 or 403) otherwise."""
        token = proxy_token(request.header("proxy-authorization"))
        granted = self.grants.get(token_key(token)) if token else None
        if granted is None:
            raise ConnectError(407, "this proxy requires a valid Proxy-Authorization token",
                               (("Proxy-Authenticate", f'Basic realm="{self.realm}"'),
                                ("Proxy-Authenticate", f'Bearer realm="{self.realm}"')))
        dest = request.destination
        if dest in granted or allows(self.allowed, dest):
            return
        raise ConnectError(403, f"CONNECT to {dest} is not allowed: this credential reaches "
                                f"{', '.join(sorted(str(d) for d in granted)) or 'nothing'}; "
                                "widen with --allowed-destinations")
