"""What the mirror namespace holds: one informer per kind, indexes, and the mirror's own writes.

Informers lag behind the writes the mirror makes. So that the next reconcile of a key plans
from what the mirror itself just wrote (and not from a cache a moment old, which would cost a
conflict and a retry), a successful write is remembered until the informer delivers the event
carrying it: watch events come in write order, so any event for that object seen before ours is
older and the remembered object stays in front of it. A relist can skip an object's exact
version, so what is remembered also expires after `WRITTEN_TTL_S`.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tether.connect.mirror import labels as L
from tether.connect.mirror.plan import Existing
from tether.kube import Informer, KubeClient, WatchEvent, strip_managed_fields
from tether.objects import Obj

KINDS = (("v1", "Service"), ("v1", "Endpoints"), ("discovery.k8s.io/v1", "EndpointSlice"))
WRITTEN_TTL_S = 10.0
SYNC_WAIT_S = 3600.0
LocalHandler = Callable[[str, WatchEvent], None]  # (kind, event)


@dataclass
class _Written:
    obj: Obj | None  # None: deleted by us
    resource_version: str
    at: float


async def wait_listed(informers: Iterable[Informer]) -> None:
    """Return once every informer has filled its cache, however long that takes."""
    for informer in informers:
        while True:
            try:
                await informer.wait_synced(SYNC_WAIT_S)
                break
            except TimeoutError:
                continue


class LocalView:
    def __init__(self, client: KubeClient, namespace: str, on_event: LocalHandler) -> None:
        self.client = client
        self.namespace = namespace
        self._on_event = on_event
        self.informers: dict[str, Informer] = {
            kind: Informer(client, api_version, kind, namespace, transform=strip_managed_fields,
                           on_event=functools.partial(self._event, kind), idle_timeout_s=90.0)
            for api_version, kind in KINDS
        }
        self._slice_service: dict[str, str] = {}  # slice name -> its service-name label
        self._slices_of: dict[str, set[str]] = {}  # service name -> slice names
        self._written: dict[tuple[str, str], _Written] = {}

    @property
    def synced(self) -> bool:
        return all(i.synced for i in self.informers.values())

    async def wait_synced(self, timeout_s: float) -> None:
        async with asyncio.timeout(timeout_s):
            for informer in self.informers.values():
                await informer.wait_synced(timeout_s)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for informer in self.informers.values():
                group.create_task(informer.run())

    # reads ---------------------------------------------------------------------------------

    def get(self, kind: str, name: str) -> Obj | None:
        written = self._written.get((kind, name))
        if written is not None:
            if time.monotonic() - written.at < WRITTEN_TTL_S:
                return written.obj
            del self._written[(kind, name)]
        return self.informers[kind].get(self.namespace, name)

    def slices_of(self, service: str) -> list[Obj]:
        names = set(self._slices_of.get(service, ()))
        names.update(name for (kind, name), w in self._written.items()
                     if kind == "EndpointSlice" and w.obj is not None
                     and ((w.obj.get("metadata") or {}).get("labels") or {}).get(L.SERVICE_NAME) == service)
        out = []
        for name in sorted(names):
            obj = self.get("EndpointSlice", name)
            if obj is not None and ((obj.get("metadata") or {}).get("labels") or {}).get(L.SERVICE_NAME) == service:
                out.append(obj)
        return out

    def existing(self, service: str) -> Existing:
        return Existing(self.get("Service", service), self.get("Endpoints", service), tuple(self.slices_of(service)))

    def objects(self, kind: str) -> list[Obj]:
        names = {key.name for key in self.informers[kind].keys()}  # noqa: SIM118 (not a dict)
        names.update(name for (k, name) in list(self._written) if k == kind)
        return [obj for name in sorted(names) if (obj := self.get(kind, name)) is not None]

    # the mirror's own writes ---------------------------------------------------------------

    def wrote(self, kind: str, name: str, result: Obj | None) -> None:
        """Remember a write's result (None after a delete) until its event arrives."""
        rv = str(((result or {}).get("metadata") or {}).get("resourceVersion") or "")
        self._written[(kind, name)] = _Written(result, rv, time.monotonic())

    def forget(self, kind: str, name: str) -> None:
        self._written.pop((kind, name), None)

    def _event(self, kind: str, event: WatchEvent) -> None:
        name = event.key.name
        written = self._written.get((kind, name))
        if written is not None:
            if written.obj is None:
                if event.type == "DELETED":
                    del self._written[(kind, name)]
            elif (event.type != "DELETED" and event.resource_version == written.resource_version) or (event.type == "DELETED" and event.resource_version == written.resource_version):
                del self._written[(kind, name)]
        if kind == "EndpointSlice":
            self._index_slice(name, None if event.type == "DELETED" else event.object)
        self._on_event(kind, event)

    def _index_slice(self, name: str, obj: Obj | None) -> None:
        old = self._slice_service.pop(name, None)
        if old is not None:
            members = self._slices_of.get(old)
            if members is not None:
                members.discard(name)
                if not members:
                    del self._slices_of[old]
        service = ((obj or {}).get("metadata") or {}).get("labels", {}).get(L.SERVICE_NAME) if obj else None
        if service:
            self._slice_service[name] = str(service)
            self._slices_of.setdefault(str(service), set()).add(name)
