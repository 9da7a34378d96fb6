"""A kubelet for local clusters: pods become real processes where their image maps to a program.

Images resolve through an image map (built-ins, extended by a user file); a container whose
image maps to nothing runs virtually (Running, no process), as kwok does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.local.cluster import Component, LocalCluster


def build(cluster: LocalCluster) -> list[Component]:
    """The kubelet, its address allocator (IPAM), and the pod subresources it serves."""
    from tether.local.kubelet.exec import AttachServer, ExecServer
    from tether.local.kubelet.kubelet import AddressUnavailable, Kubelet, PodWorker
    from tether.local.kubelet.logs import LogServer
    from tether.local.kubelet.portforward import PortForwardServer
    from tether.local.kubelet.proxy import ProxyServer
    from tether.local.nodes import ipam, scheduler
    from tether.local.tokens import Signer

    kubelet = Kubelet(cluster)
    kubelet.signer = Signer.load_or_create(cluster.config.data_dir / "pki")  # the cluster's SA key
    addresses = ipam.for_cluster(cluster)

    def allocate(pod: dict[str, Any], node: dict[str, Any] | None) -> str:
        if node is None:
            raise AddressUnavailable(f'node "{pod["spec"].get("nodeName")}" not found')
        try:
            return addresses.allocate(pod, node)
        except ipam.NoAddress as exc:
            raise AddressUnavailable(f"Failed to create pod sandbox: {exc}") from None

    def release(worker: PodWorker) -> None:
        namespace, name = worker.key
        addresses.release({"metadata": {"namespace": namespace, "name": name, "uid": worker.uid}})

    kubelet.allocate_address = allocate
    kubelet.release_address = release
    cluster.api.subresource_handlers["log"] = LogServer(cluster.store, kubelet.pods_dir)
    cluster.api.subresource_handlers["binding"] = scheduler.binding_handler(cluster.ops)
    cluster.api.subresource_handlers["exec"] = ExecServer(cluster.store, kubelet)
    cluster.api.subresource_handlers["attach"] = AttachServer(cluster.store, kubelet)
    fabric = kubelet.fabric  # how pods' network is reached: the host, or network namespaces
    cluster.api.subresource_handlers["portforward"] = PortForwardServer(cluster.store, dial=fabric.open_connection)
    cluster.api.subresource_handlers["proxy"] = ProxyServer(cluster.store, fabric=fabric)  # pods and services
    cluster.kubelet = kubelet
    return [kubelet]
