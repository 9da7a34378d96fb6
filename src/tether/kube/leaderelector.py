"""Leader election against a cluster: campaign, lead while renewing, release on a graceful stop.

The decisions are `kube.leaderelection`'s; this module reads and writes the Lease. `run(lead)`
returns only by cancellation (a graceful stop: `lead` is cancelled and has stopped before the
Lease is released, so the next leader never overlaps with it) or raises `LeadershipLost` when
renewals failed for the renew deadline or another replica holds the Lease (`lead` has been
cancelled and has stopped by then). Like kube-controller-manager, a caller that loses the
lease should exit: its replacement campaigns from scratch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable

from tether.kube.client import KubeClient
from tether.kube.errors import AlreadyExists, Conflict, KubeError
from tether.kube.leaderelection import (
    JITTER_FACTOR,
    LEASE_API_VERSION,
    Create,
    ElectionConfig,
    LeaseRecord,
    Observation,
    Update,
    Wait,
    decide,
    lease_object,
    observe,
    released,
)

log = logging.getLogger(__name__)
RELEASE_TIMEOUT_S = 2.0


class LeadershipLost(Exception):
    """This replica led and no longer does."""


class LeaderElector:
    def __init__(self, client: KubeClient, config: ElectionConfig, *,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        config.check()
        self.client = client
        self.config = config
        self._clock = clock
        self._wall = wall
        self.observation: Observation | None = None
        self._resource_version = ""
        self.is_leader = False
        self.leading_since: float | None = None  # wall time this replica last became leader

    @property
    def leader(self) -> str:
        """The holder this replica last saw ("" when unknown or released)."""
        return self.observation.record.holder if self.observation is not None else ""

    def _held(self, lease: dict[str, object], record: LeaseRecord) -> None:
        meta = lease.get("metadata")
        self._resource_version = str(meta.get("resourceVersion", "")) if isinstance(meta, dict) else ""
        self.observation = Observation(record, self._clock())

    async def try_acquire_or_renew(self) -> bool:
        """One attempt (client-go's `tryAcquireOrRenew`); True when this replica holds the Lease."""
        c = self.config
        if self.is_leader and self._resource_version and self.observation is not None:
            # the fast path: the leader renews its own last write without reading first; any
            # change by someone else makes this a Conflict and the full path below reads it
            with contextlib.suppress(KubeError):
                renewal = decide(c, self.observation.record, self.observation, self._clock(),
                                 self._wall())
                if isinstance(renewal, Update):
                    renewed = await self.client.replace(
                        lease_object(c, renewal.record, self._resource_version))
                    self._held(renewed, renewal.record)
                    return True
        try:
            lease = await self.client.get_or_none(LEASE_API_VERSION, "Lease", c.name, c.namespace)
        except KubeError as exc:
            log.warning("leader election: reading Lease %s/%s failed: %s", c.namespace, c.name, exc)
            return False
        now = self._clock()
        resource_version = ""
        if lease is None:
            decision = decide(c, None, None, now, self._wall())
        else:
            record = LeaseRecord.from_lease(lease)
            self.observation = observe(self.observation, record, now)
            resource_version = str((lease.get("metadata") or {}).get("resourceVersion", ""))
            decision = decide(c, record, self.observation, now, self._wall())
        if isinstance(decision, Wait):
            self.is_leader = False
            log.debug("leader election: %s", decision.why)
            return False
        try:
            if isinstance(decision, Create):
                written = await self.client.create(lease_object(c, decision.record))
            else:
                written = await self.client.replace(lease_object(c, decision.record, resource_version))
        except (Conflict, AlreadyExists):
            log.info("leader election: another replica wrote Lease %s/%s first", c.namespace, c.name)
            return False
        except KubeError as exc:
            log.warning("leader election: writing Lease %s/%s failed: %s", c.namespace, c.name, exc)
            return False
        if not self.is_leader:
            self.leading_since = self._wall()
            log.info("leader election: %s acquired Lease %s/%s (transitions %d)", c.identity,
                     c.namespace, c.name, decision.record.transitions)
        self.is_leader = True
        self._held(written, decision.record)
        return True

    async def _attempt(self, budget_s: float) -> bool:
        try:
            async with asyncio.timeout(budget_s):
                return await self.try_acquire_or_renew()
        except TimeoutError:
            log.warning("leader election: no answer from the API server within %.1fs", budget_s)
            return False

    def _jittered(self) -> float:
        period = self.config.retry_period_s
        return period + random.uniform(0.0, (JITTER_FACTOR - 1.0) * period)

    async def acquire(self) -> None:
        """Campaign until this replica holds the Lease (every retry period, jittered)."""
        log.info("leader election: %s campaigning for Lease %s/%s", self.config.identity,
                 self.config.namespace, self.config.name)
        while not await self._attempt(self.config.renew_deadline_s):  # noqa: ASYNC110 - a retry loop against the API server
            await asyncio.sleep(self._jittered())

    async def renew_until_lost(self) -> None:
        """Renew every retry period; raise `LeadershipLost` when a round of retries finds no
        success within the renew deadline, or someone else holds the Lease."""
        c = self.config
        while True:
            await asyncio.sleep(c.retry_period_s)
            deadline = self._clock() + c.renew_deadline_s
            while True:
                left = deadline - self._clock()
                if left <= 0:
                    self.is_leader = False
                    raise LeadershipLost(f"{c.identity} could not renew Lease {c.namespace}/{c.name} "
                                         f"within the renew deadline ({c.renew_deadline_s:g}s)")
                if await self._attempt(left):
                    break
                if self.leader and self.leader != c.identity:
                    self.is_leader = False
                    raise LeadershipLost(f"Lease {c.namespace}/{c.name} is now held by {self.leader}")
                await asyncio.sleep(max(0.0, min(c.retry_period_s, deadline - self._clock())))

    async def release(self) -> bool:
        """Clear the holder if this replica holds the Lease (client-go's ReleaseOnCancel)."""
        c = self.config
        if self.observation is None or self.observation.record.holder != c.identity:
            return False
        record = released(self.observation.record, c.identity, self._wall())
        if record is None:
            return False
        try:
            async with asyncio.timeout(RELEASE_TIMEOUT_S):
                await self.client.replace(lease_object(c, record, self._resource_version))
        except (KubeError, TimeoutError) as exc:
            log.warning("leader election: releasing Lease %s/%s failed: %s", c.namespace, c.name, exc)
            return False
        finally:
            self.is_leader = False
        self.observation = Observation(record, self._clock())
        log.info("leader election: %s released Lease %s/%s", c.identity, c.namespace, c.name)
        return True

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Campaign, then run `lead()` while renewing (see the module docstring)."""
        try:
            await self.acquire()
            leading = asyncio.ensure_future(lead())
            renewing = asyncio.ensure_future(self.renew_until_lost())
            try:
                await asyncio.wait({leading, renewing}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (leading, renewing):
                    task.cancel()
                # the controllers must have stopped before the Lease can go to someone else
                await asyncio.wait({leading, renewing})
            for task in (renewing, leading):
                if not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
        finally:
            if self.config.release_on_cancel:
                await self.release()
