"""Hub CRDs: structural, accepted by the local API server's CRD validation, names as documented."""

from __future__ import annotations

from typing import Any

import pytest

from tether.federation import crds, install
from tether.local import crds as local_crds
from tether.local import schema


def all_crds() -> list[dict]:  # type: ignore[type-arg]
    return crds.hub_crds() + [install.federated_type_objects(t)[0] for t in install.DEFAULT_TYPES]


@pytest.mark.parametrize("crd", all_crds(), ids=lambda c: c["metadata"]["name"])
def test_structural_and_valid(crd: dict) -> None:  # type: ignore[type-arg]
    assert local_crds.validation_causes(crd) == []
    for version in crd["spec"]["versions"]:
        assert schema.check_structural(version["schema"]["openAPIV3Schema"]) == []


def test_names_and_short_names() -> None:
    by_name = {c["metadata"]["name"]: c for c in crds.hub_crds()}
    expected = {
        "clusters.cluster.tether.io": ("Cluster", ["tcl"]),
        "propagationpolicies.policy.karmada.io": ("Namespaced", ["pp"]),
        "clusterpropagationpolicies.policy.karmada.io": ("Cluster", ["cpp"]),
        "overridepolicies.policy.karmada.io": ("Namespaced", ["op"]),
        "clusteroverridepolicies.policy.karmada.io": ("Cluster", ["cop"]),
        "resourcebindings.work.karmada.io": ("Namespaced", ["rb"]),
        "clusterresourcebindings.work.karmada.io": ("Cluster", ["crb"]),
        "federatedtypeconfigs.core.kubefed.io": ("Namespaced", ["ftc"]),
        "kubefedclusters.core.kubefed.io": ("Namespaced", ["kfc"]),
        "replicaschedulingpreferences.scheduling.kubefed.io": ("Namespaced", ["rsp"]),
        "works.work.tether.io": ("Namespaced", None),
        "clusterregistrationrequests.cluster.tether.io": ("Namespaced", ["crr"]),
    }
    assert set(by_name) == set(expected)
    for name, (scope, short) in expected.items():
        spec = by_name[name]["spec"]
        assert spec["scope"] == scope, name
        assert spec["names"].get("shortNames") == short, name


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
    root = crds.cluster_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    good: dict[str, Any] = {"apiVersion": "cluster.tether.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "a"},
            "spec": {"syncMode": "Push", "apiEndpoint": "https://x", "zones": ["z"],
                     "secretRef": {"namespace": "tether-system", "name": "a"},
                     "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "ClusterReady",
                                       "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                       "resourceSummary": {"allocatable": {"cpu": "2", "pods": 110}}}}
    assert schema.validate(good, root) == []
    bad = {**good, "spec": {**good["spec"], "syncMode": "Sideways"}}
    assert [v.field for v in schema.validate(bad, root)] == ["spec.syncMode"]


def test_policies_keep_user_fields_visible_and_unknown_ones() -> None:
    root = crds.propagation_policy_crd(False)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    policy = {"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
              "metadata": {"name": "p"},
              "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                       "placement": {"clusterAffinity": {"clusterNames": ["a"]},
                                     "replicaScheduling": {"replicaSchedulingType": "Divided"},
                                     "futureField": {"x": 1}}}}
    pruned, removed = schema.prune(policy, root)
    assert removed == [] and pruned["spec"]["placement"]["futureField"] == {"x": 1}
    placement = root["properties"]["spec"]["properties"]["placement"]["properties"]
    assert {"clusterAffinity", "clusterTolerations", "spreadConstraints", "replicaScheduling"} <= set(placement)


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
