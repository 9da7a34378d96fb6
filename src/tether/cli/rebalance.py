"""`tether rebalance KIND/NAME...`: Karmada's WorkloadRebalancer as a command."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer
from rich.console import Console

from tether.cli.options import HubContext, HubContextAlias, HubKubeconfig, HubKubeconfigAlias, pick
from tether.kube import KubeClient, KubeError
from tether.kube.config import KubeconfigError

err_console = Console(stderr=True, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command(name="rebalance")(rebalance)


def rebalance(
    targets: Annotated[list[str], typer.Argument(help="KIND/NAME of Karmada resource templates, "
                                                      "e.g. deploy/web")],
    namespace: Annotated[str, typer.Option("--namespace", "-n",
                                           help="Namespace of the templates")] = "default",
    context: HubContext = None,
    kubeconfig: HubKubeconfig = None,
    name: Annotated[str, typer.Option("--name", help="Name of the WorkloadRebalancer "
                                      "[default: generated]")] = "",
    ttl: Annotated[int, typer.Option("--ttl", help="Seconds the finished WorkloadRebalancer "
                                     "is kept")] = 300,
    context_alias: HubContextAlias = None,
    kubeconfig_alias: HubKubeconfigAlias = None,
) -> None:
    """Schedule templates afresh: Divided replicas are divided again over today's clusters (a
    cluster that came back gets its share again). Creates a WorkloadRebalancer and waits for
    the hub (`tether hub run`) to handle it."""
    from tether.federation.failover_controllers import rebalance as run_rebalance
    from tether.federation.report import resolve_kind

    context = pick(context, context_alias, "--context")
    kubeconfig = pick(kubeconfig, kubeconfig_alias, "--kubeconfig")
    parsed = []
    for target in targets:
        kind, sep, obj_name = target.partition("/")
        if not sep or not kind or not obj_name:
            raise typer.BadParameter(f"{target!r}: expected KIND/NAME", param_hint="TARGETS")
        parsed.append((kind, obj_name))

    async def run() -> Any:
        async with KubeClient.from_kubeconfig(kubeconfig, context) as host:
            workloads = []
            for kind, obj_name in parsed:
                api_version, full_kind, namespaced = await resolve_kind(host, kind)
                ref = {"apiVersion": api_version, "kind": full_kind, "name": obj_name}
                if namespaced:
                    ref["namespace"] = namespace
                workloads.append(ref)
            return await run_rebalance(host, workloads, name=name, ttl_s=ttl)

    try:
        done = asyncio.run(run())
    except (KubeError, KubeconfigError, TimeoutError, ValueError) as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    failed = False
    for entry in (done.get("status") or {}).get("observedWorkloads") or []:
        ref = entry.get("workload") or {}
        where = f"{ref.get('namespace')}/" if ref.get("namespace") else ""
        line = f"{ref.get('kind')} {where}{ref.get('name')}: {entry.get('result')}"
        if entry.get("reason"):
            line += f" ({entry['reason']})"
        failed = failed or entry.get("result") != "Successful"
        typer.echo(line)
    raise typer.Exit(1 if failed else 0)
