"""The Karmada dialect: policy matching, override order, compilation, dependencies, status."""

from __future__ import annotations

from typing import Any

import pytest

from tether.federation.karmada import (
    aggregate_status,
    applicable_overrides,
    compile_template,
    dependencies,
    match_policy,
)
from tether.federation.model import ClusterFailure, ClusterInfo, ResourceRef, WorkItem

CLUSTERS = (ClusterInfo("cluster", labels={"env": "prod"}), ClusterInfo("cluster1"))

NGINX = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "nginx", "namespace": "default", "labels": {"app": "nginx"},
                 "uid": "1234", "resourceVersion": "77", "generation": 2},
    "spec": {
        "replicas": 6,
        "selector": {"matchLabels": {"app": "nginx"}},
        "template": {"metadata": {"labels": {"app": "nginx"}},
                     "spec": {"containers": [{"name": "nginx", "image": "nginx:1.17"}]}},
    },
    "status": {"replicas": 0},
}

# The issue's example: 6 replicas, Divided by static weights 2:1 over cluster/cluster1.
POLICY = {
    "apiVersion": "policy.karmada.io/v1alpha1",
    "kind": "PropagationPolicy",
    "metadata": {"name": "nginx-propagation", "namespace": "default"},
    "spec": {
        "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"}],
        "placement": {
            "clusterAffinity": {"clusterNames": ["cluster", "cluster1"]},
            "replicaScheduling": {
                "replicaSchedulingType": "Divided",
                "replicaDivisionPreference": "Weighted",
                "weightPreference": {"staticWeightList": [
                    {"targetCluster": {"clusterNames": ["cluster"]}, "weight": 2},
                    {"targetCluster": {"clusterNames": ["cluster1"]}, "weight": 1},
                ]},
            },
        },
    },
}
OVERRIDE = {
    "apiVersion": "policy.karmada.io/v1alpha1",
    "kind": "OverridePolicy",
    "metadata": {"name": "nginx-registry", "namespace": "default"},
    "spec": {
        "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx"}],
        "overrideRules": [{
            "targetCluster": {"clusterNames": ["cluster", "cluster1"]},
            "overriders": {"imageOverrider": [
                {"component": "Registry", "operator": "replace", "value": "registry.example.com"},
            ]},
        }],
    },
}
SOURCE = "karmada:apps/v1/Deployment/default/nginx"


def _member(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "nginx", "namespace": "default",
                     "labels": {"app": "nginx", "app.kubernetes.io/managed-by": "tether"},
                     "annotations": {"tether.io/source": SOURCE}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "nginx"}},
            "template": {"metadata": {"labels": {"app": "nginx"}}, "spec": {"containers": [
                {"name": "nginx", "image": "registry.example.com/nginx:1.17"}]}},
        },
    }


def test_issue_example_static_weights_and_image_override() -> None:
    assert match_policy(NGINX, [POLICY]) is POLICY
    plan = compile_template(NGINX, POLICY, [OVERRIDE], CLUSTERS)
    assert plan.error_reason == ""
    assert plan.works == (WorkItem("cluster", _member(4), 4), WorkItem("cluster1", _member(2), 2))
    assert plan.conflict_resolution == "Abort"
    assert plan.dependencies == ()


def test_bad_override_fails_only_that_cluster() -> None:
    bad = {**OVERRIDE, "spec": {"overrideRules": [
        {"targetCluster": {"clusterNames": ["cluster1"]},
         "overriders": {"plaintext": [{"path": "/spec/nope/x", "operator": "replace",
                                       "value": 1}]}}]}}
    plan = compile_template(NGINX, POLICY, [bad], CLUSTERS)
    assert [(w.cluster, w.replicas) for w in plan.works] == [("cluster", 4)]
    assert plan.failures == (ClusterFailure("cluster1", "ApplyOverridesFailed",
                                            'path "/spec/nope/x" does not exist'),)


def test_duplicated_non_workload_and_policy_options() -> None:
    policy = {**POLICY, "spec": {**POLICY["spec"], "placement": {},  # type: ignore[dict-item]
                                 "conflictResolution": "Overwrite",
                                 "preserveResourcesOnDeletion": True}}
    plan = compile_template(NGINX, policy, [], CLUSTERS)
    assert [(w.cluster, w.replicas) for w in plan.works] == [("cluster", 6), ("cluster1", 6)]
    assert plan.conflict_resolution == "Overwrite"
    assert plan.preserve_on_deletion
    assert "status" not in plan.works[0].manifest
    assert "uid" not in plan.works[0].manifest["metadata"]
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}}
    divided = {"spec": {"placement": POLICY["spec"]["placement"]}}  # type: ignore[index]
    plan = compile_template(cm, divided, [], CLUSTERS)
    assert [(w.cluster, w.replicas) for w in plan.works] == [("cluster", None), ("cluster1", None)]


def test_job_parallelism_is_divided() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "d"},
           "spec": {"parallelism": 3, "template": {"spec": {"containers": []}}}}
    policy: dict[str, Any] = {"spec": {"placement": {"replicaScheduling": {}}}}
    plan = compile_template(job, policy, [], CLUSTERS)
    assert [(w.cluster, w.manifest["spec"]["parallelism"]) for w in plan.works] == [
        ("cluster", 2), ("cluster1", 1)]


def test_no_cluster_fit_and_not_enough_capacity() -> None:
    policy = {"spec": {"placement": {"clusterAffinity": {"clusterNames": ["nowhere"]}}}}
    plan = compile_template(NGINX, policy, [], CLUSTERS)
    assert plan.works == ()
    assert plan.error_reason == "NoClusterFit"
    assert plan.error_message == ("0/2 clusters are available: 2 cluster(s) did not match the "
                                  "placement cluster affinity constraint.")
    assert plan.failures == (ClusterFailure("nowhere", "ClusterNotFound",
                                            "cluster 'nowhere' is not registered"),)
    dynamic = {"spec": {"placement": {"replicaScheduling": {
        "replicaDivisionPreference": "Weighted",
        "weightPreference": {"dynamicWeight": "AvailableReplicas"}}}}}
    small = (ClusterInfo("a", available_replicas=2), ClusterInfo("b", available_replicas=1))
    plan = compile_template(NGINX, dynamic, [], small)
    assert plan.error_reason == "Unschedulable"
    assert plan.error_message.startswith("Clusters available replicas 3 are not enough to schedule.")


def _pp(name: str, *selectors: dict[str, Any], priority: int | None = None,
        kind: str = "PropagationPolicy", namespace: str = "default") -> dict[str, Any]:
    spec: dict[str, Any] = {"resourceSelectors": list(selectors)}
    if priority is not None:
        spec["priority"] = priority
    metadata = {"name": name} if kind.startswith("Cluster") else {"name": name,
                                                                  "namespace": namespace}
    return {"apiVersion": "policy.karmada.io/v1alpha1", "kind": kind, "metadata": metadata,
            "spec": spec}


KIND = {"apiVersion": "apps/v1", "kind": "Deployment"}
BY_NAME = {**KIND, "name": "nginx"}
BY_LABEL = {**KIND, "labelSelector": {"matchLabels": {"app": "nginx"}}}


@pytest.mark.parametrize(
    ("policies", "winner"),
    [
        ([_pp("a", KIND), _pp("b", BY_LABEL), _pp("c", BY_NAME)], "c"),  # name > label > kind
        ([_pp("a", KIND), _pp("b", BY_LABEL)], "b"),
        ([_pp("z", KIND), _pp("y", KIND)], "y"),  # alphabetical
        ([_pp("a", BY_NAME), _pp("b", KIND, priority=1)], "b"),  # explicit priority first
        ([_pp("a", BY_NAME, priority=-1), _pp("b", KIND)], "b"),
        ([_pp("a", BY_NAME, namespace="other"), _pp("b", KIND)], "b"),  # PP: own namespace only
        ([_pp("a", BY_NAME, kind="ClusterPropagationPolicy", priority=9), _pp("b", KIND)], "b"),
        ([_pp("a", BY_NAME, kind="ClusterPropagationPolicy"), _pp("b", {**KIND, "name": "x"})],
         "a"),
        ([_pp("a", {**BY_NAME, "labelSelector": {"matchLabels": {"app": "other"}}})], "a"),
        ([_pp("a", {**KIND, "namespace": "other"})], None),
        ([_pp("a", {"apiVersion": "apps/v1beta1", "kind": "Deployment"})], None),
        ([_pp("a", {**KIND, "labelSelector": {"matchLabels": {"app": "other"}}})], None),
    ],
)
def test_match_policy(policies: list[dict[str, Any]], winner: str | None) -> None:
    matched = match_policy(NGINX, policies)
    assert (matched["metadata"]["name"] if matched else None) == winner


def test_cluster_scoped_resources_only_match_cluster_policies() -> None:
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "foos.example.com"}}
    sel = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition"}
    assert match_policy(crd, [_pp("a", sel)]) is None
    assert match_policy(crd, [_pp("a", sel, kind="ClusterPropagationPolicy")]) is not None


def test_applicable_overrides_order() -> None:
    ops = [
        _pp("op-name", BY_NAME, kind="OverridePolicy"),
        _pp("op-all", kind="OverridePolicy"),  # no selectors: every resource
        _pp("op-label", BY_LABEL, kind="OverridePolicy"),
        _pp("op-other-ns", BY_NAME, kind="OverridePolicy", namespace="other"),
        _pp("op-miss", {**KIND, "name": "x"}, kind="OverridePolicy"),
        _pp("cop-b", KIND, kind="ClusterOverridePolicy"),
        _pp("cop-a", BY_NAME, kind="ClusterOverridePolicy"),
        _pp("cop-c", KIND, kind="ClusterOverridePolicy"),
    ]
    names = [p["metadata"]["name"] for p in applicable_overrides(NGINX, ops)]
    assert names == ["cop-b", "cop-c", "cop-a", "op-all", "op-label", "op-name"]


def test_most_specific_override_wins() -> None:
    def tag(name: str, value: str, *selectors: dict[str, Any]) -> dict[str, Any]:
        op = _pp(name, *selectors, kind="OverridePolicy")
        op["spec"]["overrideRules"] = [{"overriders": {"imageOverrider": [
            {"component": "Tag", "operator": "replace", "value": value}]}}]
        return op

    policy: dict[str, Any] = {"spec": {"placement": {}}}
    plan = compile_template(NGINX, policy, [tag("a", "named", BY_NAME), tag("b", "kind", KIND)],
                            CLUSTERS[:1])
    image = plan.works[0].manifest["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "nginx:named"


def test_override_rules_by_cluster_and_legacy_form() -> None:
    op = {"kind": "OverridePolicy", "metadata": {"name": "o", "namespace": "default"},
          "spec": {"targetCluster": {"labelSelector": {"matchLabels": {"env": "prod"}}},
                   "overriders": {"labelsOverrider": [{"operator": "add",
                                                       "value": {"env": "prod"}}]}}}
    plan = compile_template(NGINX, {"spec": {"placement": {}}}, [op], CLUSTERS)
    labels = {w.cluster: w.manifest["metadata"]["labels"].get("env") for w in plan.works}
    assert labels == {"cluster": "prod", "cluster1": None}


POD_TEMPLATE = {
    "serviceAccountName": "runner",
    "imagePullSecrets": [{"name": "pull"}],
    "initContainers": [{"name": "init", "envFrom": [{"configMapRef": {"name": "init-env"}}]}],
    "containers": [{
        "name": "app",
        "env": [
            {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "a"}}},
            {"name": "B", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "b"}}},
            {"name": "C", "value": "plain"},
        ],
        "envFrom": [{"secretRef": {"name": "env-secret"}}],
    }],
    "volumes": [
        {"name": "v1", "configMap": {"name": "cfg"}},
        {"name": "v2", "secret": {"secretName": "tls"}},
        {"name": "v3", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "v4", "projected": {"sources": [{"configMap": {"name": "proj-cm"}},
                                                 {"secret": {"name": "proj-secret"}}]}},
        {"name": "v5", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi-secret"}}},
        {"name": "v6", "emptyDir": {}},
    ],
}


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        ("Deployment", {"spec": {"template": {"spec": POD_TEMPLATE}}}),
        ("Pod", {"spec": POD_TEMPLATE}),
        ("CronJob", {"spec": {"jobTemplate": {"spec": {"template": {"spec": POD_TEMPLATE}}}}}),
    ],
)
def test_dependencies(kind: str, body: dict[str, Any]) -> None:
    template = {"apiVersion": "apps/v1", "kind": kind,
                "metadata": {"name": "x", "namespace": "shop"}, **body}
    refs = [(r.kind, r.name) for r in dependencies(template)]
    assert refs == [
        ("ConfigMap", "cfg"), ("ConfigMap", "init-env"), ("ConfigMap", "proj-cm"),
        ("Secret", "creds"), ("Secret", "csi-secret"), ("Secret", "env-secret"),
        ("Secret", "proj-secret"), ("Secret", "pull"), ("Secret", "tls"),
        ("ServiceAccount", "runner"),
        ("PersistentVolumeClaim", "data"),
    ]
    assert {r.namespace for r in dependencies(template)} == {"shop"}


def test_dependencies_edge_cases() -> None:
    default_sa = {"kind": "Pod", "metadata": {"namespace": "n"},
                  "spec": {"serviceAccountName": "default", "containers": []}}
    assert dependencies(default_sa) == ()
    assert dependencies({"kind": "ConfigMap", "metadata": {"name": "c"}}) == ()
    policy = {"spec": {"propagateDeps": True, "placement": {}}}
    template = {**NGINX, "spec": {**NGINX["spec"], "template": {  # type: ignore[dict-item]
        "spec": {"containers": [], "volumes": [{"name": "v", "configMap": {"name": "cfg"}}]}}}}
    plan = compile_template(template, policy, [], CLUSTERS)
    assert plan.dependencies == (ResourceRef("v1", "ConfigMap", "default", "cfg"),)


def _deploy_status(**kw: int) -> dict[str, int]:
    return {"replicas": 0, "readyReplicas": 0, "availableReplicas": 0, "updatedReplicas": 0,
            "unavailableReplicas": 0, **kw}


@pytest.mark.parametrize(
    ("members", "observed"),
    [
        # all members caught up with template generation 2 → observedGeneration 2
        ({"a": {"generation": 5, "observedGeneration": 5, "resourceTemplateGeneration": 2},
          "b": {"generation": 1, "observedGeneration": 1, "resourceTemplateGeneration": 2}}, 2),
        # one member still rendering an older template → keep the previous value (1)
        ({"a": {"generation": 5, "observedGeneration": 5, "resourceTemplateGeneration": 1},
          "b": {"generation": 1, "observedGeneration": 1, "resourceTemplateGeneration": 2}}, 1),
        # one member's controller has not observed its own generation yet
        ({"a": {"generation": 6, "observedGeneration": 5, "resourceTemplateGeneration": 2}}, 1),
        ({"a": {}}, 1),  # no generation info: not caught up
    ],
)
def test_deployment_observed_generation(members: dict[str, dict[str, int]], observed: int) -> None:
    template = {**NGINX, "status": {"observedGeneration": 1}}
    status = aggregate_status(template, members)
    assert status is not None
    assert status["observedGeneration"] == observed


def test_aggregate_workloads() -> None:
    members = {
        "a": {**_deploy_status(replicas=4, readyReplicas=4, availableReplicas=4,
                               updatedReplicas=4), "observedGeneration": 1, "generation": 1,
              "resourceTemplateGeneration": 2},
        "b": {**_deploy_status(replicas=2, readyReplicas=1, availableReplicas=1,
                               updatedReplicas=2, unavailableReplicas=1),
              "observedGeneration": 1, "generation": 1, "resourceTemplateGeneration": 2},
    }
    assert aggregate_status(NGINX, members) == {
        "observedGeneration": 2, "replicas": 6, "updatedReplicas": 6, "readyReplicas": 5,
        "availableReplicas": 5, "unavailableReplicas": 1}
    sts = {**NGINX, "kind": "StatefulSet", "status": {}}
    assert aggregate_status(sts, {"a": {"replicas": 2, "currentReplicas": 2},
                                  "b": {"replicas": 1, "readyReplicas": 1}}) == {
        "replicas": 3, "readyReplicas": 1, "currentReplicas": 2, "updatedReplicas": 0,
        "availableReplicas": 0}
    rs = {**NGINX, "kind": "ReplicaSet", "status": {}}
    assert aggregate_status(rs, {"a": {"replicas": 2, "fullyLabeledReplicas": 2}, "b": None}) == {
        "replicas": 2, "fullyLabeledReplicas": 2, "readyReplicas": 0, "availableReplicas": 0}
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"generation": 1}}
    ds_status = aggregate_status(ds, {"a": {"desiredNumberScheduled": 3, "numberReady": 3},
                                      "b": {"desiredNumberScheduled": 2, "numberReady": 1}})
    assert ds_status is not None
    assert (ds_status["desiredNumberScheduled"], ds_status["numberReady"]) == (5, 4)


def _job_member(succeeded: int = 0, failed: int = 0, condition: str = "",
                start: str = "", end: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {"succeeded": succeeded, "failed": failed}
    if condition:
        status["conditions"] = [{"type": condition, "status": "True",
                                 "lastTransitionTime": end or start}]
    if start:
        status["startTime"] = start
    if end:
        status["completionTime"] = end
    return status


def test_aggregate_job() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}}
    done = aggregate_status(job, {
        "a": _job_member(2, condition="Complete", start="T1", end="T5"),
        "b": _job_member(1, condition="Complete", start="T0", end="T3"),
    })
    assert done == {"active": 0, "succeeded": 3, "failed": 0, "startTime": "T0",
                    "completionTime": "T5", "conditions": [
                        {"type": "Complete", "status": "True", "reason": "Completed",
                         "message": "Job completed", "lastTransitionTime": "T5"}]}
    partial = aggregate_status(job, {"a": _job_member(2, condition="Complete", start="T1",
                                                      end="T5"),
                                     "b": {"active": 1, "startTime": "T2"}})
    assert partial == {"active": 1, "succeeded": 2, "failed": 0, "startTime": "T1"}
    failed = aggregate_status(job, {"a": _job_member(0, 3, condition="Failed", start="T1"),
                                    "b": {"active": 1}})
    assert failed is not None
    assert failed["conditions"][0]["type"] == "Failed"
    assert failed["conditions"][0]["message"] == "Job executed failed in member cluster(s): a"


def test_aggregate_service_pod_pvc_and_unknown() -> None:
    lb = {"apiVersion": "v1", "kind": "Service", "spec": {"type": "LoadBalancer"}}
    assert aggregate_status(lb, {
        "b": {"loadBalancer": {"ingress": [{"hostname": "lb.example.com"}]}},
        "a": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}},
    }) == {"loadBalancer": {"ingress": [{"ip": "1.2.3.4", "hostname": "a"},
                                        {"hostname": "lb.example.com"}]}}
    assert aggregate_status({"kind": "Service", "spec": {"type": "ClusterIP"}}, {}) is None
    pod = {"apiVersion": "v1", "kind": "Pod"}
    for phases, want in ((("Running", "Succeeded"), "Running"), (("Running", "Failed"), "Failed"),
                         (("Succeeded", None), "Pending"), (("Succeeded",), "Succeeded")):
        members = {f"c{i}": ({"phase": p} if p else None) for i, p in enumerate(phases)}
        status = aggregate_status(pod, members)
        assert status is not None and status["phase"] == want, phases
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim"}
    assert aggregate_status(pvc, {"a": {"phase": "Bound"}, "b": {"phase": "Pending"}}) == {
        "phase": "Pending"}
    assert aggregate_status(pvc, {"a": {"phase": "Lost"}, "b": {"phase": "Pending"}}) == {
        "phase": "Lost"}
    assert aggregate_status({"apiVersion": "v1", "kind": "ConfigMap"}, {"a": {}}) is None
