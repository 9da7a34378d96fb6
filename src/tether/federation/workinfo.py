"""Works as the hub reads them: one frozen `WorkInfo` per Work, parsed once where the Work
informer hands it out (`HubInformers`), as Clusters become `ClusterInfo`s there.

Everything that reads a Work (the sync controllers' status and bindings, the executor, the
dependency sync, `tether status`) reads these fields instead of walking the object's dicts, so
what a field means (the Applied condition counts only for the Work's current generation, a
manifest's report is found by kind and name) is decided here once. Malformed fields read as
absent, never as an error: a Work is the hub's own object, but the API is shared.

`WorkInfo.spec` and `.status` keep what was written (not compared) for the writers' "does it
already say that" checks (`work_up_to_date`, the executor's report); they and the manifests are
the informer's objects, read-only like them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.kube import ObjectKey
from tether.objects import Obj

from . import works as W
from ._util import items, mapping, nested, thaw
from .crds import execution_namespace
from .kubefed import ClusterResult
from .model import ResourceRef


@dataclass(frozen=True)
class AppliedCondition:
    """The executor's `Applied` condition on a Work."""

    status: str  # "True" | "False" | "" (absent or malformed)
    reason: str = ""
    message: str = ""
    observed_generation: int | None = None
    last_transition_time: str = ""


@dataclass(frozen=True)
class ManifestReport:
    """One `status.manifestStatuses[]` entry: what the executor saw of one manifest."""

    ordinal: int  # the manifest's index in spec.workload.manifests; -1 when not given
    kind: str
    name: str
    applied: bool
    status: Mapping[str, Any] | None = None  # the member object's `status`
    generation: int | None = None  # the member object's metadata.generation
    latency_seconds: float | None = None
    # the entry as written: the executor carries appliedAt/latencySeconds over from it
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class WorkInfo:
    """What the hub reads of one Work (see the module docstring)."""

    name: str
    namespace: str
    cluster: str  # from the execution namespace; "" outside one
    generation: int = 0
    resource_version: str = ""
    deleting: bool = False
    finalizers: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    dialect: str = ""  # work.tether.io/dialect
    source: ResourceRef | None = None  # work.tether.io/source
    overwrite: bool = False  # spec.conflictResolution == Overwrite
    preserve_on_deletion: bool = False
    manifests: tuple[Mapping[str, Any], ...] = ()
    applied: AppliedCondition | None = None
    manifest_statuses: tuple[ManifestReport, ...] = ()
    # spec and status as written, for writers comparing what they want with what is there
    spec: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    status: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def key(self) -> ObjectKey:
        return ObjectKey(self.namespace, self.name)

    @property
    def origin(self) -> tuple[str, ResourceRef] | None:
        """(dialect, source) when the Work names both, else None."""
        if not self.dialect or self.source is None:
            return None
        return self.dialect, self.source

    @property
    def reported(self) -> bool:
        """Whether the executor has reported on the Work's current generation (either way)."""
        return self.applied is not None and self.applied.observed_generation == self.generation

    @property
    def applied_ok(self) -> bool:
        """Whether that report says every manifest was applied."""
        return self.reported and self.applied is not None and self.applied.status == "True"

    def manifest_status(self, ref: ResourceRef) -> ManifestReport | None:
        """The report on the manifest `ref` names (kind + name)."""
        for entry in self.manifest_statuses:
            if entry.kind == ref.kind and entry.name == ref.name:
                return entry
        return None

    def manifest(self, ref: ResourceRef) -> Mapping[str, Any] | None:
        """The manifest `ref` names (kind + name)."""
        for manifest in self.manifests:
            if manifest.get("kind") == ref.kind and nested(manifest, "metadata",
                                                           "name") == ref.name:
                return manifest
        return None


def work_info(work: Obj) -> WorkInfo:
    """Parse a Work object (see the module docstring); never raises."""
    meta = mapping(work.get("metadata"))
    labels = _strings(meta.get("labels"))
    annotations = _strings(meta.get("annotations"))
    spec = mapping(work.get("spec"))
    status = mapping(work.get("status"))
    namespace = str(meta.get("namespace") or "")
    prefix = execution_namespace("")
    return WorkInfo(
        name=str(meta.get("name") or ""),
        namespace=namespace,
        cluster=namespace[len(prefix):] if namespace.startswith(prefix) else "",
        generation=_int(meta.get("generation")) or 0,
        resource_version=str(meta.get("resourceVersion") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        finalizers=tuple(str(f) for f in items(meta.get("finalizers"))),
        labels=labels,
        annotations=annotations,
        dialect=labels.get(W.DIALECT_LABEL, ""),
        source=W.parse_source(annotations.get(W.SOURCE_ANNOTATION, "")),
        overwrite=spec.get("conflictResolution") == "Overwrite",
        preserve_on_deletion=spec.get("preserveResourcesOnDeletion") is True,
        manifests=tuple(m for m in items(nested(spec, "workload", "manifests"))
                        if isinstance(m, dict | Mapping)),
        applied=_applied(status.get("conditions")),
        manifest_statuses=tuple(_manifest_report(e) for e in items(status.get("manifestStatuses"))
                                if isinstance(e, dict | Mapping)),
        spec=spec,
        status=status,
    )


def _applied(conditions: Any) -> AppliedCondition | None:
    for entry in items(conditions):
        cond = mapping(entry)
        if cond.get("type") == W.APPLIED:
            return AppliedCondition(
                status=_str(cond.get("status")),
                reason=_str(cond.get("reason")),
                message=_str(cond.get("message")),
                observed_generation=_int(cond.get("observedGeneration")),
                last_transition_time=_str(cond.get("lastTransitionTime")),
            )
    return None


def _manifest_report(entry: Mapping[str, Any]) -> ManifestReport:
    ident = mapping(entry.get("identifier"))
    ordinal = _int(ident.get("ordinal"))
    observed = entry.get("status")
    latency = entry.get("latencySeconds")
    return ManifestReport(
        ordinal=ordinal if ordinal is not None else -1,
        kind=_str(ident.get("kind")),
        name=_str(ident.get("name")),
        applied=entry.get("applied") is True,
        status=observed if isinstance(observed, dict | Mapping) else None,
        generation=_int(entry.get("generation")),
        latency_seconds=float(latency) if isinstance(latency, int | float)
        and not isinstance(latency, bool) else None,
        raw=entry,
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _strings(value: Any) -> Mapping[str, str]:
    """A labels or annotations map. The API server only stores string values there, so the
    informer's own dict is used as it is (a Work is parsed on every event: no copy)."""
    return value if isinstance(value, dict) else {}


# status --------------------------------------------------------------------------------------


def cluster_result(work: WorkInfo | None, target: ResourceRef, *,
                   kubefed: bool) -> ClusterResult | None:
    """What the executor reported for one Work, None while it has not caught up with the spec."""
    if work is None or not work.reported:
        return None
    applied = work.applied
    assert applied is not None
    entry = work.manifest_status(target)
    observed = entry.status if entry is not None else None
    if applied.status == "True":
        return ClusterResult(True, observed_status=observed,
                             latency_seconds=entry.latency_seconds if entry else None)
    reason = applied.reason or "ApplyFailed"
    if kubefed:
        reason = W.KUBEFED_REASONS.get(reason, reason)
    return ClusterResult(False, reason, applied.message, observed)


def member_status_for_aggregation(work: WorkInfo | None, target: ResourceRef,
                                  template_generation: int) -> Obj | None:
    """The member status Karmada's AggregateStatus wants, or None when not collected yet."""
    entry = work.manifest_status(target) if work is not None else None
    if work is None or entry is None or entry.status is None:
        return None
    status = dict(thaw(entry.status))
    if entry.generation is not None:
        status["generation"] = entry.generation
        if work.reported:
            status["resourceTemplateGeneration"] = template_generation
    return status


def work_up_to_date(current: WorkInfo | None, desired: W.DesiredWork) -> bool:
    """Whether the Work on the hub already says what `desired` says."""
    if current is None:
        return False
    if current.spec != desired.body["spec"]:
        return False
    want = desired.body["metadata"]
    labels, annotations = current.labels, current.annotations
    return all(labels.get(k) == v for k, v in want["labels"].items()) and all(
        annotations.get(k) == v for k, v in want["annotations"].items()
    ) and not (W.ENSURE_NAMESPACE_ANNOTATION in annotations
               and W.ENSURE_NAMESPACE_ANNOTATION not in want["annotations"])


def scheduled_replicas(works: list[WorkInfo], kind: str) -> dict[str, int]:
    """Per cluster, `spec.replicas` of the `kind` manifest its Work holds: what was last
    scheduled there (Works being deleted do not count)."""
    out: dict[str, int] = {}
    for work in works:
        if work.deleting:
            continue
        for manifest in work.manifests:
            replicas = nested(manifest, "spec", "replicas")
            if manifest.get("kind") == kind and isinstance(replicas, int):
                out[work.cluster] = replicas
    return out


__all__ = ["AppliedCondition", "ManifestReport", "WorkInfo", "cluster_result",
           "member_status_for_aggregation", "scheduled_replicas", "work_info", "work_up_to_date"]
