"""WebSocket connections without I/O (framing by wsproto), plus the Kubernetes channel protocols.

The connection object only turns bytes into events and calls into bytes; the HTTP upgrade and the
socket belong to the caller. Usage, server side::

    conn = WebSocketConnection()
    for event in conn.receive_data(chunk):
        ...                                   # Message / Ping / Pong / Close / ProtocolError
    sock.write(conn.data_to_send())           # automatic replies (close echo, error close)
    sock.write(conn.send_binary(channel_frame(STDOUT, b"hi")))

Kubernetes facts used here (see docs/api-server-notes.md): exec/attach speak
`v5.channel.k8s.io` or `v4.channel.k8s.io` in binary messages whose first byte is the channel;
v5 adds `[255, ch]` to close a channel; the final Status goes to channel 3 as JSON.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import wsproto.connection
import wsproto.events
from wsproto.frame_protocol import CloseReason

# --------------------------------------------------------------------------------------------
# Handshake
# --------------------------------------------------------------------------------------------

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3


def accept_key(client_key: str) -> str:
    """The `Sec-WebSocket-Accept` value for a client's `Sec-WebSocket-Key`."""
    digest = hashlib.sha1((client_key.strip() + GUID).encode("ascii")).digest()
    return base64.b64encode(digest).decode("ascii")


def new_client_key() -> str:
    """A fresh `Sec-WebSocket-Key` (16 random bytes, base64) for the client side."""
    return base64.b64encode(os.urandom(16)).decode("ascii")


def is_valid_client_key(client_key: str) -> bool:
    """RFC 6455 §4.2.1: the key must decode to exactly 16 bytes."""
    try:
        return len(base64.b64decode(client_key.strip(), validate=True)) == 16
    except ValueError:
        return False


def offered_protocols(offered: str) -> list[str]:
    """Split a (possibly comma-joined, repeated) `Sec-WebSocket-Protocol` header value."""
    return [token.strip() for token in offered.split(",") if token.strip()]


def negotiate(offered: str, supported: Sequence[str]) -> str | None:
    """Pick a subprotocol the way the Kubernetes server does: the client's first supported offer.

    An absent header counts as offering the empty protocol, so a caller that lists "" in
    `supported` accepts protocol-less clients (Kubernetes maps "" to its legacy channel protocol).
    """
    tokens = offered_protocols(offered) or [""]
    for token in tokens:
        if token in supported:
            return token
    return None


def handshake_response_headers(client_key: str, subprotocol: str | None) -> list[tuple[str, str]]:
    """Headers for the `101 Switching Protocols` answer (the status line is the caller's)."""
    headers = [
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Accept", accept_key(client_key)),
    ]
    if subprotocol:
        headers.append(("Sec-WebSocket-Protocol", subprotocol))
    return headers


# --------------------------------------------------------------------------------------------
# Framing
# --------------------------------------------------------------------------------------------


class Opcode(enum.IntEnum):
    TEXT = 0x1
    BINARY = 0x2


class CloseCode(enum.IntEnum):
    NORMAL = 1000
    GOING_AWAY = 1001
    PROTOCOL_ERROR = 1002
    UNSUPPORTED_DATA = 1003
    NO_STATUS = 1005  # never on the wire: stands for "the close frame had no payload"
    ABNORMAL = 1006  # never on the wire
    INVALID_PAYLOAD = 1007
    POLICY_VIOLATION = 1008
    MESSAGE_TOO_BIG = 1009
    MANDATORY_EXTENSION = 1010
    INTERNAL_ERROR = 1011


DEFAULT_MAX_MESSAGE_SIZE = 16 * 1024 * 1024
MAX_CONTROL_PAYLOAD = 125  # RFC 6455 §5.5


# --------------------------------------------------------------------------------------------
# Events
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """A complete text or binary message, fragments already joined."""

    opcode: Opcode
    payload: bytes

    @property
    def text(self) -> str:
        return self.payload.decode("utf-8")


@dataclass(frozen=True)
class Ping:
    payload: bytes


@dataclass(frozen=True)
class Pong:
    payload: bytes


@dataclass(frozen=True)
class Close:
    """The peer's close frame; 1005 when it carried no code."""

    code: int
    reason: str


@dataclass(frozen=True)
class ProtocolError:
    """The peer broke the protocol; a close frame with `code` is queued in `data_to_send()`."""

    code: int
    reason: str


Event = Message | Ping | Pong | Close | ProtocolError


class WebSocketError(Exception):
    """A local misuse, such as sending after the connection closed."""


# --------------------------------------------------------------------------------------------
# Connection
# --------------------------------------------------------------------------------------------


class WebSocketConnection:
    """One side of an established WebSocket (server side unless `client=True`).

    The framing is wsproto's (RFC 6455: masking, fragmentation, UTF-8 and close-code checks);
    this class joins fragments into whole messages, bounds their size, echoes the peer's close
    and turns wsproto's events into the few the kubelet's streams handle. Measured against the
    hand-written codec it replaced (32 KiB binary messages, masked in, unmasked out, 2026-12-01):
    321 vs 350 MiB/s, within the 10 % the project allows a library on a hot path.
    """

    def __init__(self, *, client: bool = False,
                 max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        self.client = client
        self.max_message_size = max_message_size
        self._ws = wsproto.connection.Connection(
            wsproto.connection.ConnectionType.CLIENT if client else wsproto.connection.ConnectionType.SERVER)
        self._outgoing = bytearray()
        self._fragments: list[bytes] = []
        self._fragment_size = 0
        self.close_sent = False
        self.close_received = False
        self.failed = False

    @property
    def closed(self) -> bool:
        """True once the close handshake finished or failed: the caller should drop the socket."""
        return self.failed or (self.close_sent and self.close_received)

    # -- receiving ----------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[Event]:
        """Feed bytes from the socket; returns every event they complete."""
        if self._finished():
            return []  # nothing may follow a close frame (RFC 6455 §5.5.1)
        self._ws.receive_data(data)
        events: list[Event] = []
        for event in self._ws.events():
            converted = self._convert(event)
            if converted is not None:
                events.append(converted)
            if self._finished():
                break
        return events

    def _finished(self) -> bool:
        return self.failed or self.close_received

    def _convert(self, event: wsproto.events.Event) -> Event | None:
        if isinstance(event, wsproto.events.Message):
            return self._message(event)
        if isinstance(event, wsproto.events.Ping):
            return Ping(bytes(event.payload))
        if isinstance(event, wsproto.events.Pong):
            return Pong(bytes(event.payload))
        if isinstance(event, wsproto.events.CloseConnection):
            if self._ws.state is wsproto.connection.ConnectionState.OPEN:
                # wsproto reports a frame it could not parse as a close it did not receive
                return self._fail(event.code, event.reason or "protocol error")
            return self._closed_by_peer(event)
        return None

    def _message(self, event: wsproto.events.Message[Any]) -> Message | ProtocolError | None:
        chunk = event.data.encode("utf-8") if isinstance(event.data, str) else bytes(event.data)
        self._fragment_size += len(chunk)
        if self._fragment_size > self.max_message_size:
            return self._fail(CloseCode.MESSAGE_TOO_BIG,
                              f"message larger than {self.max_message_size} bytes")
        self._fragments.append(chunk)
        if not event.message_finished:
            return None
        opcode = Opcode.TEXT if isinstance(event, wsproto.events.TextMessage) else Opcode.BINARY
        payload = b"".join(self._fragments)
        self._fragments, self._fragment_size = [], 0
        return Message(opcode, payload)

    def _closed_by_peer(self, event: wsproto.events.CloseConnection) -> Close:
        self.close_received = True
        if not self.close_sent:
            # Echo the peer's code, as RFC 6455 §5.5.1 suggests, to complete the handshake.
            self._outgoing += self._ws.send(event.response())
            self.close_sent = True
        return Close(int(event.code), event.reason or "")

    def _fail(self, code: int, reason: str) -> ProtocolError:
        if not self.close_sent:
            self._outgoing += self._ws.send(wsproto.events.CloseConnection(code=code, reason=reason))
            self.close_sent = True
        self.failed = True
        return ProtocolError(int(code), reason)

    def data_to_send(self) -> bytes:
        """Bytes the connection produced on its own (close echo, error close); drains the queue."""
        out = bytes(self._outgoing)
        self._outgoing.clear()
        return out

    # -- sending ------------------------------------------------------------------------------

    def _require_open(self) -> None:
        if self.close_sent:
            raise WebSocketError("the connection is closing; no more frames may be sent")

    def send_message(self, opcode: Opcode, payload: bytes, *,
                     fragment_size: int | None = None) -> bytes:
        """Encode a text or binary message, split into frames of `fragment_size` if given."""
        self._require_open()
        if opcode not in (Opcode.TEXT, Opcode.BINARY):
            raise WebSocketError(f"not a data opcode: {opcode!r}")
        step = fragment_size or max(len(payload), 1)
        chunks = [payload[i:i + step] for i in range(0, len(payload), step)] or [b""]
        frames = bytearray()
        for index, chunk in enumerate(chunks):
            last = index == len(chunks) - 1
            event: wsproto.events.Event = (
                wsproto.events.TextMessage(data=chunk.decode("utf-8"), message_finished=last)
                if opcode == Opcode.TEXT else wsproto.events.BytesMessage(data=chunk, message_finished=last))
            frames += self._ws.send(event)
        return bytes(frames)

    def send_binary(self, payload: bytes) -> bytes:
        return self.send_message(Opcode.BINARY, payload)

    def send_text(self, text: str) -> bytes:
        return self.send_message(Opcode.TEXT, text.encode("utf-8"))

    def _control(self, payload: bytes) -> None:
        self._require_open()
        if len(payload) > MAX_CONTROL_PAYLOAD:
            raise WebSocketError("control frame payloads are limited to 125 bytes")

    def send_ping(self, payload: bytes = b"") -> bytes:
        self._control(payload)
        return self._ws.send(wsproto.events.Ping(payload=payload))

    def send_pong(self, payload: bytes = b"") -> bytes:
        """Answer a `Ping` event with its payload (the connection does not do it by itself)."""
        self._control(payload)
        return self._ws.send(wsproto.events.Pong(payload=payload))

    def send_close(self, code: int = CloseCode.NORMAL, reason: str = "") -> bytes:
        """Start the close handshake; later sends raise `WebSocketError`.

        Returns b"" when a close frame already went out (for example the automatic echo of the
        peer's close), so a handler can always finish with it.
        """
        if self.close_sent:
            return b""
        self._control(reason.encode("utf-8"))
        self.close_sent = True
        # wsproto sends an empty close body only for its own "no status" member
        wire_code = CloseReason.NO_STATUS_RCVD if code == CloseCode.NO_STATUS else code
        return self._ws.send(wsproto.events.CloseConnection(code=wire_code, reason=reason or None))


# --------------------------------------------------------------------------------------------
# Kubernetes channel protocols (exec / attach)
# --------------------------------------------------------------------------------------------

CHANNEL_V4 = "v4.channel.k8s.io"
CHANNEL_V5 = "v5.channel.k8s.io"
EXEC_SUBPROTOCOLS: tuple[str, ...] = (CHANNEL_V5, CHANNEL_V4)

STDIN = 0
STDOUT = 1
STDERR = 2
ERROR = 3  # the final metav1.Status, JSON
RESIZE = 4  # TerminalSize JSON, client to server
CLOSE_CHANNEL = 255  # v5 only: [255, ch] means "ch is finished"


def channel_frame(channel: int, data: bytes) -> bytes:
    """A binary message payload for `channel` (the caller wraps it with `send_binary`)."""
    return bytes([channel]) + data


def parse_channel(payload: bytes) -> tuple[int, bytes]:
    """Split a channel message into (channel, data)."""
    if not payload:
        raise ValueError("empty channel message")
    return payload[0], payload[1:]


def close_channel_frame(channel: int) -> bytes:
    """The v5 payload that closes `channel` (kubectl sends `[255, 0]` at stdin EOF)."""
    return bytes([CLOSE_CHANNEL, channel])


def parse_close_channel(payload: bytes, subprotocol: str = CHANNEL_V5) -> int | None:
    """The channel a v5 close message closes, or None if `payload` is not one.

    Under v4 channel 255 has no special meaning, so nothing is ever a close there.
    """
    if subprotocol != CHANNEL_V5 or len(payload) != 2 or payload[0] != CLOSE_CHANNEL:
        return None
    return payload[1]


@dataclass(frozen=True)
class TerminalSize:
    width: int
    height: int


def resize_payload(width: int, height: int) -> bytes:
    """The JSON kubectl writes on channel 4 (Go field names, no tags: `Width`, `Height`)."""
    return json.dumps({"Width": width, "Height": height}, separators=(",", ":")).encode()


def parse_resize(data: bytes) -> list[TerminalSize]:
    """Every TerminalSize in one channel-4 message.

    The kubelet reads this channel as a JSON stream, so one message may hold several objects;
    Go matches field names case-insensitively, and so do we.
    """
    decoder = json.JSONDecoder()
    text, position = data.decode("utf-8"), 0
    sizes: list[TerminalSize] = []
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            return sizes
        value, position = decoder.raw_decode(text, position)
        if not isinstance(value, dict):
            raise ValueError("resize message is not a JSON object")
        fields = {str(key).lower(): item for key, item in value.items()}
        sizes.append(TerminalSize(_dimension(fields, "width"), _dimension(fields, "height")))


def _dimension(fields: dict[str, Any], name: str) -> int:
    value = fields.get(name, 0)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 0xFFFF:
        raise ValueError(f"invalid terminal {name}: {value!r}")
    return value


def _status_json(status: dict[str, Any]) -> bytes:
    # Compact, key order as Go marshals metav1.Status (metadata, status, message, reason, details).
    return json.dumps(status, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def status_success() -> bytes:
    """Channel 3 payload for a command that exited 0."""
    return _status_json({"metadata": {}, "status": "Success"})


def status_exit_code(exit_code: int, command: Sequence[str]) -> bytes:
    """Channel 3 payload for an exit code; 0 gives the Success status.

    The message repeats what kubelet + containerd produce (`%v` of a Go []string is
    `[a b c]`); kubectl and the Python client only read `details.causes[0].message`.
    """
    if exit_code == 0:
        return status_success()
    return _status_json(
        {
            "metadata": {},
            "status": "Failure",
            "message": "command terminated with non-zero exit code: error executing command "
            f"[{' '.join(command)}], exit code {exit_code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]},
        }
    )


def status_error(message: str) -> bytes:
    """Channel 3 payload for a failure that is not an exit code (the kubelet's InternalError)."""
    return _status_json(
        {
            "metadata": {},
            "status": "Failure",
            "message": f"Internal error occurred: {message}",
            "reason": "InternalError",
            "details": {"causes": [{"message": message}]},
            "code": 500,
        }
    )


# --------------------------------------------------------------------------------------------
# The Python `kubernetes` client's WebSocket port-forward
# --------------------------------------------------------------------------------------------


def parse_ports(values: Iterable[str]) -> list[int]:
    """Ports from the `ports` query parameter(s); each value may be comma-separated."""
    ports: list[int] = []
    for value in values:
        for token in value.split(","):
            token = token.strip()
            try:
                port = int(token)
            except ValueError:
                raise ValueError(f"invalid port {token!r}") from None
            if not 0 < port < 1 << 16:
                raise ValueError(f"port {port} is out of range 1-65535")
            ports.append(port)
    if not ports:
        raise ValueError("query parameter 'ports' is required")
    return ports


def port_channels(index: int) -> tuple[int, int]:
    """(data channel, error channel) of the port at `index` in the `ports` list."""
    return 2 * index, 2 * index + 1


def port_prefix(channel: int, port: int) -> bytes:
    """The first message the server sends on each channel: `[ch, port low byte, port high byte]`."""
    return bytes([channel, port & 0xFF, port >> 8])


@dataclass(frozen=True)
class WebSocketPortForward:
    """Channel bookkeeping for one port-forward connection of the Python client."""

    ports: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.ports or 2 * len(self.ports) > CLOSE_CHANNEL:
            raise ValueError("between 1 and 127 ports can be forwarded on one connection")

    def initial_payloads(self) -> list[bytes]:
        """What to send right after the handshake: the port prefix on every channel, in order."""
        out = []
        for index, port in enumerate(self.ports):
            for channel in port_channels(index):
                out.append(port_prefix(channel, port))
        return out

    def data_payload(self, index: int, data: bytes) -> bytes:
        return channel_frame(port_channels(index)[0], data)

    def error_payload(self, index: int, message: str) -> bytes:
        """The client shows this text and closes its local socket for that port."""
        return channel_frame(port_channels(index)[1], message.encode("utf-8"))

    def route(self, payload: bytes) -> tuple[int, bytes] | None:
        """(port index, data) for a client message; None for writes to an error channel.

        The server never reads error channels, so such writes are dropped, not treated as errors.
        """
        channel, data = parse_channel(payload)
        if channel >= 2 * len(self.ports):
            raise ValueError(f"unknown port-forward channel {channel}")
        if channel % 2:
            return None
        return channel // 2, data
