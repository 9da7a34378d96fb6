"""A small DNS server on a loopback address for `tether connect` sessions that do not edit hosts.

It answers A queries for the session's Service names (`svc`, `svc.ns`, `svc.ns.svc.cluster.local`,
`svc.ns.<cluster>`) with their loopback addresses (AAAA: no data), from a table the session
replaces whenever Services come or go. Other names under a cluster's domain (pods, headless
Services, names of namespaces not mapped) are forwarded as they came to the cluster's DNS Service
through the session's channel, so they are answered from inside the cluster; any other name gets
REFUSED (this server is for cluster names only; point a per-domain resolver at it).

Bad input never stops it: what does not parse gets FORMERR or is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from tether.net import dnswire as w

log = logging.getLogger(__name__)

TTL_S = 5
FORWARD_TIMEOUT_S = 3.0
MAX_FORWARDS = 64

Forward = Callable[[bytes], Awaitable[bytes]]


@dataclass(frozen=True)
class Zone:
    """A cluster domain whose other names go to `forward` (the cluster's DNS through a channel)."""

    suffix: str  # "cluster.local"
    forward: Forward | None = None


@dataclass(frozen=True)
class Table:
    addresses: Mapping[str, str] = field(default_factory=dict)  # lower-case name -> IPv4
    zones: tuple[Zone, ...] = ()

    def zone_of(self, name: str) -> Zone | None:
        return next((z for z in self.zones if name == z.suffix or name.endswith("." + z.suffix)), None)


def _reply(query: w.Message, rcode: int, answers: tuple[w.Record, ...] = ()) -> w.Message:
    flags = w.FLAG_QR | w.FLAG_AA | (query.flags & w.FLAG_RD) | rcode
    opt = (w.opt_record(1232),) if query.opt is not None else ()
    return w.Message(query.id, flags, query.questions[:1], answers, (), opt)


def local_answer(query: w.Message, table: Table) -> w.Message | None:
    """The answer from the table, or None when the query is for the cluster (forward it)."""
    if query.opcode != 0:
        return _reply(query, w.RCODE_NOTIMP)
    if len(query.questions) != 1 or query.is_response:
        return _reply(query, w.RCODE_FORMERR)
    question = query.questions[0]
    name = question.name.rstrip(".").lower()
    address = table.addresses.get(name)
    if address is not None:
        if question.qtype in (w.TYPE_A, w.TYPE_ANY):
            return _reply(query, w.RCODE_NOERROR, (w.Record.of(question.name.rstrip("."), TTL_S, w.A(address)),))
        return _reply(query, w.RCODE_NOERROR)
    zone = table.zone_of(name)
    if zone is None:
        return _reply(query, w.RCODE_REFUSED)
    if zone.forward is None:
        return _reply(query, w.RCODE_NXDOMAIN)
    return None


class LocalDns:
    """The server: `start()` binds UDP on `host:port` (0 or a busy port 53: any free port)."""

    def __init__(self, host: str, port: int = 53) -> None:
        self.host = host
        self.port = port
        self.table = Table()
        self._transport: asyncio.DatagramTransport | None = None
        self._forwards = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self.answered = 0
        self.forwarded = 0

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await loop.create_datagram_endpoint(lambda: _Protocol(self), local_addr=(self.host, self.port))
        except OSError as exc:
            if self.port == 0 or exc.errno not in (errno.EACCES, errno.EADDRINUSE):
                raise
            transport, _ = await loop.create_datagram_endpoint(lambda: _Protocol(self), local_addr=(self.host, 0))
        self._transport = transport
        self.port = int(transport.get_extra_info("sockname")[1])
        return self.port

    def handle(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            query = w.parse_message(data)
        except w.DnsFormatError:
            if len(data) >= 12 and not data[2] & 0x80:
                self._send(data[:2] + bytes([0x80 | (data[2] & 0x01), w.RCODE_FORMERR]) + bytes(8), addr)
            return
        if query.is_response:
            return
        answer = local_answer(query, self.table)
        if answer is not None:
            self.answered += 1
            self._send(w.encode_for_limit(answer, query.udp_limit), addr)
            return
        zone = self.table.zone_of(query.questions[0].name.rstrip(".").lower())
        if zone is None or zone.forward is None or self._forwards >= MAX_FORWARDS:
            self._send(w.encode_message(_reply(query, w.RCODE_SERVFAIL)), addr)
            return
        self._forwards += 1
        task = asyncio.get_running_loop().create_task(self._forward(zone.forward, query, data, addr))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _forward(self, forward: Forward, query: w.Message, data: bytes, addr: tuple[str, int]) -> None:
        try:
            async with asyncio.timeout(FORWARD_TIMEOUT_S):
                response = await forward(data)
            self.forwarded += 1
        except Exception as exc:
            log.info("forwarding %s: %s", query.questions[0].name, exc)
            response = w.encode_message(_reply(query, w.RCODE_SERVFAIL))
        finally:
            self._forwards -= 1
        self._send(response, addr)

    def _send(self, data: bytes, addr: tuple[str, int]) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.sendto(data, addr)

    async def aclose(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._tasks, return_exceptions=True)


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, server: LocalDns) -> None:
        self._server = server

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        try:
            self._server.handle(data, addr)
        except Exception:
            log.exception("dns datagram from %s", addr)
