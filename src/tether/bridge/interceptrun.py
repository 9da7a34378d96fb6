"""A running intercept on the developer's side: parked connections, the Lease, the end.

`keep_renewed` renews the session's Lease every few seconds; `hold` keeps connections parked
at the router (through the `ClusterChannel`: the bridge agent's multiplexed connection, so no
port opens here) until it is cancelled or `until` completes (the `-- CMD` child); then it tells
the router it is leaving (requests for its route go to the original pods from then on) and lets
the requests already handed to it finish, and the caller ends the session (the last one on the
Service restores it). A client killed without ending leaves the
Lease to expire, and the router ends the session.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tether.bridge import intercepts
from tether.bridge.channel import ByteStream, ClusterChannel, DialFailed
from tether.bridge.parking import ParkedPool, local_handler
from tether.kube import KubeClient, KubeError
from tether.net.tasks import cancel_and_wait

log = logging.getLogger(__name__)


async def keep_renewed(client: KubeClient, plan: intercepts.Plan, every_s: float = 0.0) -> None:
    """Renew the session's Lease every few seconds (from right after `begin`: setting up the
    channel may take longer than the Lease lasts)."""
    every = every_s or max(1.0, plan.restore_after_s / 6)
    while True:
        await asyncio.sleep(every)
        try:
            await intercepts.renew(client, plan.namespace, plan.route)
        except KubeError as exc:  # a blip: the Lease has several renewals of slack
            log.warning("intercept %s: renewing the lease failed: %s", plan.route, exc)


@dataclass
class Holding:
    client: KubeClient
    channel: ClusterChannel
    started: intercepts.Started
    local_port: int
    local_host: str = "127.0.0.1"
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

    async def hold(self, until: Awaitable[object] | None = None, *,
                   session_ended: Callable[[], bool] = lambda: False) -> None:
        """`session_ended()` says, once `until` is done, whether the session was already ended
        in the cluster (the router has let go of it then: no need to tell it)."""
        plan = self.started.plan
        self.pool = ParkedPool(self._opener(), plan.route, self.started.token, self.local_port,
                               local_handler(self.local_port, self.local_host))
        tasks = [asyncio.create_task(self.pool.run())]
        try:
            if until is not None:
                await until
            else:
                await asyncio.gather(*tasks)
            # ending normally: the router stops sending here before the parked connections close,
            # so no request is caught between the two (it goes to the original pods instead)
            if not session_ended():
                await self.pool.leave()
        finally:
            for task in tasks:
                await cancel_and_wait(task)
