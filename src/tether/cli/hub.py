"""`tether hub`: set up a host cluster as the federation hub."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tether.kube import KubeClient, KubeError
from tether.kube.config import KubeconfigError

app = typer.Typer(help="The federation hub: CRDs, namespace and controllers in a host cluster.",
                  no_args_is_help=True)
console = Console(soft_wrap=True)


@app.command()
def install(
    context: Annotated[str | None, typer.Option("--context", help="Host cluster context [default: current]")] = None,
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="Host kubeconfig "
                                                    "[default: $KUBECONFIG or ~/.kube/config]")] = None,
) -> None:
    """Install the hub's namespace and CRDs, and enable KubeFed's default federated types."""
    from tether.federation import install as hub_install

    async def run() -> int:
        async with KubeClient.from_kubeconfig(kubeconfig, context) as client:
            steps = await hub_install.install(client, report=lambda step: typer.echo(str(step)))
            changed = sum(1 for s in steps if s.outcome != "unchanged")
            console.print(f"[green]hub installed[/green] on {client.credentials.server} "
                          f"({changed} changed, {len(steps) - changed} unchanged)")
        return 0

    try:
        raise typer.Exit(asyncio.run(run()))
    except (KubeError, KubeconfigError, TimeoutError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None


@app.command()
def run(
    context: Annotated[str | None, typer.Option("--context", help="Host cluster context [default: current]")] = None,
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="Host kubeconfig "
                                                    "[default: $KUBECONFIG or ~/.kube/config]")] = None,
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1 for /healthz, /readyz, /metrics "
                                      "(0 picks a free one)")] = 8443,
    health_port: Annotated[int | None, typer.Option("--health-port", help="Extra port serving the same "
                                                    "endpoints, e.g. for probes")] = None,
    proxy_port: Annotated[int | None, typer.Option(
        "--proxy-port", help="Also serve the cluster proxy (/apis/cluster.tether.io/v1alpha1/clusters/NAME/"
                             "proxy) on this 127.0.0.1 port (0 picks one); `tether kubeconfig NAME` "
                             "then points at it")] = None,
    health_period: Annotated[float, typer.Option("--health-period", help="Seconds between member "
                                                 "health probes")] = 10.0,
    health_threshold: Annotated[float, typer.Option("--health-threshold", help="Seconds a changed "
                                                    "probe result must hold before Ready flips")] = 30.0,
    health_grace: Annotated[float, typer.Option("--health-grace", help="Seconds without a pull "
                                                "member's heartbeat before it turns Unknown")] = 40.0,
    resync: Annotated[float, typer.Option("--resync", help="Seconds between full resyncs (a safety net: changes arrive as events; a resync waits behind them)")] = 300.0,
    tunnel_agent_port: Annotated[int | None, typer.Option(
        "--tunnel-agent-port", help="Run a tunnel server for pull members; agents dial this port "
        "(0 picks one)")] = None,
    tunnel_frontend_port: Annotated[int, typer.Option(
        "--tunnel-frontend-port", help="127.0.0.1 port where the hub's clients CONNECT through "
        "the tunnel (pull Clusters' proxyURL; 0 picks one)")] = 8088,
    tunnel_bind_address: Annotated[str, typer.Option("--tunnel-bind-address",
                                                     help="Agent port bind address")] = "",
    tunnel_advertise: Annotated[str, typer.Option(
        "--tunnel-advertise-address", help="HOST[:PORT] agents dial [default: 127.0.0.1]")] = "",
    tunnel_certs: Annotated[Path | None, typer.Option(
        "--tunnel-certs", help="A `tether certs` directory [default: generated in --data-dir]")] = None,
    allowed_destinations: Annotated[list[str] | None, typer.Option(
        "--allowed-destinations", help="Let the tunnel's CONNECT listener reach these too, for any "
        "caller holding a cluster's proxy token (comma-separated, repeatable: CIDR, IP, host, "
        "*.suffix, each optionally :PORT) [default: only each pull member's API endpoint]")] = None,
    data_dir: Annotated[Path | None, typer.Option(
        "--data-dir", help="Hub state (tunnel certificates) [default: ~/.local/share/tether/hub]")] = None,
    clusterset: Annotated[str | None, typer.Option(
        "--clusterset", help="Run the MCS API (ServiceExport/ServiceImport) across the Ready members as this "
        "clusterset: installs the MCS CRDs and ClusterProperties in each member")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at INFO level")] = False,
) -> None:
    """Run every hub controller: cluster health, KubeFed and Karmada propagation, the executor."""

    from tether.app import hub as hub_app
    from tether.app.hubconfig import HubConfig
    from tether.federation.health import HealthTimers
    from tether.tunnel.destinations import DestinationError, parse_patterns

    try:
        parse_patterns(allowed_destinations or ())
    except DestinationError as exc:
        raise typer.BadParameter(str(exc), param_hint="--allowed-destinations") from None

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>` dumps every thread's stack
    timers = HealthTimers(period_s=health_period, failure_threshold_s=health_threshold,
                          success_threshold_s=health_threshold, grace_period_s=health_grace,
                          startup_grace_period_s=max(health_grace, 60.0 * health_grace / 40.0))
    config = HubConfig(kubeconfig=kubeconfig, context=context, port=port,
                               health_port=health_port, health=timers, resync_s=resync,
                               proxy_port=proxy_port,
                               tunnel_agent_port=tunnel_agent_port,
                               tunnel_frontend_port=tunnel_frontend_port,
                               tunnel_bind_address=tunnel_bind_address,
                               tunnel_advertise=tunnel_advertise, tunnel_certs=tunnel_certs,
                               tunnel_allowed_destinations=tuple(allowed_destinations or ()),
                               data_dir=data_dir, clusterset=clusterset)
    try:
        code = asyncio.run(hub_app.serve(config, announce=lambda line: typer.echo(line)))
    except (KubeError, KubeconfigError, OSError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        code = 1
    # The hub's own shutdown is bounded (`shutdown_s`); what is left can only be a thread of the
    # default executor stuck in a blocking call (a resolver, say), which would otherwise hold the
    # process at exit for ever. Flush and leave.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
