"""Which long-running parts a local cluster runs beyond its API server and core controllers.

Each entry builds one part from the cluster (its `ops`, `network`, `config`, `store`) and
returns an object with `async def run()`; admission plugins are added to `cluster.ops.admission`.
A full cluster runs them all; an API-only hub (`roles.HUB`) only those kube-apiserver runs
itself and the controllers Karmada's control plane keeps (see `local/roles.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.local import roles

if TYPE_CHECKING:
    from tether.local.cluster import Component, LocalCluster


def build(cluster: LocalCluster) -> list[Component]:
    if cluster.role == roles.HUB:
        return _api_server(cluster)
    return _full_cluster(cluster)


def _api_server(cluster: LocalCluster) -> list[Component]:
    from tether.local import apiservices, services, tokens
    from tether.local.rbac import component as rbac

    parts: list[Component] = []
    parts += services.build(cluster, api_server_only=True)  # ClusterIPs, the `kubernetes` Service
    parts += tokens.build(cluster)  # ServiceAccount tokens, TokenRequest, default SA, root CA
    parts += rbac.build(cluster)  # ClusterRole aggregation
    parts += apiservices.build(cluster)  # the local APIServices, Available conditions
    return parts


def _full_cluster(cluster: LocalCluster) -> list[Component]:
    from tether.local import (
        apiservices,
        calico,
        kubelet,
        metricsapi,
        netpolicy,
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
    parts += netpolicy.build(cluster)  # netns mode: NetworkPolicy and Calico policy in nftables
    parts.append(workloads.build(cluster))  # Deployment, ReplicaSet, StatefulSet, DaemonSet, Job
    parts += kubelet.build(cluster)  # pods as processes or virtual, logs, probes
    parts += metricsapi.build(cluster)  # metrics.k8s.io from the kubelet's processes (kubectl top)
    parts += tokens.build(cluster)  # ServiceAccount tokens, TokenRequest, default SA, root CA
    parts += rbac.build(cluster)  # ClusterRole aggregation (admin/edit/view and custom ones)
    parts += apiservices.build(cluster)  # the local APIServices, Available conditions
    parts.append(system_pods.build(cluster, parts))  # the parts above as pods in kube-system
    return parts
