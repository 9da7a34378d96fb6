"""Timestamps as Kubernetes writes and reads them."""

from __future__ import annotations

import datetime as dt

import pytest

from tether.objects import times


def test_now_rfc3339_formats_the_current_second(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1_800_000_000.2]
    monkeypatch.setattr(times.time, "time", lambda: clock[0])
    assert times.now_rfc3339() == "2027-01-15T08:00:00Z"
    clock[0] = 1_800_000_000.9
    assert times.now_rfc3339() == "2027-01-15T08:00:00Z"
    clock[0] = 1_800_000_061.0
    assert times.now_rfc3339() == "2027-01-15T08:01:01Z"


def test_rfc3339_and_micro_time_take_seconds_or_datetimes() -> None:
    moment = dt.datetime(2027, 1, 15, 9, 0, 0, 500000, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert times.rfc3339(moment) == "2027-01-15T08:00:00Z"
    assert times.rfc3339(1_800_000_000.9) == "2027-01-15T08:00:00Z"
    assert times.micro_time(moment) == "2027-01-15T08:00:00.500000Z"
    assert times.micro_time(0.5) == "1970-01-01T00:00:00.500000Z"


@pytest.mark.parametrize(("value", "expected"), [
    ("2027-01-15T08:00:00Z", 1_800_000_000.0),
    ("2027-01-15T08:00:00.250000Z", 1_800_000_000.25),
    ("2027-01-15T09:00:00+01:00", 1_800_000_000.0),
    ("", None), (None, None), ("yesterday", None), (17, None),
])
def test_seconds_of(value: object, expected: float | None) -> None:
    assert times.seconds_of(value) == expected
