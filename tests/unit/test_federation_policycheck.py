"""Every PropagationPolicy field is implemented or refused with a message (never ignored)."""

from __future__ import annotations

from typing import Any

import pytest

from tether.federation.policycheck import policy_problems

CLUSTER = {"spreadByField": "cluster", "minGroups": 1, "maxGroups": 2}


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        # fields tether does not implement: refused, saying what to do instead
        ({"schedulePriority": {"priorityClassSource": "KubePriorityClass",
                               "priorityClassName": "high"}}, "spec.schedulePriority: not supported"),
        ({"placement": {"clusterAffinities": [{"affinityName": "a", "overflowAffinities": [
            {"affinityName": "b", "clusterNames": ["x"]}]}]}},
         "spec.placement.clusterAffinities[0].overflowAffinities: not implemented"),
        ({"schedulerName": "my-scheduler"}, "spec.schedulerName: 'my-scheduler'"),
        ({"propagateDeps": True, "failover": {"application": {
            "decisionConditions": {"tolerationSeconds": 10}, "purgeMode": "Directly",
            "statePreservation": {"rules": []}}}},
         "spec.failover.application.statePreservation: not supported"),
        ({"failover": {"cluster": {"statePreservation": {"rules": []}}}},
         "spec.failover.cluster.statePreservation: not supported"),
        ({"placement": {"spreadConstraints": [
            {"spreadByField": "region", "minGroups": 1}, {"spreadByField": "zone", "minGroups": 1},
            CLUSTER]}}, "tether spreads by one group (region, zone given)"),
        ({"activationPreference": "Eager"}, "spec.activationPreference: unsupported value"),
        # Karmada's webhook rules
        ({"placement": {"clusterAffinity": {}, "clusterAffinities": []}},
         "clusterAffinities cannot co-exist with clusterAffinity"),
        ({"placement": {"spreadConstraints": [{"spreadByField": "region", "minGroups": 1}]}},
         "the cluster spread constraint must be enabled"),
        ({"placement": {"spreadConstraints": [{"spreadByField": "cluster", "minGroups": 3,
                                               "maxGroups": 2}]}},
         "maxGroups lower than minGroups is not allowed"),
        ({"placement": {"spreadConstraints": [CLUSTER, CLUSTER]}},
         "multiple cluster spread constraints are not allowed"),
        ({"placement": {"spreadConstraints": [{"spreadByField": "cluster",
                                               "spreadByLabel": "x"}]}},
         "spreadByLabel should not co-exist with spreadByField"),
        ({"failover": {"application": {"decisionConditions": {"tolerationSeconds": 1}}}},
         "application failover is set, propagateDeps must be true"),
        ({"propagateDeps": True, "failover": {"application": {
            "decisionConditions": {}, "purgeMode": "Gracefully"}}},
         "gracePeriodSeconds: should not be empty when purgeMode is gracefully"),
        ({"propagateDeps": True, "failover": {"application": {
            "decisionConditions": {}, "purgeMode": "Never", "gracePeriodSeconds": 5}}},
         "gracePeriodSeconds: only takes effect when purgeMode is gracefully"),
        ({"failover": {"cluster": {"purgeMode": "Never"}}},
         "spec.failover.cluster.purgeMode: unsupported value 'Never'"),
        ({"suspension": {"dispatching": True, "dispatchingOnClusters": {"clusterNames": ["a"]}}},
         "suspension dispatching cannot co-exist with dispatchingOnClusters.clusterNames"),
        ({"placement": {"workloadAffinity": {"antiAffinity": {"groupByLabelKey": "bad key!"}}}},
         "'bad key!' is not a valid label key"),
    ],
)
def test_refused(spec: dict[str, Any], problem: str) -> None:
    problems = policy_problems(spec)
    assert any(problem in p for p in problems), problems


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}], "priority": 3,
         "preemption": "Always", "conflictResolution": "Overwrite", "propagateDeps": True,
         "preserveResourcesOnDeletion": True, "dependentOverrides": ["op"],
         "schedulerName": "default-scheduler", "activationPreference": "Lazy",
         "suspension": {"dispatchingOnClusters": {"clusterNames": ["a"]}}},
        {"placement": {"spreadConstraints": [{"spreadByField": "zone", "minGroups": 2}, CLUSTER],
                       "workloadAffinity": {"affinity": {"groupByLabelKey": "app.group"}}},
         "failover": {"cluster": {"purgeMode": "Directly"}}},
        {"propagateDeps": True, "failover": {"application": {
            "decisionConditions": {"tolerationSeconds": 0}, "purgeMode": "Gracefully",
            "gracePeriodSeconds": 60}}},
        {"propagateDeps": True, "failover": {"application": {
            "decisionConditions": {}, "purgeMode": "Graciously", "gracePeriodSeconds": 60}}},
    ],
)
def test_accepted(spec: dict[str, Any]) -> None:
    assert policy_problems(spec) == []
