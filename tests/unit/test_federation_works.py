"""Works as hub objects: stable names, labels back to the source, results, drift checks."""

from __future__ import annotations

from tether.federation import works as W
from tether.federation.model import PropagationPlan, ResourceRef, WorkItem
from tether.federation.workinfo import (
    cluster_result,
    scheduled_replicas,
    work_info,
    work_up_to_date,
)

SOURCE = ResourceRef("apps/v1", "Deployment", "shop", "web")


def test_work_names_are_stable_and_bounded() -> None:
    assert W.work_name("Deployment", "shop", "web") == "deployment-shop-web"
    assert W.work_name("Namespace", "", "shop") == "namespace-shop"
    long = W.work_name("Deployment", "n" * 40, "x" * 40)
    assert len(long) <= 63 and long == W.work_name("Deployment", "n" * 40, "x" * 40)
    assert long != W.work_name("Deployment", "n" * 40, "x" * 39 + "y")


def test_desired_works_point_back_at_the_source() -> None:
    manifest = {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "shop"}}
    plan = PropagationPlan(SOURCE, "karmada", works=(WorkItem("c1", manifest),))
    [work] = W.desired_works(plan, ensure_namespace=True)
    assert (work.namespace, work.name) == ("tether-es-c1", "deployment-shop-web")
    meta = work.body["metadata"]
    assert W.parse_source(meta["annotations"][W.SOURCE_ANNOTATION]) == SOURCE
    assert meta["annotations"][W.ENSURE_NAMESPACE_ANNOTATION] == "shop"
    assert W.work_source(work.body) == ("karmada", SOURCE)
    [applied] = work.body["spec"]["workload"]["manifests"]
    assert applied["metadata"]["annotations"][W.WORK_NAME_ANNOTATION] == \
        "tether-es-c1/deployment-shop-web"
    assert work_up_to_date(work_info({**work.body}), work)


def test_cluster_result_waits_for_the_current_generation() -> None:
    work = {"metadata": {"generation": 2, "namespace": "tether-es-c1"},
            "status": {"conditions": [{"type": "Applied", "status": "False", "reason": "Conflict",
                                       "message": "taken", "observedGeneration": 1}]}}
    assert cluster_result(work_info(work), SOURCE, kubefed=False) is None
    work["status"]["conditions"][0]["observedGeneration"] = 2
    result = cluster_result(work_info(work), SOURCE, kubefed=True)
    assert result is not None and (result.applied, result.reason) == (False, "AlreadyExists")


def test_is_subset_ignores_server_defaults_but_not_changes() -> None:
    want = {"spec": {"replicas": 2, "template": {"containers": [{"image": "a"}]}}}
    have = {"spec": {"replicas": 2, "strategy": {}, "template": {
        "containers": [{"image": "a", "imagePullPolicy": "Always"}]}}}
    assert W.is_subset(want, have)
    assert not W.is_subset(want, {"spec": {"replicas": 3, "template": {
        "containers": [{"image": "a"}]}}})
    assert not W.is_subset({"a": True}, {"a": 1})


def test_scheduled_replicas_reads_each_clusters_work() -> None:
    def deploy(replicas: int) -> dict[str, object]:
        return {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "shop"}, "spec": {"replicas": replicas}}

    plan = PropagationPlan(SOURCE, "kubefed", works=(WorkItem("c1", deploy(4)), WorkItem("c2", deploy(2))))
    bodies = [w.body for w in W.desired_works(plan, extra_manifests=[
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "spec": {"replicas": 9}}])]
    assert scheduled_replicas([work_info(b) for b in bodies], "Deployment") == {"c1": 4, "c2": 2}
    bodies[1]["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    infos = [work_info(b) for b in bodies]
    assert scheduled_replicas(infos, "Deployment") == {"c1": 4}
    assert scheduled_replicas(infos, "ReplicaSet") == {}
