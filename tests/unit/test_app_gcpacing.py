"""GC pacing: survivors are frozen out of collections, and a periodic full collection still
reclaims frozen cyclic garbage."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref

from tether.app.gcpacing import GcPacing


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cyclic collector can free it


async def test_freezes_survivors_and_reclaims_cycles_at_the_full_period() -> None:
    task = asyncio.create_task(GcPacing(freeze_period_s=0.05, full_period_s=0.4).run())
    try:
        node = Node()
        ref = weakref.ref(node)
        await asyncio.sleep(0.12)
        assert gc.get_freeze_count() > 0
        del node
        gc.collect()
        assert ref() is not None  # frozen: an ordinary collection does not see it
        for _ in range(40):
            if ref() is None:
                break
            await asyncio.sleep(0.05)
        assert ref() is None  # the full collection unfroze and reclaimed it
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert gc.get_freeze_count() == 0  # stopping leaves nothing frozen
