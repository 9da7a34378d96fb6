"""Simulated nodes of a local cluster: registration and heartbeats, pod addresses, scheduling.

- `manager.NodeManager`: the Nodes (`<cluster>-node-<i>`), their status and Leases.
- `ipam`: pod IPs from Calico IPPools or node podCIDRs; `ipam.for_cluster(cluster)` is the
  kubelet's entry point.
- `scheduler.Scheduler`: binds pods to nodes (`scheduling.choose_node` is the pure plan).
- `ippool_crd`: the `projectcalico.org/v3` IPPool type and its validation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tether.local.cluster import Component, LocalCluster


def build(cluster: LocalCluster) -> list[Component]:
    """The node parts of `cluster`. The IPPool CRD is registered here, before the API serves,
    so `kubectl apply` of IPPools works as soon as `tether local up` returns."""
    from tether.local.nodes import ippool_crd
    from tether.local.nodes.manager import NodeManager
    from tether.local.nodes.scheduler import Scheduler

    ippool_crd.ensure_crd(cluster.ops)
    cluster.ops.admission.append(ippool_crd.admission(cluster.ops, cluster.network))
    return [
        NodeManager(cluster.ops, cluster.network, cluster.config.name, cluster.config.nodes),
        Scheduler(cluster.ops),
    ]
