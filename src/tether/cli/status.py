"""`tether status KIND/NAME`: per cluster, applied or not, why, observed status, latency."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console

from tether.cli.options import HubContext, HubContextAlias, HubKubeconfig, HubKubeconfigAlias, pick
from tether.kube import KubeClient, KubeError
from tether.kube.config import KubeconfigError

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command(name="status")(status)


def status(
    target: Annotated[str, typer.Argument(help="KIND/NAME, e.g. federateddeployment/web or deploy/web")],
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Namespace of the object")] = "default",
    context: HubContext = None,
    kubeconfig: HubKubeconfig = None,
    context_alias: HubContextAlias = None,
    kubeconfig_alias: HubKubeconfigAlias = None,
) -> None:
    """Show where an object was propagated: per cluster applied or not, why, the member's
    observed status and how long propagation took."""
    from tether.federation import report as fed_report

    context = pick(context, context_alias, "--context")
    kubeconfig = pick(kubeconfig, kubeconfig_alias, "--kubeconfig")
    kind, sep, name = target.partition("/")
    if not sep or not kind or not name:
        raise typer.BadParameter("expected KIND/NAME", param_hint="TARGET")

    async def run() -> fed_report.Report:
        async with KubeClient.from_kubeconfig(kubeconfig, context) as host:
            return await fed_report.propagation_report(host, kind, name, namespace)

    try:
        result = asyncio.run(run())
    except (KubeError, KubeconfigError) as exc:
        err_console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    ref = result.source
    where = f"{ref.namespace}/" if ref.namespace else ""
    typer.echo(f"{ref.kind} {where}{ref.name}")
    if result.condition is not None:
        cond = result.condition
        line = f"{cond.get('type')}: {cond.get('status')}"
        if cond.get("reason"):
            line += f" ({cond['reason']})"
        if cond.get("message"):
            line += f" - {cond['message']}"
        typer.echo(line)
    if not result.rows:
        typer.echo("not propagated to any cluster")
        return
    rows = [("CLUSTER", "APPLIED", "REASON", "OBSERVED", "LATENCY", "MESSAGE")]
    for row in result.rows:
        applied = "pending" if row.applied is None else ("yes" if row.applied else "no")
        latency = f"{row.latency_s:.2f}s" if row.latency_s is not None else "-"
        rows.append((row.cluster, applied, row.reason or "-", row.observed, latency,
                     row.message if row.applied is not True else ""))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        typer.echo("  ".join(r[i].ljust(widths[i]) for i in range(5)) + "  " + r[5])
