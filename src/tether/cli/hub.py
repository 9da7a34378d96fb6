"""`tether hub`: set up a host cluster as the federation hub."""

from __future__ import annotations

import asyncio
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
