"""KubeFed's multi-cluster DNS in the hub: ServiceDNSRecords and IngressDNSRecords on the hub
become DNSEndpoints, from the registered Clusters' Services and Ingresses (zones and region from
the Cluster objects).

The CRDs are upstream's schemas when `tether.federation.crds` carries them (`upstream_crd`),
else the controller's own minimal ones; either way they are created on the hub when missing.
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
    upstream = getattr(federation_crds, "upstream_crd", None)
    if upstream is None:
        return multicluster_dns_crds()
    try:
        return [upstream(f"{name}.multiclusterdns.kubefed.io") for name in NAMES]
    except KeyError:
        return multicluster_dns_crds()


def members(hub: Hub) -> list[Member]:
    return [Member(ClusterView(info.name, info.ready, info.region, info.zones), credentials)
            for info, credentials in registered(hub)]


def build(hub: Hub) -> KubeFedDnsController:
    controller = KubeFedDnsController(hub.host, lambda: members(hub), crds=crds())
    hub.shared.cluster_handlers.append(lambda _event: controller.members_changed())
    return controller
