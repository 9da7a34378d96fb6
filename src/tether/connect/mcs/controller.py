"""The MCS controller: ServiceExports in the members of a clusterset become ServiceImports in all.

Members come from a callable (`members()`: name, credentials, ready); inside the hub that is the
registered Clusters (a pull member's credentials carry the tunnel's proxy). For each Ready member
the controller:

1. installs the MCS CRDs when missing (`crds.member_crds`) and names the cluster with
   ClusterProperties: `cluster.clusterset.k8s.io` (kept when present: the id is immutable while a
   member; else the member's registered name, a DNS label unique in the clusterset) and
   `clusterset.k8s.io` (the clusterset's name; removed when the member leaves);
2. watches its ServiceExports, Services, EndpointSlices, Namespaces and what it wrote there
   (ServiceImports, derived Services, imported EndpointSlices).

Any event enqueues the (namespace, name) it concerns; a reconcile gathers that name's exports
from every member, merges them (`plan.merge`), writes each export's conditions, and in every
member where the namespace exists applies the ServiceImport, its derived Service (whose ClusterIP
is the import's clusterset IP in that member) and one EndpointSlice per source slice; stale
slices are deleted, and when no valid export is left, the import and what hangs off it.
Writes are server-side applies that happen only when the content hash differs from what the
watch cache holds, so a resync writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tether.connect.fleetwatch import FleetWatcher
from tether.connect.mcs import plan as P
from tether.connect.mcs.crds import ABOUT_GROUP, MCS_GROUP, member_crds
from tether.engine import Engine
from tether.kube import (
    AlreadyExists,
    ClusterCredentials,
    Forbidden,
    Informer,
    KubeClient,
    KubeError,
    NotFound,
    ObjectKey,
    WatchEvent,
    strip_managed_fields,
)
from tether.objects import Obj, times

log = logging.getLogger(__name__)

FIELD_MANAGER = "tether-mcs"
CLUSTER_ID_PROPERTY = "cluster.clusterset.k8s.io"
CLUSTERSET_PROPERTY = "clusterset.k8s.io"
DEFAULT_CLUSTERSET = "clusterset"
MEMBERS_RECHECK_S = 10.0
# How long a member that has not listed yet holds back every reconcile: without it, a restart
# would withdraw imports whose only exporter had simply not been listed yet.
SYNC_GRACE_S = 60.0
Key = tuple[str, str]


@dataclass(frozen=True)
class Member:
    name: str
    credentials: ClusterCredentials
    ready: bool = True


@dataclass
class _MemberState:
    member: Member
    client: KubeClient
    cluster_id: str = ""
    export_api: str = f"{MCS_GROUP}/v1beta1"
    import_api: str = f"{MCS_GROUP}/v1beta1"
    informers: dict[str, Informer] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    @property
    def synced(self) -> bool:
        return bool(self.informers) and all(i.synced for i in self.informers.values())

    @property
    def holding_back(self) -> bool:
        """Not listed yet, and still within its grace period."""
        return not self.synced and time.monotonic() - self.started < SYNC_GRACE_S

    def get(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        informer = self.informers.get(kind)
        return informer.get(namespace, name) if informer is not None else None

    def list(self, kind: str) -> list[Obj]:
        informer = self.informers.get(kind)
        return informer.list() if informer is not None else []


def _labels(obj: Obj) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _ns(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _hashed(body: Obj) -> Obj:
    meta = body.setdefault("metadata", {})
    meta.setdefault("annotations", {})[P.HASH_ANNOTATION] = P.content_hash(body)
    return body


def _hash_of(obj: Obj | None) -> str | None:
    return (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(P.HASH_ANNOTATION)


class McsController:
    def __init__(self, members: Callable[[], Iterable[Member]], *, clusterset: str = DEFAULT_CLUSTERSET,
                 install_crds: bool = True) -> None:
        self.members = members
        self.clusterset = clusterset
        self.install_crds = install_crds
        self.engine: Engine[Key] = Engine("mcs", self._reconcile, workers=4)
        self.fleet: FleetWatcher[Member, _MemberState] = FleetWatcher(
            "mcs", lambda: (m for m in self.members() if m.ready), name=lambda m: m.name,
            credentials=lambda m: m.credentials, join=_MemberState, serve=self._serve_member, left=self._left,
            recheck_s=MEMBERS_RECHECK_S)
        self.states: dict[str, _MemberState] = self.fleet.states
        self.writes = 0  # observability (tests, metrics)

    def members_changed(self) -> None:
        self.fleet.members_changed()

    # members ---------------------------------------------------------------------------------

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.engine.run())
            group.create_task(self.fleet.run())

    async def _left(self, state: _MemberState) -> None:
        log.info("mcs: %s left the clusterset", state.member.name)
        with contextlib.suppress(KubeError):
            await state.client.delete(f"{ABOUT_GROUP}/v1beta1", "ClusterProperty", CLUSTERSET_PROPERTY)
        self._enqueue_everything()

    async def _serve_member(self, state: _MemberState) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._grace_over(state))
            await self._run_member(state)

    async def _run_member(self, state: _MemberState) -> None:
        delay = 1.0
        while True:
            try:
                await self._prepare(state)
                break
            except KubeError as exc:
                log.warning("mcs: preparing %s failed: %s; retrying in %.0fs", state.member.name, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
        client = state.client

        def informer(kind_key: str, api_version: str, kind: str, selector: str = "") -> None:
            def on_event(event: WatchEvent) -> None:
                self._event(state, kind_key, event)

            state.informers[kind_key] = Informer(client, api_version, kind, label_selector=selector,
                                                 transform=strip_managed_fields, on_event=on_event)

        informer("exports", state.export_api, "ServiceExport")
        informer("imports", state.import_api, "ServiceImport")
        informer("services", "v1", "Service")
        informer("slices", "discovery.k8s.io/v1", "EndpointSlice", f"!{P.MCS_SERVICE_NAME}")
        informer("imported", "discovery.k8s.io/v1", "EndpointSlice", P.MCS_SERVICE_NAME)
        informer("namespaces", "v1", "Namespace")
        log.info("mcs: %s joined the clusterset %s as cluster id %s", state.member.name, self.clusterset,
                 state.cluster_id)
        async with asyncio.TaskGroup() as group:
            for each in state.informers.values():
                group.create_task(each.run())
            group.create_task(self._when_synced(state))

    async def _when_synced(self, state: _MemberState) -> None:
        for each in state.informers.values():
            while not each.synced:
                with contextlib.suppress(TimeoutError):
                    await each.wait_synced(3600.0)
        if all(s.synced for s in self.states.values()):
            log.info("mcs: listed every member (%s); reconciling", ", ".join(sorted(self.states)))
        self._enqueue_everything()

    async def _grace_over(self, state: _MemberState) -> None:
        """A member that never lists stops holding the others back after its grace period."""
        await asyncio.sleep(SYNC_GRACE_S)
        if not state.synced and self.states.get(state.member.name) is state:
            log.warning("mcs: %s has not been listed after %.0fs; going on without it", state.member.name,
                        SYNC_GRACE_S)
            self._enqueue_everything()

    async def _prepare(self, state: _MemberState) -> None:
        client = state.client
        if self.install_crds:
            for crd in member_crds():
                try:
                    if await client.get_or_none("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                                                crd["metadata"]["name"]) is None:
                        await client.create(crd, field_manager=FIELD_MANAGER)
                        log.info("mcs: installed %s in %s", crd["metadata"]["name"], state.member.name)
                except AlreadyExists:
                    pass
                except Forbidden as exc:
                    log.error("mcs: cannot install %s in %s: %s", crd["metadata"]["name"], state.member.name,
                              exc.message)
        state.export_api = await self._served(client, "ServiceExport")
        state.import_api = await self._served(client, "ServiceImport")
        state.cluster_id = await self._cluster_id(state)

    @staticmethod
    async def _served(client: KubeClient, kind: str) -> str:
        for _ in range(50):  # a CRD just created is served within moments
            for version in ("v1beta1", "v1alpha1"):
                try:
                    await client.resource(f"{MCS_GROUP}/{version}", kind)
                    return f"{MCS_GROUP}/{version}"
                except NotFound:
                    continue
            await asyncio.sleep(0.2)
        raise NotFound(404, "NotFound", f"{client.server} serves no {kind} ({MCS_GROUP})")

    async def _cluster_id(self, state: _MemberState) -> str:
        client, name = state.client, state.member.name
        api = f"{ABOUT_GROUP}/v1beta1"
        try:
            await client.resource(api, "ClusterProperty")
        except NotFound:
            api = f"{ABOUT_GROUP}/v1alpha1"
        found = await client.get_or_none(api, "ClusterProperty", CLUSTER_ID_PROPERTY)
        cluster_id = str(((found or {}).get("spec") or {}).get("value") or "")
        if not cluster_id:
            cluster_id = name
            await client.apply({"apiVersion": api, "kind": "ClusterProperty",
                                "metadata": {"name": CLUSTER_ID_PROPERTY}, "spec": {"value": name}},
                               field_manager=FIELD_MANAGER)
        membership = await client.get_or_none(api, "ClusterProperty", CLUSTERSET_PROPERTY)
        current = str(((membership or {}).get("spec") or {}).get("value") or "")
        if current and current != self.clusterset:
            log.warning("mcs: %s says it belongs to clusterset %r, not %r; taking it over", name, current,
                        self.clusterset)
        if current != self.clusterset:
            await client.apply({"apiVersion": api, "kind": "ClusterProperty",
                                "metadata": {"name": CLUSTERSET_PROPERTY}, "spec": {"value": self.clusterset}},
                               field_manager=FIELD_MANAGER)
        return cluster_id

    # events ----------------------------------------------------------------------------------

    def _event(self, state: _MemberState, kind: str, event: WatchEvent) -> None:
        obj = event.object
        ns = _ns(obj)
        if kind in ("exports", "imports", "services"):
            self.engine.enqueue((ns, _name(obj)))
        elif kind == "slices":
            service = _labels(obj).get(P.SERVICE_NAME)
            if service:
                if service.startswith(P.DERIVED_PREFIX):
                    return
                self.engine.enqueue((ns, service))
        elif kind == "imported":
            service = _labels(obj).get(P.MCS_SERVICE_NAME)
            if service:
                self.engine.enqueue((ns, service))
        elif kind == "namespaces" and state.synced:
            for key in self._known_keys():
                if key[0] == _name(obj):
                    self.engine.enqueue(key)

    def _known_keys(self) -> set[Key]:
        keys: set[Key] = set()
        for state in self.states.values():
            for kind in ("exports", "imports"):
                informer = state.informers.get(kind)
                if informer is not None:
                    keys.update((k.namespace, k.name) for k in informer.keys())  # noqa: SIM118 (an Informer)
        return keys

    def _enqueue_everything(self) -> None:
        for key in self._known_keys():
            self.engine.enqueue(key)

    # reconcile -------------------------------------------------------------------------------

    async def _reconcile(self, key: Key) -> None:
        namespace, name = key
        if any(s.holding_back for s in self.states.values()):
            return  # its listing enqueues every key again
        states = [s for s in self.states.values() if s.synced and s.cluster_id]
        exports: list[P.Export] = []
        owners: dict[str, tuple[_MemberState, Obj]] = {}
        for state in states:
            export = state.get("exports", namespace, name)
            if export is None or (export.get("metadata") or {}).get("deletionTimestamp"):
                continue
            service = state.get("services", namespace, name)
            slices = tuple(s for s in state.list("slices")
                           if _ns(s) == namespace and _labels(s).get(P.SERVICE_NAME) == name)
            exports.append(P.Export(state.cluster_id, export, service, slices))
            owners[state.cluster_id] = (state, export)
        merged = P.merge(namespace, name, exports)
        for cluster_id, conditions in merged.conditions.items():
            state, export = owners[cluster_id]
            await self._export_conditions(state, export, conditions)
        for state in states:
            try:
                if not merged.clusters:
                    await self._withdraw(state, namespace, name)
                elif state.get("namespaces", None, namespace) is not None:
                    await self._import(state, merged)
            except KubeError as exc:
                raise KubeError(exc.code, exc.reason, f"{state.member.name}: {exc.message}") from exc

    async def _export_conditions(self, state: _MemberState, export: Obj, conditions: tuple[P.Condition, ...]) -> None:
        if not P.conditions_changed(export, conditions):
            return
        body = P.export_status(state.export_api, export, conditions)
        existing = {c.get("type"): c for c in (export.get("status") or {}).get("conditions") or []}
        now = times.now_rfc3339()
        for c in body["status"]["conditions"]:
            old = existing.get(c["type"]) or {}
            c["lastTransitionTime"] = old.get("lastTransitionTime") if old.get("status") == c["status"] and \
                old.get("lastTransitionTime") else now
        self.writes += 1
        await state.client.apply_status(body, field_manager=FIELD_MANAGER)

    async def _import(self, state: _MemberState, merged: P.Merged) -> None:
        client, ns, name = state.client, merged.namespace, merged.name
        current = state.get("imports", ns, name)
        if current is not None and _labels(current).get(P.MANAGED_BY) != P.MANAGED_BY_VALUE:
            log.warning("mcs: %s: ServiceImport %s/%s was not written by tether; leaving it", state.member.name,
                        ns, name)
            return
        if current is None:
            self.writes += 1
            current = await client.apply(P.import_object(state.import_api, merged, ()), field_manager=FIELD_MANAGER)
        derived_name = P.derived_name(ns, name)
        derived = state.get("services", ns, derived_name)
        wanted_derived = _hashed(P.derived_service(merged, current))
        if derived is not None and ((derived.get("spec") or {}).get("clusterIP") == "None") != merged.headless:
            self.writes += 1  # headless <-> ClusterSetIP: clusterIP is immutable, make it anew
            with contextlib.suppress(NotFound):
                await client.delete("v1", "Service", derived_name, ns)
            derived = None
        if derived is None or _hash_of(derived) != _hash_of(wanted_derived):
            self.writes += 1
            derived = await client.apply(wanted_derived, field_manager=FIELD_MANAGER)
        spec = derived.get("spec") or {}
        ips = [] if merged.headless else [str(ip) for ip in spec.get("clusterIPs") or [spec.get("clusterIP")] if ip]
        wanted_import = _hashed(P.import_object(state.import_api, merged, ips))
        if _hash_of(current) != _hash_of(wanted_import):
            self.writes += 1
            current = await client.apply(wanted_import, field_manager=FIELD_MANAGER)
        status = P.import_status(state.import_api, merged)
        have = (current.get("status") or {}).get("clusters")
        if have != status["status"]["clusters"]:
            self.writes += 1
            status["status"]["conditions"][0]["lastTransitionTime"] = times.now_rfc3339()
            await client.apply_status(status, field_manager=FIELD_MANAGER)
        wanted_slices = {_name(s): _hashed(s) for s in P.imported_slices(merged, current)}
        existing = {_name(s): s for s in state.list("imported")
                    if _ns(s) == ns and _labels(s).get(P.MCS_SERVICE_NAME) == name}
        for slice_name, body in wanted_slices.items():
            if _hash_of(existing.get(slice_name)) != _hash_of(body):
                self.writes += 1
                await client.apply(body, field_manager=FIELD_MANAGER)
        for slice_name, old in existing.items():
            if slice_name not in wanted_slices and _labels(old).get(P.SLICE_MANAGED_BY) == P.MANAGER:
                self.writes += 1
                with contextlib.suppress(NotFound):
                    await client.delete("discovery.k8s.io/v1", "EndpointSlice", slice_name, ns)

    async def _withdraw(self, state: _MemberState, namespace: str, name: str) -> None:
        client = state.client
        current = state.get("imports", namespace, name)
        if current is not None and _labels(current).get(P.MANAGED_BY) == P.MANAGED_BY_VALUE:
            self.writes += 1
            with contextlib.suppress(NotFound):
                await client.delete(state.import_api, "ServiceImport", name, namespace)
        derived_name = P.derived_name(namespace, name)
        derived = state.get("services", namespace, derived_name)
        if derived is not None and _labels(derived).get(P.MANAGED_BY) == P.MANAGED_BY_VALUE:
            self.writes += 1
            with contextlib.suppress(NotFound):
                await client.delete("v1", "Service", derived_name, namespace)
        for s in state.list("imported"):
            if _ns(s) == namespace and _labels(s).get(P.MCS_SERVICE_NAME) == name and \
                    _labels(s).get(P.SLICE_MANAGED_BY) == P.MANAGER:
                self.writes += 1
                with contextlib.suppress(NotFound):
                    await client.delete("discovery.k8s.io/v1", "EndpointSlice", _name(s), namespace)


__all__ = ["McsController", "Member", "ObjectKey"]
