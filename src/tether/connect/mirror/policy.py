"""`MirrorPolicy` (connect.tether.io/v1alpha1): the service mirror run by the hub, no config file.

A MirrorPolicy says what to mirror (the same keys as semaphore-service-mirror's `global`
section) and between which registered clusters (`clusterSelector` over the hub's Cluster
labels; empty: all). Every member that takes part mirrors every other one, each with the
member's own name as `servicePrefix`, and its `spec.zones` as the local zones. A member takes
part once it has been Ready; it stays while its Cluster exists, so a member that becomes
unreachable keeps being mirrored under the stale-endpoint policy rather than disappearing.

`plan_members` is the pure part: which instances (a local member and its remotes) should run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from tether.connect.durations import DurationError, parse_duration
from tether.connect.mirror.config import (
    DEFAULT_STALE_AFTER_S,
    STALE_POLICIES,
    GlobalSettings,
    RemoteClusterSettings,
    StalePolicy,
    StaleSettings,
)
from tether.connect.names import is_label
from tether.kube import ClusterCredentials
from tether.objects import Obj
from tether.objects.selectors import SelectorError, label_selector_from_dict, parse_label_selector

GROUP = "connect.tether.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "MirrorPolicy"
DEFAULTS = {
    "mirrorSvcLabelSelector": "mirror.semaphore.uw.io/mirror-service=true",
    "globalSvcLabelSelector": "mirror.semaphore.uw.io/global-service=true",
    "globalSvcRoutingStrategyLabel": "mirror.semaphore.uw.io/global-service-routing-strategy=local-first",
}


class PolicyError(ValueError):
    pass


@dataclass(frozen=True)
class Member:
    """A registered cluster as the hub sees it."""

    name: str
    credentials: ClusterCredentials
    ready: bool
    labels: Mapping[str, str] = field(default_factory=dict)
    zones: tuple[str, ...] = ()


@dataclass(frozen=True)
class PolicySpec:
    settings: GlobalSettings
    stale: StaleSettings
    cluster_selector: Obj


@dataclass(frozen=True)
class Instance:
    """One local member mirroring `remotes` under one policy."""

    policy: str
    local: str
    remotes: tuple[str, ...]
    zones: tuple[str, ...]


def parse_policy(obj: Obj) -> PolicySpec:
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        raise PolicyError("spec: must be an object")

    def text(key: str, default: str = "") -> str:
        value = spec.get(key, default)
        if not isinstance(value, str):
            raise PolicyError(f"spec.{key}: must be a string")
        return value or default

    namespace = text("mirrorNamespace")
    if not is_label(namespace):
        raise PolicyError(f"spec.mirrorNamespace: {namespace!r} is not a namespace name")
    selectors = {key: text(key, default) for key, default in DEFAULTS.items()}
    for key, value in selectors.items():
        try:
            parse_label_selector(value)
        except SelectorError as exc:
            raise PolicyError(f"spec.{key}: {exc}") from None
    policy = spec.get("stalePolicy", "keep")
    if policy not in STALE_POLICIES:
        raise PolicyError(f"spec.stalePolicy: {policy!r} is not one of {', '.join(STALE_POLICIES)}")
    try:
        after = parse_duration(str(spec.get("staleAfter") or f"{DEFAULT_STALE_AFTER_S:g}s"))
    except DurationError as exc:
        raise PolicyError(f"spec.staleAfter: {exc}") from None
    cluster_selector = spec.get("clusterSelector") or {}
    try:
        label_selector_from_dict(cluster_selector)
    except (SelectorError, AttributeError, TypeError) as exc:
        raise PolicyError(f"spec.clusterSelector: {exc}") from None
    settings = GlobalSettings(
        mirror_svc_label_selector=selectors["mirrorSvcLabelSelector"],
        global_svc_label_selector=selectors["globalSvcLabelSelector"],
        global_svc_routing_strategy_label=selectors["globalSvcRoutingStrategyLabel"],
        mirror_namespace=namespace,
        service_sync=bool(spec.get("serviceSync", True)),
        endpoint_slice_sync=bool(spec.get("endpointSliceSync", True)),
    )
    return PolicySpec(settings, StaleSettings(cast(StalePolicy, policy), after), cluster_selector)


def remote_settings(name: str, stale: StaleSettings) -> RemoteClusterSettings:
    return RemoteClusterSettings(name=name, service_prefix=name, stale=stale)


def plan_members(policy: str, spec: PolicySpec, members: Iterable[Member], taking_part: Iterable[str]
                 ) -> tuple[list[Instance], set[str]]:
    """The instances to run and the members taking part now: selected members that are Ready,
    or took part before (`taking_part`) and still exist. Names that cannot be a Service prefix
    are left out."""
    selector = label_selector_from_dict(spec.cluster_selector)
    before = set(taking_part)
    chosen = sorted((m for m in members if selector.matches(dict(m.labels)) and is_label(m.name)
                     and (m.ready or m.name in before)), key=lambda m: m.name)
    names = [m.name for m in chosen]
    instances = [Instance(policy, m.name, tuple(n for n in names if n != m.name), m.zones or ("local",))
                 for m in chosen if len(names) > 1]
    return instances, set(names)


def policy_status(spec: PolicySpec | None, error: str, instances: Sequence[Instance], generation: Any) -> Obj:
    condition: Obj
    if error:
        condition = {"type": "Ready", "status": "False", "reason": "InvalidPolicy", "message": error}
    elif not instances:
        condition = {"type": "Ready", "status": "False", "reason": "TooFewClusters",
                     "message": "mirroring needs at least two Ready member clusters"}
    else:
        condition = {"type": "Ready", "status": "True", "reason": "Mirroring",
                     "message": f"{len(instances)} clusters mirror each other"}
    if isinstance(generation, int):
        condition["observedGeneration"] = generation
    return {"conditions": [condition],
            "clusters": [{"name": i.local, "mirrors": list(i.remotes)} for i in instances]}


def mirror_policy_crd() -> Obj:
    string = {"type": "string"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"mirrorpolicies.{GROUP}", "labels": {"app.kubernetes.io/part-of": "tether-hub"}},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {"plural": "mirrorpolicies", "singular": "mirrorpolicy", "kind": KIND,
                      "listKind": f"{KIND}List", "shortNames": ["mirpol"]},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Namespace", "type": "string", "jsonPath": ".spec.mirrorNamespace"},
                    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "Mirror labelled Services between the hub's member clusters "
                                   "(semaphore-service-mirror, run by the hub).",
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": string, "kind": string, "metadata": {"type": "object"},
                        "spec": {"type": "object", "required": ["mirrorNamespace"], "properties": {
                            "mirrorNamespace": {"type": "string",
                                                "description": "Namespace of the mirrors in every member"},
                            "mirrorSvcLabelSelector": string,
                            "globalSvcLabelSelector": string,
                            "globalSvcRoutingStrategyLabel": string,
                            "serviceSync": {"type": "boolean", "default": True},
                            "endpointSliceSync": {"type": "boolean", "default": True},
                            "stalePolicy": {"type": "string", "enum": list(STALE_POLICIES), "default": "keep"},
                            "staleAfter": {"type": "string", "default": "30s"},
                            "clusterSelector": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                                                "description": "Label selector over the hub's Clusters "
                                                               "(empty: every member)"},
                        }},
                        "status": {"type": "object", "properties": {
                            "conditions": {"type": "array", "x-kubernetes-list-type": "map",
                                           "x-kubernetes-list-map-keys": ["type"],
                                           "items": {"type": "object", "required": ["type", "status"],
                                                     "properties": {
                                                         "type": string, "status": string, "reason": string,
                                                         "message": string, "lastTransitionTime": string,
                                                         "observedGeneration": {"type": "integer"}}}},
                            "clusters": {"type": "array", "items": {"type": "object", "properties": {
                                "name": string, "mirrors": {"type": "array", "items": string}}}},
                        }},
                    },
                }},
            }],
        },
    }
