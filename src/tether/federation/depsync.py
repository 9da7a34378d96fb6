"""Karmada's `propagateDeps` on the hub: each dependency's Works, reference-counted.

What needs what is read from the template Works' `work.tether.io/requires` annotations (see
`dependencies`), so it survives a hub restart with the Works themselves. A dependency is
reconciled when a Work requiring it changes or goes, when its own Works change, and when the
object itself changes on the hub (ConfigMaps, Secrets, ServiceAccounts and
PersistentVolumeClaims are watched once anything requires a dependency): an edit reaches the
members at once, without waiting for a resync. Its Works follow the clusters whose (not
deleting) Works require it; with none left they are deleted and the copies go.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tether.engine import Engine, RequeueAfter
from tether.kube import Informer, KubeClient, NotFound, ObjectKey, WatchEvent

from . import works as W
from ._util import start_in
from .dependencies import (
    DEPENDENCY_DIALECT,
    DEPENDENCY_KINDS,
    REQUIRES_ANNOTATION,
    decode_requires,
    dependency_plan,
    dependency_works,
)
from .model import PropagationPlan, ResourceRef
from .workinfo import WorkInfo

if TYPE_CHECKING:
    from .propagation import HubInformers

log = logging.getLogger(__name__)


class WorkWriter(Protocol):
    async def write_works(self, desired: list[W.DesiredWork], existing: list[WorkInfo],
                          plan: PropagationPlan) -> None: ...

    async def delete_work(self, work: WorkInfo, *, preserve: bool | None = None) -> None: ...


@dataclass(frozen=True)
class _Requirer:
    template: ResourceRef
    cluster: str
    needs: frozenset[ResourceRef]
    overwrite: bool
    preserve: bool


@dataclass
class DependencySync:
    host: KubeClient
    shared: HubInformers
    writer: WorkWriter
    # called with the templates requiring a dependency that appeared or went (their status)
    on_dependency: Callable[[Iterable[ResourceRef]], None] = lambda _refs: None
    engine: Engine[ResourceRef] = field(init=False)
    informers: dict[str, Informer] = field(default_factory=dict)
    _requirers: dict[ObjectKey, _Requirer] = field(default_factory=dict)
    _dep_works: dict[ResourceRef, set[ObjectKey]] = field(default_factory=dict)
    _group: asyncio.TaskGroup | None = None

    def __post_init__(self) -> None:
        self.engine = Engine("karmada-dependencies", self.reconcile)

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                group.create_task(self.engine.run())
                if self._requirers or self._dep_works:
                    self._watch()
        finally:
            self._group = None

    def _watch(self) -> None:
        if self.informers or self._group is None:
            return
        for kind in DEPENDENCY_KINDS:
            informer = Informer(self.host, "v1", kind, on_event=self._on_object)
            self.informers[kind] = informer
            start_in(self._group, informer.run())

    # what requires what --------------------------------------------------------------------

    def on_work(self, event: WatchEvent) -> None:
        """Every Work event of the hub (template Works and dependency Works)."""
        work = self.shared.work_info(event.key)
        found = work.origin if work is not None else None
        if work is None or found is None:
            return
        dialect, ref = found
        if dialect == DEPENDENCY_DIALECT:
            keys = self._dep_works.setdefault(ref, set())
            if event.type == "DELETED":
                keys.discard(event.key)
                if not keys:
                    del self._dep_works[ref]
            else:
                keys.add(event.key)
            self._watch()
            self.engine.enqueue(ref)
            return
        if dialect != "karmada":
            return
        before = self._requirers.pop(event.key, None)
        text = work.annotations.get(REQUIRES_ANNOTATION, "")
        deleting = event.type == "DELETED" or work.deleting
        needs = frozenset() if deleting else decode_requires(text, ref.namespace)
        if needs:
            self._requirers[event.key] = _Requirer(
                ref, work.cluster, needs, work.overwrite, work.preserve_on_deletion)
            self._watch()
        for dep in (before.needs if before else frozenset()) | needs:
            self.engine.enqueue(dep)

    def _on_object(self, event: WatchEvent) -> None:
        obj = event.object
        ref = ResourceRef("v1", str(obj.get("kind")), event.key.namespace, event.key.name)
        requiring = {r.template for r in self._requirers.values() if ref in r.needs}
        if requiring or ref in self._dep_works:
            self.engine.enqueue(ref)
        if requiring and event.type in ("ADDED", "DELETED"):
            self.on_dependency(requiring)

    async def missing(self, refs: Iterable[ResourceRef]) -> list[ResourceRef]:
        """Those of `refs` the hub does not have: from the caches once they are listed, else
        asking the host."""
        out = []
        for ref in refs:
            informer = self.informers.get(ref.kind)
            if informer is not None and informer.synced:
                if informer.get(ref.namespace, ref.name) is None:
                    out.append(ref)
                continue
            try:
                await self.host.get(ref.api_version, ref.kind, ref.name, ref.namespace)
            except NotFound:
                out.append(ref)
        return out

    # reconcile -----------------------------------------------------------------------------

    async def reconcile(self, ref: ResourceRef) -> None:
        requirers = [r for r in self._requirers.values() if ref in r.needs]
        existing = [w for k in sorted(self._dep_works.get(ref, ()))
                    if (w := self.shared.work_info(k)) is not None]
        if not requirers:
            await _all(self.writer.delete_work(w) for w in existing)
            return
        informer = self.informers.get(ref.kind)
        if informer is None or not informer.synced:
            raise RequeueAfter(0.2)
        obj = informer.get(ref.namespace, ref.name)
        if obj is None:  # gone from the hub (or never there: the template reports it)
            await _all(self.writer.delete_work(w) for w in existing)
            return
        plan = dependency_plan(obj, ref, (r.cluster for r in requirers),
                               overwrite=any(r.overwrite for r in requirers),
                               preserve=any(r.preserve for r in requirers))
        await self.writer.write_works(dependency_works(plan), existing, plan)


async def _all(calls: Iterable[Awaitable[Any]]) -> None:
    for call in calls:
        await call


__all__ = ["DependencySync"]
