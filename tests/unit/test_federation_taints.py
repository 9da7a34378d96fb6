"""Cluster taints: health taints (Karmada's keys), tolerations, NoExecute timing, ClusterTaintPolicy."""

from __future__ import annotations

from typing import Any

import pytest

from tether.federation.model import Taint
from tether.federation.taints import (
    apply_taint_policies,
    condition_matches,
    no_execute_verdict,
    plan_health_taints,
    tolerates,
    untolerated,
)
from tether.objects.times import rfc3339

USER = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
T0 = 1_000_000.0


NOT_READY_NO_EXECUTE = {"key": "cluster.karmada.io/not-ready", "effect": "NoExecute"}


@pytest.mark.parametrize(
    ("taints", "ready", "keys"),
    [
        ([USER], "False", ["dedicated", "cluster.karmada.io/not-ready"]),
        ([USER], "Unknown", ["dedicated", "cluster.karmada.io/unreachable"]),
        ([USER], "True", ["dedicated"]),
        ([USER], None, ["dedicated"]),
        # not-ready → unreachable swaps the readiness taint
        ([{"key": "cluster.karmada.io/not-ready", "effect": "NoSchedule"}], "Unknown",
         ["cluster.karmada.io/unreachable"]),
        # the keys earlier tether versions wrote are replaced by Karmada's
        ([{"key": "cluster.tether.io/not-ready", "effect": "NoSchedule"}], "False",
         ["cluster.karmada.io/not-ready"]),
        ([{"key": "cluster.tether.io/unreachable", "effect": "NoSchedule"}], "True", []),
        # a NoExecute taint with a readiness key (a ClusterTaintPolicy's, a user's) is not
        # health's: it stays whatever the condition, beside health's own NoSchedule one
        ([NOT_READY_NO_EXECUTE], "False", ["cluster.karmada.io/not-ready", "cluster.karmada.io/not-ready"]),
        ([NOT_READY_NO_EXECUTE], "True", ["cluster.karmada.io/not-ready"]),
        ([NOT_READY_NO_EXECUTE], "Unknown", ["cluster.karmada.io/not-ready", "cluster.karmada.io/unreachable"]),
    ],
)
def test_health_taints(taints: list[dict[str, Any]], ready: str | None, keys: list[str]) -> None:
    planned = plan_health_taints(taints, ready, T0)
    assert [t["key"] for t in planned] == keys
    assert all(t["effect"] == "NoSchedule" for t in planned if t["key"] != "dedicated" and t not in taints)
    assert [t for t in taints if t["effect"] == "NoExecute"] == [t for t in planned if t["effect"] == "NoExecute"]
    assert plan_health_taints(planned, ready, T0 + 50) == planned  # stable: timeAdded kept


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"key": "k", "operator": "Exists"}, Taint("k", "NoExecute"), True),
        ({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, Taint("k", "NoExecute"),
         False),
        ({"key": "k", "value": "v"}, Taint("k", "NoSchedule", "v"), True),  # Equal by default
        ({"key": "k", "value": "w"}, Taint("k", "NoSchedule", "v"), False),
        ({"operator": "Exists"}, Taint("anything", "NoExecute"), True),
        ({"key": "cluster.tether.io/not-ready", "operator": "Exists"},
         Taint("cluster.karmada.io/not-ready", "NoSchedule"), True),
        ({"key": "cluster.karmada.io/unreachable", "operator": "Exists"},
         Taint("cluster.tether.io/unreachable", "NoSchedule"), True),
        ({"key": "cluster.karmada.io/unreachable", "operator": "Exists"},
         Taint("cluster.karmada.io/not-ready", "NoSchedule"), False),
    ],
)
def test_tolerates(toleration: dict[str, Any], taint: Taint, expected: bool) -> None:
    assert tolerates(toleration, taint) is expected


def test_untolerated_ignores_prefer_no_schedule() -> None:
    taints = (Taint("soft", "PreferNoSchedule"), Taint("hard", "NoSchedule"))
    assert untolerated(taints, []) == Taint("hard", "NoSchedule")
    assert untolerated(taints, [{"key": "hard", "operator": "Exists"}]) is None


DOWN = Taint("down", "NoExecute", added_s=T0)
MAINT = Taint("maintenance", "NoExecute", added_s=T0 + 10)


@pytest.mark.parametrize(
    ("taints", "tolerations", "now", "evict", "at"),
    [
        ((), [], T0, False, None),
        ((Taint("x", "NoSchedule"),), [], T0, False, None),  # only NoExecute evicts
        ((DOWN,), [], T0, True, T0),
        ((DOWN,), [{"key": "down", "operator": "Exists"}], T0 + 9999, False, None),  # forever
        ((DOWN,), [{"key": "down", "operator": "Exists", "tolerationSeconds": 30}], T0 + 5,
         False, T0 + 30),
        ((DOWN,), [{"key": "down", "operator": "Exists", "tolerationSeconds": 30}], T0 + 30,
         True, T0 + 30),
        # every NoExecute taint must be tolerated; the earliest expiry decides
        ((DOWN, MAINT), [{"key": "down", "operator": "Exists"}], T0, True, T0),
        ((DOWN, MAINT), [{"key": "down", "operator": "Exists", "tolerationSeconds": 100},
                         {"key": "maintenance", "operator": "Exists", "tolerationSeconds": 60}],
         T0 + 1, False, T0 + 70),
    ],
)
def test_no_execute_verdict(taints: tuple[Taint, ...], tolerations: list[dict[str, Any]],
                            now: float, evict: bool, at: float | None) -> None:
    verdict = no_execute_verdict(taints, tolerations, now)
    assert verdict.evict is evict
    assert verdict.at_s == at


READY_FALSE = [{"type": "Ready", "status": "False"}, {"type": "Other", "status": "True"}]


@pytest.mark.parametrize(
    ("conditions", "match", "expected"),
    [
        (READY_FALSE, [], False),  # empty never matches
        (READY_FALSE, [{"conditionType": "Ready", "operator": "In",
                        "statusValues": ["False", "Unknown"]}], True),
        (READY_FALSE, [{"conditionType": "Ready", "operator": "NotIn",
                        "statusValues": ["True"]}], True),
        (READY_FALSE, [{"conditionType": "Ready", "operator": "In", "statusValues": ["True"]}],
         False),
        # a missing condition type matches neither operator
        (READY_FALSE, [{"conditionType": "Gone", "operator": "NotIn", "statusValues": ["x"]}],
         False),
        # conditions are ANDed
        (READY_FALSE, [{"conditionType": "Ready", "operator": "In", "statusValues": ["False"]},
                       {"conditionType": "Other", "operator": "In", "statusValues": ["False"]}],
         False),
        (READY_FALSE, [{"conditionType": "Ready", "operator": "Bogus", "statusValues": []}], False),
    ],
)
def test_condition_matches(conditions: list[dict[str, Any]], match: list[dict[str, Any]],
                           expected: bool) -> None:
    assert condition_matches(conditions, match) is expected


def _policy(add: list[dict[str, Any]], remove: list[dict[str, Any]],
            *taints: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"addOnConditions": add, "removeOnConditions": remove, "taints": list(taints)}}


NOT_READY = [{"conditionType": "Ready", "operator": "In", "statusValues": ["False", "Unknown"]}]
READY = [{"conditionType": "Ready", "operator": "In", "statusValues": ["True"]}]
EVICT = {"key": "not-ready", "effect": "NoExecute"}


def test_taint_policy_adds_and_removes() -> None:
    policy = _policy(NOT_READY, READY, EVICT)
    added = apply_taint_policies([USER], [{"type": "Ready", "status": "False"}], [policy], T0)
    assert added == [USER, {"key": "not-ready", "effect": "NoExecute", "timeAdded": rfc3339(T0)}]
    # already there: unchanged (timeAdded kept)
    assert apply_taint_policies(added, [{"type": "Ready", "status": "Unknown"}], [policy],
                                T0 + 60) == added
    # Ready again: removed; other taints stay
    assert apply_taint_policies(added, [{"type": "Ready", "status": "True"}], [policy],
                                T0 + 90) == [USER]
    # a taint of the same key with another effect is a different taint
    other = [{"key": "not-ready", "effect": "NoSchedule"}]
    assert len(apply_taint_policies(other, [{"type": "Ready", "status": "False"}], [policy],
                                    T0)) == 2


def test_taint_policies_apply_in_order() -> None:
    first = _policy(NOT_READY, [], {"key": "a", "effect": "NoSchedule", "value": "v"})
    second = _policy(NOT_READY, NOT_READY, {"key": "a", "effect": "NoSchedule"})
    out = apply_taint_policies([], [{"type": "Ready", "status": "False"}], [first, second], T0)
    assert out == []  # the second removes what the first added (add before remove, in order)
    out = apply_taint_policies([], [{"type": "Ready", "status": "False"}], [first], T0)
    assert out == [{"key": "a", "effect": "NoSchedule", "value": "v", "timeAdded": rfc3339(T0)}]
