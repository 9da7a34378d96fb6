"""`tether tunnel server|agent`: apiserver-network-proxy's proxy-server and proxy-agent, with
their flag names and defaults."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import uuid
from typing import Annotated

import typer

app = typer.Typer(help="ANP-compatible tunnel: proxy-server and proxy-agent.", no_args_is_help=True)

Opt = typer.Option
SHUTDOWN_S = 5.0  # after the drain: closing streams and listeners


def _logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@app.command()
def server(
    mode: Annotated[str, Opt("--mode", help="grpc or http-connect")] = "grpc",
    uds_name: Annotated[str, Opt("--uds-name", help="Unix socket for the frontend")] = "",
    server_bind_address: Annotated[str, Opt("--server-bind-address")] = "",
    server_port: Annotated[int, Opt("--server-port", help="Frontend port (0 with --uds-name)")] = 8090,
    agent_bind_address: Annotated[str, Opt("--agent-bind-address")] = "",
    agent_port: Annotated[int, Opt("--agent-port")] = 8091,
    health_bind_address: Annotated[str, Opt("--health-bind-address")] = "",
    health_port: Annotated[int, Opt("--health-port")] = 8092,
    admin_bind_address: Annotated[str, Opt("--admin-bind-address")] = "127.0.0.1",
    admin_port: Annotated[int, Opt("--admin-port")] = 8095,
    server_ca_cert: Annotated[str, Opt("--server-ca-cert")] = "",
    server_cert: Annotated[str, Opt("--server-cert")] = "",
    server_key: Annotated[str, Opt("--server-key")] = "",
    cluster_ca_cert: Annotated[str, Opt("--cluster-ca-cert")] = "",
    cluster_cert: Annotated[str, Opt("--cluster-cert")] = "",
    cluster_key: Annotated[str, Opt("--cluster-key")] = "",
    proxy_strategies: Annotated[str, Opt("--proxy-strategies",
                                         help="Comma list of default, destHost, defaultRoute")] = "default",
    server_id: Annotated[str, Opt("--server-id", help="[default: $PROXY_SERVER_ID or a uuid]")] = "",
    server_count: Annotated[int, Opt("--server-count")] = 1,
    keepalive_time: Annotated[float, Opt("--keepalive-time", help="Agent listener, seconds")] = 3600.0,
    frontend_keepalive_time: Annotated[float, Opt("--frontend-keepalive-time", help="Seconds")] = 3600.0,
    backend_dial_timeout: Annotated[float, Opt("--backend-dial-timeout",
                                               help="Seconds; 0 disables")] = 30.0,
    plain_connect_port: Annotated[int, Opt("--plain-connect-port",
                                           help="Also accept plain-HTTP CONNECT here (Karmada: 8088); "
                                                "-1 disables")] = -1,
    agent_identity_binding: Annotated[str, Opt("--agent-identity-binding",
                                               help="auto (when the agent certificate has SANs), "
                                                    "strict, or none")] = "auto",
    allow_insecure: Annotated[bool, Opt("--allow-insecure",
                                        help="Allow TCP listeners without TLS (tests only)")] = False,
    verbose: Annotated[bool, Opt("-v", "--verbose")] = False,
) -> None:
    """Run the proxy server (frontend 8090, agents 8091, health 8092, admin 127.0.0.1:8095)."""
    from tether.tunnel.routing import parse_strategies
    from tether.tunnel.server import ServerConfig, TunnelServer
    from tether.tunnel.tls import ServerTLS

    _logging(verbose)
    if mode not in ("grpc", "http-connect"):
        raise typer.BadParameter("must be grpc or http-connect", param_hint="--mode")
    if agent_identity_binding not in ("auto", "strict", "none"):
        raise typer.BadParameter("auto, strict or none", param_hint="--agent-identity-binding")
    try:
        strategies = parse_strategies(proxy_strategies)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--proxy-strategies") from None
    if uds_name and (server_ca_cert or server_cert or server_key):
        raise typer.BadParameter("no --server-* certificates with --uds-name", param_hint="--uds-name")
    if server_port and not allow_insecure and not (server_ca_cert and server_cert and server_key):
        raise typer.BadParameter("--server-ca-cert, --server-cert and --server-key are required in TCP "
                                 "mode (or --uds-name with --server-port=0)", param_hint="--server-ca-cert")
    if not allow_insecure and not (cluster_cert and cluster_key):
        raise typer.BadParameter("--cluster-cert and --cluster-key are required",
                                 param_hint="--cluster-cert")
    config = ServerConfig(
        mode=mode, uds_name=uds_name, server_bind_address=server_bind_address, server_port=server_port,
        agent_bind_address=agent_bind_address, agent_port=agent_port,
        health_bind_address=health_bind_address, health_port=health_port,
        admin_bind_address=admin_bind_address, admin_port=admin_port,
        plain_connect_port=plain_connect_port if plain_connect_port >= 0 else None,
        frontend_tls=ServerTLS(server_cert, server_key, server_ca_cert),
        agent_tls=ServerTLS(cluster_cert, cluster_key, cluster_ca_cert),
        proxy_strategies=strategies,
        server_id=server_id or os.environ.get("PROXY_SERVER_ID") or str(uuid.uuid4()),
        server_count=server_count, keepalive_time_s=keepalive_time,
        frontend_keepalive_time_s=frontend_keepalive_time, backend_dial_timeout_s=backend_dial_timeout,
        agent_identity_binding=agent_identity_binding,
    )

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        tunnel = TunnelServer(config)
        await tunnel.serve(stop)

    asyncio.run(run())


@app.command()
def agent(
    ca_cert: Annotated[str, Opt("--ca-cert", help="CA that signed the server's agent-port cert")] = "",
    agent_cert: Annotated[str, Opt("--agent-cert")] = "",
    agent_key: Annotated[str, Opt("--agent-key")] = "",
    proxy_server_host: Annotated[str, Opt("--proxy-server-host")] = "127.0.0.1",
    proxy_server_port: Annotated[int, Opt("--proxy-server-port")] = 8091,
    agent_id: Annotated[str, Opt("--agent-id", help="[default: $PROXY_AGENT_ID or a uuid]")] = "",
    agent_identifiers: Annotated[str, Opt("--agent-identifiers",
                                          help="host=..&ipv4=..&ipv6=..&cidr=..&default-route=true")] = "",
    health_server_host: Annotated[str, Opt("--health-server-host")] = "",
    health_server_port: Annotated[int, Opt("--health-server-port")] = 8093,
    admin_bind_address: Annotated[str, Opt("--admin-bind-address")] = "127.0.0.1",
    admin_server_port: Annotated[int, Opt("--admin-server-port")] = 8094,
    sync_interval: Annotated[float, Opt("--sync-interval", help="Seconds")] = 1.0,
    probe_interval: Annotated[float, Opt("--probe-interval", help="Seconds")] = 1.0,
    sync_interval_cap: Annotated[float, Opt("--sync-interval-cap", help="Seconds")] = 10.0,
    sync_forever: Annotated[bool, Opt("--sync-forever")] = False,
    keepalive_time: Annotated[float, Opt("--keepalive-time", help="Seconds, at least 30")] = 3600.0,
    service_account_token_path: Annotated[str, Opt("--service-account-token-path")] = "",
    plain_anp: Annotated[bool, Opt("--no-flow-control", help="Do not offer tether's per-connection "
                                                             "windows")] = False,
    allowed_destinations: Annotated[list[str] | None, Opt(
        "--allowed-destinations", help="Only dial these (comma-separated, repeatable): CIDR, IP, "
        "host, *.suffix, each optionally :PORT, e.g. 10.0.0.0/8:443,api.internal:6443 "
        "[default: any valid host:port]")] = None,
    drain_timeout: Annotated[float, Opt("--drain-timeout", help="Seconds to wait after SIGTERM for "
                                                               "open connections to end before "
                                                               "exiting (a second signal exits "
                                                               "at once)")] = 20.0,
    allow_insecure: Annotated[bool, Opt("--allow-insecure", help="No TLS (tests only)")] = False,
    verbose: Annotated[bool, Opt("-v", "--verbose")] = False,
) -> None:
    """Run the proxy agent: dial out to every server replica and serve their dials."""
    from tether.tunnel.agent import AgentConfig, TunnelAgent
    from tether.tunnel.destinations import DestinationError, parse_patterns
    from tether.tunnel.routing import IdentifierError, parse_identifiers
    from tether.tunnel.tls import ClientTLS

    _logging(verbose)
    try:
        parse_identifiers(agent_identifiers, strict=True)
    except IdentifierError as exc:
        raise typer.BadParameter(str(exc), param_hint="--agent-identifiers") from None
    if keepalive_time < 30:
        raise typer.BadParameter("must be at least 30 seconds", param_hint="--keepalive-time")
    if not ca_cert and not allow_insecure:
        raise typer.BadParameter("required", param_hint="--ca-cert")
    if drain_timeout < 0:
        raise typer.BadParameter("must be 0 or more seconds", param_hint="--drain-timeout")
    try:
        allowed = parse_patterns(allowed_destinations or ())
    except DestinationError as exc:
        raise typer.BadParameter(str(exc), param_hint="--allowed-destinations") from None
    tls = ClientTLS(ca_cert, agent_cert, agent_key, server_name=proxy_server_host) if ca_cert else None
    config = AgentConfig(
        proxy_server_host=proxy_server_host, proxy_server_port=proxy_server_port, tls=tls,
        agent_id=agent_id or os.environ.get("PROXY_AGENT_ID") or str(uuid.uuid4()),
        agent_identifiers=agent_identifiers, health_server_host=health_server_host,
        health_server_port=health_server_port, admin_bind_address=admin_bind_address,
        admin_server_port=admin_server_port, sync_interval_s=sync_interval,
        sync_interval_cap_s=sync_interval_cap, probe_interval_s=probe_interval,
        sync_forever=sync_forever, keepalive_time_s=keepalive_time,
        token_path=service_account_token_path, window_bytes=0 if plain_anp else 1024 * 1024,
        allowed_destinations=allowed,
    )

    async def run() -> None:
        stop = asyncio.Event()
        tunnel = TunnelAgent(config)
        draining: asyncio.Task[None] | None = None
        loop = asyncio.get_running_loop()

        def on_signal() -> None:  # first: DRAIN, stop when drained or timed out; second: now
            nonlocal draining
            if draining is None:
                draining = loop.create_task(tunnel.drain_then_stop(stop, drain_timeout))
            else:
                stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        runner = loop.create_task(tunnel.run(stop))
        stopped = loop.create_task(stop.wait())
        await asyncio.wait({runner, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        try:  # run() winds down at once on stop; never let a stuck step hold the process
            async with asyncio.timeout(SHUTDOWN_S):
                await runner
        except TimeoutError:
            logging.getLogger("tether.tunnel.agent").warning(
                "did not stop within %.0fs of the drain; exiting", SHUTDOWN_S)

    asyncio.run(run())
