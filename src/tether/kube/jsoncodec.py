"""JSON in and out of the Kubernetes API, through orjson when it is installed.

Every request body, response and watch frame a client handles is encoded or decoded here. The
standard library's codec spends most of its time in Python-level dispatch; orjson does the same
work about 3x (decoding) and 10x (encoding) faster, and a controller handles several objects per
write it makes (its request, the answer, the watch echo). What orjson refuses and the standard
library takes (non-string keys, integers beyond 64 bits, NaN, lone surrogates) goes through the
standard library instead: `decode` raises `ValueError` for what is not JSON, `encode` gives
compact UTF-8 bytes. One difference remains and is kube-apiserver's own: a number in a document
that does not fit 64 bits decodes as a float (Go's unstructured decoding does the same).
"""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency; the fallback keeps working
    orjson = None  # type: ignore[assignment]


def decode(data: bytes | str) -> Any:
    """The value of a JSON document (`ValueError` when it is not one)."""
    if orjson is not None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # what only the standard library takes (NaN, huge integers), or not JSON at all
    return json.loads(data)


def encode(value: Any) -> bytes:
    """Compact UTF-8 JSON of `value` (`TypeError` for what JSON cannot carry)."""
    if orjson is not None:
        try:
            return orjson.dumps(value)
        except orjson.JSONEncodeError:
            pass  # non-string keys, integers beyond 64 bits, NaN: the standard library's way
    return json.dumps(value, separators=(",", ":")).encode()


__all__ = ["decode", "encode"]
