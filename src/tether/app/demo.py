"""`tether demo`: local clusters, a sample app applied to each, and what to try next."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tether.kube import KubeClient, KubeError
from tether.local import supervisor

Obj = dict[str, Any]
DEMO_CLUSTERS = ("cluster1", "cluster2")
NAMESPACE = "demo"


def sample_app(cluster: str) -> list[Obj]:
    labels = {"app": "web"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web-config", "namespace": NAMESPACE},
         "data": {"greeting": f"hello from {cluster}"}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                                             "ports": [{"containerPort": 80}]}]},
                },
            },
        },
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": NAMESPACE},
         "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 80}]}},
    ]


async def _apply_all(kubeconfig: Path, console: Console) -> Table:
    table = Table("cluster", "object", "resourceVersion", "uid")
    for cluster in DEMO_CLUSTERS:
        async with KubeClient.from_kubeconfig(kubeconfig, cluster) as client:
            for obj in sample_app(cluster):
                applied = await client.apply(obj, field_manager="tether-demo")
                meta = applied["metadata"]
                table.add_row(cluster, f"{obj['kind'].lower()}/{meta['name']}", meta["resourceVersion"],
                              meta["uid"][:8])
    return table


def run(data_dir: Path, console: Console) -> int:
    layout = supervisor.Layout(data_dir)
    state = supervisor.read_state(layout)
    if state is None:
        with console.status("starting local clusters " + ", ".join(DEMO_CLUSTERS)):
            state = supervisor.start_daemon(layout, list(DEMO_CLUSTERS))
    console.print(f"[green]local clusters running[/green] ({len(state['clusters'])}), data in {data_dir}")
    try:
        table = asyncio.run(_apply_all(layout.kubeconfig, console))
    except KubeError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1
    console.print("applied the sample app (server-side apply, field manager tether-demo):")
    console.print(table)
    console.print("\nTry it:")
    console.print(f"  export KUBECONFIG={layout.kubeconfig}")
    console.print(f"  kubectl --context cluster2 -n {NAMESPACE} get deploy,svc,cm -o wide")
    console.print(f"  kubectl --context cluster1 -n {NAMESPACE} get cm web-config -o yaml")
    console.print(f"Stop with: tether local down --data-dir {data_dir}")
    return 0
