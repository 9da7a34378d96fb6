"""The resource metrics API (`metrics.k8s.io/v1beta1`), so `kubectl top` works on local clusters.

`build(cluster)` serves the group from what the cluster's kubelet runs (see server.py); it needs
only `container_pids()` from the kubelet (the `ContainerProcesses` protocol).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.local.metricsapi.server import ContainerProcesses, MetricsApi, Sampler

if TYPE_CHECKING:
    from tether.local.cluster import Component, LocalCluster

__all__ = ["ContainerProcesses", "MetricsApi", "Sampler", "build"]


def build(cluster: LocalCluster) -> list[Component]:
    source: ContainerProcesses | None = cluster.kubelet  # None: no kubelet, every pod reads as zero
    cluster.api.group_handlers["metrics.k8s.io"] = MetricsApi(cluster.store, Sampler(source))
    return []
