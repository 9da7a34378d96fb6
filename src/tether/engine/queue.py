from __future__ import annotations

import asyncio
import collections
import heapq
import logging
import random
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

log = logging.getLogger(__name__)

Reconcile = Callable[[K], Awaitable[None]]


class RequeueAfter(Exception):
    """Raised by a reconcile that wants another look after `delay_s`, without counting a failure."""

    def __init__(self, delay_s: float) -> None:
        super().__init__(f"requeue after {delay_s}s")
        self.delay_s = delay_s


@dataclass(order=True)
class _Delayed(Generic[K]):
    due: float
    seq: int
    key: K = field(compare=False)
    coalesced: bool = field(default=False, compare=False)


class Engine(Generic[K]):
    def __init__(
        self,
        name: str,
        reconcile: Reconcile[K],
        *,
        workers: int = 1,
        base_backoff_s: float = 0.05,
        max_backoff_s: float = 30.0,
    ) -> None:
        self.name = name
        self._reconcile = reconcile
        self._workers = workers
        self._base_backoff_s = base_backoff_s
        self._max_backoff_s = max_backoff_s
        # two lanes: what changed goes first; periodic resyncs wait in the background lane, so
        # a resync of 10,000 keys does not stand in front of the next real change
        self._urgent: collections.deque[K] = collections.deque()
        self._background: collections.deque[K] = collections.deque()
        self._queued: dict[K, bool] = {}  # key -> queued in the background lane only
        self._has_work = asyncio.Event()
        self._active: set[K] = set()
        self._dirty: set[K] = set()  # changed while being reconciled: run again after
        self._later: set[K] = set()  # asked for in the background lane while being reconciled
        self._failures: dict[K, int] = {}
        self._delayed: list[_Delayed[K]] = []
        self._coalesced: dict[K, float] = {}  # key -> when its coalesced enqueue is due
        self._seq = 0
        self._wake = asyncio.Event()
        self.reconciled = 0

    def enqueue(self, key: K, *, delay_s: float = 0.0, background: bool = False) -> None:
        """Reconcile `key` (once, however often it is enqueued before that). `background`: a
        periodic resync, served only when no other key waits; a plain enqueue of a key waiting
        there moves it to the front lane."""
        if delay_s > 0:
            self._seq += 1
            heapq.heappush(self._delayed, _Delayed(time.monotonic() + delay_s, self._seq, key))
            self._wake.set()
            return
        if key in self._active:
            if not background:
                self._dirty.add(key)
            return
        waiting_in_background = self._queued.get(key)
        if waiting_in_background is None:
            self._queued[key] = background
            (self._background if background else self._urgent).append(key)
            self._has_work.set()
        elif waiting_in_background and not background:
            self._queued[key] = False  # promoted; its background entry is skipped when reached
            self._urgent.append(key)
            self._has_work.set()

    def defer(self, key: K) -> None:
        """Queue `key` in the background lane (served when no change waits), also when it is
        being reconciled right now: then once that reconcile ends. For work a reconcile puts
        off until the front lane is empty (unlike a resync, which the running reconcile
        satisfies)."""
        if key in self._active:
            self._later.add(key)
        else:
            self.enqueue(key, background=True)

    def enqueue_within(self, key: K, delay_s: float) -> None:
        """Reconcile `key` within `delay_s`, once for however many such calls: a call whose
        deadline is later than the one already set changes nothing, an earlier one moves it up,
        and a reconcile of `key` that starts before the deadline satisfies it (it reads what the
        callers wanted it to read). For event bursts: status reports of many parts of one whole."""
        due = time.monotonic() + delay_s
        current = self._coalesced.get(key)
        if current is not None and current <= due:
            return
        self._coalesced[key] = due
        self._seq += 1
        heapq.heappush(self._delayed, _Delayed(due, self._seq, key, coalesced=True))
        self._wake.set()

    async def _next(self) -> K:
        while True:
            while self._urgent:
                key = self._urgent.popleft()
                if key in self._queued:
                    del self._queued[key]
                    return key
            while self._background:
                key = self._background.popleft()
                if self._queued.get(key) is True:
                    del self._queued[key]
                    return key
            self._has_work.clear()
            await self._has_work.wait()

    def depth(self) -> int:
        """Keys waiting (not counting those being reconciled): a queue-depth gauge reads it."""
        return len(self._queued)

    def backlog(self) -> int:
        """About how many keys wait in the front lane (changes, not resyncs)."""
        return len(self._urgent)

    def idle(self) -> bool:
        return not self._queued and not self._active and not self._dirty

    def settled(self) -> bool:
        """Idle with no delayed enqueue pending either: nothing will run until something new
        is enqueued."""
        return self.idle() and all(e.coalesced and self._coalesced.get(e.key) != e.due
                                   for e in self._delayed)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._timer())
            for _ in range(self._workers):
                group.create_task(self._worker())

    async def _timer(self) -> None:
        while True:
            now = time.monotonic()
            while self._delayed and self._delayed[0].due <= now:
                entry = heapq.heappop(self._delayed)
                if entry.coalesced:
                    if self._coalesced.get(entry.key) != entry.due:
                        continue  # moved up, or satisfied by a reconcile since
                    del self._coalesced[entry.key]
                self.enqueue(entry.key)
            timeout = self._delayed[0].due - now if self._delayed else None
            self._wake.clear()
            # asyncio.timeout, not wait_for: on 3.11 wait_for returns the wake-up and drops a
            # cancellation that arrives with it, and the engine never stops
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def _worker(self) -> None:
        while True:
            key = await self._next()
            self._coalesced.pop(key, None)
            self._active.add(key)
            try:
                await self._reconcile(key)
                self._failures.pop(key, None)
            except RequeueAfter as again:
                self.enqueue(key, delay_s=again.delay_s)
            except asyncio.CancelledError:
                raise
            except Exception:
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                delay = min(self._max_backoff_s, self._base_backoff_s * 2 ** (failures - 1))
                delay *= random.uniform(0.8, 1.2)
                log.exception("%s: reconcile of %r failed (attempt %d); retrying in %.2fs",
                              self.name, key, failures, delay)
                self.enqueue(key, delay_s=delay)
            finally:
                self._active.discard(key)
                self.reconciled += 1
                later = key in self._later
                self._later.discard(key)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.enqueue(key)
                elif later:
                    self.enqueue(key, background=True)
            # Reconciles that never await would otherwise drain the whole backlog in one step
            # of the event loop, starving everything else (an API server shares the loop).
            await asyncio.sleep(0)
