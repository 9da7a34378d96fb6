"""The resource types a local cluster serves: built-ins and the ones CRDs add."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ScalePaths:
    spec_replicas: str = ".spec.replicas"
    status_replicas: str = ".status.replicas"
    label_selector: str = ""


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    status: bool = False  # has a status subresource
    scale: ScalePaths | None = None
    subresources: tuple[str, ...] = ()  # others: log, exec, finalize, ...
    has_generation: bool = False
    crd: bool = False
    schema: Mapping[str, Any] | None = None
    printer_columns: tuple[Mapping[str, Any], ...] | None = None
    selectable_fields: tuple[str, ...] = ()
    list_kind: str = ""
    storage_version: str = ""  # CR versions share storage; this is the stored one
    # Another group whose objects these are (one store seen through two groups, e.g. Calico's
    # crd.projectcalico.org/v1 and projectcalico.org/v3); "" for the type's own group.
    storage_group: str = ""

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def storage_key(self) -> str:
        return f"{self.storage_group or self.group}/{self.plural}"

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def all_subresources(self) -> tuple[str, ...]:
        extra = (("status",) if self.status else ()) + (("scale",) if self.scale else ())
        return extra + self.subresources


def _t(
    group: str,
    version: str,
    kind: str,
    plural: str,
    *,
    namespaced: bool = True,
    short: tuple[str, ...] = (),
    all_category: bool = False,
    categories: tuple[str, ...] = (),
    status: bool = False,
    scale: bool = False,
    sub: tuple[str, ...] = (),
    gen: bool = False,
    verbs: tuple[str, ...] = ALL_VERBS,
) -> ResourceType:
    return ResourceType(
        group=group,
        version=version,
        plural=plural,
        singular=kind.lower(),
        kind=kind,
        namespaced=namespaced,
        short_names=short,
        categories=("all",) if all_category else categories,
        verbs=verbs,
        status=status,
        scale=ScalePaths(label_selector=".status.selector") if scale else None,
        subresources=sub,
        has_generation=gen,
        list_kind=f"{kind}List",
        storage_version=version,
    )


CREATE_ONLY = ("create",)
READ_ONLY = ("get", "list")

BUILTIN_TYPES: tuple[ResourceType, ...] = (
    # core/v1
    _t("", "v1", "Pod", "pods", short=("po",), all_category=True, status=True,
       sub=("log", "exec", "attach", "portforward", "proxy", "binding", "eviction", "ephemeralcontainers")),
    _t("", "v1", "Service", "services", short=("svc",), all_category=True, status=True, sub=("proxy",)),
    _t("", "v1", "Endpoints", "endpoints", short=("ep",)),
    _t("", "v1", "ConfigMap", "configmaps", short=("cm",)),
    _t("", "v1", "Secret", "secrets"),
    _t("", "v1", "Namespace", "namespaces", namespaced=False, short=("ns",), status=True, sub=("finalize",),
       verbs=("create", "delete", "get", "list", "patch", "update", "watch")),
    _t("", "v1", "Node", "nodes", namespaced=False, short=("no",), status=True, sub=("proxy",)),
    _t("", "v1", "ServiceAccount", "serviceaccounts", short=("sa",), sub=("token",)),
    _t("", "v1", "Event", "events", short=("ev",)),
    _t("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", short=("pvc",), status=True),
    _t("", "v1", "PersistentVolume", "persistentvolumes", namespaced=False, short=("pv",), status=True),
    _t("", "v1", "ReplicationController", "replicationcontrollers", short=("rc",), all_category=True,
       status=True, scale=True, gen=True),
    _t("", "v1", "LimitRange", "limitranges", short=("limits",)),
    _t("", "v1", "ResourceQuota", "resourcequotas", short=("quota",), status=True),
    _t("", "v1", "PodTemplate", "podtemplates"),
    # apps/v1
    _t("apps", "v1", "Deployment", "deployments", short=("deploy",), all_category=True, status=True,
       scale=True, gen=True),
    _t("apps", "v1", "ReplicaSet", "replicasets", short=("rs",), all_category=True, status=True, scale=True,
       gen=True),
    _t("apps", "v1", "StatefulSet", "statefulsets", short=("sts",), all_category=True, status=True,
       scale=True, gen=True),
    _t("apps", "v1", "DaemonSet", "daemonsets", short=("ds",), all_category=True, status=True, gen=True),
    _t("apps", "v1", "ControllerRevision", "controllerrevisions"),
    # batch/v1
    _t("batch", "v1", "Job", "jobs", all_category=True, status=True, gen=True),
    _t("batch", "v1", "CronJob", "cronjobs", short=("cj",), all_category=True, status=True, gen=True),
    # autoscaling
    _t("autoscaling", "v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers", short=("hpa",),
       all_category=True, status=True, gen=True),
    # discovery, networking, coordination, policy, scheduling, storage
    _t("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
    _t("networking.k8s.io", "v1", "Ingress", "ingresses", short=("ing",), status=True, gen=True),
    _t("networking.k8s.io", "v1", "IngressClass", "ingressclasses", namespaced=False),
    _t("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", short=("netpol",), gen=True),
    _t("coordination.k8s.io", "v1", "Lease", "leases"),
    _t("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", short=("pdb",), status=True, gen=True),
    _t("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", namespaced=False, short=("pc",)),
    _t("storage.k8s.io", "v1", "StorageClass", "storageclasses", namespaced=False, short=("sc",)),
    # rbac (enforced: local/rbac/)
    _t("rbac.authorization.k8s.io", "v1", "Role", "roles"),
    _t("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
    _t("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", namespaced=False),
    _t("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False),
    # apiextensions
    _t("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions",
       namespaced=False, short=("crd", "crds"), categories=("api-extensions",), status=True, gen=True),
    # apiregistration: APIServices are stored; the local groups are marked Local (apiservices.py)
    _t("apiregistration.k8s.io", "v1", "APIService", "apiservices", namespaced=False,
       categories=("api-extensions",), status=True),
    # metrics (what metrics-server serves): computed on each read, never stored (local/metrics)
    _t("metrics.k8s.io", "v1beta1", "NodeMetrics", "nodes", namespaced=False, verbs=READ_ONLY),
    _t("metrics.k8s.io", "v1beta1", "PodMetrics", "pods", verbs=READ_ONLY),
    # reviews: create-only, never stored
    _t("authorization.k8s.io", "v1", "SelfSubjectAccessReview", "selfsubjectaccessreviews",
       namespaced=False, verbs=CREATE_ONLY),
    _t("authorization.k8s.io", "v1", "SubjectAccessReview", "subjectaccessreviews",
       namespaced=False, verbs=CREATE_ONLY),
    _t("authorization.k8s.io", "v1", "LocalSubjectAccessReview", "localsubjectaccessreviews",
       verbs=CREATE_ONLY),
    _t("authorization.k8s.io", "v1", "SelfSubjectRulesReview", "selfsubjectrulesreviews",
       namespaced=False, verbs=CREATE_ONLY),
    _t("authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews", namespaced=False,
       verbs=CREATE_ONLY),
    _t("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", namespaced=False, verbs=CREATE_ONLY),
)

BUILTIN_RESOURCES: frozenset[tuple[str, str]] = frozenset((rt.group, rt.plural) for rt in BUILTIN_TYPES)

# Each built-in group's APIService priorities, as kube-apiserver registers them:
# group -> (groupPriorityMinimum, versionPriority). Discovery lists groups by priority, highest
# first, then by name; custom resources' groups come at 1000 (their versions at 100).
GROUP_PRIORITY: dict[str, tuple[int, int]] = {
    "": (18000, 1),
    "apiregistration.k8s.io": (18000, 15),
    "apps": (17800, 15),
    "events.k8s.io": (17750, 15),
    "authentication.k8s.io": (17700, 15),
    "authorization.k8s.io": (17600, 15),
    "autoscaling": (17500, 30),
    "batch": (17400, 15),
    "certificates.k8s.io": (17300, 15),
    "networking.k8s.io": (17200, 15),
    "policy": (17100, 15),
    "rbac.authorization.k8s.io": (17000, 15),
    "storage.k8s.io": (16800, 15),
    "admissionregistration.k8s.io": (16700, 15),
    "apiextensions.k8s.io": (16700, 15),
    "scheduling.k8s.io": (16600, 15),
    "coordination.k8s.io": (16500, 15),
    "node.k8s.io": (16300, 15),
    "discovery.k8s.io": (16200, 15),
    "flowcontrol.apiserver.k8s.io": (16100, 21),
    "metrics.k8s.io": (100, 100),  # metrics-server's APIService
}
CUSTOM_GROUP_PRIORITY = (1000, 100)


def group_priority(group: str) -> tuple[int, int]:
    return GROUP_PRIORITY.get(group, CUSTOM_GROUP_PRIORITY)


@dataclass
class Registry:
    """Lookup of served types by (group, version, plural); CRD types come and go."""

    _types: dict[tuple[str, str, str], ResourceType] = field(default_factory=dict)
    generation: int = 0  # bumped on every change, so discovery and OpenAPI caches know

    @classmethod
    def with_builtins(cls, exclude_groups: tuple[str, ...] = ()) -> Registry:
        registry = cls()
        for rt in BUILTIN_TYPES:
            if rt.group not in exclude_groups:
                registry._types[(rt.group, rt.version, rt.plural)] = rt
        return registry

    def is_builtin(self, group: str, plural: str) -> bool:
        """Whether `plural.group` is served by the server itself (never by a CRD)."""
        return (group, plural) in BUILTIN_RESOURCES

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def by_kind(self, group: str, kind: str) -> ResourceType | None:
        preferred = None
        for rt in self._types.values():
            if rt.group == group and rt.kind == kind:
                if rt.version == rt.storage_version:
                    return rt
                preferred = preferred or rt
        return preferred

    def by_storage_key(self, key: str) -> ResourceType | None:
        """The type storing under `key`: its own group's stored version first, then any type
        sharing that store (another group's view of it)."""
        group, _, plural = key.partition("/")
        shared = None
        for rt in self._types.values():
            if rt.plural != plural or rt.version != rt.storage_version:
                continue
            if rt.group == group:
                return rt
            if rt.storage_group == group:
                shared = shared or rt
        return shared

    def all(self) -> Iterable[ResourceType]:
        return self._types.values()

    def group_versions(self) -> dict[str, list[str]]:
        """group -> versions, groups in discovery order, the preferred version first."""
        out: dict[str, list[str]] = {}
        for rt in self._types.values():
            versions = out.setdefault(rt.group, [])
            if rt.version not in versions:
                if rt.version == rt.storage_version:
                    versions.insert(0, rt.version)
                else:
                    versions.append(rt.version)

        def order(group: str) -> tuple[int, str]:
            return (-group_priority(group)[0], group)

        return {g: out[g] for g in sorted(out, key=order)}

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return sorted(
            (rt for rt in self._types.values() if rt.group == group and rt.version == version),
            key=lambda rt: rt.plural,
        )

    def set_crd_types(self, crd_name: str, types: list[ResourceType]) -> None:
        self.remove_crd_types(crd_name)
        # A CRD stored before creation refused built-in names must still not replace them.
        types = [rt for rt in types if not self.is_builtin(rt.group, rt.plural)]
        for rt in types:
            self._types[(rt.group, rt.version, rt.plural)] = rt
        self._crd_owner[crd_name] = [(rt.group, rt.version, rt.plural) for rt in types]
        self._custom_keys = self._storage_keys_of_crds()
        self.generation += 1

    def remove_crd_types(self, crd_name: str) -> None:
        for key in self._crd_owner.pop(crd_name, []):
            self._types.pop(key, None)
        self._custom_keys = self._storage_keys_of_crds()
        self.generation += 1

    def is_custom(self, storage_key: str) -> bool:
        """Whether a storage key holds custom resources (asked on every write: a set lookup)."""
        return storage_key in self._custom_keys

    def _storage_keys_of_crds(self) -> frozenset[str]:
        return frozenset(self._types[key].storage_key for keys in self._crd_owner.values() for key in keys
                         if key in self._types)

    _crd_owner: dict[str, list[tuple[str, str, str]]] = field(default_factory=dict)
    _custom_keys: frozenset[str] = frozenset()
