"""Dial destinations: parsing, validation and allow-lists. No I/O.

A destination is the authority form of a dial address (`host:port`, `[v6]:port`), as a DIAL_REQ
carries it and an HTTP CONNECT request line names it. Every dial is checked here first:

- the host is an IP literal (IPv4 dotted quad, IPv6 in brackets, no zone) or a DNS name (labels
  of letters, digits and `-`, at most 63 bytes each, 253 in all, the last one not all digits;
  one trailing dot allowed);
- the port is 1-65535 in decimal, at most five digits (`99999` and `-1` are refused here, before
  any socket call can raise on them);
- the protocol is `tcp`, `tcp4` or `tcp6` (ANP carries the protocol; Go's agent dials only these),
  and `tcp4`/`tcp6` must agree with the family of an IP literal.

Allow-lists (`--allowed-destinations` on the agent and on `tether hub run`) are comma-separated
patterns; each names hosts and, optionally, one port (`*` or nothing: any port):

    10.0.0.0/8   10.0.0.0/8:443   192.168.1.10:6443   fd00::/8   [fd00::/8]:443   [::1]:6443
    api.example.com:6443   *.svc:443   *.cluster.local   *:443

A network matches IP destinations inside it (and, on the agent, a name whose resolved address is
inside it); a name matches that name, case-insensitively; `*.suffix` matches any name ending in
`.suffix`; `*` matches every host. Nothing here resolves names: the caller does, and passes the
address it will dial.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

PROTOCOLS = ("tcp", "tcp4", "tcp6")
MAX_ADDRESS = 1024  # longer addresses are refused before any parsing
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")
_PORT = re.compile(r"[0-9]{1,5}\Z")


class DestinationError(ValueError):
    """An address or pattern that cannot be dialled or matched; the message says why."""


@dataclass(frozen=True, slots=True)
class Destination:
    """A validated dial target. `host` is lower case without a trailing dot, or the compressed
    text of `ip`."""

    host: str
    port: int
    ip: IPAddress | None = None

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if self.ip is not None and self.ip.version == 6 else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return self.authority


def printable(text: str, limit: int = 120) -> str:
    """`text` made safe for an error message or a log line: no control characters, bounded."""
    shown = text if len(text) <= limit else text[:limit] + "..."
    return shown.encode("unicode_escape", "backslashreplace").decode("ascii")


def valid_hostname(name: str) -> bool:
    """RFC 1123 names; an all-numeric last label is refused (no such top-level domain exists,
    and `1.2.3.4.5` or `999.1.1.1` are broken addresses, not names to look up)."""
    if name.endswith("."):
        name = name[:-1]
    if not name or len(name) > 253:
        return False
    labels = name.split(".")
    return all(_LABEL.match(label) for label in labels) and not labels[-1].isdigit()


def _ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def parse_port(text: str) -> int:
    if not _PORT.match(text):
        raise DestinationError(f"invalid port {printable(text)!r}")
    port = int(text)
    if not 1 <= port <= 65535:
        raise DestinationError(f"invalid port {port} (1-65535)")
    return port


def parse_host(text: str) -> tuple[str, IPAddress | None]:
    """(canonical host, its IP or None) for a host without brackets."""
    ip = _ip(text)
    if ip is not None:
        if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id:
            raise DestinationError(f"IPv6 zone in {printable(text)!r} is not allowed")
        return ip.compressed, ip
    if "%" in text or not valid_hostname(text):
        raise DestinationError(f"invalid host {printable(text)!r}")
    return text.rstrip(".").lower(), None


def parse_destination(address: str) -> Destination:
    """`host:port` or `[v6]:port` → Destination; DestinationError with the reason otherwise."""
    if len(address) > MAX_ADDRESS:
        raise DestinationError(f"address of {len(address)} characters is too long")
    if address.startswith("["):
        close = address.find("]")
        if close < 0:
            raise DestinationError(f"missing ']' in address {printable(address)!r}")
        inner, rest = address[1:close], address[close + 1:]
        if not rest.startswith(":"):
            raise DestinationError(f"missing port in address {printable(address)!r}")
        ip = _ip(inner)
        if not isinstance(ip, ipaddress.IPv6Address):
            raise DestinationError(f"invalid IPv6 address {printable(inner)!r}")
        port_text = rest[1:]
        host_text = inner
    else:
        host_text, sep, port_text = address.rpartition(":")
        if not sep:
            raise DestinationError(f"missing port in address {printable(address)!r}")
        if ":" in host_text:
            raise DestinationError(f"too many colons in address {printable(address)!r}")
        if isinstance(_ip(host_text), ipaddress.IPv6Address):
            raise DestinationError(f"IPv6 address {printable(host_text)!r} needs brackets")
    host, ip = parse_host(host_text)
    return Destination(host, parse_port(port_text), ip)


def check_dial(protocol: str, address: str) -> Destination:
    """The destination of a DIAL_REQ, or DestinationError: protocol, address and family."""
    if protocol not in PROTOCOLS:
        raise DestinationError(f"unknown network {printable(protocol)}")
    dest = parse_destination(address)
    if dest.ip is not None and protocol != "tcp" and dest.ip.version != (4 if protocol == "tcp4" else 6):
        raise DestinationError(f"address {dest} is not an {_family(protocol)} address")
    return dest


def _family(protocol: str) -> str:
    return "IPv4" if protocol == "tcp4" else "IPv6"


# -- allow-lists -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Pattern:
    """One allow-list entry: a network, a name, `*.suffix`, or `*` (any host); `port` None is
    any port."""

    network: IPNetwork | None = None
    name: str = ""  # lower case; "*" or "*.suffix" for wildcards
    port: int | None = None

    def __str__(self) -> str:
        host = str(self.network) if self.network is not None else self.name
        if self.network is not None and self.network.version == 6 and self.port is not None:
            host = f"[{host}]"
        return host if self.port is None else f"{host}:{self.port}"

    def matches_port(self, port: int) -> bool:
        return self.port is None or self.port == port

    def matches_name(self, name: str) -> bool:
        if self.network is not None:
            return False
        if self.name == "*":
            return True
        if self.name.startswith("*."):
            return name.endswith(self.name[1:])
        return name == self.name

    def matches_ip(self, ip: IPAddress) -> bool:
        if self.network is not None:
            return ip.version == self.network.version and ip in self.network
        return self.name == "*"


def _pattern_port(text: str) -> int | None:
    return None if text in ("", "*") else parse_port(text)


def _pattern_host(text: str, port: int | None) -> Pattern:
    if text == "*" or (text.startswith("*.") and valid_hostname(text[2:])):
        return Pattern(name=text.lower().rstrip("."), port=port)
    try:
        network = ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        if "/" in text or _ip(text) is not None:
            raise DestinationError(f"invalid network {printable(text)!r}: {exc}") from None
        if not valid_hostname(text):
            raise DestinationError(f"invalid host pattern {printable(text)!r}") from None
        return Pattern(name=text.lower().rstrip("."), port=port)
    return Pattern(network=network, port=port)


def parse_pattern(text: str) -> Pattern:
    text = text.strip()
    if not text:
        raise DestinationError("empty destination pattern")
    if text.startswith("["):
        close = text.find("]")
        if close < 0 or not text[close + 1:].startswith(":"):
            raise DestinationError(f"expected [IPv6 or network]:port, got {printable(text)!r}")
        inner = text[1:close]
        pattern = _pattern_host(inner, _pattern_port(text[close + 2:]))
        if pattern.network is None or pattern.network.version != 6:
            raise DestinationError(f"brackets hold an IPv6 address or network, got {printable(inner)!r}")
        return pattern
    if text.count(":") > 1:  # a bare IPv6 address or network: any port
        pattern = _pattern_host(text, None)
        if pattern.network is None:
            raise DestinationError(f"invalid IPv6 pattern {printable(text)!r}")
        return pattern
    host, sep, port = text.rpartition(":")
    if not sep:
        return _pattern_host(text, None)
    return _pattern_host(host, _pattern_port(port))


def parse_patterns(texts: str | Iterable[str]) -> tuple[Pattern, ...]:
    """Comma-separated patterns (or several strings of them) → Patterns; DestinationError on the
    first bad one."""
    items = [texts] if isinstance(texts, str) else list(texts)
    out: list[Pattern] = []
    for item in items:
        out += [parse_pattern(part) for part in item.split(",") if part.strip()]
    return tuple(out)


def allows(patterns: Iterable[Pattern], dest: Destination, resolved: IPAddress | None = None) -> bool:
    """Whether some pattern allows `dest`: by its IP literal, by its name, or by the address the
    name resolved to (`resolved`, the one that will be dialled)."""
    for pattern in patterns:
        if not pattern.matches_port(dest.port):
            continue
        if dest.ip is not None:
            if pattern.matches_ip(dest.ip):
                return True
        elif pattern.matches_name(dest.host) or (resolved is not None and pattern.matches_ip(resolved)):
            return True
    return False


def needs_resolution(patterns: Iterable[Pattern], dest: Destination) -> bool:
    """A name that no name pattern allows, but some network pattern for its port might."""
    if dest.ip is not None or allows(patterns, dest):
        return False
    return any(p.network is not None and p.matches_port(dest.port) for p in patterns)
