"""A running intercept on the developer's side: parked connections, the Lease, the end.

`hold` keeps connections parked at the router (through the `ClusterChannel`: the bridge agent's
multiplexed connection, so no port opens here) and renews the session's Lease every few
seconds, until it is cancelled or `until` completes (the `-- CMD` child); then it ends the
session (the last one on the Service restores it). A client killed without ending leaves the
Lease to expire, and the router ends the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tether.bridge import intercepts
from tether.bridge.channel import ByteStream, ClusterChannel, DialFailed
from tether.bridge.parking import ParkedPool, local_handler
from tether.kube import KubeClient, KubeError

log = logging.getLogger(__name__)


@dataclass
class Holding:
    client: KubeClient
    channel: ClusterChannel
    started: intercepts.Started
    local_port: int
    local_host: str = "127.0.0.1"
    renew_every_s: float = 0.0
    pool: ParkedPool | None = None
    _router_ip: str = field(default="", init=False)

    def _opener(self) -> Callable[[], Awaitable[ByteStream]]:
        self._router_ip = self.started.router_pod_ip

        async def open_router() -> ByteStream:
            try:
                return await self.channel.open_tcp(self._router_ip, intercepts.PARK_PORT)
            except DialFailed:
                # The router pod may have been replaced: look it up again before the pool retries.
                ip = await intercepts.router_pod_ip(self.client, self.started.plan.namespace,
                                                    self.started.plan.service)
                if ip:
                    self._router_ip = ip
                raise

        return open_router

    async def _renew(self) -> None:
        every = self.renew_every_s or max(1.0, self.started.plan.restore_after_s / 6)
        while True:
            await asyncio.sleep(every)
            try:
                await intercepts.renew(self.client, self.started.plan.namespace, self.started.plan.route)
            except KubeError as exc:  # a blip: the Lease has several renewals of slack
                log.warning("intercept %s: renewing the lease failed: %s", self.started.plan.route, exc)

    async def hold(self, until: Awaitable[object] | None = None) -> None:
        plan = self.started.plan
        self.pool = ParkedPool(self._opener(), plan.route, self.started.token, self.local_port,
                               local_handler(self.local_port, self.local_host))
        tasks = [asyncio.create_task(self.pool.run()), asyncio.create_task(self._renew())]
        try:
            if until is not None:
                await until
            else:
                await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(BaseException):
                    await task
