"""Pure plans of the built-in controllers: namespace termination and garbage collection."""

from __future__ import annotations

from typing import Any

import pytest

from tether.local.controllers import (
    DependentPlan,
    NamespacePlan,
    OwnerIndex,
    plan_dependent,
    plan_namespace,
)


def ns(*, deleting: bool, finalizers: list[str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "x"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"finalizers": ["kubernetes"] if finalizers is None else finalizers}}


def obj(name: str, *, deleting: bool = False, owners: list[str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "x"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if owners:
        meta["ownerReferences"] = [{"uid": u, "kind": "ConfigMap", "name": u} for u in owners]
    return {"metadata": meta}


def test_active_namespace_needs_nothing() -> None:
    assert plan_namespace(ns(deleting=False), [(("/configmaps", "x", "a"), obj("a"))]) == NamespacePlan()


def test_terminating_namespace_deletes_content_not_yet_deleting() -> None:
    contents = [(("/configmaps", "x", "a"), obj("a")), (("/secrets", "x", "b"), obj("b", deleting=True))]
    assert plan_namespace(ns(deleting=True), contents) == NamespacePlan(delete=(("/configmaps", "x", "a"),))


def test_empty_terminating_namespace_is_finalized_once() -> None:
    assert plan_namespace(ns(deleting=True), []) == NamespacePlan(finalize=True)
    assert plan_namespace(ns(deleting=True, finalizers=[]), []) == NamespacePlan()


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ({"o1": "present"}, DependentPlan()),
        ({"o1": "absent"}, DependentPlan(delete=True)),
        ({"o1": "foreground"}, DependentPlan(delete=True, foreground=True)),
        ({"o1": "orphaning"}, DependentPlan(drop_owners=("o1",))),
        ({"o1": "absent", "o2": "present"}, DependentPlan(drop_owners=("o1",))),
        ({"o1": "orphaning", "o2": "present"}, DependentPlan(drop_owners=("o1",))),
        ({"o1": "absent", "o2": "foreground"}, DependentPlan(delete=True, foreground=True)),
    ],
)
def test_dependent_plans(states: dict[str, str], expected: DependentPlan) -> None:
    assert plan_dependent(obj("d", owners=list(states)), states) == expected


def test_dependent_already_deleting_is_left_alone() -> None:
    assert plan_dependent(obj("d", deleting=True, owners=["o1"]), {"o1": "absent"}) == DependentPlan()


def test_owner_index_follows_changes() -> None:
    index = OwnerIndex()
    key = ("/configmaps", "x", "d")
    index.observe(key, obj("d", owners=["o1", "o2"]))
    assert index.dependents == {"o1": {key}, "o2": {key}}
    index.observe(key, obj("d", owners=["o2"]))
    assert index.dependents == {"o2": {key}}
    index.observe(key, None)
    assert index.dependents == {}
