"""Who may hold a connection to one listener, decided when the socket is accepted.

Anyone who can reach a port can open connections without credentials; each costs a file
descriptor and memory until it goes. So, per listener:

- a connection counts as *unauthenticated* from its accept until a request on it carried
  credentials the handler accepted (`Connection.authenticated()`); one client address holds at
  most `max_unauthenticated_per_address` of those, counted before the TLS handshake, so a
  flood of half-open handshakes is refused at accept, before any TLS work;
- a TLS handshake must finish within `handshake_timeout_s`;
- all connections together are at most `max_connections`. When that is reached, a newcomer
  from an address holding fewer unauthenticated connections than the heaviest one takes the
  place of that address's oldest unauthenticated connection: addresses flooding the listener
  push each other out, never a client that holds few connections (the reserve), and never a
  connection that has authenticated.

`decide` is the pure rule; `ConnectionTable` keeps the counts; `Admission` applies it to each
accepted socket and hands the admitted ones to `tls_stream` or `plain_stream`.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import functools
import time
import weakref
from asyncio import sslproto
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# What asyncio's TLS protocol reads from the socket at once. Its default (256 KiB) is allocated
# and zero-filled per connection, so 2,000 idle connections held ~550 MB, and glibc kept most
# of it after they closed (blocks that size come from the heap once the first one was freed,
# and the heap is not given back while small objects sit above them). A TLS record is at most
# ~16 KiB, so 32 KiB per read costs nothing on large bodies and keeps an idle connection small.
TLS_READ_BYTES = 32 * 1024
# glibc keeps what a wave of connections freed in its heap (free, reused by the next wave, but
# still counted in RSS: 2,000 idle TLS connections left ~115 MB behind). When the connections of
# a listener fall to a quarter of a peak of at least TRIM_AFTER_PEAK, the heap's free pages are
# given back (`malloc_trim`, in a thread: it takes milliseconds and ctypes releases the GIL).
TRIM_AFTER_PEAK = 512
TRIM_DELAY_S = 1.0


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None)  # the symbols already loaded, libc's among them
    except OSError:
        return None
    trim: Callable[[int], int] | None = getattr(libc, "malloc_trim", None)  # glibc only
    return trim


def trim_allocator() -> bool:
    """Give the C heap's free pages back to the system; False where that is not possible."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = 4096
    max_unauthenticated_per_address: int = 256
    handshake_timeout_s: float = 10.0


@dataclass(frozen=True)
class Admit:
    pass


@dataclass(frozen=True)
class Refuse:
    reason: str


@dataclass(frozen=True)
class Evict:
    """Admit, after closing the oldest unauthenticated connection of `address`."""

    address: str


Decision = Admit | Refuse | Evict


def decide(limits: ConnectionLimits, total: int, unauthenticated: Mapping[str, int], address: str) -> Decision:
    """Whether a connection just accepted from `address` may stay.

    `total`: connections held now; `unauthenticated`: per address, how many of them have not
    authenticated (addresses with none may be absent)."""
    mine = unauthenticated.get(address, 0)
    if mine >= limits.max_unauthenticated_per_address:
        return Refuse(f"{address} holds {mine} unauthenticated connections "
                      f"(at most {limits.max_unauthenticated_per_address})")
    if total < limits.max_connections:
        return Admit()
    heaviest = max(unauthenticated.items(), key=lambda item: item[1], default=None)
    # Strictly heavier by more than one, or two addresses at the cap would take turns
    # evicting each other with every connection.
    if heaviest is not None and heaviest[1] > mine + 1:
        return Evict(heaviest[0])
    return Refuse(f"{total} connections (at most {limits.max_connections})")


class Connection:
    """One accepted socket, as the table knows it."""

    __slots__ = ("_table", "address", "is_authenticated", "opened", "transport")

    def __init__(self, table: ConnectionTable) -> None:
        self.address = ""
        self.opened = 0.0
        self.transport: asyncio.BaseTransport | None = None
        self.is_authenticated = False
        self._table = table

    def authenticated(self) -> None:
        """The handler accepted credentials sent on this connection: it no longer counts
        against its address's unauthenticated limit and is never evicted."""
        if not self.is_authenticated:
            self.is_authenticated = True
            self._table.forget_unauthenticated(self)

    def release(self) -> None:
        """The socket is gone: its place in the table is free."""
        self._table.release(self)


class ConnectionTable:
    """The connections of one listener, with their addresses and whether they authenticated."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.live: set[Connection] = set()
        # address -> its unauthenticated connections, oldest first (dicts keep insertion order)
        self.unauthenticated: dict[str, dict[Connection, None]] = {}
        self.refused = 0
        self.evicted = 0
        self._peak = 0  # most connections held since memory was last given back
        self._trim_due = False

    def __len__(self) -> int:
        return len(self.live)

    def counts(self) -> dict[str, int]:
        return {address: len(conns) for address, conns in self.unauthenticated.items()}

    def admit(self, conn: Connection, transport: asyncio.BaseTransport) -> bool:
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "unknown"
        if len(self.live) < self.limits.max_connections:  # the common case: only ours matters
            counts = {address: len(self.unauthenticated.get(address, ()))}
        else:
            counts = self.counts()
        decision = decide(self.limits, len(self.live), counts, address)
        if isinstance(decision, Refuse):
            self.refused += 1
            return False
        if isinstance(decision, Evict):
            self._evict_oldest(decision.address)
        conn.address = address
        conn.opened = time.monotonic()
        conn.transport = transport
        self.live.add(conn)
        self.unauthenticated.setdefault(address, {})[conn] = None
        self._peak = max(self._peak, len(self.live))
        return True

    def _evict_oldest(self, address: str) -> None:
        victims = self.unauthenticated.get(address)
        if not victims:
            return
        victim = next(iter(victims))
        transport = victim.transport
        self.evicted += 1
        self.release(victim)  # counted out now: its transport closes on a later loop step
        if transport is not None:
            _abort(transport)

    def forget_unauthenticated(self, conn: Connection) -> None:
        conns = self.unauthenticated.get(conn.address)
        if conns is not None:
            conns.pop(conn, None)
            if not conns:
                del self.unauthenticated[conn.address]

    def release(self, conn: Connection) -> None:
        if conn in self.live:
            self.live.discard(conn)
            self.forget_unauthenticated(conn)
            if self._peak >= TRIM_AFTER_PEAK and len(self.live) * 4 <= self._peak and not self._trim_due:
                self._trim_due = True
                asyncio.get_running_loop().call_later(TRIM_DELAY_S, self._trim)
        conn.transport = None

    def _trim(self) -> None:
        self._trim_due = False
        self._peak = len(self.live)
        asyncio.get_running_loop().run_in_executor(None, trim_allocator)


def _abort(transport: asyncio.BaseTransport) -> None:
    """Drop the socket at once: nothing is owed to a connection that is refused or evicted."""
    if isinstance(transport, asyncio.WriteTransport):
        transport.abort()
    else:
        transport.close()


class Admission(asyncio.Protocol):
    """The protocol of a socket just accepted: the table decides, then the socket goes to the
    protocol that serves it, built only then (a refused socket costs no TLS object), or is
    dropped."""

    def __init__(self, table: ConnectionTable, serve: Callable[[Connection], asyncio.BaseProtocol]) -> None:
        self._table = table
        self._serve = serve

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        conn = Connection(self._table)
        if not self._table.admit(conn, transport):
            _abort(transport)
            return
        served = self._serve(conn)
        transport.set_protocol(served)
        served.connection_made(transport)


class _PlainStream(asyncio.StreamReaderProtocol):
    def __init__(self, conn: Connection, reader: asyncio.StreamReader,
                 on_connected: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any],
                 loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(reader, on_connected, loop=loop)
        self._conn = conn

    def connection_lost(self, exc: Exception | None) -> None:
        self._conn.release()
        super().connection_lost(exc)


def plain_stream(conn: Connection, reader: asyncio.StreamReader,
                 on_connected: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any],
                 loop: asyncio.AbstractEventLoop) -> asyncio.BaseProtocol:
    """A plain-TCP stream protocol that gives the connection's place back when it goes."""
    return _PlainStream(conn, reader, on_connected, loop)


# A TLS handshake is most of what a new connection costs (key exchange and signature: ~0.5 ms
# of CPU). asyncio answers every ClientHello that arrived in one step of the event loop, so 200
# connections opened at once stalled every other connection of the daemon for ~200 ms; at most
# this many handshake steps run per loop step, the rest in the next ones.
HANDSHAKES_PER_STEP = 4


class _HandshakePacer:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: collections.deque[_TlsStream] = collections.deque()
        self._scheduled = False

    def submit(self, stream: _TlsStream) -> None:
        self._queue.append(stream)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._step)

    def _step(self) -> None:
        # Runs once per loop step: call_soon from a callback lands in the next step.
        self._scheduled = False
        for _ in range(min(HANDSHAKES_PER_STEP, len(self._queue))):
            self._queue.popleft().paced_handshake()
        if self._queue:
            self._scheduled = True
            self._loop.call_soon(self._step)


_pacers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _HandshakePacer] = weakref.WeakKeyDictionary()


def _pacer(loop: asyncio.AbstractEventLoop) -> _HandshakePacer:
    pacer = _pacers.get(loop)
    if pacer is None:
        pacer = _pacers[loop] = _HandshakePacer(loop)
    return pacer


class _TlsStream(sslproto.SSLProtocol):
    """asyncio's TLS protocol with a smaller read buffer, a handshake deadline, handshakes paced
    across loop steps, and the connection's place given back when the socket goes."""

    max_size = TLS_READ_BYTES

    def __init__(self, conn: Connection, loop: asyncio.AbstractEventLoop,
                 app: asyncio.StreamReaderProtocol, context: Any, handshake_timeout_s: float) -> None:
        # No waiter (the stubs want one): nobody awaits the handshake, the app protocol is
        # told when it completes; a waiter's unretrieved exception would be logged instead.
        super().__init__(loop, app, context, None, server_side=True,  # type: ignore[arg-type]
                         ssl_handshake_timeout=handshake_timeout_s)  # type: ignore[arg-type]
        self._gate_conn = conn
        self._handshake_queued = False

    # The overrides below use SSLProtocol's own state (CPython >= 3.11's sslproto, which the
    # stubs do not describe): `inner` is `self` without static types.

    def buffer_updated(self, nbytes: int) -> None:
        inner: Any = self
        if inner._state is not sslproto.SSLProtocolState.DO_HANDSHAKE:
            super().buffer_updated(nbytes)
            return
        # What SSLProtocol does in this state, minus the handshake step itself: the bytes go to
        # the TLS object now (the read buffer is reused), the step waits for its turn.
        inner._incoming.write(inner._ssl_buffer_view[:nbytes])
        if not self._handshake_queued:
            self._handshake_queued = True
            _pacer(self._loop).submit(self)

    def paced_handshake(self) -> None:
        inner: Any = self
        self._handshake_queued = False
        if inner._state is sslproto.SSLProtocolState.DO_HANDSHAKE and self._transport is not None:
            inner._do_handshake()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._gate_conn.release()
        super().connection_lost(exc)


def tls_stream(conn: Connection, loop: asyncio.AbstractEventLoop, app: asyncio.StreamReaderProtocol,
               context: Any, handshake_timeout_s: float) -> asyncio.BaseProtocol:
    """asyncio's TLS server protocol around `app`, as this module bounds it (see `_TlsStream`)."""
    stream: asyncio.BaseProtocol = _TlsStream(conn, loop, app, context, handshake_timeout_s)
    return stream
