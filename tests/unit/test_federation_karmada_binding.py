"""The Karmada binding step, reconcile after reconcile: failover, suspension, Lazy activation,
dependentOverrides, claims and preemption. Works are simulated from what each round writes."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from tether.federation import works as W
from tether.federation.binding import EVICTION_ANNOTATION, read_binding
from tether.federation.failover import FailoverSettings
from tether.federation.karmada import compile_template, match_policy
from tether.federation.karmada_binding import (
    BindingStep,
    Finished,
    dependent_overrides_missing,
    workload_groups,
)
from tether.federation.model import ClusterInfo, ResourceRef, Taint
from tether.federation.workinfo import work_info, work_up_to_date

T0 = 1_700_000_000.0
TEMPLATE: dict[str, Any] = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
    "spec": {"replicas": 6, "selector": {"matchLabels": {"app": "web"}},
             "template": {"metadata": {"labels": {"app": "web"}},
                          "spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
}
REF = ResourceRef("apps/v1", "Deployment", "default", "web")
KEY = ("apps/v1", "Deployment", "default", "web")


def _policy(**spec: Any) -> dict[str, Any]:
    placement = spec.pop("placement", {})
    return {"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                            "name": "web"}],
                     "placement": {"clusterAffinity": {"clusterNames": ["a", "b"]},
                                   "replicaScheduling": {
                                       "replicaSchedulingType": "Divided",
                                       "replicaDivisionPreference": "Weighted",
                                       "weightPreference": {"staticWeightList": [
                                           {"targetCluster": {"clusterNames": ["a"]}, "weight": 2},
                                           {"targetCluster": {"clusterNames": ["b"]},
                                            "weight": 1}]}},
                                   **placement},
                     **spec}}


@dataclass
class Hub:
    """What the hub holds between reconciles: the template, its Works, the clock."""

    settings: FailoverSettings = field(default_factory=lambda: FailoverSettings(enabled=True))
    now: float = T0
    template: dict[str, Any] = field(default_factory=lambda: copy.deepcopy(TEMPLATE))
    works: dict[str, dict[str, Any]] = field(default_factory=dict)
    step: BindingStep = field(init=False)

    def __post_init__(self) -> None:
        self.step = BindingStep(self.settings, lambda: self.now)

    def reconcile(self, policy: dict[str, Any], clusters: list[ClusterInfo], *,
                  fresh: bool = False, overrides: list[dict[str, Any]] | None = None) -> Finished:
        binding = read_binding(self.template, [work_info(w) for w in self.works.values()])
        prepared = self.step.prepare(KEY, REF, policy, binding, clusters,
                                     {c.name: c for c in clusters}, workload_groups(
                                         self.template, policy, ()))
        plan = compile_template(self.template, policy, overrides or [], clusters,
                                previous=prepared.previous, fresh=fresh)
        finished = self.step.finish(plan, prepared, binding, self.template, policy,
                                    W.desired_works,
                                    dependent_overrides_missing(policy, overrides or []))
        # what write_works and the template patch then do
        if not finished.plan.hold:
            keep = set(finished.plan.retained)
            wanted = {d.cluster for d in finished.desired}
            for cluster in [c for c in self.works if c not in wanted and c not in keep]:
                del self.works[cluster]
            for desired in finished.desired:
                current = self.works.get(desired.cluster)
                if not work_up_to_date(work_info(current) if current else None, desired):
                    self.works[desired.cluster] = _unapplied(desired.body)
        if finished.tasks_annotation is not None:
            annotations = self.template["metadata"].setdefault("annotations", {})
            if finished.tasks_annotation:
                annotations[EVICTION_ANNOTATION] = finished.tasks_annotation
            else:
                annotations.pop(EVICTION_ANNOTATION, None)
        return finished

    def members_ready(self, *clusters: str) -> None:
        """The executor applied these clusters' Works and their Deployments rolled out."""
        for cluster in clusters or tuple(self.works):
            work = self.works[cluster]
            manifest = work["spec"]["workload"]["manifests"][-1]
            replicas = manifest["spec"]["replicas"]
            work["status"] = {
                "conditions": [{"type": "Applied", "status": "True", "observedGeneration": 1}],
                "manifestStatuses": [{"identifier": {"kind": "Deployment", "name": "web"},
                                      "generation": 1, "status": {
                                          "observedGeneration": 1, "replicas": replicas,
                                          "updatedReplicas": replicas,
                                          "availableReplicas": replicas}}]}

    def replicas(self) -> dict[str, int]:
        return {c: w["spec"]["workload"]["manifests"][-1]["spec"]["replicas"]
                for c, w in sorted(self.works.items())}

    def tasks(self) -> list[dict[str, Any]]:
        raw = self.template["metadata"].get("annotations", {}).get(EVICTION_ANNOTATION)
        return json.loads(raw) if raw else []


def _unapplied(body: dict[str, Any]) -> dict[str, Any]:
    work = copy.deepcopy(body)
    work["metadata"]["generation"] = 1
    return work


UP = [ClusterInfo("a"), ClusterInfo("b")]
B_DRAINED = [ClusterInfo("a"), ClusterInfo("b", taints=(Taint("drain", "NoExecute",
                                                                added_s=T0),))]


def test_graceful_cluster_failover_and_no_automatic_return() -> None:
    hub = Hub()
    policy = _policy()
    hub.reconcile(policy, UP)
    hub.members_ready()
    assert hub.replicas() == {"a": 4, "b": 2}
    # b gets a NoExecute taint: evicted; its copy keeps running until a runs all 6 replicas
    hub.now += 10
    first = hub.reconcile(policy, B_DRAINED)
    assert hub.replicas() == {"a": 6, "b": 2}
    assert [(t["fromCluster"], t["purgeMode"], t["reason"], t["replicas"]) for t in hub.tasks()] \
        == [("b", "Gracefully", "TaintUntolerated", 2)]
    assert [(n.cluster, n.reason) for n in first.plan.notices] == [("b", "Evicting")]
    hub.reconcile(policy, B_DRAINED)  # a not rolled out yet: b's copy stays
    assert set(hub.works) == {"a", "b"}
    hub.members_ready("a")
    hub.reconcile(policy, B_DRAINED)
    assert hub.replicas() == {"a": 6} and hub.tasks() == []
    # b recovers: nothing moves back by itself ...
    hub.reconcile(policy, UP)
    assert hub.replicas() == {"a": 6}
    # ... until a fresh schedule (WorkloadRebalancer / tether rebalance)
    hub.reconcile(policy, UP, fresh=True)
    assert hub.replicas() == {"a": 4, "b": 2}


def test_directly_purges_at_once_and_the_task_still_blocks_the_cluster() -> None:
    hub = Hub(FailoverSettings(enabled=True, purge_mode="Directly"))
    policy = _policy()
    hub.reconcile(policy, UP)
    hub.members_ready()
    hub.reconcile(policy, B_DRAINED)
    assert hub.replicas() == {"a": 6}
    assert [t["purgeMode"] for t in hub.tasks()] == ["Directly"]
    # taint gone, task not done yet (a not healthy): b is still not a candidate
    hub.reconcile(policy, UP)
    assert hub.replicas() == {"a": 6}


def test_graceful_eviction_times_out() -> None:
    hub = Hub(FailoverSettings(enabled=True, graceful_timeout_s=60))
    policy = _policy()
    hub.reconcile(policy, UP)
    hub.members_ready()
    finished = hub.reconcile(policy, B_DRAINED)
    assert finished.recheck_at == T0 + 60
    hub.now += 61
    hub.reconcile(policy, B_DRAINED)
    assert set(hub.works) == {"a"} and hub.tasks() == []


def test_failover_off_leaves_workloads_on_tainted_clusters() -> None:
    hub = Hub(FailoverSettings(enabled=False))
    policy = _policy()
    hub.reconcile(policy, UP)
    hub.reconcile(policy, B_DRAINED)
    assert hub.replicas() == {"a": 4, "b": 2} and hub.tasks() == []


def test_application_failover() -> None:
    hub = Hub(FailoverSettings(enabled=False))  # application failover needs no hub switch
    policy = _policy(propagateDeps=True, failover={"application": {
        "decisionConditions": {"tolerationSeconds": 30}, "purgeMode": "Directly"}})
    hub.reconcile(policy, UP)
    hub.members_ready()
    hub.works["b"]["status"]["manifestStatuses"][0]["status"]["availableReplicas"] = 0
    first = hub.reconcile(policy, UP)
    assert hub.tasks() == [] and first.recheck_at == T0 + 30
    hub.now += 30
    hub.reconcile(policy, UP)
    assert [(t["fromCluster"], t["reason"]) for t in hub.tasks()] == [("b", "ApplicationFailure")]
    assert hub.replicas() == {"a": 6}


def test_suspension() -> None:
    hub = Hub()
    hub.reconcile(_policy(), UP)
    changed = copy.deepcopy(TEMPLATE)
    changed["spec"]["replicas"] = 9
    hub.template = changed
    held = hub.reconcile(_policy(suspension={"dispatching": True}), UP)
    assert held.plan.hold and held.desired == []
    assert hub.replicas() == {"a": 4, "b": 2}  # the new replica count is not dispatched
    assert {n.reason for n in held.plan.notices} == {"SuspendDispatching"}
    one = hub.reconcile(_policy(suspension={"dispatchingOnClusters": {"clusterNames": ["b"]}}), UP)
    assert hub.replicas() == {"a": 6, "b": 2} and one.plan.retained == {"b"}
    hub.reconcile(_policy(), UP)
    assert hub.replicas() == {"a": 6, "b": 3}


def test_lazy_activation_waits_for_a_template_change() -> None:
    hub = Hub()
    hub.reconcile(_policy(activationPreference="Lazy"), UP)
    only_a = _policy(activationPreference="Lazy",
                     placement={"clusterAffinity": {"clusterNames": ["a"]}})
    held = hub.reconcile(only_a, UP)
    assert held.plan.hold and hub.replicas() == {"a": 4, "b": 2}
    assert [n.reason for n in held.plan.notices] == ["PolicyChangePending"] * 2
    hub.template["metadata"]["labels"]["touched"] = "yes"
    hub.reconcile(only_a, UP)
    assert hub.replicas() == {"a": 6}
    # without Lazy a policy change applies at once
    eager = Hub()
    eager.reconcile(_policy(), UP)
    eager.reconcile(_policy(placement={"clusterAffinity": {"clusterNames": ["a"]}}), UP)
    assert eager.replicas() == {"a": 6}


def test_dependent_overrides() -> None:
    hub = Hub()
    policy = _policy(dependentOverrides=["web-image"])
    held = hub.reconcile(policy, UP)
    assert held.plan.error_reason == "DependentOverridesNotFound"
    assert "OverridePolicy default/web-image" in held.plan.error_message
    assert hub.works == {}
    op = {"apiVersion": "policy.karmada.io/v1alpha1", "kind": "OverridePolicy",
          "metadata": {"name": "web-image", "namespace": "default"}, "spec": {}}
    hub.reconcile(policy, UP, overrides=[op])
    assert hub.replicas() == {"a": 4, "b": 2}


def test_an_invalid_policy_keeps_what_runs() -> None:
    hub = Hub()
    hub.reconcile(_policy(), UP)
    bad = hub.reconcile(_policy(schedulePriority={"priorityClassName": "x"}), UP)
    assert bad.plan.hold and bad.plan.error_reason == "InvalidPolicy"
    assert "spec.schedulePriority" in bad.plan.error_message
    assert hub.replicas() == {"a": 4, "b": 2}


def _pp(name: str, kind: str = "PropagationPolicy", priority: int = 0,
        preemption: str | None = None) -> dict[str, Any]:
    meta = {"name": name} if kind.startswith("Cluster") else {"name": name, "namespace": "default"}
    spec: dict[str, Any] = {"priority": priority, "resourceSelectors": [
        {"apiVersion": "apps/v1", "kind": "Deployment"}]}
    if preemption:
        spec["preemption"] = preemption
    return {"kind": kind, "metadata": meta, "spec": spec}


CPP = "ClusterPropagationPolicy"


@pytest.mark.parametrize(
    ("policies", "claimed_by", "winner"),
    [
        ([_pp("old"), _pp("new", priority=5)], "", "new"),  # unclaimed: best match
        ([_pp("old"), _pp("new", priority=5)], "PropagationPolicy/default/old", "old"),  # Never
        ([_pp("old"), _pp("new", priority=5, preemption="Always")],
         "PropagationPolicy/default/old", "new"),
        ([_pp("old", priority=5), _pp("new", priority=5, preemption="Always")],
         "PropagationPolicy/default/old", "old"),  # needs a higher priority
        ([_pp("old", CPP, priority=9), _pp("new", preemption="Always")],
         "ClusterPropagationPolicy//old", "new"),  # PP takes from a CPP whatever the priority
        ([_pp("old"), _pp("new", CPP, priority=9, preemption="Always")],
         "PropagationPolicy/default/old", "old"),  # a CPP never takes from a PP
        ([_pp("old", CPP), _pp("new", CPP, priority=1, preemption="Always")],
         "ClusterPropagationPolicy//old", "new"),
        ([_pp("new", priority=5)], "PropagationPolicy/default/gone", "new"),  # claimant gone
    ],
)
def test_claims_and_preemption(policies: list[dict[str, Any]], claimed_by: str,
                               winner: str) -> None:
    chosen = match_policy(TEMPLATE, policies, claimed_by)
    assert chosen is not None and chosen["metadata"]["name"] == winner


def test_workload_groups() -> None:
    policy = _policy(placement={"workloadAffinity": {
        "affinity": {"groupByLabelKey": "app"}, "antiAffinity": {"groupByLabelKey": "app"}}})
    peer = copy.deepcopy(TEMPLATE)
    peer["metadata"]["name"] = "other"
    elsewhere = copy.deepcopy(peer)
    elsewhere["metadata"]["namespace"] = "other-ns"
    stranger = copy.deepcopy(peer)
    stranger["metadata"]["labels"] = {"app": "db"}
    groups = workload_groups(TEMPLATE, policy, [
        (peer, policy, frozenset({"a"})), (elsewhere, policy, frozenset({"b"})),
        (stranger, policy, frozenset({"b"})), (peer, _policy(), frozenset({"b"}))])
    assert groups.affinity_peers == (frozenset({"a"}),)
    assert groups.anti_affinity_peers == (frozenset({"a"}),)
