"""Netns mode: the host's routes for this cluster's addresses follow its Services and IP pools.

Each ClusterIP (and the cluster DNS address) is routed from the host through the cluster's host
link, so `curl http://<ClusterIP>/` on the host reaches the service proxy in the router namespace;
every other address of the cluster, including the ranges of its enabled IPPools, ends at the
cluster's sink device (see `tether.local.netns`). Rootless clusters need no routes (their
fabric's `sync_host_routes` does nothing), so this component runs only in netns mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from ipaddress import IPv4Network

from tether.local.netns import HostFabric, NetnsError
from tether.local.nodes.ipam import IPPOOLS, pool_from_object
from tether.local.services.allocation import SERVICES
from tether.local.services.watch import start_signals
from tether.local.store import Store

log = logging.getLogger(__name__)


class HostRoutes:
    def __init__(self, store: Store, fabric: HostFabric, *, resync_s: float = 30.0, settle_s: float = 0.05) -> None:
        self.store = store
        self.fabric = fabric
        self.resync_s = resync_s  # also repairs routes someone removed by hand
        self.settle_s = settle_s
        self._changed = asyncio.Event()
        self._failed = ""

    def wanted(self) -> tuple[list[str], list[IPv4Network]]:
        """The ClusterIPs of every Service and the CIDRs of the pools IPAM may use."""
        ips: list[str] = []
        for service in self.store.list_objects(SERVICES):
            spec = service.get("spec") or {}
            ips += [str(ip) for ip in spec.get("clusterIPs") or [spec.get("clusterIP")] if ip]
        pools = [pool_from_object(p) for p in self.store.list_objects(IPPOOLS)]
        return ips, [p.cidr for p in pools if p.cidr is not None and not p.disabled and p.for_workloads]

    async def sync(self) -> None:
        ips, pools = self.wanted()
        try:
            await self.fabric.sync_host_routes(ips, pools)
        except NetnsError as exc:
            if str(exc) != self._failed:  # once per distinct failure; retried every resync
                log.warning("host routes: %s", exc)
            self._failed = str(exc)
        else:
            self._failed = ""

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            start_signals(group, self.store, (SERVICES, IPPOOLS), self._changed)
            while True:
                await self.sync()
                # asyncio.timeout, not wait_for: on 3.11 wait_for can drop a cancellation that
                # arrives as the event is set, and the loop would never stop
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.resync_s):
                        await self._changed.wait()
                await asyncio.sleep(self.settle_s)
                self._changed.clear()
