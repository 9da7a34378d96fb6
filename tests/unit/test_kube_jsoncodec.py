"""tether.kube.jsoncodec: the same values as the standard library, whichever codec answers."""

from __future__ import annotations

import json
import math

import pytest

from tether.kube import jsoncodec

VALUES = [
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"x": "y"}},
     "data": {"k": "välue ✓"}},
    [1, 2.5, True, False, None, "s", {"nested": [{}]}],
    "",
    0,
]


@pytest.mark.parametrize("value", VALUES)
def test_round_trip_matches_the_standard_library(value: object) -> None:
    encoded = jsoncodec.encode(value)
    assert isinstance(encoded, bytes)
    assert json.loads(encoded) == value
    assert jsoncodec.decode(encoded) == value
    assert jsoncodec.decode(json.dumps(value)) == value


def test_an_integer_beyond_64_bits_is_written_exactly_and_read_as_a_float() -> None:
    # not a power of two: a float cannot hold it, so a lossy read shows
    value = {"big": 2**70 + 1, "negative": -(2**65) - 3}
    encoded = jsoncodec.encode(value)
    assert json.loads(encoded) == value  # written digit for digit (the standard library's way)
    assert jsoncodec.decode(encoded) == {"big": float(2**70 + 1), "negative": float(-(2**65) - 3)}


def test_datetimes_and_dataclasses_are_refused_as_the_standard_library_refuses_them() -> None:
    import dataclasses
    import datetime as dt

    @dataclasses.dataclass
    class Point:
        x: int

    for value in (dt.datetime(2026, 12, 2, 3, 0), dt.date(2026, 12, 2), Point(1)):
        with pytest.raises(TypeError):
            jsoncodec.encode({"x": value})


def test_non_string_keys_become_strings_as_json_does() -> None:
    assert jsoncodec.decode(jsoncodec.encode({1: "a", "b": 2})) == {"1": "a", "b": 2}


def test_what_only_the_standard_library_reads() -> None:
    assert math.isnan(jsoncodec.decode(b'{"x": NaN}')["x"])


def test_an_integer_beyond_64_bits_reads_as_a_float_as_kube_apiserver_reads_it() -> None:
    assert jsoncodec.decode(b'{"x": 123456789012345678901234567890}')["x"] == \
        pytest.approx(1.2345678901234568e29)
    assert jsoncodec.decode(b'{"x": 9223372036854775807}')["x"] == 2**63 - 1


@pytest.mark.parametrize("data", [b"", b"{", b"not json", b'{"a":1,}'])
def test_not_json_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        jsoncodec.decode(data)


def test_what_json_cannot_carry_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        jsoncodec.encode({"x": object()})
