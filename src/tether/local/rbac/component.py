"""RBAC's parts of a running cluster: the default policy at start, the aggregation controller."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tether.local.operations import Operations, WriteOptions
from tether.local.rbac import policy
from tether.local.rbac.aggregation import AggregationController

if TYPE_CHECKING:
    from tether.local.cluster import Component, LocalCluster

log = logging.getLogger(__name__)

MANAGER = "kube-apiserver"


def ensure_default_policy(ops: Operations) -> None:
    """Create the default roles and bindings, or put back what is missing from them."""
    opts = WriteOptions(manager=MANAGER, user="system:apiserver")
    for default in policy.cluster_roles() + policy.cluster_role_bindings():
        plural = "clusterroles" if default["kind"] == "ClusterRole" else "clusterrolebindings"
        rt = ops.registry.lookup("rbac.authorization.k8s.io", "v1", plural)
        assert rt is not None
        name = default["metadata"]["name"]
        current = ops.find(rt, "", name)
        wanted = policy.reconciled(default, current)
        if wanted is None:
            continue
        if current is None:
            ops.create(rt, "", wanted, opts)
        else:
            ops.update(rt, "", name, wanted, opts)
            log.info("reconciled default %s %s", default["kind"], name)


def build(cluster: LocalCluster) -> list[Component]:
    return [AggregationController(cluster.ops)]
