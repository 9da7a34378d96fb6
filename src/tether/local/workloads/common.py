"""Pure helpers the workload controllers share: pods' state, owner references, hashes, times.

Nothing here reads the store or writes; everything is a function of its arguments, so the
plans built on it can be tested as tables.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tether.objects import Obj
from tether.objects.selectors import SelectorError, label_selector_from_dict
from tether.objects.times import parse_time

NsName = tuple[str, str]  # (namespace, name) of an owner: the key every workload engine uses

# Pods one reconcile of a controller creates or deletes at most (kube-controller-manager's
# burstReplicas); the rest waits for the next pass, behind other keys.
BURST_PER_PASS = 500

GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
TEMPLATE_HASH_LABEL = "pod-template-hash"
REVISION_HASH_LABEL = "controller-revision-hash"


@dataclass(frozen=True)
class Note:
    """An Event a plan asks for: recorded on the owner once the change it describes is made."""

    reason: str
    message: str
    event_type: str = "Normal"


# time ----------------------------------------------------------------------------------------




# pods ----------------------------------------------------------------------------------------


def meta(obj: Mapping[str, Any]) -> Obj:
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def terminating(obj: Obj) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def finished(pod: Obj) -> bool:
    return phase(pod) in ("Succeeded", "Failed")


def active(pod: Obj) -> bool:
    """Counts toward a controller's replicas: not going away and not run to an end."""
    return not terminating(pod) and not finished(pod)


def condition(obj: Obj, kind: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == kind:
            return cond
    return None


def ready(pod: Obj) -> bool:
    cond = condition(pod, "Ready")
    return cond is not None and cond.get("status") == "True"


def ready_since(pod: Obj) -> dt.datetime | None:
    """When the pod became Ready. A status without lastTransitionTime (a hand-written one, as
    tests patch) falls back to startTime or creation, so minReadySeconds still ends."""
    cond = condition(pod, "Ready")
    if cond is None or cond.get("status") != "True":
        return None
    status = pod.get("status") or {}
    for candidate in (cond.get("lastTransitionTime"), status.get("startTime"),
                      meta(pod).get("creationTimestamp")):
        moment = parse_time(candidate)
        if moment is not None:
            return moment
    return dt.datetime.min.replace(tzinfo=dt.UTC)


def available_in(pod: Obj, min_ready_s: int, now: dt.datetime) -> float | None:
    """Seconds until the pod counts as available: 0 when it is, None when it is not ready."""
    if not ready(pod):
        return None
    if min_ready_s <= 0:
        return 0.0
    since = ready_since(pod)
    assert since is not None
    return max(0.0, (since + dt.timedelta(seconds=min_ready_s) - now).total_seconds())


def available(pod: Obj, min_ready_s: int, now: dt.datetime) -> bool:
    return available_in(pod, min_ready_s, now) == 0.0


def next_available(pods: Iterable[Obj], min_ready_s: int, now: dt.datetime) -> float | None:
    """The soonest a ready-but-not-yet-available pod becomes available: when to look again."""
    waits = [w for w in (available_in(p, min_ready_s, now) for p in pods) if w]
    return min(waits) if waits else None


def slow_start_batches(budget: int, initial: int = 1) -> Iterator[int]:
    """Batch sizes 1, 2, 4, ... adding up to `budget`, as the real controllers' slowStartBatch:
    a few pods first, more only while creating keeps succeeding and is still wanted."""
    size = max(initial, 1)
    while budget > 0:
        take = min(size, budget)
        yield take
        budget -= take
        size *= 2


# owners --------------------------------------------------------------------------------------


def owner_ref(owner: Obj) -> Obj:
    return {
        "apiVersion": owner.get("apiVersion", ""),
        "kind": owner.get("kind", ""),
        "name": meta(owner).get("name", ""),
        "uid": meta(owner).get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_of(obj: Obj) -> Obj | None:
    for ref in meta(obj).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return ref
    return None


def controlled_by(obj: Obj, owner: Obj) -> bool:
    ref = controller_of(obj)
    return ref is not None and ref.get("uid") == meta(owner).get("uid")


def selector_matches(selector: Any, labels: Mapping[str, str] | None) -> bool:
    """An empty or unparsable selector selects nothing: a controller must never grab everything."""
    if not isinstance(selector, dict) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return False
    try:
        return label_selector_from_dict(selector).matches(labels or {})
    except SelectorError:
        return False


@dataclass(frozen=True)
class Claim:
    owned: tuple[Obj, ...]
    adopt: tuple[str, ...] = ()  # names of orphans that match: they get our controller reference
    release: tuple[str, ...] = ()  # names of ours that no longer match: they lose it


def claim(owner: Obj, selector: Any, candidates: Iterable[Obj]) -> Claim:
    """Which candidates the owner controls, as the real ControllerRefManager decides.

    Adopted orphans are counted as owned at once, so one reconcile does not create pods for
    replicas it is about to adopt.
    """
    owned: list[Obj] = []
    adopt: list[str] = []
    release: list[str] = []
    deleting = terminating(owner)
    for obj in candidates:
        labels = meta(obj).get("labels") or {}
        ref = controller_of(obj)
        if ref is not None:
            if ref.get("uid") != meta(owner).get("uid"):
                continue
            if selector_matches(selector, labels) or terminating(obj):
                owned.append(obj)
            elif not deleting:
                release.append(meta(obj).get("name", ""))
        elif not deleting and not terminating(obj) and selector_matches(selector, labels):
            owned.append(obj)
            adopt.append(meta(obj).get("name", ""))
    return Claim(tuple(owned), tuple(adopt), tuple(release))


# templates -----------------------------------------------------------------------------------


def fnv32a(data: bytes) -> int:
    value = 0x811C9DC5
    for byte in data:
        value ^= byte
        value = (value * 0x01000193) & 0xFFFFFFFF
    return value


def safe_encode(text: str) -> str:
    """The apimachinery SafeEncodeString: no vowels, so no words, and no look-alike 0/1/3."""
    return "".join(GENERATE_ALPHABET[ord(c) % len(GENERATE_ALPHABET)] for c in text)


def template_hash(template: Any, collision_count: int | None = None) -> str:
    """A stable, short (≤10 characters) hash of a pod template, as pod-template-hash uses.

    FNV-32a of the canonical JSON (the real one hashes Go's printing of the struct, which we
    cannot reproduce; stability across restarts is what matters), then the decimal digits
    encoded into the safe alphabet.
    """
    payload = json.dumps(template, sort_keys=True, separators=(",", ":"))
    if collision_count:
        payload += f"#{collision_count}"
    return safe_encode(str(fnv32a(payload.encode())))


def without_label(template: Any, key: str) -> Any:
    if not isinstance(template, dict):
        return template
    copied = copy.deepcopy(template)
    labels = (copied.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(key, None)
        if not labels:
            copied["metadata"].pop("labels")
    return copied


def pod_from_template(owner: Obj, template: Any, *, extra_labels: Mapping[str, str] | None = None) -> Obj:
    """A pod body as a controller creates it: the template's metadata and spec, our ownerRef."""
    template = template if isinstance(template, dict) else {}
    tmeta = template.get("metadata") or {}
    labels = {**(tmeta.get("labels") or {}), **(extra_labels or {})}
    pod_meta: Obj = {"namespace": meta(owner).get("namespace", "default"), "ownerReferences": [owner_ref(owner)]}
    if labels:
        pod_meta["labels"] = labels
    for key in ("annotations", "finalizers"):
        if tmeta.get(key):
            pod_meta[key] = copy.deepcopy(tmeta[key])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta,
            "spec": copy.deepcopy(template.get("spec") or {})}


# int-or-percent ------------------------------------------------------------------------------


def scaled(value: Any, total: int, *, round_up: bool) -> int:
    """An IntOrString against `total`: "25%" of 10 is 3 rounding up, 2 rounding down."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, str) and value.endswith("%"):
        try:
            percent = int(value[:-1])
        except ValueError:
            return 0
        exact = percent * total / 100
        return max(math.ceil(exact) if round_up else math.floor(exact), 0)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return 0


def int_field(obj: Any, *path: str, default: int = 0) -> int:
    node: Any = obj
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, int) and not isinstance(node, bool) else default


# conditions ----------------------------------------------------------------------------------


def set_condition(conditions: list[Obj], new: Obj, now: str, *, update_time: bool = False) -> list[Obj]:
    """Conditions with `new` put in; times move only when the status (or reason) changes, so a
    reconcile that changes nothing writes nothing."""
    out: list[Obj] = []
    placed = False
    for cond in conditions:
        if cond.get("type") != new["type"]:
            out.append(cond)
            continue
        placed = True
        merged = dict(new)
        same_status = cond.get("status") == new["status"]
        merged["lastTransitionTime"] = cond.get("lastTransitionTime", now) if same_status else now
        if update_time:
            same = same_status and cond.get("reason") == new.get("reason") and cond.get("message") == new.get("message")
            merged["lastUpdateTime"] = cond.get("lastUpdateTime", now) if same else now
        out.append(merged)
    if not placed:
        fresh = dict(new)
        fresh["lastTransitionTime"] = now
        if update_time:
            fresh["lastUpdateTime"] = now
        out.append(fresh)
    return out
