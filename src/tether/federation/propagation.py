"""The hub's sync controllers: KubeFed's Federated<Kind> and Karmada's templates + policies.

Both follow observe → plan → apply on the one `Engine`:
- observe: informer caches on the host (Clusters and Works shared, `HubInformers`; the dialect's
  own objects per controller, informers started and stopped as types come and go);
- plan: the pure compilers (`compile_federated`, `compile_template`) and `works.desired_works`;
- apply: server-side apply of one Work per target cluster (stable names, so a restarted hub
  updates what it wrote), deletion of Works for clusters that left the placement, a finalizer on
  the source so deleting it removes the member objects first, and the source's status.

KubeFed: `status` of the Federated object via `kubefed_status` (the Propagation condition with
KubeFed's reasons, `clusters[]` with `remoteStatus`), plus a `message` per failed cluster.
Namespaced Federated objects need their FederatedNamespace (NamespaceNotFederated otherwise) and
only go to clusters the namespace is placed in.

Karmada: the annotation `tether.io/propagation-status` always carries the `Propagated` condition
(naming every failed cluster and why) and per cluster the result and the member's status (what
Karmada keeps in its ResourceBinding's `aggregatedStatus`). The members' summed status goes onto
the template's `.status` (status subresource) on a hub without workload controllers, as Karmada
does, else into the annotation (`template_status` decides, per hub and template). Namespaced
templates get their namespace created in members.

Deletions never hang (see `finalizing`): a kind is watched while anything of it holds the
finalizer or has Works, whether or not a policy or an enabled FTC still selects it. A Karmada
template no policy selects any more keeps its Works (copies stay in the members, no longer
updated) until it is deleted, as Karmada keeps its binding; a KubeFed type whose propagation is
disabled is no longer propagated, but deleting one of its objects still removes its copies.
Alongside, the Karmada side writes each claimed template's ResourceBinding view (`bindings`)
and propagates dependencies in Works of their own (`depsync`).

Writes are kept to what changed: Works are applied (and deleted) concurrently, at most
`WORK_WRITES` at a time; a new Work is created with the executor's finalizer already on it (for
push and pull members alike), so it is written once; a new template's first status waits for its
first reports. Reconciles are kept to what could change: the watch echo of a controller's own
write (a Work, a finalizer, a status) enqueues nothing (`Echoes`); a source is reconciled shortly
after its Works change, their events coalesced, and a burst of success reports makes one
reconcile after the last (`engine.enqueue_within`); a Cluster event reaches the controllers only
when the cluster's `placement_view` changed, and then re-enqueues only the sources whose plan it
could change (with a Work there, whose placement admits it, or whose last plan had failures).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from tether.engine import Engine, RequeueAfter
from tether.kube import (
    Conflict,
    Informer,
    KubeClient,
    KubeError,
    NotFound,
    ObjectKey,
    WatchEvent,
    strip_managed_fields,
)
from tether.objects import Obj
from tether.objects.selectors import matches_label_selector
from tether.objects.times import rfc3339

from . import works as W
from ._util import items, mapping, nested, start_in, thaw
from .aggregation import aggregate_status, reflect_status
from .binding import EVICTION_ANNOTATION, Binding, read_binding
from .bindings import BindingViews
from .crds import (
    CLUSTER_API_VERSION,
    KARMADA_POLICY_GROUP,
    KUBEFED_CORE_GROUP,
    WORK_API_VERSION,
    execution_namespace,
)
from .dependencies import REQUIRES_ANNOTATION, encode_requires
from .depsync import DependencySync
from .failover import FailoverSettings
from .finalizing import GVK, KindRecord, releasable
from .karmada import compile_template, match_policy
from .karmada_binding import (
    BindingStep,
    Finished,
    dependent_overrides_missing,
    workload_groups,
)
from .kubefed import ClusterResult, compile_federated, kubefed_status, within_namespace
from .metrics import HubMetrics
from .model import ClusterInfo, PropagationPlan, ResourceRef
from .placement import cluster_matches_affinity
from .registry import UNJOIN_ANNOTATION
from .scheduler import Groups
from .taints import taints_of
from .template_status import STATUS, TemplateStatusTarget
from .workinfo import (
    WorkInfo,
    cluster_result,
    member_status_for_aggregation,
    scheduled_replicas,
    work_info,
    work_up_to_date,
)

log = logging.getLogger(__name__)
FIELD_MANAGER = "tether-propagation"
STATUS_ANNOTATION = "tether.io/propagation-status"
PROPAGATED = "Propagated"
RESYNC_S = 60.0
SKIPPED_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})
WORK_WRITES = 8  # Work applies/deletes of one source in flight at once
WORK_EVENT_DELAY_S = 0.1  # a source's Work events within this long: one reconcile
# a Work reporting success while others of its source have not reported yet: the source is
# reconciled within this long (or sooner, when the last one reports), not once per Work
WORK_PROGRESS_DELAY_S = 2.0
K = TypeVar("K")


async def _bounded(calls: list[Callable[[], Awaitable[Any]]], limit: int = WORK_WRITES) -> None:
    """Run independent writes concurrently, at most `limit` at once; every call runs to its end,
    then the first failure (in `calls` order) is raised."""
    if len(calls) <= 1:
        for call in calls:
            await call()
        return
    gate = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Awaitable[Any]]) -> None:
        async with gate:
            await call()

    results = await asyncio.gather(*(one(c) for c in calls), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


# shared informers ------------------------------------------------------------------------------


PlacementHandler = Callable[[str, ClusterInfo | None, ClusterInfo | None], None]


@dataclass
class HubInformers:
    """Informers on the host that every controller reads: Clusters and Works (with an index of
    Works by source). Controllers add handlers before `run()`.

    `cluster_handlers` get every Cluster event; `placement_handlers` get (name, before, after)
    only when the cluster's `placement_view` changed — a pull agent's heartbeat or a status
    write that changes nothing placement reads calls none of them."""

    host: KubeClient
    cluster_handlers: list[Callable[[WatchEvent], None]] = field(default_factory=list)
    placement_handlers: list[PlacementHandler] = field(default_factory=list)
    work_handlers: list[Callable[[WatchEvent], None]] = field(default_factory=list)
    clusters: Informer = field(init=False)
    works: Informer = field(init=False)
    _by_source: dict[str, set[ObjectKey]] = field(default_factory=dict)
    _views: dict[str, PlacementView | None] = field(default_factory=dict)
    _infos: dict[ObjectKey, WorkInfo] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.clusters = Informer(self.host, CLUSTER_API_VERSION, "Cluster",
                                 on_event=self._on_cluster)
        self.works = Informer(self.host, WORK_API_VERSION, "Work", label_selector=W.WORK_SELECTOR,
                              on_event=self._on_work, transform=strip_managed_fields)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.clusters.run())
            group.create_task(self.works.run())

    @property
    def synced(self) -> bool:
        return self.clusters.synced and self.works.synced

    def _on_cluster(self, event: WatchEvent) -> None:
        try:
            for handler in self.cluster_handlers:
                handler(event)
        finally:  # the placement views follow the cluster even if a handler failed
            self._update_view(event)

    def _update_view(self, event: WatchEvent) -> None:
        name = event.key.name
        before = self._views.pop(name, None)
        after = None if event.type == "DELETED" else placement_view(event.object)
        if event.type != "DELETED":
            self._views[name] = after
        if before != after:
            for placement in self.placement_handlers:
                placement(name, before.info if before else None, after.info if after else None)

    def _on_work(self, event: WatchEvent) -> None:
        # parsed once here; a DELETED Work's info stays readable by the handlers
        info = self._infos[event.key] = work_info(event.object)
        source = info.labels.get(W.SOURCE_HASH_LABEL, "")
        if source:
            keys = self._by_source.setdefault(source, set())
            if event.type == "DELETED":
                keys.discard(event.key)
                if not keys:
                    self._by_source.pop(source, None)
            else:
                keys.add(event.key)
        try:
            for handler in self.work_handlers:
                handler(event)
        finally:  # a handler's error (logged by the informer) must not leave a deleted Work cached
            if event.type == "DELETED":
                self._infos.pop(event.key, None)

    def work_info(self, key: ObjectKey) -> WorkInfo | None:
        """The Work the informer holds under `key`, parsed (during a DELETED event's handlers:
        the deleted one)."""
        return self._infos.get(key)

    def works_of(self, ref: ResourceRef) -> list[WorkInfo]:
        keys = self._by_source.get(W.short_hash(W.source_key(ref), 16), set())
        found = [self._infos.get(k) for k in sorted(keys)]
        return [w for w in found if w is not None and _same_source(w, ref)]

    def cluster_infos(self) -> list[ClusterInfo]:
        """Registered clusters that can take work (not being unjoined or deleted), by name."""
        return [view.info for _, view in sorted(self._views.items()) if view is not None]

    def works_in(self, cluster: str, dialect: str) -> list[ResourceRef]:
        """The sources of `dialect` that have a Work for `cluster`."""
        namespace = execution_namespace(cluster)
        out = []
        for key in self.works.keys():  # noqa: SIM118 (Informer.keys, not a dict)
            if key.namespace != namespace:
                continue
            info = self._infos.get(key)
            found = info.origin if info is not None else None
            if found is not None and found[0] == dialect:
                out.append(found[1])
        return out


def _same_source(work: WorkInfo, ref: ResourceRef) -> bool:
    found = work.origin
    return found is not None and found[1] == ref


def cluster_info(cluster: Obj) -> ClusterInfo | None:
    meta = mapping(cluster.get("metadata"))
    if meta.get("deletionTimestamp") or mapping(meta.get("annotations")).get(UNJOIN_ANNOTATION):
        return None
    spec = mapping(cluster.get("spec"))
    ready = any(mapping(c).get("type") == "Ready" and mapping(c).get("status") == "True"
                for c in items(nested(cluster, "status", "conditions")))
    taints = taints_of(spec.get("taints"))
    return ClusterInfo(
        name=str(meta.get("name", "")),
        labels={str(k): str(v) for k, v in mapping(meta.get("labels")).items()},
        provider=str(spec.get("provider") or ""),
        region=str(spec.get("region") or ""),
        zones=tuple(str(z) for z in items(spec.get("zones"))),
        taints=taints,
        ready=ready,
        resource_summary=mapping(nested(cluster, "status", "resourceSummary")) or None,
    )


@dataclass(frozen=True)
class PlacementView:
    """What the sync controllers read of a Cluster, comparable as a whole: the `ClusterInfo`
    (labels, provider/region/zones, taints, readiness) plus the parts it leaves out of its own
    equality: the taints' timeAdded (failover's tolerationSeconds count from it) and the
    resourceSummary (capacity-based division and `Aggregated` scheduling read it)."""

    info: ClusterInfo
    taint_times: tuple[float | None, ...]
    resources: str


def placement_view(cluster: Obj) -> PlacementView | None:
    """Everything placement, scheduling and failover read of a Cluster (see `PlacementView`),
    or None while the cluster cannot take work. A Cluster event re-enqueues templates only when
    this changed, so a status write that changes none of it (a heartbeat, a new
    lastHeartbeatTime, a nodeSummary, apiEnablements) costs the sync controllers nothing."""
    info = cluster_info(cluster)
    if info is None:
        return None
    resources = json.dumps(info.resource_summary, sort_keys=True, separators=(",", ":"),
                           default=str)
    return PlacementView(info, tuple(t.added_s for t in info.taints), resources)


def policy_may_place(placement: Any, cluster: ClusterInfo) -> bool:
    """Whether a Karmada placement's cluster affinity admits `cluster` (any of
    `clusterAffinities`): only then can a change of that cluster change what it places."""
    spec = mapping(placement)
    groups = items(spec.get("clusterAffinities"))
    if not groups:
        return cluster_matches_affinity(cluster, spec.get("clusterAffinity"))
    return any(cluster_matches_affinity(cluster, mapping(g)) for g in groups)


def kubefed_may_place(placement: Any, cluster: ClusterInfo) -> bool:
    """Whether a KubeFed placement names or selects `cluster` (see `kubefed_placement`)."""
    spec = mapping(placement)
    if spec.get("clusters") is not None:
        return cluster.name in {str(mapping(c).get("name")) for c in items(spec["clusters"])}
    selector = spec.get("clusterSelector")
    return selector is not None and matches_label_selector(selector, cluster.labels)


def unjoining(cluster: Obj | None) -> bool:
    meta = mapping(mapping(cluster).get("metadata"))
    return cluster is None or bool(meta.get("deletionTimestamp")) or bool(
        mapping(meta.get("annotations")).get(UNJOIN_ANNOTATION))


@dataclass
class Echoes:
    """The resourceVersions of a controller's own writes, by object: the watch event that only
    echoes such a write needs no reconcile (the writer already knew its result).

    The echo can arrive before the write's answer (the watch and the request are two
    connections): a write bracketed by `begin`/`end` holds back the events of its object that
    come with a `replay` meanwhile, and `end` replays them once the written version is known, so
    the echo is recognised whichever arrives first and any other change is handled as usual."""

    _versions: dict[Any, str] = field(default_factory=dict)
    _writing: dict[Any, int] = field(default_factory=dict)  # writes in flight, by object
    _held: dict[Any, list[Callable[[], None]]] = field(default_factory=dict)

    def wrote(self, key: Any, obj: Any) -> None:
        version = nested(obj, "metadata", "resourceVersion")
        if version:
            self._versions[key] = str(version)

    def begin(self, key: Any) -> None:
        """A write of `key` is about to be sent."""
        self._writing[key] = self._writing.get(key, 0) + 1

    def end(self, key: Any, written: Any) -> None:
        """The write of `key` ended: `written` is what it answered (None when it failed). The
        events held back meanwhile are replayed, each now compared with what was written."""
        if written is not None:
            self.wrote(key, written)
        left = self._writing.get(key, 0) - 1
        if left > 0:
            self._writing[key] = left
            return
        self._writing.pop(key, None)
        for replay in self._held.pop(key, ()):
            replay()

    def echo(self, key: Any, event: WatchEvent, replay: Callable[[], None] | None = None) -> bool:
        """Whether `event` is the echo of the last write noted for `key` (forgotten then). With
        `replay`, an event arriving while a write of `key` is in flight counts as handled now
        and `replay` is called when the write ends (and should ask again)."""
        if event.type == "DELETED":
            self._versions.pop(key, None)
            return False
        if self._versions.get(key) == event.resource_version:
            del self._versions[key]
            return True
        if replay is not None and key in self._writing:
            self._held.setdefault(key, []).append(replay)
            return True
        return False


def source_key_of(obj: Obj) -> tuple[str, str, str, str]:
    """(apiVersion, kind, namespace, name): how the controllers note writes to their sources."""
    meta = mapping(obj.get("metadata"))
    return (str(obj.get("apiVersion")), str(obj.get("kind")), str(meta.get("namespace") or ""),
            str(meta.get("name")))


# shared apply steps ----------------------------------------------------------------------------


@dataclass
class _Base(Generic[K]):
    """What both sync controllers share: Work writes, finalizers, counting, resync."""

    host: KubeClient
    shared: HubInformers
    metrics: HubMetrics
    name: str
    resync_s: float = RESYNC_S
    workers: int = 4
    engine: Engine[K] = field(init=False)
    _group: asyncio.TaskGroup | None = field(default=None, init=False)
    # own writes to Works (by ObjectKey) and to sources (by `source_key_of`)
    echoes: Echoes = field(default_factory=Echoes, init=False)
    # Works whose executor has not reported on their current generation, and how many per source
    _unreported: set[ObjectKey] = field(default_factory=set, init=False)
    _unreported_of: dict[ResourceRef, int] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.engine = Engine(self.name, self._counted, workers=self.workers)

    async def _counted(self, key: K) -> None:
        try:
            await self.reconcile(key)
        except RequeueAfter:
            self.metrics.reconciled(self.name)
            raise
        except Exception:
            self.metrics.reconciled(self.name, failed=True)
            raise
        self.metrics.reconciled(self.name)

    async def reconcile(self, key: K) -> None:
        raise NotImplementedError

    def work_event(self, event: WatchEvent, dialect: str, key: Callable[[ResourceRef], K]) -> None:
        """A Work of `dialect` changed: reconcile its source — soon (WORK_EVENT_DELAY_S, events
        within it coalesced), or, when the Work only reports success while others of the same
        source have not reported yet, within WORK_PROGRESS_DELAY_S: a burst of reports makes
        one reconcile after the last, not one per Work. The controller's own writes (their
        echo) make none."""
        info = self.shared.work_info(event.key)
        found = info.origin if info is not None else None
        if info is None or found is None or found[0] != dialect:
            return
        ref = found[1]
        reported = event.type != "DELETED" and info.reported
        was_waiting = event.key in self._unreported
        waiting = event.type != "DELETED" and not reported
        if waiting != was_waiting:
            count = self._unreported_of.get(ref, 0) + (1 if waiting else -1)
            if waiting:
                self._unreported.add(event.key)
            else:
                self._unreported.discard(event.key)
            if count > 0:
                self._unreported_of[ref] = count
            else:
                self._unreported_of.pop(ref, None)
        if self.echoes.echo(event.key, event,
                            lambda: self.work_event(event, dialect, key)):
            return  # the Work as this controller just wrote it
        progress = (reported and info.applied_ok
                    and self._unreported_of.get(ref, 0) > 0)
        self.engine.enqueue_within(key(ref), WORK_PROGRESS_DELAY_S if progress
                                   else WORK_EVENT_DELAY_S)

    def all_keys(self) -> Iterable[K]:
        raise NotImplementedError

    def enqueue_all(self, *, background: bool = False) -> None:
        for key in self.all_keys():
            self.engine.enqueue(key, background=background)

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.resync_s)
            self.enqueue_all(background=True)

    def _start(self, informer: Informer) -> asyncio.Task[None]:
        assert self._group is not None, "controller not running"
        return start_in(self._group, informer.run())

    # writes ------------------------------------------------------------------------------

    async def write_works(self, desired: list[W.DesiredWork], existing: list[WorkInfo],
                          plan: PropagationPlan) -> None:
        """Apply the desired Works, delete the others — except where the cluster failed only on
        its overrides: a typo in an override must not take the object down, so that cluster
        keeps its last good Work (and the failure is reported).

        KubeFed's sync controller skips a cluster that is not ready for every operation, removal
        included: a member whose probe timed out under load must not lose its objects, so its
        Works stay as they are until it is ready again. (Karmada keeps a scheduled cluster in
        its placement while it is NotReady; removal from it is an eviction, which is meant.)"""
        if plan.hold:
            return  # e.g. dispatching suspended: every Work stays as it is
        keep = {f.cluster for f in plan.failures if f.reason == "ApplyOverridesFailed"}
        keep |= plan.retained  # graceful evictions, clusters with dispatching suspended
        if plan.dialect == "kubefed":
            keep |= {c.name for c in self.shared.cluster_infos() if not c.ready}
        wanted = {(d.namespace, d.name) for d in desired}
        writes: list[Callable[[], Awaitable[Any]]] = []
        for work in desired:
            current = self.shared.work_info(ObjectKey(work.namespace, work.name))
            if work_up_to_date(current, work):
                continue
            # `work.body` is this call's own (fresh from desired_works): copy only the levels
            # written below, not the manifests
            meta = dict(work.body["metadata"])
            meta["annotations"] = dict(meta["annotations"])
            body = {**work.body, "metadata": meta}
            changed_at = current.annotations.get(W.CHANGED_AT_ANNOTATION) if current else None
            if current is None or current.spec != work.body["spec"] or not changed_at:
                changed_at = f"{time.time():.3f}"
            body["metadata"]["annotations"][W.CHANGED_AT_ANNOTATION] = str(changed_at)
            finalizers = current.finalizers if current is not None else ()
            if W.EXECUTION_FINALIZER in finalizers or (current is None
                                                       and self._pushed_to(work.cluster)):
                # the executor would add it with a PATCH of its own right after the create; once
                # in this manager's applied fields it stays in every later apply of the Work
                body["metadata"]["finalizers"] = [W.EXECUTION_FINALIZER]
            writes.append(functools.partial(self._apply_work, body))
        for old in existing:
            if (old.namespace, old.name) not in wanted and old.cluster not in keep:
                writes.append(functools.partial(self.delete_work, old))
        await _bounded(writes)

    async def _apply_work(self, body: Obj) -> None:
        key = ObjectKey(body["metadata"]["namespace"], body["metadata"]["name"])
        written = None
        self.echoes.begin(key)
        try:
            written = await self.host.apply(body, field_manager=FIELD_MANAGER, force=True)
        finally:
            self.echoes.end(key, written)

    def _pushed_to(self, cluster: str) -> bool:
        """Whether the hub's executor applies this cluster's Works (a joined push member)."""
        found = self.shared.clusters.get(None, cluster)
        return not unjoining(found) and nested(found, "spec", "syncMode") != "Pull"

    async def delete_work(self, work: WorkInfo, *, preserve: bool | None = None) -> None:
        name, namespace = work.name, work.namespace
        if work.deleting:
            return
        try:
            if preserve is not None and work.preserve_on_deletion != preserve:
                await self.host.patch(WORK_API_VERSION, "Work", name,
                                      {"spec": {"preserveResourcesOnDeletion": preserve}},
                                      namespace=namespace, field_manager=FIELD_MANAGER)
            await self.host.delete(WORK_API_VERSION, "Work", name, namespace)
        except NotFound:
            pass

    async def set_finalizer(self, obj: Obj, api_version: str, present: bool) -> None:
        meta = mapping(obj.get("metadata"))
        finalizers = [str(f) for f in items(meta.get("finalizers"))]
        if (W.PROPAGATION_FINALIZER in finalizers) == present:
            return
        if present:
            finalizers.append(W.PROPAGATION_FINALIZER)
        else:
            finalizers = [f for f in finalizers if f != W.PROPAGATION_FINALIZER]
        patch = {"metadata": {"finalizers": finalizers,
                              "resourceVersion": meta.get("resourceVersion")}}
        try:
            written = await self.host.patch(api_version, str(obj.get("kind")),
                                            str(meta.get("name")), patch,
                                            namespace=str(meta.get("namespace") or "") or None,
                                            field_manager=FIELD_MANAGER)
            self.echoes.wrote(source_key_of(written), written)
        except Conflict:
            raise RequeueAfter(0.1) from None  # a newer version is on its way through the informer
        except NotFound:
            pass

    async def finalize(self, obj: Obj, api_version: str, existing: list[WorkInfo],
                       preserve: bool | None) -> None:
        """Deleting the source: delete its Works (member objects go unless preserved), then
        let the source go once every Work is gone."""
        await _bounded([functools.partial(self.delete_work, w, preserve=preserve)
                        for w in existing])
        if existing:
            raise RequeueAfter(1.0)  # Work DELETED events enqueue us sooner
        await self.set_finalizer(obj, api_version, False)


def results_for(plan: PropagationPlan, existing: list[WorkInfo], target: ResourceRef,
                *, kubefed: bool) -> dict[str, ClusterResult]:
    by_cluster = {w.cluster: w for w in existing}
    out: dict[str, ClusterResult] = {}
    for item in plan.works:
        result = cluster_result(by_cluster.get(item.cluster), target, kubefed=kubefed)
        if result is not None:
            out[item.cluster] = result
    return out


def _keep_times(new: list[Obj], old: Any) -> list[Obj]:
    """Keep lastTransitionTime of conditions whose status did not change."""
    before = {str(mapping(c).get("type")): mapping(c) for c in items(old)}
    for cond in new:
        prev = before.get(str(cond.get("type")))
        if prev is not None and prev.get("status") == cond.get("status"):
            for stamp_key in ("lastTransitionTime",):
                if prev.get(stamp_key):
                    cond[stamp_key] = prev[stamp_key]
    return new


# KubeFed --------------------------------------------------------------------------------------

FedKey = tuple[str, str, str]  # (Federated kind, namespace, name)


@dataclass
class _FedType:
    ftc_name: str
    api_version: str  # of the Federated kind
    target_api_version: str
    target_kind: str
    target_scope: str
    informer: Informer
    task: asyncio.Task[None]
    # no enabled FederatedTypeConfig names the kind any more: objects are no longer propagated,
    # but deleting one still removes its Works (and with them the member copies)
    draining: bool = False


@dataclass
class KubeFedController(_Base[FedKey]):
    name: str = "kubefed-sync"
    types: dict[str, _FedType] = field(default_factory=dict)
    ftcs: Informer = field(init=False)
    rsps: Informer = field(init=False)
    record: KindRecord = field(init=False)
    kinds: Engine[str] = field(init=False)
    _work_kinds: dict[ObjectKey, GVK] = field(default_factory=dict, init=False)
    # objects whose last plan left a cluster out with a reason (a cluster change may fix that)
    _unsettled: set[FedKey] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.ftcs = Informer(self.host, f"{KUBEFED_CORE_GROUP}/v1beta1", "FederatedTypeConfig",
                             on_event=lambda _e: self._sync_types())
        self.rsps = Informer(self.host, "scheduling.kubefed.io/v1alpha1",
                             "ReplicaSchedulingPreference", on_event=self._on_rsp)
        self.record = KindRecord(self.host, "kubefed")
        self.kinds = Engine("kubefed-kinds", self._reconcile_kind)
        self.shared.placement_handlers.append(self._on_placement)
        self.shared.work_handlers.append(self._on_work)

    def _on_placement(self, cluster: str, before: ClusterInfo | None,
                      after: ClusterInfo | None) -> None:
        """What placement reads of `cluster` changed: reconcile the objects whose plan could
        change — those with a Work there, those that name or select it (before or after), and
        those whose last plan had failures — not every object."""
        keys = {(r.kind, r.namespace, r.name) for r in self.shared.works_in(cluster, "kubefed")}
        keys |= self._unsettled
        views = [v for v in (before, after) if v is not None]
        for kind, fed_type in list(self.types.items()):
            for key in fed_type.informer.keys():  # noqa: SIM118 (Informer.keys, not a dict)
                placement = nested(fed_type.informer.get(key.namespace, key.name),
                                   "spec", "placement")
                if any(kubefed_may_place(placement, v) for v in views):
                    keys.add((kind, key.namespace, key.name))
        for fed_key in sorted(keys):
            self.engine.enqueue(fed_key)

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                group.create_task(self.ftcs.run())
                group.create_task(self.rsps.run())
                group.create_task(self.engine.run())
                group.create_task(self.kinds.run())
                group.create_task(self._load_record())
                group.create_task(self._resync())
        finally:
            self._group = None

    async def _load_record(self) -> None:
        await self.record.load()
        self._sync_types()

    @property
    def synced(self) -> bool:
        # Per-type informers are left out: an FTC naming a type without a CRD must not keep the
        # whole hub unready (that type's objects simply wait).
        return self.record.loaded and self.ftcs.synced and self.rsps.synced

    def all_keys(self) -> Iterable[FedKey]:
        for kind, fed_type in list(self.types.items()):
            for key in fed_type.informer.keys():  # noqa: SIM118 (Informer.keys, not a dict)
                yield (kind, key.namespace, key.name)

    def _sync_types(self) -> None:
        wanted: dict[str, Obj] = {}
        for ftc in self.ftcs.list():
            spec = mapping(ftc.get("spec"))
            fed = mapping(spec.get("federatedType"))
            if spec.get("propagation", "Enabled") == "Enabled" and fed.get("kind"):
                wanted[str(fed["kind"])] = ftc
        if self._group is None:
            return
        # Kinds no enabled FTC names: watched on (draining) while objects or Works may need
        # finalizing; `_reconcile_kind` lets them go.
        for kind, fed_type in self.types.items():
            if kind not in wanted:
                fed_type.draining = True
                self.kinds.enqueue(kind)
        for api_version, kind in sorted(self.record.kinds | set(self._work_kinds.values())):
            if kind not in wanted:
                self._drain(api_version, kind)
        for kind, ftc in wanted.items():
            spec = mapping(ftc.get("spec"))
            fed, target = mapping(spec.get("federatedType")), mapping(spec.get("targetType"))
            fed_av = f"{fed.get('group') or 'types.kubefed.io'}/{fed.get('version') or 'v1beta1'}"
            group, version = str(target.get("group") or ""), str(target.get("version") or "v1")
            target_av = f"{group}/{version}" if group else version
            current = self.types.get(kind)
            if current is not None and current.api_version == fed_av and (
                    current.target_api_version == target_av or current.draining):
                if current.draining:  # enabled again: propagate its objects again
                    self.types[kind] = replace(
                        current, ftc_name=str(nested(ftc, "metadata", "name")),
                        target_api_version=target_av, target_kind=str(target.get("kind") or ""),
                        target_scope=str(target.get("scope") or "Namespaced"), draining=False)
                    self.enqueue_all()
                continue
            if current is not None:
                current.task.cancel()
            informer = Informer(self.host, fed_av, kind,
                                on_event=functools.partial(self._on_federated, kind))
            self.types[kind] = _FedType(
                str(nested(ftc, "metadata", "name")), fed_av, target_av,
                str(target.get("kind") or ""), str(target.get("scope") or "Namespaced"),
                informer, self._start(informer))

    def _drain(self, api_version: str, kind: str) -> None:
        """Watch a Federated kind no enabled FTC names, to finalize what is left of it."""
        if self._group is None or kind in self.types:
            return
        informer = Informer(self.host, api_version, kind,
                            on_event=functools.partial(self._on_federated, kind))
        self.types[kind] = _FedType("", api_version, "", "", "", informer, self._start(informer),
                                    draining=True)
        self.kinds.enqueue(kind)

    async def _reconcile_kind(self, kind: str) -> None:
        """Stop watching a draining kind once none of its objects holds the finalizer or has
        Works."""
        if not self.record.loaded:
            raise RequeueAfter(0.5)
        fed_type = self.types.get(kind)
        if fed_type is None or not fed_type.draining:
            return
        informer = fed_type.informer
        gvk = (fed_type.api_version, kind)
        if informer.synced:
            for key in informer.keys():  # noqa: SIM118 (Informer.keys, not a dict)
                self.engine.enqueue((kind, key.namespace, key.name))
        if self._releasable(kind, fed_type):
            await self.record.discard(gvk)
            # an FTC enabling the kind again (or a finalizer, a Work) may have come meanwhile
            current = self.types.get(kind)
            if current is None or current.informer is not informer \
                    or not self._releasable(kind, current):
                self.kinds.enqueue(kind)
                return
            self.types.pop(kind).task.cancel()
            log.info("no longer watching %s: propagation disabled, nothing left to finalize",
                     kind)
        elif not informer.synced:
            raise RequeueAfter(2.0)

    def _releasable(self, kind: str, fed_type: _FedType) -> bool:
        gvk = (fed_type.api_version, kind)
        works = sum(1 for g in self._work_kinds.values() if g == gvk)
        finalized = sum(1 for o in fed_type.informer.list()
                        if W.PROPAGATION_FINALIZER in items(nested(o, "metadata", "finalizers")))
        return releasable(wanted=not fed_type.draining, synced=fed_type.informer.synced,
                          type_gone=_type_gone(fed_type.informer), finalized=finalized,
                          works=works)

    def _on_federated(self, kind: str, event: WatchEvent) -> None:
        fed_type = self.types.get(kind)
        if fed_type is not None and fed_type.draining:
            self.kinds.enqueue(kind)  # a finalizer it let go may make the kind releasable
        if self.echoes.echo(source_key_of(event.object), event):
            return  # its finalizer or status, as this controller just wrote it
        self.engine.enqueue((kind, event.key.namespace, event.key.name))
        if kind == "FederatedNamespace":  # the namespace's placement bounds its contents
            namespace = event.key.name
            for other, fed_type in list(self.types.items()):
                for key in fed_type.informer.keys():  # noqa: SIM118 (Informer.keys, not a dict)
                    if key.namespace == namespace and other != kind:
                        self.engine.enqueue((other, key.namespace, key.name))

    def _on_rsp(self, event: WatchEvent) -> None:
        target = str(nested(event.object, "spec", "targetKind") or "FederatedDeployment")
        self.engine.enqueue((target, event.key.namespace, event.key.name))

    def _on_work(self, event: WatchEvent) -> None:
        info = self.shared.work_info(event.key)
        found = info.origin if info is not None else None
        if found is not None and found[0] == "kubefed":
            ref = found[1]
            if event.type == "DELETED":
                self._work_kinds.pop(event.key, None)
                self.kinds.enqueue(ref.kind)
            else:
                self._work_kinds[event.key] = (ref.api_version, ref.kind)
                if ref.kind not in self.types:
                    self._drain(ref.api_version, ref.kind)
        self.work_event(event, "kubefed", lambda ref: (ref.kind, ref.namespace, ref.name))

    async def reconcile(self, key: FedKey) -> None:
        kind, namespace, name = key
        fed_type = self.types.get(kind)
        if fed_type is None:
            return
        if not fed_type.informer.synced and not _type_gone(fed_type.informer):
            raise RequeueAfter(0.5)  # not listed yet: absent from the cache is not deleted
        fed = fed_type.informer.get(namespace, name)
        ref = ResourceRef(fed_type.api_version, kind, namespace, name)
        existing = self.shared.works_of(ref)
        self._unsettled.discard(key)
        if fed is None:
            for work in existing:
                await self.delete_work(work)
            return
        if nested(fed, "metadata", "deletionTimestamp"):
            orphan = nested(fed, "metadata", "annotations", "kubefed.io/orphan") == "true"
            await self.finalize(fed, fed_type.api_version, existing, orphan)
            return
        if fed_type.draining:
            return  # propagation disabled: left as it is until deleted or enabled again
        await self.record.add((fed_type.api_version, kind))
        await self.set_finalizer(fed, fed_type.api_version, True)
        clusters = self.shared.cluster_infos()
        rsp = self.rsps.get(namespace, name) if fed_type.target_kind in ("Deployment",
                                                                          "ReplicaSet") else None
        plan = compile_federated(fed, target_api_version=fed_type.target_api_version,
                                 target_kind=fed_type.target_kind, clusters=clusters, rsp=rsp,
                                 current_replicas=scheduled_replicas(existing, fed_type.target_kind))
        plan = replace(plan, source=ref)
        if fed_type.target_scope == "Namespaced" and kind != "FederatedNamespace":
            plan = self._within_namespace(plan, clusters)
        if plan.failures or plan.error_reason:
            self._unsettled.add(key)
        desired = W.desired_works(plan)
        await self.write_works(desired, existing, plan)
        target = ResourceRef(fed_type.target_api_version, fed_type.target_kind,
                             "" if fed_type.target_kind == "Namespace" else namespace, name)
        results = results_for(plan, self.shared.works_of(ref), target, kubefed=True)
        await self._write_status(fed, fed_type, plan, results)

    def _within_namespace(self, plan: PropagationPlan, clusters: list[ClusterInfo]
                          ) -> PropagationPlan:
        namespace = plan.source.namespace
        fns_type = self.types.get("FederatedNamespace")
        if not self.ftcs.synced or (fns_type is not None and not fns_type.informer.synced
                                    and not _type_gone(fns_type.informer)):
            # not listed yet (a new leader, a restarted hub): a FederatedNamespace missing from
            # the cache is not a missing one, and planning without it would delete the Works
            raise RequeueAfter(0.5)
        fns = fns_type.informer.get(namespace, namespace) if fns_type is not None else None
        if fns is None or nested(fns, "metadata", "deletionTimestamp"):
            return replace(plan, works=(), failures=(), error_reason="NamespaceNotFederated",
                           error_message=f"namespace {namespace!r} is not federated: create the "
                           f"FederatedNamespace {namespace}/{namespace} first")
        return within_namespace(plan, fns, clusters)

    async def _write_status(self, fed: Obj, fed_type: _FedType, plan: PropagationPlan,
                            results: Mapping[str, ClusterResult]) -> None:
        now = rfc3339(time.time())
        status = kubefed_status(plan, results, generation=W.generation(fed), now=now)
        messages = {f.cluster: f.message for f in plan.failures}
        messages.update({c: r.message for c, r in results.items() if not r.applied and r.message})
        failed = []
        for entry in status["clusters"]:
            if "status" in entry:
                failed.append(f"{entry['name']}: {entry['status']}")
                if messages.get(entry["name"]):
                    entry["message"] = messages[entry["name"]]
                    failed[-1] += f" ({messages[entry['name']]})"
        cond = status["conditions"][0]
        if failed and "message" not in cond:
            cond["message"] = "; ".join(failed)
        status["conditions"] = _keep_times(status["conditions"], nested(fed, "status",
                                                                         "conditions"))
        current = mapping(fed.get("status"))
        if W.strip_volatile(dict(current)) == W.strip_volatile(status):
            return
        meta = mapping(fed.get("metadata"))
        body = {"apiVersion": fed_type.api_version, "kind": fed.get("kind"),
                "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
                "status": status}
        try:
            written = await self.host.apply_status(body, field_manager=FIELD_MANAGER, force=True)
            self.echoes.wrote(source_key_of(written), written)
        except NotFound:
            pass


# Karmada --------------------------------------------------------------------------------------

TemplateKey = tuple[str, str, str, str]  # (apiVersion, kind, namespace, name)
POLICY_API_VERSION = f"{KARMADA_POLICY_GROUP}/v1alpha1"


@dataclass
class KarmadaController(_Base[TemplateKey]):
    name: str = "karmada-sync"
    templates: dict[GVK, tuple[Informer, asyncio.Task[None]]] = field(default_factory=dict)
    policies: dict[str, Informer] = field(init=False)
    # kinds whose templates carry (or carried) the finalizer, and their watch lifecycle
    record: KindRecord = field(init=False)
    kinds: Engine[GVK] = field(init=False)
    depsync: DependencySync = field(init=False)
    bindings: BindingViews = field(init=False)
    # per template, what its last event showed apart from tether's own status annotation
    _seen: dict[TemplateKey, str] = field(default_factory=dict, init=False)
    failover: FailoverSettings = field(default_factory=FailoverSettings)
    step: BindingStep = field(init=False)
    # templates to schedule afresh (WorkloadRebalancer), with who waits for the outcome
    _fresh: dict[TemplateKey, list[asyncio.Future[str]]] = field(default_factory=dict, init=False)
    status_target: TemplateStatusTarget | None = None  # None: decided by discovery (auto)
    _selected: set[GVK] = field(default_factory=set, init=False)  # by a live policy
    _work_kinds: dict[ObjectKey, GVK] = field(default_factory=dict, init=False)
    _swept: set[GVK] = field(default_factory=set, init=False)  # orphan Works looked for
    # per template, the propagation policy (kind, namespace, name) its last plan came from
    _policy_of: dict[TemplateKey, tuple[str, str, str]] = field(default_factory=dict,
                                                                 init=False)
    # templates whose last plan left a cluster out with a reason (a cluster change may fix that)
    _unsettled: set[TemplateKey] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.status_target is None:
            self.status_target = TemplateStatusTarget(self.host)
        self.policies = {
            kind: Informer(self.host, POLICY_API_VERSION, kind, on_event=self._on_policy)
            for kind in ("PropagationPolicy", "ClusterPropagationPolicy", "OverridePolicy",
                         "ClusterOverridePolicy")
        }
        self.record = KindRecord(self.host, "karmada")
        self.kinds = Engine("karmada-kinds", self._reconcile_kind)
        self.depsync = DependencySync(self.host, self.shared, self,
                                      on_dependency=self._on_dependency)
        self.bindings = BindingViews(self.host, template_of=self._template,
                                     policy_of=self._policy_for, works_of=self.shared.works_of,
                                     report_of=_report, now=lambda: rfc3339(time.time()))
        self.shared.placement_handlers.append(self._on_placement)
        self.shared.work_handlers.append(self._on_work)
        self.step = BindingStep(self.failover, time.time)
        self.shared.work_handlers.append(self.depsync.on_work)

    def _on_placement(self, cluster: str, before: ClusterInfo | None,
                      after: ClusterInfo | None) -> None:
        """What placement reads of `cluster` changed: reconcile the templates whose plan could
        change — those with a Work there, those whose policy's affinity admits it (before or
        after), and those whose last plan had failures — not every template."""
        keys = {(r.api_version, r.kind, r.namespace, r.name)
                for r in self.shared.works_in(cluster, "karmada")}
        keys |= self._unsettled
        views = [v for v in (before, after) if v is not None]
        admits: dict[tuple[str, str, str], bool] = {}
        for key, policy_key in self._policy_of.items():
            admitted = admits.get(policy_key)
            if admitted is None:
                kind, namespace, name = policy_key
                policy = self.policies[kind].get(namespace or None, name)
                placement = nested(policy, "spec", "placement")
                admitted = admits[policy_key] = policy is None or any(
                    policy_may_place(placement, v) for v in views)
            if admitted:
                keys.add(key)
        for template_key in sorted(keys):
            self.engine.enqueue(template_key)

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                for informer in self.policies.values():
                    group.create_task(informer.run())
                group.create_task(self.engine.run())
                group.create_task(self.kinds.run())
                group.create_task(self.depsync.run())
                group.create_task(self.bindings.run())
                group.create_task(self._load_record())
                group.create_task(self._resync())
        finally:
            self._group = None

    async def _load_record(self) -> None:
        await self.record.load()
        self._sync_templates()

    @property
    def synced(self) -> bool:
        # Template informers are left out, as for KubeFed's types: a selector naming a kind the
        # host does not serve must not keep the whole hub unready.
        return self.record.loaded and all(i.synced for i in self.policies.values())

    def all_keys(self) -> Iterable[TemplateKey]:
        for (api_version, kind), (informer, _) in list(self.templates.items()):
            for key in informer.keys():  # noqa: SIM118 (Informer.keys, not a dict)
                yield (api_version, kind, key.namespace, key.name)

    def _on_policy(self, event: WatchEvent) -> None:
        if event.object.get("kind") in ("PropagationPolicy", "ClusterPropagationPolicy"):
            self._sync_templates()
        self.enqueue_all()

    def _sync_templates(self) -> None:
        """Watch the kinds policies select, and keep watching the kinds still holding the
        finalizer or Works (a kind is only let go by `_reconcile_kind`)."""
        wanted: set[GVK] = set()
        for kind in ("PropagationPolicy", "ClusterPropagationPolicy"):
            for policy in self.policies[kind].list():
                for selector in items(nested(policy, "spec", "resourceSelectors")):
                    sel = mapping(selector)
                    if sel.get("apiVersion") and sel.get("kind"):
                        wanted.add((str(sel["apiVersion"]), str(sel["kind"])))
        self._selected = wanted
        if self._group is None:
            return
        keep = wanted | self.record.kinds | set(self._work_kinds.values())
        for gvk in sorted(keep - set(self.templates)):
            self._watch(gvk)
        for gvk in self.templates:
            self.kinds.enqueue(gvk)

    def _watch(self, gvk: GVK) -> None:
        if self._group is None or gvk in self.templates:
            return
        informer = Informer(self.host, gvk[0], gvk[1], on_event=self._on_template)
        self.templates[gvk] = (informer, self._start(informer))
        self.kinds.enqueue(gvk)

    async def _reconcile_kind(self, gvk: GVK) -> None:
        """Once a kind's templates are listed, find Works whose template went while the hub was
        not watching (the template's reconcile deletes them); and when no policy selects the
        kind any more, stop watching it once none of its templates holds the finalizer or has
        Works."""
        if not self.record.loaded:
            raise RequeueAfter(0.5)
        entry = self.templates.get(gvk)
        if entry is None:
            return
        informer = entry[0]
        works = [k for k, g in self._work_kinds.items() if g == gvk]
        selected = gvk in self._selected
        if informer.synced and gvk not in self._swept:
            self._swept.add(gvk)
            for work_key in works:
                work = self.shared.work_info(work_key)
                found = work.origin if work is not None else None
                if found is not None and informer.get(found[1].namespace, found[1].name) is None:
                    self.engine.enqueue(_template_key(found[1]))
        if self._releasable(gvk, informer):
            await self.record.discard(gvk)
            # A policy selecting the kind, a finalizer or a Work may have arrived while the
            # record was written: decide again on what is known now, before the watch goes.
            if self.templates.get(gvk) is not entry or not self._releasable(gvk, informer):
                self.kinds.enqueue(gvk)
                return
            self.templates.pop(gvk)[1].cancel()
            self._swept.discard(gvk)
            log.info("no longer watching %s %s: no policy selects it, nothing left to finalize",
                     gvk[1], gvk[0])
        elif not informer.synced and (works or not selected):
            raise RequeueAfter(2.0)  # not listed yet: look again then

    def _releasable(self, gvk: GVK, informer: Informer) -> bool:
        works = sum(1 for g in self._work_kinds.values() if g == gvk)
        finalized = sum(1 for t in informer.list()
                        if W.PROPAGATION_FINALIZER in items(nested(t, "metadata", "finalizers")))
        return releasable(wanted=gvk in self._selected, synced=informer.synced,
                          type_gone=_type_gone(informer), finalized=finalized, works=works)

    def _needs_watch(self, gvk: GVK) -> bool:
        """Whether templates of an unwatched kind could need the hub: a policy selects it, or
        something of it may hold the finalizer or have Works."""
        return (not self.record.loaded or not self.shared.works.synced or gvk in self._selected
                or gvk in self.record.kinds or gvk in self._work_kinds.values())

    def _on_template(self, event: WatchEvent) -> None:
        obj = event.object
        key = (str(obj.get("apiVersion")), str(obj.get("kind")), event.key.namespace,
               event.key.name)
        if self.echoes.echo(key, event):
            # its finalizer or status, as this controller just wrote it: no reconcile, but a
            # finalizer let go may let the kind's watch go
            self._seen[key] = _template_fingerprint(obj)
            if key[:2] not in self._selected:
                self.kinds.enqueue(key[:2])
            return
        if event.type == "DELETED":
            self._seen.pop(key, None)
        else:
            seen = _template_fingerprint(obj)
            if event.type == "MODIFIED" and self._seen.get(key) == seen:
                return  # only the status annotation (tether's own write) changed
            self._seen[key] = seen
        self.engine.enqueue(key)
        if key[:2] not in self._selected:
            self.kinds.enqueue(key[:2])

    def _on_work(self, event: WatchEvent) -> None:
        info = self.shared.work_info(event.key)
        found = info.origin if info is not None else None
        if found is not None and found[0] == "karmada":
            ref = found[1]
            kind = (ref.api_version, ref.kind)
            if event.type == "DELETED":
                self._work_kinds.pop(event.key, None)
                if kind not in self._selected:
                    self.kinds.enqueue(kind)
            else:
                self._work_kinds[event.key] = kind
                self._watch(kind)
        self.work_event(event, "karmada",
                        lambda ref: (ref.api_version, ref.kind, ref.namespace, ref.name))

    def _template(self, key: TemplateKey) -> Obj | None:
        entry = self.templates.get((key[0], key[1]))
        return entry[0].get(key[2], key[3]) if entry is not None else None

    def _policy_for(self, template: Obj) -> Mapping[str, Any] | None:
        return match_policy(template, [*self.policies["PropagationPolicy"].list(),
                                       *self.policies["ClusterPropagationPolicy"].list()])

    async def reconcile(self, key: TemplateKey) -> None:
        api_version, kind, namespace, name = key
        ref = ResourceRef(api_version, kind, namespace, name)
        if namespace in SKIPPED_NAMESPACES or namespace.startswith("tether-"):
            return
        entry = self.templates.get((api_version, kind))
        if entry is None and not self._needs_watch((api_version, kind)):
            # Nothing selects the kind and nothing of it is left to finalize: watching it again
            # here would only have `_reconcile_kind` let it go again (and again)
            self.bindings.enqueue(key)
            return
        if entry is None or (not entry[0].synced and not _type_gone(entry[0])):
            # not listed yet (or not watched: Works of the kind start its watch): a template
            # missing from the cache is not a deleted one
            self._watch((api_version, kind))
            raise RequeueAfter(0.5)
        existing = self.shared.works_of(ref)
        template = entry[0].get(namespace, name)
        self.bindings.enqueue(key)
        self._unsettled.discard(key)
        self._policy_of.pop(key, None)
        if template is None:
            self.step.forget(key)
            self._rebalanced(key, "ReferencedBindingNotFound")
            for work in existing:
                await self.delete_work(work)
            return
        finalizers = items(nested(template, "metadata", "finalizers"))
        if nested(template, "metadata", "deletionTimestamp"):
            if W.PROPAGATION_FINALIZER in finalizers or existing:
                await self.finalize(template, api_version, existing, None)
            return
        policies = [*self.policies["PropagationPolicy"].list(),
                    *self.policies["ClusterPropagationPolicy"].list()]
        binding = read_binding(template, existing)
        policy = match_policy(template, policies, binding.policy)
        if policy is None:
            # No policy claims it (any more): stop propagating, leave member objects in place.
            self._rebalanced(key, "ReferencedBindingNotFound")
            await self._unclaimed(template, existing)
            return
        await self.record.add((api_version, kind))
        self._policy_of[key] = (str(policy.get("kind")),
                                str(nested(policy, "metadata", "namespace") or ""),
                                str(nested(policy, "metadata", "name")))
        await self.set_finalizer(template, api_version, True)
        overrides = [*self.policies["OverridePolicy"].list(),
                     *self.policies["ClusterOverridePolicy"].list()]
        source = thaw(template)
        for tether_annotation in (STATUS_ANNOTATION, EVICTION_ANNOTATION):
            source.get("metadata", {}).get("annotations", {}).pop(tether_annotation, None)
        finished = await self._bind(key, template, source, policy, policies, overrides, binding)
        plan = finished.plan
        if (plan.failures or plan.error_reason or finished.recheck_at is not None
                or finished.tasks_annotation or EVICTION_ANNOTATION in mapping(
                    nested(template, "metadata", "annotations"))
                or nested(policy, "spec", "placement", "workloadAffinity")):
            # a cluster change may fix a failure, end an eviction, or move an affine peer
            self._unsettled.add(key)
        await self.write_works(finished.desired, existing, plan)
        if finished.tasks_annotation is not None:
            await self._write_tasks(template, finished.tasks_annotation)
        await self._write_status(template, plan, self.shared.works_of(ref))
        self._rebalanced(key, "Successful" if not plan.error_reason else "Failed")
        if finished.recheck_at is not None:
            raise RequeueAfter(max(finished.recheck_at - time.time(), 0.05))

    async def _bind(self, key: TemplateKey, template: Obj, source: Mapping[str, Any],
                    policy: Mapping[str, Any],
                    policies: list[Obj], overrides: list[Obj],
                    binding: Binding) -> Finished:
        """Schedule and compile the template, with Karmada's binding step around it
        (`karmada_binding`): failover, suspension, Lazy activation, dependentOverrides."""
        infos = self.shared.cluster_infos()
        ref = ResourceRef(*key)
        groups = Groups()
        if nested(policy, "spec", "placement", "workloadAffinity"):
            groups = workload_groups(template, policy, self._peers(key, policies))
        prepared = self.step.prepare(key, ref, policy, binding, infos,
                                     {i.name: i for i in infos}, groups)
        plan = compile_template(source, policy, overrides, infos, previous=prepared.previous,
                                fresh=key in self._fresh, groups=groups)
        missing = await self.depsync.missing(plan.dependencies)
        if missing:
            plan = replace(plan, error_reason="DependencyNotFound",
                           error_message="missing dependencies: " + ", ".join(
                               f"{d.kind} {d.namespace}/{d.name}" for d in missing))
        return self.step.finish(
            plan, prepared, binding, template, policy,
            lambda p: self._requiring(W.desired_works(p, ensure_namespace=bool(key[2])), p),
            dependent_overrides_missing(policy, overrides))

    def _peers(self, key: TemplateKey, policies: list[Obj]
               ) -> Iterable[tuple[Obj, Mapping[str, Any] | None, frozenset[str]]]:
        for (api_version, kind), (informer, _) in list(self.templates.items()):
            for peer in informer.list():
                meta = mapping(peer.get("metadata"))
                peer_key = (api_version, kind, str(meta.get("namespace") or ""),
                            str(meta.get("name")))
                if peer_key == key or meta.get("namespace") != key[2]:
                    continue
                works = self.shared.works_of(ResourceRef(*peer_key))
                claim = read_binding(peer, works)
                yield peer, match_policy(peer, policies, claim.policy), frozenset(claim.scheduled)

    async def _write_tasks(self, template: Obj, value: str) -> None:
        meta = mapping(template.get("metadata"))
        try:
            await self.host.patch(str(template.get("apiVersion")), str(template.get("kind")),
                                  str(meta.get("name")),
                                  {"metadata": {"annotations": {EVICTION_ANNOTATION: value or None}}},
                                  namespace=str(meta.get("namespace") or "") or None,
                                  field_manager=FIELD_MANAGER)
        except NotFound:
            pass

    def rebalance(self, key: TemplateKey) -> asyncio.Future[str]:
        """Schedule the template afresh at its next reconcile (a WorkloadRebalancer); the future
        gets "Successful", "Failed" or "ReferencedBindingNotFound"."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._fresh.setdefault(key, []).append(future)
        self.engine.enqueue(key)
        return future

    def _rebalanced(self, key: TemplateKey, result: str) -> None:
        for future in self._fresh.pop(key, []):
            if not future.done():
                future.set_result(result)

    async def _unclaimed(self, template: Obj, existing: list[WorkInfo]) -> None:
        """No policy selects the template (any more). As Karmada keeps a ResourceBinding until
        its template is gone, the copies in the members stay (no longer updated) and the
        finalizer with them, so deleting the template later still removes them; a template
        without Works lets the finalizer go."""
        api_version = str(template.get("apiVersion"))
        if not existing:
            await self.set_finalizer(template, api_version, False)
            return
        await self.record.add((api_version, str(template.get("kind"))))
        await self.set_finalizer(template, api_version, True)
        clusters = sorted(w.cluster for w in existing)
        cond: Obj = {"type": PROPAGATED, "status": "False", "reason": "PolicyNotFound",
                     "message": "no PropagationPolicy or ClusterPropagationPolicy selects this "
                     f"template: its copies in {', '.join(clusters)} are kept, no longer "
                     "updated, and removed when it is deleted",
                     "lastTransitionTime": rfc3339(time.time())}
        old = _report(template)
        [cond] = _keep_times([cond], old.get("conditions"))
        report = {**old, "conditions": [cond]}
        if W.strip_volatile(old) != W.strip_volatile(report):
            await self._patch_report(template, report)

    async def _patch_report(self, template: Obj, report: Obj) -> None:
        meta = mapping(template.get("metadata"))
        text = json.dumps(report, separators=(",", ":"), sort_keys=True)
        try:
            await self.host.patch(str(template.get("apiVersion")), str(template.get("kind")),
                                  str(meta.get("name")),
                                  {"metadata": {"annotations": {STATUS_ANNOTATION: text}}},
                                  namespace=str(meta.get("namespace") or "") or None,
                                  field_manager=FIELD_MANAGER)
        except NotFound:
            pass

    def _requiring(self, desired: list[W.DesiredWork], plan: PropagationPlan
                   ) -> list[W.DesiredWork]:
        """The template's Works, naming the dependencies they need (propagateDeps): those
        travel in Works of their own (`depsync`), kept while any Work requires them."""
        needs = encode_requires(plan.dependencies)
        out = []
        for work in desired:
            current = self.shared.work_info(ObjectKey(work.namespace, work.name))
            if not needs and not (current is not None
                                  and current.annotations.get(REQUIRES_ANNOTATION)):
                out.append(work)
                continue
            body = thaw(work.body)
            body["metadata"]["annotations"][REQUIRES_ANNOTATION] = needs
            out.append(replace(work, body=body))
        return out

    def _on_dependency(self, templates: Iterable[ResourceRef]) -> None:
        for ref in templates:
            self.engine.enqueue(_template_key(ref))

    async def _write_status(self, template: Obj, plan: PropagationPlan,
                            existing: list[WorkInfo]) -> None:
        by_cluster = {w.cluster: w for w in existing}
        results = results_for(plan, existing, plan.source, kubefed=False)
        clusters: list[Obj] = []
        problems: list[str] = []
        for failure in plan.failures:
            clusters.append({"name": failure.cluster, "applied": False,
                             "reason": failure.reason, "message": failure.message})
            problems.append(f"{failure.cluster}: {failure.reason}: {failure.message}")
        pending: list[str] = []
        notices = {n.cluster: n for n in plan.notices}
        for notice in plan.notices:
            if not any(w.cluster == notice.cluster for w in plan.works):
                work = by_cluster.get(notice.cluster)
                applied = work.applied if work is not None else None
                clusters.append({"name": notice.cluster, "reason": notice.reason,
                                 "message": notice.message,
                                 "applied": bool(applied and applied.status == "True")})
        for item in plan.works:
            result = results.get(item.cluster)
            entry: Obj = {"name": item.cluster, "applied": bool(result and result.applied)}
            if result is None:
                entry["reason"] = "Pending"
                pending.append(item.cluster)
            elif not result.applied:
                entry.update(reason=result.reason, message=result.message)
                problems.append(f"{item.cluster}: {result.reason}: {result.message}")
            if item.replicas is not None:
                entry["replicas"] = item.replicas
            if item.cluster in notices and "reason" not in entry:
                entry.update(reason=notices[item.cluster].reason,
                             message=notices[item.cluster].message)
            clusters.append(entry)
        clusters.sort(key=lambda e: str(e["name"]))
        if plan.error_reason:
            cond = {"type": PROPAGATED, "status": "False", "reason": plan.error_reason,
                    "message": "; ".join([plan.error_message, *problems])}
        elif problems:
            cond = {"type": PROPAGATED, "status": "False", "reason": "PropagationFailed",
                    "message": "; ".join(problems)}
        elif pending:
            cond = {"type": PROPAGATED, "status": "Unknown", "reason": "Applying",
                    "message": "waiting for " + ", ".join(pending)}
        else:
            cond = {"type": PROPAGATED, "status": "True", "reason": "Propagated",
                    "message": f"applied in {len(plan.works)} cluster(s)"}
        if plan.notices:
            if plan.hold and not plan.error_reason:
                cond["reason"] = plan.notices[0].reason
            cond["message"] = "; ".join([str(cond["message"]), *(
                f"{n.cluster}: {n.reason}: {n.message}" for n in plan.notices)])
        cond["lastTransitionTime"] = rfc3339(time.time())
        member_status = {
            c: member_status_for_aggregation(by_cluster.get(c), plan.source,
                                             W.generation(template))
            for c in plan.clusters}
        for entry in clusters:
            reflected = reflect_status(template, member_status.get(str(entry["name"])))
            if reflected is not None:
                entry["status"] = reflected
        aggregated = aggregate_status(template, member_status) if plan.works else None
        assert self.status_target is not None
        to_status = aggregated is not None and await self.status_target.for_template(
            template, FIELD_MANAGER) == STATUS
        old_raw = nested(template, "metadata", "annotations", STATUS_ANNOTATION)
        old: Obj = {}
        with contextlib.suppress(TypeError, ValueError):
            old = json.loads(str(old_raw)) if old_raw else {}
        [cond] = _keep_times([cond], old.get("conditions"))
        report: Obj = {"conditions": [cond], "clusters": clusters}
        if aggregated is not None and not to_status:
            report["aggregatedStatus"] = aggregated
        meta = mapping(template.get("metadata"))
        target_ns = str(meta.get("namespace") or "") or None
        # a new template only waiting for its first reports gets its status with them: an
        # "Applying" replaced a moment later would be one more write per template in a burst
        first_wait = not old and cond["reason"] == "Applying"
        if not first_wait and W.strip_volatile(old) != W.strip_volatile(report):
            text = json.dumps(report, separators=(",", ":"), sort_keys=True)
            written = await self.host.patch(
                str(template.get("apiVersion")), str(template.get("kind")), str(meta.get("name")),
                {"metadata": {"annotations": {STATUS_ANNOTATION: text}}}, namespace=target_ns,
                field_manager=FIELD_MANAGER)
            self.echoes.wrote(source_key_of(written), written)
        if aggregated is None or not to_status:
            return
        status = {**aggregated, "conditions": _merge_condition(
            nested(template, "status", "conditions"), cond)}
        if W.strip_volatile(status) == W.strip_volatile(
                {k: v for k, v in mapping(template.get("status")).items() if k in status}):
            return
        body = {"apiVersion": template.get("apiVersion"), "kind": template.get("kind"),
                "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
                "status": status}
        try:
            written = await self.host.apply_status(body, field_manager=FIELD_MANAGER, force=True)
            self.echoes.wrote(source_key_of(written), written)
        except KubeError as exc:
            if exc.code not in (404, 405):  # kinds without a status subresource
                raise


def _template_key(ref: ResourceRef) -> TemplateKey:
    return (ref.api_version, ref.kind, ref.namespace, ref.name)


def _type_gone(informer: Informer) -> bool:
    """Whether the host stopped serving the informer's type (its CRD was deleted)."""
    return not informer.synced and isinstance(informer.last_error, NotFound)


def _report(template: Obj) -> Obj:
    raw = nested(template, "metadata", "annotations", STATUS_ANNOTATION)
    with contextlib.suppress(TypeError, ValueError):
        found = json.loads(str(raw)) if raw else {}
        return found if isinstance(found, dict) else {}
    return {}


def _template_fingerprint(template: Obj) -> str:
    """The template as a reconcile reads it: without its resourceVersion, managedFields and
    tether's status annotation, which change with every status write."""
    meta = {k: v for k, v in mapping(template.get("metadata")).items()
            if k not in ("resourceVersion", "managedFields")}
    annotations = {k: v for k, v in mapping(meta.get("annotations")).items()
                   if k != STATUS_ANNOTATION}
    meta["annotations"] = annotations
    return json.dumps({**template, "metadata": meta}, sort_keys=True, separators=(",", ":"),
                      default=str)


def _merge_condition(conditions: Any, cond: Obj) -> list[Obj]:
    out = [thaw(c) for c in items(conditions) if mapping(c).get("type") != cond["type"]]
    return [*out, cond]


__all__ = [
    "STATUS_ANNOTATION",
    "HubInformers",
    "KarmadaController",
    "KubeFedController",
    "cluster_info",
    "unjoining",
]
