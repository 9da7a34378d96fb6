"""`tether demo`: KubeFed's quick-start flow on local clusters, and what to try next.

1. Local clusters `hub` (the host), `cluster` and `cluster1` (members), in one data dir.
2. `tether hub install` on `hub`; `cluster` and `cluster1` joined in push mode (the registry
   functions, as `tether join` runs them).
3. The hub's controllers run in this process for the demo's duration.
4. The namespace, FederatedNamespace and FederatedDeployment applied on the host, then
   each member's result: `cluster` runs 5 replicas of nginx:1.14.0-alpine, `cluster1` 3 of
   nginx:1.17.

Every step is idempotent (server-side apply, join of a joined cluster), so running the demo
again repairs or confirms the same state.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tether.app.hub import Hub
from tether.app.hubconfig import HubConfig
from tether.federation import install, registry
from tether.federation.health import HealthTimers
from tether.kube import KubeClient, KubeError
from tether.local import supervisor
from tether.objects import Obj

HOST = "hub"
MEMBERS = ("cluster", "cluster1")
DEMO_CLUSTERS = (HOST, *MEMBERS)
NAMESPACE = "test-namespace"
DEPLOYMENT = "test-deployment"
FIELD_MANAGER = "tether-demo"
PROPAGATION_WAIT_S = 90.0

# The seed (002_…) creates the namespace on the host with `kubectl create ns test-namespace`.
HOST_NAMESPACE: Obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}

# The seed's federatednamespace.yml, unchanged.
FEDERATED_NAMESPACE: Obj = {
    "apiVersion": "types.kubefed.io/v1beta1",
    "kind": "FederatedNamespace",
    "metadata": {"name": NAMESPACE, "namespace": NAMESPACE},
    "spec": {"placement": {"clusters": [{"name": "cluster"}, {"name": "cluster1"}]}},
}

# The seed's FederatedDeployment. Its blog copy mis-indents `name: nginx` under `- image:`
# (not valid YAML); this is the manifest it means, otherwise unchanged.
FEDERATED_DEPLOYMENT: Obj = {
    "apiVersion": "types.kubefed.io/v1beta1",
    "kind": "FederatedDeployment",
    "metadata": {"name": DEPLOYMENT, "namespace": NAMESPACE},
    "spec": {
        "template": {
            "metadata": {"labels": {"app": "nginx"}},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "nginx"}},
                "template": {
                    "metadata": {"labels": {"app": "nginx"}},
                    "spec": {"containers": [{"image": "nginx:1.17", "name": "nginx"}]},
                },
            },
        },
        "placement": {"clusters": [{"name": "cluster"}, {"name": "cluster1"}]},
        "overrides": [{
            "clusterName": "cluster",
            "clusterOverrides": [
                {"path": "/spec/replicas", "value": 5},
                {"path": "/spec/template/spec/containers/0/image", "value": "nginx:1.14.0-alpine"},
                {"path": "/metadata/annotations", "op": "add", "value": {"foo": "bar"}},
                {"path": "/metadata/annotations/foo", "op": "remove"},
            ],
        }],
    },
}

# What the seed says happens: cluster → 5 x nginx:1.14.0-alpine, cluster1 → 3 x nginx:1.17.
EXPECTED: Mapping[str, tuple[int, str]] = {"cluster": (5, "nginx:1.14.0-alpine"), "cluster1": (3, "nginx:1.17")}


class DemoError(Exception):
    """A demo step that failed, with what to do about it."""


@dataclass(frozen=True)
class MemberResult:
    cluster: str
    namespace: bool = False
    replicas: int | None = None
    ready: int = 0
    image: str = ""
    annotations: Mapping[str, str] | None = None
    managed: bool = False
    error: str = ""

    def matches(self, expected: tuple[int, str]) -> bool:
        return (self.replicas, self.image) == expected and self.ready == expected[0]


# hub ----------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def running_hub(kubeconfig: Path) -> AsyncIterator[None]:
    """Run the hub's controllers in this process for the block, with short health timers so
    fresh members turn Ready quickly."""
    timers = HealthTimers(period_s=1.0, failure_threshold_s=3.0, success_threshold_s=1.0,
                          grace_period_s=10.0, startup_grace_period_s=10.0, probe_timeout_s=2.0)
    async with KubeClient.from_kubeconfig(kubeconfig, HOST) as client:
        hub = Hub(client, HubConfig(kubeconfig=kubeconfig, context=HOST, health=timers))
        task = asyncio.create_task(hub.run())
        try:
            await asyncio.sleep(0.1)
            if task.done():
                task.result()  # raise what stopped it right away
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


# steps ---------------------------------------------------------------------------------------


def ensure_clusters(layout: supervisor.Layout, console: Console) -> dict[str, Any]:
    state = supervisor.read_state(layout)
    if state is not None:
        running = [str(c["name"]) for c in state.get("clusters") or []]
        if not set(DEMO_CLUSTERS) <= set(running):
            raise DemoError(f"{layout.root} runs clusters {', '.join(running)} (an older demo?); stop them "
                            f"with `tether local down --data-dir {layout.root}` or pass another --data-dir")
        return state
    with console.status("starting local clusters " + ", ".join(DEMO_CLUSTERS)):
        return supervisor.start_daemon(layout, list(DEMO_CLUSTERS))


async def install_hub(host: KubeClient) -> int:
    steps = await install.install(host)
    return sum(1 for s in steps if s.outcome != "unchanged")


async def join_members(host: KubeClient, kubeconfig: Path) -> list[registry.JoinResult]:
    results = []
    for name in MEMBERS:
        async with KubeClient.from_kubeconfig(kubeconfig, name) as member:
            results.append(await registry.join(host, member, registry.JoinOptions(name=name)))
    return results


async def apply_seed(host: KubeClient) -> list[str]:
    applied = []
    for obj in (HOST_NAMESPACE, FEDERATED_NAMESPACE, FEDERATED_DEPLOYMENT):
        out = await host.apply(obj, field_manager=FIELD_MANAGER)
        meta = out["metadata"]
        where = f"{meta['namespace']}/" if meta.get("namespace") else ""
        applied.append(f"{obj['kind'].lower()}/{where}{meta['name']}")
    return applied


async def member_result(kubeconfig: Path, cluster: str) -> MemberResult:
    async with KubeClient.from_kubeconfig(kubeconfig, cluster) as member:
        try:
            await member.get("v1", "Namespace", NAMESPACE)
        except KubeError as exc:
            if exc.code == 404:
                return MemberResult(cluster)
            return MemberResult(cluster, error=exc.message)
        try:
            deploy = await member.get("apps/v1", "Deployment", DEPLOYMENT, NAMESPACE)
        except KubeError as exc:
            if exc.code == 404:
                return MemberResult(cluster, namespace=True)
            return MemberResult(cluster, namespace=True, error=exc.message)
    spec, status, meta = deploy.get("spec") or {}, deploy.get("status") or {}, deploy.get("metadata") or {}
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or [{}]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if not k.startswith(("deployment.kubernetes.io/", "tether.io/", "work.tether.io/"))}
    labels = meta.get("labels") or {}
    return MemberResult(cluster, True, spec.get("replicas"), int(status.get("readyReplicas") or 0),
                        str(containers[0].get("image", "")), annotations,
                        labels.get("kubefed.io/managed") == "true"
                        or labels.get("app.kubernetes.io/managed-by") == "tether")


async def wait_propagated(kubeconfig: Path, timeout_s: float = PROPAGATION_WAIT_S) -> list[MemberResult]:
    deadline = time.monotonic() + timeout_s
    while True:
        results = [await member_result(kubeconfig, c) for c in MEMBERS]
        if all(r.matches(EXPECTED[r.cluster]) for r in results) or time.monotonic() >= deadline:
            return results
        await asyncio.sleep(0.5)


async def federated_status(host: KubeClient) -> Obj:
    try:
        return await host.get("types.kubefed.io/v1beta1", "FederatedDeployment", DEPLOYMENT, NAMESPACE)
    except KubeError:
        return {}


# output --------------------------------------------------------------------------------------


def clusters_table(clusters: Sequence[Mapping[str, Any]], joins: Sequence[registry.JoinResult]) -> Table:
    table = Table("member", "endpoint", "mode", "join", title="joined to hub")
    by_name = {j.name: j for j in joins}
    for cluster in clusters:
        name = cluster["metadata"]["name"]
        join = by_name.get(name)
        table.add_row(name, (cluster.get("spec") or {}).get("apiEndpoint", ""),
                      (cluster.get("spec") or {}).get("syncMode", ""),
                      "already joined" if join is not None and join.already_joined else "joined")
    return table


def results_table(results: Sequence[MemberResult]) -> Table:
    table = Table("cluster", "namespace", "ready", "image", "annotations", "as expected",
                  title=f"{NAMESPACE}/{DEPLOYMENT} in each member")
    for r in results:
        replicas, image = EXPECTED[r.cluster]
        if r.error:
            deployment = f"[red]{r.error}[/red]"
        elif r.replicas is None:
            deployment = "[yellow]not there[/yellow]"
        else:
            colour = "green" if r.matches((replicas, image)) else "yellow"
            deployment = f"[{colour}]{r.ready}/{r.replicas} ready[/{colour}]"
        annotations = ", ".join(f"{k}={v}" for k, v in (r.annotations or {}).items()) or "none"
        table.add_row(r.cluster, "[green]yes[/green]" if r.namespace else "[yellow]no[/yellow]", deployment,
                      r.image or "-", annotations if r.replicas is not None else "-",
                      "[green]yes[/green]" if r.matches((replicas, image)) else f"wants {replicas} x {image}")
    return table


def next_steps(layout: supervisor.Layout, data_dir: Path, propagated: bool) -> list[str]:
    lines = [
        f"export KUBECONFIG={layout.kubeconfig}",
        "kubectl config get-contexts                # hub, cluster, cluster1",
        "tether clusters --context hub",
        f"tether get deployments -n {NAMESPACE} --context hub -o wide",
        f"tether describe deployment/{DEPLOYMENT} -n {NAMESPACE} --context hub -C cluster",
        f"kubectl --context hub -n {NAMESPACE} get federateddeployment {DEPLOYMENT} -o yaml",
        f"kubectl --context cluster1 -n {NAMESPACE} get deploy,pods",
    ]
    if propagated:
        lines.append("tether hub run --context hub   # keep propagating after the demo exits")
    else:
        lines.append("tether hub run --context hub   # propagation needs the hub's controllers")
    return lines


# run -----------------------------------------------------------------------------------------


async def _demo(layout: supervisor.Layout, console: Console) -> tuple[list[MemberResult], bool]:
    kubeconfig = layout.kubeconfig
    async with KubeClient.from_kubeconfig(kubeconfig, HOST) as host:
        with console.status("installing the hub on `hub`"):
            changed = await install_hub(host)
        console.print(f"[green]hub installed[/green] on `{HOST}` ({changed} objects changed)")
        with console.status("joining cluster and cluster1 (push mode)"):
            joins = await join_members(host, kubeconfig)
        console.print(clusters_table(await registry.list_clusters(host), joins))
        async with running_hub(kubeconfig):
            console.print("[green]hub controllers running[/green] in this process")
            applied = await apply_seed(host)
            console.print("applied on the hub (KubeFed manifests): " + ", ".join(applied))
            with console.status("waiting for each member to run its deployment"):
                results = await wait_propagated(kubeconfig)
            status = await federated_status(host)
    conditions = (status.get("status") or {}).get("conditions") or []
    for condition in conditions:
        console.print(f"FederatedDeployment {condition.get('type')}: {condition.get('status')} "
                      f"{condition.get('reason') or ''}".rstrip())
    return results, True


def run(data_dir: Path, console: Console) -> int:
    layout = supervisor.Layout(data_dir)
    try:
        state = ensure_clusters(layout, console)
    except (DemoError, supervisor.LocalError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1
    console.print(f"[green]local clusters running[/green]: "
                  f"{', '.join(str(c['name']) for c in state['clusters'])} (data in {data_dir})")
    try:
        results, propagated = asyncio.run(_demo(layout, console))
    except (KubeError, registry.RegistryError, TimeoutError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        console.print(f"the demo is safe to run again; logs: {layout.log}")
        return 1
    console.print(results_table(results))
    if propagated:
        ok = all(r.matches(EXPECTED[r.cluster]) for r in results)
        if ok:
            console.print("[green]as expected[/green]: cluster runs 5 x nginx:1.14.0-alpine, "
                          "cluster1 3 x nginx:1.17 (the override's add-then-remove leaves no foo annotation)")
        else:
            console.print(f"[red]propagation did not finish within {PROPAGATION_WAIT_S:.0f}s[/red]: "
                          f"`tether status federateddeployment/{DEPLOYMENT} -n {NAMESPACE}` says why")
    console.print("\nTry it:")
    for line in next_steps(layout, data_dir, propagated):
        console.print(f"  {line}", soft_wrap=True, highlight=False)
    console.print(f"Stop with: tether local down --data-dir {data_dir}", soft_wrap=True, highlight=False)
    return 0 if not propagated or all(r.matches(EXPECTED[r.cluster]) for r in results) else 1
