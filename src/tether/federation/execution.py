"""The push-mode Work executor: applies each Work's manifests to its member cluster.

For a Work in `tether-es-<cluster>` (skipped for Pull clusters, whose agent applies their Works,
and for clusters being unjoined or gone — then only the Work's finalizer is released):
1. a member client from the Cluster and its hub Secret (one `ClientPool` entry per cluster);
2. the namespace named by `work.tether.io/ensure-namespace` is created when missing (Karmada
   auto-propagates namespaces);
3. per manifest, in dependency order: an existing object without `app.kubernetes.io/managed-by:
   tether` is left alone under `conflictResolution: Abort` (condition Applied=False, reason
   Conflict, naming the object); otherwise server-side apply as field manager `tether` with
   force. Fields tether does not set are not owned and stay as the member has them (an HPA's
   replicas when the template leaves them out); fields it sets are taken back on the next pass;
4. Work status: the Applied condition (observedGeneration = the Work's generation) and per
   manifest the member object's `status`, `generation`, `appliedAt` and `latencySeconds` (from
   the Work's source-changed-at annotation). Member errors keep the member's message and are
   retried with backoff.
Deleting a Work (finalizer `tether.io/execution`) deletes its member objects in reverse apply
order unless `preserveResourcesOnDeletion`; then they lose tether's labels and annotations and
are the member's own (`release_member_objects`).

A pull agent runs this same executor with `pull_cluster` (its cluster, applied even though it is
Pull) and `member_client` (its local member client instead of one built from the hub Secret);
see `pullagent.py`.

Status collection and drift: one informer per (cluster, kind) on objects labelled managed-by
tether; any change enqueues the Work named by the object's `work.tether.io/name` annotation,
whose next pass records the new status and re-applies when a field tether sets has drifted.

Requests per Work pass are kept to what the Work needs: the credentials Secrets come from an
informer on the hub namespace's Secrets (a GET only while it has not synced or misses one), and
the namespaces known to exist in a member are remembered per member (forgotten with the member,
and when an apply reports its namespace missing, after which the pass creates it and tries again).
The conflict check needs no GET either: next to the cache of tether's objects, a metadata-only
cache per (cluster, kind) of the objects *not* labelled managed-by tether says whether a name is
taken by someone else (a GET only while one of the two has not synced), so a new object costs
the member one server-side apply. The watch echo of the executor's own writes (its Work status,
its applies) enqueues nothing. In a burst (other Works waiting in the front lane), a Work's first
report is kept in memory and written from the background lane once nothing else waits: objects
reach members first, statuses follow, each Work's status still written once (a change of the
member object meanwhile drops the kept report: the object is applied and reported anew).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from tether.engine import Engine, RequeueAfter
from tether.kube import (
    ClientPool,
    Conflict,
    Informer,
    KubeClient,
    KubeError,
    NotFound,
    ObjectKey,
    Unreachable,
    WatchEvent,
    object_key,
    strip_managed_fields,
)
from tether.objects import Obj
from tether.objects.times import rfc3339

from . import works as W
from ._util import items, mapping, nested, start_in, thaw
from .crds import WORK_API_VERSION, execution_namespace
from .health import HUB_NAMESPACE, member_credentials
from .metrics import HubMetrics
from .model import (
    FIELD_MANAGER,
    KUBEFED_MANAGED_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    SOURCE_ANNOTATION,
)
from .ordering import delete_order, tier
from .propagation import Echoes, HubInformers, unjoining
from .workinfo import WorkInfo

log = logging.getLogger(__name__)
STATUS_MANAGER = "tether-execution"
MEMBER_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
FOREIGN_SELECTOR = f"{MANAGED_BY_LABEL}!={MANAGED_BY_VALUE}"
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 30.0
# what tether puts on member objects, removed from those it leaves behind
RELEASED_LABELS = (MANAGED_BY_LABEL, KUBEFED_MANAGED_LABEL)
RELEASED_ANNOTATIONS = (SOURCE_ANNOTATION, W.WORK_NAME_ANNOTATION)


class _ClusterUnreachable(Exception):
    pass


@dataclass
class _Member:
    fingerprint: tuple[str, str]  # (apiEndpoint, secret resourceVersion)
    client: KubeClient
    informers: dict[tuple[str, str], tuple[Informer, asyncio.Task[None]]] = field(
        default_factory=dict)
    # per kind, the names of objects tether does not manage (metadata only): with both caches
    # synced, a name in neither is free, and applying it needs no GET first
    foreign: dict[tuple[str, str], tuple[Informer, asyncio.Task[None]]] = field(
        default_factory=dict)
    namespaces: set[str] = field(default_factory=set)  # known to exist in the member


@dataclass
class _Outcome:
    entry: Obj
    error_reason: str = ""
    error_message: str = ""


def _name_and_labels(obj: Obj) -> Obj:
    """What the foreign-object caches keep: enough to say an object exists and is not tether's."""
    meta = mapping(obj.get("metadata"))
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
            "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "resourceVersion",
                                               "uid") if k in meta}}


def executor_view(cluster: Obj) -> tuple[Any, ...]:
    """What the executor reads of a Cluster, as one comparable value: whether it is leaving,
    its spec apart from taints (sync mode, endpoint, credentials reference, proxy) and whether it
    is Ready (Works that failed while it was not get a pass when it is again)."""
    spec = {k: v for k, v in mapping(cluster.get("spec")).items() if k != "taints"}
    ready = any(mapping(c).get("type") == "Ready" and mapping(c).get("status") == "True"
                for c in items(nested(cluster, "status", "conditions")))
    return (unjoining(cluster), spec, ready)


def identifier(manifest: Obj, ordinal: int) -> Obj:
    api_version = str(manifest.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    meta = mapping(manifest.get("metadata"))
    out: Obj = {"ordinal": ordinal, "group": group, "version": version,
                "kind": str(manifest.get("kind", "")), "name": str(meta.get("name", ""))}
    if meta.get("namespace"):
        out["namespace"] = str(meta["namespace"])
    return out


def _ref(manifest: Obj) -> str:
    meta = mapping(manifest.get("metadata"))
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{manifest.get('kind')} {where}{meta.get('name')}"


def _error_outcome(manifest: Obj, exc: KubeError) -> tuple[str, str]:
    what = _ref(manifest)
    if isinstance(exc, Unreachable):
        return "ClusterUnreachable", exc.message
    if exc.code == 404 and "namespaces" in exc.message:
        return "NamespaceNotFound", f"{what}: {exc.message}"
    if exc.code == 404:
        return "NoSuchResource", f"{what}: {exc.message}"
    if exc.code == 422:
        return "Invalid", f"{what}: {exc.message}"
    return "ApplyFailed", f"{what}: {exc.message}"


@dataclass
class WorkExecutor:
    host: KubeClient
    shared: HubInformers
    metrics: HubMetrics
    workers: int = 8
    namespace: str = HUB_NAMESPACE
    resync_s: float = 60.0
    name: str = "work-executor"
    # A pull agent's executor: applies this cluster's Works (Pull or not) through `member_client`
    pull_cluster: str | None = None
    member_client: KubeClient | None = None
    engine: Engine[ObjectKey] = field(init=False)
    clusters_engine: Engine[str] = field(init=False)
    pool: ClientPool = field(default_factory=ClientPool)
    _members: dict[str, _Member] = field(default_factory=dict)
    _member_locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    _failures: dict[ObjectKey, int] = field(default_factory=dict)
    # Works applied in a burst whose first report waits: (generation, outcomes)
    _unwritten: dict[ObjectKey, tuple[int, list[_Outcome]]] = field(default_factory=dict)
    _views: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # cluster → executor_view
    # own writes: Work status/finalizer (by ObjectKey), member objects (by (cluster, apiVersion,
    # kind, namespace, name))
    echoes: Echoes = field(default_factory=Echoes)
    _group: asyncio.TaskGroup | None = None
    # the hub namespace's Secrets (member credentials); None for a pull agent's executor
    secrets: Informer | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.engine = Engine(self.name, self._counted, workers=self.workers)
        self.clusters_engine = Engine("executor-clusters", self._reconcile_cluster)
        if self.member_client is None:
            self.secrets = Informer(self.host, "v1", "Secret", self.namespace)
        self.shared.work_handlers.append(self._on_work)
        self.shared.cluster_handlers.append(self._on_cluster)

    def _on_work(self, event: WatchEvent) -> None:
        if not self.echoes.echo(event.key, event, lambda: self._on_work(event)):
            self.engine.enqueue(event.key)  # not just this executor's own status write

    def _on_cluster(self, event: WatchEvent) -> None:
        """A Cluster event: the cluster's Works get another pass only when what this executor
        reads of the Cluster changed (`executor_view`), not on every status write."""
        name = event.key.name
        before = self._views.pop(name, None)
        after = None if event.type == "DELETED" else executor_view(event.object)
        if after is not None:
            self._views[name] = after
        if before != after:
            self.clusters_engine.enqueue(name)

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                group.create_task(self.engine.run())
                group.create_task(self.clusters_engine.run())
                group.create_task(self._resync())
                if self.secrets is not None:
                    group.create_task(self.secrets.run())
        finally:
            self._group = None
            for member in self._members.values():
                for _, task in [*member.informers.values(), *member.foreign.values()]:
                    task.cancel()
            self._members.clear()
            await self.pool.aclose()

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.resync_s)
            for key in self.shared.works.keys():  # noqa: SIM118 (Informer.keys, not a dict)
                self.engine.enqueue(key, background=True)

    async def _counted(self, key: ObjectKey) -> None:
        try:
            await self.reconcile(key)
        except RequeueAfter:
            self.metrics.reconciled(self.name, failed=True)
            raise
        except Exception:
            self.metrics.reconciled(self.name, failed=True)
            raise
        self.metrics.reconciled(self.name)

    # members -----------------------------------------------------------------------------

    async def _reconcile_cluster(self, name: str) -> None:
        """A Cluster changed: drop its client and informers when it goes or is being unjoined,
        and give its Works another pass (readiness, credentials may have changed)."""
        cluster = self.shared.clusters.get(None, name)
        if unjoining(cluster) or (nested(cluster, "spec", "syncMode") == "Pull"
                                  and name != self.pull_cluster):
            await self._forget(name)
        prefix = execution_namespace(name)
        for key in self.shared.works.keys():  # noqa: SIM118 (Informer.keys, not a dict)
            if key.namespace == prefix:
                self.engine.enqueue(key)

    def _lock(self, name: str) -> asyncio.Lock:
        return self._member_locks.setdefault(name, asyncio.Lock())

    async def _forget(self, name: str) -> None:
        async with self._lock(name):
            await self._drop(name)

    async def _drop(self, name: str) -> None:
        member = self._members.pop(name, None)
        if member is None:
            return
        tasks = [task for _, task in [*member.informers.values(), *member.foreign.values()]]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)
        await self.pool.remove(name)

    async def _member(self, cluster: Obj) -> _Member:
        name = str(nested(cluster, "metadata", "name"))
        if self.member_client is not None and name == self.pull_cluster:
            own = self._members.get(name)
            if own is None:
                own = self._members[name] = _Member(("", ""), self.member_client)
            return own
        spec = mapping(cluster.get("spec"))
        ref = mapping(spec.get("secretRef"))
        secret_name = str(ref.get("name") or name)
        secret_namespace = str(ref.get("namespace") or self.namespace)
        secret: Obj | None = None
        if (self.secrets is not None and self.secrets.synced
                and secret_namespace == self.namespace):
            secret = self.secrets.get(secret_namespace, secret_name)
        if secret is None:
            try:
                secret = await self.host.get("v1", "Secret", secret_name, secret_namespace)
            except KubeError as exc:
                raise _ClusterUnreachable(
                    f"cannot read the credentials Secret of cluster {name!r}: {exc.message}"
                ) from None
        fingerprint = (str(spec.get("apiEndpoint", "")),
                       str(nested(secret, "metadata", "resourceVersion")))
        member = self._members.get(name)
        if member is not None and member.fingerprint == fingerprint:
            return member
        # new credentials: one worker replaces the client; the others wait for it (two
        # replacing at once would close each other's new client)
        async with self._lock(name):
            member = self._members.get(name)
            if member is not None and member.fingerprint == fingerprint:
                return member
            if member is not None:
                await self._drop(name)
            client = await self.pool.set(name, member_credentials(cluster, secret))
            log.info("cluster %s: new client for %s (credentials Secret version %s)",
                     name, fingerprint[0], fingerprint[1])
            member = _Member(fingerprint, client)
            self._members[name] = member
            return member

    def _watch_kind(self, cluster: str, member: _Member, api_version: str, kind: str) -> Informer:
        entry = member.informers.get((api_version, kind))
        if entry is not None:
            return entry[0]
        informer = Informer(member.client, api_version, kind, label_selector=MEMBER_SELECTOR,
                            on_event=lambda e: self._on_member(cluster, api_version, kind, e),
                            transform=strip_managed_fields)
        assert self._group is not None
        member.informers[(api_version, kind)] = (informer, start_in(self._group, informer.run()))
        return informer

    def _watch_foreign(self, member: _Member, api_version: str, kind: str) -> Informer:
        entry = member.foreign.get((api_version, kind))
        if entry is not None:
            return entry[0]
        informer = Informer(member.client, api_version, kind, label_selector=FOREIGN_SELECTOR,
                            transform=_name_and_labels)
        assert self._group is not None
        member.foreign[(api_version, kind)] = (informer, start_in(self._group, informer.run()))
        return informer

    def _on_member(self, cluster: str, api_version: str, kind: str, event: WatchEvent) -> None:
        if self.echoes.echo((cluster, api_version, kind, event.key.namespace, event.key.name),
                            event, lambda: self._on_member(cluster, api_version, kind, event)):
            return  # the object as this executor's apply just left it
        ref = str(nested(event.object, "metadata", "annotations", W.WORK_NAME_ANNOTATION) or "")
        namespace, _, name = ref.partition("/")
        if name and namespace == execution_namespace(cluster):
            key = ObjectKey(namespace, name)
            self._unwritten.pop(key, None)  # changed in the member: apply and report anew
            self.engine.enqueue(key)

    # works -------------------------------------------------------------------------------

    async def reconcile(self, key: ObjectKey) -> None:
        work = self.shared.work_info(key)
        if work is None:
            self._failures.pop(key, None)
            self._unwritten.pop(key, None)
            return
        cluster_name = work.cluster
        cluster = self.shared.clusters.get(None, cluster_name)
        deleting = work.deleting
        if unjoining(cluster):
            if deleting:  # the cluster is leaving: unjoin cleans (or keeps) member objects
                await self._set_finalizer(work, False)
            return
        assert cluster is not None
        if nested(cluster, "spec", "syncMode") == "Pull" and cluster_name != self.pull_cluster:
            return  # the cluster's agent applies its Works
        try:
            member = await self._member(cluster)
            if deleting:
                await self._delete_member_objects(work, member.client)
                await self._set_finalizer(work, False)
                return
            unwritten = self._unwritten.pop(key, None)
            if unwritten is not None and unwritten[0] == work.generation:
                # applied in a burst, report put off: write it as it was (a change in the member
                # since would have dropped it, and the objects would be applied again instead)
                await self._write_status(work, unwritten[1])
                return
            await self._set_finalizer(work, True)
            outcomes = await self._apply(work, cluster_name, member)
        except _ClusterUnreachable as exc:
            outcomes = [_Outcome({}, "ClusterUnreachable", str(exc))]
        except Unreachable as exc:
            outcomes = [_Outcome({}, "ClusterUnreachable", exc.message)]
        if (self.engine.backlog() and not work.reported
                and not any(o.error_reason for o in outcomes)):
            # A burst: more Works wait to be applied. Their objects reaching the members comes
            # first; this first report waits in the background lane (served once nothing else
            # waits) and is then written as it is now, without applying again.
            self._unwritten[key] = (work.generation, outcomes)
            self.engine.defer(key)
            return
        await self._write_status(work, outcomes)
        if any(o.error_reason for o in outcomes):
            failures = self._failures.get(key, 0) + 1
            self._failures[key] = failures
            raise RequeueAfter(min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (failures - 1)))
        self._failures.pop(key, None)

    async def _set_finalizer(self, work: WorkInfo, present: bool) -> None:
        finalizers = list(work.finalizers)
        if (W.EXECUTION_FINALIZER in finalizers) == present:
            return
        finalizers = ([*finalizers, W.EXECUTION_FINALIZER] if present
                      else [f for f in finalizers if f != W.EXECUTION_FINALIZER])
        try:
            written = await self.host.patch(
                WORK_API_VERSION, "Work", work.name,
                {"metadata": {"finalizers": finalizers,
                              "resourceVersion": work.resource_version or None}},
                namespace=work.namespace, field_manager=STATUS_MANAGER)
            self.echoes.wrote(object_key(written), written)
        except Conflict:
            raise RequeueAfter(0.1) from None  # a newer Work is on its way through the informer
        except NotFound:
            pass

    async def _delete_member_objects(self, work: WorkInfo, client: KubeClient) -> None:
        if work.preserve_on_deletion:
            await release_member_objects(work, client)
            return
        manifests = work.manifests
        for manifest in delete_order([dict(m) for m in manifests]):
            meta = mapping(manifest.get("metadata"))
            try:
                current = await client.get(str(manifest["apiVersion"]), str(manifest["kind"]),
                                           str(meta.get("name")), str(meta.get("namespace") or "")
                                           or None)
                labels = mapping(nested(current, "metadata", "labels"))
                if labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
                    continue  # not ours (a conflict we never took over)
                await client.delete(str(manifest["apiVersion"]), str(manifest["kind"]),
                                    str(meta.get("name")), str(meta.get("namespace") or "") or None)
            except NotFound:
                continue

    async def _ensure_namespace(self, member: _Member, namespace: str) -> None:
        if namespace in member.namespaces:
            return
        client = member.client
        try:
            await client.get("v1", "Namespace", namespace)
        except NotFound:
            try:
                await client.create({"apiVersion": "v1", "kind": "Namespace",
                                     "metadata": {"name": namespace,
                                                  "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE}}},
                                    field_manager=FIELD_MANAGER)
            except KubeError as exc:
                if exc.code != 409:
                    raise
        member.namespaces.add(namespace)

    async def _apply(self, work: WorkInfo, cluster: str, member: _Member) -> list[_Outcome]:
        ensure = work.annotations.get(W.ENSURE_NAMESPACE_ANNOTATION, "")
        cached = ensure in member.namespaces
        outcomes = await self._apply_pass(work, cluster, member, ensure)
        if any(o.error_reason == "NamespaceNotFound" for o in outcomes):
            # a namespace remembered as existing is gone (deleted in the member): forget what
            # this member's namespaces were, and when the remembered one spared the lookup, try
            # again as the lookup would have (creating it)
            member.namespaces.clear()
            if cached:
                outcomes = await self._apply_pass(work, cluster, member, ensure)
        return outcomes

    async def _apply_pass(self, work: WorkInfo, cluster: str, member: _Member,
                          ensure: str) -> list[_Outcome]:
        client = member.client
        if ensure:
            await self._ensure_namespace(member, ensure)
        abort = not work.overwrite
        caught_up = work.applied_ok
        previous = {m.ordinal: m for m in work.manifest_statuses}
        changed_at = _float(work.annotations.get(W.CHANGED_AT_ANNOTATION))
        manifests = [thaw(m) for m in work.manifests]
        order = sorted(range(len(manifests)), key=lambda i: tier(str(manifests[i].get("kind"))))
        outcomes: dict[int, _Outcome] = {}
        for ordinal in order:
            manifest = manifests[ordinal]
            prev = previous.get(ordinal)
            outcome = await self._apply_one(cluster, member, manifest, ordinal, abort=abort,
                                            caught_up=caught_up and bool(prev and prev.applied),
                                            prev=prev.raw if prev else None,
                                            changed_at=changed_at, dialect=work.dialect)
            outcomes[ordinal] = outcome
            if outcome.error_reason == "ClusterUnreachable":
                break
        del client
        return [outcomes[i] for i in sorted(outcomes)]

    async def _apply_one(self, cluster: str, member: _Member, manifest: Obj, ordinal: int, *,
                         abort: bool, caught_up: bool, prev: Any, changed_at: float | None,
                         dialect: str) -> _Outcome:
        client = member.client
        api_version, kind = str(manifest.get("apiVersion")), str(manifest.get("kind"))
        meta = mapping(manifest.get("metadata"))
        name, namespace = str(meta.get("name")), str(meta.get("namespace") or "") or None
        entry: Obj = {"identifier": identifier(manifest, ordinal), "applied": False}
        try:
            try:
                await client.resource(api_version, kind)
            except NotFound:
                message = (f"the server doesn't have a resource type {kind!r} in {api_version} "
                           f"(install its CRD in cluster {cluster!r})")
                entry.update(reason="NoSuchResource", message=message)
                return _Outcome(entry, "NoSuchResource", f"{_ref(manifest)}: {message}")
            informer = self._watch_kind(cluster, member, api_version, kind)
            foreign = self._watch_foreign(member, api_version, kind)
            current = informer.get(namespace, name) if informer.synced else None
            if current is None and informer.synced and foreign.synced:
                current = foreign.get(namespace, name)  # None: nobody's, nothing to look up
            elif current is None:
                try:
                    current = await client.get(api_version, kind, name, namespace)
                except NotFound:
                    current = None
            labels = mapping(nested(current, "metadata", "labels"))
            if current is not None and labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE and abort:
                message = (f"{_ref(manifest)} already exists in cluster {cluster!r} and was not "
                           "created by tether; set conflictResolution: Overwrite to take it over")
                entry.update(reason="Conflict", message=message)
                return _Outcome(entry, "Conflict", message)
            fresh = not (caught_up and current is not None and W.is_subset(manifest, current))
            if fresh:
                echo_key = (cluster, api_version, kind, namespace or "", name)
                written = None
                self.echoes.begin(echo_key)
                try:
                    written = await client.apply(manifest, field_manager=FIELD_MANAGER, force=True)
                finally:
                    self.echoes.end(echo_key, written)
                current = written
        except KubeError as exc:
            reason, message = _error_outcome(manifest, exc)
            entry.update(reason=reason, message=message)
            return _Outcome(entry, reason, message)
        entry["applied"] = True
        if isinstance(mapping(current).get("status"), dict):
            entry["status"] = thaw(mapping(current)["status"])
        member_gen = nested(current, "metadata", "generation")
        if isinstance(member_gen, int):
            entry["generation"] = member_gen
        prev_map = mapping(prev)
        if fresh and not caught_up:
            now = time.time()
            entry["appliedAt"] = rfc3339(now)
            if changed_at is not None:
                latency = round(max(0.0, now - changed_at), 3)
                entry["latencySeconds"] = latency
                self.metrics.observe_latency(dialect or "unknown", latency)
        else:
            for stamp_key in ("appliedAt", "latencySeconds"):
                if stamp_key in prev_map:
                    entry[stamp_key] = prev_map[stamp_key]
            if fresh:
                entry["appliedAt"] = rfc3339(time.time())
        return _Outcome(entry)

    async def _write_status(self, work: WorkInfo, outcomes: list[_Outcome]) -> None:
        errors = [o for o in outcomes if o.error_reason]
        gen = work.generation
        if errors:
            cond: Obj = {"type": W.APPLIED, "status": "False", "reason": errors[0].error_reason,
                         "message": "; ".join(o.error_message for o in errors)}
        else:
            cond = {"type": W.APPLIED, "status": "True", "reason": "AppliedSuccessful",
                    "message": "Manifest has been successfully applied"}
        cond["observedGeneration"] = gen
        old = work.applied
        cond["lastTransitionTime"] = (
            old.last_transition_time
            if old is not None and old.status == cond["status"]
            and old.last_transition_time else rfc3339(time.time()))
        entries = [o.entry for o in outcomes if o.entry]
        if not entries:  # nothing reached the member: keep what we knew
            entries = [thaw(e) for e in items(work.status.get("manifestStatuses"))]
        status = {"conditions": [cond], "manifestStatuses": entries}
        current = work.status
        # (a first report differs from the empty status without comparing copies of both)
        if current and W.strip_volatile(dict(current)) == W.strip_volatile(status):
            return
        key = ObjectKey(work.namespace, work.name)
        written = None
        self.echoes.begin(key)
        try:
            written = await self.host.patch(WORK_API_VERSION, "Work", key.name,
                                            {"status": status}, namespace=key.namespace,
                                            subresource="status", field_manager=STATUS_MANAGER)
        except NotFound:
            pass
        finally:
            self.echoes.end(key, written)
        if not errors and any(o.entry.get("identifier", {}).get("kind") in (
                "Namespace", "CustomResourceDefinition") for o in outcomes):
            # what lives in it may have been waiting: give the cluster's other Works a pass
            for key in self.shared.works.keys():  # noqa: SIM118 (Informer.keys, not a dict)
                if key.namespace == work.namespace and key.name != work.name:
                    self.engine.enqueue(key)


async def release_member_objects(work: WorkInfo, client: KubeClient) -> None:
    """Leave a Work's objects in the member as the member's own: without tether's labels and
    annotations (as Karmada strips its own, and KubeFed its managed label, when preserving), so
    nothing tether does later (an unjoin, say) takes them for its own. A namespace tether
    created for them loses its label too: unjoin would delete it, and them with it."""
    targets = [(str(m.get("apiVersion")), str(m.get("kind")),
                str(nested(m, "metadata", "name")),
                str(nested(m, "metadata", "namespace") or "") or None) for m in work.manifests]
    ensured = work.annotations.get(W.ENSURE_NAMESPACE_ANNOTATION, "")
    if ensured:
        targets.append(("v1", "Namespace", ensured, None))
    for api_version, kind, name, namespace in targets:
        try:
            current = await client.get(api_version, kind, name, namespace)
        except NotFound:
            continue
        labels = mapping(nested(current, "metadata", "labels"))
        if labels.get(MANAGED_BY_LABEL) != MANAGED_BY_VALUE:
            continue  # not ours (a conflict never taken over, a namespace made by someone else)
        annotations = mapping(nested(current, "metadata", "annotations"))
        patch = {"metadata": {
            "labels": {k: None for k in RELEASED_LABELS if k in labels},
            "annotations": {k: None for k in RELEASED_ANNOTATIONS if k in annotations}}}
        try:
            await client.patch(api_version, kind, name, patch, namespace=namespace,
                               field_manager=STATUS_MANAGER)
        except NotFound:
            continue


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


__all__ = ["WorkExecutor"]
