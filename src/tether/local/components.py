"""Which long-running parts a local cluster runs beyond its API server and core controllers.

Each entry builds one part from the cluster (its `ops`, `network`, `config`, `store`) and
returns an object with `async def run()`; admission plugins are added to `cluster.ops.admission`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tether.local.cluster import Component, LocalCluster


def build(cluster: LocalCluster) -> list[Component]:
    from tether.local import (
        apiservices,
        calico,
        kubelet,
        metricsapi,
        nodes,
        services,
        tokens,
        workloads,
    )
    from tether.local.kubelet import system_pods
    from tether.local.rbac import component as rbac

    parts: list[Component] = []
    parts += services.build(cluster)  # Service IPs, Endpoints/EndpointSlices, service proxy, DNS
    parts += nodes.build(cluster)  # nodes and leases, IPAM (podCIDR or Calico IPPools), scheduler
    parts += calico.build(cluster)  # Calico's CRDs in crd.projectcalico.org/v1 and projectcalico.org/v3
    parts.append(workloads.build(cluster))  # Deployment, ReplicaSet, StatefulSet, DaemonSet, Job
    parts += kubelet.build(cluster)  # pods as processes or virtual, logs, probes
    parts += metricsapi.build(cluster)  # metrics.k8s.io from the kubelet's processes (kubectl top)
    parts += tokens.build(cluster)  # ServiceAccount tokens, TokenRequest, default SA, root CA
    parts += rbac.build(cluster)  # ClusterRole aggregation (admin/edit/view and custom ones)
    parts += apiservices.build(cluster)  # the local APIServices, Available conditions
    parts.append(system_pods.build(cluster, parts))  # the parts above as pods in kube-system
    return parts
