"""ClusterRole aggregation, as kube-controller-manager's clusterrole-aggregation controller.

A ClusterRole with an `aggregationRule` gets as its rules the union of the rules of every other
ClusterRole one of its `clusterRoleSelectors` selects, taken in name order, each distinct rule
once. Whenever a ClusterRole changes, every aggregated ClusterRole is looked at again; chains
(`admin` gathers `edit`, which gathers `view`) converge because each update is itself a change.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Sequence
from typing import Any

from tether.engine import Engine
from tether.local.errors import ApiError
from tether.local.operations import Operations, WriteOptions
from tether.local.rbac.index import CLUSTER_ROLES
from tether.local.store import Event, follow
from tether.objects import Obj, selectors

log = logging.getLogger(__name__)

MANAGER = "clusterrole-aggregation-controller"


def aggregated_rules(role: Obj, roles: Sequence[Obj]) -> list[Any] | None:
    """The rules `role` must have, or None when it aggregates nothing (no aggregationRule)."""
    rule = role.get("aggregationRule")
    if not isinstance(rule, dict):
        return None
    wanted = []
    for raw in rule.get("clusterRoleSelectors") or []:
        try:
            wanted.append(selectors.label_selector_from_dict(raw if isinstance(raw, dict) else {}))
        except selectors.SelectorError:
            continue  # an unusable selector selects nothing, as upstream
    name = (role.get("metadata") or {}).get("name")
    chosen = [
        other for other in roles
        if (other.get("metadata") or {}).get("name") != name
        and any(s.matches((other.get("metadata") or {}).get("labels") or {}) for s in wanted)
    ]
    chosen.sort(key=lambda r: str((r.get("metadata") or {}).get("name", "")))
    rules: list[Any] = []
    for other in chosen:
        for candidate in other.get("rules") or []:
            if candidate not in rules:
                rules.append(copy.deepcopy(candidate))
    return rules


class AggregationController:
    def __init__(self, ops: Operations) -> None:
        self.ops = ops
        self.engine: Engine[str] = Engine(MANAGER, self._reconcile)
        self._opts = WriteOptions(manager=MANAGER, user=f"system:serviceaccount:kube-system:{MANAGER}")

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.engine.run())
            group.create_task(follow(self.ops.store, CLUSTER_ROLES, None, on_event=self._on_event,
                                     resync=self._resync))

    def _on_event(self, event: Event) -> None:
        # Any change can alter what a selector picks: look at every aggregated role again.
        self._resync()

    def _resync(self) -> None:
        for role in self.ops.store.list_objects(CLUSTER_ROLES):
            if isinstance(role.get("aggregationRule"), dict):
                self.engine.enqueue(str(role["metadata"]["name"]))

    async def _reconcile(self, name: str) -> None:
        store = self.ops.store
        role = store.get(CLUSTER_ROLES, "", name)
        if role is None:
            return
        rules = aggregated_rules(role, store.list_objects(CLUSTER_ROLES))
        if rules is None or rules == (role.get("rules") or []):
            return
        updated = copy.deepcopy(role)
        updated["rules"] = rules
        rt = self.ops.registry.by_storage_key(CLUSTER_ROLES)
        assert rt is not None
        try:
            self.ops.update(rt, "", name, updated, self._opts)
        except ApiError as exc:
            if exc.code not in (404, 409):  # deleted or changed meanwhile: the next event says
                raise
