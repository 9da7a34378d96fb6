"""The MCS controller in the hub: the clusterset is the hub's Ready registered Clusters.

Members and their credentials come from the hub's shared Cluster informer and the credentials
Secrets the Work executor already watches (`member_credentials`); a pull member's carry the
tunnel's CONNECT proxy, so the controller reaches it through the tunnel. A Cluster event makes
the controller look at its members again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tether.connect.mcs.controller import McsController, Member
from tether.federation.health import HUB_NAMESPACE, member_credentials
from tether.federation.model import ClusterInfo
from tether.federation.propagation import cluster_info
from tether.kube import ClusterCredentials

if TYPE_CHECKING:
    from tether.app.hub import Hub

log = logging.getLogger(__name__)


def registered(hub: Hub) -> list[tuple[ClusterInfo, ClusterCredentials]]:
    """Every registered Cluster the hub has credentials for, with what the hub knows of it."""
    secrets = hub.executor.secrets
    out: list[tuple[ClusterInfo, ClusterCredentials]] = []
    for cluster in hub.shared.clusters.list():
        info = cluster_info(cluster)
        if info is None:
            continue
        ref = (cluster.get("spec") or {}).get("secretRef") or {}
        namespace, name = str(ref.get("namespace") or HUB_NAMESPACE), str(ref.get("name") or info.name)
        secret = secrets.get(namespace, name) if secrets is not None else None
        if secret is None:
            continue
        try:
            credentials = member_credentials(cluster, secret)
        except (ValueError, KeyError) as exc:
            log.warning("cluster %s: unusable credentials: %s", info.name, exc)
            continue
        if hub.tunnel is not None:  # a pull member: with its proxy token, once it can be dialled
            usable = hub.tunnel.client_credentials(cluster, credentials)
            if usable is None:
                log.debug("cluster %s: waiting for its agent's first report and the tunnel's grant", info.name)
                continue
            credentials = usable
        out.append((info, credentials))
    return out


def hub_members(hub: Hub) -> list[Member]:
    return [Member(info.name, credentials, info.ready) for info, credentials in registered(hub)]


def build(hub: Hub, clusterset: str) -> McsController:
    controller = McsController(lambda: hub_members(hub), clusterset=clusterset)
    hub.shared.cluster_handlers.append(lambda _event: controller.members_changed())
    return controller
