"""`tether dns`'s wire side: UDP and TCP on one address, answers from memory, the rest forwarded.

The hot path is a cache hit: the query's bytes minus its ID are looked up in a `WireCache` and
the stored response goes back with the query's ID, no parse, no encode. A miss parses the query,
answers from the current `Table` (`answer`), encodes it for the client's size limit (UDP: the
client's EDNS0 buffer size, at least 512, at most `max_udp_bytes`; larger answers go back empty
with TC set, so the client retries over TCP) and stores the bytes. `set_table` swaps the table
and clears the cache, so an answer never outlives the data it came from.

Names outside the table's zones go to the upstreams as they came (`tether.net.dnsclient`), at most
`max_forwards` at once (more get SERVFAIL); their answers are cached for their smallest TTL, at
most `forward_cache_s`.

Bad input never stops the server: a datagram shorter than a header, or a response, is dropped;
one that does not parse, is larger than `max_query_bytes` or cannot be answered gets FORMERR (a
bare header with the query's ID). TCP connections are bounded in number and idle time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.connect.dns.answer import answer, reply
from tether.connect.dns.records import Table, build_table
from tether.net import dnsclient
from tether.net import dnswire as w
from tether.net import metrics as m
from tether.net.dnscache import WireCache, has_options

log = logging.getLogger(__name__)

UDP, TCP = 1, 0  # cache key transport classes
POLL_S = 0.25
RCODE_NAMES = ("NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED")
DURATION_BUCKETS = (0.00025, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512,
                    1.024, 2.048)


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 5353
    upstreams: tuple[dnsclient.Upstream, ...] = ()
    max_udp_bytes: int = 1232
    max_query_bytes: int = 4096
    max_tcp_connections: int = 256
    tcp_idle_timeout_s: float = 10.0
    forward_timeout_s: float = 2.0
    max_forwards: int = 1000
    cache_entries: int = 20_000
    forward_cache_s: float = 30.0


@dataclass
class Counters:
    requests: dict[str, int] = field(default_factory=lambda: {"udp": 0, "tcp": 0})
    rcodes: list[int] = field(default_factory=lambda: [0] * 16)
    malformed: int = 0
    dropped: int = 0
    truncated: int = 0
    forwards: int = 0
    forward_failures: int = 0
    forward_refused: int = 0
    table_swaps: int = 0
    duration: m.Histogram = field(default_factory=lambda: m.Histogram(DURATION_BUCKETS))


def bind_pair(host: str, port: int, attempts: int = 20) -> tuple[socket.socket, socket.socket]:
    """A UDP and a TCP socket bound to the same host:port; port 0 tries free ports until one is
    free for both."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    last: OSError | None = None
    for _ in range(attempts if port == 0 else 1):
        udp = socket.socket(family, socket.SOCK_DGRAM)
        tcp = socket.socket(family, socket.SOCK_STREAM)
        try:
            udp.bind((host, port))
            with contextlib.suppress(OSError):
                udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind((host, udp.getsockname()[1]))
            tcp.listen(128)
        except OSError as exc:
            udp.close()
            tcp.close()
            last = exc
            continue
        udp.setblocking(False)
        tcp.setblocking(False)
        return udp, tcp
    raise last or OSError(f"cannot listen on {host}:{port}")


def formerr(data: bytes) -> bytes:
    """A bare FORMERR header carrying the query's ID (and its opcode and RD bit)."""
    flags = w.FLAG_QR | (((data[2] << 8) | data[3]) & (0x7800 | w.FLAG_RD)) | w.RCODE_FORMERR
    return data[:2] + struct.pack("!HHHHH", flags, 0, 0, 0, 0)


class _UdpReceiver:
    """UDP on a thread of its own: a blocking `recvfrom`/`sendto` loop answers cache hits there
    (a few microseconds of interpreter time each, no event-loop round trip) and hands every miss
    to the event loop. Its counters are its own, so no two threads ever write one field."""

    def __init__(self, server: DnsServer, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.sock = sock
        self.loop = loop
        self.hits_by_rcode = [0] * 16
        self.received = 0
        self.stopping = False
        self.thread = threading.Thread(target=self._run, name="tether-dns-udp", daemon=True)

    def start(self) -> None:
        self.sock.setblocking(True)
        self.sock.settimeout(POLL_S)  # how soon the thread notices `stop`
        self.thread.start()

    def stop(self) -> None:
        self.stopping = True

    def _run(self) -> None:
        recv, send, get = self.sock.recvfrom, self.sock.sendto, self.server.cache.get
        rcodes = self.hits_by_rcode
        miss = self.server.udp_miss
        call = self.loop.call_soon_threadsafe
        while not self.stopping:
            try:
                data, addr = recv(65535)
            except OSError:  # the poll timeout, or the socket closing under us
                continue
            self.received += 1
            hit = get(data, UDP) if len(data) >= 12 else None
            if hit is not None:
                rcodes[hit[3] & 0xF] += 1
                with contextlib.suppress(OSError):
                    send(hit, addr)
                continue
            try:
                call(miss, data, addr)
            except RuntimeError:  # the loop is closed: the server is going away
                return


class DnsServer:
    def __init__(self, config: ServerConfig, table: Table | None = None) -> None:
        self.config = config
        self.table = table or build_table()
        self.cache = WireCache(config.cache_entries)
        self.counters = Counters()
        self.address: tuple[str, int] | None = None
        self.ready = asyncio.Event()
        self._forwarding = 0
        self._tcp_active = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._udp: _UdpReceiver | None = None
        self._udp_sock: socket.socket
        self._tcp: asyncio.Server | None = None

    def set_table(self, table: Table) -> None:
        self.table = table
        self.cache.clear()
        self.counters.table_swaps += 1

    # answering ----------------------------------------------------------------------------

    def miss(self, data: bytes, transport: int, later: Any) -> bytes | None:
        """The response to a query the cache did not hold, or None (dropped, or `later` will be
        called with the forwarded answer)."""
        began = time.perf_counter()
        counters = self.counters
        if len(data) < 12:
            counters.dropped += 1
            return None
        if data[2] & 0x80:  # a response: never answer one (reflection loops)
            counters.dropped += 1
            return None
        if len(data) > self.config.max_query_bytes:
            counters.malformed += 1
            return self._count(formerr(data))
        try:
            query = w.parse_message(data)
        except (w.DnsFormatError, ValueError, struct.error, UnicodeError):
            counters.malformed += 1
            return self._count(formerr(data))
        recursion = bool(self.config.upstreams)
        limit = 65535 if transport == TCP else min(query.udp_limit, self.config.max_udp_bytes)
        response = answer(query, self.table, recursion=recursion)
        if response is None:
            if not recursion:
                return self._count(self._encode(reply(query, w.RCODE_REFUSED), data, limit))
            self._forward(data, transport, later)
            return None
        encoded = self._encode(response, data, limit)
        self.cache.put(data, transport, encoded)
        counters.duration.observe(time.perf_counter() - began)
        return self._count(encoded)

    def _encode(self, response: w.Message, data: bytes, limit: int) -> bytes:
        """`limit`: the client's UDP size (its EDNS0 buffer size, at least 512, at most
        `max_udp_bytes`), or 65535 over TCP."""
        try:
            encoded = w.encode_for_limit(response, max(w.MAX_UDP_PLAIN, limit))
        except (w.DnsFormatError, ValueError, UnicodeError, struct.error):  # a name we cannot write back
            self.counters.malformed += 1
            return formerr(data)
        if encoded[2] & 0x02:
            self.counters.truncated += 1
        return encoded

    def _count(self, response: bytes) -> bytes:
        self.counters.rcodes[response[3] & 0xF] += 1
        return response

    def _forward(self, data: bytes, transport: int, later: Any) -> None:
        if self._forwarding >= self.config.max_forwards:
            self.counters.forward_refused += 1
            failed = dnsclient.servfail(data)
            if failed is not None:
                later(self._count(failed))
            return
        self._forwarding += 1
        self.counters.forwards += 1
        task = asyncio.get_running_loop().create_task(self._forward_one(data, transport, later))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _forward_one(self, data: bytes, transport: int, later: Any) -> None:
        began = time.perf_counter()
        try:
            answer_bytes = await dnsclient.exchange(data, self.config.upstreams, tcp=transport == TCP,
                                                    timeout_s=self.config.forward_timeout_s)
        except dnsclient.DnsClientError as exc:
            self.counters.forward_failures += 1
            log.info("dns: forwarding failed: %s", exc)
            failed = dnsclient.servfail(data)
            if failed is not None:
                later(self._count(failed))
            return
        finally:
            self._forwarding -= 1
        ttl = dnsclient.min_ttl(answer_bytes)
        if ttl is not None and self.config.forward_cache_s > 0 and not has_options(data):
            self.cache.put(data, transport, answer_bytes, min(float(ttl), self.config.forward_cache_s))
        self.counters.duration.observe(time.perf_counter() - began)
        later(self._count(answer_bytes))

    # serving -------------------------------------------------------------------------------

    @property
    def udp_received(self) -> int:
        return self._udp.received if self._udp is not None else 0

    def udp_miss(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        """A UDP query the receive thread's cache lookup missed (runs on the event loop)."""
        try:
            out = self.miss(data, UDP, lambda response: self._udp_send(response, addr))
        except Exception:  # one query must never stop the server
            log.exception("dns: failed to answer a UDP query from %s", addr)
            out = formerr(data) if len(data) >= 12 else None
        if out is not None:
            self._udp_send(out, addr)

    def _udp_send(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        if self._udp is not None and not self._udp.stopping:
            with contextlib.suppress(OSError):
                self._udp_sock.sendto(data, addr)

    async def start(self) -> tuple[str, int]:
        """Listen on UDP and TCP at the same port (port 0: one free for both)."""
        loop = asyncio.get_running_loop()
        udp_sock, tcp_sock = bind_pair(self.config.host, self.config.port)
        port = udp_sock.getsockname()[1]
        try:
            self._tcp = await asyncio.start_server(self._serve_tcp, sock=tcp_sock, backlog=128)
        except OSError:
            udp_sock.close()
            tcp_sock.close()
            raise
        self._udp_sock = udp_sock
        self._udp = _UdpReceiver(self, udp_sock, loop)
        self._udp.start()
        self.address = (self.config.host, port)
        self.ready.set()
        return self.address

    async def close(self) -> None:
        if self._udp is not None:
            self._udp.stop()
            await asyncio.to_thread(self._udp.thread.join, POLL_S * 4)
            self._udp_sock.close()
        if self._tcp is not None:
            self._tcp.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._tcp.wait_closed(), 1.0)
        for task in list(self._tasks):
            task.cancel()

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._tcp_active >= self.config.max_tcp_connections:
            writer.close()
            return
        self._tcp_active += 1
        idle = self.config.tcp_idle_timeout_s
        pending: asyncio.Queue[bytes | None] = asyncio.Queue()
        try:
            while True:
                try:
                    (length,) = struct.unpack("!H", await asyncio.wait_for(reader.readexactly(2), idle))
                    data = await asyncio.wait_for(reader.readexactly(length), idle)
                except (asyncio.IncompleteReadError, TimeoutError, OSError, struct.error):
                    return
                self.counters.requests["tcp"] += 1
                out = self.cache.get(data, TCP) if len(data) >= 12 else None
                if out is not None:
                    self._count(out)
                else:
                    try:
                        out = self.miss(data, TCP, pending.put_nowait)
                    except Exception:
                        log.exception("dns: failed to answer a TCP query")
                        out = formerr(data) if len(data) >= 12 else None
                    if out is None and len(data) >= 12 and not data[2] & 0x80:
                        out = await asyncio.wait_for(pending.get(), self.config.forward_timeout_s * 3)
                if out is None:
                    return
                writer.write(struct.pack("!H", len(out)) + out)
                await asyncio.wait_for(writer.drain(), idle)
        except (OSError, TimeoutError):
            return
        finally:
            self._tcp_active -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    # metrics -------------------------------------------------------------------------------

    def metric_families(self, extra: Sequence[Any] = ()) -> list[Any]:
        c = self.counters
        hits = self._udp.hits_by_rcode if self._udp is not None else [0] * 16
        requests = dict(c.requests)
        requests["udp"] = self._udp.received if self._udp is not None else 0
        rcodes: dict[m.Labels, float] = {(("rcode", RCODE_NAMES[i] if i < len(RCODE_NAMES) else str(i)),): float(n + h)
                                         for i, (n, h) in enumerate(zip(c.rcodes, hits, strict=True)) if n + h}
        return [
            m.counter("tether_dns_requests_total", "DNS queries received, by transport.",
                      {(("proto", k),): float(v) for k, v in requests.items()}),
            m.counter("tether_dns_responses_total", "DNS responses sent, by rcode.", rcodes),
            m.counter("tether_dns_cache_hits_total", "Queries answered from the wire-level cache.",
                      {(): float(self.cache.stats.hits)}),
            m.counter("tether_dns_cache_misses_total", "Queries the cache did not hold.",
                      {(): float(self.cache.stats.misses)}),
            m.gauge("tether_dns_cache_entries", "Responses held by the cache.", {(): float(len(self.cache))}),
            m.counter("tether_dns_malformed_requests_total", "Queries answered FORMERR.", {(): float(c.malformed)}),
            m.counter("tether_dns_dropped_requests_total", "Datagrams dropped (too short, or responses).",
                      {(): float(c.dropped)}),
            m.counter("tether_dns_truncated_responses_total", "UDP answers sent empty with TC set.",
                      {(): float(c.truncated)}),
            m.counter("tether_dns_forward_requests_total", "Queries forwarded upstream.", {(): float(c.forwards)}),
            m.counter("tether_dns_forward_failures_total", "Forwarded queries no upstream answered.",
                      {(): float(c.forward_failures)}),
            m.counter("tether_dns_forward_refused_total", "Queries not forwarded: too many in flight.",
                      {(): float(c.forward_refused)}),
            m.gauge("tether_dns_records", "Records the server answers from memory.", {(): float(self.table.size)}),
            m.counter("tether_dns_table_swaps_total", "Times the records were rebuilt from watch events.",
                      {(): float(c.table_swaps)}),
            m.histogram("tether_dns_request_duration_seconds",
                        "Time to answer a query the cache did not hold (forwarded ones included).",
                        {(): c.duration}),
            *extra,
        ]

