"""What Karmada keeps in a ResourceBinding, tether keeps on the template's Works and template.

Each Work of a Karmada template carries (annotations, written with the Work, so they cost no
extra write and survive a hub restart):
- `work.tether.io/replicas`: the replicas scheduled to its cluster (binding `spec.clusters`);
- `work.tether.io/applied-placement`: a hash of the placement that schedule was made for
  (Karmada's `policy.karmada.io/applied-placement`), so a placement change is seen;
- `work.tether.io/affinity-name`: the `clusterAffinities` group used
  (`status.schedulerObservedAffinityName`);
- `work.tether.io/policy`: the policy that claimed the template (`<Kind>/<namespace>/<name>`,
  Karmada's claim labels), for preemption;
- `work.tether.io/policy-hash`, `work.tether.io/template-hash`: what the Work was built from,
  under a policy with `activationPreference: Lazy` (only there: elsewhere an edit of the policy
  that changes no manifest rewrites no Work).

Graceful eviction tasks must outlive the evicted cluster's Work (purge mode Directly deletes it
at once), so they live on the template, in the annotation `tether.io/graceful-eviction-tasks`
(a JSON list in Karmada's GracefulEvictionTask shape), written only when tasks change.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._util import mapping, nested
from .failover import EvictionTask, parse_tasks
from .scheduler import Previous
from .workinfo import WorkInfo, scheduled_replicas
from .works import DesiredWork

REPLICAS_ANNOTATION = "work.tether.io/replicas"
PLACEMENT_ANNOTATION = "work.tether.io/applied-placement"
AFFINITY_ANNOTATION = "work.tether.io/affinity-name"
POLICY_ANNOTATION = "work.tether.io/policy"
POLICY_HASH_ANNOTATION = "work.tether.io/policy-hash"
TEMPLATE_HASH_ANNOTATION = "work.tether.io/template-hash"
EVICTION_ANNOTATION = "tether.io/graceful-eviction-tasks"
TETHER_ANNOTATION_PREFIX = "tether.io/"


def _hash(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def policy_ref(policy: Mapping[str, Any]) -> str:
    meta = mapping(policy.get("metadata"))
    return f"{policy.get('kind', '')}/{meta.get('namespace') or ''}/{meta.get('name', '')}"


def policy_hash(policy: Mapping[str, Any]) -> str:
    return _hash([policy_ref(policy), policy.get("spec")])


def template_hash(template: Mapping[str, Any]) -> str:
    """The template as propagated: spec and the rest, labels and the user's annotations (not
    tether's own annotations, finalizers, status or server fields)."""
    meta = mapping(template.get("metadata"))
    annotations = {k: v for k, v in mapping(meta.get("annotations")).items()
                   if not str(k).startswith(TETHER_ANNOTATION_PREFIX)}
    body = {k: v for k, v in template.items() if k not in ("metadata", "status")}
    return _hash([body, meta.get("labels"), annotations])


@dataclass(frozen=True)
class Binding:
    """The template's scheduling memory, read back from its Works and annotation."""

    previous: Previous = field(default_factory=Previous)
    tasks: tuple[EvictionTask, ...] = ()
    policy: str = ""  # the claiming policy, "" when unknown
    policy_hash: str = ""
    template_hash: str = ""
    works: Mapping[str, WorkInfo] = field(default_factory=dict)  # cluster → Work (not deleting)

    @property
    def scheduled(self) -> Mapping[str, int]:
        return self.previous.clusters


def read_binding(template: Mapping[str, Any], works: Iterable[WorkInfo]) -> Binding:
    tasks = parse_tasks(nested(template, "metadata", "annotations", EVICTION_ANNOTATION))
    evicting = frozenset(t.from_cluster for t in tasks)
    live = {w.cluster: w for w in works if not w.deleting}
    kind = str(template.get("kind", ""))
    fallback = scheduled_replicas(list(live.values()), kind)
    clusters: dict[str, int] = {}
    placements: set[str] = set()
    affinity = policy = p_hash = t_hash = ""
    for cluster, work in sorted(live.items()):
        annotations = work.annotations
        if cluster in evicting:
            continue
        raw = annotations.get(REPLICAS_ANNOTATION)
        try:
            clusters[cluster] = int(str(raw)) if raw is not None else fallback.get(cluster, 0)
        except ValueError:
            clusters[cluster] = fallback.get(cluster, 0)
        placements.add(str(annotations.get(PLACEMENT_ANNOTATION) or ""))
        affinity = affinity or str(annotations.get(AFFINITY_ANNOTATION) or "")
        policy = policy or str(annotations.get(POLICY_ANNOTATION) or "")
        p_hash = p_hash or str(annotations.get(POLICY_HASH_ANNOTATION) or "")
        t_hash = t_hash or str(annotations.get(TEMPLATE_HASH_ANNOTATION) or "")
    placement = placements.pop() if len(placements) == 1 else None
    previous = Previous(clusters, placement or None, affinity, evicting)
    return Binding(previous, tasks, policy, p_hash, t_hash, live)


def annotate(desired: Iterable[DesiredWork], annotations: Mapping[str, str],
             replicas: Mapping[str, int | None]) -> list[DesiredWork]:
    """The desired Works with the binding annotations (see module docstring) added. The bodies
    are `desired_works`' fresh dicts, so they are completed in place (no copy per Work)."""
    out: list[DesiredWork] = []
    for work in desired:
        meta = work.body.setdefault("metadata", {}).setdefault("annotations", {})
        meta.update({k: v for k, v in annotations.items() if v})
        share = replicas.get(work.cluster)
        if share is not None:
            meta[REPLICAS_ANNOTATION] = str(share)
        out.append(work)
    return out
