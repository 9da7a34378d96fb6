"""Cluster taints: the ones health puts on, the ones ClusterTaintPolicies put on, and tolerations.

Karmada's rules, which tether follows:

- Health (Karmada's cluster controller): `Ready=False` → `cluster.karmada.io/not-ready:NoSchedule`,
  `Ready=Unknown` → `cluster.karmada.io/unreachable:NoSchedule`; the other one goes, and both go
  when `Ready=True`. Health never adds NoExecute taints: those come from the user
  (`kubectl patch`) or from a ClusterTaintPolicy. Earlier tether versions wrote
  `cluster.tether.io/not-ready` / `/unreachable`; those are removed when seen, and a toleration
  naming either spelling tolerates the other, so policies written for either keep working.
- ClusterTaintPolicy (`policy.karmada.io/v1alpha1`, cluster-scoped): for every Cluster matching
  `targetClusters` (a ClusterAffinity; absent = every cluster), policies in creation order: when
  all `addOnConditions` match the Cluster's status conditions, each of `taints` is added unless a
  taint with the same key and effect is there already (`timeAdded` = now); then, when all
  `removeOnConditions` match, each taint with the same key and effect is removed. Empty condition
  lists never match. A condition matches with `In` when the Cluster has a condition of that type
  whose status is listed; `NotIn` when it has one whose status is not listed (a missing condition
  type matches neither). Deleting a policy leaves its taints where they are.
- Tolerations are corev1 tolerations (`ToleratesTaint`): an empty effect matches every effect, an
  empty key with `Exists` matches every taint, `Equal` (the default) compares values.
- NoExecute eviction timing (Karmada's taint manager): a cluster's NoExecute taints are either not
  all tolerated (evict now) or all tolerated; then the earliest `timeAdded + tolerationSeconds`
  over the tolerations used decides when (none with `tolerationSeconds`: never).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.objects.times import rfc3339, seconds_of

from ._util import items, mapping
from .model import Taint

NOT_READY = "cluster.karmada.io/not-ready"
UNREACHABLE = "cluster.karmada.io/unreachable"
LEGACY_NOT_READY = "cluster.tether.io/not-ready"
LEGACY_UNREACHABLE = "cluster.tether.io/unreachable"

# Each readiness taint key and the other spelling that means the same thing.
ALIASES: Mapping[str, str] = {
    NOT_READY: LEGACY_NOT_READY,
    LEGACY_NOT_READY: NOT_READY,
    UNREACHABLE: LEGACY_UNREACHABLE,
    LEGACY_UNREACHABLE: UNREACHABLE,
}
READINESS_TAINTS = frozenset(ALIASES)

NO_SCHEDULE, NO_EXECUTE, PREFER_NO_SCHEDULE = "NoSchedule", "NoExecute", "PreferNoSchedule"


# health ----------------------------------------------------------------------------------------


def plan_health_taints(taints: Sequence[Mapping[str, Any]], ready_status: str | None,
                       now: float) -> list[dict[str, Any]]:
    """The cluster's taints with the readiness taint matching `ready_status` (True, False,
    Unknown or None for no condition yet); other taints are kept as they are. Health owns only
    the NoSchedule readiness taints, as Karmada's cluster controller does: a NoExecute one with
    the same key comes from a ClusterTaintPolicy or a user, and stays (dropping it raced with the
    taint-policy controller, which adds it again only when the conditions change)."""
    wanted = {"False": NOT_READY, "Unknown": UNREACHABLE}.get(ready_status or "")
    out: list[dict[str, Any]] = []
    for taint in taints:
        key = taint.get("key")
        if key in READINESS_TAINTS and taint.get("effect") == NO_SCHEDULE and key != wanted:
            continue
        out.append(dict(taint))
    if wanted and not any(t.get("key") == wanted and t.get("effect") == NO_SCHEDULE for t in out):
        out.append({"key": wanted, "effect": NO_SCHEDULE, "timeAdded": rfc3339(now)})
    return out


# tolerations -----------------------------------------------------------------------------------


def taint_of(raw: Any) -> Taint:
    t = mapping(raw)
    return Taint(str(t.get("key", "") or ""), str(t.get("effect", "") or ""),
                 str(t.get("value", "") or ""), seconds_of(t.get("timeAdded")))


def taints_of(raw: Any) -> tuple[Taint, ...]:
    return tuple(taint_of(t) for t in items(raw))


def tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    """corev1.Toleration.ToleratesTaint, with readiness keys matching their other spelling."""
    effect = str(toleration.get("effect", "") or "")
    if effect and effect != taint.effect:
        return False
    key = str(toleration.get("key", "") or "")
    operator = str(toleration.get("operator", "") or "Equal")
    if key and key != taint.key and ALIASES.get(key) != taint.key:
        return False
    if operator == "Exists":
        return True
    if operator == "Equal":
        return str(toleration.get("value", "") or "") == taint.value and bool(key)
    return False


def taint_string(taint: Taint) -> str:
    """corev1.Taint.ToString: `key=value:effect`, or `key:effect` without a value."""
    value = f"={taint.value}" if taint.value else ""
    return f"{taint.key}{value}:{taint.effect}"


def untolerated(taints: Sequence[Taint], tolerations: Sequence[Any],
                effects: tuple[str, ...] = (NO_SCHEDULE, NO_EXECUTE)) -> Taint | None:
    """The first taint with one of `effects` that no toleration covers."""
    for taint in taints:
        if taint.effect in effects and not any(tolerates(mapping(t), taint) for t in tolerations):
            return taint
    return None


@dataclass(frozen=True)
class NoExecuteVerdict:
    """What the NoExecute taints of one cluster mean for one workload placed there."""

    evict: bool
    at_s: float | None = None  # when it is to be evicted if it is tolerated for now; None: never
    taint: Taint | None = None  # the taint that decides (for messages)


def no_execute_verdict(taints: Sequence[Taint], tolerations: Sequence[Any],
                       now: float) -> NoExecuteVerdict:
    """Karmada's taint manager decision for one (workload, cluster)."""
    no_execute = [t for t in taints if t.effect == NO_EXECUTE]
    if not no_execute:
        return NoExecuteVerdict(False)
    trigger: tuple[float, Taint] | None = None
    for taint in no_execute:
        used = next((mapping(t) for t in tolerations if tolerates(mapping(t), taint)), None)
        if used is None:
            return NoExecuteVerdict(True, now, taint)
        seconds = used.get("tolerationSeconds")
        if isinstance(seconds, int) and not isinstance(seconds, bool) and taint.added_s is not None:
            at = taint.added_s + max(seconds, 0)
            if trigger is None or at < trigger[0]:
                trigger = (at, taint)
    if trigger is None:
        return NoExecuteVerdict(False)
    if trigger[0] <= now:
        return NoExecuteVerdict(True, now, trigger[1])
    return NoExecuteVerdict(False, trigger[0], trigger[1])


# ClusterTaintPolicy ----------------------------------------------------------------------------


def condition_matches(conditions: Sequence[Any], match_conditions: Sequence[Any]) -> bool:
    """Every match condition holds for the Cluster's conditions (an empty list: no match)."""
    if not match_conditions:
        return False
    for raw in match_conditions:
        want = mapping(raw)
        values = {str(v) for v in items(want.get("statusValues"))}
        operator = want.get("operator")
        if operator not in ("In", "NotIn"):
            return False
        found = False
        for cond in (mapping(c) for c in conditions):
            if cond.get("type") != want.get("conditionType"):
                continue
            inside = str(cond.get("status")) in values
            found = inside if operator == "In" else not inside
        if not found:
            return False
    return True


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a.get("key") == b.get("key") and a.get("effect") == b.get("effect")


def apply_taint_policies(taints: Sequence[Mapping[str, Any]], conditions: Sequence[Any],
                         policies: Sequence[Mapping[str, Any]], now: float) -> list[dict[str, Any]]:
    """The Cluster's taints after the policies (already filtered to those targeting it and
    ordered by creation) have been applied."""
    out = [dict(t) for t in taints]
    for policy in policies:
        spec = mapping(policy.get("spec"))
        wanted = [mapping(t) for t in items(spec.get("taints"))]
        if condition_matches(conditions, items(spec.get("addOnConditions"))):
            for taint in wanted:
                if not any(_same(t, taint) for t in out):
                    added: dict[str, Any] = {"key": taint.get("key"), "effect": taint.get("effect"),
                                             "timeAdded": rfc3339(now)}
                    if taint.get("value"):
                        added["value"] = taint.get("value")
                    out.append(added)
        if condition_matches(conditions, items(spec.get("removeOnConditions"))):
            for taint in wanted:
                index = next((i for i, t in enumerate(out) if _same(t, taint)), None)
                if index is not None:
                    del out[index]
    return out


__all__ = [
    "NOT_READY",
    "UNREACHABLE",
    "NoExecuteVerdict",
    "apply_taint_policies",
    "condition_matches",
    "no_execute_verdict",
    "plan_health_taints",
    "taint_string",
    "taints_of",
    "tolerates",
    "untolerated",
]
