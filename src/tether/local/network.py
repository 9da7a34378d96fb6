"""Address plan of a local cluster: pod and service ranges that never overlap between clusters.

Rootless mode uses 127.0.0.0/8, which Linux routes to the loopback device in full, so processes
bind any of those addresses without privileges: cluster i gets pods in 127.(16+i).0.0/16 (one
/24 per node) and services in 127.(64+i).0.0/16.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

MAX_CLUSTERS = 32
MAX_NODES = 250


class NetworkError(Exception):
    pass


@dataclass(frozen=True)
class ClusterNetwork:
    index: int
    pod_cidr: ipaddress.IPv4Network
    service_cidr: ipaddress.IPv4Network

    @classmethod
    def rootless(cls, index: int) -> ClusterNetwork:
        if not 0 <= index < MAX_CLUSTERS:
            raise NetworkError(f"cluster index {index} is outside 0..{MAX_CLUSTERS - 1}")
        return cls(
            index=index,
            pod_cidr=ipaddress.IPv4Network(f"127.{16 + index}.0.0/16"),
            service_cidr=ipaddress.IPv4Network(f"127.{64 + index}.0.0/16"),
        )

    def node_pod_cidr(self, node_index: int) -> ipaddress.IPv4Network:
        if not 0 <= node_index < MAX_NODES:
            raise NetworkError(f"node index {node_index} is outside 0..{MAX_NODES - 1}")
        return list(self.pod_cidr.subnets(new_prefix=24))[node_index + 1]

    def node_ip(self, node_index: int) -> str:
        """The node's InternalIP: the first address of its pod range (like a cni0 bridge)."""
        return str(self.node_pod_cidr(node_index).network_address + 1)

    @property
    def api_service_ip(self) -> str:
        """`kubernetes.default` gets the first address of the service range, as on real clusters."""
        return str(self.service_cidr.network_address + 1)

    @property
    def dns_service_ip(self) -> str:
        return str(self.service_cidr.network_address + 10)
