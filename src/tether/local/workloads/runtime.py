"""How workload controllers observe and write: one store watch feeding one Engine per controller.

A controller is keyed by its owner's (namespace, name). Its engine is enqueued when the owner
changes, when an object it controls changes (found through the controller ownerReference, in
the new or the previous version of the object), and when an orphan appears that it could adopt.

The store is in memory and a write is visible to the next read at once, so controllers read
the store directly and need none of the "expectations" bookkeeping that informer lag forces on
the real controllers: a reconcile that just created pods sees them on its next run, and on its
next batch (`create_in_batches` plans again before each one).

A pass is bounded as kube-controller-manager bounds a sync: at most BURST_PER_PASS pods created
(in slow-start batches 1, 2, 4, ...) and BURST_PER_PASS deleted, then the key is queued again
behind the others; the desired count is read again before every batch, so scaling an owner
down or deleting it stops creation within the batch under way.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from tether.engine import Engine
from tether.local import events
from tether.local.errors import ApiError
from tether.local.operations import Operations, WriteOptions
from tether.local.resources import ResourceType
from tether.local.store import Event, follow
from tether.local.workloads.common import (
    BURST_PER_PASS,
    Note,
    NsName,
    controller_of,
    meta,
    owner_ref,
    selector_matches,
    slow_start_batches,
)
from tether.objects import Obj

log = logging.getLogger(__name__)

PODS = "/pods"
NODES = "/nodes"

T = TypeVar("T")


class Writer:
    """Writes through Operations as `manager`, so validation, defaults and managedFields apply
    to controllers as to any client."""

    def __init__(self, ops: Operations, manager: str) -> None:
        self.ops = ops
        self.manager = manager
        self.opts = WriteOptions(manager=manager, user=f"system:serviceaccount:kube-system:{manager}")

    def rt(self, storage_key: str) -> ResourceType:
        rt = self.ops.registry.by_storage_key(storage_key)
        if rt is None:
            raise LookupError(f"no resource type for {storage_key}")
        return rt

    def create(self, storage_key: str, body: Obj) -> Obj | None:
        """The created object, or None when the name is taken (a fixed-name pod still there)."""
        namespace = meta(body).get("namespace", "")
        try:
            return self.ops.create(self.rt(storage_key), namespace, copy.deepcopy(body), self.opts)
        except ApiError as exc:
            if exc.code == 409:
                return None
            raise

    def delete(self, storage_key: str, obj: Obj) -> bool:
        """Delete this very object (uid precondition); gone or replaced already counts as done."""
        m = meta(obj)
        options = {"preconditions": {"uid": m.get("uid")}, "propagationPolicy": "Background"}
        try:
            self.ops.delete(self.rt(storage_key), m.get("namespace", ""), m.get("name", ""), options, self.opts)
        except ApiError as exc:
            if exc.code in (404, 409):
                return False
            raise
        return True

    def update(self, storage_key: str, new: Obj) -> Obj:
        """Write `new` (a modified copy of a stored object); its resourceVersion guards it, and a
        conflict raises, so the engine retries with a fresh observation."""
        m = meta(new)
        return self.ops.update(self.rt(storage_key), m.get("namespace", ""), m.get("name", ""), new, self.opts)

    def write_status(self, storage_key: str, current: Obj, status: Obj) -> Obj:
        if current.get("status") == status:
            return current
        new = copy.deepcopy(current)
        new["status"] = status
        m = meta(new)
        return self.ops.update(self.rt(storage_key), m.get("namespace", ""), m.get("name", ""), new, self.opts,
                               subresource="status")

    def set_controller(self, storage_key: str, namespace: str, name: str, owner: Obj | None,
                       owner_uid: str) -> None:
        """Adopt (owner given) or release (None) one object; skipped if it changed hands since."""
        current = self.ops.store.get(storage_key, namespace, name)
        if current is None:
            return
        ref = controller_of(current)
        refs = [r for r in meta(current).get("ownerReferences") or [] if r is not ref]
        if owner is not None:
            if ref is not None:
                return
            refs.append(owner_ref(owner))
        elif ref is None or ref.get("uid") != owner_uid:
            return
        new = copy.deepcopy(current)
        if refs:
            new["metadata"]["ownerReferences"] = refs
        else:
            new["metadata"].pop("ownerReferences", None)
        try:
            self.update(storage_key, new)
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise

    def record(self, involved: Obj, note: Note) -> None:
        events.record(self.ops, involved, event_type=note.event_type, reason=note.reason,
                      message=note.message, component=self.manager)


class Controller(ABC):
    """One workload kind: which keys an event touches, and how to reconcile a key."""

    manager: str  # field manager and engine name, e.g. "replicaset-controller"
    resource: str  # storage key of the owner type, e.g. "apps/replicasets"
    kind: str
    children: str = PODS  # storage key of what it creates
    also_watches: tuple[str, ...] = ()  # other storage keys `keys_for` reacts to
    adopts_orphans: bool = False

    def __init__(self, ops: Operations) -> None:
        self.ops = ops
        self.store = ops.store
        self.writer = Writer(ops, self.manager)
        self.engine: Engine[NsName] = Engine(self.manager, self.reconcile, workers=2)

    @property
    def group(self) -> str:
        return self.resource.split("/", 1)[0]

    def owns(self, ref: Any) -> bool:
        if not isinstance(ref, dict) or ref.get("kind") != self.kind:
            return False
        api_version = str(ref.get("apiVersion", ""))
        return (api_version.split("/", 1)[0] if "/" in api_version else "") == self.group

    def keys_for(self, event: Event) -> Iterable[NsName]:
        if event.resource == self.resource:
            yield (event.namespace, event.name)
            return
        if event.resource != self.children:
            return
        refs = [controller_of(o) for o in (event.obj, event.prev) if o is not None]
        for ref in refs:
            if ref is not None and self.owns(ref):
                yield (event.namespace, str(ref.get("name", "")))
        if self.adopts_orphans and event.type != "DELETED" and all(r is None for r in refs):
            labels = meta(event.obj).get("labels") or {}
            for owner in self.store.list_objects(self.resource, event.namespace):
                if selector_matches((owner.get("spec") or {}).get("selector"), labels):
                    yield (event.namespace, meta(owner).get("name", ""))

    def children_in(self, namespace: str) -> list[Obj]:
        return self.store.list_objects(self.children, namespace)

    async def create_in_batches(self, key: NsName, pending: Callable[[], Sequence[T]],
                                create: Callable[[T], bool]) -> int:
        """Create what `pending()` lists, in slow-start batches, at most BURST_PER_PASS.

        `pending` plans again from the stored owner and children (an empty list once the owner
        is gone, deleting or scaled down); it runs before every batch, so creation stops
        within a batch of such a change. `create` makes one child; False (or an error) ends
        the pass, as a failed batch ends the real slowStartBatch. Returns how many were made.
        """
        made = 0
        for size in slow_start_batches(BURST_PER_PASS):
            todo = pending()
            if not todo:
                return made
            for item in todo[:size]:
                if not create(item):
                    return made
                made += 1
                await asyncio.sleep(0)  # one pod at a time, the API server's loop runs between
        if pending():
            self.engine.enqueue(key)  # the rest in a later pass, after the keys waiting now
        return made

    def bounded_deletes(self, key: NsName, names: Sequence[str]) -> Sequence[str]:
        """At most BURST_PER_PASS of `names`; the key is queued again for the rest."""
        if len(names) > BURST_PER_PASS:
            self.engine.enqueue(key)
        return names[:BURST_PER_PASS]

    @abstractmethod
    async def reconcile(self, key: NsName) -> None: ...


class WorkloadControllers:
    """The component a local cluster runs: every workload controller, fed from one watch."""

    def __init__(self, ops: Operations, controllers: list[Controller]) -> None:
        self.ops = ops
        self.controllers = controllers

    def _enqueue_all(self) -> None:
        for controller in self.controllers:
            for owner in self.ops.store.list_objects(controller.resource):
                m = meta(owner)
                controller.engine.enqueue((m.get("namespace", ""), m.get("name", "")))

    def dispatch(self, event: Event) -> None:
        for controller in self.controllers:
            for key in controller.keys_for(event):
                controller.engine.enqueue(key)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for controller in self.controllers:
                group.create_task(controller.engine.run())
            group.create_task(self._feed())

    async def _feed(self) -> None:
        watched = {r for c in self.controllers for r in (c.resource, c.children, *c.also_watches)}
        await follow(self.ops.store, None, None, on_event=self.dispatch, resync=self._enqueue_all,
                     resources=watched)
