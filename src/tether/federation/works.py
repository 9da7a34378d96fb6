"""Works: the internal per-cluster unit both dialects compile to, as hub objects. Pure helpers.

A Work (`work.tether.io/v1alpha1`, in `tether-es-<cluster>`) holds the manifests to apply in one
member. Its name is stable from the source (`<kind>-<namespace>-<name>`, lower-cased, shortened
with a hash when longer than 63 characters), so a restarted hub finds and updates the Works it
wrote instead of creating new ones. Labels point back at the source so a controller can list the
Works of one source; annotations carry the full source reference and the time the controller
saw the source change (the start of the propagation-latency clock).

Work status, written by the executor (or a pull agent): conditions `Applied` (True, or False with
reason Conflict / Invalid / NamespaceNotFound / NoSuchResource / ApplyFailed / ClusterUnreachable
and the member's message), and per manifest `manifestStatuses[]`: identifier, applied, reason,
message, the member object's `status`, `appliedAt` and `latencySeconds`. Readers get a Work
parsed once, as a `workinfo.WorkInfo`.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.objects import Obj

from ._util import mapping, nested, thaw
from .crds import WORK_API_VERSION, execution_namespace
from .model import Dialect, PropagationPlan, ResourceRef

WORK_MANAGED_LABEL = "work.tether.io/managed-by"
WORK_MANAGED_VALUE = "tether-hub"
WORK_SELECTOR = f"{WORK_MANAGED_LABEL}={WORK_MANAGED_VALUE}"
DIALECT_LABEL = "work.tether.io/dialect"
SOURCE_HASH_LABEL = "work.tether.io/source-hash"  # hash of the source key: Works of one source
SOURCE_KIND_LABEL = "work.tether.io/source-kind"
SOURCE_NAMESPACE_LABEL = "work.tether.io/source-namespace"
SOURCE_NAME_LABEL = "work.tether.io/source-name"
CLUSTER_LABEL = "work.tether.io/cluster"
SOURCE_ANNOTATION = "work.tether.io/source"  # "<apiVersion>/<kind>/<namespace>/<name>"
CHANGED_AT_ANNOTATION = "work.tether.io/source-changed-at"  # epoch seconds, float
ENSURE_NAMESPACE_ANNOTATION = "work.tether.io/ensure-namespace"  # "<ns>": create it if missing
WORK_NAME_ANNOTATION = "work.tether.io/name"  # on member objects: "<exec-ns>/<work>"
PROPAGATION_FINALIZER = "tether.io/propagation"  # on sources
EXECUTION_FINALIZER = "tether.io/execution"  # on Works
APPLIED = "Applied"

# executor reasons → KubeFed's per-cluster status values
KUBEFED_REASONS: Mapping[str, str] = {
    "Conflict": "AlreadyExists",
    "Invalid": "CreationFailed",
    "NamespaceNotFound": "CreationFailed",
    "NoSuchResource": "CreationFailed",
    "ApplyFailed": "UpdateFailed",
    "ClusterUnreachable": "ClientRetrievalFailed",
    "ClusterNotFound": "ClusterNotReady",
}

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


# Pure string functions called for every Work event by several controllers (the same few
# thousand sources over and over): each answer is kept rather than computed again.
_MEMO = 16384


@functools.lru_cache(maxsize=_MEMO)
def short_hash(text: str, length: int = 10) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def dns_label(text: str, limit: int = 63) -> str:
    """`text` lower-cased with characters outside `[a-z0-9.-]` replaced by `-`; when longer than
    `limit`, cut and suffixed with a hash of the original, so distinct inputs stay distinct."""
    clean = re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-.") or "x"
    if len(clean) <= limit:
        return clean
    suffix = short_hash(text)
    return f"{clean[: limit - len(suffix) - 1].rstrip('-.')}-{suffix}"


def work_name(kind: str, namespace: str, name: str) -> str:
    """Stable Work name for one source object: `<kind>-<namespace>-<name>`."""
    raw = "-".join(part for part in (kind, namespace, name) if part)
    return dns_label(raw)


def source_key(ref: ResourceRef) -> str:
    return f"{ref.api_version}/{ref.kind}/{ref.namespace}/{ref.name}"


@functools.lru_cache(maxsize=_MEMO)
def label_value(text: str) -> str:
    """`text` if it is a valid label value, else a hash-shortened one."""
    if len(text) <= 63 and _LABEL_VALUE.match(text):
        return text
    return dns_label(text)


def source_labels(dialect: Dialect, ref: ResourceRef) -> dict[str, str]:
    return {
        WORK_MANAGED_LABEL: WORK_MANAGED_VALUE,
        DIALECT_LABEL: dialect,
        SOURCE_HASH_LABEL: short_hash(source_key(ref), 16),
        SOURCE_KIND_LABEL: label_value(ref.kind),
        SOURCE_NAMESPACE_LABEL: label_value(ref.namespace),
        SOURCE_NAME_LABEL: label_value(ref.name),
    }


@functools.lru_cache(maxsize=_MEMO)
def parse_source(value: str) -> ResourceRef | None:
    """The inverse of `source_key` (apiVersion may contain one '/')."""
    parts = value.split("/")
    if len(parts) == 4:
        return ResourceRef(parts[0], parts[1], parts[2], parts[3])
    if len(parts) == 5:
        return ResourceRef(f"{parts[0]}/{parts[1]}", parts[2], parts[3], parts[4])
    return None


def work_source(work: Obj) -> tuple[str, ResourceRef] | None:
    """(dialect, source) of a Work, from its labels and annotations."""
    meta = mapping(work.get("metadata"))
    dialect = str(mapping(meta.get("labels")).get(DIALECT_LABEL, ""))
    ref = parse_source(str(mapping(meta.get("annotations")).get(SOURCE_ANNOTATION, "")))
    if not dialect or ref is None:
        return None
    return dialect, ref


@dataclass(frozen=True)
class DesiredWork:
    cluster: str
    name: str
    body: Obj  # the Work to apply (without the changed-at annotation)

    @property
    def namespace(self) -> str:
        return execution_namespace(self.cluster)


def desired_works(
    plan: PropagationPlan,
    *,
    extra_manifests: Sequence[Obj] = (),
    ensure_namespace: bool = False,
) -> list[DesiredWork]:
    """One Work per planned cluster. `extra_manifests` (dependencies) go in every Work, before
    the object (the executor applies in dependency order anyway)."""
    ref = plan.source
    name = work_name(ref.kind, ref.namespace, ref.name)
    out: list[DesiredWork] = []
    for item in plan.works:
        namespace = execution_namespace(item.cluster)
        manifests = [thaw(m) for m in extra_manifests] + [thaw(item.manifest)]
        for manifest in manifests:
            meta = manifest.setdefault("metadata", {})
            meta.setdefault("annotations", {})[WORK_NAME_ANNOTATION] = f"{namespace}/{name}"
        annotations = {SOURCE_ANNOTATION: source_key(ref)}
        target_ns = str(nested(item.manifest, "metadata", "namespace") or "")
        if ensure_namespace and target_ns:
            annotations[ENSURE_NAMESPACE_ANNOTATION] = target_ns
        body: Obj = {
            "apiVersion": WORK_API_VERSION,
            "kind": "Work",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {**source_labels(plan.dialect, ref), CLUSTER_LABEL: item.cluster},
                "annotations": annotations,
            },
            "spec": {
                "workload": {"manifests": manifests},
                "conflictResolution": plan.conflict_resolution,
                "preserveResourcesOnDeletion": plan.preserve_on_deletion,
            },
        }
        out.append(DesiredWork(item.cluster, name, body))
    return out


# status --------------------------------------------------------------------------------------


def generation(obj: Obj | None) -> int:
    value = nested(obj, "metadata", "generation")
    return value if isinstance(value, int) else 0


def strip_volatile(value: Any) -> Any:
    """`value` without timestamps, for "did anything change" comparisons."""
    if isinstance(value, Mapping):
        return {k: strip_volatile(v) for k, v in value.items()
                if k not in ("lastTransitionTime", "lastUpdateTime", "lastProbeTime")}
    if isinstance(value, list):
        return [strip_volatile(v) for v in value]
    return value


def is_subset(want: Any, have: Any) -> bool:
    """Whether every field of `want` has the same value in `have` (lists: same length, elements
    compared the same way). Server defaults in `have` do not count as differences."""
    if isinstance(want, Mapping):
        if not isinstance(have, Mapping):
            return False
        return all(k in have and is_subset(v, have[k]) for k, v in want.items())
    if isinstance(want, list):
        if not isinstance(have, list) or len(want) != len(have):
            return False
        return all(is_subset(w, h) for w, h in zip(want, have, strict=True))
    if isinstance(want, bool) or isinstance(have, bool):
        return want is have or (want == have and type(want) is type(have))
    if isinstance(want, int | float) and isinstance(have, int | float):
        return float(want) == float(have)
    return bool(want == have)


def names(works: Iterable[Obj]) -> list[str]:
    return sorted(str(nested(w, "metadata", "name")) for w in works)
