"""JSON through orjson, with the standard library for what orjson refuses.

One codec for both sides of the Kubernetes API: `tether.kube` (every request body, answer and
watch frame a client handles) and the embedded API server in `tether.local` (request bodies,
answers, watch events, the store's rows). The standard library's codec spends most of its time
in Python-level dispatch; orjson does the same work about 3x (decoding) and 10x (encoding)
faster, and a write is handled as JSON several times on each side.

What orjson refuses and the standard library takes (non-string keys, integers beyond 64 bits,
NaN, lone surrogates, nesting beyond orjson's bound, a byte order mark) goes through the
standard library instead: `decode` raises `ValueError` for what is not JSON, `encode` gives
compact UTF-8 bytes. Two differences from the standard library remain, both as kube-apiserver
behaves: orjson writes non-ASCII characters as UTF-8 (Go does too; the standard library escapes
them as `\\uXXXX` unless told otherwise), and a number in a document that does not fit 64 bits
decodes as a float (Go's unstructured decoding does the same). Floats are written in their
shortest form either way (`1e+100` by the standard library, `1e100` by orjson: the same number).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

# What orjson would write but the standard library refuses (datetimes, dataclasses) goes to the
# standard library too, so it is a `TypeError` here as well: an object is never written in a
# form the other codec would not produce (a naive datetime as a timestamp without a zone).
_PASSTHROUGH = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


def _refuse(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")


def decode(data: bytes | str) -> Any:
    """The value of a JSON document (`ValueError` when it is not one)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass  # what only the standard library takes (NaN, huge integers), or not JSON at all
    return json.loads(data)


def try_decode(data: bytes) -> tuple[bool, Any]:
    """(True, value) when orjson reads `data`; (False, None) when it does not, for callers whose
    standard-library path says more (duplicate keys, precise errors)."""
    try:
        return True, orjson.loads(data)
    except orjson.JSONDecodeError:
        return False, None


def encode(value: Any, *, sort_keys: bool = False) -> bytes:
    """Compact UTF-8 JSON of `value` (`TypeError` for what JSON cannot carry); `sort_keys` orders
    every object's keys by code point, as Go orders a map's keys."""
    try:
        return orjson.dumps(value, default=_refuse,
                            option=_PASSTHROUGH | orjson.OPT_SORT_KEYS if sort_keys else _PASSTHROUGH)
    except orjson.JSONEncodeError:
        pass  # non-string keys, integers beyond 64 bits, NaN: the standard library's way
    return json.dumps(value, separators=(",", ":"), sort_keys=sort_keys).encode()


def dumps(value: Any, *, sort_keys: bool = False) -> str:
    """`encode` as text."""
    return encode(value, sort_keys=sort_keys).decode()


__all__ = ["decode", "dumps", "encode", "try_decode"]
