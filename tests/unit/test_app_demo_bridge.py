"""The demo's Bridge step, its pure parts: who an answer came from, and when the step succeeded."""

from __future__ import annotations

import json

import pytest

from tether.app.demo_bridge import LOCAL_PROGRAM, InterceptResult, ReachResult, describe_answer

POD = "pod greeter-6d6d8c976f-tqxsp (127.59.1.3)"


@pytest.mark.parametrize(("body", "who"), [
    (json.dumps({"answeredBy": LOCAL_PROGRAM, "routeAs": "demo"}).encode(), LOCAL_PROGRAM),
    (json.dumps({"pod": "greeter-6d6d8c976f-tqxsp", "podIP": "127.59.1.3", "node": "n"}).encode(), POD),
    (json.dumps({"pod": "greeter-x"}).encode(), "pod greeter-x (?)"),
    (json.dumps({"answeredBy": "someone else"}).encode(), ""),
    (b"<html>Welcome to nginx</html>", ""),
    (b"[1, 2]", ""),
    (b"", ""),
])
def test_describe_answer(body: bytes, who: str) -> None:
    assert describe_answer(body) == who


@pytest.mark.parametrize(("result", "ok"), [
    (InterceptResult(LOCAL_PROGRAM, POD, POD, restored=True), True),
    (InterceptResult(LOCAL_PROGRAM, POD, POD, restored=False), False),  # Service left on the router
    (InterceptResult(POD, POD, POD, restored=True), False),  # the header did not reach this machine
    (InterceptResult(LOCAL_PROGRAM, LOCAL_PROGRAM, POD, restored=True), False),  # took everything
    (InterceptResult(LOCAL_PROGRAM, POD, LOCAL_PROGRAM, restored=True), False),  # still routed after leaving
    (InterceptResult(LOCAL_PROGRAM, "", POD, restored=True), False),  # the pods stopped answering
    (InterceptResult(error="route-as 'demo' is taken"), False),
])
def test_intercept_ok(result: InterceptResult, ok: bool) -> None:
    assert result.ok is ok


@pytest.mark.parametrize(("result", "ok"), [
    (ReachResult("127.1.0.53:40000", "127.1.1.1", "127.1.1.1:80", "greeter-x (127.59.1.3) on n"), True),
    (ReachResult("127.1.0.53:40000", "127.1.1.1", "127.1.1.10:80", "greeter-x"), False),  # another address
    (ReachResult("127.1.0.53:40000", "", "127.1.1.1:80", ""), False),  # the name did not resolve
    (ReachResult("127.1.0.53:40000", "127.1.1.1", "127.1.1.1:80", ""), False),  # nobody answered
    (ReachResult(error="the session did not start within 120s"), False),
])
def test_reach_ok(result: ReachResult, ok: bool) -> None:
    assert result.ok is ok
