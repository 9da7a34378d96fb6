"""The dashboard's feed: one model for every browser, a new version only when a fact changes."""

from __future__ import annotations

import asyncio

from tether.app.dashboard import model as M
from tether.app.dashboard.server import Feed

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
