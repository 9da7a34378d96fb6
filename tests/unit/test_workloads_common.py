"""Shared workload helpers: int-or-percent rounding, template hashes, claims, availability."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tether.local.workloads.common import (
    GENERATE_ALPHABET,
    available,
    claim,
    scaled,
    set_condition,
    template_hash,
    without_label,
)

NOW = dt.datetime(2026, 1, 1, 0, 1, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("value", "total", "up", "expected"),
    [
        ("25%", 10, True, 3),
        ("25%", 10, False, 2),
        ("25%", 1, True, 1),
        ("25%", 1, False, 0),
        ("50%", 3, True, 2),
        ("100%", 4, False, 4),
        (2, 10, True, 2),
        ("3", 10, False, 3),
        ("x%", 10, True, 0),
        (True, 10, True, 0),
    ],
)
def test_scaled_int_or_percent(value: Any, total: int, up: bool, expected: int) -> None:
    assert scaled(value, total, round_up=up) == expected


def test_template_hash_is_stable_short_and_safe() -> None:
    template = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    first = template_hash(template)
    assert first == template_hash({"spec": template["spec"], "metadata": template["metadata"]})
    assert 1 <= len(first) <= 10 and set(first) <= set(GENERATE_ALPHABET)
    assert template_hash(template, 1) != first
    changed = {**template, "spec": {"containers": [{"name": "c", "image": "nginx:2"}]}}
    assert template_hash(changed) != first


def test_without_label_leaves_the_original() -> None:
    template = {"metadata": {"labels": {"app": "a", "pod-template-hash": "x"}}}
    assert without_label(template, "pod-template-hash") == {"metadata": {"labels": {"app": "a"}}}
    assert template["metadata"]["labels"]["pod-template-hash"] == "x"


def pod(name: str, *, owner: str | None = None, labels: dict[str, str] | None = None,
        deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels if labels is not None else {"app": "a"}}
    if owner:
        meta["ownerReferences"] = [{"uid": owner, "controller": True, "kind": "ReplicaSet", "name": owner}]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


def test_claim_owns_adopts_releases_and_ignores_others() -> None:
    owner = {"metadata": {"uid": "me", "name": "rs"}}
    selector = {"matchLabels": {"app": "a"}}
    pods = [
        pod("mine", owner="me"),
        pod("orphan"),
        pod("theirs", owner="other"),
        pod("relabelled", owner="me", labels={"app": "b"}),
        pod("orphan-going", deleting=True),
        pod("orphan-other-app", labels={"app": "b"}),
    ]
    result = claim(owner, selector, pods)
    assert [p["metadata"]["name"] for p in result.owned] == ["mine", "orphan"]
    assert result.adopt == ("orphan",)
    assert result.release == ("relabelled",)


def test_empty_selector_claims_nothing() -> None:
    owner = {"metadata": {"uid": "me"}}
    assert claim(owner, {}, [pod("orphan")]).owned == ()


@pytest.mark.parametrize(
    ("since", "min_ready", "expected"),
    [(None, 0, True), ("2026-01-01T00:00:50Z", 5, True), ("2026-01-01T00:00:58Z", 5, False)],
)
def test_available_honours_min_ready_seconds(since: str | None, min_ready: int, expected: bool) -> None:
    cond: dict[str, Any] = {"type": "Ready", "status": "True"}
    if since:
        cond["lastTransitionTime"] = since
    p = {"metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"}, "status": {"conditions": [cond]}}
    assert available(p, min_ready, NOW) is expected


def test_set_condition_keeps_times_unless_something_changes() -> None:
    first = set_condition([], {"type": "A", "status": "True", "reason": "R"}, "t1", update_time=True)
    same = set_condition(first, {"type": "A", "status": "True", "reason": "R"}, "t2", update_time=True)
    assert same == first
    moved = set_condition(first, {"type": "A", "status": "False", "reason": "S"}, "t3", update_time=True)
    assert moved[0]["lastTransitionTime"] == "t3" and moved[0]["lastUpdateTime"] == "t3"
