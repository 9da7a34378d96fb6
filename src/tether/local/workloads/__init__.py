"""Workload controllers of a local cluster: Deployment, ReplicaSet, StatefulSet, DaemonSet, Job.

Each observes the store, plans with a pure function (a frozen change set) and applies the plan
through the cluster's `Operations` under its own field manager, as the real
kube-controller-manager does through the API. `build(cluster)` is the component a cluster runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.local.workloads.daemonset import DaemonSetController
from tether.local.workloads.deployment import DeploymentController
from tether.local.workloads.job import JobController
from tether.local.workloads.replicaset import ReplicaSetController
from tether.local.workloads.runtime import Controller, WorkloadControllers
from tether.local.workloads.statefulset import StatefulSetController

if TYPE_CHECKING:
    from tether.local.cluster import LocalCluster

__all__ = ["WorkloadControllers", "build"]


def build(cluster: LocalCluster) -> WorkloadControllers:
    ops = cluster.ops
    controllers: list[Controller] = [
        DeploymentController(ops),
        ReplicaSetController(ops),
        StatefulSetController(ops),
        DaemonSetController(ops),
        JobController(ops),
    ]
    return WorkloadControllers(ops, controllers)
