"""Request bodies decoded by orjson must read exactly as the standard library's path reads them:
the same value, the same duplicate-key paths, the same refusals."""

from __future__ import annotations

import json

import pytest

from tether.local import bodies
from tether.local.errors import ApiError


def _slow(body: bytes) -> bodies.Decoded:
    """The standard library's path alone (the fast path refused)."""
    saved = bodies._decode_plain
    bodies._decode_plain = lambda body: None  # type: ignore[assignment]
    try:
        return bodies.decode_json(body)
    finally:
        bodies._decode_plain = saved  # type: ignore[assignment]


SAME = [
    b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v: w"}}',
    b'{"a": 1, "b": [1, 2.5, true, null, {"c": "x:y"}]}',
    b'{"a":1,"a":2}',  # duplicate at the top
    b'{"a":{"b":1,"b":1}}',  # nested
    b'{"a" :1,"a":2}',  # whitespace before a colon
    b'{"x":"\\u0022:","a":1,"a":2}',  # a quote and colon inside a string, escaped
    b'{"a":"x:y","a":"z:"}',  # colons in the dropped and the kept value
    b'{"k\\\\":1,"k\\\\":2}',  # keys ending in a backslash
    b'[{"a":1},{"a":2}]',  # same key in sibling objects is no duplicate
    b'{"n":123456789012345678901234567890}',  # beyond 64 bits: stays an integer
    b'{"n":18446744073709551615,"m":-9223372036854775808}',
    b'{"s":"\xc3\xa9"}',
    b'"just a string"',
    b"[]",
]


@pytest.mark.parametrize("body", SAME)
def test_the_fast_path_reads_what_the_standard_library_reads(body: bytes) -> None:
    fast, slow = bodies.decode_json(body), _slow(body)
    assert fast == slow
    assert json.dumps(fast.value) == json.dumps(slow.value)  # types too (int stays int)


def test_duplicates_are_reported_whichever_way_they_are_written() -> None:
    assert bodies.decode_json(b'{"a":1,"a":2}').duplicates == ("a",)
    assert bodies.decode_json(b'{"x":"\\u0022:","a":1,"a":2}').duplicates == ("a",)
    assert bodies.decode_json(b'{"spec":{"r":1,"r":2}}').duplicates == ("spec.r",)


@pytest.mark.parametrize("body", [b'{"a":NaN}', b'{"a":1e400}', b'{"a":', b'{"a":1,}',
                                  b"[" * 300 + b"]" * 300])
def test_refusals_are_the_standard_librarys(body: bytes) -> None:
    with pytest.raises(ApiError) as fast:
        bodies.decode_json(body)
    with pytest.raises(ApiError) as slow:
        _slow(body)
    assert (fast.value.code, fast.value.message) == (slow.value.code, slow.value.message)
