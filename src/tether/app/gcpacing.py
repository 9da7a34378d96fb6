"""Keeps CPython's full garbage collections from stalling a process that caches many objects.

A hub's informer caches hold every Work and member object as JSON dicts (~10 objects each), so
with 50,000 Works a full (generation 2) collection walks ~1.3 million containers and stops the
event loop for ~0.5 s or more. CPython starts one whenever a quarter as many objects again have
survived into the old generation, which a growing cache does all the time: those pauses were the
p99 of a sustained propagation run at 50 members.

The cache's objects are acyclic and die by reference counting, so they need no cyclic
collection. `run()` moves what survived into CPython's permanent generation (`gc.freeze()`, a
constant-time splice) every `freeze_period_s`, so collections only look at what is new. Anything
cyclic that was frozen and then dropped would never be reclaimed, so every `full_period_s` it
unfreezes and runs one full collection: one pause per period instead of one per growth step.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass
class GcPacing:
    freeze_period_s: float = 30.0
    full_period_s: float = 900.0

    async def run(self) -> None:
        last_full = time.monotonic()
        try:
            while True:
                await asyncio.sleep(self.freeze_period_s)
                if time.monotonic() - last_full >= self.full_period_s:
                    gc.unfreeze()
                    started = time.monotonic()
                    found = gc.collect()
                    last_full = time.monotonic()
                    log.info("full garbage collection: %d unreachable in %.0f ms", found,
                             1000 * (last_full - started))
                gc.freeze()
        finally:
            gc.unfreeze()
