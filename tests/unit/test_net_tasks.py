"""cancel_and_wait stops a child task and never swallows the caller's own cancellation."""

from __future__ import annotations

import asyncio

import pytest

from tether.net.tasks import cancel_and_wait


async def test_the_child_is_stopped_and_the_caller_goes_on() -> None:
    child = asyncio.create_task(asyncio.sleep(60))
    await cancel_and_wait(child)
    assert child.cancelled()


async def test_a_child_that_failed_is_waited_for_quietly() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    child = asyncio.create_task(fails())
    await asyncio.sleep(0)
    await cancel_and_wait(child)
    assert child.done()


async def test_the_callers_cancellation_while_waiting_is_raised() -> None:
    stopping = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopping.set()
            await asyncio.sleep(0.2)  # a clean-up that takes a moment
            raise

    went_on = []

    async def stopper() -> None:
        child = asyncio.create_task(slow_to_stop())
        await asyncio.sleep(0)
        await cancel_and_wait(child)
        went_on.append(True)  # must not run: the stopper itself was cancelled meanwhile

    outer = asyncio.create_task(stopper())
    await stopping.wait()
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert went_on == []


async def test_a_caller_cleaning_up_after_its_own_cancellation_finishes_its_clean_up() -> None:
    cleaned: list[str] = []
    started = asyncio.Event()

    async def owner() -> None:
        child = asyncio.create_task(asyncio.sleep(60))
        try:
            started.set()
            await asyncio.sleep(60)
        finally:
            await cancel_and_wait(child)
            cleaned.append("after the child")  # e.g. closing clients: must still run

    outer = asyncio.create_task(owner())
    await started.wait()
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert cleaned == ["after the child"]
