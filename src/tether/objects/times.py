"""Timestamps as Kubernetes writes them: `metav1.Time` (RFC 3339, seconds, UTC `Z`) and
`metav1.MicroTime` (microseconds), and parsing either back. Pure, except the `now_*` readers."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

_last_stamp: tuple[int, str] = (-1, "")


def rfc3339(moment: float | dt.datetime) -> str:
    """`metav1.Time`: whole seconds, UTC. `moment` is a datetime or seconds since the epoch."""
    seconds = int(moment.timestamp() if isinstance(moment, dt.datetime) else moment)
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def micro_time(moment: float | dt.datetime) -> str:
    """`metav1.MicroTime`: microseconds, UTC."""
    when = moment if isinstance(moment, dt.datetime) else dt.datetime.fromtimestamp(moment, dt.UTC)
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_rfc3339() -> str:
    """The current time as `metav1.Time`; formatted once per second (writes ask many times)."""
    global _last_stamp
    second = int(time.time())
    if _last_stamp[0] != second:
        _last_stamp = (second, rfc3339(second))
    return _last_stamp[1]


def now_micro() -> str:
    return micro_time(time.time())


def parse_time(value: Any) -> dt.datetime | None:
    """An RFC 3339 timestamp (Time or MicroTime) as an aware datetime; None if unset or invalid."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def seconds_of(value: Any) -> float | None:
    """An RFC 3339 timestamp as seconds since the epoch; None if unset or invalid."""
    parsed = parse_time(value)
    return None if parsed is None else parsed.timestamp()
