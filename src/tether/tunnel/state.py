"""The tunnel's connection state machines, without I/O.

Both sides take events (a packet arrived, a stream ended, a dial finished, time passed) and return
actions for the I/O layer to carry out. Nothing here blocks, sleeps or touches a socket.

Server (`ServerState`): frontends (a client's Proxy stream or an HTTP-CONNECT socket, each serving
one connection) and backends (an agent's Connect stream, many connections). Pending dials are
keyed by the client's `random`, established connections by (backend, connectID). Unlike ANP:
pending dials of a departing agent fail at once, a dial that outlives `dial_timeout_s` fails with
DIAL_CLS sent to the agent, and a late DIAL_RSP is answered with CLOSE_REQ so nothing leaks.

Agent (`AgentState`): connectIDs allocated per server stream from 1, dials started and cancelled
(DIAL_CLS cancels a pending dial, which Go's agent ignores), close handshakes. Every DIAL_REQ is
validated before a dial starts (`destinations.check_dial`: protocol, host, port 1-65535, address
family; then the agent's allow-list): a bad one is answered with a DIAL_RSP error, like a failed
dial, and never reaches a socket call. A DIAL_REQ reusing the `random` of a dial in progress is
refused the same way. Any packet in any state yields actions or nothing, never an exception.

Flow control (`SendWindow`, `ReceiveWindow`): credits per connection, so a reader that stops
reading stalls only its own connection.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.tunnel import packets as p
from tether.tunnel.destinations import (
    Destination,
    DestinationError,
    Pattern,
    allows,
    check_dial,
    needs_resolution,
    printable,
)
from tether.tunnel.routing import NO_AGENT, AgentIdentifiers, Router

AGENT_GONE = "agent disconnected"
DIAL_TIMED_OUT = "timed out waiting for backend dial"
ALREADY_DIALED = "single-use tunnel already dialed"
UNKNOWN_CONNECT_ID = "Unknown connectID"
UNRECOGNIZED_CONNECT_ID = "unrecognized connectID"
NOT_ALLOWED = "destination not allowed by this agent"
DUPLICATE_RANDOM = "duplicate dial random"


# -- actions -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ToAgent:
    backend: int
    packet: p.Packet


@dataclass(frozen=True, slots=True)
class ToFrontend:
    frontend: int
    packet: p.Packet


@dataclass(frozen=True, slots=True)
class EndFrontend:
    """Nothing more will be sent to this frontend: flush what is queued, then end it."""

    frontend: int


@dataclass(frozen=True, slots=True)
class Credit:
    """The agent consumed `credit` bytes of this frontend's connection (server→agent window)."""

    frontend: int
    credit: int


ServerAction = ToAgent | ToFrontend | EndFrontend | Credit


@dataclass
class _Frontend:
    phase: str = "new"  # new → dialing → open → closing → done
    backend: int | None = None
    random: int | None = None
    connect_id: int = 0


@dataclass
class _Pending:
    frontend: int
    backend: int
    started_s: float


@dataclass
class _Backend:
    pending: set[int] = field(default_factory=set)  # randoms
    established: set[int] = field(default_factory=set)  # connectIDs


@dataclass
class DialFailure:
    """Counters behind `dial_failure_count{reason}`."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, reason: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1


class ServerState:
    def __init__(self, router: Router | None = None, *, dial_timeout_s: float = 0.0) -> None:
        self.router = router or Router()
        self.dial_timeout_s = dial_timeout_s
        self.frontends: dict[int, _Frontend] = {}
        self.backends: dict[int, _Backend] = {}
        self.pending: dict[int, _Pending] = {}  # random → dial; insertion order = start order
        self.established: dict[tuple[int, int], int] = {}  # (backend, connectID) → frontend
        self.failures = DialFailure()
        self.dial_durations_s: list[float] = []  # drained by the metrics layer

    # -- agents --------------------------------------------------------------------------------
    def agent_connected(self, backend: int, agent_id: str, identifiers: AgentIdentifiers) -> None:
        self.backends[backend] = _Backend()
        self.router.add(backend, agent_id, identifiers)

    def agent_disconnected(self, backend: int) -> list[ServerAction]:
        self.router.remove(backend)
        info = self.backends.pop(backend, None)
        if info is None:
            return []
        out: list[ServerAction] = []
        for connect_id in sorted(info.established):
            frontend = self.established.pop((backend, connect_id), None)
            if frontend is not None:
                self._finish(frontend)
                out += [ToFrontend(frontend, p.close_rsp(connect_id)), EndFrontend(frontend)]
        for random in sorted(info.pending):
            dial = self.pending.pop(random, None)
            if dial is not None:
                self.failures.add("backend_close")
                self._finish(dial.frontend)
                out += [ToFrontend(dial.frontend, p.dial_rsp(random, error=AGENT_GONE)),
                        EndFrontend(dial.frontend)]
        return out

    def agent_packet(self, backend: int, packet: p.Packet, now_s: float = 0.0) -> list[ServerAction]:
        info = self.backends.get(backend)
        if info is None:
            return []
        payload = packet.payload
        if isinstance(payload, p.DialResponse):
            dial = self.pending.get(payload.random)
            if dial is None or dial.backend != backend:
                self.failures.add("unrecognized_response")
                return [ToAgent(backend, p.close_req(payload.connect_id))] if payload.connect_id else []
            del self.pending[payload.random]
            info.pending.discard(payload.random)
            self.dial_durations_s.append(max(0.0, now_s - dial.started_s))
            fe = self.frontends.get(dial.frontend)
            if payload.error or not payload.connect_id or fe is None:
                if payload.error:
                    self.failures.add("error_response")
                self._finish(dial.frontend)
                out: list[ServerAction] = []
                if payload.connect_id and not payload.error:
                    out.append(ToAgent(backend, p.close_req(payload.connect_id)))
                if fe is not None:
                    out += [ToFrontend(dial.frontend, packet), EndFrontend(dial.frontend)]
                return out
            fe.phase, fe.connect_id = "open", payload.connect_id
            self.established[(backend, payload.connect_id)] = dial.frontend
            info.established.add(payload.connect_id)
            return [ToFrontend(dial.frontend, packet)]
        if isinstance(payload, p.Data):
            frontend = self.established.get((backend, payload.connect_id))
            if frontend is None:
                return [ToAgent(backend, p.close_req(payload.connect_id))] if payload.connect_id else []
            return [ToFrontend(frontend, packet)]
        if isinstance(payload, p.CloseResponse):
            frontend = self.established.pop((backend, payload.connect_id), None)
            info.established.discard(payload.connect_id)
            if frontend is None:
                return []
            self._finish(frontend)
            return [ToFrontend(frontend, packet), EndFrontend(frontend)]
        if isinstance(payload, p.CloseDial):
            dial = self.pending.pop(payload.random, None)
            if dial is None or dial.backend != backend:
                return []
            info.pending.discard(payload.random)
            self._finish(dial.frontend)
            return [ToFrontend(dial.frontend, packet), EndFrontend(dial.frontend)]
        if isinstance(payload, p.Drain):
            self.router.set_draining(backend)
            return []
        if isinstance(payload, p.WindowUpdate):
            frontend = self.established.get((backend, payload.connect_id))
            return [Credit(frontend, payload.credit)] if frontend is not None else []
        return []  # DIAL_REQ, CLOSE_REQ from an agent, unknown types: ignored like ANP

    # -- frontends -----------------------------------------------------------------------------
    def frontend_opened(self, frontend: int) -> None:
        self.frontends[frontend] = _Frontend()

    def frontend_packet(self, frontend: int, packet: p.Packet, now_s: float = 0.0) -> list[ServerAction]:
        fe = self.frontends.get(frontend)
        if fe is None:
            return []
        payload = packet.payload
        if isinstance(payload, p.DialRequest):
            if fe.phase != "new":
                return [ToFrontend(frontend, p.dial_rsp(payload.random, error=ALREADY_DIALED))]
            if payload.random in self.pending:
                return [ToFrontend(frontend, p.dial_rsp(payload.random, error="duplicate dial random")),
                        EndFrontend(frontend)]
            backend = self.router.choose(payload.address)
            if backend is None:
                self.failures.add("no_agent")
                fe.phase = "done"
                return [ToFrontend(frontend, p.dial_rsp(payload.random, error=NO_AGENT)),
                        EndFrontend(frontend)]
            fe.phase, fe.backend, fe.random = "dialing", backend, payload.random
            self.pending[payload.random] = _Pending(frontend, backend, now_s)
            self.backends[backend].pending.add(payload.random)
            return [ToAgent(backend, packet)]
        if isinstance(payload, p.Data):
            if fe.phase != "open" or fe.backend is None:
                return []
            if payload.connect_id != fe.connect_id:
                return self._mismatched(frontend, fe)
            return [ToAgent(fe.backend, packet)]
        if isinstance(payload, p.CloseRequest):
            if fe.phase == "open" and fe.backend is not None:
                fe.phase = "closing"
                return [ToAgent(fe.backend, p.close_req(fe.connect_id))]
            if fe.phase == "closing":
                return []
            fe.phase = "done"
            return [ToFrontend(frontend, p.close_rsp(payload.connect_id, "backend uninitialized")),
                    EndFrontend(frontend)]
        if isinstance(payload, p.CloseDial):
            if fe.phase == "dialing" and fe.random == payload.random and fe.backend is not None:
                self._drop_pending(payload.random, "frontend_close")
                fe.phase = "done"
                return [ToAgent(fe.backend, packet), EndFrontend(frontend)]
            return []
        return []

    def frontend_closed(self, frontend: int) -> list[ServerAction]:
        """The frontend is gone (stream ended or cancelled, socket closed)."""
        fe = self.frontends.pop(frontend, None)
        if fe is None or fe.backend is None:
            return []
        if fe.phase == "dialing" and fe.random is not None and fe.random in self.pending:
            self._drop_pending(fe.random, "frontend_close")
            return [ToAgent(fe.backend, p.dial_cls(fe.random))]
        if fe.phase in ("open", "closing"):
            key = (fe.backend, fe.connect_id)
            if self.established.pop(key, None) is not None:
                info = self.backends.get(fe.backend)
                if info is not None:
                    info.established.discard(fe.connect_id)
                if fe.phase == "open":
                    return [ToAgent(fe.backend, p.close_req(fe.connect_id))]
        return []

    def expire(self, now_s: float) -> list[ServerAction]:
        """Fail the dials older than `dial_timeout_s` (0 disables) and tell their agents."""
        if self.dial_timeout_s <= 0:
            return []
        out: list[ServerAction] = []
        for random, dial in list(self.pending.items()):
            if now_s - dial.started_s < self.dial_timeout_s:
                break  # insertion order is start order
            self._drop_pending(random, "backend_dial_timeout")
            self._finish(dial.frontend)
            out += [ToFrontend(dial.frontend, p.dial_rsp(random, error=DIAL_TIMED_OUT)),
                    EndFrontend(dial.frontend), ToAgent(dial.backend, p.dial_cls(random))]
        return out

    def backend_of(self, frontend: int) -> tuple[int, int] | None:
        """(backend, connectID) of an open frontend connection."""
        fe = self.frontends.get(frontend)
        if fe is None or fe.backend is None or fe.phase != "open":
            return None
        return fe.backend, fe.connect_id

    # -- helpers -------------------------------------------------------------------------------
    def _drop_pending(self, random: int, reason: str) -> None:
        dial = self.pending.pop(random, None)
        if dial is not None:
            self.failures.add(reason)
            info = self.backends.get(dial.backend)
            if info is not None:
                info.pending.discard(random)

    def _finish(self, frontend: int) -> None:
        fe = self.frontends.get(frontend)
        if fe is not None:
            fe.phase = "done"

    def _mismatched(self, frontend: int, fe: _Frontend) -> list[ServerAction]:
        assert fe.backend is not None
        self.established.pop((fe.backend, fe.connect_id), None)
        info = self.backends.get(fe.backend)
        if info is not None:
            info.established.discard(fe.connect_id)
        fe.phase = "done"
        return [ToAgent(fe.backend, p.close_req(fe.connect_id)),
                ToFrontend(frontend, p.close_rsp(fe.connect_id, "mismatched connection IDs")),
                EndFrontend(frontend)]


# -- agent side --------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Send:
    packet: p.Packet


@dataclass(frozen=True, slots=True)
class StartDial:
    connect_id: int
    protocol: str
    address: str
    destination: Destination | None = field(default=None, compare=False)
    # the allow-list permits this name only through the address it resolves to: dial that
    # address, after checking it, never the name
    check_resolved: bool = field(default=False, compare=False)


@dataclass(frozen=True, slots=True)
class CancelDial:
    connect_id: int


@dataclass(frozen=True, slots=True)
class WriteTarget:
    connect_id: int
    data: p.Chunk


@dataclass(frozen=True, slots=True)
class CloseTarget:
    connect_id: int


@dataclass(frozen=True, slots=True)
class TargetCredit:
    connect_id: int
    credit: int


AgentAction = Send | StartDial | CancelDial | WriteTarget | CloseTarget | TargetCredit


@dataclass
class _AgentConn:
    random: int
    phase: str = "dialing"  # dialing → open → closing


class AgentState:
    """One agent↔server stream. connectIDs start at 1 and are consumed even by failed dials."""

    def __init__(self, allowed: tuple[Pattern, ...] = ()) -> None:
        self.allowed = allowed  # empty: any valid destination
        self.next_connect_id = 0
        self.conns: dict[int, _AgentConn] = {}
        self.dialing: dict[int, int] = {}  # random → connectID

    def server_packet(self, packet: p.Packet) -> list[AgentAction]:
        payload = packet.payload
        if isinstance(payload, p.DialRequest):
            return self._dial_request(payload)
        if isinstance(payload, p.Data):
            conn = self.conns.get(payload.connect_id)
            if conn is None or conn.phase == "dialing":
                return [Send(p.close_rsp(payload.connect_id, UNRECOGNIZED_CONNECT_ID))]
            if conn.phase == "closing":
                return []
            return [WriteTarget(payload.connect_id, payload.data)]
        if isinstance(payload, p.CloseRequest):
            conn = self.conns.get(payload.connect_id)
            if conn is None or conn.phase == "dialing":
                return [Send(p.close_rsp(payload.connect_id, UNKNOWN_CONNECT_ID))]
            if conn.phase == "closing":
                return []
            conn.phase = "closing"
            return [CloseTarget(payload.connect_id)]
        if isinstance(payload, p.CloseDial):
            cid_or_none = self.dialing.pop(payload.random, None)
            if cid_or_none is None:
                return []
            self.conns.pop(cid_or_none, None)
            return [CancelDial(cid_or_none)]
        if isinstance(payload, p.WindowUpdate):
            conn = self.conns.get(payload.connect_id)
            if conn is None or conn.phase != "open":
                return []
            return [TargetCredit(payload.connect_id, payload.credit)]
        return []

    def _dial_request(self, req: p.DialRequest) -> list[AgentAction]:
        self.next_connect_id += 1
        cid = self.next_connect_id

        def refuse(reason: str) -> list[AgentAction]:
            error = f"dial {printable(req.protocol)} {printable(req.address)}: {reason}"
            return [Send(p.dial_rsp(req.random, error=error))]

        try:
            dest = check_dial(req.protocol, req.address)
        except DestinationError as exc:
            return refuse(str(exc))
        if req.random in self.dialing:
            return refuse(DUPLICATE_RANDOM)
        resolve = False
        if self.allowed and not allows(self.allowed, dest):
            if not needs_resolution(self.allowed, dest):
                return refuse(NOT_ALLOWED)
            resolve = True
        self.conns[cid] = _AgentConn(req.random)
        self.dialing[req.random] = cid
        return [StartDial(cid, req.protocol, req.address, dest, resolve)]

    def dial_done(self, connect_id: int, error: str = "") -> list[AgentAction]:
        conn = self.conns.get(connect_id)
        if conn is None or conn.phase != "dialing":
            # Cancelled by DIAL_CLS while dialling: a socket that connected anyway is closed.
            return [] if error else [CloseTarget(connect_id)]
        self.dialing.pop(conn.random, None)
        if error:
            del self.conns[connect_id]
            return [Send(p.dial_rsp(conn.random, error=error))]
        conn.phase = "open"
        return [Send(p.dial_rsp(conn.random, connect_id=connect_id))]

    def target_closed(self, connect_id: int) -> list[AgentAction]:
        """The target socket is closed (remote EOF, error, or our CloseTarget finished)."""
        conn = self.conns.pop(connect_id, None)
        if conn is None or conn.phase == "dialing":
            return []
        return [Send(p.close_rsp(connect_id))]

    def stream_lost(self) -> list[AgentAction]:
        out: list[AgentAction] = []
        for cid, conn in self.conns.items():
            out.append(CancelDial(cid) if conn.phase == "dialing" else CloseTarget(cid))
        self.conns.clear()
        self.dialing.clear()
        return out


# -- flow control ------------------------------------------------------------------------------

@dataclass
class SendWindow:
    """Sender's credit. A chunk may be sent while any credit is left (one chunk of overshoot)."""

    available: int

    def can_send(self) -> bool:
        return self.available > 0

    def sent(self, n: int) -> None:
        self.available -= n

    def credit(self, n: int) -> None:
        self.available += max(0, n)


@dataclass
class ReceiveWindow:
    """Receiver's side: bytes buffered for a reader, credit returned in batches as it consumes."""

    size: int
    max_chunk: int = 1 << 16
    buffered: int = 0
    unacked: int = 0

    def received(self, n: int) -> bool:
        """False when the peer overran the window (size plus one chunk of overshoot)."""
        self.buffered += n
        return self.buffered <= self.size + self.max_chunk

    def consumed(self, n: int) -> int:
        """Credit to return now (0 while below a quarter of the window)."""
        self.buffered -= n
        self.unacked += n
        if self.unacked >= max(1, self.size // 4):
            credit, self.unacked = self.unacked, 0
            return credit
        return 0
