"""apiserver-network-proxy's wire messages (`client.proto`, `agent.proto`): a hand-written codec.

The protos have no `package`, so the gRPC paths are `/ProxyService/Proxy` (frontend: a client
such as kube-apiserver talking to the server) and `/AgentService/Connect` (backend: the agent
dialling out to the server). Both are bidirectional streams of `Packet`.

Encoding follows proto3 exactly as Go's marshaller does: fields in field-number order, zero values
omitted, so `DIAL_REQ` (enum 0) has no `type` field on the wire and an absent type decodes as
DIAL_REQ. The oneof payload matching `type` is always written, even when empty (`32 00` for an
empty CloseResponse): Go peers dereference it unconditionally. Unknown fields are skipped.

`WINDOW` (type 100, field 100) is tether's own flow-control credit. It is only sent to a peer that
asked for it in its stream metadata (see `FLOW_CONTROL_KEY`), so Go peers never see it.

No I/O here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum

PROXY_METHOD = "/ProxyService/Proxy"
CONNECT_METHOD = "/AgentService/Connect"

# gRPC metadata keys: always lowercase on the wire (grpcio refuses upper case).
AGENT_ID_KEY = "agentid"
AGENT_IDENTIFIERS_KEY = "agentidentifiers"
AUTHORIZATION_KEY = "authorization"
SERVER_ID_KEY = "serverid"
SERVER_COUNT_KEY = "servercount"
# tether extension, negotiated: the agent offers a window size, the server echoes the one in use.
FLOW_CONTROL_KEY = "tether-window"

_U64 = 1 << 64
_I63 = 1 << 63


class DecodeError(ValueError):
    """The bytes are not a well-formed Packet."""


class PacketType(IntEnum):
    DIAL_REQ = 0
    DIAL_RSP = 1
    CLOSE_REQ = 2
    CLOSE_RSP = 3
    DATA = 4
    DIAL_CLS = 5
    DRAIN = 6
    WINDOW = 100  # tether extension


@dataclass(frozen=True, slots=True)
class DialRequest:
    protocol: str = ""
    address: str = ""
    random: int = 0


@dataclass(frozen=True, slots=True)
class DialResponse:
    error: str = ""
    connect_id: int = 0
    random: int = 0


@dataclass(frozen=True, slots=True)
class CloseRequest:
    connect_id: int = 0


@dataclass(frozen=True, slots=True)
class CloseResponse:
    error: str = ""
    connect_id: int = 0


@dataclass(frozen=True, slots=True)
class CloseDial:
    random: int = 0


@dataclass(frozen=True, slots=True)
class Drain:
    pass


Chunk = bytes | memoryview  # a decoded DATA payload is a zero-copy view into the received message


@dataclass(frozen=True, slots=True)
class Data:
    connect_id: int = 0
    error: str = ""
    data: Chunk = b""


@dataclass(frozen=True, slots=True)
class WindowUpdate:
    """tether extension: the receiver of connection `connect_id` consumed `credit` more bytes."""

    connect_id: int = 0
    credit: int = 0


Payload = DialRequest | DialResponse | Data | CloseRequest | CloseResponse | CloseDial | Drain | WindowUpdate

# Packet.payload oneof field numbers, and which payload each packet type carries.
_FIELD_OF_PAYLOAD: dict[type, int] = {
    DialRequest: 2, DialResponse: 3, Data: 4, CloseRequest: 5, CloseResponse: 6, CloseDial: 7,
    Drain: 8, WindowUpdate: 100,
}
PAYLOAD_OF_TYPE: dict[PacketType, type] = {
    PacketType.DIAL_REQ: DialRequest, PacketType.DIAL_RSP: DialResponse,
    PacketType.CLOSE_REQ: CloseRequest, PacketType.CLOSE_RSP: CloseResponse,
    PacketType.DATA: Data, PacketType.DIAL_CLS: CloseDial, PacketType.DRAIN: Drain,
    PacketType.WINDOW: WindowUpdate,
}
_PAYLOAD_FIELDS = frozenset(_FIELD_OF_PAYLOAD.values())
_TYPE_OF_PAYLOAD: dict[type, PacketType] = {v: k for k, v in PAYLOAD_OF_TYPE.items()}


@dataclass(frozen=True, slots=True)
class Packet:
    """One message on either stream. `type` is an int so unknown types survive decoding."""

    type: int
    payload: Payload | None
    # The received message, kept by `decode` for a DATA packet in canonical encoding, so a server
    # forwarding the packet unchanged sends these bytes again instead of re-encoding them.
    raw: bytes | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def of(payload: Payload) -> Packet:
        """The packet whose type matches `payload` (the only way tether builds packets)."""
        return Packet(_TYPE_OF_PAYLOAD[type(payload)], payload)

    @property
    def type_name(self) -> str:
        return _TYPE_NAMES.get(self.type, "Unknown")


_TYPE_NAMES: dict[int, str] = {t.value: t.name for t in PacketType}


# -- constructors, named after the packet types ------------------------------------------------

def dial_req(address: str, random: int, protocol: str = "tcp") -> Packet:
    return Packet.of(DialRequest(protocol, address, random))


def dial_rsp(random: int, connect_id: int = 0, error: str = "") -> Packet:
    return Packet.of(DialResponse(error, connect_id, random))


def close_req(connect_id: int) -> Packet:
    return Packet.of(CloseRequest(connect_id))


def close_rsp(connect_id: int, error: str = "") -> Packet:
    return Packet.of(CloseResponse(error, connect_id))


def data(connect_id: int, chunk: Chunk) -> Packet:
    return Packet.of(Data(connect_id, "", chunk))


def dial_cls(random: int) -> Packet:
    return Packet.of(CloseDial(random))


def drain() -> Packet:
    return Packet.of(Drain())


def window(connect_id: int, credit: int) -> Packet:
    return Packet.of(WindowUpdate(connect_id, credit))


# -- encoding ----------------------------------------------------------------------------------

def _varint(value: int) -> bytes:
    if value < 0:
        value += _U64  # int64 two's complement, always 10 bytes
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _int_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value) if value else b""


def _bytes_field(number: int, value: Chunk) -> bytes:
    return b"".join((_varint(number << 3 | 2), _varint(len(value)), value)) if value else b""


def _str_field(number: int, value: str) -> bytes:
    return _bytes_field(number, value.encode())


def _encode_payload(payload: Payload) -> bytes:
    match payload:
        case DialRequest(protocol, address, random):
            return _str_field(1, protocol) + _str_field(2, address) + _int_field(3, random)
        case DialResponse(error, connect_id, random):
            return _str_field(1, error) + _int_field(2, connect_id) + _int_field(3, random)
        case Data(connect_id, error, chunk):
            return _int_field(1, connect_id) + _str_field(2, error) + _bytes_field(3, chunk)
        case CloseRequest(connect_id):
            return _int_field(1, connect_id)
        case CloseResponse(error, connect_id):
            return _str_field(1, error) + _int_field(2, connect_id)
        case CloseDial(random):
            return _int_field(1, random)
        case WindowUpdate(connect_id, credit):
            return _int_field(1, connect_id) + _int_field(2, credit)
        case Drain():
            return b""
    raise TypeError(f"not a payload: {payload!r}")


_DATA_HEAD = b"\x08\x04\x22"  # type=DATA (field 1 varint 4), then the Data payload key (field 4)
_DATA_CHUNK_KEY = b"\x1a"  # Data.data (field 3, length-delimited)
_SMALL_VARINTS = tuple(_varint(i) for i in range(1 << 14))  # cached one- and two-byte varints


def _encode_data(packet_type: int, payload: Data) -> bytes:
    """DATA fast path: byte-identical to the generic encoder, one copy of the chunk."""
    return encode_data_parts(payload.connect_id, (payload.data,), len(payload.data), packet_type)


def encode_data_parts(connect_id: int, parts: Sequence[Chunk], size: int,
                      packet_type: int = PacketType.DATA) -> bytes:
    """The encoding of `data(connect_id, b"".join(parts))` (`size` bytes), copying each part once."""
    cid = (b"\x08" + _varint(connect_id)) if connect_id else b""
    if not size:
        prefix = cid
    elif size < 1 << 14:
        prefix = cid + _DATA_CHUNK_KEY + _SMALL_VARINTS[size]
    else:
        prefix = cid + _DATA_CHUNK_KEY + _varint(size)
    body = len(prefix) + size
    head = _DATA_HEAD if packet_type == PacketType.DATA else _int_field(1, packet_type) + b"\x22"
    return b"".join((head, _SMALL_VARINTS[body] if body < 1 << 14 else _varint(body), prefix, *parts))


def serialize(message: Packet | bytes) -> bytes:
    """gRPC request/response serializer: a Packet, or bytes already encoded (`encode_data_parts`)."""
    if isinstance(message, bytes):
        return message
    return encode(message)


def encode(packet: Packet) -> bytes:
    """Serialize a Packet. The payload is written even when empty (a present, empty oneof)."""
    if packet.raw is not None:
        return packet.raw
    payload = packet.payload
    if type(payload) is Data and not payload.error:
        return _encode_data(packet.type, payload)
    head = _int_field(1, packet.type)
    if packet.payload is None:
        return head
    body = _encode_payload(packet.payload)
    number = _FIELD_OF_PAYLOAD[type(packet.payload)]
    return head + _varint(number << 3 | 2) + _varint(len(body)) + body


# -- decoding ----------------------------------------------------------------------------------

def _read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise DecodeError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & (_U64 - 1), pos
        shift += 7
        if shift >= 70:
            raise DecodeError("varint too long")


def _fields(buf: bytes | memoryview) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) for varint and length-delimited fields; others skipped."""
    out: list[tuple[int, int, int | bytes]] = []
    pos = 0
    end = len(buf)
    while pos < end:
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise DecodeError("field number 0")
        if wire == 0:
            value, pos = _read_varint(buf, pos)
            out.append((number, wire, value))
        elif wire == 2:
            length, pos = _read_varint(buf, pos)
            if pos + length > end:
                raise DecodeError("truncated length-delimited field")
            out.append((number, wire, bytes(buf[pos:pos + length])))
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise DecodeError(f"unsupported wire type {wire}")
        if pos > end:
            raise DecodeError("truncated fixed-width field")
    return out


def _int64(value: int) -> int:
    return value - _U64 if value >= _I63 else value


def _scalars(buf: bytes) -> tuple[dict[int, int], dict[int, bytes]]:
    ints: dict[int, int] = {}
    blobs: dict[int, bytes] = {}
    for number, wire, value in _fields(buf):
        if wire == 0 and isinstance(value, int):
            ints[number] = _int64(value)
        elif wire == 2 and isinstance(value, bytes):
            blobs[number] = value
    return ints, blobs


def _text(blobs: dict[int, bytes], number: int) -> str:
    try:
        return blobs.get(number, b"").decode()
    except UnicodeDecodeError as exc:
        raise DecodeError(f"field {number} is not UTF-8") from exc


def _decode_payload(number: int, buf: bytes) -> Payload | None:
    if number not in _PAYLOAD_FIELDS:
        return None
    ints, blobs = _scalars(buf)
    match number:
        case 2:
            return DialRequest(_text(blobs, 1), _text(blobs, 2), ints.get(3, 0))
        case 3:
            return DialResponse(_text(blobs, 1), ints.get(2, 0), ints.get(3, 0))
        case 4:
            return Data(ints.get(1, 0), _text(blobs, 2), blobs.get(3, b""))
        case 5:
            return CloseRequest(ints.get(1, 0))
        case 6:
            return CloseResponse(_text(blobs, 1), ints.get(2, 0))
        case 7:
            return CloseDial(ints.get(1, 0))
        case 8:
            return Drain()
        case 100:
            return WindowUpdate(ints.get(1, 0), ints.get(2, 0))
    return None


def _decode_data(buf: bytes) -> Packet | None:
    """DATA fast path for the common shape `08 04 22 <len> {08 id} {12 err} {1a chunk}` filling
    the whole message: the chunk is sliced out once. None: not that shape, use the generic path."""
    end = len(buf)
    body, pos = _read_varint(buf, 3)
    if pos + body != end:
        return None
    canonical = pos - 3 == _varint_size(body)
    last_key = 0
    connect_id = 0
    error: Chunk = b""
    chunk: Chunk = b""
    view = memoryview(buf)
    while pos < end:
        key = buf[pos]
        pos += 1
        canonical = canonical and key > last_key
        last_key = key
        start = pos
        if key == 0x08:
            value, pos = _read_varint(buf, pos)
            connect_id = _int64(value)
            canonical = canonical and value != 0 and pos - start == _varint_size(value)
        elif key == 0x12 or key == 0x1A:
            length, pos = _read_varint(buf, pos)
            if pos + length > end:
                raise DecodeError("truncated length-delimited field")
            canonical = canonical and length != 0 and pos - start == _varint_size(length)
            if key == 0x1A:
                chunk = view[pos:pos + length]
            else:
                error = view[pos:pos + length]
                canonical = False  # the encoder's fast path never writes an error
            pos += length
        else:
            return None
    try:
        text = bytes(error).decode() if error else ""
    except UnicodeDecodeError as exc:
        raise DecodeError("field 2 is not UTF-8") from exc
    raw = buf if canonical and type(buf) is bytes else None
    return Packet(PacketType.DATA, Data(connect_id, text, chunk), raw)


def _varint_size(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def decode(buf: bytes) -> Packet:
    """Parse a Packet. A known type without its payload gets the empty payload of that type; a
    payload that contradicts a known type is an error (a Go peer would crash on it)."""
    if buf[:3] == _DATA_HEAD:
        fast = _decode_data(buf)
        if fast is not None:
            return fast
    kind = 0
    payload: Payload | None = None
    for number, wire, value in _fields(buf):
        if number == 1 and wire == 0 and isinstance(value, int):
            kind = _int64(value)
        elif wire == 2 and isinstance(value, bytes):
            found = _decode_payload(number, value)
            if found is not None:
                payload = found  # oneof: the last one wins
    try:
        known = PacketType(kind)
    except ValueError:
        return Packet(kind, payload)
    expected = PAYLOAD_OF_TYPE[known]
    if payload is None:
        payload = expected()
    elif not isinstance(payload, expected):
        raise DecodeError(f"{known.name} packet carries a {type(payload).__name__} payload")
    return Packet(known, payload)


@dataclass(frozen=True, slots=True)
class Malformed:
    """A received message that is not a Packet (`decode_lenient`'s answer instead of raising)."""

    reason: str
    size: int


def decode_lenient(buf: bytes) -> Packet | Malformed:
    """`decode` for gRPC deserializers: a bad message becomes `Malformed`, so the stream's owner
    decides what to do with it (grpc would log a traceback and hand over None)."""
    try:
        return decode(buf)
    except DecodeError as exc:
        return Malformed(str(exc), len(buf))
