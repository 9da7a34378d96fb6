"""One remote cluster's mirrors: watch its labelled Services and EndpointSlices, keep mirrors.

Level-based, on the one reconcile engine: a key is a remote Service (`namespace/name`); any
event about it, its slices or its mirror enqueues it; the reconcile observes (remote caches,
the local view), plans (`plan.desired_mirror` + `plan.plan`, pure) and applies the steps.

Keys come from remote events, and from the local mirrors themselves: a mirror whose remote
Service is gone is found that way and removed, which is the start-up sync when `serviceSync` is
set (without it, as upstream, only mirrors of Services seen during this run are removed).
Nothing is removed while the remote has not been listed: its state is unknown.

The remote's reachability is probed (`/readyz`) and combined with the informers' failures; the
stale-endpoint policy (`stale`) turns it into the endpoints' freshness, and a change of
freshness reconciles every key of the remote.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from tether.connect import names
from tether.connect.informers import size_of, wait_listed
from tether.connect.mirror import labels as L
from tether.connect.mirror import stale
from tether.connect.mirror.apply import apply_steps
from tether.connect.mirror.config import GlobalSettings, RemoteClusterSettings
from tether.connect.mirror.localview import LocalView
from tether.connect.mirror.metrics import MirrorMetrics
from tether.connect.mirror.plan import Freshness, Source, desired_mirror, plan, plan_unsynced
from tether.engine import Engine, RequeueAfter
from tether.kube import Informer, KubeClient, KubeError, ObjectKey, WatchEvent, strip_managed_fields
from tether.objects import Obj

log = logging.getLogger(__name__)

INFORMER_FAILURES_UNREACHABLE = 3  # consecutive watch/list failures that count as unreachable
WATCH_IDLE_TIMEOUT_S = 60.0  # servers send bookmarks: a silent watch this long is a dead one


def probe_period_s(settings: RemoteClusterSettings) -> float:
    return min(5.0, max(0.25, settings.stale.after_s / 4))


def source_key(obj: Obj, prefix: str) -> ObjectKey | None:
    """The remote Service a local mirror object stands for: its annotations, else its name
    (mirrors made before the annotations existed)."""
    meta = obj.get("metadata") or {}
    notes = meta.get("annotations") or {}
    if notes.get(names.SOURCE_NAMESPACE) and notes.get(names.SOURCE_NAME):
        return ObjectKey(str(notes[names.SOURCE_NAMESPACE]), str(notes[names.SOURCE_NAME]))
    mirror = str(((meta.get("labels") or {}).get(L.SERVICE_NAME)) or meta.get("name", ""))
    parsed = names.split_mirror_name(mirror, prefix)
    return ObjectKey(*parsed) if parsed else None


class MirrorRunner:
    def __init__(self, settings: RemoteClusterSettings, global_settings: GlobalSettings, client: KubeClient,
                 local_client: KubeClient, view: LocalView, metrics: MirrorMetrics, *,
                 on_freshness: Callable[[str, Freshness, stale.Condition], None] | None = None,
                 workers: int = 16) -> None:
        self.settings = settings
        self.global_settings = global_settings
        self.client = client
        self.local_client = local_client
        self.view = view
        self.metrics = metrics
        self.name = settings.name
        self.runner = f"mirror-{settings.name}"
        self._on_freshness = on_freshness
        selector = global_settings.mirror_svc_label_selector
        self.services = Informer(client, "v1", "Service", label_selector=selector, transform=strip_managed_fields,
                                 on_event=lambda e: self._remote_event("Service", e),
                                 idle_timeout_s=WATCH_IDLE_TIMEOUT_S)
        self.slices = Informer(client, "discovery.k8s.io/v1", "EndpointSlice", label_selector=selector,
                               transform=strip_managed_fields,
                               on_event=lambda e: self._remote_event("EndpointSlice", e),
                               idle_timeout_s=WATCH_IDLE_TIMEOUT_S)
        self.engine: Engine[ObjectKey] = Engine(self.runner, self._reconcile, workers=workers)
        self.tracker = stale.Tracker(True, time.monotonic())
        self.freshness: Freshness = "fresh"
        self._slice_index: dict[ObjectKey, set[str]] = {}  # remote Service -> its slice names
        self._slice_owner: dict[ObjectKey, ObjectKey] = {}  # remote slice -> its Service
        self._seen: set[ObjectKey] = set()
        self._changed_at: dict[ObjectKey, float] = {}  # first unapplied remote change per key
        self._probed = False
        for informer, kind in ((self.services, "Service"), (self.slices, "EndpointSlice")):
            metrics.watch_objects(f"{self.name}-{_watcher(kind)}", kind, self.runner, size_of(informer))
        metrics.queue_depth[self.runner] = lambda: float(self.engine.depth())
        metrics.remote_up[self.name] = lambda: self.tracker.reachable
        metrics.remote_state[self.name] = lambda: self.freshness

    # health ------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self.services.synced and self.slices.synced

    @property
    def healthy(self) -> bool:
        return self.synced and self.tracker.reachable

    def health_detail(self) -> str:
        if not self.synced:
            error = self.services.last_error or self.slices.last_error
            return f"{self.name}: not listed yet" + (f" ({error.message})" if error else "")
        if not self.tracker.reachable:
            return f"{self.name}: unreachable for {time.monotonic() - self.tracker.since:.0f}s " \
                   f"({self.tracker.detail}); endpoints {self.freshness}"
        return f"{self.name}: ok"

    def condition(self) -> stale.Condition:
        return stale.condition(self.freshness, self.settings.stale, self.tracker.detail)

    # events ------------------------------------------------------------------------------

    def enqueue(self, key: ObjectKey, *, background: bool = False) -> None:
        if not background:
            self.metrics.queue_added(self.runner)
        self.engine.enqueue(key, background=background)

    def _remote_event(self, kind: str, event: WatchEvent) -> None:
        self.metrics.watcher_event(f"{self.name}-{_watcher(kind)}", kind, self.runner, event.type)
        key = event.key if kind == "Service" else self._index_slice(event)
        if key is None:
            return
        self._seen.add(key)
        self._changed_at.setdefault(key, time.monotonic())
        self.enqueue(key)

    def _index_slice(self, event: WatchEvent) -> ObjectKey | None:
        slice_key = event.key
        old = self._slice_owner.pop(slice_key, None)
        if old is not None:
            members = self._slice_index.get(old)
            if members is not None:
                members.discard(slice_key.name)
                if not members:
                    del self._slice_index[old]
        service = ((event.object.get("metadata") or {}).get("labels") or {}).get(L.SERVICE_NAME)
        if event.type != "DELETED" and service:
            owner = ObjectKey(slice_key.namespace, str(service))
            self._slice_owner[slice_key] = owner
            self._slice_index.setdefault(owner, set()).add(slice_key.name)
            return owner
        return old

    def local_event(self, kind: str, event: WatchEvent) -> None:
        """A local mirror object of this remote changed (the local view dispatches here)."""
        self.metrics.watcher_event(f"{self.name}-mirror{_watcher(kind)}", kind, self.runner, event.type)
        key = source_key(event.object, self.settings.service_prefix)
        if key is not None and (self.global_settings.service_sync or key in self._seen):
            self.enqueue(key)

    def all_keys(self) -> set[ObjectKey]:
        keys = set(self.services.keys()) | set(self._slice_index)
        for kind in ("Service", "Endpoints", "EndpointSlice"):
            for obj in self.view.objects(kind):
                if self.owns(obj):
                    key = source_key(obj, self.settings.service_prefix)
                    if key is not None and (self.global_settings.service_sync or key in self._seen):
                        keys.add(key)
        return keys

    def owns(self, obj: Obj) -> bool:
        found = (obj.get("metadata") or {}).get("labels") or {}
        return bool(found.get(L.MIRRORED_SVC) == L.TRUE and found.get(L.PREFIX_SYNC) == self.settings.service_prefix)

    # reconcile ---------------------------------------------------------------------------

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
            self.metrics.queue_worked(self.runner, time.monotonic() - started, failed)

    async def reconcile(self, key: ObjectKey) -> None:
        source = Source(self.name, self.settings.service_prefix, key.namespace, key.name)
        existing = self.view.existing(source.mirror)
        if not self.synced:
            steps = plan_unsynced(existing, self.freshness).steps
        else:
            remote = self.services.get(key.namespace, key.name)
            slices = [s for n in sorted(self._slice_index.get(key, ()))
                      if (s := self.slices.get(key.namespace, n)) is not None]
            desired = desired_mirror(source, remote, slices, self.global_settings.mirror_namespace, self.freshness)
            result = plan(desired, existing)
            if result.recreated:
                log.info("%s: %s changed between headless and ClusterIP; recreating its mirror %s",
                         self.name, key, source.mirror)
            steps = result.steps
        changed_at = self._changed_at.pop(key, None)
        try:
            written = await apply_steps(self.local_client, self.view, steps, self.metrics)
        except BaseException:
            if changed_at is not None:
                self._changed_at.setdefault(key, changed_at)
            raise
        if written:
            log.debug("%s: %s -> %s", self.name, key, ", ".join(str(s) for s in steps))
        if changed_at is not None and any(s.kind == "EndpointSlice" for s in steps):
            self.metrics.synced(self.name, changed_at)

    # running -----------------------------------------------------------------------------

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.services.run())
            group.create_task(self.slices.run())
            group.create_task(self.engine.run())
            group.create_task(self._after_sync())
            group.create_task(self._probe())
            if self.settings.resync_s > 0:
                group.create_task(self._resync())

    async def _after_sync(self) -> None:
        """Once listed, every key is looked at: this is what collects stale mirrors at start."""
        await wait_listed((self.services, self.slices))
        log.info("%s: listed %d Services and %d EndpointSlices", self.name, len(self.services.keys()),
                 len(self.slices.keys()))
        for key in self.all_keys():
            self.enqueue(key)

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.settings.resync_s)
            for key in self.all_keys():
                self.enqueue(key, background=True)

    async def _probe(self) -> None:
        period = probe_period_s(self.settings)
        while True:
            reachable, detail = await self._probe_once()
            now = time.monotonic()
            self.tracker = self.tracker.observe(reachable, now, detail)
            state = stale.freshness(self.tracker, self.settings.stale, now)
            if state != self.freshness or not self._probed:
                if state != self.freshness:
                    log.warning("%s: mirrored endpoints now %s (%s)", self.name, state, detail or "reachable")
                self.freshness = state
                self._probed = True
                if self._on_freshness is not None:
                    self._on_freshness(self.name, state, self.condition())
                for key in self.all_keys():
                    self.enqueue(key)
            await asyncio.sleep(period)

    async def _probe_once(self) -> tuple[bool, str]:
        try:
            code, body = await self.client.healthz("/readyz", timeout_s=max(1.0, probe_period_s(self.settings)))
        except KubeError as exc:
            return False, exc.message
        if code != 200:
            return False, f"/readyz answered {code}: {body.strip()[:100]}"
        for informer in (self.services, self.slices):
            if informer.failures >= INFORMER_FAILURES_UNREACHABLE and informer.last_error is not None:
                return False, f"watching {informer.kind}: {informer.last_error.message}"
        return True, ""



def _watcher(kind: str) -> str:
    return {"Service": "serviceWatcher", "Endpoints": "endpointsWatcher",
            "EndpointSlice": "endpointSliceWatcher"}[kind]
