"""What the mirror namespace holds: one informer per kind, indexes, and the mirror's own writes
(kept in front of the caches until they catch up: `tether.connect.written`)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

from tether.connect.mirror import labels as L
from tether.connect.mirror.plan import Existing
from tether.connect.written import ABSENT, Written
from tether.kube import Informer, KubeClient, WatchEvent, strip_managed_fields
from tether.objects import Obj

KINDS = (("v1", "Service"), ("v1", "Endpoints"), ("discovery.k8s.io/v1", "EndpointSlice"))
LocalHandler = Callable[[str, WatchEvent], None]  # (kind, event)


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
        self._written: Written[tuple[str, str]] = Written()

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
        written = self._written.lookup((kind, name))
        if written is not ABSENT:
            return written  # type: ignore[return-value]
        return self.informers[kind].get(self.namespace, name)

    def slices_of(self, service: str) -> list[Obj]:
        names = set(self._slices_of.get(service, ()))
        names.update(name for kind, name in self._written.remembered() if kind == "EndpointSlice")
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
        names.update(name for k, name in self._written.remembered() if k == kind)
        return [obj for name in sorted(names) if (obj := self.get(kind, name)) is not None]

    # the mirror's own writes ---------------------------------------------------------------

    def wrote(self, kind: str, name: str, result: Obj | None) -> None:
        """Remember a write's result (None after a delete) until its event arrives."""
        self._written.wrote((kind, name), result)

    def forget(self, kind: str, name: str) -> None:
        self._written.forget((kind, name))

    def _event(self, kind: str, event: WatchEvent) -> None:
        name = event.key.name
        self._written.observed((kind, name), event)
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
