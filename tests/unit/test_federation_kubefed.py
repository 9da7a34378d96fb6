"""The KubeFed dialect end to end: Federated<Kind> → per-cluster objects → status."""

from __future__ import annotations

from typing import Any

import pytest

from tether.federation.kubefed import (
    ClusterResult,
    compile_federated,
    federate,
    federated_type_names,
    kubefed_status,
    within_namespace,
)
from tether.federation.model import ClusterFailure, ClusterInfo, WorkItem

CLUSTERS = (ClusterInfo("cluster"), ClusterInfo("cluster1"))
SOURCE = "kubefed:types.kubefed.io/v1beta1/FederatedDeployment/test-namespace/test-deployment"

# KubeFed's FederatedDeployment with per-cluster overrides (`cluster`: 5 replicas, another
# image, an annotation added then removed), as tests/e2e/test_propagation.py applies it once
# its indentation is fixed.
FED_DEPLOY = {
    "apiVersion": "types.kubefed.io/v1beta1",
    "kind": "FederatedDeployment",
    "metadata": {"name": "test-deployment", "namespace": "test-namespace"},
    "spec": {
        "template": {
            "metadata": {"labels": {"app": "nginx"}},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "nginx"}},
                "template": {
                    "metadata": {"labels": {"app": "nginx"}},
                    "spec": {"containers": [{"image": "nginx:1.17", "name": "nginx"}]},
                },
            },
        },
        "placement": {"clusters": [{"name": "cluster"}, {"name": "cluster1"}]},
        "overrides": [{
            "clusterName": "cluster",
            "clusterOverrides": [
                {"path": "/spec/replicas", "value": 5},
                {"path": "/spec/template/spec/containers/0/image", "value": "nginx:1.14.0-alpine"},
                {"path": "/metadata/annotations", "op": "add", "value": {"foo": "bar"}},
                {"path": "/metadata/annotations/foo", "op": "remove"},
            ],
        }],
    },
}


def _expected(replicas: int, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "test-deployment",
            "namespace": "test-namespace",
            "labels": {"app": "nginx", "kubefed.io/managed": "true",
                       "app.kubernetes.io/managed-by": "tether"},
            "annotations": {"tether.io/source": SOURCE},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {
                "metadata": {"labels": {"app": "nginx"}},
                "spec": {"containers": [{"image": image, "name": "nginx"}]},
            },
        },
    }


def _compile(fed: Any, clusters: Any = CLUSTERS, rsp: Any = None, kind: str = "Deployment",
             api_version: str = "apps/v1") -> Any:
    return compile_federated(fed, target_api_version=api_version, target_kind=kind,
                             clusters=clusters, rsp=rsp)


def test_federated_deployment_with_overrides_end_to_end() -> None:
    plan = _compile(FED_DEPLOY)
    assert plan.dialect == "kubefed"
    assert str(plan.source) == (
        "FederatedDeployment.types.kubefed.io/v1beta1 test-namespace/test-deployment")
    assert plan.works == (
        WorkItem("cluster", _expected(5, "nginx:1.14.0-alpine"), 5),
        WorkItem("cluster1", _expected(3, "nginx:1.17"), 3),
    )
    assert plan.failures == ()
    assert plan.conflict_resolution == "Overwrite"  # KubeFed adopts by default
    assert not plan.preserve_on_deletion
    # the input is not mutated
    assert FED_DEPLOY["spec"]["template"]["spec"]["replicas"] == 3  # type: ignore[index]


def test_federated_namespace_becomes_a_namespace_in_each_cluster() -> None:
    fed_ns = {"apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedNamespace",
              "metadata": {"name": "test-namespace", "namespace": "test-namespace"},
              "spec": {"placement": {"clusters": [{"name": "cluster"}, {"name": "cluster1"}]}}}
    plan = _compile(fed_ns, kind="Namespace", api_version="v1")
    assert [w.cluster for w in plan.works] == ["cluster", "cluster1"]
    assert plan.works[0].manifest == {
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {
            "name": "test-namespace",
            "labels": {"kubefed.io/managed": "true", "app.kubernetes.io/managed-by": "tether"},
            "annotations": {"tether.io/source": "kubefed:types.kubefed.io/v1beta1/"
                            "FederatedNamespace/test-namespace/test-namespace"},
        },
    }
    assert plan.works[0].replicas is None


def test_bad_override_fails_only_that_cluster() -> None:
    fed = {**FED_DEPLOY, "spec": {**FED_DEPLOY["spec"], "overrides": [  # type: ignore[dict-item]
        {"clusterName": "cluster1", "clusterOverrides": [
            {"path": "/spec/template/spec/containers/3/image", "value": "x"}]}]}}
    plan = _compile(fed)
    assert [w.cluster for w in plan.works] == ["cluster"]
    assert plan.failures == (ClusterFailure(
        "cluster1", "ApplyOverridesFailed",
        'path "/spec/template/spec/containers/3/image": index 3 is out of bounds'),)


def test_placement_failures_and_orphaning() -> None:
    fed = {**FED_DEPLOY, "metadata": {**FED_DEPLOY["metadata"],  # type: ignore[dict-item]
                                    "annotations": {"kubefed.io/orphan": "true"}},
           "spec": {**FED_DEPLOY["spec"], "placement": {  # type: ignore[dict-item]
               "clusters": [{"name": "cluster"}, {"name": "gone"}]}}}
    clusters = (ClusterInfo("cluster", ready=False), ClusterInfo("cluster1"))
    plan = _compile(fed, clusters)
    assert plan.works == ()
    assert [(f.cluster, f.reason) for f in plan.failures] == [
        ("cluster", "ClusterNotReady"), ("gone", "ClusterNotFound")]
    assert plan.preserve_on_deletion


RSP = {"apiVersion": "scheduling.kubefed.io/v1alpha1", "kind": "ReplicaSchedulingPreference",
       "metadata": {"name": "test-deployment", "namespace": "test-namespace"},
       "spec": {"targetKind": "FederatedDeployment", "totalReplicas": 50,
                "clusters": {"*": {"weight": 1}, "C": {"maxReplicas": 20, "weight": 1}}}}


@pytest.mark.parametrize(
    ("ready", "expected", "failures"),
    [
        ({"A": True, "B": True, "C": True}, {"A": 16, "B": 17, "C": 17}, []),
        ({"A": True, "B": False, "C": True}, {"A": 30, "C": 20}, [("B", "ClusterNotReady")]),
        ({"A": False, "B": False, "C": True}, {"C": 20},
         [("A", "ClusterNotReady"), ("B", "ClusterNotReady")]),
    ],
)
def test_rsp_drives_replicas_and_clusters(
    ready: dict[str, bool], expected: dict[str, int], failures: list[tuple[str, str]]
) -> None:
    fed = {**FED_DEPLOY, "metadata": {"name": "frontend", "namespace": "default"},
           "spec": {**FED_DEPLOY["spec"], "overrides": [],  # type: ignore[dict-item]
                    "placement": {"clusterSelector": {}}}}
    clusters = tuple(ClusterInfo(n, ready=r) for n, r in ready.items())
    rsp = {**RSP, "metadata": {"name": "frontend", "namespace": "default"}}
    plan = _compile(fed, clusters, rsp)
    assert {w.cluster: w.replicas for w in plan.works} == expected
    assert {w.cluster: w.manifest["spec"]["replicas"] for w in plan.works} == expected
    assert [(f.cluster, f.reason) for f in plan.failures] == failures


def test_rsp_replicas_beat_a_replicas_override() -> None:
    """KubeFed's RSP controller rewrites the `/spec/replicas` override of every scheduled
    cluster: the FederatedDeployment's `replicas: 5` for `cluster` gives way, its other
    overrides apply."""
    rsp = {"spec": {"totalReplicas": 9, "clusters": {"cluster": {"weight": 1},
                                                     "cluster1": {"weight": 2}}}}
    plan = _compile(FED_DEPLOY, rsp=rsp)
    assert {w.cluster: w.replicas for w in plan.works} == {"cluster": 3, "cluster1": 6}
    by = {w.cluster: w.manifest for w in plan.works}
    assert by["cluster"]["spec"]["replicas"] == 3
    image = by["cluster"]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "nginx:1.14.0-alpine"
    assert sum(w.replicas or 0 for w in plan.works) == 9


def test_rsp_replicas_override_removal_is_ignored_too() -> None:
    fed = {**FED_DEPLOY, "spec": {**FED_DEPLOY["spec"], "overrides": [  # type: ignore[dict-item]
        {"clusterName": "cluster", "clusterOverrides": [{"path": "/spec/replicas",
                                                         "op": "remove"}]}]}}
    plan = _compile(fed, rsp={"spec": {"totalReplicas": 4}})
    assert {w.cluster: w.manifest["spec"]["replicas"] for w in plan.works} == {
        "cluster": 2, "cluster1": 2}
    assert plan.failures == ()


@pytest.mark.parametrize("clusters", [None, {}])
def test_rsp_without_clusters_weighs_every_cluster_alike(clusters: object) -> None:
    spec: dict[str, object] = {"totalReplicas": 5}
    if clusters is not None:
        spec["clusters"] = clusters
    fed = {**FED_DEPLOY, "spec": {**FED_DEPLOY["spec"], "overrides": []}}  # type: ignore[dict-item]
    plan = _compile(fed, rsp={"spec": spec})
    replicas = {w.cluster: w.replicas for w in plan.works}
    assert sorted(replicas) == ["cluster", "cluster1"]
    assert sorted(replicas.values()) == [2, 3]


def test_rsp_intersect_with_placement() -> None:
    rsp = {"spec": {"totalReplicas": 4, "intersectWithClusterSelector": True,
                    "clusters": {"*": {"weight": 1}}}}
    fed = {**FED_DEPLOY, "spec": {**FED_DEPLOY["spec"], "overrides": [],  # type: ignore[dict-item]
                                "placement": {"clusters": [{"name": "cluster1"}]}}}
    plan = _compile(fed, (*CLUSTERS, ClusterInfo("other")), rsp)
    assert {w.cluster: w.replicas for w in plan.works} == {"cluster1": 4}


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (("Deployment", "apps", "v1", "deployments"),
         ("FederatedDeployment", "federateddeployments", "deployments.apps")),
        (("ConfigMap", "", "v1", "configmaps"),
         ("FederatedConfigMap", "federatedconfigmaps", "configmaps")),
        (("ClusterRole", "rbac.authorization.k8s.io", "v1", "clusterroles"),
         ("FederatedClusterRole", "federatedclusterroles",
          "clusterroles.rbac.authorization.k8s.io")),
    ],
)
def test_federated_type_names(args: tuple[str, str, str, str], names: tuple[str, ...]) -> None:
    result = federated_type_names(*args)
    assert tuple(result) == names
    assert result.ftc_name == names[2]


def test_federate_like_kubefedctl() -> None:
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "shop", "uid": "u", "resourceVersion": "9",
                     "labels": {"app": "web"}, "annotations": {"x": "y"}},
        "spec": {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1"], "type": "NodePort",
                 "ports": [{"port": 80, "nodePort": 30080}]},
        "status": {"loadBalancer": {}},
    }
    assert federate(service) == {
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedService",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"type": "NodePort", "ports": [{"port": 80}]}},
            "placement": {"clusterSelector": {"matchLabels": {}}},
        },
    }
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"},
                 "spec": {"finalizers": ["kubernetes"]}}
    fed_ns = federate(namespace)
    assert fed_ns["metadata"] == {"name": "shop", "namespace": "shop"}
    assert fed_ns["spec"]["template"] == {"spec": {}}
    sa = {"apiVersion": "v1", "kind": "ServiceAccount",
          "metadata": {"name": "bot", "namespace": "shop"}, "secrets": [{"name": "t"}]}
    assert federate(sa)["spec"]["template"] == {}
    # the federated object compiles back to the original (minus server fields)
    plan = compile_federated(federate(service), target_api_version="v1", target_kind="Service",
                             clusters=CLUSTERS)
    assert plan.works[0].manifest["spec"] == {"type": "NodePort", "ports": [{"port": 80}]}


def test_kubefed_status() -> None:
    plan = _compile(FED_DEPLOY, (ClusterInfo("cluster"), ClusterInfo("cluster1"),
                               ClusterInfo("down", ready=False)))
    plan = type(plan)(**{**plan.__dict__, "failures": (
        ClusterFailure("down", "ClusterNotReady", "not ready"),)})
    results = {
        "cluster": ClusterResult(True, observed_status={"replicas": 5}, latency_seconds=0.4),
        "cluster1": ClusterResult(False, "UpdateFailed", "field is immutable"),
    }
    status = kubefed_status(plan, results, generation=3, now="2024-01-01T00:00:00Z")
    assert status == {
        "observedGeneration": 3,
        "conditions": [{"type": "Propagation", "status": "False", "reason": "CheckClusters",
                        "lastUpdateTime": "2024-01-01T00:00:00Z",
                        "lastTransitionTime": "2024-01-01T00:00:00Z"}],
        "clusters": [
            {"name": "cluster", "remoteStatus": {"replicas": 5}},
            {"name": "cluster1", "status": "UpdateFailed"},
            {"name": "down", "status": "ClusterNotReady"},
        ],
    }
    healthy = kubefed_status(_compile(FED_DEPLOY), {"cluster": ClusterResult(True),
                                                  "cluster1": ClusterResult(True)})
    assert healthy == {"conditions": [{"type": "Propagation", "status": "True"}],
                       "clusters": [{"name": "cluster"}, {"name": "cluster1"}]}
    failed_plan = type(plan)(source=plan.source, dialect="kubefed",
                             error_reason="NamespaceNotFederated", error_message="ns")
    assert kubefed_status(failed_plan, {})["conditions"] == [
        {"type": "Propagation", "status": "False", "reason": "NamespaceNotFederated",
         "message": "ns"}]


def _fns(*names: str) -> dict[str, Any]:
    return {"apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedNamespace",
            "metadata": {"name": "ns", "namespace": "ns"},
            "spec": {"placement": {"clusters": [{"name": n} for n in names]}}}


@pytest.mark.parametrize(
    ("fns_clusters", "ready", "works", "failures"),
    [
        # the namespace left cluster1: its contents leave it too, without a failure
        (("cluster",), {"cluster": True, "cluster1": True}, ["cluster"], []),
        (("cluster", "cluster1"), {"cluster": True, "cluster1": True},
         ["cluster", "cluster1"], []),
        # a not-ready cluster the namespace is placed in is still reported
        (("cluster", "cluster1"), {"cluster": True, "cluster1": False}, ["cluster"],
         [("cluster1", "ClusterNotReady")]),
        # ... one it is not placed in is not
        (("cluster",), {"cluster": True, "cluster1": False}, ["cluster"], []),
        # an unknown cluster named by the object stays reported
        (("cluster", "cluster1", "gone"), {"cluster": True, "cluster1": True},
         ["cluster", "cluster1"], [("gone", "ClusterNotFound")]),
    ],
)
def test_within_namespace_leaves_clusters_out_without_failing(
    fns_clusters: tuple[str, ...], ready: dict[str, bool], works: list[str],
    failures: list[tuple[str, str]],
) -> None:
    extra = ("gone",) if "gone" in fns_clusters else ()
    fed = {**FED_DEPLOY, "metadata": {"name": "web", "namespace": "ns"},
           "spec": {**FED_DEPLOY["spec"], "overrides": [],  # type: ignore[dict-item]
                    "placement": {"clusters": [{"name": n} for n in
                                               ("cluster", "cluster1", *extra)]}}}
    clusters = tuple(ClusterInfo(n, ready=r) for n, r in ready.items())
    plan = within_namespace(_compile(fed, clusters), _fns(*fns_clusters), clusters)
    assert [w.cluster for w in plan.works] == works
    assert [(f.cluster, f.reason) for f in plan.failures] == failures
    assert not plan.error_reason
