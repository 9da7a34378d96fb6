"""Karmada scheduling and failover end to end: `tether hub run --failover` on local clusters.

`host` and `cluster` (1 node, 32 CPUs) run in one data dir, `cluster1` (3 nodes, 96 CPUs) in
another, so it can be stopped and started on its own. Manifests are the Karmada user guide's
shapes (PropagationPolicy, ClusterTaintPolicy, WorkloadRebalancer), applied with kubectl.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_propagation import Fleet, annotation_report, get, ok, tether, until

from tether.federation.capacity import amount

pytestmark = pytest.mark.e2e

POLICY_API = "policy.karmada.io/v1alpha1"
CLUSTER_API = "cluster.tether.io/v1alpha1"
GRACEFUL_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    main_dir = tmp_path_factory.mktemp("failover-main")
    member_dir = tmp_path_factory.mktemp("failover-member")
    ok(tether("local", "up", "--data-dir", str(main_dir), "--name", "host", "--name", "cluster"))
    started: Fleet | None = None
    try:
        ok(tether("local", "up", "--data-dir", str(member_dir), "--name", "cluster1",
                  "--nodes", "3"))
        started = Fleet(main_dir, member_dir, main_dir / "kubeconfig", member_dir / "kubeconfig",
                        tmp_path_factory.mktemp("failover-kubecache"),
                        hub_args=("--failover", "--graceful-eviction-timeout",
                                  str(GRACEFUL_TIMEOUT_S)))
        ok(tether("hub", "install", "--kubeconfig", str(started.kubeconfig), "--context", "host"))
        for name, extra in (("cluster", []), ("cluster1", ["--cluster-kubeconfig",
                                                           str(started.member_kubeconfig)])):
            ok(tether("join", name, "--cluster-context", name, *extra,
                      "--host-kubeconfig", str(started.kubeconfig), "--host-context", "host"))
        started.start_hub()
        yield started
    finally:
        try:
            if started is not None:
                started.stop_hub()
                assert not started.hub_tracebacks(), started.hub_tracebacks()
        finally:
            tether("local", "down", "--data-dir", str(member_dir))
            tether("local", "down", "--data-dir", str(main_dir))


def web(name: str, namespace: str, replicas: int, *, cpu: str = "",
        image: str = "example.com/virtual:1") -> dict[str, Any]:
    labels = {"app": name}
    container: dict[str, Any] = {"name": "web", "image": image}
    if cpu:
        container["resources"] = {"requests": {"cpu": cpu}}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [container]}}}}


def propagation_policy(name: str, namespace: str, placement: dict[str, Any],
                       **spec: Any) -> dict[str, Any]:
    return {"apiVersion": POLICY_API, "kind": "PropagationPolicy",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                            "name": name}],
                     "placement": placement, **spec}}


BOTH = {"clusterAffinity": {"clusterNames": ["cluster", "cluster1"]}}
STATIC_2_1 = {**BOTH, "replicaScheduling": {
    "replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted",
    "weightPreference": {"staticWeightList": [
        {"targetCluster": {"clusterNames": ["cluster"]}, "weight": 2},
        {"targetCluster": {"clusterNames": ["cluster1"]}, "weight": 1}]}}}


async def member_replicas(fleet: Fleet, name: str, namespace: str) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for context in ("cluster", "cluster1"):
        obj = await get(fleet, context, "apps/v1", "Deployment", name, namespace)
        out[context] = obj["spec"]["replicas"] if obj else None
    return out


async def replicas_become(fleet: Fleet, name: str, namespace: str,
                          want: dict[str, int | None], what: str,
                          timeout_s: float = 60) -> None:
    async def check() -> bool:
        return await member_replicas(fleet, name, namespace) == want

    await until(check, f"{what}: {want}", timeout_s=timeout_s)


async def report(fleet: Fleet, name: str, namespace: str) -> dict[str, Any]:
    return annotation_report(await get(fleet, "host", "apps/v1", "Deployment", name, namespace))


async def eviction_tasks(fleet: Fleet, name: str, namespace: str) -> list[dict[str, Any]]:
    obj = await get(fleet, "host", "apps/v1", "Deployment", name, namespace)
    raw = ((obj or {}).get("metadata", {}).get("annotations") or {}).get(
        "tether.io/graceful-eviction-tasks")
    return json.loads(raw) if raw else []


async def cluster_obj(fleet: Fleet, name: str) -> dict[str, Any]:
    found = await get(fleet, "host", CLUSTER_API, "Cluster", name)
    assert found is not None
    return found


def set_taints(fleet: Fleet, cluster: str, taints: list[dict[str, Any]]) -> None:
    fleet.kubectl("host", "patch", "tcl", cluster, "--type", "merge", "-p",
                  json.dumps({"spec": {"taints": taints}}))


def millicores(summary: dict[str, Any], part: str) -> int:
    value = amount("cpu", (summary.get(part) or {}).get("cpu", "0"))
    assert value is not None
    return value


async def test_resource_summary_and_dynamic_division(fleet: Fleet) -> None:
    """dynamicWeight and Aggregated divide by what the Cluster's resourceSummary says is free;
    no room at all is Unschedulable with the numbers."""
    names = ("cluster", "cluster1")

    async def summaries() -> dict[str, Any] | None:
        found = {c: (await cluster_obj(fleet, c)).get("status", {}).get("resourceSummary")
                 for c in names}
        return found if all(found.values()) else None

    before = await until(summaries, "resourceSummary on both Clusters")
    assert before["cluster"]["allocatable"]["cpu"] == "32"  # 1 node
    assert before["cluster1"]["allocatable"]["cpu"] == "96"  # 3 nodes
    # the members' own system pods (coredns, ...) request a little CPU already
    used = {c: millicores(before[c], "allocated") for c in names}
    assert all(0 < u < 8000 for u in used.values()), used
    free = {c: (millicores(before[c], "allocatable") - used[c]) // 8000 for c in names}
    assert free == {"cluster": 3, "cluster1": 11}
    fleet.kubectl("host", "create", "ns", "capacity")
    fleet.apply("host", web("dyn", "capacity", 8, cpu="8"), propagation_policy(
        "dyn", "capacity", {**BOTH, "replicaScheduling": {
            "replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted",
            "weightPreference": {"dynamicWeight": "AvailableReplicas"}}}))
    # weights 3:11 over 8 replicas (Webster) ⇒ 2 and 6
    await replicas_become(fleet, "dyn", "capacity", {"cluster": 2, "cluster1": 6},
                          "dynamic weights by free CPU")

    async def allocated() -> dict[str, Any] | None:
        now = await summaries()
        if now and millicores(now["cluster"], "allocated") == used["cluster"] + 16000 and \
                millicores(now["cluster1"], "allocated") == used["cluster1"] + 48000:
            return now
        return None

    await until(allocated, "the replicas' CPU in resourceSummary.allocated")
    # left: cluster (32 - 16 - system) / 8 = 1, cluster1 (96 - 48 - system) / 8 = 5
    fleet.apply("host", web("agg", "capacity", 8, cpu="8"), propagation_policy(
        "agg", "capacity", {**BOTH, "replicaScheduling": {
            "replicaSchedulingType": "Divided", "replicaDivisionPreference": "Aggregated"}}))

    async def unschedulable() -> dict[str, Any] | None:
        cond = ((await report(fleet, "agg", "capacity")).get("conditions") or [{}])[0]
        return cond if cond.get("reason") == "Unschedulable" else None

    cond = await until(unschedulable, "Unschedulable for 8 more replicas")
    assert cond["status"] == "False"
    assert ("Clusters available replicas 6 are not enough to schedule. (8 wanted; free per "
            "cluster: cluster 1, cluster1 5)") in cond["message"]
    assert await member_replicas(fleet, "agg", "capacity") == {"cluster": None, "cluster1": None}
    # 5 fit in cluster1 alone: Aggregated uses as few clusters as possible
    fleet.kubectl("host", "scale", "deploy/agg", "-n", "capacity", "--replicas", "5")
    await replicas_become(fleet, "agg", "capacity", {"cluster": None, "cluster1": 5},
                          "Aggregated into one cluster")
    # the running workloads stay where they are (their schedule is kept, not recomputed)
    assert await member_replicas(fleet, "dyn", "capacity") == {"cluster": 2, "cluster1": 6}
    fleet.kubectl("host", "delete", "ns", "capacity", "--wait=false")


async def test_no_execute_taint_evicts_gracefully_and_rebalance_brings_it_back(
        fleet: Fleet) -> None:
    fleet.kubectl("host", "create", "ns", "evict")
    fleet.apply("host", web("web", "evict", 6), propagation_policy("web", "evict", STATIC_2_1))
    await replicas_become(fleet, "web", "evict", {"cluster": 4, "cluster1": 2}, "2:1")
    set_taints(fleet, "cluster1", [{"key": "maintenance", "effect": "NoExecute"}])
    await replicas_become(fleet, "web", "evict", {"cluster": 6, "cluster1": None},
                          "all replicas on cluster, the copy on cluster1 gone once they run")
    rep = await report(fleet, "web", "evict")
    assert {c["name"]: c.get("replicas") for c in rep["clusters"]} == {"cluster": 6}
    assert await eviction_tasks(fleet, "web", "evict") == []  # the task ended
    # the taint goes; nothing moves back by itself
    set_taints(fleet, "cluster1", [])
    await asyncio.sleep(3)  # the hub has seen the Cluster change (0.5 s health period)
    assert await member_replicas(fleet, "web", "evict") == {"cluster": 6, "cluster1": None}
    out = await asyncio.to_thread(tether, "rebalance", "deploy/web", "-n", "evict",
                                  "--kubeconfig", str(fleet.kubeconfig), "--context", "host")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == "Deployment evict/web: Successful"
    await replicas_become(fleet, "web", "evict", {"cluster": 4, "cluster1": 2},
                          "2:1 again after the rebalance")


async def test_eviction_task_is_kept_while_the_replacement_is_not_healthy(fleet: Fleet) -> None:
    """Gracefully: the evicted copy keeps running until the clusters now scheduled are healthy."""
    fleet.kubectl("host", "create", "ns", "graceful")
    fleet.apply("host", web("web", "graceful", 2), propagation_policy(
        "web", "graceful", STATIC_2_1))
    await replicas_become(fleet, "web", "graceful", {"cluster": 1, "cluster1": 1}, "1:1")
    # the replacement on cluster cannot become healthy: an image whose program fails
    fleet.apply("host", {
        "apiVersion": POLICY_API, "kind": "OverridePolicy",
        "metadata": {"name": "broken", "namespace": "graceful"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                 "overrideRules": [{"targetCluster": {"clusterNames": ["cluster"]},
                                    "overriders": {"plaintext": [
                                        {"path": "/spec/template/spec/containers/0/image",
                                         "operator": "replace", "value": "busybox"},
                                        {"path": "/spec/template/spec/containers/0/command",
                                         "operator": "add", "value": ["sh", "-c", "exit 3"]}]}}]}})
    set_taints(fleet, "cluster1", [{"key": "maintenance", "effect": "NoExecute"}])

    async def evicting() -> list[dict[str, Any]] | None:
        tasks = await eviction_tasks(fleet, "web", "graceful")
        return tasks or None

    [task] = await until(evicting, "a graceful eviction task for cluster1")
    assert (task["fromCluster"], task["purgeMode"], task["reason"], task["producer"]) == (
        "cluster1", "Gracefully", "TaintUntolerated", "TaintManager")
    await replicas_become(fleet, "web", "graceful", {"cluster": 2, "cluster1": 1},
                          "cluster scaled up, cluster1's copy still running")
    await asyncio.sleep(3)
    assert await member_replicas(fleet, "web", "graceful") == {"cluster": 2, "cluster1": 1}
    rep = await report(fleet, "web", "graceful")
    evict = next(c for c in rep["clusters"] if c["name"] == "cluster1")
    assert evict["reason"] == "Evicting" and "Gracefully" in evict["message"]
    set_taints(fleet, "cluster1", [])
    fleet.kubectl("host", "delete", "ns", "graceful", "--wait=false")


async def test_application_failover(fleet: Fleet) -> None:
    """A workload unhealthy in one cluster for tolerationSeconds moves to the others; with
    purgeMode Never its old copy stays until the task is ended by hand."""
    fleet.kubectl("host", "create", "ns", "appfail")
    fleet.apply("host", web("app", "appfail", 3), propagation_policy(
        "app", "appfail", STATIC_2_1, propagateDeps=True, failover={"application": {
            "decisionConditions": {"tolerationSeconds": 2}, "purgeMode": "Never"}}))
    await replicas_become(fleet, "app", "appfail", {"cluster": 2, "cluster1": 1}, "2:1")
    fleet.apply("host", {
        "apiVersion": POLICY_API, "kind": "OverridePolicy",
        "metadata": {"name": "crash-on-cluster1", "namespace": "appfail"},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                        "name": "app"}],
                 "overrideRules": [{"targetCluster": {"clusterNames": ["cluster1"]},
                                    "overriders": {"plaintext": [
                                        {"path": "/spec/template/spec/containers/0/image",
                                         "operator": "replace", "value": "busybox"},
                                        {"path": "/spec/template/spec/containers/0/command",
                                         "operator": "add", "value": ["sh", "-c", "exit 3"]}]}}]}})

    async def evicting() -> list[dict[str, Any]] | None:
        return await eviction_tasks(fleet, "app", "appfail") or None

    [task] = await until(evicting, "cluster1 evicted after staying unhealthy", timeout_s=90)
    assert (task["fromCluster"], task["reason"], task["purgeMode"], task["suppressDeletion"],
            task["producer"]) == ("cluster1", "ApplicationFailure", "Never", True,
                                  "ResourceBindingApplicationFailoverController")
    # the replicas moved; the unhealthy copy is kept (Never) for someone to look at
    await replicas_become(fleet, "app", "appfail", {"cluster": 3, "cluster1": 1},
                          "replicas on cluster, old copy kept")
    # ending the task by hand (Karmada: suppressDeletion false) removes the old copy
    task["suppressDeletion"] = False
    fleet.kubectl("host", "annotate", "--overwrite", "-n", "appfail", "deploy/app",
                  "tether.io/graceful-eviction-tasks=" + json.dumps([task]))
    await replicas_become(fleet, "app", "appfail", {"cluster": 3, "cluster1": None},
                          "old copy removed")
    assert await eviction_tasks(fleet, "app", "appfail") == []


async def test_not_ready_cluster_is_tainted_and_a_cluster_taint_policy_fails_it_over(
        fleet: Fleet) -> None:
    """Karmada's documented failover: NotReady adds `not-ready:NoSchedule` by itself; a
    ClusterTaintPolicy adds the NoExecute taint that evicts; both go when it is Ready again."""
    fleet.apply("host", {
        "apiVersion": POLICY_API, "kind": "ClusterTaintPolicy",
        "metadata": {"name": "detect-cluster-notready"},
        "spec": {"targetClusters": {"clusterNames": ["cluster1"]},
                 "addOnConditions": [{"conditionType": "Ready", "operator": "NotIn",
                                      "statusValues": ["True"]}],
                 "removeOnConditions": [{"conditionType": "Ready", "operator": "In",
                                         "statusValues": ["True"]}],
                 "taints": [{"key": "cluster.karmada.io/not-ready", "effect": "NoExecute"}]}})
    fleet.kubectl("host", "create", "ns", "down")
    fleet.apply("host", web("web", "down", 3), propagation_policy(
        "web", "down", STATIC_2_1, failover={"cluster": {"purgeMode": "Directly"}}))
    await replicas_become(fleet, "web", "down", {"cluster": 2, "cluster1": 1}, "2:1")
    ok(tether("local", "down", "--data-dir", str(fleet.member_dir)))
    try:
        async def tainted() -> list[tuple[str, str]] | None:
            taints = (await cluster_obj(fleet, "cluster1"))["spec"].get("taints") or []
            pairs = sorted((t["key"], t["effect"]) for t in taints)
            return pairs if len(pairs) == 2 else None

        assert await until(tainted, "cluster1 tainted") == [
            ("cluster.karmada.io/not-ready", "NoExecute"),
            ("cluster.karmada.io/not-ready", "NoSchedule")]

        async def evicted() -> bool:
            obj = await get(fleet, "cluster", "apps/v1", "Deployment", "web", "down")
            rep = await report(fleet, "web", "down")
            return bool(obj and obj["spec"]["replicas"] == 3 and
                        [c["name"] for c in rep.get("clusters", [])] == ["cluster"])

        await until(evicted, "all 3 replicas on cluster")
        # no new placement on the not-ready cluster
        fleet.apply("host", {"apiVersion": "v1", "kind": "ConfigMap",
                             "metadata": {"name": "settings", "namespace": "down"}},
                    {"apiVersion": POLICY_API, "kind": "PropagationPolicy",
                     "metadata": {"name": "settings", "namespace": "down"},
                     "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap",
                                                     "name": "settings"}],
                              "placement": BOTH}})

        async def settings_report() -> dict[str, Any] | None:
            obj = await get(fleet, "host", "v1", "ConfigMap", "settings", "down")
            rep = annotation_report(obj)
            return rep if rep.get("clusters") else None

        rep = await until(settings_report, "the ConfigMap's report")
        by_name = {c["name"]: c for c in rep["clusters"]}
        assert by_name["cluster1"]["reason"] == "ClusterNotReady"
        assert "untolerated taint" in by_name["cluster1"]["message"]
    finally:
        ok(tether("local", "up", "--data-dir", str(fleet.member_dir), "--name", "cluster1",
                  "--nodes", "3"))

    async def untainted() -> bool:
        cluster = await cluster_obj(fleet, "cluster1")
        ready = [c for c in cluster["status"]["conditions"] if c["type"] == "Ready"]
        return bool(ready and ready[0]["status"] == "True" and not cluster["spec"].get("taints"))

    await until(untainted, "cluster1 Ready without taints", timeout_s=90)
    # the ConfigMap is placed now; the Deployment stays on cluster (no automatic return), and
    # the evicted copy is gone from cluster1 now that it answers again
    await until(lambda: get(fleet, "cluster1", "v1", "ConfigMap", "settings", "down"),
                "the ConfigMap on cluster1")
    await replicas_become(fleet, "web", "down", {"cluster": 3, "cluster1": None},
                          "evicted copy removed from the returning cluster")


async def test_suspension_and_refused_fields(fleet: Fleet) -> None:
    fleet.kubectl("host", "create", "ns", "suspend")
    fleet.apply("host", web("web", "suspend", 2), propagation_policy("web", "suspend", BOTH))
    await replicas_become(fleet, "web", "suspend", {"cluster": 2, "cluster1": 2}, "duplicated")
    fleet.apply("host", propagation_policy("web", "suspend", BOTH,
                                           suspension={"dispatching": True}))

    async def suspended() -> bool:
        cond = ((await report(fleet, "web", "suspend")).get("conditions") or [{}])[0]
        return cond.get("reason") == "SuspendDispatching"

    await until(suspended, "SuspendDispatching on the template")
    fleet.kubectl("host", "scale", "deploy/web", "-n", "suspend", "--replicas", "3")
    await asyncio.sleep(3)
    assert await member_replicas(fleet, "web", "suspend") == {"cluster": 2, "cluster1": 2}
    fleet.apply("host", propagation_policy("web", "suspend", BOTH, suspension={
        "dispatchingOnClusters": {"clusterNames": ["cluster1"]}}))
    await replicas_become(fleet, "web", "suspend", {"cluster": 3, "cluster1": 2},
                          "dispatched to cluster only")
    fleet.apply("host", propagation_policy("web", "suspend", BOTH))
    await replicas_become(fleet, "web", "suspend", {"cluster": 3, "cluster1": 3}, "resumed")
    # a field tether does not implement is refused on the template, and nothing changes
    fleet.apply("host", propagation_policy(
        "web", "suspend", BOTH,
        schedulePriority={"priorityClassSource": "KubePriorityClass", "priorityClassName": "x"}))

    async def refused() -> dict[str, Any] | None:
        cond = ((await report(fleet, "web", "suspend")).get("conditions") or [{}])[0]
        return cond if cond.get("reason") == "InvalidPolicy" else None

    cond = await until(refused, "InvalidPolicy")
    assert "spec.schedulePriority: not supported by tether" in cond["message"]
    assert await member_replicas(fleet, "web", "suspend") == {"cluster": 3, "cluster1": 3}


async def test_spread_by_region(fleet: Fleet) -> None:
    for name, region in (("cluster", "eu"), ("cluster1", "us")):
        fleet.kubectl("host", "patch", "tcl", name, "--type", "merge", "-p",
                      json.dumps({"spec": {"region": region}}))
    fleet.kubectl("host", "create", "ns", "spread")
    spread = {"spreadConstraints": [
        {"spreadByField": "region", "minGroups": 2, "maxGroups": 2},
        {"spreadByField": "cluster", "minGroups": 2, "maxGroups": 2}]}
    fleet.apply("host", web("web", "spread", 1), propagation_policy("web", "spread", spread))
    await replicas_become(fleet, "web", "spread", {"cluster": 1, "cluster1": 1},
                          "one cluster in each region")
    one = {"spreadConstraints": [
        {"spreadByField": "region", "minGroups": 3, "maxGroups": 3},
        {"spreadByField": "cluster", "minGroups": 1, "maxGroups": 3}]}
    fleet.apply("host", web("three", "spread", 1), propagation_policy("three", "spread", one))

    async def no_fit() -> dict[str, Any] | None:
        cond = ((await report(fleet, "three", "spread")).get("conditions") or [{}])[0]
        return cond if cond.get("reason") == "NoClusterFit" else None

    cond = await until(no_fit, "NoClusterFit for three regions")
    assert "the number of feasible region is less than spreadConstraint.MinGroups" in cond[
        "message"]


def test_workload_rebalancer_applied_with_kubectl(fleet: Fleet) -> None:
    """The upstream WorkloadRebalancer object works as `tether rebalance` does."""
    fleet.kubectl("host", "create", "ns", "wr")
    fleet.apply("host", web("web", "wr", 3), propagation_policy("web", "wr", STATIC_2_1))
    rebalancer = {"apiVersion": "apps.karmada.io/v1alpha1", "kind": "WorkloadRebalancer",
                  "metadata": {"name": "demo"},
                  "spec": {"workloads": [
                      {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                       "namespace": "wr"},
                      {"apiVersion": "apps/v1", "kind": "Deployment", "name": "ghost",
                       "namespace": "wr"}]}}
    fleet.apply("host", rebalancer)

    def finished() -> dict[str, Any] | None:
        out = fleet.kubectl("host", "get", "workloadrebalancer", "demo", "-o", "json")
        status = json.loads(out.stdout).get("status") or {}
        return status if status.get("finishTime") else None

    status = None
    for _ in range(180):  # bounded: 90 s
        status = finished()
        if status:
            break
        time.sleep(0.5)
    assert status, "the WorkloadRebalancer was not handled"
    results = {w["workload"]["name"]: (w["result"], w.get("reason")) for w in
               status["observedWorkloads"]}
    assert results == {"web": ("Successful", None),
                       "ghost": ("Failed", "ReferencedBindingNotFound")}


async def test_kubefed_member_not_ready_keeps_its_objects(fleet: Fleet) -> None:
    """KubeFed skips a cluster that is not ready: its Works (and so the member's namespace and
    everything in it) stay while it is down, and nothing is recreated when it comes back."""
    fleet.kubectl("host", "create", "ns", "kept")
    fleet.apply("host", {
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedNamespace",
        "metadata": {"name": "kept", "namespace": "kept"},
        "spec": {"placement": {"clusters": [{"name": "cluster"}, {"name": "cluster1"}]}}}, {
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedConfigMap",
        "metadata": {"name": "settings", "namespace": "kept"},
        "spec": {"template": {"data": {"mode": "blue"}},
                 "placement": {"clusters": [{"name": "cluster"}, {"name": "cluster1"}]}}})
    member = await until(lambda: get(fleet, "cluster1", "v1", "ConfigMap", "settings", "kept"),
                         "the ConfigMap on cluster1")
    namespace = await get(fleet, "cluster1", "v1", "Namespace", "kept")
    assert namespace is not None
    # something the member's own users keep in that namespace
    fleet.kubectl("cluster1", "-n", "kept", "create", "configmap", "local-only",
                  "--from-literal=owner=member")

    def works_of_cluster1() -> dict[str, bool]:
        listed = json.loads(fleet.kubectl(
            "host", "get", "works.work.tether.io", "-A", "-o", "json", "-l",
            "work.tether.io/cluster=cluster1,work.tether.io/dialect=kubefed").stdout)
        return {w["metadata"]["labels"]["work.tether.io/source-kind"]:
                not w["metadata"].get("deletionTimestamp") for w in listed["items"]}

    assert works_of_cluster1() == {"FederatedNamespace": True, "FederatedConfigMap": True}
    ok(tether("local", "down", "--data-dir", str(fleet.member_dir)))
    try:
        async def not_ready_reported() -> bool:
            fed = await get(fleet, "host", "types.kubefed.io/v1beta1", "FederatedConfigMap",
                            "settings", "kept")
            clusters = ((fed or {}).get("status") or {}).get("clusters") or []
            return {"name": "cluster1", "status": "ClusterNotReady"} in [
                {k: c.get(k) for k in ("name", "status")} for c in clusters]

        await until(not_ready_reported, "cluster1 reported ClusterNotReady", timeout_s=90)
        # a later change reconciles again with cluster1 still down
        fleet.kubectl("host", "-n", "kept", "patch", "federatedconfigmap", "settings",
                      "--type=merge", "-p", '{"spec":{"template":{"data":{"mode":"green"}}}}')
        await until(lambda: _data_is(fleet, "cluster", "green"), "the change on cluster")
        assert works_of_cluster1() == {"FederatedNamespace": True, "FederatedConfigMap": True}
    finally:
        ok(tether("local", "up", "--data-dir", str(fleet.member_dir), "--name", "cluster1",
                  "--nodes", "3"))
    await until(lambda: _data_is(fleet, "cluster1", "green"), "the change on cluster1",
                timeout_s=90)
    after = await get(fleet, "cluster1", "v1", "ConfigMap", "settings", "kept")
    after_ns = await get(fleet, "cluster1", "v1", "Namespace", "kept")
    assert after is not None and after_ns is not None
    assert after["metadata"]["uid"] == member["metadata"]["uid"]
    assert after_ns["metadata"]["uid"] == namespace["metadata"]["uid"]
    assert await get(fleet, "cluster1", "v1", "ConfigMap", "local-only", "kept") is not None


async def _data_is(fleet: Fleet, cluster: str, mode: str) -> bool:
    found = await get(fleet, cluster, "v1", "ConfigMap", "settings", "kept")
    return bool(found and (found.get("data") or {}).get("mode") == mode)
