"""Go duration strings ("10s", "1h30m", "250ms"), as Go's `time.ParseDuration` reads them."""

from __future__ import annotations

import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


class DurationError(ValueError):
    pass


def parse_duration(text: str) -> float:
    """Seconds. Accepts an optional sign and a sequence of number+unit parts; "0" alone is 0."""
    raw = text.strip()
    body = raw.lstrip("+-")
    sign = -1.0 if raw.startswith("-") else 1.0
    if body == "0":
        return 0.0
    if not body:
        raise DurationError(f"invalid duration {text!r}")
    total = 0.0
    pos = 0
    while pos < len(body):
        match = _PART.match(body, pos)
        if match is None:
            raise DurationError(f"invalid duration {text!r} (use a number and a unit: ns, us, ms, s, m, h)")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return sign * total
