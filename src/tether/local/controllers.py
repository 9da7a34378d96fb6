"""Built-in controllers of a local cluster: namespace lifecycle, garbage collection, CRD cleanup.

Each one is an `engine.Engine` fed from the store's change stream; each reconcile observes the
store, plans with a pure function, and applies the plan through `Operations` like any client.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from tether.engine import Engine, RequeueAfter
from tether.local import crds
from tether.local.errors import ApiError
from tether.local.operations import (
    CRD_FINALIZER,
    FOREGROUND_FINALIZER,
    NAMESPACE_FINALIZER,
    ORPHAN_FINALIZER,
    Operations,
    WriteOptions,
)
from tether.local.resources import ResourceType
from tether.local.store import Event, follow
from tether.objects import Obj

log = logging.getLogger(__name__)

Key = tuple[str, str, str]  # (storage key, namespace, name)
NAMESPACES = "/namespaces"
CRDS = "apiextensions.k8s.io/customresourcedefinitions"
RETRY_S = 0.2


def key_of(resource: str, obj: Obj) -> Key:
    meta = obj.get("metadata", {})
    return (resource, meta.get("namespace", ""), meta.get("name", ""))


# plans (pure) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class NamespacePlan:
    delete: tuple[Key, ...] = ()
    finalize: bool = False  # drop the "kubernetes" finalizer: the namespace may go


def plan_namespace(namespace: Obj, contents: Iterable[tuple[Key, Obj]]) -> NamespacePlan:
    if not namespace["metadata"].get("deletionTimestamp"):
        return NamespacePlan()
    remaining = list(contents)
    if remaining:
        return NamespacePlan(delete=tuple(k for k, o in remaining if not o["metadata"].get("deletionTimestamp")))
    finalizers = (namespace.get("spec") or {}).get("finalizers") or []
    return NamespacePlan(finalize=NAMESPACE_FINALIZER in finalizers)


@dataclass(frozen=True)
class DependentPlan:
    drop_owners: tuple[str, ...] = ()  # uids to remove from ownerReferences
    delete: bool = False
    foreground: bool = False


def plan_dependent(obj: Obj, owner_states: dict[str, str]) -> DependentPlan:
    """owner_states: uid -> present | absent | orphaning | foreground."""
    refs = obj["metadata"].get("ownerReferences") or []
    if not refs:
        return DependentPlan()
    states = [owner_states.get(r.get("uid", ""), "absent") for r in refs]
    if all(s in ("absent", "foreground") for s in states):
        if obj["metadata"].get("deletionTimestamp"):
            return DependentPlan()
        return DependentPlan(delete=True, foreground="foreground" in states)
    drop = tuple(r.get("uid", "") for r, s in zip(refs, states, strict=True) if s in ("absent", "orphaning"))
    return DependentPlan(drop_owners=drop)


@dataclass
class OwnerIndex:
    """uid -> key of every object, and owner uid -> keys of its dependents."""

    keys: dict[str, Key] = field(default_factory=dict)
    dependents: dict[str, set[Key]] = field(default_factory=dict)
    _owners_of: dict[Key, set[str]] = field(default_factory=dict)

    def observe(self, key: Key, obj: Obj | None) -> None:
        for owner in self._owners_of.pop(key, set()):
            bucket = self.dependents.get(owner)
            if bucket is not None:
                bucket.discard(key)
                if not bucket:
                    del self.dependents[owner]
        if obj is None:
            return
        owners = {r.get("uid", "") for r in obj["metadata"].get("ownerReferences") or []}
        if owners:
            self._owners_of[key] = owners
            for owner in owners:
                self.dependents.setdefault(owner, set()).add(key)

    def set_uid(self, uid: str, key: Key | None) -> None:
        if key is None:
            self.keys.pop(uid, None)
        else:
            self.keys[uid] = key


class LocalControllers:
    def __init__(self, ops: Operations) -> None:
        self.ops = ops
        self.index = OwnerIndex()
        self.namespaces: Engine[str] = Engine("namespace-controller", self._reconcile_namespace)
        self.dependents: Engine[Key] = Engine("garbage-collector", self._reconcile_dependent, workers=2)
        self.owners: Engine[Key] = Engine("garbage-collector-owners", self._reconcile_owner)
        self.crds: Engine[str] = Engine("crd-cleanup", self._reconcile_crd)

    def _opts(self, manager: str) -> WriteOptions:
        return WriteOptions(manager=manager, user=f"system:controller:{manager}")

    def _rt(self, resource: str) -> ResourceType | None:
        return self.ops.registry.by_storage_key(resource)

    async def run(self) -> None:
        store = self.ops.store

        def resync() -> None:
            for resource in store.resources():
                for obj in store.list_objects(resource):
                    self._observe(resource, obj, None)

        def on_event(event: Event) -> None:
            self._observe(event.resource, None if event.type == "DELETED" else event.obj, event)

        async with asyncio.TaskGroup() as group:
            for engine in (self.namespaces, self.dependents, self.owners, self.crds):
                group.create_task(engine.run())
            group.create_task(follow(store, None, None, on_event=on_event, resync=resync))

    def _observe(self, resource: str, obj: Obj | None, event: Event | None) -> None:
        source = obj if obj is not None else (event.obj if event else None)
        if source is None:
            return
        key = key_of(resource, source)
        uid = source["metadata"].get("uid", "")
        self.index.observe(key, obj)
        if uid:
            self.index.set_uid(uid, key if obj is not None else None)
        if obj is not None and obj["metadata"].get("ownerReferences"):
            self.dependents.enqueue(key)
        # An owner that went away or started deleting: look at its dependents, and at it.
        for dependent in list(self.index.dependents.get(uid, ())):
            self.dependents.enqueue(dependent)
        if obj is not None and obj["metadata"].get("deletionTimestamp"):
            self.owners.enqueue(key)
        namespace = key[1]
        if resource == NAMESPACES:
            self.namespaces.enqueue(key[2])
        elif namespace and obj is None:
            self.namespaces.enqueue(namespace)
        if resource == CRDS:
            self.crds.enqueue(key[2])
        elif obj is None and resource.split("/", 1)[0]:
            for crd in self.ops.store.list_objects(CRDS):
                if crd["metadata"].get("deletionTimestamp"):
                    self.crds.enqueue(crd["metadata"]["name"])

    # namespace ---------------------------------------------------------------------------

    async def _reconcile_namespace(self, name: str) -> None:
        store = self.ops.store
        namespace = store.get(NAMESPACES, "", name)
        if namespace is None:
            return
        contents = [((r, name, o["metadata"]["name"]), o) for r in store.resources() for o in store.list_objects(r, name)]
        plan = plan_namespace(namespace, contents)
        for resource, ns, obj_name in plan.delete:
            rt = self._rt(resource)
            if rt is not None:
                await self._delete(rt, ns, obj_name, {"propagationPolicy": "Background"}, "namespace-controller")
        if plan.finalize:
            rt = self._rt(NAMESPACES)
            assert rt is not None
            updated = copy.deepcopy(namespace)
            finalizers = [f for f in updated["spec"].get("finalizers", []) if f != NAMESPACE_FINALIZER]
            updated["spec"]["finalizers"] = finalizers
            self.ops.update(rt, "", name, updated, self._opts("namespace-controller"), subresource="finalize")
        elif namespace["metadata"].get("deletionTimestamp") and contents:
            raise RequeueAfter(RETRY_S)

    async def _delete(self, rt: ResourceType, namespace: str, name: str, options: Obj, manager: str) -> None:
        try:
            self.ops.delete(rt, namespace, name, options, self._opts(manager))
        except ApiError as exc:
            if not exc.not_found:
                raise

    # garbage collection ------------------------------------------------------------------

    def _owner_state(self, uid: str) -> str:
        key = self.index.keys.get(uid)
        if key is None:
            return "absent"
        owner = self.ops.store.get(*key)
        if owner is None:
            return "absent"
        meta = owner["metadata"]
        if meta.get("deletionTimestamp"):
            finalizers = meta.get("finalizers") or []
            if ORPHAN_FINALIZER in finalizers:
                return "orphaning"
            if FOREGROUND_FINALIZER in finalizers:
                return "foreground"
        return "present"

    async def _reconcile_dependent(self, key: Key) -> None:
        obj = self.ops.store.get(*key)
        rt = self._rt(key[0])
        if obj is None or rt is None:
            return
        refs = obj["metadata"].get("ownerReferences") or []
        plan = plan_dependent(obj, {r.get("uid", ""): self._owner_state(r.get("uid", "")) for r in refs})
        if plan.delete:
            policy = "Foreground" if plan.foreground else "Background"
            await self._delete(rt, key[1], key[2], {"propagationPolicy": policy}, "garbage-collector")
        elif plan.drop_owners:
            updated = copy.deepcopy(obj)
            kept = [r for r in refs if r.get("uid") not in plan.drop_owners]
            if kept:
                updated["metadata"]["ownerReferences"] = kept
            else:
                updated["metadata"].pop("ownerReferences", None)
            self.ops.update(rt, key[1], key[2], updated, self._opts("garbage-collector"))

    async def _reconcile_owner(self, key: Key) -> None:
        obj = self.ops.store.get(*key)
        rt = self._rt(key[0])
        if obj is None or rt is None or not obj["metadata"].get("deletionTimestamp"):
            return
        finalizers = list(obj["metadata"].get("finalizers") or [])
        uid = obj["metadata"].get("uid", "")
        waiting = [k for k in self.index.dependents.get(uid, ()) if self.ops.store.get(*k) is not None]
        if ORPHAN_FINALIZER in finalizers:
            if waiting:
                raise RequeueAfter(RETRY_S)
            finalizers.remove(ORPHAN_FINALIZER)
        elif FOREGROUND_FINALIZER in finalizers:
            blocking = [k for k in waiting if self._blocks(self.ops.store.get(*k), uid)]
            if blocking:
                raise RequeueAfter(RETRY_S)
            finalizers.remove(FOREGROUND_FINALIZER)
        else:
            return
        updated = copy.deepcopy(obj)
        updated["metadata"]["finalizers"] = finalizers
        try:
            self.ops.update(rt, key[1], key[2], updated, self._opts("garbage-collector"))
        except ApiError as exc:
            if not exc.not_found:
                raise

    @staticmethod
    def _blocks(dependent: Obj | None, owner_uid: str) -> bool:
        if dependent is None:
            return False
        return any(r.get("uid") == owner_uid and r.get("blockOwnerDeletion")
                   for r in dependent["metadata"].get("ownerReferences") or [])

    # CRD cleanup -------------------------------------------------------------------------

    async def _reconcile_crd(self, name: str) -> None:
        store = self.ops.store
        crd = store.get(CRDS, "", name)
        if crd is None or not crd["metadata"].get("deletionTimestamp"):
            return
        spec = crd.get("spec") or {}
        group, plural = str(spec.get("group", "")), str((spec.get("names") or {}).get("plural", ""))
        resource = crds.storage_key(crd)
        rt = self._rt(resource)
        # A CRD never owns built-in objects, even one stored before such CRDs were refused; nor
        # objects another (remaining) CRD serves from the same store.
        shared = any(other["metadata"]["name"] != name and not other["metadata"].get("deletionTimestamp")
                     and crds.storage_key(other) == resource for other in store.list_objects(CRDS))
        remaining = [] if self.ops.registry.is_builtin(group, plural) or shared else store.list_objects(resource)
        if remaining and rt is not None:
            for obj in remaining:
                if not obj["metadata"].get("deletionTimestamp"):
                    await self._delete(rt, obj["metadata"].get("namespace", ""), obj["metadata"]["name"], {},
                                       "crd-cleanup")
            raise RequeueAfter(RETRY_S)
        crd_rt = self._rt(CRDS)
        assert crd_rt is not None
        updated = copy.deepcopy(crd)
        updated["metadata"]["finalizers"] = [f for f in crd["metadata"].get("finalizers", []) if f != CRD_FINALIZER]
        self.ops.update(crd_rt, "", name, updated, self._opts("crd-cleanup"))
