"""Cluster capacity: resourceSummary from nodes and pods, replica requests, the general estimator."""

from __future__ import annotations

from typing import Any

import pytest

from tether.federation.capacity import (
    amount,
    max_available_replicas,
    pod_request,
    replica_request,
    resource_summary,
)


@pytest.mark.parametrize(
    ("resource", "text", "value"),
    [
        ("cpu", "500m", 500), ("cpu", "2", 2000), ("cpu", "0.1", 100), ("cpu", "1e-3", 1),
        ("memory", "1Gi", 2**30), ("memory", "128974848", 128974848), ("memory", "129e6", 129000000),
        ("memory", "123Mi", 123 * 2**20), ("memory", "1k", 1000), ("pods", "110", 110),
        ("memory", "0.5Ki", 512), ("memory", "1.5", 2),  # rounded up, as Quantity.Value
        ("cpu", "nonsense", None), ("cpu", "", None), ("cpu", "1Zi", None),
    ],
)
def test_amount(resource: str, text: str, value: int | None) -> None:
    assert amount(resource, text) == value


def _container(requests: dict[str, str] | None = None,
               limits: dict[str, str] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": "c", "image": "x", "resources": resources}


def test_pod_request_sums_containers_and_takes_the_largest_init_container() -> None:
    spec = {
        "containers": [_container({"cpu": "250m", "memory": "64Mi"}),
                       _container({"cpu": "250m"})],
        "initContainers": [_container({"cpu": "2"}), _container({"memory": "32Mi"})],
        "overhead": {"cpu": "10m"},
    }
    assert pod_request(spec) == {"cpu": 2010, "memory": 64 * 2**20}


def test_replica_request_counts_limits_without_requests() -> None:
    template = {"kind": "Deployment", "spec": {"template": {"spec": {"containers": [
        _container({"cpu": "1"}, {"cpu": "2", "memory": "1Gi"})]}}}}
    assert replica_request(template) == {"cpu": 1000, "memory": 2**30}
    bare = {"kind": "Deployment", "spec": {"template": {"spec": {"containers": [_container()]}}}}
    assert replica_request(bare) is None
    job = {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {"spec": {
        "containers": [_container({"cpu": "100m"})]}}}}}}
    assert replica_request(job) == {"cpu": 100}


def _node(cpu: str, pods: str = "110") -> dict[str, Any]:
    return {"status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": pods}}}


def _pod(cpu: str, node: str = "n1", phase: str = "Running") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [_container({"cpu": cpu})]}
    if node:
        spec["nodeName"] = node
    return {"spec": spec, "status": {"phase": phase}}


def test_resource_summary() -> None:
    summary = resource_summary(
        [_node("4"), _node("4")],
        [_pod("1"), _pod("500m"), _pod("3", phase="Succeeded"), _pod("2", phase="Failed"),
         _pod("250m", node="", phase="Pending")])
    assert summary == {
        "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "220"},
        "allocated": {"cpu": "1500m", "pods": "2"},
        "allocating": {"cpu": "250m", "pods": "1"},
    }
    assert resource_summary([], []) == {"allocatable": {}, "allocated": {}, "allocating": {}}


SUMMARY = {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "20"},
           "allocated": {"cpu": "1500m", "pods": "2"},
           "allocating": {"cpu": "500m", "pods": "1"}}


@pytest.mark.parametrize(
    ("summary", "needs", "replicas"),
    [
        (None, {"cpu": 100}, 0),  # no resourceSummary: no capacity
        ({}, None, 0),
        (SUMMARY, None, 17),  # no requests: the pods still allowed (20 - 2 - 1)
        (SUMMARY, {"cpu": 1000}, 6),  # (8000 - 1500 - 500) / 1000
        (SUMMARY, {"cpu": 250}, 17),  # the pod count bounds it
        (SUMMARY, {"cpu": 1000, "memory": 4 * 2**30}, 4),  # memory: 16Gi / 4Gi
        (SUMMARY, {"nvidia.com/gpu": 1}, 0),  # the cluster does not list the resource
        ({**SUMMARY, "allocated": {"cpu": "8", "pods": "2"}}, {"cpu": 1}, 0),  # no cpu left
        ({**SUMMARY, "allocated": {"pods": "25"}}, None, 0),  # over-full: 0, not negative
    ],
)
def test_max_available_replicas(summary: Any, needs: dict[str, int] | None,
                                replicas: int) -> None:
    assert max_available_replicas(summary, needs) == replicas
