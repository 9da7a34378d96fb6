"""`tether hub`: set up a host cluster as the federation hub."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from tether.cli.options import (
    DataDir,
    HubContext,
    HubContextAlias,
    HubKubeconfig,
    HubKubeconfigAlias,
    pick,
    state_root,
)
from tether.kube import KubeClient, KubeError
from tether.kube.config import KubeconfigError

if TYPE_CHECKING:
    from tether.app.hubconfig import LeaderElection

app = typer.Typer(help="The federation hub: CRDs, namespace and controllers in a host cluster.",
                  no_args_is_help=True)
console = Console(soft_wrap=True)


def port_in_use(exc: OSError, ports: dict[str, int | None]) -> str | None:
    """For a listener that could not bind: which port, which flag sets it, and the way out."""
    if exc.errno != errno.EADDRINUSE:
        return None
    found = re.search(r"(\d+)\)?: ", str(exc)) or re.search(r":(\d+)\b", str(exc))
    port = int(found.group(1)) if found else None
    flag = next((name for name, value in ports.items() if value and value == port), None)
    what = f"port {port}" if port else "a port"
    fix = (f"pass {flag} 0 to pick a free one, or another port with {flag}" if flag
           else "pass 0 for the port flags to pick free ones")
    return f"{what} on 127.0.0.1 is already in use (another `tether hub run`?): {fix}"


def leader_election(lease_duration: str, renew_deadline: str, retry_period: str, name: str,
                    namespace: str) -> LeaderElection:
    """The `--leader-elect-*` flags, checked as client-go checks them; the identity is the pod
    name (or host name) and a uuid, as kube-controller-manager's, so a restarted replica is a
    new candidate."""
    import socket
    import uuid

    from tether.app.hubconfig import LeaderElection
    from tether.connect.durations import DurationError, parse_duration
    from tether.kube.leaderelection import ElectionConfig, ElectionConfigError

    seconds: dict[str, float] = {}
    for flag, text in (("--leader-elect-lease-duration", lease_duration),
                       ("--leader-elect-renew-deadline", renew_deadline),
                       ("--leader-elect-retry-period", retry_period)):
        try:
            seconds[flag] = float(text) if re.fullmatch(r"\d+(\.\d*)?", text) else parse_duration(text)
        except DurationError as exc:
            raise typer.BadParameter(str(exc), param_hint=flag) from None
    identity = f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4()}"
    election = LeaderElection(identity=identity,
                              lease_duration_s=seconds["--leader-elect-lease-duration"],
                              renew_deadline_s=seconds["--leader-elect-renew-deadline"],
                              retry_period_s=seconds["--leader-elect-retry-period"],
                              resource_name=name, resource_namespace=namespace)
    try:
        ElectionConfig(identity=identity, name=name, namespace=namespace,
                       lease_duration_s=election.lease_duration_s,
                       renew_deadline_s=election.renew_deadline_s,
                       retry_period_s=election.retry_period_s).check()
    except ElectionConfigError as exc:
        raise typer.BadParameter(str(exc), param_hint="--leader-elect-*") from None
    return election


@app.command()
def install(
    context: HubContext = None,
    kubeconfig: HubKubeconfig = None,
    context_alias: HubContextAlias = None,
    kubeconfig_alias: HubKubeconfigAlias = None,
) -> None:
    """Install the hub's namespace and CRDs, and enable KubeFed's default federated types."""
    from tether.federation import install as hub_install

    context = pick(context, context_alias, "--context")
    kubeconfig = pick(kubeconfig, kubeconfig_alias, "--kubeconfig")
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
    context: HubContext = None,
    kubeconfig: HubKubeconfig = None,
    context_alias: HubContextAlias = None,
    kubeconfig_alias: HubKubeconfigAlias = None,
    in_cluster: Annotated[bool, typer.Option(
        "--in-cluster", help="Reach the hub cluster with the pod's ServiceAccount (the hub as a "
        "Deployment) instead of a kubeconfig")] = False,
    bind_address: Annotated[str, typer.Option(
        "--bind-address", help="Address the health/metrics and cluster proxy ports listen on "
        "(0.0.0.0 in a pod, for probes and the Service)")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port for /healthz, /readyz, /metrics "
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
        "--tunnel-certs", help="A `tether certs` directory, or a directory with its agent "
        "ca.crt, proxy-frontend.crt and proxy-frontend.key side by side (a mounted Secret) "
        "[default: generated in --data-dir]")] = None,
    allowed_destinations: Annotated[list[str] | None, typer.Option(
        "--allowed-destinations", help="Let the tunnel's CONNECT listener reach these too, for any "
        "caller holding a cluster's proxy token (comma-separated, repeatable: CIDR, IP, host, "
        "*.suffix, each optionally :PORT) [default: only each pull member's API endpoint]")] = None,
    data_dir: DataDir = None,
    failover: Annotated[bool, typer.Option(
        "--failover", help="Karmada cluster failover (its Failover feature gate with "
        "--enable-no-execute-taint-eviction): evict workloads from clusters with a NoExecute "
        "taint their policy does not tolerate")] = False,
    eviction_purge_mode: Annotated[str, typer.Option(
        "--no-execute-taint-eviction-purge-mode", help="Directly or Gracefully: how evicted "
        "copies go when the policy has no failover.cluster.purgeMode")] = "Gracefully",
    graceful_eviction_timeout: Annotated[float, typer.Option(
        "--graceful-eviction-timeout", help="Seconds a gracefully evicted copy may wait for its "
        "replacement to become healthy")] = 600.0,
    clusterset: Annotated[str | None, typer.Option(
        "--clusterset", help="Run the MCS API (ServiceExport/ServiceImport) across the Ready members as this "
        "clusterset: installs the MCS CRDs and ClusterProperties in each member")] = None,
    mesh: Annotated[bool, typer.Option(
        "--mesh", help="Mesh the registered Clusters that are --netns local clusters of --data-dir with "
        "WireGuard (what `tether mesh local` does), with a MeshReady condition on each; needs root")] = False,
    dashboard_port: Annotated[int | None, typer.Option(
        "--dashboard-port", help="Serve the read-only web dashboard on this port (0 picks one; "
        "8090 in the hub manifests); see docs/dashboard.md")] = None,
    dashboard_address: Annotated[str, typer.Option(
        "--dashboard-address", help="Address the dashboard listens on")] = "127.0.0.1",
    dashboard_tls: Annotated[bool, typer.Option(
        "--dashboard-tls", help="Serve the dashboard over HTTPS with the cluster proxy's CA, so "
        "`tether kubeconfig` client certificates sign in too")] = False,
    leader_elect: Annotated[bool, typer.Option(
        "--leader-elect", help="Run several replicas: they elect a leader with a coordination.k8s.io/v1 "
        "Lease and only the leader runs the controllers (the cluster proxy, tunnel server and "
        "health endpoints serve on every replica); see docs/hub-ha.md")] = False,
    lease_duration: Annotated[str, typer.Option(
        "--leader-elect-lease-duration", help="How long followers wait, after the last change "
        "they saw, before taking an unrenewed Lease (Go duration or seconds)")] = "15s",
    renew_deadline: Annotated[str, typer.Option(
        "--leader-elect-renew-deadline", help="How long the leader keeps retrying a renewal "
        "before it stops leading and exits (less than the lease duration)")] = "10s",
    retry_period: Annotated[str, typer.Option(
        "--leader-elect-retry-period", help="Time between attempts to acquire or renew")] = "2s",
    lease_name: Annotated[str, typer.Option(
        "--leader-elect-resource-name", help="The Lease's name")] = "tether-hub",
    lease_namespace: Annotated[str, typer.Option(
        "--leader-elect-resource-namespace", "--leader-elect-namespace",
        help="The Lease's namespace")] = "tether-system",
    tunnel_server_count: Annotated[int, typer.Option(
        "--tunnel-server-count", min=1, help="Hub replicas behind the tunnel address: agents "
        "connect until they hold a stream to this many (ANP's --server-count)")] = 1,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at INFO level")] = False,
    template_status: Annotated[str, typer.Option(
        "--template-status", metavar="auto|status|annotation",
        help="Where Karmada templates get the members' summed status: their .status (as Karmada; "
             "for a hub without workload controllers), the tether.io/propagation-status annotation "
             "(a hub that runs its own), or auto: .status when the hub has no Nodes")] = "auto",
) -> None:
    """Run every hub controller: cluster health, KubeFed and Karmada propagation, the executor."""

    from tether.app import hub as hub_app
    from tether.app.clusterproxy import ProxySetupError
    from tether.app.hubconfig import HubConfig
    from tether.federation.health import HealthTimers
    from tether.tunnel.destinations import DestinationError, parse_patterns

    context = pick(context, context_alias, "--context")
    kubeconfig = pick(kubeconfig, kubeconfig_alias, "--kubeconfig")
    if in_cluster and (context or kubeconfig):
        raise typer.BadParameter("use either --in-cluster or a kubeconfig/context, not both",
                                 param_hint="--in-cluster")
    try:
        parse_patterns(allowed_destinations or ())
    except DestinationError as exc:
        raise typer.BadParameter(str(exc), param_hint="--allowed-destinations") from None
    from tether.federation.failover import DIRECTLY, GRACEFULLY, FailoverSettings, purge_mode

    if purge_mode(eviction_purge_mode) not in (DIRECTLY, GRACEFULLY):
        raise typer.BadParameter(f"{eviction_purge_mode!r}: use Directly or Gracefully",
                                 param_hint="--no-execute-taint-eviction-purge-mode")
    from tether.federation.template_status import MODES

    if template_status not in MODES:
        raise typer.BadParameter(f"{template_status!r} is not one of {', '.join(MODES)}",
                                 param_hint="--template-status")

    election = (leader_election(lease_duration, renew_deadline, retry_period, lease_name,
                                lease_namespace) if leader_elect else None)

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import faulthandler
    import signal

    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>` dumps every thread's stack
    timers = HealthTimers(period_s=health_period, failure_threshold_s=health_threshold,
                          success_threshold_s=health_threshold, grace_period_s=health_grace,
                          startup_grace_period_s=max(health_grace, 60.0 * health_grace / 40.0))
    if tunnel_certs is not None:
        from tether.objects.podfiles import mounted_path

        # a Secret volume: where the pod's kubelet really put it, when it says (local clusters)
        tunnel_certs = mounted_path(str(tunnel_certs))
    config = HubConfig(kubeconfig=kubeconfig, context=context, in_cluster=in_cluster,
                               bind_address=bind_address, port=port,
                               health_port=health_port, health=timers, resync_s=resync,
                               proxy_port=proxy_port,
                               tunnel_agent_port=tunnel_agent_port,
                               tunnel_frontend_port=tunnel_frontend_port,
                               tunnel_bind_address=tunnel_bind_address,
                               tunnel_advertise=tunnel_advertise, tunnel_certs=tunnel_certs,
                               tunnel_allowed_destinations=tuple(allowed_destinations or ()),
                               data_dir=state_root(data_dir) / "hub", template_status=template_status,
                               failover=FailoverSettings(
                                   enabled=failover, purge_mode=purge_mode(eviction_purge_mode),
                                   graceful_timeout_s=graceful_eviction_timeout),
                               clusterset=clusterset, mesh_root=state_root(data_dir) if mesh else None,
                               dashboard_port=dashboard_port, dashboard_address=dashboard_address,
                               dashboard_tls=dashboard_tls, leader_election=election,
                               tunnel_server_count=tunnel_server_count)
    ports = {"--port": port, "--health-port": health_port, "--proxy-port": proxy_port,
             "--dashboard-port": dashboard_port,
             "--tunnel-agent-port": tunnel_agent_port, "--tunnel-frontend-port": tunnel_frontend_port}
    try:
        code = asyncio.run(hub_app.serve(config, announce=lambda line: typer.echo(line)))
    except OSError as exc:
        console.print(f"[red]error:[/red] {port_in_use(exc, ports) or exc}", highlight=False)
        code = 1
    except (KubeError, KubeconfigError, ProxySetupError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        code = 1
    # The hub's own shutdown is bounded (`shutdown_s`); what is left can only be a thread of the
    # default executor stuck in a blocking call (a resolver, say), which would otherwise hold the
    # process at exit for ever. Flush and leave.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
