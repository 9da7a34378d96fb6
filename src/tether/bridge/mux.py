"""The bridge's multiplexing protocol, sans I/O: many streams over one byte stream, either side opening.

One connection joins a developer's machine (the *client*) and the in-cluster bridge agent. Both
ends run a `MuxSession`: feed it the bytes read from the transport (`receive_data`), act on the
events it returns, and write what `data_to_send()` hands back. Nothing here touches a socket.

Wire format (all integers big-endian), one frame after another, each a 10-byte header:

    type:u8  flags:u8  stream:u32  length:u32   then `length` payload bytes (at most MAX_PAYLOAD)

| type | name        | stream | payload                                                        |
|------|-------------|--------|----------------------------------------------------------------|
| 0x01 | HELLO       | 0      | JSON `{"version": 1, "role": "client"/"agent", ...}`, first    |
| 0x02 | OPEN_TCP    | new id | JSON `{"host": str, "port": int}`                              |
| 0x03 | OPEN_UDP    | new id | JSON `{"host": str, "port": int}`                              |
| 0x04 | OPEN_REVERSE| new id | JSON `{"route": str, "port": int, "peer": str}` (agent only)   |
| 0x05 | REPLY       | id     | flags 0: opened; flags 1: failed, payload the UTF-8 reason     |
| 0x06 | DATA        | id     | bytes (for UDP streams: exactly one datagram)                  |
| 0x07 | EOF         | id     | none: the sender's half-close                                  |
| 0x08 | CLOSE       | id     | optional UTF-8 reason: the stream is over in both directions   |
| 0x09 | WINDOW      | id     | u32: the receiver consumed this many more bytes                |
| 0x0A | PING        | 0      | 8 opaque bytes; flags 1 marks the answer                       |
| 0x0B | CONTROL     | 0      | JSON `{"id": int, "op": ...}` requests and `{"id", "ok"}` replies |
| 0x0C | GOAWAY      | 0      | UTF-8 reason: the sender is closing the connection             |

Stream ids are odd when the client opens, even when the agent opens (so both can open at once
without agreeing first). A CLOSE from either side ends a stream; a stream whose two EOFs have
both been sent and received is over too.

Flow control: each side may have at most `window` bytes of DATA outstanding per stream (the
initial window is `INITIAL_WINDOW`); the receiver returns credit with WINDOW as its application
consumes the data. A sender never queues beyond its credit (`send_data` takes what fits), and a
receiver given more than it granted ends the connection, so a slow reader bounds what the other
end buffers to one window per stream. UDP streams share the rule; their callers drop a datagram
that does not fit rather than wait.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Literal

PROTOCOL_VERSION = 1
HEADER = struct.Struct(">BBII")
MAX_PAYLOAD = 256 * 1024
MAX_DATA_FRAME = 64 * 1024  # what one DATA frame carries, so streams interleave fairly
INITIAL_WINDOW = 1024 * 1024
MAX_STREAMS = 4096  # open streams the peer may have started
MAX_OPEN_JSON = 4096
WINDOW_UPDATE_THRESHOLD = 4  # return credit once a quarter of the window is consumed

Role = Literal["client", "agent"]
StreamKind = Literal["tcp", "udp", "reverse"]


class FrameType(IntEnum):
    HELLO = 0x01
    OPEN_TCP = 0x02
    OPEN_UDP = 0x03
    OPEN_REVERSE = 0x04
    REPLY = 0x05
    DATA = 0x06
    EOF = 0x07
    CLOSE = 0x08
    WINDOW = 0x09
    PING = 0x0A
    CONTROL = 0x0B
    GOAWAY = 0x0C


_OPEN_KINDS: dict[FrameType, StreamKind] = {
    FrameType.OPEN_TCP: "tcp", FrameType.OPEN_UDP: "udp", FrameType.OPEN_REVERSE: "reverse",
}
_KIND_FRAMES = {kind: frame for frame, kind in _OPEN_KINDS.items()}
REPLY_FAILED = 1
PING_ACK = 1


class MuxProtocolError(Exception):
    """The peer broke the protocol; the connection must end (with GOAWAY carrying the message)."""


class MuxUsageError(Exception):
    """This side asked for something the protocol does not allow (a bug in the caller)."""


@dataclass(frozen=True)
class Frame:
    type: int
    flags: int
    stream: int
    payload: bytes = b""

    def encode(self) -> bytes:
        return HEADER.pack(self.type, self.flags, self.stream, len(self.payload)) + self.payload


def encode_frame(type_: FrameType, stream: int, payload: bytes = b"", flags: int = 0) -> bytes:
    if len(payload) > MAX_PAYLOAD:
        raise MuxUsageError(f"frame payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    return HEADER.pack(type_, flags, stream, len(payload)) + payload


class FrameDecoder:
    """Splits a byte stream into frames; raises `MuxProtocolError` on a frame it cannot accept."""

    def __init__(self, max_payload: int = MAX_PAYLOAD) -> None:
        self._buffer = bytearray()
        self._max = max_payload

    def feed(self, data: bytes) -> list[Frame]:
        if self._buffer:
            self._buffer += data
            buffer: bytes | bytearray = self._buffer
        else:  # the usual case: parse straight from what was read, keep only a partial frame
            buffer = data
        frames: list[Frame] = []
        offset = 0
        size = len(buffer)
        view = memoryview(buffer)
        while size - offset >= HEADER.size:
            type_, flags, stream, length = HEADER.unpack_from(buffer, offset)
            if length > self._max:
                raise MuxProtocolError(f"frame of {length} bytes exceeds the limit of {self._max}")
            end = offset + HEADER.size + length
            if end > size:
                break
            frames.append(Frame(type_, flags, stream, bytes(view[offset + HEADER.size:end])))
            offset = end
        view.release()
        if buffer is self._buffer:
            if offset:
                del self._buffer[:offset]
        elif offset < size:
            self._buffer += buffer[offset:]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buffer)


# ---- events -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class HelloReceived:
    info: dict[str, Any]


@dataclass(frozen=True)
class StreamOpened:
    """The peer opened a stream; answer with `accept` or `reject`."""

    stream: int
    kind: StreamKind
    host: str = ""
    port: int = 0
    route: str = ""
    peer: str = ""


@dataclass(frozen=True)
class OpenReplied:
    stream: int
    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class DataReceived:
    stream: int
    data: bytes


@dataclass(frozen=True)
class EofReceived:
    stream: int


@dataclass(frozen=True)
class StreamClosed:
    """The stream is over: closed by the peer (with `reason`), or both sides finished sending."""

    stream: int
    reason: str = ""
    by_peer: bool = True


@dataclass(frozen=True)
class WindowOpened:
    stream: int
    available: int


@dataclass(frozen=True)
class PingReceived:
    payload: bytes


@dataclass(frozen=True)
class PongReceived:
    payload: bytes


@dataclass(frozen=True)
class ControlReceived:
    message: dict[str, Any]


@dataclass(frozen=True)
class GoAwayReceived:
    reason: str


Event = (HelloReceived | StreamOpened | OpenReplied | DataReceived | EofReceived | StreamClosed
         | WindowOpened | PingReceived | PongReceived | ControlReceived | GoAwayReceived)


# ---- the session --------------------------------------------------------------------------------

@dataclass
class _Stream:
    id: int
    kind: StreamKind
    local: bool  # opened by this side
    send_window: int
    receive_window: int  # credit the peer still has
    unacked: int = 0  # consumed by our application, not yet returned as credit
    established: bool = False
    sent_eof: bool = False
    received_eof: bool = False


@dataclass
class MuxSession:
    """One end of a multiplexed connection."""

    role: Role
    window: int = INITIAL_WINDOW
    max_streams: int = MAX_STREAMS
    hello: dict[str, Any] = field(default_factory=dict)
    # Frames to send, as pieces joined once in `data_to_send` (bulk data is copied once there).
    _out: list[bytes | memoryview] = field(default_factory=list, init=False)
    _out_size: int = field(default=0, init=False)
    _decoder: FrameDecoder = field(default_factory=FrameDecoder, init=False)
    _streams: dict[int, _Stream] = field(default_factory=dict, init=False)
    _next_id: int = field(default=0, init=False)
    _peer_hello: bool = field(default=False, init=False)
    _closed: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._next_id = 1 if self.role == "client" else 2
        info = {"version": PROTOCOL_VERSION, "role": self.role, **self.hello}
        self._emit(FrameType.HELLO, 0, json.dumps(info).encode())

    # -- output

    def data_to_send(self) -> bytes:
        out = b"".join(self._out)
        self._out.clear()
        self._out_size = 0
        return out

    @property
    def pending_output(self) -> int:
        return self._out_size

    def _emit(self, type_: FrameType, stream: int, payload: bytes | memoryview = b"", flags: int = 0) -> None:
        if len(payload) > MAX_PAYLOAD:
            raise MuxUsageError(f"frame payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
        self._out.append(HEADER.pack(type_, flags, stream, len(payload)))
        if payload:
            self._out.append(payload)
        self._out_size += HEADER.size + len(payload)

    # -- opening

    def _open(self, kind: StreamKind, payload: dict[str, Any]) -> int:
        if self._closed:
            raise MuxUsageError("the session is closed")
        stream_id = self._next_id
        self._next_id += 2
        if self._next_id >= 2**32:
            raise MuxUsageError("stream ids exhausted; open a new connection")
        self._streams[stream_id] = _Stream(stream_id, kind, True, self.window, self.window)
        self._emit(_KIND_FRAMES[kind], stream_id, json.dumps(payload).encode())
        return stream_id

    def open_tcp(self, host: str, port: int) -> int:
        if self.role != "client":
            raise MuxUsageError("only the client opens TCP streams; the agent opens reverse streams")
        return self._open("tcp", {"host": host, "port": port})

    def open_udp(self, host: str, port: int) -> int:
        if self.role != "client":
            raise MuxUsageError("only the client opens UDP streams")
        return self._open("udp", {"host": host, "port": port})

    def open_reverse(self, route: str, port: int, peer: str = "") -> int:
        if self.role != "agent":
            raise MuxUsageError("only the agent opens reverse streams")
        return self._open("reverse", {"route": route, "port": port, "peer": peer})

    def accept(self, stream_id: int) -> None:
        stream = self._require(stream_id)
        if stream.local or stream.established:
            raise MuxUsageError(f"stream {stream_id} is not waiting for an answer")
        stream.established = True
        self._emit(FrameType.REPLY, stream_id)

    def reject(self, stream_id: int, reason: str) -> None:
        stream = self._require(stream_id)
        if stream.local or stream.established:
            raise MuxUsageError(f"stream {stream_id} is not waiting for an answer")
        del self._streams[stream_id]
        self._emit(FrameType.REPLY, stream_id, reason.encode()[:MAX_OPEN_JSON], REPLY_FAILED)

    # -- data

    def send_window(self, stream_id: int) -> int:
        stream = self._streams.get(stream_id)
        return stream.send_window if stream is not None else 0

    def send_data(self, stream_id: int, data: bytes | memoryview) -> int:
        """Queue as much of `data` as the peer's credit allows; returns how many bytes were taken.

        The bytes are referenced until `data_to_send()`: the caller must not change them meanwhile.
        """
        stream = self._require(stream_id)
        if stream.sent_eof:
            raise MuxUsageError(f"stream {stream_id}: data after EOF")
        if stream.kind == "udp" and len(data) > MAX_DATA_FRAME:
            raise MuxUsageError(f"datagram of {len(data)} bytes exceeds {MAX_DATA_FRAME}")
        take = min(len(data), stream.send_window)
        if stream.kind == "udp" and take < len(data):
            return 0  # a datagram goes whole or not at all
        view = memoryview(data)
        sent = 0
        while sent < take:
            piece = view[sent:min(take, sent + MAX_DATA_FRAME)]
            self._emit(FrameType.DATA, stream_id, piece)
            sent += len(piece)
        stream.send_window -= take
        return take

    def send_eof(self, stream_id: int) -> None:
        stream = self._streams.get(stream_id)
        if stream is None or stream.sent_eof:
            return
        stream.sent_eof = True
        self._emit(FrameType.EOF, stream_id)
        self._finish_if_done(stream)

    def close_stream(self, stream_id: int, reason: str = "") -> None:
        if self._streams.pop(stream_id, None) is not None:
            self._emit(FrameType.CLOSE, stream_id, reason.encode()[:MAX_OPEN_JSON])

    def consumed(self, stream_id: int, count: int) -> None:
        """The application took `count` received bytes off this stream: return the credit in time."""
        stream = self._streams.get(stream_id)
        if stream is None or count <= 0:
            return
        stream.unacked += count
        if stream.unacked * WINDOW_UPDATE_THRESHOLD >= self.window:
            self._emit(FrameType.WINDOW, stream_id, struct.pack(">I", stream.unacked))
            stream.receive_window += stream.unacked
            stream.unacked = 0

    # -- connection-level

    def ping(self, payload: bytes = b"\0" * 8) -> None:
        self._emit(FrameType.PING, 0, payload[:8].ljust(8, b"\0"))

    def control(self, message: dict[str, Any]) -> None:
        self._emit(FrameType.CONTROL, 0, json.dumps(message).encode())

    def goaway(self, reason: str = "") -> None:
        if not self._closed:
            self._closed = True
            self._emit(FrameType.GOAWAY, 0, reason.encode()[:MAX_OPEN_JSON])

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def is_open(self, stream_id: int) -> bool:
        return stream_id in self._streams

    # -- input

    def receive_data(self, data: bytes) -> list[Event]:
        """Events for the bytes read from the transport; `MuxProtocolError` ends the connection."""
        events: list[Event] = []
        for frame in self._decoder.feed(data):
            self._handle(frame, events)
        return events

    def _require(self, stream_id: int) -> _Stream:
        stream = self._streams.get(stream_id)
        if stream is None:
            raise MuxUsageError(f"stream {stream_id} is not open")
        return stream

    def _finish_if_done(self, stream: _Stream) -> StreamClosed | None:
        if stream.sent_eof and stream.received_eof and self._streams.pop(stream.id, None) is not None:
            return StreamClosed(stream.id, by_peer=False)
        return None

    def _peer_opens(self, stream_id: int) -> bool:
        """Whether `stream_id` is in the peer's half of the id space."""
        return stream_id != 0 and (stream_id % 2 == 0) == (self.role == "client")

    def _handle(self, frame: Frame, events: list[Event]) -> None:
        try:
            type_ = FrameType(frame.type)
        except ValueError:
            raise MuxProtocolError(f"unknown frame type {frame.type:#x}") from None
        if not self._peer_hello:
            if type_ != FrameType.HELLO:
                raise MuxProtocolError(f"expected HELLO first, got {type_.name}")
            info = _json(frame.payload, "HELLO")
            if info.get("version") != PROTOCOL_VERSION:
                raise MuxProtocolError(f"peer speaks protocol version {info.get('version')!r}, "
                                       f"this side {PROTOCOL_VERSION}")
            self._peer_hello = True
            events.append(HelloReceived(info))
            return
        connection_level = (FrameType.HELLO, FrameType.PING, FrameType.CONTROL, FrameType.GOAWAY)
        if (type_ in connection_level) != (frame.stream == 0):
            raise MuxProtocolError(f"{type_.name} on stream {frame.stream}")
        if type_ == FrameType.HELLO:
            raise MuxProtocolError("a second HELLO")
        if type_ == FrameType.PING:
            if len(frame.payload) != 8:
                raise MuxProtocolError("PING payload must be 8 bytes")
            if frame.flags & PING_ACK:
                events.append(PongReceived(frame.payload))
            else:
                self._emit(FrameType.PING, 0, frame.payload, PING_ACK)
                events.append(PingReceived(frame.payload))
        elif type_ == FrameType.CONTROL:
            events.append(ControlReceived(_json(frame.payload, "CONTROL")))
        elif type_ == FrameType.GOAWAY:
            events.append(GoAwayReceived(frame.payload.decode(errors="replace")))
        elif type_ in _OPEN_KINDS:
            self._handle_open(frame, _OPEN_KINDS[type_], events)
        else:
            self._handle_stream_frame(type_, frame, events)

    def _handle_open(self, frame: Frame, kind: StreamKind, events: list[Event]) -> None:
        if not self._peer_opens(frame.stream):
            raise MuxProtocolError(f"peer opened stream {frame.stream} in this side's id space")
        if (kind == "reverse") != (self.role == "client"):
            raise MuxProtocolError(f"a {self.role} does not accept {kind} streams")
        if frame.stream in self._streams:
            raise MuxProtocolError(f"stream {frame.stream} opened twice")
        if len(frame.payload) > MAX_OPEN_JSON:
            raise MuxProtocolError("open request too large")
        spec = _json(frame.payload, "OPEN")
        port = spec.get("port")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise MuxProtocolError(f"open request with bad port {port!r}")
        if self._closed:
            self._emit(FrameType.REPLY, frame.stream, b"connection closing", REPLY_FAILED)
            return
        if sum(1 for s in self._streams.values() if not s.local) >= self.max_streams:
            self._emit(FrameType.REPLY, frame.stream, b"too many streams", REPLY_FAILED)
            return
        self._streams[frame.stream] = _Stream(frame.stream, kind, False, self.window, self.window)
        if kind == "reverse":
            route, peer = spec.get("route"), spec.get("peer", "")
            if not isinstance(route, str) or not isinstance(peer, str):
                raise MuxProtocolError("reverse open needs a string route and peer")
            events.append(StreamOpened(frame.stream, kind, port=port, route=route, peer=peer))
        else:
            host = spec.get("host")
            if not isinstance(host, str) or not host:
                raise MuxProtocolError("open request without a host")
            events.append(StreamOpened(frame.stream, kind, host=host, port=port))

    def _handle_stream_frame(self, type_: FrameType, frame: Frame, events: list[Event]) -> None:
        stream = self._streams.get(frame.stream)
        if stream is None:
            # Frames crossing a CLOSE on the wire are normal; drop them.
            return
        if type_ == FrameType.REPLY:
            if not stream.local or stream.established:
                raise MuxProtocolError(f"unexpected REPLY on stream {frame.stream}")
            if frame.flags & REPLY_FAILED:
                del self._streams[frame.stream]
                events.append(OpenReplied(frame.stream, False, frame.payload.decode(errors="replace")))
            else:
                stream.established = True
                events.append(OpenReplied(frame.stream, True))
        elif type_ == FrameType.DATA:
            if stream.received_eof:
                raise MuxProtocolError(f"DATA after EOF on stream {frame.stream}")
            if len(frame.payload) > stream.receive_window:
                raise MuxProtocolError(f"stream {frame.stream}: peer sent beyond its window")
            stream.receive_window -= len(frame.payload)
            events.append(DataReceived(frame.stream, frame.payload))
        elif type_ == FrameType.EOF:
            if not stream.received_eof:
                stream.received_eof = True
                events.append(EofReceived(frame.stream))
                done = self._finish_if_done(stream)
                if done is not None:
                    events.append(done)
        elif type_ == FrameType.CLOSE:
            del self._streams[frame.stream]
            events.append(StreamClosed(frame.stream, frame.payload.decode(errors="replace")))
        elif type_ == FrameType.WINDOW:
            if len(frame.payload) != 4:
                raise MuxProtocolError("WINDOW payload must be 4 bytes")
            (increment,) = struct.unpack(">I", frame.payload)
            stream.send_window += increment
            if stream.send_window > 2**31:
                raise MuxProtocolError(f"stream {frame.stream}: window beyond 2^31")
            events.append(WindowOpened(frame.stream, stream.send_window))


def _json(payload: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        raise MuxProtocolError(f"{what} payload is not JSON") from None
    if not isinstance(value, dict):
        raise MuxProtocolError(f"{what} payload must be a JSON object")
    return value
