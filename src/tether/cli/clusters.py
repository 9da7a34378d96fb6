"""`tether join`, `tether unjoin`, `tether clusters`: the member cluster registry."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Annotated, Any

import typer
from rich.console import Console

from tether.cli.options import (
    ClusterKubeconfig,
    HostContext,
    HostContextAlias,
    HostKubeconfig,
    HostKubeconfigAlias,
    HubContext,
    HubContextAlias,
    HubKubeconfig,
    HubKubeconfigAlias,
    pick,
)
from tether.kube import KubeClient, KubeError
from tether.kube.config import KubeconfigError

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)



def _fail(exc: Exception) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {exc}")
    return typer.Exit(1)


def _labels(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{pair!r} is not key=value", param_hint="--label")
        out[key] = value
    return out


def join(
    name: Annotated[str, typer.Argument(help="The name the member gets in the hub")],
    cluster_context: Annotated[str, typer.Option("--cluster-context", help="The member's context in "
                                                 "the kubeconfig")],
    cluster_kubeconfig: ClusterKubeconfig = None,
    host_context: HostContext = None,
    host_kubeconfig: HostKubeconfig = None,
    host_context_alias: HostContextAlias = None,
    host_kubeconfig_alias: HostKubeconfigAlias = None,
    region: Annotated[str, typer.Option("--region", help="[default: from node labels]")] = "",
    zone: Annotated[list[str] | None, typer.Option("--zone", help="Zone (repeat) [default: from node labels]")] = None,
    provider: Annotated[str, typer.Option("--provider")] = "",
    label: Annotated[list[str] | None, typer.Option("--label", help="Cluster label k=v (repeat)")] = None,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds to wait for the member's token")] = 30.0,
) -> None:
    """Register a member in push mode (a ServiceAccount in the member, its token on the hub)."""
    from tether.federation import registry

    host_context = pick(host_context, host_context_alias, "--host-context")
    host_kubeconfig = pick(host_kubeconfig, host_kubeconfig_alias, "--host-kubeconfig")
    options = registry.JoinOptions(name=name, region=region, zones=tuple(zone or ()), provider=provider,
                                   labels=_labels(list(label or [])), token_wait_s=timeout_s)

    async def run() -> registry.JoinResult:
        async with (KubeClient.from_kubeconfig(host_kubeconfig, host_context) as host,
                    KubeClient.from_kubeconfig(cluster_kubeconfig or host_kubeconfig, cluster_context) as member):
            return await registry.join(host, member, options)

    try:
        result = asyncio.run(run())
    except (registry.RegistryError, KubeError, KubeconfigError) as exc:
        raise _fail(exc) from None
    for step in result.steps:
        typer.echo(step)
    where = ", ".join(p for p in (result.region, ",".join(result.zones)) if p)
    verb = "already joined (updated)" if result.already_joined else "joined"
    console.print(f"[green]cluster {name} {verb}[/green]: {result.api_endpoint}"
                  + (f" ({where})" if where else ""))


def unjoin(
    name: Annotated[str, typer.Argument(help="The member's name in the hub")],
    host_context: HostContext = None,
    host_kubeconfig: HostKubeconfig = None,
    cluster_context: Annotated[str | None, typer.Option(
        "--cluster-context", help="The member's context in the kubeconfig [default: the credentials "
                                  "stored at join]")] = None,
    cluster_kubeconfig: ClusterKubeconfig = None,
    host_context_alias: HostContextAlias = None,
    host_kubeconfig_alias: HostKubeconfigAlias = None,
    keep_resources: Annotated[bool, typer.Option(
        "--keep-resources", help="Leave what tether propagated to the member in place")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Remove the cluster from the hub even when the member cannot be cleaned")] = False,
) -> None:
    """Remove a member: propagated objects, its ServiceAccount/RBAC/Secrets, the hub's Cluster."""
    from tether.federation import registry

    host_context = pick(host_context, host_context_alias, "--host-context")
    host_kubeconfig = pick(host_kubeconfig, host_kubeconfig_alias, "--host-kubeconfig")

    async def run() -> registry.UnjoinResult:
        async with KubeClient.from_kubeconfig(host_kubeconfig, host_context) as host:
            if cluster_context is not None:
                async with KubeClient.from_kubeconfig(cluster_kubeconfig or host_kubeconfig,
                                                      cluster_context) as member:
                    return await registry.unjoin(host, member, name, keep_resources=keep_resources,
                                                 force=force)
            member_from_hub = await registry.member_client_from_hub(host, name)
            try:
                return await registry.unjoin(host, member_from_hub, name, keep_resources=keep_resources,
                                             force=force, uses_own_token=True)
            finally:
                if member_from_hub is not None:
                    await member_from_hub.close()

    try:
        result = asyncio.run(run())
    except (registry.RegistryError, KubeError, KubeconfigError) as exc:
        raise _fail(exc) from None
    for step in result.steps:
        typer.echo(step)
    if result.member_skipped:
        err_console.print(f"[yellow]warning:[/yellow] member not cleaned up: {result.member_skipped}")
    if not result.steps:
        console.print(f"cluster {name} is not joined (nothing to do)")
    else:
        kept = " (propagated resources kept)" if result.kept_resources else ""
        console.print(f"[green]cluster {name} unjoined[/green]{kept}")


def _age(stamp: str | None, now: dt.datetime) -> str:
    if not stamp:
        return "<unknown>"
    seconds = int((now - dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit != "m" else 1):
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def cluster_row(cluster: dict[str, Any], now: dt.datetime, wide: bool) -> list[str]:
    spec, status = cluster.get("spec") or {}, cluster.get("status") or {}
    ready = next((c.get("status", "Unknown") for c in status.get("conditions") or []
                  if c.get("type") == "Ready"), "Unknown")
    row = [cluster["metadata"]["name"], spec.get("syncMode", ""), ready,
           status.get("kubernetesVersion") or "<none>", _age(cluster["metadata"].get("creationTimestamp"), now)]
    if wide:
        row += [spec.get("apiEndpoint", ""), spec.get("region") or "<none>",
                ",".join(spec.get("zones") or []) or "<none>"]
    return row


def clusters(
    context: HubContext = None,
    kubeconfig: HubKubeconfig = None,
    output: Annotated[str, typer.Option("--output", "-o", help="'wide' adds endpoint, region, zones")] = "",
    context_alias: HubContextAlias = None,
    kubeconfig_alias: HubKubeconfigAlias = None,
) -> None:
    """List member clusters: NAME MODE READY VERSION AGE."""
    from tether.federation import registry

    context = pick(context, context_alias, "--context")
    kubeconfig = pick(kubeconfig, kubeconfig_alias, "--kubeconfig")

    if output not in ("", "wide"):
        raise typer.BadParameter("only -o wide is supported", param_hint="--output")

    async def run() -> list[dict[str, Any]]:
        async with KubeClient.from_kubeconfig(kubeconfig, context) as host:
            return await registry.list_clusters(host)

    try:
        items = asyncio.run(run())
    except (registry.RegistryError, KubeError, KubeconfigError) as exc:
        raise _fail(exc) from None
    if not items:
        typer.echo("No clusters joined.")
        return
    headers = ["NAME", "MODE", "READY", "VERSION", "AGE"]
    if output == "wide":
        headers += ["ENDPOINT", "REGION", "ZONES"]
    now = dt.datetime.now(dt.UTC)
    rows = [headers] + [cluster_row(c, now, output == "wide") for c in items]
    widths = [max(len(r[i]) for r in rows) for i in range(len(headers))]
    for row in rows:
        typer.echo("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def register(app: typer.Typer) -> None:
    app.command()(join)
    app.command()(unjoin)
    app.command()(clusters)
