"""The hub's CustomResourceDefinitions, as Python data with structural schemas.

Every schema is strict: a field the type does not declare is refused by `kubectl apply` (which
asks for strict field validation) and dropped with a warning under `--validate=warn`, as against
Karmada's and KubeFed's own API servers. Only what upstream leaves open stays open
(`x-kubernetes-preserve-unknown-fields`): a `Federated<Kind>`'s `spec.template`, override values,
Work manifests, observed member status.

Upstream kinds take upstream's CRD as `upstream_schemas` records it (generated from Karmada's
and KubeFed's own CRDs by `scripts/gen_crd_schemas.py`): names, scope, served version, printer
columns, schema with its defaults and enums. `crds.py` adds only the category `tether` and, where
tether writes or checks more than upstream declares, the few fields listed at each builder
(`TETHER_ADDITIONS` documents them for docs/federation.md):

- Karmada `policy.karmada.io/v1alpha1`: PropagationPolicy (`pp`), ClusterPropagationPolicy
  (`cpp`), OverridePolicy (`op`), ClusterOverridePolicy (`cop`); `work.karmada.io/v1alpha2`
  ResourceBinding (`rb`) and ClusterResourceBinding (`crb`), the bindings' views.
- KubeFed `core.kubefed.io/v1beta1` FederatedTypeConfig (`ftc`) and KubeFedCluster (`kfc`),
  `scheduling.kubefed.io/v1alpha1` ReplicaSchedulingPreference (`rsp`), and
  `federated_crd(kind, plural, scope)`: a `Federated<Kind>` CRD (`types.kubefed.io`), shaped as
  KubeFed's chart and `kubefedctl enable` write them.
- Karmada's ClusterTaintPolicy and `apps.karmada.io/v1alpha1` WorkloadRebalancer (failover).
- `upstream_crd(name)` builds any other type `upstream_schemas` holds (Karmada's Work and
  Cluster, KubeFedConfig, the multiclusterdns kinds) for the controllers that will serve them;
  `hub_crds()` installs only the types the hub acts on.

tether's own kinds have hand-written schemas, as strict:
- `clusters.cluster.tether.io` (cluster-scoped; short name `tcl`, since `cl` is Cluster API's):
  the member registry, shaped like Karmada's Cluster (spec.syncMode/apiEndpoint/secretRef/...,
  status.conditions/kubernetesVersion/nodeSummary/resourceSummary/apiEnablements).
- `works.work.tether.io`: what the propagation engine applies to one member; namespaced, living
  in the per-cluster namespaces `tether-es-<cluster>`.
- `clusterregistrationrequests.cluster.tether.io` (`crr`, in `tether-system`, named after a
  bootstrap token's id): a pull member's registration, CSR-like. `tether token create` makes it;
  `tether register` fills in the member's details with the bootstrap token; the hub's registry
  controller approves (creating the Cluster and the agent's credentials) or denies it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tether.federation import upstream_schemas

Schema = dict[str, Any]
Crd = dict[str, Any]

CLUSTER_GROUP = "cluster.tether.io"
CLUSTER_VERSION = "v1alpha1"
CLUSTER_API_VERSION = f"{CLUSTER_GROUP}/{CLUSTER_VERSION}"
KARMADA_POLICY_GROUP = "policy.karmada.io"
KARMADA_APPS_GROUP = "apps.karmada.io"
KARMADA_WORK_GROUP = "work.karmada.io"
KUBEFED_CORE_GROUP = "core.kubefed.io"
KUBEFED_SCHEDULING_GROUP = "scheduling.kubefed.io"
KUBEFED_TYPES_GROUP = "types.kubefed.io"
KARMADA_CATEGORY = "karmada-io"
WORK_GROUP = "work.tether.io"
WORK_API_VERSION = f"{WORK_GROUP}/v1alpha1"
CATEGORY = "tether"
EXECUTION_NAMESPACE_PREFIX = "tether-es-"


def execution_namespace(cluster: str) -> str:
    """The hub namespace holding the Works of one member cluster."""
    return f"{EXECUTION_NAMESPACE_PREFIX}{cluster}"


# schema building blocks ---------------------------------------------------------------------


def string(description: str = "", **extra: Any) -> Schema:
    out: Schema = {"type": "string", **extra}
    if description:
        out["description"] = description
    return out


def integer(description: str = "", **extra: Any) -> Schema:
    out: Schema = {"type": "integer", **extra}
    if description:
        out["description"] = description
    return out


def boolean(description: str = "") -> Schema:
    out: Schema = {"type": "boolean"}
    if description:
        out["description"] = description
    return out


def array(items: Schema, description: str = "") -> Schema:
    out: Schema = {"type": "array", "items": items}
    if description:
        out["description"] = description
    return out


def obj(properties: dict[str, Schema] | None = None, *, required: tuple[str, ...] = (),
        description: str = "", preserve: bool = False) -> Schema:
    out: Schema = {"type": "object"}
    if description:
        out["description"] = description
    if properties:
        out["properties"] = properties
    if required:
        out["required"] = list(required)
    if preserve:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def string_map(description: str = "") -> Schema:
    out: Schema = {"type": "object", "additionalProperties": {"type": "string"}}
    if description:
        out["description"] = description
    return out


def any_value(description: str = "") -> Schema:
    """Any JSON value (string, number, object, list...)."""
    out: Schema = {"x-kubernetes-preserve-unknown-fields": True}
    if description:
        out["description"] = description
    return out


def quantity_map(description: str = "") -> Schema:
    out: Schema = {"type": "object", "additionalProperties": {
        "anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}}
    if description:
        out["description"] = description
    return out


def label_selector(description: str = "") -> Schema:
    return obj({
        "matchLabels": string_map(),
        "matchExpressions": array(obj({
            "key": string(),
            "operator": string(),
            "values": array(string()),
        }, required=("key", "operator"))),
    }, description=description)


def conditions() -> Schema:
    """metav1.Condition list, keyed by type."""
    return {
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": obj({
            "type": string(),
            "status": string(enum=["True", "False", "Unknown"]),
            "reason": string(),
            "message": string(),
            "lastTransitionTime": string(format="date-time"),
            "observedGeneration": integer(format="int64"),
        }, required=("type", "status")),
    }


def taint() -> Schema:
    return obj({
        "key": string(),
        "value": string(),
        "effect": string(enum=["NoSchedule", "PreferNoSchedule", "NoExecute"]),
        "timeAdded": string(format="date-time"),
    }, required=("key", "effect"))


def root(spec: Schema | None, status: Schema | None = None, *, description: str = "",
         required: tuple[str, ...] = ()) -> Schema:
    properties: dict[str, Schema] = {
        "apiVersion": string(),
        "kind": string(),
        "metadata": {"type": "object"},
    }
    if spec is not None:
        properties["spec"] = spec
    if status is not None:
        properties["status"] = status
    return obj(properties, description=description, required=required)


def column(name: str, json_path: str, type_: str = "string", priority: int = 0) -> Schema:
    out: Schema = {"name": name, "type": type_, "jsonPath": json_path}
    if priority:
        out["priority"] = priority
    return out


AGE = column("Age", ".metadata.creationTimestamp", "date")


def crd(*, group: str, version: str, kind: str, plural: str, scope: str, schema: Schema,
        short_names: tuple[str, ...] = (), columns: tuple[Schema, ...] = (), status: bool = True,
        categories: tuple[str, ...] = (CATEGORY,)) -> Crd:
    names: dict[str, Any] = {"plural": plural, "singular": kind.lower(), "kind": kind,
                             "listKind": f"{kind}List"}
    if short_names:
        names["shortNames"] = list(short_names)
    if categories:
        names["categories"] = list(categories)
    version_entry: dict[str, Any] = {
        "name": version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
    }
    if status:
        version_entry["subresources"] = {"status": {}}
    if columns:
        version_entry["additionalPrinterColumns"] = list(columns)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}",
                     # not `app.kubernetes.io/managed-by=tether`: that marks propagated objects
                     "labels": {"app.kubernetes.io/part-of": "tether-hub"}},
        "spec": {"group": group, "scope": scope, "names": names, "versions": [version_entry]},
    }


# Cluster ------------------------------------------------------------------------------------


KARMADA_CLUSTER_CRD = "clusters.cluster.karmada.io"


def cluster_crd() -> Crd:
    secret_ref = obj({"namespace": string(), "name": string()}, required=("namespace", "name"))
    spec = obj({
        "id": string("Unique identity of the member: its kube-system namespace uid."),
        "syncMode": string("Push: the hub talks to the member. Pull: an agent in the member does.",
                           enum=["Push", "Pull"]),
        "apiEndpoint": string("The member's API server URL."),
        "secretRef": obj(secret_ref["properties"], required=("namespace", "name"),
                         description="Hub Secret with keys `token` and `caBundle`."),
        "impersonatorSecretRef": obj(secret_ref["properties"], required=("namespace", "name")),
        "insecureSkipTLSVerification": boolean(),
        "proxyURL": string("HTTP CONNECT / socks5 proxy to reach apiEndpoint."),
        "proxyHeader": string_map("Headers sent to the proxy (comma separates values)."),
        "provider": string(),
        "region": string(),
        "zones": array(string()),
        "taints": array(taint()),
        "resourceModels": node(upstream_schema(KARMADA_CLUSTER_CRD), "spec", "resourceModels"),
    }, required=("syncMode",))
    status = obj({
        "kubernetesVersion": string(),
        "apiEnablements": array(obj({
            "groupVersion": string(),
            "resources": array(obj({"name": string(), "kind": string()}, required=("name", "kind"))),
        }, required=("groupVersion",))),
        "conditions": conditions(),
        "nodeSummary": obj({"totalNum": integer(format="int32"), "readyNum": integer(format="int32")}),
        "resourceSummary": obj({
            "allocatable": quantity_map(),
            "allocating": quantity_map(),
            "allocated": quantity_map(),
        }),
        "lastHeartbeatTime": string("When the status was last confirmed fresh (pull agents "
                                    "refresh it; the grace period counts from it).",
                                    format="date-time"),
    })
    return crd(
        group=CLUSTER_GROUP, version=CLUSTER_VERSION, kind="Cluster", plural="clusters",
        scope="Cluster", short_names=("tcl",),
        schema=root(spec, status, description="A member cluster registered with the tether hub.",
                    required=("spec",)),
        columns=(
            column("Version", ".status.kubernetesVersion"),
            column("Mode", ".spec.syncMode"),
            column("Ready", '.status.conditions[?(@.type=="Ready")].status'),
            AGE,
            column("Endpoint", ".spec.apiEndpoint", priority=1),
            column("Region", ".spec.region", priority=1),
        ),
    )


# Upstream kinds -----------------------------------------------------------------------------


class UnknownUpstreamType(KeyError):
    """A CRD name `upstream_schemas` does not hold."""


def upstream_names() -> list[str]:
    """The CRD names (`plural.group`) `upstream_schemas` holds."""
    return sorted(upstream_schemas.TYPES)


def upstream_schema(name: str, version: str | None = None) -> Schema:
    """A copy of upstream's openAPIV3Schema of `name` at `version` (default: the storage one)."""
    entry = _upstream(name)
    for candidate in entry["versions"]:
        if candidate["name"] == version or (version is None and candidate.get("storage")):
            return copy.deepcopy(candidate["schema"])
    raise UnknownUpstreamType(f"{name} has no version {version!r}")


def _upstream(name: str) -> dict[str, Any]:
    try:
        return upstream_schemas.TYPES[name]
    except KeyError:
        raise UnknownUpstreamType(name) from None


def node(schema: Schema, *path: str) -> Schema:
    """The schema node at `path`: property names, `[]` for array items, `{}` for map values."""
    here = schema
    for step in path:
        if step == "[]":
            here = here["items"]
        elif step == "{}":
            here = here["additionalProperties"]
        else:
            here = here["properties"][step]
    return here


def add_properties(schema: Schema, path: tuple[str, ...], properties: dict[str, Schema]) -> None:
    """Declare tether's own `properties` at `path` of an upstream schema (in place)."""
    target = node(schema, *path)
    target.setdefault("properties", {}).update(copy.deepcopy(properties))


SchemaEdit = Callable[[Schema], None]


def upstream_crd(name: str, *, version: str | None = None, edit: SchemaEdit | None = None,
                 categories: tuple[str, ...] = (CATEGORY,)) -> Crd:
    """The hub's CRD for upstream type `name` (`plural.group`), serving one version.

    `version` defaults to upstream's storage version. Names, scope, subresources and printer
    columns are upstream's; `categories` are added to upstream's. `edit` changes the schema
    (tether's additions) before it goes into the CRD.
    """
    entry = _upstream(name)
    chosen = [v for v in entry["versions"]
              if v["name"] == version or (version is None and v.get("storage"))]
    if not chosen:
        raise UnknownUpstreamType(f"{name} has no version {version!r}")
    source = copy.deepcopy(chosen[0])
    schema = source.pop("schema")
    if edit is not None:
        edit(schema)
    version_entry: dict[str, Any] = {"name": source["name"], "served": True, "storage": True,
                                     "schema": {"openAPIV3Schema": schema}}
    for key in ("subresources", "additionalPrinterColumns", "deprecated", "deprecationWarning"):
        if source.get(key):
            version_entry[key] = source[key]
    names = copy.deepcopy(entry["names"])
    merged = list(names.get("categories") or [])
    merged += [c for c in categories if c not in merged]
    if merged:
        names["categories"] = merged
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "tether-hub"}},
        "spec": {"group": entry["group"], "scope": entry["scope"], "names": names,
                 "versions": [version_entry]},
    }


# What tether declares beyond upstream's schemas, by CRD name: for docs/federation.md and tests.
TETHER_ADDITIONS: dict[str, tuple[str, ...]] = {
    "federatedtypeconfigs.core.kubefed.io": (
        "spec.propagation, spec.statusCollection: enum Enabled|Disabled (kubefed's webhook checks)",
        "spec.*Type.scope: enum Cluster|Namespaced (kubefed's webhook checks)",
    ),
    "replicaschedulingpreferences.scheduling.kubefed.io": (
        "spec.targetKind: enum FederatedDeployment|FederatedReplicaSet (the kinds KubeFed schedules)",
        "spec.totalReplicas, spec.clusters.*.{min,max}Replicas, weight: minimum 0",
    ),
    "federated<kind>.types.kubefed.io": (
        "status.conditions[].message, status.clusters[].message: why propagation failed",
    ),
}


# Karmada ------------------------------------------------------------------------------------


def propagation_policy_crd(cluster_scoped: bool) -> Crd:
    name = "clusterpropagationpolicies" if cluster_scoped else "propagationpolicies"
    return upstream_crd(f"{name}.{KARMADA_POLICY_GROUP}")


def override_policy_crd(cluster_scoped: bool) -> Crd:
    name = "clusteroverridepolicies" if cluster_scoped else "overridepolicies"
    return upstream_crd(f"{name}.{KARMADA_POLICY_GROUP}")


def resource_binding_crd(cluster_scoped: bool) -> Crd:
    """Karmada's (Cluster)ResourceBinding at v1alpha2, the version Karmada stores and tools read
    (v1alpha1 is only reachable through Karmada's conversion webhook, which the hub does not run)."""
    name = "clusterresourcebindings" if cluster_scoped else "resourcebindings"
    return upstream_crd(f"{name}.{KARMADA_WORK_GROUP}", version="v1alpha2")


def cluster_taint_policy_crd() -> Crd:
    """Karmada's ClusterTaintPolicy (cluster-scoped); `failover_controllers` acts on it."""
    return upstream_crd(f"clustertaintpolicies.{KARMADA_POLICY_GROUP}")


def workload_rebalancer_crd() -> Crd:
    """Karmada's WorkloadRebalancer (cluster-scoped); `failover_controllers` acts on it."""
    return upstream_crd(f"workloadrebalancers.{KARMADA_APPS_GROUP}")



# KubeFed ------------------------------------------------------------------------------------


def _federated_type_config_edit(schema: Schema) -> None:
    spec = node(schema, "spec")
    for key in ("propagation", "statusCollection"):
        spec["properties"][key]["enum"] = ["Enabled", "Disabled"]
    for key in ("targetType", "federatedType", "statusType"):
        spec["properties"][key]["properties"]["scope"]["enum"] = ["Cluster", "Namespaced"]


def federated_type_config_crd() -> Crd:
    return upstream_crd(f"federatedtypeconfigs.{KUBEFED_CORE_GROUP}", edit=_federated_type_config_edit)


def kubefed_cluster_crd() -> Crd:
    return upstream_crd(f"kubefedclusters.{KUBEFED_CORE_GROUP}")


def _replica_scheduling_preference_edit(schema: Schema) -> None:
    spec = node(schema, "spec")
    spec["properties"]["targetKind"]["enum"] = ["FederatedDeployment", "FederatedReplicaSet"]
    spec["properties"]["totalReplicas"]["minimum"] = 0
    for field in node(spec, "clusters", "{}")["properties"].values():
        field["minimum"] = 0


def replica_scheduling_preference_crd() -> Crd:
    return upstream_crd(f"replicaschedulingpreferences.{KUBEFED_SCHEDULING_GROUP}",
                        edit=_replica_scheduling_preference_edit)


def federated_scope(kind: str, target_scope: str) -> str:
    return "Namespaced" if kind == "Namespace" else target_scope


def federated_type_config(*, group: str, version: str, kind: str, plural: str, scope: str,
                          namespace: str, status_collection: bool = False) -> dict[str, Any]:
    """The FederatedTypeConfig that `kubefedctl enable` creates for a target type."""
    name = f"{plural}.{group}" if group else plural
    target = {"version": version, "kind": kind, "pluralName": plural, "scope": scope}
    if group:
        target["group"] = group
    return {
        "apiVersion": f"{KUBEFED_CORE_GROUP}/v1beta1",
        "kind": "FederatedTypeConfig",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "targetType": target,
            "federatedType": {"group": KUBEFED_TYPES_GROUP, "version": "v1beta1",
                              "kind": f"Federated{kind}", "pluralName": f"federated{plural}",
                              "scope": federated_scope(kind, scope)},
            "propagation": "Enabled",
            "statusCollection": "Enabled" if status_collection else "Disabled",
        },
    }


# KubeFed's chart installs one such CRD per default type; they differ only in their names and,
# for scalable targets, a `retainReplicas` flag tether does not implement (so it is not declared:
# kubectl refuses it rather than tether ignoring it).
FEDERATED_TEMPLATE_CRD = f"federatedconfigmaps.{KUBEFED_TYPES_GROUP}"


def federated_schema(kind: str) -> Schema:
    """The `Federated<Kind>` schema: KubeFed's, strict outside `spec.template` and the override
    values, plus the `message`s tether writes into its status."""
    schema = upstream_schema(FEDERATED_TEMPLATE_CRD)
    node(schema, "spec", "template")["description"] = (
        f"The {kind} to propagate, without name/namespace.")
    add_properties(schema, ("status", "conditions", "[]"), {"message": string()})
    add_properties(schema, ("status", "clusters", "[]"), {"message": string()})
    return schema


def federated_crd(kind: str, plural: str, scope: str) -> Crd:
    """The `Federated<Kind>` CRD (types.kubefed.io/v1beta1) for target type `kind`/`plural`.

    `scope` is the federated type's scope (`Namespaced` or `Cluster`): the target's scope, except
    that KubeFed's FederatedNamespace is Namespaced (it lives in the namespace it federates).
    Use `federated_scope(kind, target_scope)` to pick it.
    """
    if scope not in ("Namespaced", "Cluster"):
        raise ValueError(f"scope must be Namespaced or Cluster, not {scope!r}")
    return crd(group=KUBEFED_TYPES_GROUP, version="v1beta1", kind=f"Federated{kind}",
               plural=f"federated{plural}", scope=scope, schema=federated_schema(kind),
               categories=(CATEGORY, "federated"))


# Work ---------------------------------------------------------------------------------------


def work_crd() -> Crd:
    identifier = obj({
        "ordinal": integer(),
        "group": string(),
        "version": string(),
        "kind": string(),
        "resource": string(),
        "namespace": string(),
        "name": string(),
    }, required=("ordinal", "version", "kind", "name"))
    spec = obj({
        "workload": obj({"manifests": array({
            "type": "object",
            "x-kubernetes-embedded-resource": True,
            "x-kubernetes-preserve-unknown-fields": True,
        })}),
        "suspendDispatching": boolean(),
        "preserveResourcesOnDeletion": boolean(),
        "conflictResolution": string(enum=["Abort", "Overwrite"]),
    })
    status = obj({
        "conditions": conditions(),
        "manifestStatuses": array(obj({
            "identifier": identifier,
            "status": obj(preserve=True),
            "health": string(enum=["Healthy", "Unhealthy", "Unknown"]),
            "applied": boolean(),
            "reason": string(),
            "message": string(),
            "generation": integer(format="int64", description="The member object's generation."),
            "appliedAt": string(format="date-time"),
            "latencySeconds": {"type": "number",
                               "description": "Source change seen on the hub → applied."},
        }, required=("identifier",))),
    })
    return crd(
        group=WORK_GROUP, version="v1alpha1", kind="Work", plural="works", scope="Namespaced",
        schema=root(spec, status),
        columns=(column("Applied", '.status.conditions[?(@.type=="Applied")].status'), AGE),
    )


# ClusterRegistrationRequest ------------------------------------------------------------------


REGISTRATION_KIND = "ClusterRegistrationRequest"
REGISTRATION_PLURAL = "clusterregistrationrequests"


def registration_request_crd() -> Crd:
    spec = obj({
        "clusterName": string("The Cluster this request may register (set with the token)."),
        "tokenID": string("The bootstrap token (id) allowed to submit this request."),
        "apiEndpoint": string("The member's API server URL."),
        "clusterID": string("The member's kube-system namespace uid."),
        "proxyURL": string("HTTP CONNECT proxy the hub reaches the member through."),
        "credentials": obj({
            "token": string("The member ServiceAccount token the hub will use (moved to the "
                            "Secret tether-system/<clusterName> and removed from here)."),
            "caBundle": string("The member API's CA (base64 PEM)."),
        }, description="Submitted by the registrant; removed once the hub has taken them."),
    }, required=("clusterName",))
    status = obj({
        "conditions": conditions(),
        "observedGeneration": integer(format="int64"),
        "agentToken": string("The agent's hub token, for the registrant to collect (the request "
                             "is deleted once collected)."),
    })
    return crd(
        group=CLUSTER_GROUP, version=CLUSTER_VERSION, kind=REGISTRATION_KIND,
        plural=REGISTRATION_PLURAL, scope="Namespaced", short_names=("crr",),
        schema=root(spec, status, description="A pull member's registration with the hub.",
                    required=("spec",)),
        columns=(column("Cluster", ".spec.clusterName"),
                 column("Approved", '.status.conditions[?(@.type=="Approved")].status'),
                 column("Denied", '.status.conditions[?(@.type=="Denied")].status'), AGE),
    )


def hub_crds() -> list[Crd]:
    """Every CRD `tether hub install` creates (the Federated<Kind> ones come with the types)."""
    return [
        cluster_crd(),
        propagation_policy_crd(False),
        propagation_policy_crd(True),
        override_policy_crd(False),
        override_policy_crd(True),
        resource_binding_crd(False),
        resource_binding_crd(True),
        cluster_taint_policy_crd(),
        workload_rebalancer_crd(),
        federated_type_config_crd(),
        kubefed_cluster_crd(),
        replica_scheduling_preference_crd(),
        work_crd(),
        registration_request_crd(),
    ]
