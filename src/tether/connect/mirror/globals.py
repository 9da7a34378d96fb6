"""Global Services: one local Service per `namespace/name` carrying the global label anywhere.

Every cluster (the local one first, then the remotes in configuration order) is a `GlobalSource`
watching its Services and EndpointSlices with the global selector. The key is `namespace/name`;
the reconcile gathers each synced source's Service and slices (with that source's freshness),
plans the `gl-` Service and its slices (`plan.desired_global`) and applies them. A source not
listed yet is unknown: its existing slices are kept, never collected. Keys also come from the
existing `gl-` objects (all of them at start when `endpointSliceSync` is set), which is how
stale global slices are collected once every source has been listed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from tether.connect import names
from tether.connect.informers import size_of, wait_listed
from tether.connect.mirror import labels as L
from tether.connect.mirror.apply import apply_steps
from tether.connect.mirror.config import GlobalSettings
from tether.connect.mirror.localview import LocalView
from tether.connect.mirror.metrics import MirrorMetrics
from tether.connect.mirror.plan import Contribution, Freshness, desired_global, plan
from tether.engine import Engine, RequeueAfter
from tether.kube import Informer, KubeClient, ObjectKey, WatchEvent, strip_managed_fields
from tether.objects import Obj
from tether.objects.selectors import parse_label_selector

log = logging.getLogger(__name__)
RUNNER = "global"


class GlobalSource:
    def __init__(self, name: str, client: KubeClient, selector: str, on_key: Callable[[ObjectKey], None],
                 metrics: MirrorMetrics, *, local: bool = False,
                 freshness: Callable[[], Freshness] = lambda: "fresh") -> None:
        self.name = name
        self.local = local
        self.freshness = freshness
        self._on_key = on_key
        self._metrics = metrics
        self.services = Informer(client, "v1", "Service", label_selector=selector, transform=strip_managed_fields,
                                 on_event=lambda e: self._event("Service", e), idle_timeout_s=60.0)
        self.slices = Informer(client, "discovery.k8s.io/v1", "EndpointSlice", label_selector=selector,
                               transform=strip_managed_fields, on_event=lambda e: self._event("EndpointSlice", e),
                               idle_timeout_s=60.0)
        self._index: dict[ObjectKey, set[str]] = {}
        self._owner: dict[ObjectKey, ObjectKey] = {}
        for informer, kind in ((self.services, "Service"), (self.slices, "EndpointSlice")):
            metrics.watch_objects(f"{name}-{kind[0].lower()}{kind[1:]}Watcher", kind, RUNNER, size_of(informer))

    @property
    def synced(self) -> bool:
        return self.services.synced and self.slices.synced

    def _event(self, kind: str, event: WatchEvent) -> None:
        self._metrics.watcher_event(f"{self.name}-{kind[0].lower()}{kind[1:]}Watcher", kind, RUNNER, event.type)
        if kind == "Service":
            self._on_key(event.key)
            return
        old = self._owner.pop(event.key, None)
        if old is not None:
            members = self._index.get(old)
            if members is not None:
                members.discard(event.key.name)
                if not members:
                    del self._index[old]
            self._on_key(old)
        service = ((event.object.get("metadata") or {}).get("labels") or {}).get(L.SERVICE_NAME)
        if event.type != "DELETED" and service:
            owner = ObjectKey(event.key.namespace, str(service))
            self._owner[event.key] = owner
            self._index.setdefault(owner, set()).add(event.key.name)
            self._on_key(owner)

    def contribution(self, key: ObjectKey) -> Contribution | None:
        service = self.services.get(key.namespace, key.name)
        if service is None:
            return None
        slices = tuple(s for n in sorted(self._index.get(key, ()))
                       if (s := self.slices.get(key.namespace, n)) is not None)
        return Contribution(self.name, service, slices, self.local, self.freshness())

    def keys(self) -> set[ObjectKey]:
        return set(self.services.keys()) | set(self._index)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.services.run())
            group.create_task(self.slices.run())


def global_source_key(obj: Obj) -> ObjectKey | None:
    meta = obj.get("metadata") or {}
    notes = meta.get("annotations") or {}
    if notes.get(names.SOURCE_NAMESPACE) and notes.get(names.SOURCE_NAME):
        return ObjectKey(str(notes[names.SOURCE_NAMESPACE]), str(notes[names.SOURCE_NAME]))
    service = str(((meta.get("labels") or {}).get(L.SERVICE_NAME)) or meta.get("name", ""))
    parsed = names.split_mirror_name(service, names.GLOBAL_PREFIX)
    return ObjectKey(*parsed) if parsed else None


def is_global(obj: Obj) -> bool:
    found = (obj.get("metadata") or {}).get("labels") or {}
    return found.get(L.GLOBAL_SVC) == L.TRUE or found.get(L.MIRRORED_SLICE) == L.TRUE


class GlobalMirror:
    def __init__(self, settings: GlobalSettings, zones: Sequence[str], local_client: KubeClient, view: LocalView,
                 metrics: MirrorMetrics, *, workers: int = 4) -> None:
        self.settings = settings
        self.zones = tuple(zones)
        self.local_client = local_client
        self.view = view
        self.metrics = metrics
        self.sources: list[GlobalSource] = []
        self.engine: Engine[ObjectKey] = Engine(RUNNER, self._reconcile, workers=workers)
        self._routing = parse_label_selector(settings.global_svc_routing_strategy_label)
        self._seen: set[ObjectKey] = set()
        metrics.queue_depth[RUNNER] = lambda: float(self.engine.depth())

    def add_source(self, name: str, client: KubeClient, *, local: bool = False,
                   freshness: Callable[[], Freshness] = lambda: "fresh") -> GlobalSource:
        source = GlobalSource(name, client, self.settings.global_svc_label_selector, self._source_key,
                              self.metrics, local=local, freshness=freshness)
        self.sources.append(source)
        return source

    def _source_key(self, key: ObjectKey) -> None:
        self._seen.add(key)
        self.enqueue(key)

    def enqueue(self, key: ObjectKey) -> None:
        self.metrics.queue_added(RUNNER)
        self.engine.enqueue(key)

    def local_event(self, kind: str, event: WatchEvent) -> None:
        self.metrics.watcher_event(f"mirror{kind}Watcher", kind, RUNNER, event.type)
        key = global_source_key(event.object)
        if key is not None and (self.settings.endpoint_slice_sync or key in self._seen):
            self.enqueue(key)

    def refresh(self) -> None:
        """Look at every key again (a source's freshness changed)."""
        for key in self.all_keys():
            self.enqueue(key)

    def all_keys(self) -> set[ObjectKey]:
        keys: set[ObjectKey] = set()
        for source in self.sources:
            keys |= source.keys()
        for kind in ("Service", "EndpointSlice"):
            for obj in self.view.objects(kind):
                key = global_source_key(obj) if is_global(obj) else None
                if key is not None and (self.settings.endpoint_slice_sync or key in self._seen):
                    keys.add(key)
        return keys

    async def _reconcile(self, key: ObjectKey) -> None:
        started = time.monotonic()
        failed = True
        try:
            await self.reconcile(key)
            failed = False
        except RequeueAfter:
            failed = False
            raise
        finally:
            self.metrics.queue_worked(RUNNER, time.monotonic() - started, failed)

    async def reconcile(self, key: ObjectKey) -> None:
        contributions: list[Contribution] = []
        unknown: set[str] = set()
        routed: dict[str, bool] = {}
        for source in self.sources:
            if not source.synced:
                unknown.add(source.name)
                continue
            found = source.contribution(key)
            if found is not None:
                contributions.append(found)
                routed[source.name] = self._routing.matches((found.service.get("metadata") or {}).get("labels") or {})
        result = desired_global(key.namespace, key.name, contributions, self.settings.mirror_namespace,
                                zones=self.zones, routed=routed, kept_clusters=frozenset(unknown))
        for conflict in result.conflicts:
            log.warning("global service %s: %s", key, conflict)
        gname = names.global_name(key.namespace, key.name)
        existing = self.view.existing(gname)
        keep = [str(s["metadata"]["name"]) for s in existing.slices
                if ((s.get("metadata") or {}).get("labels") or {}).get(L.SLICE_SYNC_NAME) in unknown]
        steps = plan(result.desired, existing, keep_slices=keep).steps
        await apply_steps(self.local_client, self.view, steps, self.metrics)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for source in self.sources:
                group.create_task(source.run())
            group.create_task(self.engine.run())
            group.create_task(self._after_sync())

    async def _after_sync(self) -> None:
        await wait_listed(i for s in self.sources for i in (s.services, s.slices))
        self.refresh()

