"""The service mirror in the hub: its members are the hub's Clusters, its reports their status.

Members come from the hub's shared Cluster informer and the credentials Secrets the Work
executor already watches (`member_credentials`: a pull member's carry the tunnel's CONNECT
proxy, so the mirror reaches it through the tunnel). Stale-endpoint states become the
`ServiceMirrorEndpointsFresh` condition of the remote's Cluster, applied server-side with the
mirror's own field manager (conditions are a map keyed by type: the health controller's Ready
condition is left alone).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from tether.app.hub_mcs import registered
from tether.connect.mirror.fleet import MirrorFleet
from tether.connect.mirror.policy import Member
from tether.connect.mirror.stale import CONDITION_TYPE
from tether.federation.crds import CLUSTER_API_VERSION
from tether.kube import KubeClient
from tether.objects import Obj, times

if TYPE_CHECKING:
    from tether.app.hub import Hub

log = logging.getLogger(__name__)
FIELD_MANAGER = "tether-connect-mirror"


def hub_members(hub: Hub) -> list[Member]:
    return [Member(info.name, credentials, info.ready, info.labels, info.zones)
            for info, credentials in registered(hub)]


def condition_reporter(host: KubeClient) -> Callable[[str, Obj], Awaitable[None]]:
    async def report(cluster: str, condition: Obj) -> None:
        body = {"apiVersion": CLUSTER_API_VERSION, "kind": "Cluster", "metadata": {"name": cluster},
                "status": {"conditions": [{"type": CONDITION_TYPE, **condition,
                                           "lastTransitionTime": times.now_rfc3339()}]}}
        await host.apply_status(body, field_manager=FIELD_MANAGER)

    return report


def build(hub: Hub) -> MirrorFleet:
    fleet = MirrorFleet(hub.host, lambda: hub_members(hub), report=condition_reporter(hub.host))
    hub.shared.cluster_handlers.append(lambda _event: fleet.members_changed())
    return fleet
