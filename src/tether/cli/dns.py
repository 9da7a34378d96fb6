"""`tether dns`: a DNS server for `clusterset.local` (MCS) and Semaphore's `cluster.<prefix>` names."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Annotated

import typer

from tether.cli.options import Context, Kubeconfig


def register(app: typer.Typer) -> None:
    from tether.cli.manifests import dns_manifest

    # `tether dns --listen ...` serves; `tether dns manifest` prints its Deployment
    group = typer.Typer(invoke_without_command=True, no_args_is_help=False)
    group.callback(invoke_without_command=True)(dns)
    group.command("manifest")(dns_manifest)
    app.add_typer(group, name="dns")


def dns(
    ctx: typer.Context,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
    in_cluster: Annotated[bool, typer.Option("--in-cluster", help="Use the pod's ServiceAccount")] = False,
    listen: Annotated[str, typer.Option("--listen", help="HOST:PORT for UDP and TCP (port 0 picks one)")]
        = "127.0.0.1:5353",
    upstream: Annotated[list[str] | None, typer.Option(
        "--upstream", help="Where other names go (IP[:PORT], repeatable) [default: the nameservers of "
                           "--resolv-conf]")] = None,
    resolv_conf: Annotated[Path, typer.Option("--resolv-conf", help="Upstreams when --upstream is not "
                                              "given")] = Path("/etc/resolv.conf"),
    no_forward: Annotated[bool, typer.Option("--no-forward", help="Answer only our zones; REFUSED for "
                                             "the rest")] = False,
    prefix: Annotated[list[str] | None, typer.Option(
        "--prefix", help="Semaphore servicePrefix whose cluster.<prefix> zone is ours even before a mirror "
                         "exists (repeatable; prefixes of existing mirrors are always ours)")] = None,
    ttl: Annotated[int, typer.Option("--ttl", help="TTL of the answers, seconds")] = 5,
    metrics: Annotated[str, typer.Option("--metrics-address", help="HOST:PORT for /metrics, /healthz, "
                                         "/ready ('' turns them off)")] = "127.0.0.1:9153",
    max_udp: Annotated[int, typer.Option("--max-udp-size", help="Largest UDP answer (bytes); larger ones "
                                         "are truncated (TC) and retried over TCP")] = 1232,
    no_semaphore: Annotated[bool, typer.Option("--no-semaphore", help="Do not serve cluster.<prefix> and "
                                               "cluster.global")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Serve clusterset.local (MCS DNS specification), Semaphore's svc.ns.svc.cluster.<prefix> and
    cluster.global names from watches of one cluster; forward every other name upstream."""
    if ctx.invoked_subcommand:
        return
    from tether.app import dns as dns_app
    from tether.connect.dns.server import ServerConfig
    from tether.connect.dns.sources import SourceConfig
    from tether.kube import KubeError
    from tether.kube.config import KubeconfigError
    from tether.net import dnsclient

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        host, port = _split(listen, "--listen")
        upstreams: list[dnsclient.Upstream] = []
        if not no_forward:
            upstreams = ([dnsclient.parse_upstream(u) for u in upstream] if upstream
                         else dnsclient.upstreams_from_resolv_conf(resolv_conf))
        if (host, port) in upstreams:
            raise typer.BadParameter(f"{host}:{port} is this server: forwarding to it would loop",
                                     param_hint="--upstream")
        metrics_host, metrics_port = _split(metrics, "--metrics-address") if metrics else ("", None)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if not 0 < ttl < 2**31 or not 512 <= max_udp <= 65535:
        raise typer.BadParameter("--ttl must be positive and --max-udp-size 512 to 65535")
    options = dns_app.DnsOptions(
        server=ServerConfig(host=host, port=port, upstreams=tuple(upstreams), max_udp_bytes=max_udp),
        sources=SourceConfig(prefixes=tuple(prefix or ()), ttl=ttl, semaphore=not no_semaphore),
        kubeconfig=kubeconfig, context=context, in_cluster=in_cluster,
        metrics_host=metrics_host or "127.0.0.1", metrics_port=metrics_port)
    try:
        raise typer.Exit(asyncio.run(dns_app.serve(options, announce=lambda line: typer.echo(line, err=True))))
    except (KubeError, KubeconfigError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    except OSError as exc:
        typer.echo(f"error: cannot listen on {listen}: {exc.strerror or exc}", err=True)
        raise typer.Exit(1) from None


def _split(address: str, flag: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{flag}: {address!r} is not HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)
