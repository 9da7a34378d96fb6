"""The internal propagation model both API dialects compile to.

KubeFed's Federated<Kind> objects and Karmada's templates + policies are different ways to say
the same thing: "this object, in these clusters, with these per-cluster differences". Each is
compiled (purely) to a `PropagationPlan`: one `WorkItem` per target cluster holding the exact
object to apply there, plus the clusters that could not get one and why. Everything downstream
(executors, status collection, conditions) only knows this model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tether.objects import ObjView as Obj

Dialect = Literal["kubefed", "karmada"]
ConflictResolution = Literal["Abort", "Overwrite"]

# Labels and annotations tether puts on what it creates in members.
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_VALUE = "tether"
SOURCE_ANNOTATION = "tether.io/source"  # "<dialect>:<apiVersion>/<kind>/<namespace>/<name>"
KUBEFED_MANAGED_LABEL = "kubefed.io/managed"
FIELD_MANAGER = "tether"


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute
    value: str = ""
    added_s: float | None = field(default=None, compare=False)  # timeAdded (NoExecute timing)


@dataclass(frozen=True)
class ClusterInfo:
    """What placement needs to know about a member cluster."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    provider: str = ""
    region: str = ""
    zones: tuple[str, ...] = ()
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    # Replicas the cluster could still run, when known whatever the workload (tests, estimators);
    # None: estimate per workload from `resource_summary`.
    available_replicas: int | None = None
    # status.resourceSummary (allocatable / allocated / allocating), None when not reported
    resource_summary: Mapping[str, Any] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ResourceRef:
    api_version: str
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind}.{self.api_version} {where}{self.name}"


@dataclass(frozen=True)
class WorkItem:
    """The object to apply in one cluster, already overridden and with its replica share."""

    cluster: str
    manifest: Obj
    replicas: int | None = None  # the share given to this cluster, for workloads


@dataclass(frozen=True)
class ClusterFailure:
    """A cluster that is targeted but gets nothing, with a reason users can act on."""

    cluster: str
    reason: str  # e.g. ApplyOverridesFailed, ClusterNotReady, ClusterNotFound, NoClusterFit
    message: str


@dataclass(frozen=True)
class PropagationPlan:
    source: ResourceRef
    dialect: Dialect
    works: tuple[WorkItem, ...] = ()
    failures: tuple[ClusterFailure, ...] = ()
    conflict_resolution: ConflictResolution = "Abort"
    preserve_on_deletion: bool = False
    dependencies: tuple[ResourceRef, ...] = ()  # propagated along (Karmada propagateDeps)
    # Set when nothing can be planned at all (bad policy, unknown type): the source's condition.
    error_reason: str = ""
    error_message: str = ""
    # Clusters whose current Work stays exactly as it is (neither written nor deleted): a
    # graceful eviction in progress, dispatching suspended there. `hold`: every cluster.
    retained: frozenset[str] = frozenset()
    hold: bool = False
    # Per-cluster states worth reporting that are not failures (Evicting, SuspendDispatching).
    notices: tuple[ClusterFailure, ...] = ()
    # Annotations every Work of this plan carries (Karmada's binding memory, see `binding`).
    work_annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def clusters(self) -> tuple[str, ...]:
        return tuple(w.cluster for w in self.works)
