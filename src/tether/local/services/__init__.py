"""Services for local clusters: ClusterIP/NodePort allocation, Endpoints and EndpointSlices,
a userspace service proxy, a cluster DNS server and (netns mode) the host's routes to them and
kernel (nftables) Service routing in every node.

`build(cluster)` adds the allocation admission plugin to `cluster.ops.admission` and returns the
components (each with `async def run()`); `dns.address_for(cluster)` says where DNS listens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.local.componentlog import ComponentLog
from tether.local.network import NETNS
from tether.local.services.allocation import ServiceAllocator
from tether.local.services.dns import ADDRESS_FILE, DnsServer, address_for
from tether.local.services.endpoints import EndpointsController
from tether.local.services.hostroutes import HostRoutes
from tether.local.services.kernel import KernelServices
from tether.local.services.proxy import ProxyConfig, ServiceProxy
from tether.local.services.registry import ServiceRegistry

if TYPE_CHECKING:
    from tether.local.cluster import Component, LocalCluster

__all__ = ["DnsServer", "EndpointsController", "ServiceAllocator", "ServiceProxy", "ServiceRegistry",
           "address_for", "build"]


def build(cluster: LocalCluster, *, api_server_only: bool = False) -> list[Component]:
    """The Service parts; with `api_server_only` those of kube-apiserver itself (IP allocation
    and the `kubernetes` Service), without the Endpoints controller, proxy and DNS."""
    allocator = ServiceAllocator(cluster.store, cluster.network)
    cluster.ops.admission.append(allocator)
    registry = ServiceRegistry(
        cluster.ops, cluster.network, allocator,
        api_address=lambda: (cluster.api_host, cluster.port),
        wait_started=lambda: cluster.started.wait(),  # `started` exists once __init__ is done
    )
    if api_server_only:
        return [registry]  # nothing serves ClusterIPs: in netns mode the fabric's sink keeps them local
    # netns mode: ClusterIPs reachable from the host, every other cluster address kept local
    # and Service traffic from the nodes DNATed in the kernel (the proxy serves the rest)
    # the DNS server answers on the kube-dns Service's address itself: no proxy listener or DNAT there
    dns_ip = frozenset({cluster.network.dns_service_ip})
    routes: list[Component] = ([HostRoutes(cluster.store, cluster.fabric),
                                KernelServices(cluster.store, cluster.fabric, served_elsewhere=dns_ip)]
                               if cluster.network.mode == NETNS else [])
    return [
        *routes,
        registry,
        EndpointsController(cluster.ops),
        ServiceProxy(cluster.store, ProxyConfig(node_port_host=cluster.fabric.node_port_host,
                                                served_elsewhere=dns_ip),
                     fabric=cluster.fabric),
        DnsServer(cluster.store, cluster.network.dns_service_ip,
                  address_file=cluster.config.data_dir / ADDRESS_FILE, fabric=cluster.fabric,
                  component_log=ComponentLog.in_dir(cluster.config.data_dir, "coredns"), ops=cluster.ops),
    ]
