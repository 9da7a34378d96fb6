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
