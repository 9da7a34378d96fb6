"""NetworkPolicy and Calico policy enforcement with nftables in every node (netns mode only).

`plan` is pure (policies, pods, namespaces, network sets -> one nft script per node);
`PolicyEnforcer` applies it. Rootless clusters store policies without enforcing them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.local.network import NETNS

if TYPE_CHECKING:
    from tether.local.cluster import Component, LocalCluster


def build(cluster: LocalCluster) -> list[Component]:
    if cluster.network.mode != NETNS:
        return []
    from tether.local.netpolicy.enforcer import PolicyEnforcer

    return [PolicyEnforcer(cluster.store, cluster.ops, cluster.fabric)]
