"""Asking another DNS server: what a forwarding DNS server needs (CoreDNS's `forward`).

`exchange(query, upstreams)` sends the query bytes as they are to each upstream in turn (UDP,
then TCP when the UDP answer is truncated or the caller came over TCP) and returns the first
answer whose ID and question match. The ID is replaced by a random one on the way out and put
back on the way in, so a client cannot steer answers meant for another. Upstreams are
`host:port` pairs; `upstreams_from_resolv_conf` reads them from a resolv.conf file, as
`forward . /etc/resolv.conf` does.

`min_ttl(response)` says how long an answer may be cached (the smallest TTL in it, SOA minimum
for negative answers, as RFC 2308 says).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import secrets
import socket
import struct
from collections.abc import Sequence
from pathlib import Path

from tether.net import dnswire as w

Upstream = tuple[str, int]
DEFAULT_TIMEOUT_S = 2.0
MAX_TCP_RESPONSE = 65535


class DnsClientError(Exception):
    """No upstream gave an answer (the message says what each did)."""


def parse_upstream(text: str, default_port: int = 53) -> Upstream:
    """`1.2.3.4`, `1.2.3.4:5353`, `[::1]:53`, `dns://1.2.3.4:53` -> (host, port)."""
    value = text.strip()
    for scheme in ("dns://", "udp://"):
        if value.startswith(scheme):
            value = value[len(scheme):]
    host, port = value, default_port
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        if rest.startswith(":"):
            port = int(rest[1:])
    elif value.count(":") == 1:
        host, _, raw = value.partition(":")
        port = int(raw)
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{text!r} is not an IP address (with an optional :port)") from None
    if not 0 < port < 65536:
        raise ValueError(f"{text!r}: port {port} out of range")
    return host, port


def upstreams_from_resolv_conf(path: Path | str = "/etc/resolv.conf") -> list[Upstream]:
    found: list[Upstream] = []
    try:
        text = Path(path).read_text()
    except OSError:
        return found
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            with contextlib.suppress(ValueError):
                found.append(parse_upstream(parts[1]))
    return found


def min_ttl(response: bytes) -> int | None:
    """Seconds the answer may be cached, or None when it must not be (unparsable, SERVFAIL...)."""
    try:
        message = w.parse_message(response)
    except (w.DnsFormatError, ValueError, struct.error):
        return None
    if message.rcode not in (w.RCODE_NOERROR, w.RCODE_NXDOMAIN) or message.flags & w.FLAG_TC:
        return None
    ttls = [r.ttl for r in message.answers]
    if not ttls:
        ttls = [min(r.ttl, r.rdata.minimum) for r in message.authority if isinstance(r.rdata, w.SOA)]
    return min(ttls) if ttls else None


class _Once(asyncio.DatagramProtocol):
    def __init__(self, ident: int, question: bytes) -> None:
        self.ident = ident
        self.question = question
        self.answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def datagram_received(self, data: bytes, addr: tuple[str | object, int]) -> None:
        # only the answer to this question: same ID and the same question section
        if len(data) >= 12 and data[:2] == struct.pack("!H", self.ident) and data[12:12 + len(self.question)] \
                == self.question and not self.answer.done():
            self.answer.set_result(data)

    def error_received(self, exc: Exception) -> None:
        if not self.answer.done():
            self.answer.set_exception(exc)


def _question_bytes(query: bytes) -> bytes:
    """The raw question section of a one-question query (name + type + class)."""
    at = 12
    while at < len(query):
        length = query[at]
        if length == 0:
            return query[12:at + 5]
        if length & 0xC0:
            break
        at += 1 + length
    raise w.DnsFormatError("cannot find the question")


async def _udp(query: bytes, upstream: Upstream, timeout_s: float) -> bytes:
    loop = asyncio.get_running_loop()
    ident = secrets.randbelow(0x10000)
    outgoing = struct.pack("!H", ident) + query[2:]
    family = socket.AF_INET6 if ":" in upstream[0] else socket.AF_INET
    transport, protocol = await loop.create_datagram_endpoint(
        lambda: _Once(ident, _question_bytes(query)), remote_addr=upstream, family=family)
    try:
        transport.sendto(outgoing)
        answer = await asyncio.wait_for(protocol.answer, timeout_s)
    finally:
        transport.close()
    return query[:2] + answer[2:]


async def _tcp(query: bytes, upstream: Upstream, timeout_s: float) -> bytes:
    ident = secrets.randbelow(0x10000)
    outgoing = struct.pack("!H", ident) + query[2:]
    async with asyncio.timeout(timeout_s):
        reader, writer = await asyncio.open_connection(*upstream)
        try:
            writer.write(struct.pack("!H", len(outgoing)) + outgoing)
            await writer.drain()
            (length,) = struct.unpack("!H", await reader.readexactly(2))
            answer = await reader.readexactly(length)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    if answer[:2] != struct.pack("!H", ident):
        raise DnsClientError(f"{upstream[0]}:{upstream[1]} answered another query over TCP")
    return query[:2] + answer[2:]


async def exchange(query: bytes, upstreams: Sequence[Upstream], *, tcp: bool = False,
                   timeout_s: float = DEFAULT_TIMEOUT_S) -> bytes:
    """The first upstream's answer to `query` (raw bytes in and out, the caller's ID kept)."""
    if len(query) < 12:
        raise DnsClientError("not a DNS query")
    failures: list[str] = []
    for upstream in upstreams:
        try:
            if not tcp:
                answer = await _udp(query, upstream, timeout_s)
                if len(answer) < 4 or not answer[2] & 0x02:  # TC clear: done
                    return answer
            return await _tcp(query, upstream, timeout_s)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, w.DnsFormatError, struct.error,
                DnsClientError) as exc:
            failures.append(f"{upstream[0]}:{upstream[1]}: {exc!r}")
    raise DnsClientError("; ".join(failures) or "no upstream to ask")


def servfail(query: bytes) -> bytes | None:
    """A SERVFAIL answer to `query` (its question echoed), or None when it has no question."""
    try:
        message = w.parse_message(query)
    except (w.DnsFormatError, ValueError, struct.error):
        return None
    flags = w.FLAG_QR | (message.flags & (w.FLAG_RD | 0x7800)) | w.FLAG_RA | w.RCODE_SERVFAIL
    return w.encode_message(w.Message(message.id, flags, message.questions[:1]))
