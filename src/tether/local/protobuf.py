"""Decode Kubernetes protobuf request bodies into the JSON-shaped objects the server stores.

Since 1.32, kubectl's typed clients send `application/vnd.kubernetes.protobuf` bodies for
their generator commands (`create namespace|deployment|...`, `auth can-i`, `create token`).
This module is a pure decoder without I/O. It reads the protobuf wire format with a tiny
reader and walks the field tables of `protobuf_tables`, which `scripts/gen_protobuf_tables.py`
generates from the upstream `generated.proto` files and Go types (see that script to add a kind
or move to a new Kubernetes release). Messages whose JSON form is not an object (Time,
IntOrString, Quantity, FieldsV1, ExtraValue) are decoded by hand below.

Envelope: the bytes `k8s\\x00`, then a `runtime.Unknown` message
`{1: typeMeta{1: apiVersion, 2: kind}, 2: raw, 3: contentEncoding, 4: contentType}`, where `raw`
is the gogo-protobuf encoding of the object.

gogo writes every non-pointer scalar, so an unset string arrives as `""` and an unset int as
`0`. Go's JSON encoder drops those (`omitempty`), so we do too, except for fields that are Go
pointers or lack `omitempty` (`keep_zero`), where a zero is a real value (`replicas: 0`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, Final

from tether.local.protobuf_tables import (
    ANY_GROUP_KINDS,
    BOOL,
    BYTES,
    INT,
    KINDS,
    MESSAGES,
    SCALARS,
    STRING,
    Field,
    Table,
)

__all__ = ["MAGIC", "SUPPORTED_KINDS", "ProtobufError", "decode_k8s_protobuf"]

MAGIC: Final = b"k8s\x00"

# Wire types. Groups (3, 4) were never used by Kubernetes, so they are treated as corruption.
_VARINT: Final = 0
_I64: Final = 1
_LEN: Final = 2
_I32: Final = 5

_MAX_VARINT_BYTES: Final = 10
_U64: Final = 1 << 64

# Go's zero time.Time as Unix seconds; `metav1.Time` normally encodes it as an empty
# message, but a hand-built Timestamp could carry it, and JSON renders it as null.
_GO_ZERO_TIME_SECONDS: Final = -62135596800


class ProtobufError(Exception):
    """The body is not a decodable Kubernetes protobuf message.

    `kind`/`api_version` are set when the envelope was readable but the kind has no table,
    so the server can answer 415 UnsupportedMediaType naming it.
    """

    def __init__(self, message: str, *, kind: str = "", api_version: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.api_version = api_version


# ---------------------------------------------------------------------------------------
# Wire-format reader
# ---------------------------------------------------------------------------------------

WireValue = int | bytes


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Return (unsigned value, next position)."""
    value = 0
    for i in range(_MAX_VARINT_BYTES):
        if pos + i >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return value % _U64, pos + i + 1
    raise ProtobufError("varint longer than 10 bytes")


def _take(data: bytes, pos: int, size: int) -> tuple[bytes, int]:
    end = pos + size
    if end > len(data):
        raise ProtobufError(f"truncated field: need {size} bytes at offset {pos}")
    return data[pos:end], end


def _iter_fields(data: bytes) -> Iterator[tuple[int, int, WireValue]]:
    """Yield (field number, wire type, value); value is an int for varints, else raw bytes."""
    pos = 0
    while pos < len(data):
        tag, pos = _read_varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ProtobufError("field number 0")
        value: WireValue
        if wire == _VARINT:
            value, pos = _read_varint(data, pos)
        elif wire == _LEN:
            size, pos = _read_varint(data, pos)
            value, pos = _take(data, pos, size)
        elif wire == _I64:
            value, pos = _take(data, pos, 8)
        elif wire == _I32:
            value, pos = _take(data, pos, 4)
        else:
            raise ProtobufError(f"unsupported wire type {wire} for field {number}")
        yield number, wire, value


def _signed(value: int) -> int:
    # int32/int64 are varints of the 64-bit two's complement (no zigzag in k8s protos).
    return value - _U64 if value >= 1 << 63 else value


# ---------------------------------------------------------------------------------------
# Schema: the tables are generated (protobuf_tables); the kinds they cover
# ---------------------------------------------------------------------------------------

# message name -> field number -> Field, for every message reachable from the kinds below.
SCHEMA: Final[dict[str, Table]] = MESSAGES

# Every scalar `Field.type`; any other type names a message in SCHEMA or _SPECIAL.
_SCALARS: Final = SCALARS

# (API group, kind) -> top-level message. One version per group, the one kubectl sends; the
# list of kinds lives in the generator, next to the closure it computes from them.
_KINDS: Final[dict[tuple[str, str], str]] = KINDS

# DeleteOptions is registered in every group (and as meta.k8s.io/v1), so any group matches.
_ANY_GROUP_KINDS: Final[dict[str, str]] = ANY_GROUP_KINDS

SUPPORTED_KINDS: Final[frozenset[str]] = frozenset(k for _, k in _KINDS) | frozenset(
    _ANY_GROUP_KINDS
)


# ---------------------------------------------------------------------------------------
# Messages with a non-object JSON form
# ---------------------------------------------------------------------------------------


def _time(data: bytes) -> str | None:
    """metav1.Time {1: seconds, 2: nanos} -> RFC3339 with second precision, as Go's JSON.

    An empty message is Go's zero time, which JSON renders as null (we drop it)."""
    if not data:
        return None
    seconds = 0
    for number, wire, value in _iter_fields(data):
        if number == 1:
            seconds = _signed(_expect_int(wire, value, "Time.seconds"))
    if seconds == _GO_ZERO_TIME_SECONDS:
        return None
    try:
        moment = datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise ProtobufError(f"timestamp out of range: {seconds}") from exc
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _int_or_string(data: bytes) -> int | str:
    """intstr.IntOrString {1: type (0 int, 1 string), 2: intVal, 3: strVal}."""
    kind, int_val, str_val = 0, 0, ""
    for number, wire, value in _iter_fields(data):
        if number == 1:
            kind = _expect_int(wire, value, "IntOrString.type")
        elif number == 2:
            int_val = _signed(_expect_int(wire, value, "IntOrString.intVal"))
        elif number == 3:
            str_val = _text(_expect_bytes(wire, value, "IntOrString.strVal"))
    return str_val if kind == 1 else int_val


def _quantity(data: bytes) -> str:
    """resource.Quantity {1: string}: JSON carries the canonical string as is."""
    return "".join(
        _text(_expect_bytes(wire, value, "Quantity.string"))
        for number, wire, value in _iter_fields(data)
        if number == 1
    )


def _fields_v1(data: bytes) -> Any:
    """metav1.FieldsV1 {1: raw JSON}: JSON inlines the document."""
    raw = b"".join(
        _expect_bytes(wire, value, "FieldsV1.Raw")
        for number, wire, value in _iter_fields(data)
        if number == 1
    )
    try:
        return json.loads(raw) if raw else {}
    except ValueError as exc:
        raise ProtobufError("FieldsV1 is not JSON") from exc


def _extra_value(data: bytes) -> list[str]:
    """authentication ExtraValue {1: items}: JSON is a bare list of strings."""
    return [
        _text(_expect_bytes(wire, value, "ExtraValue.items"))
        for number, wire, value in _iter_fields(data)
        if number == 1
    ]


_SPECIAL: Final[dict[str, Callable[[bytes], Any]]] = {
    "metav1.Time": _time,
    "intstr.IntOrString": _int_or_string,
    "resource.Quantity": _quantity,
    "metav1.FieldsV1": _fields_v1,
    "authenticationv1.ExtraValue": _extra_value,
}


# ---------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------


def _expect_int(wire: int, value: WireValue, where: str) -> int:
    if wire != _VARINT or not isinstance(value, int):
        raise ProtobufError(f"{where}: expected varint, got wire type {wire}")
    return value


def _expect_bytes(wire: int, value: WireValue, where: str) -> bytes:
    if wire != _LEN or not isinstance(value, bytes):
        raise ProtobufError(f"{where}: expected length-delimited, got wire type {wire}")
    return value


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtobufError("string field is not UTF-8") from exc


def _decode_message(data: bytes, message: str) -> Any:
    special = _SPECIAL.get(message)
    if special is not None:
        return special(data)
    table = SCHEMA[message]
    out: dict[str, Any] = {}
    for number, wire, value in _iter_fields(data):
        field = table.get(number)
        if field is None:
            continue  # a newer field we do not know: skip it, like any protobuf reader
        _apply(out, field, wire, value, f"{message}.{number}")
    return out


def _apply(out: dict[str, Any], field: Field, wire: int, value: WireValue, where: str) -> None:
    if field.map_value:
        key, val = _map_entry(field, _expect_bytes(wire, value, where), where)
        out.setdefault(field.name, {})[key] = val
    elif field.repeated:
        out.setdefault(field.name, []).extend(_repeated_values(field, wire, value, where))
    elif field.inline:
        out.update(_decode_message(_expect_bytes(wire, value, where), field.type))
    else:
        decoded = _value(field, wire, value, where)
        if not _is_absent(field, decoded):
            out[field.name] = decoded


def _is_absent(field: Field, value: Any) -> bool:
    """gogo writes zero values of non-pointer fields; JSON's omitempty drops them."""
    if value is None or (isinstance(value, str) and not value):
        return True
    return field.type in (INT, BOOL) and not field.keep_zero and not value


def _value(field: Field, wire: int, value: WireValue, where: str) -> Any:
    if field.type == INT:
        return _signed(_expect_int(wire, value, where))
    if field.type == BOOL:
        return _expect_int(wire, value, where) != 0
    raw = _expect_bytes(wire, value, where)
    if field.type == STRING:
        return _text(raw)
    if field.type == BYTES:
        return base64.b64encode(raw).decode("ascii")  # JSON's []byte encoding
    return _decode_message(raw, field.type)


def _repeated_values(field: Field, wire: int, value: WireValue, where: str) -> list[Any]:
    # proto2 (what k8s uses) does not pack repeated scalars, but accepting packed is free.
    if field.type in (INT, BOOL) and wire == _LEN and isinstance(value, bytes):
        return [_value(field, _VARINT, v, where) for v in _packed_varints(value)]
    return [_value(field, wire, value, where)]


def _packed_varints(data: bytes) -> Iterator[int]:
    pos = 0
    while pos < len(data):
        value, pos = _read_varint(data, pos)
        yield value


def _map_entry(field: Field, data: bytes, where: str) -> tuple[str, Any]:
    """Map entries are messages {1: key, 2: value}; a missing part is its zero value."""
    key = ""
    raw_value: bytes | None = None
    for number, wire, value in _iter_fields(data):
        if number == 1:
            key = _text(_expect_bytes(wire, value, where))
        elif number == 2:
            raw_value = _expect_bytes(wire, value, where)
    raw = raw_value or b""
    if field.type == STRING:
        return key, _text(raw)
    if field.type == BYTES:
        return key, base64.b64encode(raw).decode("ascii")
    return key, _decode_message(raw, field.type)


def _unwrap(envelope: bytes) -> tuple[str, str, bytes, str]:
    """runtime.Unknown -> (apiVersion, kind, raw, contentEncoding)."""
    api_version = kind = encoding = ""
    raw = b""
    for number, wire, value in _iter_fields(envelope):
        if number == 1:
            for sub, sub_wire, sub_value in _iter_fields(_expect_bytes(wire, value, "typeMeta")):
                if sub == 1:
                    api_version = _text(_expect_bytes(sub_wire, sub_value, "apiVersion"))
                elif sub == 2:
                    kind = _text(_expect_bytes(sub_wire, sub_value, "kind"))
        elif number == 2:
            raw = _expect_bytes(wire, value, "raw")
        elif number == 3:
            encoding = _text(_expect_bytes(wire, value, "contentEncoding"))
    return api_version, kind, raw, encoding


def _message_for(api_version: str, kind: str) -> str:
    group = api_version.rpartition("/")[0]
    message = _KINDS.get((group, kind)) or _ANY_GROUP_KINDS.get(kind)
    if message is None:
        shown = f"{kind} ({api_version})" if api_version else kind or "<no kind>"
        raise ProtobufError(
            f"protobuf decoding is not supported for kind {shown}",
            kind=kind,
            api_version=api_version,
        )
    return message


def decode_k8s_protobuf(body: bytes) -> dict[str, Any]:
    """Decode a `k8s\\x00`-prefixed protobuf body into its JSON-shaped object.

    The result carries `apiVersion` and `kind` from the envelope. Raises ProtobufError on a
    bad magic, malformed or truncated data, an encoded payload, or a kind without a table.
    """
    if not body.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf body (missing k8s\\x00 magic)")
    api_version, kind, raw, encoding = _unwrap(bytes(body[len(MAGIC) :]))
    if encoding:
        raise ProtobufError(f"unsupported protobuf contentEncoding {encoding!r}")
    message = _message_for(api_version, kind)
    obj = _decode_message(raw, message)
    return {"apiVersion": api_version, "kind": kind, **obj}
