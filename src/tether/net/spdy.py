"""SPDY/3.1 framing and session state without I/O, for `kubectl port-forward`.

kubectl reaches port-forward over SPDY/3.1, either after `Upgrade: SPDY/3.1` on a plain HTTP
connection or tunnelled as a byte stream inside WebSocket binary messages (subprotocol
`SPDY/3.1+portforward.k8s.io`); both feed the same `SpdySession`. See
docs/api-server-notes.md (streaming subresources).

The session turns bytes into events and calls into bytes. Frames the session must send by itself
(RST_STREAM for a misbehaving stream, GOAWAY on a fatal error) wait in `data_to_send()`. Flow
control is not enforced: client-go's spdystream neither sends nor honours WINDOW_UPDATE.
"""

from __future__ import annotations

import enum
import zlib
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

VERSION = 3

UPGRADE_PROTOCOL = "SPDY/3.1"  # the `Upgrade:` value of the plain form
PORTFORWARD_PROTOCOL = "portforward.k8s.io"  # `X-Stream-Protocol-Version`, echoed in the 101
TUNNEL_SUBPROTOCOL = "SPDY/3.1+portforward.k8s.io"  # WebSocket subprotocol of the tunnelled form

# Port-forward stream headers (kubectl names them in canonical case; SPDY lowercases them).
HEADER_STREAM_TYPE = "streamtype"
HEADER_PORT = "port"
HEADER_REQUEST_ID = "requestid"
STREAM_TYPE_DATA = "data"
STREAM_TYPE_ERROR = "error"


class FrameType(enum.IntEnum):
    SYN_STREAM = 1
    SYN_REPLY = 2
    RST_STREAM = 3
    SETTINGS = 4
    PING = 6
    GOAWAY = 7
    HEADERS = 8
    WINDOW_UPDATE = 9


class RstStatus(enum.IntEnum):
    PROTOCOL_ERROR = 1
    INVALID_STREAM = 2
    REFUSED_STREAM = 3
    UNSUPPORTED_VERSION = 4
    CANCEL = 5
    INTERNAL_ERROR = 6
    FLOW_CONTROL_ERROR = 7
    STREAM_IN_USE = 8
    STREAM_ALREADY_CLOSED = 9
    FRAME_TOO_LARGE = 11


class GoAwayStatus(enum.IntEnum):
    OK = 0
    PROTOCOL_ERROR = 1
    INTERNAL_ERROR = 2


FLAG_FIN = 0x01
FLAG_UNIDIRECTIONAL = 0x02
FLAG_SETTINGS_CLEAR = 0x01

MAX_FRAME_PAYLOAD = 0xFFFFFF  # the 24-bit length field
DEFAULT_MAX_DATA_FRAME = 64 * 1024
DEFAULT_MAX_HEADER_BLOCK = 1024 * 1024
_STREAM_ID_MASK = 0x7FFFFFFF
_RECENT_RESETS = 1024

# --------------------------------------------------------------------------------------------
# Header compression dictionary (SPDY/3 draft §2.6.10.1): 4-byte-length-prefixed words, then
# a run of status codes, reason phrases, dates and common values without prefixes.
# --------------------------------------------------------------------------------------------

_DICTIONARY_WORDS = (
    "options", "head", "post", "put", "delete", "trace", "accept", "accept-charset",
    "accept-encoding", "accept-language", "accept-ranges", "age", "allow", "authorization",
    "cache-control", "connection", "content-base", "content-encoding", "content-language",
    "content-length", "content-location", "content-md5", "content-range", "content-type",
    "date", "etag", "expect", "expires", "from", "host", "if-match", "if-modified-since",
    "if-none-match", "if-range", "if-unmodified-since", "last-modified", "location",
    "max-forwards", "pragma", "proxy-authenticate", "proxy-authorization", "range", "referer",
    "retry-after", "server", "te", "trailer", "transfer-encoding", "upgrade", "user-agent",
    "vary", "via", "warning", "www-authenticate", "method", "get", "status", "200 OK",
    "version", "HTTP/1.1", "url", "public", "set-cookie", "keep-alive", "origin",
)  # fmt: skip
_DICTIONARY_TAIL = (
    "100101201202205206300302303304305306307"
    "402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request"
    "401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented"
    "503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 "
    "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,"
    "text/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdch"
    "charset=utf-8charset=iso-8859-1,utf-,*,enq=0."
)
SPDY_DICTIONARY = b"".join(
    len(word).to_bytes(4, "big") + word.encode("ascii") for word in _DICTIONARY_WORDS
) + _DICTIONARY_TAIL.encode("ascii")


class SpdyError(Exception):
    """A local misuse (sending on a closed stream) or a malformed header block."""


# --------------------------------------------------------------------------------------------
# Name/value header blocks
# --------------------------------------------------------------------------------------------


def _u32(value: int) -> bytes:
    return value.to_bytes(4, "big")


def _read_u32(data: bytes, offset: int) -> int:
    return int.from_bytes(data[offset : offset + 4], "big")


def encode_header_block(headers: Mapping[str, str]) -> bytes:
    """The uncompressed SPDY/3 name/value block (32-bit counts and lengths).

    Names are lowercased as SPDY requires; several values of one name are joined with NUL.
    """
    parts = [_u32(len(headers))]
    for name, value in headers.items():
        raw_name = name.lower().encode("utf-8")
        raw_value = value.encode("utf-8", "surrogateescape")
        if not raw_name:
            raise SpdyError("empty header name")
        parts += [_u32(len(raw_name)), raw_name, _u32(len(raw_value)), raw_value]
    return b"".join(parts)


def decode_header_block(block: bytes) -> dict[str, str]:
    """Parse an uncompressed name/value block; raises `SpdyError` if malformed."""
    if not block:
        return {}  # tolerate an empty block as "no headers"
    if len(block) < 4:
        raise SpdyError("truncated header block")
    count, offset, headers = _read_u32(block, 0), 4, {}
    for _ in range(count):
        name, offset = _read_string(block, offset)
        value, offset = _read_string(block, offset)
        key = name.decode("utf-8", "surrogateescape").lower()
        if not key or key in headers:
            raise SpdyError(f"empty or duplicate header name {key!r}")
        headers[key] = value.decode("utf-8", "surrogateescape")
    if offset != len(block):
        raise SpdyError("trailing bytes after the header block")
    return headers


def _read_string(block: bytes, offset: int) -> tuple[bytes, int]:
    if offset + 4 > len(block):
        raise SpdyError("truncated header block")
    size = _read_u32(block, offset)
    start = offset + 4
    if start + size > len(block):
        raise SpdyError("truncated header block")
    return block[start : start + size], start + size


class HeaderCompressor:
    """Compresses successive header blocks with one zlib stream, as SPDY/3 requires."""

    def __init__(self) -> None:
        self._zlib = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zdict=SPDY_DICTIONARY)

    def compress(self, headers: Mapping[str, str]) -> bytes:
        # A sync flush ends each block on a byte boundary without ending the stream, so the
        # peer can decode this block now and keep the shared history for the next one.
        block = encode_header_block(headers)
        return self._zlib.compress(block) + self._zlib.flush(zlib.Z_SYNC_FLUSH)


class HeaderDecompressor:
    """The receiving half: one zlib stream across every header block of the session."""

    def __init__(self, max_size: int = DEFAULT_MAX_HEADER_BLOCK) -> None:
        self._zlib = zlib.decompressobj(zdict=SPDY_DICTIONARY)
        self._max_size = max_size

    def decompress(self, data: bytes) -> dict[str, str]:
        try:
            block = self._zlib.decompress(data, self._max_size)
        except zlib.error as exc:
            raise SpdyError(f"header block does not decompress: {exc}") from None
        if self._zlib.unconsumed_tail:
            raise SpdyError("header block exceeds the size limit")
        return decode_header_block(block)


# --------------------------------------------------------------------------------------------
# Frames
# --------------------------------------------------------------------------------------------


def control_frame(frame_type: int, flags: int, payload: bytes) -> bytes:
    if len(payload) > MAX_FRAME_PAYLOAD:
        raise SpdyError("control frame payload too large")
    head = (0x8000 | VERSION).to_bytes(2, "big") + frame_type.to_bytes(2, "big")
    return head + bytes([flags]) + len(payload).to_bytes(3, "big") + payload


def data_frame(stream_id: int, flags: int, payload: bytes) -> bytes:
    if len(payload) > MAX_FRAME_PAYLOAD:
        raise SpdyError("data frame payload too large")
    return (
        _u32(stream_id & _STREAM_ID_MASK)
        + bytes([flags])
        + len(payload).to_bytes(3, "big")
        + payload
    )


@dataclass(frozen=True)
class _RawFrame:
    control: bool
    version: int  # control frames only
    kind: int  # the type of a control frame, the stream id of a data frame
    flags: int
    payload: bytes


def _parse_frame(buffer: bytearray) -> _RawFrame | None:
    """Take one frame off the front of `buffer`, or None until it is complete."""
    if len(buffer) < 8:
        return None
    length = int.from_bytes(buffer[5:8], "big")
    if len(buffer) < 8 + length:
        return None
    word, flags, payload = _read_u32(bytes(buffer[:4]), 0), buffer[4], bytes(buffer[8 : 8 + length])
    del buffer[: 8 + length]
    if word & 0x80000000:
        return _RawFrame(True, (word >> 16) & 0x7FFF, word & 0xFFFF, flags, payload)
    return _RawFrame(False, 0, word & _STREAM_ID_MASK, flags, payload)


# --------------------------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamOpened:
    """SYN_STREAM from the peer."""

    stream_id: int
    headers: dict[str, str]
    fin: bool
    unidirectional: bool = False


@dataclass(frozen=True)
class StreamReplied:
    """SYN_REPLY to a stream we opened (client side)."""

    stream_id: int
    headers: dict[str, str]
    fin: bool


@dataclass(frozen=True)
class HeadersReceived:
    stream_id: int
    headers: dict[str, str]
    fin: bool


@dataclass(frozen=True)
class Data:
    stream_id: int
    data: bytes
    fin: bool


@dataclass(frozen=True)
class StreamReset:
    """The stream is gone: the peer sent RST_STREAM, or (`by_peer=False`) we had to."""

    stream_id: int
    status: int
    by_peer: bool = True


@dataclass(frozen=True)
class Ping:
    """A PING; `reply` is True when it echoes one of ours, otherwise echo it with `ping(id)`."""

    ping_id: int
    reply: bool = False


@dataclass(frozen=True)
class GoAway:
    last_id: int
    status: int


@dataclass(frozen=True)
class Settings:
    entries: tuple[tuple[int, int, int], ...]  # (id, flags, value)
    clear: bool = False


@dataclass(frozen=True)
class WindowUpdate:
    stream_id: int
    delta: int


@dataclass(frozen=True)
class ProtocolError:
    """A session error: GOAWAY is queued in `data_to_send()` and the session reads no more."""

    status: int
    message: str


Event = (
    StreamOpened
    | StreamReplied
    | HeadersReceived
    | Data
    | StreamReset
    | Ping
    | GoAway
    | Settings
    | WindowUpdate
    | ProtocolError
)


class _SessionViolation(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _StreamViolation(Exception):
    def __init__(self, stream_id: int, status: RstStatus) -> None:
        super().__init__(f"stream {stream_id}: {status.name}")
        self.stream_id = stream_id
        self.status = status


@dataclass
class _Stream:
    local_closed: bool = False
    remote_closed: bool = False
    replied: bool = False
    ours: bool = False


# --------------------------------------------------------------------------------------------
# Session
# --------------------------------------------------------------------------------------------


class SpdySession:
    """One end of a SPDY/3.1 connection; server side unless `client=True`."""

    def __init__(
        self,
        *,
        client: bool = False,
        max_data_frame: int = DEFAULT_MAX_DATA_FRAME,
        max_header_block: int = DEFAULT_MAX_HEADER_BLOCK,
    ) -> None:
        if not 0 < max_data_frame <= MAX_FRAME_PAYLOAD:
            raise ValueError("max_data_frame must fit the 24-bit length field")
        self.client = client
        self.max_data_frame = max_data_frame
        self._compressor = HeaderCompressor()
        self._decompressor = HeaderDecompressor(max_header_block)
        self._buffer = bytearray()
        self._outgoing = bytearray()
        self._streams: dict[int, _Stream] = {}
        # Streams we reset recently: frames the peer already had in flight are dropped quietly.
        self._recently_reset: OrderedDict[int, None] = OrderedDict()
        parity = 1 if client else 2
        self._next_stream_id = parity
        self._next_ping_id = parity
        self._last_peer_stream = 0
        self.goaway_sent = False
        self.goaway_received = False
        self.failed = False

    # -- bookkeeping --------------------------------------------------------------------------

    def _is_ours(self, identifier: int) -> bool:
        """Clients own odd stream and ping ids, servers even ones."""
        return identifier % 2 == (1 if self.client else 0)

    @property
    def open_streams(self) -> list[int]:
        return sorted(self._streams)

    def is_open(self, stream_id: int) -> bool:
        return stream_id in self._streams

    def _forget_if_done(self, stream_id: int) -> None:
        stream = self._streams.get(stream_id)
        if stream is not None and stream.local_closed and stream.remote_closed:
            del self._streams[stream_id]

    def _mark_reset(self, stream_id: int) -> None:
        self._streams.pop(stream_id, None)
        self._recently_reset[stream_id] = None
        if len(self._recently_reset) > _RECENT_RESETS:
            self._recently_reset.popitem(last=False)

    def _was_used(self, stream_id: int) -> bool:
        """Whether `stream_id` was opened at some point (so it is now closed, not unknown)."""
        if self._is_ours(stream_id):
            return stream_id < self._next_stream_id
        return stream_id <= self._last_peer_stream

    # -- receiving ----------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[Event]:
        """Feed bytes from the connection; returns every event they complete."""
        if self.failed:
            return []
        self._buffer += data
        events: list[Event] = []
        try:
            while (frame := _parse_frame(self._buffer)) is not None:
                events.extend(self._dispatch(frame))
        except _SessionViolation as violation:
            events.append(self._fail(violation.message))
        return events

    def data_to_send(self) -> bytes:
        """Frames the session produced by itself (RST_STREAM, GOAWAY); drains the queue."""
        out = bytes(self._outgoing)
        self._outgoing.clear()
        return out

    def _fail(self, message: str) -> ProtocolError:
        if not self.goaway_sent:
            self._outgoing += self.goaway(GoAwayStatus.PROTOCOL_ERROR)
        self.failed = True
        self._buffer.clear()
        return ProtocolError(GoAwayStatus.PROTOCOL_ERROR, message)

    def _dispatch(self, frame: _RawFrame) -> list[Event]:
        try:
            if not frame.control:
                return self._on_data(frame)
            if frame.version != VERSION:
                raise _SessionViolation(f"unsupported SPDY version {frame.version}")
            handler = self._handlers.get(frame.kind)
            # Unknown control frame types must be ignored (SPDY/3 §2.2.1).
            return [] if handler is None else handler(self, frame)
        except _StreamViolation as violation:
            self._outgoing += self.reset(violation.stream_id, violation.status)
            return [StreamReset(violation.stream_id, violation.status, by_peer=False)]

    def _headers_of(self, block: bytes) -> dict[str, str]:
        # Always decompress, even for a frame about to be refused: the zlib history is shared by
        # the whole session and skipping one block would garble every later one.
        try:
            return self._decompressor.decompress(block)
        except SpdyError as exc:
            raise _SessionViolation(str(exc)) from None

    def _on_syn_stream(self, frame: _RawFrame) -> list[Event]:
        if len(frame.payload) < 10:
            raise _SessionViolation("SYN_STREAM too short")
        stream_id = _read_u32(frame.payload, 0) & _STREAM_ID_MASK
        headers = self._headers_of(frame.payload[10:])
        if self.goaway_sent:
            return []  # after GOAWAY new streams are ignored (SPDY/3 §2.6.6)
        if stream_id == 0 or self._is_ours(stream_id):
            raise _StreamViolation(stream_id, RstStatus.PROTOCOL_ERROR)
        if stream_id in self._streams:
            raise _StreamViolation(stream_id, RstStatus.PROTOCOL_ERROR)
        if stream_id <= self._last_peer_stream:
            raise _SessionViolation(f"stream id {stream_id} is not increasing")
        self._last_peer_stream = stream_id
        fin, one_way = bool(frame.flags & FLAG_FIN), bool(frame.flags & FLAG_UNIDIRECTIONAL)
        self._streams[stream_id] = _Stream(remote_closed=fin, local_closed=one_way)
        self._forget_if_done(stream_id)
        return [StreamOpened(stream_id, headers, fin, one_way)]

    def _on_syn_reply(self, frame: _RawFrame) -> list[Event]:
        if len(frame.payload) < 4:
            raise _SessionViolation("SYN_REPLY too short")
        stream_id = _read_u32(frame.payload, 0) & _STREAM_ID_MASK
        headers = self._headers_of(frame.payload[4:])
        stream = self._streams.get(stream_id)
        if stream is None or not stream.ours:
            return self._unknown_stream(stream_id)
        if stream.replied:
            raise _StreamViolation(stream_id, RstStatus.STREAM_IN_USE)
        stream.replied = True
        fin = bool(frame.flags & FLAG_FIN)
        stream.remote_closed = stream.remote_closed or fin
        self._forget_if_done(stream_id)
        return [StreamReplied(stream_id, headers, fin)]

    def _on_headers(self, frame: _RawFrame) -> list[Event]:
        if len(frame.payload) < 4:
            raise _SessionViolation("HEADERS too short")
        stream_id = _read_u32(frame.payload, 0) & _STREAM_ID_MASK
        headers = self._headers_of(frame.payload[4:])
        stream = self._streams.get(stream_id)
        if stream is None:
            return self._unknown_stream(stream_id)
        if stream.remote_closed:
            raise _StreamViolation(stream_id, RstStatus.STREAM_ALREADY_CLOSED)
        fin = bool(frame.flags & FLAG_FIN)
        stream.remote_closed = fin
        self._forget_if_done(stream_id)
        return [HeadersReceived(stream_id, headers, fin)]

    def _on_data(self, frame: _RawFrame) -> list[Event]:
        stream_id = frame.kind
        if stream_id == 0:
            raise _SessionViolation("DATA frame on stream 0")
        stream = self._streams.get(stream_id)
        if stream is None:
            return self._unknown_stream(stream_id)
        if stream.remote_closed:
            raise _StreamViolation(stream_id, RstStatus.STREAM_ALREADY_CLOSED)
        fin = bool(frame.flags & FLAG_FIN)
        stream.remote_closed = fin
        self._forget_if_done(stream_id)
        return [Data(stream_id, frame.payload, fin)]

    def _unknown_stream(self, stream_id: int) -> list[Event]:
        if stream_id in self._recently_reset:
            return []  # in flight when we reset it; RST_STREAM must not answer it again
        if self._was_used(stream_id):
            raise _StreamViolation(stream_id, RstStatus.STREAM_ALREADY_CLOSED)
        raise _StreamViolation(stream_id, RstStatus.INVALID_STREAM)

    def _on_rst_stream(self, frame: _RawFrame) -> list[Event]:
        if len(frame.payload) != 8:
            raise _SessionViolation("RST_STREAM must be 8 bytes")
        stream_id = _read_u32(frame.payload, 0) & _STREAM_ID_MASK
        self._streams.pop(stream_id, None)
        return [StreamReset(stream_id, _read_u32(frame.payload, 4))]

    def _on_settings(self, frame: _RawFrame) -> list[Event]:
        payload = frame.payload
        if len(payload) < 4 or len(payload) != 4 + 8 * _read_u32(payload, 0):
            raise _SessionViolation("SETTINGS length does not match its entry count")
        entries = tuple(
            (_read_u32(payload, at) & 0xFFFFFF, payload[at], _read_u32(payload, at + 4))
            for at in range(4, len(payload), 8)
        )
        return [Settings(entries, bool(frame.flags & FLAG_SETTINGS_CLEAR))]

    def _on_ping(self, frame: _RawFrame) -> list[Event]:
        if len(frame.payload) != 4:
            raise _SessionViolation("PING must be 4 bytes")
        ping_id = _read_u32(frame.payload, 0)
        return [Ping(ping_id, reply=self._is_ours(ping_id))]

    def _on_goaway(self, frame: _RawFrame) -> list[Event]:
        if len(frame.payload) not in (4, 8):
            raise _SessionViolation("GOAWAY must be 8 bytes")
        self.goaway_received = True
        status = _read_u32(frame.payload, 4) if len(frame.payload) == 8 else 0
        return [GoAway(_read_u32(frame.payload, 0) & _STREAM_ID_MASK, status)]

    def _on_window_update(self, frame: _RawFrame) -> list[Event]:
        if len(frame.payload) != 8:
            raise _SessionViolation("WINDOW_UPDATE must be 8 bytes")
        stream_id = _read_u32(frame.payload, 0) & _STREAM_ID_MASK
        return [WindowUpdate(stream_id, _read_u32(frame.payload, 4) & _STREAM_ID_MASK)]

    _handlers: ClassVar[dict[int, Callable[[SpdySession, _RawFrame], list[Event]]]] = {
        FrameType.SYN_STREAM: _on_syn_stream,
        FrameType.SYN_REPLY: _on_syn_reply,
        FrameType.RST_STREAM: _on_rst_stream,
        FrameType.SETTINGS: _on_settings,
        FrameType.PING: _on_ping,
        FrameType.GOAWAY: _on_goaway,
        FrameType.HEADERS: _on_headers,
        FrameType.WINDOW_UPDATE: _on_window_update,
    }

    # -- sending ------------------------------------------------------------------------------

    def _writable(self, stream_id: int) -> _Stream:
        stream = self._streams.get(stream_id)
        if stream is None or stream.local_closed:
            raise SpdyError(f"stream {stream_id} is not open for writing")
        return stream

    def _close_local(self, stream_id: int, stream: _Stream, fin: bool) -> None:
        if fin:
            stream.local_closed = True
            self._forget_if_done(stream_id)

    def open_stream(
        self, headers: Mapping[str, str], fin: bool = False, *, priority: int = 0
    ) -> tuple[int, bytes]:
        """SYN_STREAM for a new stream with our parity (odd from a client)."""
        if self.goaway_sent or self.goaway_received:
            raise SpdyError("no new streams after GOAWAY")
        stream_id = self._next_stream_id
        self._next_stream_id += 2
        self._streams[stream_id] = _Stream(local_closed=fin, ours=True)
        body = _u32(stream_id) + _u32(0) + bytes([(priority & 0x7) << 5, 0])
        body += self._compressor.compress(headers)
        return stream_id, control_frame(FrameType.SYN_STREAM, FLAG_FIN if fin else 0, body)

    def reply(self, stream_id: int, headers: Mapping[str, str], fin: bool = False) -> bytes:
        """SYN_REPLY accepting a peer's stream."""
        stream = self._writable(stream_id)
        if stream.ours or stream.replied:
            raise SpdyError(f"stream {stream_id} cannot be replied to")
        stream.replied = True
        body = _u32(stream_id) + self._compressor.compress(headers)
        frame = control_frame(FrameType.SYN_REPLY, FLAG_FIN if fin else 0, body)
        self._close_local(stream_id, stream, fin)
        return frame

    def headers(self, stream_id: int, headers: Mapping[str, str], fin: bool = False) -> bytes:
        stream = self._writable(stream_id)
        body = _u32(stream_id) + self._compressor.compress(headers)
        frame = control_frame(FrameType.HEADERS, FLAG_FIN if fin else 0, body)
        self._close_local(stream_id, stream, fin)
        return frame

    def data(self, stream_id: int, payload: bytes, fin: bool = False) -> bytes:
        """DATA frames of at most `max_data_frame` bytes; FIN rides on the last one."""
        stream = self._writable(stream_id)
        step = self.max_data_frame
        chunks = [payload[at : at + step] for at in range(0, len(payload), step)] or [b""]
        last = len(chunks) - 1
        frames = [
            data_frame(stream_id, FLAG_FIN if fin and index == last else 0, chunk)
            for index, chunk in enumerate(chunks)
        ]
        self._close_local(stream_id, stream, fin)
        return b"".join(frames)

    def reset(self, stream_id: int, status: int = RstStatus.CANCEL) -> bytes:
        """RST_STREAM: the stream ends at once in both directions."""
        self._mark_reset(stream_id)
        return control_frame(FrameType.RST_STREAM, 0, _u32(stream_id) + _u32(status))

    def ping(self, ping_id: int | None = None) -> bytes:
        """PING: echo a peer's id, or start our own (next id of our parity) when None."""
        if ping_id is None:
            ping_id = self._next_ping_id
            self._next_ping_id += 2
        return control_frame(FrameType.PING, 0, _u32(ping_id))

    def goaway(self, status: int = GoAwayStatus.OK) -> bytes:
        """GOAWAY naming the last peer stream we accepted; later SYN_STREAMs are ignored."""
        self.goaway_sent = True
        body = _u32(self._last_peer_stream) + _u32(status)
        return control_frame(FrameType.GOAWAY, 0, body)

    def settings(self, entries: tuple[tuple[int, int, int], ...], clear: bool = False) -> bytes:
        """SETTINGS with (id, flags, value) entries."""
        body = _u32(len(entries)) + b"".join(
            bytes([flags]) + setting.to_bytes(3, "big") + _u32(value)
            for setting, flags, value in entries
        )
        return control_frame(FrameType.SETTINGS, FLAG_SETTINGS_CLEAR if clear else 0, body)

    def window_update(self, stream_id: int, delta: int) -> bytes:
        return control_frame(FrameType.WINDOW_UPDATE, 0, _u32(stream_id) + _u32(delta))


# --------------------------------------------------------------------------------------------
# Port-forward stream pairing
# --------------------------------------------------------------------------------------------


class PortForwardError(Exception):
    """A stream whose headers do not make a valid port-forward request; tell the client why."""


@dataclass(frozen=True)
class PortForwardRequest:
    """A complete (data, error) pair for one forwarded connection."""

    request_id: str
    port: int
    data_stream: int
    error_stream: int


@dataclass
class _Pending:
    port: int
    since: float
    data_stream: int | None = None
    error_stream: int | None = None


class PortForwardPairing:
    """Groups kubectl's port-forward streams by `requestID` into (data, error) pairs.

    kubectl opens an error stream and a data stream per local connection, both carrying
    `streamType`, `port` and `requestID`. Clients too old to send `requestID` get the kubelet's
    best-effort fallback: pair id is the error stream's id, or the data stream's id minus 2.
    """

    def __init__(self) -> None:
        self._pending: dict[str, _Pending] = {}
        self._request_of: dict[int, str] = {}

    def add(
        self, stream_id: int, headers: Mapping[str, str], now: float = 0.0
    ) -> PortForwardRequest | None:
        """Register a new stream; returns the request once both of its streams arrived."""
        kind = headers.get(HEADER_STREAM_TYPE, "")
        if kind not in (STREAM_TYPE_DATA, STREAM_TYPE_ERROR):
            raise PortForwardError(f"invalid stream type {kind!r}")
        port = _parse_port(headers.get(HEADER_PORT, ""))
        request_id = headers.get(HEADER_REQUEST_ID) or str(
            stream_id if kind == STREAM_TYPE_ERROR else stream_id - 2
        )
        pending = self._pending.setdefault(request_id, _Pending(port, now))
        if pending.port != port:
            raise PortForwardError(f"request {request_id} names two ports")
        if kind == STREAM_TYPE_DATA:
            if pending.data_stream is not None:
                raise PortForwardError(f"request {request_id} already has a data stream")
            pending.data_stream = stream_id
        else:
            if pending.error_stream is not None:
                raise PortForwardError(f"request {request_id} already has an error stream")
            pending.error_stream = stream_id
        self._request_of[stream_id] = request_id
        return self._complete(request_id, pending)

    def _complete(self, request_id: str, pending: _Pending) -> PortForwardRequest | None:
        if pending.data_stream is None or pending.error_stream is None:
            return None
        del self._pending[request_id]
        for stream_id in (pending.data_stream, pending.error_stream):
            self._request_of.pop(stream_id, None)
        return PortForwardRequest(
            request_id, pending.port, pending.data_stream, pending.error_stream
        )

    def remove(self, stream_id: int) -> list[int]:
        """Drop the half-built request `stream_id` belongs to; returns its streams to reset."""
        request_id = self._request_of.pop(stream_id, None)
        pending = self._pending.pop(request_id, None) if request_id is not None else None
        if pending is None:
            return []
        streams = [s for s in (pending.data_stream, pending.error_stream) if s is not None]
        for other in streams:
            self._request_of.pop(other, None)
        return streams

    def expire(self, now: float, timeout: float) -> list[int]:
        """Streams of requests still half-built after `timeout` seconds (the kubelet allows 30)."""
        stale = [rid for rid, p in self._pending.items() if now - p.since >= timeout]
        streams: list[int] = []
        for request_id in stale:
            pending = self._pending[request_id]
            first = pending.data_stream if pending.data_stream is not None else pending.error_stream
            if first is not None:
                streams += self.remove(first)
        return streams

    @property
    def pending(self) -> int:
        return len(self._pending)


def _parse_port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise PortForwardError(f"unable to parse {text!r} as a port") from None
    if not 0 < port < 1 << 16:
        raise PortForwardError(f"port {port} is out of range")
    return port
