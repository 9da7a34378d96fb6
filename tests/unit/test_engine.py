"""The reconcile engine: dedup, serial per key, requeue and backoff."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from tether.engine import Engine, RequeueAfter


async def _run_until(engine: Engine[str], condition: object, timeout_s: float = 2.0) -> None:
    task = asyncio.create_task(engine.run())
    try:
        async with asyncio.timeout(timeout_s):
            while not condition():  # type: ignore[operator]  # noqa: ASYNC110 - polling a test condition
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_duplicate_keys_are_reconciled_once() -> None:
    seen: list[str] = []

    async def reconcile(key: str) -> None:
        seen.append(key)

    engine: Engine[str] = Engine("t", reconcile)
    for _ in range(5):
        engine.enqueue("a")
    engine.enqueue("b")
    await _run_until(engine, lambda: len(seen) >= 2 and engine.idle())
    assert sorted(seen) == ["a", "b"]


async def test_key_changed_during_reconcile_runs_again_serially() -> None:
    running = 0
    overlap = False
    calls = 0
    gate = asyncio.Event()

    async def reconcile(key: str) -> None:
        nonlocal running, overlap, calls
        running += 1
        overlap = overlap or running > 1
        calls += 1
        if calls == 1:
            engine.enqueue(key)  # a change arrives while we work
            gate.set()
        await asyncio.sleep(0.01)
        running -= 1

    engine: Engine[str] = Engine("t", reconcile, workers=4)
    engine.enqueue("a")
    await _run_until(engine, lambda: calls >= 2 and engine.idle())
    assert calls == 2 and not overlap


async def test_failures_retry_with_backoff_and_requeue_after() -> None:
    attempts = 0

    async def reconcile(key: str) -> None:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise RuntimeError("boom")
        if attempts == 3:
            raise RequeueAfter(0.01)

    engine: Engine[str] = Engine("t", reconcile, base_backoff_s=0.01)
    engine.enqueue("a")
    await _run_until(engine, lambda: attempts >= 4)
    assert attempts == 4


async def test_changes_are_served_before_a_background_resync() -> None:
    seen: list[str] = []

    async def reconcile(key: str) -> None:
        seen.append(key)

    engine: Engine[str] = Engine("t", reconcile)
    for i in range(50):
        engine.enqueue(f"resync-{i}", background=True)
    engine.enqueue("changed")
    engine.enqueue("resync-7")  # a real change to a key that waits in the background: promoted
    await _run_until(engine, lambda: len(seen) >= 50 and engine.idle())
    assert seen[:2] == ["changed", "resync-7"]
    assert sorted(seen) == sorted(["changed", *(f"resync-{i}" for i in range(50))])  # each once


async def test_background_enqueue_neither_duplicates_nor_demotes() -> None:
    seen: list[str] = []
    gate = asyncio.Event()

    async def reconcile(key: str) -> None:
        seen.append(key)
        if key == "first":
            await gate.wait()

    engine: Engine[str] = Engine("t", reconcile)
    engine.enqueue("first")
    engine.enqueue("a")
    engine.enqueue("a", background=True)  # already waiting in front: stays there, once
    engine.enqueue("b", background=True)
    task = asyncio.create_task(engine.run())
    try:
        await asyncio.sleep(0.05)
        engine.enqueue("first", background=True)  # active: a resync does not queue it again
        gate.set()
        async with asyncio.timeout(2):
            while not (len(seen) >= 3 and engine.idle()):  # noqa: ASYNC110 - polling a test condition
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert seen == ["first", "a", "b"]


@pytest.mark.parametrize("steps", [0, 1, 2, 3])
async def test_the_timer_stops_when_cancelled_as_it_is_woken(steps: int) -> None:
    """A cancellation arriving with the wake-up (a delayed enqueue) must still end the timer:
    on 3.11 `wait_for` returned the wake-up's result and dropped the cancellation, and the
    engine never stopped."""

    async def reconcile(_key: str) -> None:
        pass

    engine: Engine[str] = Engine("timer", reconcile)
    engine.enqueue("later", delay_s=3600)  # the timer waits with a timeout
    timer = asyncio.create_task(engine._timer())
    for _ in range(3):
        await asyncio.sleep(0)
    engine.enqueue("soon", delay_s=1800)  # sets the wake-up
    for _ in range(steps):
        await asyncio.sleep(0)
    timer.cancel()
    done, _ = await asyncio.wait({timer}, timeout=5)
    assert timer in done and timer.cancelled()


async def test_enqueue_within_coalesces_to_the_earliest_deadline() -> None:
    seen: list[str] = []

    async def reconcile(key: str) -> None:
        seen.append(key)

    engine: Engine[str] = Engine("t", reconcile)
    for _ in range(5):
        engine.enqueue_within("a", 60.0)  # many reports of parts of one whole
    engine.enqueue_within("a", 0.01)  # the last part: moves the deadline up
    engine.enqueue_within("a", 30.0)  # later than the one set: changes nothing
    await _run_until(engine, lambda: seen == ["a"] and engine.settled())
    assert seen == ["a"], "one reconcile; the later deadlines were satisfied by it"


async def test_a_reconcile_that_starts_first_satisfies_enqueue_within() -> None:
    seen: list[str] = []

    async def reconcile(key: str) -> None:
        seen.append(key)

    engine: Engine[str] = Engine("t", reconcile)
    engine.enqueue_within("a", 60.0)
    assert not engine.settled()
    engine.enqueue("a")  # a change of its own runs it now
    await _run_until(engine, lambda: seen == ["a"] and engine.settled())
    assert seen == ["a"]


async def test_a_key_deferred_during_its_reconcile_runs_after_it() -> None:
    seen: list[str] = []

    async def reconcile(key: str) -> None:
        seen.append(key)
        if len(seen) == 1:
            engine.defer(key)  # "write my report once nothing else waits"

    engine: Engine[str] = Engine("t", reconcile)
    engine.enqueue("a")
    await _run_until(engine, lambda: len(seen) == 2 and engine.settled())
    assert seen == ["a", "a"]
