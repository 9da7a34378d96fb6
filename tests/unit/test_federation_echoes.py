"""Echoes: a controller's own writes are recognised in its watch whether the event or the
write's answer arrives first; every other change still reaches the handler."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tether.federation.propagation import Echoes
from tether.kube import WatchEvent

KEY = ("ns", "work")


def event(version: str, kind: str = "MODIFIED") -> WatchEvent:
    return WatchEvent(kind, {"metadata": {"namespace": "ns", "name": "work",  # type: ignore[arg-type]
                                          "resourceVersion": version}})


def obj(version: str) -> dict[str, object]:
    return {"metadata": {"resourceVersion": version}}


class Handler:
    """A controller's event handler: reconciles what is not an echo."""

    def __init__(self, echoes: Echoes) -> None:
        self.echoes = echoes
        self.reconciled: list[str] = []

    def __call__(self, ev: WatchEvent) -> None:
        replay: Callable[[], None] = lambda: self(ev)  # noqa: E731
        if not self.echoes.echo(KEY, ev, replay):
            self.reconciled.append(ev.resource_version)


# (events before the answer, the answer's version or None for a failed write,
#  events after the answer, versions reconciled)
CASES = [
    ("answer first", [], "5", ["5"], []),
    ("echo first", ["5"], "5", [], []),
    ("someone else's change first, then the echo", ["4"], "5", ["5"], ["4"]),
    ("echo, then someone else's change, both early", ["5", "6"], "5", [], ["6"]),
    ("failed write: the early event is someone else's", ["7"], None, [], ["7"]),
    ("deleted while writing: handled at once", ["DELETED"], "5", [], ["DELETED"]),
]


@pytest.mark.parametrize(("early", "answer", "late", "expected"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_own_writes_are_echoes_whichever_arrives_first(
        early: list[str], answer: str | None, late: list[str], expected: list[str]) -> None:
    echoes = Echoes()
    handler = Handler(echoes)
    echoes.begin(KEY)
    for version in early:
        handler(event(version, "DELETED" if version == "DELETED" else "MODIFIED"))
    echoes.end(KEY, None if answer is None else obj(answer))
    for version in late:
        handler(event(version))
    assert handler.reconciled == expected


def test_without_a_write_in_flight_nothing_is_held() -> None:
    echoes = Echoes()
    handler = Handler(echoes)
    handler(event("3"))
    assert handler.reconciled == ["3"]


def test_overlapping_writes_replay_once_the_last_ends() -> None:
    echoes = Echoes()
    handler = Handler(echoes)
    echoes.begin(KEY)
    echoes.begin(KEY)
    handler(event("5"))
    echoes.end(KEY, obj("5"))
    assert handler.reconciled == []  # still held: the other write is in flight
    echoes.end(KEY, obj("6"))
    assert handler.reconciled == ["5"]  # the last write noted is 6: 5 was not its echo
