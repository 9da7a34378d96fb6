"""`tether whoami` (hidden): who this process is to a cluster, from a kubeconfig or, in a pod,
from its ServiceAccount (`--in-cluster`); a check that in-cluster credentials work."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import typer

from tether.cli.options import Context, Kubeconfig
from tether.kube import KubeClient, KubeError, in_cluster, load_kubeconfig
from tether.kube.config import KubeconfigError


def register(app: typer.Typer) -> None:
    app.command(name="whoami", hidden=True)(whoami)


def whoami(
    cluster: Annotated[bool, typer.Option("--in-cluster", help="Use the pod's ServiceAccount")] = False,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
    pods: Annotated[bool, typer.Option("--pods", help="Also list the pods of the namespace")] = False,
) -> None:
    """Print the server, namespace and user the credentials stand for."""

    async def run() -> tuple[str, str, str, list[str]]:
        credentials = in_cluster() if cluster else load_kubeconfig(kubeconfig, context)
        async with KubeClient(credentials) as client:
            review: dict[str, Any] = await client.create(
                {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
            user = str(((review.get("status") or {}).get("userInfo") or {}).get("username", ""))
            names: list[str] = []
            if pods:
                listed = await client.list_objects("v1", "Pod", credentials.namespace)
                names = [str(p["metadata"]["name"]) for p in listed]
            return credentials.server, credentials.namespace, user, names

    try:
        server, namespace, user, names = asyncio.run(run())
    except (KubeError, KubeconfigError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"server: {server}\nnamespace: {namespace}\nuser: {user}")
    for name in names:
        typer.echo(f"pod: {name}")
