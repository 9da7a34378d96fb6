"""The pull-mode agent: runs next to a member, dials out to the hub, does the hub's work there.

One TaskGroup, three parts:
- **status**: every `period_s` (10 s) probe the member (`health.probe`: `/readyz`, `/healthz`)
  and renew the Lease `tether-system/<cluster>` on the hub (the registry controller creates it;
  the agent may only renew its own; the hub's health controller turns the Cluster Unknown when
  it goes stale). The Cluster's status (Ready condition, kubernetesVersion, nodeSummary,
  resourceSummary, apiEnablements: `health.collect_status`, the API discovery at most every
  `apis_period_s`; `lastHeartbeatTime` = when it was written) is written only when something
  in it changed, as Karmada's agent and the kubelet split the Lease from the status: a member
  at rest costs the hub one Lease renewal per period and nothing else. When the Lease cannot be
  renewed, the status is written anyway, so it carries the heartbeat;
- **works**: the push executor (`execution.WorkExecutor`) restricted to this cluster, watching
  Works in `tether-es-<cluster>` on the hub, applying them to the member and writing
  per-manifest status back on the hub;
- **tunnel**: `tether.tunnel.agent.TunnelAgent` to the hub's tunnel server, agent id = the
  cluster name, `host=<member API host>`, authenticated with the agent's hub token, so the hub
  reaches the member API through it (the Cluster's `proxyURL`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tether.federation import works as W
from tether.federation.crds import CLUSTER_API_VERSION, WORK_API_VERSION, execution_namespace
from tether.federation.execution import WorkExecutor
from tether.federation.health import (
    HUB_NAMESPACE,
    agent_status,
    collect_status,
    observed_condition,
    probe,
)
from tether.federation.metrics import HubMetrics
from tether.federation.propagation import HubInformers
from tether.kube import Informer, KubeClient, KubeError, NotFound
from tether.objects import Obj
from tether.objects.times import micro_time
from tether.tunnel.agent import AgentConfig, TunnelAgent
from tether.tunnel.tls import ClientTLS

log = logging.getLogger(__name__)

FIELD_MANAGER = "tether-agent"
LEASE_API = "coordination.k8s.io/v1"


@dataclass(frozen=True)
class AgentSettings:
    cluster: str
    period_s: float = 10.0  # lease renewal and status
    apis_period_s: float = 60.0  # the member's API discovery (apiEnablements) at most this often
    lease_duration_s: int = 40
    probe_timeout_s: float = 5.0
    resync_s: float = 60.0
    tunnel_address: str = ""  # host:port of the hub's tunnel agent port; "" = no tunnel
    tunnel_ca: str = ""  # CA file of the tunnel server certificate
    tunnel_server_name: str = ""
    token_path: str = ""  # file holding the agent's hub token (the tunnel's bearer)
    tunnel_insecure: bool = False  # plain TCP to the tunnel (tests only)


def member_host(server: str) -> str:
    return urlsplit(server).hostname or ""


class _ClusterInformers(HubInformers):
    """HubInformers limited to one cluster's execution namespace (the agent's RBAC)."""

    def __init__(self, host: KubeClient, cluster: str) -> None:
        self._cluster = cluster
        super().__init__(host)

    def __post_init__(self) -> None:
        self.clusters = Informer(self.host, CLUSTER_API_VERSION, "Cluster",
                                 field_selector=f"metadata.name={self._cluster}",
                                 on_event=self._on_cluster)
        self.works = Informer(self.host, WORK_API_VERSION, "Work",
                              namespace=execution_namespace(self._cluster),
                              label_selector=W.WORK_SELECTOR, on_event=self._on_work)


@dataclass
class PullAgent:
    hub: KubeClient
    member: KubeClient
    settings: AgentSettings
    clock: Any = time.time
    heartbeats: int = 0
    status_writes: int = 0
    _apis: list[Obj] | None = field(init=False, default=None)  # the last apiEnablements
    _apis_at: float = field(init=False, default=0.0)  # monotonic
    shared: HubInformers = field(init=False)
    executor: WorkExecutor = field(init=False)
    tunnel: TunnelAgent | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        s = self.settings
        self.shared = _ClusterInformers(self.hub, s.cluster)
        self.executor = WorkExecutor(self.hub, self.shared, HubMetrics(), resync_s=s.resync_s,
                                     name="agent-work-executor", pull_cluster=s.cluster,
                                     member_client=self.member)
        if s.tunnel_address:
            host, _, port = s.tunnel_address.rpartition(":")
            tls = None if s.tunnel_insecure else ClientTLS(
                s.tunnel_ca, server_name=s.tunnel_server_name or host)
            self.tunnel = TunnelAgent(AgentConfig(
                proxy_server_host=host, proxy_server_port=int(port), tls=tls,
                agent_id=s.cluster,
                agent_identifiers=f"host={member_host(self.member.credentials.server)}",
                health_server_port=-1, admin_server_port=-1, token_path=s.token_path))

    async def run(self) -> None:
        stop = asyncio.Event()
        async with asyncio.TaskGroup() as group:
            group.create_task(self._status_loop())
            group.create_task(self.shared.run())
            group.create_task(self.executor.run())
            if self.tunnel is not None:
                group.create_task(self.tunnel.run(stop))

    async def _status_loop(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.heartbeat()
            except KubeError as exc:
                log.warning("cluster %s: heartbeat to the hub failed: %s", self.settings.cluster, exc)
            elapsed = time.monotonic() - started
            await asyncio.sleep(max(0.0, self.settings.period_s - elapsed))

    async def heartbeat(self) -> None:
        """One pass: probe, renew the Lease, write Cluster status if it changed."""
        s = self.settings
        result = await probe(self.member, s.probe_timeout_s)
        now = self.clock()
        renewed = True
        try:
            await self._renew_lease(now)
        except KubeError as exc:  # the status below carries the heartbeat instead
            renewed = False
            log.warning("cluster %s: cannot renew the Lease on the hub: %s", s.cluster, exc)
        cluster = self.shared.clusters.get(None, s.cluster) if self.shared.clusters.synced \
            else None
        if cluster is None:
            cluster = await self.hub.get(CLUSTER_API_VERSION, "Cluster", s.cluster,
                                         timeout_s=s.probe_timeout_s)
        collected: Obj = {}
        if result.healthy:
            fresh = self._apis is not None and time.monotonic() - self._apis_at < s.apis_period_s
            collected = await collect_status(self.member, s.probe_timeout_s, apis=not fresh)
            if fresh:
                collected["apiEnablements"] = self._apis
            elif "apiEnablements" in collected:
                self._apis, self._apis_at = collected["apiEnablements"], time.monotonic()
        else:
            self._apis = None  # discover again once it answers
            log.info("cluster %s: probe failed: %s", s.cluster, result.detail)
        status = agent_status(cluster.get("status") or {}, collected,
                              observed_condition(result, now), now, heartbeat=not renewed)
        self.heartbeats += 1
        if status is None:
            return
        await self.hub.request("PATCH", f"/apis/{CLUSTER_API_VERSION}/clusters/{s.cluster}/status",
                               body={"status": status},
                               content_type="application/merge-patch+json",
                               params={"fieldManager": FIELD_MANAGER}, timeout_s=s.probe_timeout_s)
        self.status_writes += 1

    async def _renew_lease(self, now: float) -> None:
        s = self.settings
        spec = {"holderIdentity": s.cluster, "leaseDurationSeconds": s.lease_duration_s,
                "renewTime": micro_time(now)}
        try:
            await self.hub.patch(LEASE_API, "Lease", s.cluster, {"spec": spec},
                                 namespace=HUB_NAMESPACE, field_manager=FIELD_MANAGER,
                                 timeout_s=s.probe_timeout_s)
        except NotFound:
            await self.hub.create({"apiVersion": LEASE_API, "kind": "Lease",
                                   "metadata": {"name": s.cluster, "namespace": HUB_NAMESPACE},
                                   "spec": spec}, field_manager=FIELD_MANAGER)
