"""The admission rule of `tether.net.connections.decide`, as a table."""

from __future__ import annotations

import pytest

from tether.net.connections import Admit, ConnectionLimits, Decision, Evict, Refuse, decide

LIMITS = ConnectionLimits(max_connections=10, max_unauthenticated_per_address=4)


@pytest.mark.parametrize(("total", "unauthenticated", "address", "expected"), [
    (0, {}, "a", Admit()),
    (3, {"a": 3}, "a", Admit()),  # below its own limit
    (4, {"a": 4}, "a", Refuse),  # at its own limit, whatever the room left
    (9, {"b": 4, "c": 4}, "a", Admit()),  # room left
    (10, {"b": 4, "c": 4}, "a", Evict("b")),  # full: the heaviest (first of equals) makes room
    (10, {"b": 2, "c": 4}, "a", Evict("c")),
    (10, {"b": 3, "c": 2}, "b", Refuse),  # the heaviest itself gets no room
    (10, {"b": 3, "c": 2}, "c", Refuse),  # heavier by one only: no taking turns
    (10, {"b": 3, "c": 1}, "c", Evict("b")),
    (10, {}, "a", Refuse),  # full of authenticated connections: nothing to evict
    (10, {"b": 1}, "a", Refuse),
])
def test_decide(total: int, unauthenticated: dict[str, int], address: str,
                expected: Decision | type[Refuse]) -> None:
    decision = decide(LIMITS, total, unauthenticated, address)
    if expected is Refuse:
        assert isinstance(decision, Refuse) and decision.reason
    else:
        assert decision == expected
