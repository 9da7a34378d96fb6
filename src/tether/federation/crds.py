"""The hub's CustomResourceDefinitions, as Python data with structural schemas.

- `clusters.cluster.tether.io` (cluster-scoped; short name `tcl`, since `cl` is Cluster API's):
  the member registry, shaped like Karmada's Cluster (spec.syncMode/apiEndpoint/secretRef/...,
  status.conditions/kubernetesVersion/nodeSummary/resourceSummary/apiEnablements).
- Karmada `policy.karmada.io/v1alpha1`: PropagationPolicy (`pp`), ClusterPropagationPolicy
  (`cpp`), OverridePolicy (`op`), ClusterOverridePolicy (`cop`).
- KubeFed `core.kubefed.io/v1beta1` FederatedTypeConfig (`ftc`) and
  `scheduling.kubefed.io/v1alpha1` ReplicaSchedulingPreference (`rsp`).
- `works.work.tether.io`: what the propagation engine applies to one member; namespaced, living
  in the per-cluster namespaces `tether-es-<cluster>`.
- `clusterregistrationrequests.cluster.tether.io` (`crr`, in `tether-system`, named after a
  bootstrap token's id): a pull member's registration, CSR-like. `tether token create` makes it;
  `tether register` fills in the member's details with the bootstrap token; the hub's registry
  controller approves (creating the Cluster and the agent's credentials) or denies it.
- `federated_crd(kind, plural, scope)`: a KubeFed `Federated<Kind>` CRD (`types.kubefed.io`).

Bodies users write (templates, policy details) keep `x-kubernetes-preserve-unknown-fields`, but
every field users rely on is declared, so it shows in `kubectl explain` and is type-checked.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]
Crd = dict[str, Any]

CLUSTER_GROUP = "cluster.tether.io"
CLUSTER_VERSION = "v1alpha1"
CLUSTER_API_VERSION = f"{CLUSTER_GROUP}/{CLUSTER_VERSION}"
KARMADA_POLICY_GROUP = "policy.karmada.io"
KARMADA_WORK_GROUP = "work.karmada.io"
KUBEFED_CORE_GROUP = "core.kubefed.io"
KUBEFED_SCHEDULING_GROUP = "scheduling.kubefed.io"
KUBEFED_TYPES_GROUP = "types.kubefed.io"
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


def toleration() -> Schema:
    return obj({
        "key": string(),
        "operator": string(enum=["Exists", "Equal"]),
        "value": string(),
        "effect": string(),
        "tolerationSeconds": integer(format="int64"),
    })


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
        "resourceModels": array(obj(preserve=True)),
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


# Karmada policies ---------------------------------------------------------------------------


def resource_selectors() -> Schema:
    return array(obj({
        "apiVersion": string(),
        "kind": string(),
        "namespace": string(),
        "name": string(),
        "labelSelector": label_selector(),
    }, required=("apiVersion", "kind")), "Which resource templates the policy applies to.")


def cluster_affinity() -> Schema:
    return obj({
        "clusterNames": array(string()),
        "exclude": array(string()),
        "labelSelector": label_selector(),
        "fieldSelector": obj({"matchExpressions": array(obj({
            "key": string(), "operator": string(), "values": array(string()),
        }, required=("key", "operator")))}),
    })


def placement() -> Schema:
    affinity = cluster_affinity()
    term = dict(affinity)
    term["properties"] = {**affinity["properties"], "affinityName": string()}
    term["required"] = ["affinityName"]
    return obj({
        "clusterAffinity": affinity,
        "clusterAffinities": array(term),
        "clusterTolerations": array(toleration()),
        "spreadConstraints": array(obj({
            "spreadByField": string(enum=["cluster", "region", "zone", "provider"]),
            "spreadByLabel": string(),
            "maxGroups": integer(),
            "minGroups": integer(),
        })),
        "replicaScheduling": obj({
            "replicaSchedulingType": string(enum=["Duplicated", "Divided"]),
            "replicaDivisionPreference": string(enum=["Aggregated", "Weighted"]),
            "weightPreference": obj({
                "staticWeightList": array(obj({
                    "targetCluster": cluster_affinity(),
                    "weight": integer(minimum=1),
                }, required=("targetCluster", "weight"))),
                "dynamicWeight": string(enum=["AvailableReplicas"]),
            }),
        }),
    }, preserve=True)


def propagation_spec() -> Schema:
    return obj({
        "resourceSelectors": resource_selectors(),
        "placement": placement(),
        "priority": integer(),
        "preemption": string(enum=["Always", "Never"]),
        "propagateDeps": boolean(),
        "conflictResolution": string(enum=["Abort", "Overwrite"]),
        "preserveResourcesOnDeletion": boolean(),
        "suspension": obj(preserve=True),
        "failover": obj(preserve=True),
        "schedulerName": string(),
        "dependentOverrides": array(string()),
        "activationPreference": string(),
    }, required=("resourceSelectors",), preserve=True)


def propagation_policy_crd(cluster_scoped: bool) -> Crd:
    kind = "ClusterPropagationPolicy" if cluster_scoped else "PropagationPolicy"
    return crd(
        group=KARMADA_POLICY_GROUP, version="v1alpha1", kind=kind,
        plural="clusterpropagationpolicies" if cluster_scoped else "propagationpolicies",
        scope="Cluster" if cluster_scoped else "Namespaced",
        short_names=("cpp",) if cluster_scoped else ("pp",),
        schema=root(propagation_spec(), obj(preserve=True), required=("spec",)),
        columns=(column("Conflict-Resolution", ".spec.conflictResolution"),
                 column("Priority", ".spec.priority", "integer"), AGE),
        status=False,
    )


def overriders() -> Schema:
    plain = array(obj({
        "path": string(),
        "operator": string(enum=["add", "remove", "replace"]),
        "value": any_value(),
    }, required=("path", "operator")))
    image = array(obj({
        "predicate": obj({"path": string()}, required=("path",)),
        "component": string(enum=["Registry", "Repository", "Tag"]),
        "operator": string(enum=["add", "remove", "replace"]),
        "value": string(),
    }, required=("component", "operator")))
    command = array(obj({
        "containerName": string(),
        "operator": string(enum=["add", "remove"]),
        "value": array(string()),
    }, required=("containerName", "operator")))
    labels = array(obj({
        "operator": string(enum=["add", "remove", "replace"]),
        "value": string_map(),
    }, required=("operator",)))
    return obj({
        "plaintext": plain,
        "imageOverrider": image,
        "commandOverrider": command,
        "argsOverrider": command,
        "labelsOverrider": labels,
        "annotationsOverrider": labels,
    }, preserve=True)


def override_spec() -> Schema:
    return obj({
        "resourceSelectors": resource_selectors(),
        "overrideRules": array(obj({
            "targetCluster": cluster_affinity(),
            "overriders": overriders(),
        }, required=("overriders",))),
        "targetCluster": cluster_affinity(),
        "overriders": overriders(),
    }, preserve=True)


def override_policy_crd(cluster_scoped: bool) -> Crd:
    kind = "ClusterOverridePolicy" if cluster_scoped else "OverridePolicy"
    return crd(
        group=KARMADA_POLICY_GROUP, version="v1alpha1", kind=kind,
        plural="clusteroverridepolicies" if cluster_scoped else "overridepolicies",
        scope="Cluster" if cluster_scoped else "Namespaced",
        short_names=("cop",) if cluster_scoped else ("op",),
        schema=root(override_spec(), required=("spec",)),
        columns=(AGE,),
        status=False,
    )


def resource_binding_crd(cluster_scoped: bool) -> Crd:
    """Karmada's (Cluster)ResourceBinding at v1alpha2: the hub's view of each template's
    scheduling result (written by the hub, read with `kubectl get rb`)."""
    kind = "ClusterResourceBinding" if cluster_scoped else "ResourceBinding"
    return crd(
        group=KARMADA_WORK_GROUP, version="v1alpha2", kind=kind, plural=f"{kind.lower()}s",
        scope="Cluster" if cluster_scoped else "Namespaced",
        short_names=("crb",) if cluster_scoped else ("rb",),
        schema=root(obj(preserve=True), obj(preserve=True), required=("spec",)),
        columns=(column("Scheduled", '.status.conditions[?(@.type=="Scheduled")].status'),
                 column("FullyApplied", '.status.conditions[?(@.type=="FullyApplied")].status'),
                 AGE),
        categories=(CATEGORY, "karmada-io"),
    )


# KubeFed ------------------------------------------------------------------------------------


def kubefed_cluster_crd() -> Crd:
    """KubeFed's KubeFedCluster: in the hub namespace, a view of each tether Cluster."""
    return crd(
        group=KUBEFED_CORE_GROUP, version="v1beta1", kind="KubeFedCluster",
        plural="kubefedclusters", scope="Namespaced", short_names=("kfc",),
        schema=root(obj(preserve=True), obj(preserve=True), required=("spec",)),
        columns=(AGE, column("Ready", ".status.conditions[?(@.type=='Ready')].status"),
                 column("Kubernetes-Version", ".status.kubernetesVersion")),
    )


def api_resource() -> Schema:
    return obj({
        "group": string(),
        "version": string(),
        "kind": string(),
        "pluralName": string(),
        "scope": string(enum=["Cluster", "Namespaced"]),
    }, required=("kind", "pluralName", "scope", "version"))


def federated_type_config_crd() -> Crd:
    spec = obj({
        "targetType": api_resource(),
        "federatedType": api_resource(),
        "statusType": api_resource(),
        "propagation": string(enum=["Enabled", "Disabled"]),
        "statusCollection": string(enum=["Enabled", "Disabled"]),
    }, required=("targetType", "federatedType", "propagation"))
    status = obj({
        "observedGeneration": integer(format="int64"),
        "propagationController": string(enum=["Running", "NotRunning"]),
        "statusController": string(enum=["Running", "NotRunning"]),
    })
    return crd(
        group=KUBEFED_CORE_GROUP, version="v1beta1", kind="FederatedTypeConfig",
        plural="federatedtypeconfigs", scope="Namespaced", short_names=("ftc",),
        schema=root(spec, status, required=("spec",)),
        columns=(AGE,),
    )


def replica_scheduling_preference_crd() -> Crd:
    preference = obj({
        "minReplicas": integer(format="int64", minimum=0),
        "maxReplicas": integer(format="int64", minimum=0),
        "weight": integer(format="int64", minimum=0),
    })
    spec = obj({
        "targetKind": string(enum=["FederatedDeployment", "FederatedReplicaSet"]),
        "totalReplicas": integer(format="int32", minimum=0),
        "rebalance": boolean(),
        "intersectWithClusterSelector": boolean(),
        "clusters": {"type": "object", "additionalProperties": preference,
                     "description": "Per cluster name (or `*`) preferences."},
    }, required=("targetKind", "totalReplicas"))
    return crd(
        group=KUBEFED_SCHEDULING_GROUP, version="v1alpha1", kind="ReplicaSchedulingPreference",
        plural="replicaschedulingpreferences", scope="Namespaced", short_names=("rsp",),
        schema=root(spec, obj(preserve=True), required=("spec",)),
        columns=(AGE,),
    )


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


def federated_crd(kind: str, plural: str, scope: str) -> Crd:
    """The `Federated<Kind>` CRD (types.kubefed.io/v1beta1) for target type `kind`/`plural`.

    `scope` is the federated type's scope (`Namespaced` or `Cluster`): the target's scope, except
    that KubeFed's FederatedNamespace is Namespaced (it lives in the namespace it federates).
    Use `federated_scope(kind, target_scope)` to pick it.
    """
    if scope not in ("Namespaced", "Cluster"):
        raise ValueError(f"scope must be Namespaced or Cluster, not {scope!r}")
    placement_schema = obj({
        "clusters": array(obj({"name": string()}, required=("name",))),
        "clusterSelector": label_selector(),
    })
    overrides = array(obj({
        "clusterName": string(),
        "clusterOverrides": array(obj({
            "op": string(enum=["add", "remove", "replace"]),
            "path": string(),
            "value": any_value(),
        }, required=("path",))),
    }, required=("clusterName",)))
    spec = obj({
        "template": obj(preserve=True, description=f"The {kind} to propagate, without name/namespace."),
        "placement": placement_schema,
        "overrides": overrides,
    }, preserve=True)
    status = obj({
        "observedGeneration": integer(format="int64"),
        "conditions": array(obj({
            "type": string(),
            "status": string(),
            "reason": string(),
            "message": string(),
            "lastTransitionTime": string(format="date-time"),
            "lastUpdateTime": string(format="date-time"),
        }, required=("type", "status"))),
        "clusters": array(obj({
            "name": string(),
            "status": string(),
            "message": string(),
            "remoteStatus": obj(preserve=True),
        }, required=("name",))),
    }, preserve=True)
    federated_kind = f"Federated{kind}"
    return crd(
        group=KUBEFED_TYPES_GROUP, version="v1beta1", kind=federated_kind,
        plural=f"federated{plural}", scope=scope,
        schema=root(spec, status),
        columns=(AGE,),
        categories=(CATEGORY, "federated"),
    )


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
        federated_type_config_crd(),
        kubefed_cluster_crd(),
        replica_scheduling_preference_crd(),
        work_crd(),
        registration_request_crd(),
    ]
