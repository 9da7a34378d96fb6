"""Hub CRDs: structural, accepted by the local API server's CRD validation, names as documented,
and strict: unknown fields are found everywhere except where upstream leaves a value open."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tether.federation import crds, install, upstream_schemas
from tether.local import crds as local_crds
from tether.local import schema

Obj = dict[str, Any]


def all_crds() -> list[Obj]:
    return (crds.hub_crds() + [install.federated_type_objects(t)[0] for t in install.DEFAULT_TYPES]
            + [crds.upstream_crd(name) for name in crds.upstream_names()])


def root_schema(crd: Obj) -> Obj:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def by_name(name: str) -> Obj:
    return next(c for c in crds.hub_crds() if c["metadata"]["name"] == name)


@pytest.mark.parametrize("crd", all_crds(), ids=lambda c: c["metadata"]["name"])
def test_structural_and_valid(crd: Obj) -> None:
    assert local_crds.validation_causes(crd) == []
    for version in crd["spec"]["versions"]:
        assert schema.check_structural(version["schema"]["openAPIV3Schema"]) == []


def test_names_and_short_names() -> None:
    by = {c["metadata"]["name"]: c for c in crds.hub_crds()}
    expected = {
        "clusters.cluster.tether.io": ("Cluster", ["tcl"]),
        "propagationpolicies.policy.karmada.io": ("Namespaced", ["pp"]),
        "clusterpropagationpolicies.policy.karmada.io": ("Cluster", ["cpp"]),
        "overridepolicies.policy.karmada.io": ("Namespaced", ["op"]),
        "clusteroverridepolicies.policy.karmada.io": ("Cluster", ["cop"]),
        "resourcebindings.work.karmada.io": ("Namespaced", ["rb"]),
        "clusterresourcebindings.work.karmada.io": ("Cluster", ["crb"]),
        "clustertaintpolicies.policy.karmada.io": ("Cluster", None),
        "workloadrebalancers.apps.karmada.io": ("Cluster", None),
        "federatedtypeconfigs.core.kubefed.io": ("Namespaced", ["ftc"]),
        "kubefedclusters.core.kubefed.io": ("Namespaced", ["kfc"]),
        "replicaschedulingpreferences.scheduling.kubefed.io": ("Namespaced", ["rsp"]),
        "works.work.tether.io": ("Namespaced", None),
        "clusterregistrationrequests.cluster.tether.io": ("Namespaced", ["crr"]),
    }
    assert set(by) == set(expected)
    for name, (scope, short) in expected.items():
        spec = by[name]["spec"]
        assert spec["scope"] == scope, name
        assert spec["names"].get("shortNames") == short, name
        assert "tether" in spec["names"]["categories"], name


def test_upstream_versions_are_served_as_upstream_stores_them() -> None:
    versions = {c["metadata"]["name"]: [v["name"] for v in c["spec"]["versions"]]
                for c in crds.hub_crds()}
    assert versions["resourcebindings.work.karmada.io"] == ["v1alpha2"]
    assert versions["clusterresourcebindings.work.karmada.io"] == ["v1alpha2"]
    assert versions["propagationpolicies.policy.karmada.io"] == ["v1alpha1"]
    assert versions["federatedtypeconfigs.core.kubefed.io"] == ["v1beta1"]
    assert versions["kubefedclusters.core.kubefed.io"] == ["v1beta1"]
    assert versions["replicaschedulingpreferences.scheduling.kubefed.io"] == ["v1alpha1"]
    binding = by_name("resourcebindings.work.karmada.io")["spec"]["versions"][0]
    assert binding["subresources"] == {"status": {}}
    assert [c["name"] for c in binding["additionalPrinterColumns"]] == ["SCHEDULED", "FULLYAPPLIED", "AGE"]


def test_generated_module_records_its_sources() -> None:
    repos = {s["repo"] for s in upstream_schemas.SOURCES}
    assert repos == {"karmada-io/karmada", "kubernetes-retired/kubefed"}
    for source in upstream_schemas.SOURCES:
        assert re.fullmatch(r"[0-9a-f]{40}", source["commit"]), source
        assert (upstream_schemas.__doc__ or "").count(source["commit"]) == 1
    groups = {t["group"] for t in upstream_schemas.TYPES.values()}
    assert groups == {"policy.karmada.io", "work.karmada.io", "cluster.karmada.io", "apps.karmada.io",
                      "core.kubefed.io", "types.kubefed.io", "scheduling.kubefed.io",
                      "multiclusterdns.kubefed.io"}
    kinds = {t["names"]["kind"] for t in upstream_schemas.TYPES.values()}
    assert {"PropagationPolicy", "ClusterPropagationPolicy", "OverridePolicy", "ClusterOverridePolicy",
            "ClusterTaintPolicy", "ResourceBinding", "ClusterResourceBinding", "Work", "Cluster",
            "WorkloadRebalancer", "FederatedTypeConfig", "KubeFedCluster", "KubeFedConfig",
            "ReplicaSchedulingPreference", "Domain", "ServiceDNSRecord", "IngressDNSRecord",
            "DNSEndpoint"} <= kinds


def test_no_description_text_is_copied() -> None:
    def walk(node: Any) -> None:
        if isinstance(node, dict):
            props = node.get("properties") or {}
            assert "description" not in node or isinstance(node["description"], dict)
            for key, child in node.items():
                walk(props if key == "properties" else child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    for entry in upstream_schemas.TYPES.values():
        for version in entry["versions"]:
            walk(version["schema"])


# strictness -------------------------------------------------------------------------------------


def preserved_paths(node: Obj, path: str = "") -> list[str]:
    out = [path] if node.get("x-kubernetes-preserve-unknown-fields") else []
    for key, child in (node.get("properties") or {}).items():
        out += preserved_paths(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        out += preserved_paths(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        out += preserved_paths(node["additionalProperties"], f"{path}.*")
    return out


OVERRIDER_VALUES = [f"{base}.{leaf}" for base in (".spec.overrideRules[].overriders", ".spec.overriders")
                    for leaf in ("fieldOverrider[].json[].value", "fieldOverrider[].yaml[].value",
                                 "plaintext[].value")]


def test_unknown_fields_are_kept_only_where_upstream_keeps_them() -> None:
    expected = {
        "clusters.cluster.tether.io": [],
        "propagationpolicies.policy.karmada.io": [],
        "clusterpropagationpolicies.policy.karmada.io": [],
        "overridepolicies.policy.karmada.io": OVERRIDER_VALUES,
        "clusteroverridepolicies.policy.karmada.io": OVERRIDER_VALUES,
        "resourcebindings.work.karmada.io": [".status.aggregatedStatus[].status"],
        "clusterresourcebindings.work.karmada.io": [".status.aggregatedStatus[].status"],
        "federatedtypeconfigs.core.kubefed.io": [],
        "kubefedclusters.core.kubefed.io": [],
        "replicaschedulingpreferences.scheduling.kubefed.io": [],
        "works.work.tether.io": [".spec.workload.manifests[]", ".status.manifestStatuses[].status"],
        "clusterregistrationrequests.cluster.tether.io": [],
        "clustertaintpolicies.policy.karmada.io": [],
        "workloadrebalancers.apps.karmada.io": [],
    }
    got = {c["metadata"]["name"]: sorted(preserved_paths(root_schema(c))) for c in crds.hub_crds()}
    assert got == {name: sorted(paths) for name, paths in expected.items()}
    federated = root_schema(crds.federated_crd("Deployment", "deployments", "Namespaced"))
    assert sorted(preserved_paths(federated)) == [
        ".spec.overrides[].clusterOverrides[].value", ".spec.template", ".status.clusters[].remoteStatus"]


def karmada(kind: str, spec: Obj) -> Obj:
    return {"apiVersion": "policy.karmada.io/v1alpha1", "kind": kind, "metadata": {"name": "p"},
            "spec": spec}


SELECTORS = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"}]


@pytest.mark.parametrize(("crd_name", "obj", "unknown"), [
    ("overridepolicies.policy.karmada.io",
     karmada("OverridePolicy", {"resourceSelectors": SELECTORS, "overrideRules": [{
         "targetCluster": {"clusterNames": ["member1"]},
         "overriders": {"labelOverrider": [{"operator": "add", "value": {"a": "b"}}]}}]}),
     ["spec.overrideRules[0].overriders.labelOverrider"]),
    ("propagationpolicies.policy.karmada.io",
     karmada("PropagationPolicy", {"resourceSelectorz": SELECTORS, "resourceSelectors": SELECTORS}),
     ["spec.resourceSelectorz"]),
    ("clusterpropagationpolicies.policy.karmada.io",
     karmada("ClusterPropagationPolicy", {"resourceSelectors": SELECTORS, "placement": {
         "clusterAffinity": {"clusterNames": ["member1"], "labelSelectr": {"matchLabels": {"a": "b"}}}}}),
     ["spec.placement.clusterAffinity.labelSelectr"]),
    ("clusteroverridepolicies.policy.karmada.io",
     karmada("ClusterOverridePolicy", {"overrideRules": [{"overriders": {"plaintext": [
         {"path": "/spec/replicas", "operator": "replace", "value": {"any": ["thing"]}, "valeu": 1}]}}]}),
     ["spec.overrideRules[0].overriders.plaintext[0].valeu"]),
])
def test_typos_are_found(crd_name: str, obj: Obj, unknown: list[str]) -> None:
    pruned, removed = schema.prune(obj, root_schema(by_name(crd_name)))
    assert removed == unknown
    assert schema.validate(schema.apply_defaults(pruned, root_schema(by_name(crd_name))),
                           root_schema(by_name(crd_name))) == []


def test_federated_types_are_strict_outside_the_template() -> None:
    root = root_schema(crds.federated_crd("Deployment", "deployments", "Namespaced"))
    fed = {"apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedDeployment",
           "metadata": {"name": "d", "namespace": "n"},
           "spec": {"template": {"spec": {"replicas": 3, "anything": {"goes": True}}},
                    "placement": {"clusters": [{"name": "a"}], "clusterSelectr": {}},
                    "overrides": [{"clusterName": "a", "clusterOverrides": [
                        {"path": "/spec/replicas", "value": 5, "operation": "replace"}]}],
                    "retainReplicas": True}}
    pruned, removed = schema.prune(fed, root)
    assert removed == ["spec.placement.clusterSelectr",
                       "spec.overrides[0].clusterOverrides[0].operation", "spec.retainReplicas"]
    assert pruned["spec"]["template"] == fed["spec"]["template"]
    bad_op = {**fed, "spec": {"overrides": [{"clusterName": "a", "clusterOverrides": [
        {"path": "/x", "op": "move"}]}]}}
    assert [v.field for v in schema.validate(bad_op, root)] == ["spec.overrides.0.clusterOverrides.0.op"]
    assert [v.field for v in schema.validate({**fed, "spec": None}, root)] == ["spec"]


def test_upstream_defaults_and_enums_apply() -> None:
    root = root_schema(by_name("propagationpolicies.policy.karmada.io"))
    policy = karmada("PropagationPolicy", {"resourceSelectors": SELECTORS,
                                           "placement": {"replicaScheduling": {}}})
    defaulted = schema.apply_defaults(policy, root)
    assert defaulted["spec"]["conflictResolution"] == "Abort"
    assert defaulted["spec"]["placement"]["replicaScheduling"]["replicaSchedulingType"] == "Divided"
    bad = karmada("PropagationPolicy", {"resourceSelectors": SELECTORS, "conflictResolution": "Replace",
                                        "placement": {"replicaScheduling": {
                                            "replicaSchedulingType": "Spread"}}})
    assert sorted(v.field for v in schema.validate(bad, root)) == [
        "spec.conflictResolution", "spec.placement.replicaScheduling.replicaSchedulingType"]
    empty = karmada("PropagationPolicy", {"resourceSelectors": []})
    assert [v.field for v in schema.validate(empty, root)] == ["spec.resourceSelectors"]


def test_kubefed_tether_additions() -> None:
    ftc = root_schema(by_name("federatedtypeconfigs.core.kubefed.io"))
    assert crds.node(ftc, "spec", "propagation")["enum"] == ["Enabled", "Disabled"]
    assert crds.node(ftc, "spec", "targetType", "scope")["enum"] == ["Cluster", "Namespaced"]
    rsp = root_schema(by_name("replicaschedulingpreferences.scheduling.kubefed.io"))
    bad = {"apiVersion": "scheduling.kubefed.io/v1alpha1", "kind": "ReplicaSchedulingPreference",
           "metadata": {"name": "r"}, "spec": {"targetKind": "FederatedJob", "totalReplicas": 4,
                                               "clusters": {"*": {"weight": -1}}}}
    assert sorted(v.field for v in schema.validate(bad, rsp)) == ["spec.clusters.*.weight", "spec.targetKind"]
    # the upstream copy itself is not changed by the additions
    assert "enum" not in crds.node(crds.upstream_schema("federatedtypeconfigs.core.kubefed.io"),
                                   "spec", "propagation")


def test_federated_status_carries_tether_messages() -> None:
    root = root_schema(crds.federated_crd("ConfigMap", "configmaps", "Namespaced"))
    status = {"conditions": [{"type": "Propagation", "status": "False", "reason": "CheckClusters",
                              "message": "a: ClusterNotReady"}],
              "clusters": [{"name": "a", "status": "ClusterNotReady", "message": "not ready"}]}
    _, removed = schema.prune({"status": status}, root)
    assert removed == []


def test_cluster_columns_and_status() -> None:
    version = crds.cluster_crd()["spec"]["versions"][0]
    assert [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")] == [
        "Version", "Mode", "Ready", "Age"]
    assert version["subresources"] == {"status": {}}
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["syncMode"]["enum"] == ["Push", "Pull"]
    assert {"apiEndpoint", "secretRef", "proxyURL", "region", "zones", "provider", "taints", "id"} <= set(
        spec["properties"])


def test_cluster_schema_accepts_a_joined_cluster_and_rejects_bad_mode() -> None:
    root = root_schema(crds.cluster_crd())
    good: Obj = {"apiVersion": "cluster.tether.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "a"},
                 "spec": {"syncMode": "Push", "apiEndpoint": "https://x", "zones": ["z"],
                          "secretRef": {"namespace": "tether-system", "name": "a"},
                          "taints": [{"key": "k", "effect": "NoSchedule"}],
                          "resourceModels": [{"grade": 0, "ranges": [
                              {"name": "cpu", "min": "0", "max": "1"}]}]},
                 "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "ClusterReady",
                                            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                            "resourceSummary": {"allocatable": {"cpu": "2", "pods": 110}}}}
    assert schema.prune(good, root)[1] == []
    assert schema.validate(good, root) == []
    bad = {**good, "spec": {**good["spec"], "syncMode": "Sideways"}}
    assert [v.field for v in schema.validate(bad, root)] == ["spec.syncMode"]
    bad_model = {**good, "spec": {**good["spec"], "resourceModels": [{"grade": 0, "ranges": [{"name": "cpu"}]}]}}
    assert sorted(v.field for v in schema.validate(bad_model, root)) == [
        "spec.resourceModels.0.ranges.0.max", "spec.resourceModels.0.ranges.0.min"]


def test_federated_crd() -> None:
    crd = crds.federated_crd("Deployment", "deployments", "Namespaced")
    assert crd["metadata"]["name"] == "federateddeployments.types.kubefed.io"
    assert crd["spec"]["names"]["kind"] == "FederatedDeployment"
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["template"]["x-kubernetes-preserve-unknown-fields"] is True
    assert crds.federated_scope("Namespace", "Cluster") == "Namespaced"
    ftc = crds.federated_type_config(group="", version="v1", kind="Namespace", plural="namespaces",
                                     scope="Cluster", namespace="tether-system")
    assert ftc["metadata"]["name"] == "namespaces"
    assert ftc["spec"]["federatedType"]["scope"] == "Namespaced"
    with pytest.raises(ValueError):
        crds.federated_crd("X", "xs", "Global")


def test_unknown_upstream_type() -> None:
    with pytest.raises(crds.UnknownUpstreamType):
        crds.upstream_crd("widgets.example.com")
    with pytest.raises(crds.UnknownUpstreamType):
        crds.upstream_crd("resourcebindings.work.karmada.io", version="v9")


def test_what_tether_writes_itself_is_declared() -> None:
    """`tether federate` objects and `tether enable` CRDs fit the schemas, with nothing pruned."""
    from tether.federation import kubefed, typeconfig

    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "web", "namespace": "n", "uid": "u", "resourceVersion": "1"},
                  "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c"}]}}},
                  "status": {"replicas": 2}}
    federated = kubefed.federate(deployment)
    root = root_schema(crds.federated_crd("Deployment", "deployments", "Namespaced"))
    assert schema.prune(federated, root)[1] == []
    assert schema.validate(federated, root) == []
    target = typeconfig.ApiType("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", True,
                                "poddisruptionbudget", ("pdb",))
    objects = typeconfig.type_objects(target, federated_group="example.io")
    assert objects.crd["metadata"]["name"] == "federatedpoddisruptionbudgets.example.io"
    assert objects.crd["spec"]["names"]["shortNames"] == ["fpdb"]
    enabled = root_schema(objects.crd)
    assert sorted(preserved_paths(enabled)) == [
        ".spec.overrides[].clusterOverrides[].value", ".spec.template", ".status.clusters[].remoteStatus"]
    ftc_root = root_schema(by_name("federatedtypeconfigs.core.kubefed.io"))
    assert schema.prune(objects.type_config, ftc_root)[1] == []
    assert schema.validate(objects.type_config, ftc_root) == []


def test_tether_additions_name_served_types() -> None:
    served = {c["metadata"]["name"] for c in crds.hub_crds()}
    assert set(crds.TETHER_ADDITIONS) - served == {"federated<kind>.types.kubefed.io"}


def test_failover_types_are_served_from_upstream_schemas() -> None:
    taint = crds.cluster_taint_policy_crd()
    assert (taint["spec"]["names"]["kind"], taint["spec"]["scope"]) == ("ClusterTaintPolicy", "Cluster")
    rebalancer = crds.workload_rebalancer_crd()
    assert rebalancer["spec"]["group"] == "apps.karmada.io"
    assert rebalancer["spec"]["versions"][0]["subresources"] == {"status": {}}
    served = {c["metadata"]["name"] for c in crds.hub_crds()}
    assert {taint["metadata"]["name"], rebalancer["metadata"]["name"]} <= served
