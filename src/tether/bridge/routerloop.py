"""`tether bridge router`: the routing proxy in its pod, kept in step with the sessions.

Every second, and at once when a session object of the Service changes (a watch wakes the loop:
`tether leave` from another machine takes effect without waiting for the next round): the
sessions on the Service become the router's routes (but for sessions `end` has marked leaving:
their routes are dropped at once and the router says so on the session, so that `end` deletes
the session, and with it the developer's bridge agent, only once no request is handed there); the cloned Service's
ready endpoints are the original pods it dials; a session whose Lease expired is ended (the
last one restores the Service's selector and removes the router, this pod included); the
Service's selector is checked (changed by someone else: an Event and an annotation on the
sessions, no fight); request counts are written to the sessions every few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.bridge import intercepts, routing
from tether.bridge.router import Router
from tether.kube import KubeClient, KubeError
from tether.net.tasks import cancel_and_wait
from tether.objects.times import now_rfc3339

log = logging.getLogger(__name__)

COUNT_EVERY_S = 3.0


@dataclass
class RouterLoop:
    client: KubeClient
    namespace: str
    service: str
    router: Router
    poll_s: float = 1.0
    originals: list[str] = field(default_factory=list)
    _written: dict[str, int] = field(default_factory=dict)
    _drift_reported: bool = False
    _seen_routed: bool = False  # the selector is moved after the router is Ready: no drift before
    _last_counts: float = 0.0
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        watching = asyncio.create_task(self._watch_sessions())
        try:
            while True:
                self._changed.clear()
                try:
                    if not await self.step():
                        return
                except KubeError as exc:
                    log.warning("router %s: %s", self.service, exc)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.poll_s):
                        await self._changed.wait()
        finally:
            await cancel_and_wait(watching)

    async def _watch_sessions(self) -> None:
        """Wake the loop whenever a session of this Service is added, changed or deleted."""
        selector = f"{intercepts.OBJECT_LABEL}=session,{intercepts.SERVICE_LABEL}={self.service}"
        while True:
            try:
                async with contextlib.aclosing(self.client.watch("v1", "ConfigMap", self.namespace,
                                                                 label_selector=selector,
                                                                 allow_bookmarks=False)) as events:
                    async for event in events:
                        if event.type != "BOOKMARK":
                            self._changed.set()
            except (KubeError, OSError) as exc:
                log.debug("router %s: session watch: %s", self.service, exc)
            await asyncio.sleep(self.poll_s)  # the loop still polls meanwhile

    async def step(self) -> bool:
        """One round; False once no session is left (the router has been removed)."""
        found = await intercepts.sessions(self.client, self.namespace, self.service)
        live = []
        now = time.time()
        for session in found:
            route = str((session.get("data") or {}).get("route", ""))
            lease = await self.client.get_or_none("coordination.k8s.io/v1", "Lease", routing.session_name(route),
                                                  self.namespace)
            if intercepts.lease_expired(lease, now, session):
                log.warning("router %s: the lease of %s expired; ending its intercept", self.service, route)
                if await intercepts.end_expired(self.client, self.namespace, route, lease):
                    continue
                log.info("router %s: %s renewed its lease meanwhile; keeping it", self.service, route)
            live.append(session)
        if not live:
            if found:
                return False
            # No session at all: ended meanwhile (whoever ended the last one removes the router),
            # or removing this router failed half-way. Once the Service no longer points here,
            # nothing can reach this router: remove it rather than linger.
            self.router.set_routes({})
            svc = await self.client.get_or_none("v1", "Service", self.service, self.namespace)
            if dict(((svc or {}).get("spec") or {}).get("selector") or {}) != routing.router_selector(self.service):
                await intercepts.remove_router(self.client, self.namespace, self.service)
                return False
        routed = [s for s in live if not _annotations(s).get(intercepts.LEAVING_ANNOTATION)]
        self.router.set_routes({str(s["data"]["route"]): (str(s["data"].get("tokenDigest", "")),
                                                           s["data"].get("mode") == "all") for s in routed})
        for session in live:  # `end` waits for this before it deletes the session (and its agent)
            notes = _annotations(session)
            if (notes.get(intercepts.LEAVING_ANNOTATION) and not notes.get(intercepts.RELEASED_ANNOTATION)
                    and self.router.released(str(session["data"]["route"]))):
                with contextlib.suppress(KubeError):
                    await self.client.patch("v1", "ConfigMap", session["metadata"]["name"],
                                            {"metadata": {"annotations": {intercepts.RELEASED_ANNOTATION: "true"}}},
                                            namespace=self.namespace, field_manager=intercepts.FIELD_MANAGER)
        hosts: dict[str, str] = {}
        for session in live:
            with contextlib.suppress(ValueError, TypeError):
                for host in json.loads(session["data"].get("ingressHosts") or "[]"):
                    hosts[routing.host_name(str(host))] = str(session["data"]["route"])
        self.router.hosts = hosts
        await self._endpoints()
        await self._drift(live)
        if time.monotonic() - self._last_counts >= COUNT_EVERY_S:
            self._last_counts = time.monotonic()
            await self._counts(live)
        return True

    async def _endpoints(self) -> None:
        endpoints = await self.client.get_or_none("v1", "Endpoints", routing.cloned_service_name(self.service),
                                                  self.namespace)
        addresses = [str(a["ip"]) for subset in ((endpoints or {}).get("subsets") or [])
                     for a in subset.get("addresses") or [] if a.get("ip")]
        self.originals[:] = sorted(set(addresses))

    async def _drift(self, live: Sequence[Mapping[str, Any]]) -> None:
        svc = await self.client.get_or_none("v1", "Service", self.service, self.namespace)
        if svc is None:
            return
        selector = dict((svc.get("spec") or {}).get("selector") or {})
        if selector == routing.router_selector(self.service):
            self._drift_reported = False
            self._seen_routed = True
            return
        if self._drift_reported or not self._seen_routed:
            return
        self._drift_reported = True
        message = (f"the selector of Service {self.service} was changed to {json.dumps(selector, sort_keys=True)} "
                   "by someone else while intercepted; tether leaves it as it is (its traffic no longer "
                   "reaches the router)")
        log.warning("router %s: %s", self.service, message)
        with contextlib.suppress(KubeError):
            await self.client.create({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{self.service}.", "namespace": self.namespace},
                "involvedObject": {"apiVersion": "v1", "kind": "Service", "name": self.service,
                                   "namespace": self.namespace, "uid": svc["metadata"].get("uid", "")},
                "reason": "InterceptSelectorChanged", "message": message, "type": "Warning",
                "source": {"component": "tether-bridge-router"},
                "firstTimestamp": now_rfc3339(), "lastTimestamp": now_rfc3339(), "count": 1,
            })
        for session in live:
            name = session["metadata"]["name"]
            with contextlib.suppress(KubeError):
                await self.client.patch("v1", "ConfigMap", name,
                                        {"metadata": {"annotations": {intercepts.DRIFT_ANNOTATION: message}}},
                                        namespace=self.namespace, field_manager=intercepts.FIELD_MANAGER)

    async def _counts(self, live: Sequence[Mapping[str, Any]]) -> None:
        counts = self.router.counts()
        for session in live:
            route = str(session["data"]["route"])
            count = counts.get(route, 0)
            if self._written.get(route) == count:
                continue
            with contextlib.suppress(KubeError):
                await self.client.patch("v1", "ConfigMap", routing.session_name(route),
                                        {"metadata": {"annotations": {intercepts.REQUESTS_ANNOTATION: str(count)}}},
                                        namespace=self.namespace, field_manager=intercepts.FIELD_MANAGER)
                self._written[route] = count


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("annotations") or {}


async def serve(client: KubeClient, *, namespace: str, service: str, listen: list[int], park_port: int,
                host: str = "") -> None:
    """Run the router until its last session has ended."""
    originals: list[str] = []
    router = Router({port: port for port in listen}, lambda: originals)
    loop = RouterLoop(client, namespace, service, router, originals=originals)
    with contextlib.suppress(KubeError):
        await loop.step()  # routes and endpoints known before the first connection arrives
    await router.start(host or "0.0.0.0", park_port)
    try:
        await loop.run()
    finally:
        await router.aclose()
