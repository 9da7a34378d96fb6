"""The hub's settings, shared by the hub and its tunnel server (`tether hub run` flags)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tether.federation.failover import FailoverSettings
from tether.federation.health import HealthTimers

SHUTDOWN_S = 5.0


@dataclass(frozen=True)
class HubConfig:
    kubeconfig: Path | None = None
    context: str | None = None
    in_cluster: bool = False  # the pod's ServiceAccount instead of a kubeconfig
    bind_address: str = "127.0.0.1"  # health/metrics and cluster proxy listeners
    port: int = 8443
    health_port: int | None = None
    health: HealthTimers = field(default_factory=HealthTimers)
    resync_s: float = 300.0
    shutdown_s: float = SHUTDOWN_S
    tunnel_agent_port: int | None = None  # None: no tunnel server
    tunnel_frontend_port: int = 8088
    tunnel_bind_address: str = ""
    tunnel_advertise: str = ""  # HOST[:PORT] agents dial [default: 127.0.0.1:<agent port>]
    tunnel_certs: Path | None = None  # a `tether certs` output directory
    # CONNECT destinations beyond each pull member's API endpoint (destinations.parse_patterns)
    tunnel_allowed_destinations: tuple[str, ...] = ()
    data_dir: Path | None = None
    proxy_port: int | None = None  # the cluster proxy (clusters/{name}/proxy); None: not served
    failover: FailoverSettings = field(default_factory=FailoverSettings)  # Karmada failover
    # Where Karmada templates' summed member status goes (federation.template_status): auto,
    # status or annotation
    template_status: str = "auto"
    clusterset: str | None = None  # run the MCS controller for this clusterset; None: not run
    mesh_root: Path | None = None  # mesh the registered --netns local clusters under it; None: not run
    dashboard_port: int | None = None  # the read-only web dashboard (app.dashboard); None: off
    dashboard_address: str = "127.0.0.1"
    dashboard_tls: bool = False  # HTTPS with the cluster proxy's CA (client certificates work)
    # None: every controller runs here (one replica); set: they run only while this replica
    # holds the Lease (`--leader-elect`)
    leader_election: LeaderElection | None = None
    # the tunnel's servercount: agents keep dialling until they hold a stream to this many
    # distinct hub replicas (ANP's HA model)
    tunnel_server_count: int = 1
    tunnel_server_id: str = ""  # [default: the leader election identity, else a uuid]


@dataclass(frozen=True)
class LeaderElection:
    """`--leader-elect*` (kube-controller-manager's flags and defaults)."""

    identity: str
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    resource_name: str = "tether-hub"
    resource_namespace: str = "tether-system"
