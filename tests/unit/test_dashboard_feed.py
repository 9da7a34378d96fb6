"""The dashboard's feed: one model for every browser, a new version only when a fact changes."""

from __future__ import annotations

import asyncio

import pytest

from tether.app.dashboard import model as M
from tether.app.dashboard.server import Feed, event_stream

CLUSTER = {"metadata": {"name": "m1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


async def test_versions_follow_facts_not_the_clock() -> None:
    state = {"ready": "True", "now": 1.0, "builds": 0}

    def build() -> M.Dashboard:
        state["builds"] = int(state["builds"]) + 1
        cluster = {**CLUSTER, "status": {"conditions": [{"type": "Ready", "status": state["ready"]}]}}
        return M.build(M.HubSnapshot(float(state["now"]), clusters=(cluster,)))

    feed = Feed(build, tick_s=0.05)
    assert feed.current().clusters[0].ready == "True" and feed.version == 1
    state["now"] = 2.0
    feed.refresh()
    assert feed.version == 1 and feed.current().now_s == 2.0  # fresher clock, same facts

    waiter = asyncio.ensure_future(feed.wait_beyond(1))
    await asyncio.sleep(0)
    assert not waiter.done()
    state["ready"] = "False"
    runner = asyncio.ensure_future(feed.run())
    try:
        feed.poke()
        async with asyncio.timeout(10):
            await waiter
        assert feed.version == 2 and feed.current().clusters[0].ready == "False"
    finally:
        runner.cancel()


async def test_a_failing_build_keeps_the_last_model() -> None:
    calls = {"n": 0}

    def build() -> M.Dashboard:
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("boom")
        return M.build(M.HubSnapshot(1.0))

    feed = Feed(build)
    first = feed.current()
    feed.refresh()
    assert feed.current() is first and feed.version == 1


async def test_event_stream_sends_changes_and_ends_when_the_right_is_revoked() -> None:
    state = {"ready": "True"}

    def build() -> M.Dashboard:
        cluster = {**CLUSTER, "status": {"conditions": [{"type": "Ready", "status": state["ready"]}]}}
        return M.build(M.HubSnapshot(1.0, clusters=(cluster,)))

    feed = Feed(build)
    now = {"t": 0.0}
    allowed = {"yes": True, "asked": 0}

    async def still_allowed() -> bool:
        allowed["asked"] += 1
        return allowed["yes"]

    stream = event_stream(feed, still_allowed, keepalive_s=0.05, recheck_s=10.0,
                          clock=lambda: now["t"])
    assert await anext(stream) == b"retry: 2000\n\n"
    first = await anext(stream)
    assert first.startswith(b"id: 1\nevent: model\ndata: ") and b'"ready":"True"' in first
    assert await anext(stream) == b": keepalive\n\n"  # nothing changed
    state["ready"] = "False"
    feed.refresh()
    second = await anext(stream)
    assert second.startswith(b"id: 2\n") and b'"ready":"False"' in second
    assert allowed["asked"] == 0  # asked again only after recheck_s
    now["t"] = 11.0
    assert await anext(stream) == b": keepalive\n\n"  # the wait that was under way
    assert await anext(stream) == b": keepalive\n\n"
    assert allowed["asked"] == 1
    allowed["yes"] = False
    now["t"] = 22.0
    assert await anext(stream) == b"event: unauthorized\ndata: {}\n\n"
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


@pytest.mark.parametrize(("address", "tls", "refused"), [
    ("127.0.0.1", False, False), ("::1", False, False), ("[::1]", False, False),
    ("localhost", False, False), ("127.0.0.5", False, False),
    ("0.0.0.0", False, True), ("", False, True), ("10.0.0.7", False, True), ("::", False, True),
    ("hub.example.com", False, True),
    ("0.0.0.0", True, False), ("10.0.0.7", True, False),
])
def test_plain_http_only_on_loopback(address: str, tls: bool, refused: bool) -> None:
    from tether.app.dashboard.server import plain_http_refusal

    reason = plain_http_refusal(address, tls)
    assert (reason is not None) is refused
    if reason is not None:
        assert "--dashboard-tls" in reason and "port-forward" in reason
