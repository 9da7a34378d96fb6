"""`tether mcs`: the Multi-Cluster Services API (ServiceExport/ServiceImport) without a hub."""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated

import typer

from tether.cli.options import Context, Kubeconfig

app = typer.Typer(help="The MCS API (multicluster.x-k8s.io) across clusters: CRDs and the controller.",
                  no_args_is_help=True)


@app.command()
def install(
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Install the ServiceExport, ServiceImport (v1alpha1 and v1beta1) and ClusterProperty CRDs."""
    from tether.app import mcs as mcs_app
    from tether.kube import KubeError
    from tether.kube.config import KubeconfigError

    try:
        raise typer.Exit(mcs_app.run_install(kubeconfig, context, typer.echo))
    except (KubeError, KubeconfigError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


@app.command()
def run(
    context: Annotated[list[str], typer.Option("--context", help="A member of the clusterset: its context in "
                                               "the kubeconfig (repeat for each)")],
    kubeconfig: Kubeconfig = None,
    clusterset: Annotated[str, typer.Option("--clusterset", help="The clusterset's name (ClusterProperty "
                                            "clusterset.k8s.io)")] = "clusterset",
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Turn ServiceExports in any member into ServiceImports (and their slices) in every member.
    Inside a hub, `tether hub run --clusterset NAME` does the same for the registered clusters."""
    from tether.app import mcs as mcs_app
    from tether.kube import KubeError
    from tether.kube.config import KubeconfigError

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if len(set(context)) != len(context):
        raise typer.BadParameter("a context is named twice", param_hint="--context")
    try:
        options = mcs_app.McsOptions(tuple(context), kubeconfig, clusterset)
        raise typer.Exit(asyncio.run(mcs_app.serve(options, announce=lambda line: typer.echo(line, err=True))))
    except (KubeError, KubeconfigError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
