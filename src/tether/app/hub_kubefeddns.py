"""KubeFed's multi-cluster DNS in the hub: ServiceDNSRecords and IngressDNSRecords on the hub
become DNSEndpoints, from the registered Clusters' Services and Ingresses (zones and region from
the Cluster objects).

The CRDs are KubeFed's own schemas (`tether.federation.crds.upstream_crd`), created on the hub
when missing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from tether.app.hub_mcs import registered
from tether.connect.kubefeddns.controller import KubeFedDnsController, Member
from tether.connect.kubefeddns.crds import multicluster_dns_crds
from tether.connect.kubefeddns.records import ClusterView
from tether.federation import crds as federation_crds

if TYPE_CHECKING:
    from tether.app.hub import Hub

log = logging.getLogger(__name__)
NAMES = ("domains", "servicednsrecords", "ingressdnsrecords", "dnsendpoints")


def crds() -> list[dict[str, Any]]:
    try:
        return [federation_crds.upstream_crd(f"{name}.multiclusterdns.kubefed.io") for name in NAMES]
    except federation_crds.UnknownUpstreamType:  # schemas not generated: the controller's minimal ones
        return multicluster_dns_crds()


def members(hub: Hub) -> list[Member]:
    return [Member(ClusterView(info.name, info.ready, info.region, info.zones), credentials)
            for info, credentials in registered(hub)]


def build(hub: Hub) -> KubeFedDnsController:
    controller = KubeFedDnsController(hub.host, lambda: members(hub), crds=crds())
    hub.shared.cluster_handlers.append(lambda _event: controller.members_changed())
    return controller
