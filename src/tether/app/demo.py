"""`tether demo`: KubeFed's quick-start flow and a Karmada one on local clusters, and what to try next.

1. Local clusters in one data dir: `hub`, an API-only hub like Karmada's control plane (it
   stores templates and policies and runs no pods), and `cluster` and `cluster1`, full clusters
   (the members).
2. `tether hub install` on `hub`; `cluster` and `cluster1` joined in push mode (the registry
   functions, as `tether join` runs them).
3. The hub's controllers run in this process for the demo's duration.
4. KubeFed: the namespace, FederatedNamespace and FederatedDeployment applied on the hub, then
   each member's result: `cluster` runs 5 replicas of nginx:1.14.0-alpine, `cluster1` 3 of
   nginx:1.17.
5. Karmada: a plain Deployment of 6 replicas and a PropagationPolicy dividing them 2:1 applied on
   the hub: `cluster` runs 4, `cluster1` 2, and the hub's own `kubectl get deploy` shows the sum,
   6/6 ready, with no pod on the hub.
6. Reach (`demo_pull`): `edge` registers itself with a bootstrap token (pull mode), its agent
   applies what the hub assigns it, and its pods are listed through the hub's cluster proxy and
   the agent's tunnel.
7. Connect (`demo_connect`): a Service of `cluster` mirrored into `cluster1` by the hub's
   `MirrorPolicy`, with the other cluster's pod addresses as endpoints, and asked over HTTP
   through the mirror's ClusterIP.
8. Bridge (`demo_bridge`): a Service of `cluster` reached by name from this machine through a
   connect session, then intercepted: requests carrying `kubernetes-route-as: demo` answered by
   an HTTP server in this process, the rest by the pods; the Service restored afterwards.

Every step is idempotent (server-side apply, join of a joined cluster), so running the demo
again repairs or confirms the same state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tether.app import clusterproxy as proxy_app
from tether.app import demo_bridge, demo_connect, demo_pull
from tether.app import demo_steps as steps
from tether.app.hub import Hub
from tether.app.hubconfig import HubConfig
from tether.federation import bootstrap, install, registry
from tether.federation.health import HealthTimers
from tether.kube import KubeClient, KubeError, NotFound
from tether.local import roles, supervisor
from tether.objects import Obj

HOST = "hub"
MEMBERS = ("cluster", "cluster1")
DEMO_CLUSTERS = (HOST, *MEMBERS, demo_pull.MEMBER)
NAMESPACE = "test-namespace"
DEPLOYMENT = "test-deployment"
PROPAGATION_WAIT_S = 90.0

# KubeFed's quick start creates the namespace on the host with `kubectl create ns test-namespace`.
HOST_NAMESPACE: Obj = steps.namespace(NAMESPACE)

# KubeFed's quick-start federatednamespace.yml, unchanged.
FEDERATED_NAMESPACE: Obj = {
    "apiVersion": "types.kubefed.io/v1beta1",
    "kind": "FederatedNamespace",
    "metadata": {"name": NAMESPACE, "namespace": NAMESPACE},
    "spec": {"placement": {"clusters": [{"name": "cluster"}, {"name": "cluster1"}]}},
}

# The quick start's FederatedDeployment. Its blog copy mis-indents `name: nginx` under `- image:`
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

# What the quick start says happens: cluster → 5 x nginx:1.14.0-alpine, cluster1 → 3 x nginx:1.17.
EXPECTED: Mapping[str, tuple[int, str]] = {"cluster": (5, "nginx:1.14.0-alpine"), "cluster1": (3, "nginx:1.17")}

# Karmada: a plain Deployment on the hub and a policy dividing its replicas by weight 2:1.
KARMADA_NAMESPACE = "karmada-demo"
KARMADA_DEPLOYMENT = "web"
KARMADA_REPLICAS = 6
KARMADA_WEIGHTS: Mapping[str, int] = {"cluster": 2, "cluster1": 1}
KARMADA_EXPECTED: Mapping[str, int] = {"cluster": 4, "cluster1": 2}
KARMADA_OBJECTS: tuple[Obj, ...] = (
    steps.namespace(KARMADA_NAMESPACE),
    steps.deployment(KARMADA_DEPLOYMENT, KARMADA_NAMESPACE, KARMADA_REPLICAS,
                     {"name": "nginx", "image": "nginx:1.17"}),
    steps.propagation_policy(KARMADA_DEPLOYMENT, KARMADA_NAMESPACE, {
        "clusterAffinity": {"clusterNames": list(MEMBERS)},
        "replicaScheduling": {
            "replicaSchedulingType": "Divided",
            "replicaDivisionPreference": "Weighted",
            "weightPreference": {"staticWeightList": [
                {"targetCluster": {"clusterNames": [name]}, "weight": weight}
                for name, weight in KARMADA_WEIGHTS.items()]}}}),
)


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
async def running_hub(kubeconfig: Path, data_dir: Path) -> AsyncIterator[None]:
    """Run the hub's controllers in this process for the block, with short health timers so
    fresh members turn Ready quickly; also its tunnel server (pull members' agents dial it) and
    its cluster proxy, each on a free port of 127.0.0.1."""
    timers = HealthTimers(period_s=1.0, failure_threshold_s=3.0, success_threshold_s=1.0,
                          grace_period_s=10.0, startup_grace_period_s=10.0, probe_timeout_s=2.0)
    config = HubConfig(kubeconfig=kubeconfig, context=HOST, health=timers, data_dir=data_dir,
                       tunnel_agent_port=0, tunnel_frontend_port=0, tunnel_bind_address="127.0.0.1")
    async with KubeClient.from_kubeconfig(kubeconfig, HOST) as client:
        hub = Hub(client, config)
        if hub.tunnel is not None:
            await hub.tunnel.start()
        proxy = await proxy_app.open_proxy(
            client, proxy_app.ProxyConfig(kubeconfig=kubeconfig, context=HOST, port=0),
            cluster_source=lambda name: hub.shared.clusters.get(None, name))
        try:
            async with steps.running(hub.run()):
                yield
        finally:
            await proxy.aclose()


# steps ---------------------------------------------------------------------------------------


def demo_hubs(layout: supervisor.Layout) -> tuple[str, ...]:
    """`hub` is API-only, unless an older demo made it a full cluster (kept data keeps its role;
    the demo works on either, the hub then also runs the Karmada template's pods)."""
    try:
        roles.choose_role(layout.clusters / HOST, roles.HUB)
    except roles.RoleError:
        return ()
    return (HOST,)


def ensure_clusters(layout: supervisor.Layout, console: Console) -> dict[str, Any]:
    state = supervisor.read_state(layout)
    if state is not None:
        running = [str(c["name"]) for c in state.get("clusters") or []]
        if not set(DEMO_CLUSTERS) <= set(running):
            raise DemoError(f"{layout.root} runs clusters {', '.join(running)} (an older demo?); stop them "
                            f"with `tether local down --data-dir {layout.root}` or pass another --data-dir")
        return state
    with console.status("starting local clusters " + ", ".join(DEMO_CLUSTERS)):
        return supervisor.start_daemon(layout, list(DEMO_CLUSTERS), hubs=demo_hubs(layout))


async def install_hub(host: KubeClient) -> int:
    steps = await install.install(host)
    return sum(1 for s in steps if s.outcome != "unchanged")


async def join_members(host: KubeClient, kubeconfig: Path) -> list[registry.JoinResult]:
    results = []
    for name in MEMBERS:
        async with KubeClient.from_kubeconfig(kubeconfig, name) as member:
            results.append(await registry.join(host, member, registry.JoinOptions(name=name)))
    return results


async def apply_kubefed(host: KubeClient) -> list[str]:
    return await steps.apply_all(host, (HOST_NAMESPACE, FEDERATED_NAMESPACE, FEDERATED_DEPLOYMENT),
                                 with_namespace=True)


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
    async def results() -> list[MemberResult]:
        return [await member_result(kubeconfig, c) for c in MEMBERS]

    return await steps.poll(results, lambda rs: all(r.matches(EXPECTED[r.cluster]) for r in rs), timeout_s)


async def apply_karmada(host: KubeClient) -> list[str]:
    return await steps.apply_all(host, KARMADA_OBJECTS)


@dataclass(frozen=True)
class KarmadaResult:
    hub_ready: int = 0  # the template's .status on the hub: the members' sum
    hub_replicas: int = 0
    hub_pods: int = 0  # pods the hub itself runs (none on an API-only hub)
    members: Mapping[str, tuple[int, int]] | None = None  # cluster -> (replicas, ready)

    @property
    def ok(self) -> bool:
        members = self.members or {}
        return (self.hub_ready == self.hub_replicas == KARMADA_REPLICAS
                and all(members.get(c) == (n, n) for c, n in KARMADA_EXPECTED.items()))


async def karmada_result(host: KubeClient, kubeconfig: Path) -> KarmadaResult:
    try:
        template = await host.get("apps/v1", "Deployment", KARMADA_DEPLOYMENT, KARMADA_NAMESPACE)
    except NotFound:
        return KarmadaResult()
    status = template.get("status") or {}
    pods = await host.list_objects("v1", "Pod", KARMADA_NAMESPACE)
    members = {}
    for cluster in MEMBERS:
        async with KubeClient.from_kubeconfig(kubeconfig, cluster) as member:
            try:
                deploy = await member.get("apps/v1", "Deployment", KARMADA_DEPLOYMENT, KARMADA_NAMESPACE)
            except NotFound:
                continue
        members[cluster] = (int((deploy.get("spec") or {}).get("replicas") or 0),
                            int((deploy.get("status") or {}).get("readyReplicas") or 0))
    return KarmadaResult(int(status.get("readyReplicas") or 0), int(status.get("replicas") or 0),
                         len(pods), members)


async def wait_karmada(host: KubeClient, kubeconfig: Path,
                       timeout_s: float = PROPAGATION_WAIT_S) -> KarmadaResult:
    return await steps.poll(lambda: karmada_result(host, kubeconfig), lambda r: r.ok, timeout_s)


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
        mode = (cluster.get("spec") or {}).get("syncMode", "")
        if join is None:
            how = "registered itself" if mode == "Pull" else "joined before"
        else:
            how = "already joined" if join.already_joined else "joined"
        table.add_row(name, (cluster.get("spec") or {}).get("apiEndpoint", ""), mode, how)
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


def print_kubefed_verdict(console: Console, results: Sequence[MemberResult]) -> None:
    if all(r.matches(EXPECTED[r.cluster]) for r in results):
        console.print("[green]as expected[/green]: cluster runs 5 x nginx:1.14.0-alpine, "
                      "cluster1 3 x nginx:1.17 (the override's add-then-remove leaves no foo annotation)")
    else:
        console.print(f"[red]propagation did not finish within {PROPAGATION_WAIT_S:.0f}s[/red]: "
                      f"`tether status federateddeployment/{DEPLOYMENT} -n {NAMESPACE}` says why")


def karmada_table(result: KarmadaResult) -> Table:
    table = Table("cluster", "ready", "as expected",
                  title=f"{KARMADA_NAMESPACE}/{KARMADA_DEPLOYMENT}: {KARMADA_REPLICAS} replicas divided 2:1")
    hub_note = ("the members' sum" if result.hub_pods == 0
                else f"this hub is a full cluster: it runs {result.hub_pods} pods itself")
    hub_ok = result.hub_ready == result.hub_replicas == KARMADA_REPLICAS
    table.add_row(f"{HOST} (template)", f"{result.hub_ready}/{result.hub_replicas} ready, {hub_note}",
                  "[green]yes[/green]" if hub_ok else f"wants {KARMADA_REPLICAS}/{KARMADA_REPLICAS}")
    for cluster, wanted in KARMADA_EXPECTED.items():
        replicas, ready = (result.members or {}).get(cluster, (0, 0))
        good = (replicas, ready) == (wanted, wanted)
        table.add_row(cluster, f"{ready}/{replicas} ready",
                      "[green]yes[/green]" if good else f"wants {wanted}/{wanted}")
    return table


def print_connect(console: Console, result: demo_connect.ConnectResult) -> None:
    where = f"{demo_connect.MIRROR_NAMESPACE}/{demo_connect.MIRROR}"
    if not result.cluster_ip:
        console.print(f"[red]no mirror {where} in cluster1 within {PROPAGATION_WAIT_S:.0f}s[/red]: "
                      "`kubectl --context hub get mirrorpolicy demo -o yaml` says why")
        return
    console.print(f"cluster1 has Service {where} (ClusterIP {result.cluster_ip}); its endpoints "
                  f"{', '.join(result.endpoints) or 'none'} are the pods of cluster's Service "
                  f"{demo_connect.NAMESPACE}/{demo_connect.SERVICE} "
                  f"({', '.join(result.source_ips) or 'none ready'})")
    if result.resolved:
        console.print(f"cluster1's DNS server ({result.dns_server}) answers {demo_connect.MIRROR_DNS_NAME} "
                      f"with {', '.join(result.resolved)}: pods in cluster1 find the mirror by name")
    else:
        console.print(f"[red]cluster1's DNS server ({result.dns_server or 'not found'}) did not answer "
                      f"{demo_connect.MIRROR_DNS_NAME}[/red]")
    if result.ok:
        console.print(f"[green]as expected[/green]: http://{demo_connect.MIRROR_DNS_NAME}:{demo_connect.PORT}/ "
                      f"in cluster1 is answered by a pod of cluster: {result.answer}")
    else:
        console.print(f"[red]the mirror did not answer within {PROPAGATION_WAIT_S:.0f}s[/red]")


def cluster_words(state: Mapping[str, Any]) -> str:
    words = []
    for entry in state.get("clusters") or []:
        name = str(entry.get("name"))
        if entry.get("role") == roles.HUB:
            words.append(f"{name} (the hub: an API server only, like Karmada's control plane; "
                         "it keeps what you apply and runs no pods)")
        else:
            words.append(name)
    return ", ".join(words)


def next_steps(layout: supervisor.Layout, data_dir: Path, propagated: bool) -> list[str]:
    lines = [
        f"export KUBECONFIG={layout.kubeconfig}",
        "kubectl config get-contexts                # hub, cluster, cluster1, edge",
        "tether clusters --context hub",
        f"tether get deployments -n {NAMESPACE} --context hub -o wide",
        f"tether describe deployment/{DEPLOYMENT} -n {NAMESPACE} --context hub -C cluster",
        f"kubectl --context hub -n {NAMESPACE} get federateddeployment {DEPLOYMENT} -o yaml",
        f"kubectl --context cluster1 -n {NAMESPACE} get deploy,pods",
        f"kubectl --context hub -n {KARMADA_NAMESPACE} get deploy,pods   # 6/6 ready: the members' sum; "
        "no pods",
        f"tether status deployment/{KARMADA_DEPLOYMENT} -n {KARMADA_NAMESPACE} --context hub",
        f"kubectl --context hub get clusters   # {demo_pull.MEMBER} is Pull: it registered itself",
        f"kubectl --context cluster1 -n {demo_connect.MIRROR_NAMESPACE} get svc,endpointslices"
        "   # the mirror of cluster's hello",
        *demo_bridge.try_lines(),
    ]
    if propagated:
        lines.append("tether hub run --context hub   # keep propagating after the demo exits")
    else:
        lines.append("tether hub run --context hub   # propagation needs the hub's controllers")
    return lines


# run -----------------------------------------------------------------------------------------


async def _demo(layout: supervisor.Layout, console: Console
                ) -> tuple[list[MemberResult], KarmadaResult, demo_pull.PullResult, demo_connect.ConnectResult,
                           demo_bridge.BridgeResult, bool]:
    kubeconfig = layout.kubeconfig
    async with KubeClient.from_kubeconfig(kubeconfig, HOST) as host:
        with console.status("installing the hub on `hub`"):
            changed = await install_hub(host)
        console.print(f"[green]hub installed[/green] on `{HOST}` ({changed} objects changed)")
        with console.status("joining cluster and cluster1 (push mode)"):
            joins = await join_members(host, kubeconfig)
        console.print(clusters_table(await registry.list_clusters(host), joins))
        async with running_hub(kubeconfig, layout.root), contextlib.AsyncExitStack() as stack:
            console.print("[green]hub controllers running[/green] in this process")
            applied = await apply_kubefed(host)
            console.print("applied on the hub (KubeFed manifests): " + ", ".join(applied))
            with console.status("waiting for each member to run its deployment"):
                results = await wait_propagated(kubeconfig)
            status = await federated_status(host)
            conditions = (status.get("status") or {}).get("conditions") or []
            for condition in conditions:
                console.print(f"FederatedDeployment {condition.get('type')}: {condition.get('status')} "
                              f"{condition.get('reason') or ''}".rstrip())
            console.print(results_table(results))
            print_kubefed_verdict(console, results)
            applied = await apply_karmada(host)
            console.print("applied on the hub (Karmada manifests): " + ", ".join(applied))
            with console.status("waiting for the members to run 4 + 2 replicas, and the hub to show their sum"):
                karmada = await wait_karmada(host, kubeconfig)
            console.print(karmada_table(karmada))
            if karmada.ok:
                console.print("[green]as expected[/green]: the hub keeps the Deployment as a template, "
                              "cluster runs 4 replicas, cluster1 2, and the hub's `kubectl get deploy` "
                              "shows their sum")
            else:
                console.print(f"[red]the Karmada deployment did not finish within "
                              f"{PROPAGATION_WAIT_S:.0f}s[/red]: `tether status deployment/"
                              f"{KARMADA_DEPLOYMENT} -n {KARMADA_NAMESPACE}` says why")
            agent = contextlib.AsyncExitStack()  # the pull agent runs until the demo ends
            await stack.enter_async_context(agent)
            pull = await reach_step(host, layout, console, agent)
            applied = await demo_connect.apply_connect(host, kubeconfig)
            console.print("Connect: a Service in cluster, mirrored into cluster1 by the hub: "
                          + ", ".join(applied))
            with console.status(f"waiting for {demo_connect.MIRROR} in cluster1 to point at "
                                "cluster's pods"):
                connect = await demo_connect.wait_connect(kubeconfig, PROPAGATION_WAIT_S)
            print_connect(console, connect)
            bridged = await demo_bridge.bridge_step(kubeconfig, layout.root, console, PROPAGATION_WAIT_S)
    return results, karmada, pull, connect, bridged, True


async def reach_step(host: KubeClient, layout: supervisor.Layout, console: Console,
                     agent: contextlib.AsyncExitStack) -> demo_pull.PullResult:
    member = demo_pull.MEMBER
    console.print(f"Reach: `{member}` stands for a cluster behind NAT that nothing can dial into; "
                  "it registers itself with the hub (pull mode)")
    with console.status(f"registering {member} with a bootstrap token"):
        registered = await demo_pull.register(host, layout.kubeconfig, layout.root)
    agent_address, proxy_url = await demo_pull.published_tunnel(host)
    if not registered.fresh:
        await demo_pull.point_at_tunnel(host, proxy_url)
    console.print(f"{member} {'registered' if registered.fresh else 'was registered by an earlier run'}; "
                  f"its agent runs next to it, applies what the hub assigns it, and keeps a tunnel "
                  f"open to the hub ({agent_address})")
    await agent.enter_async_context(demo_pull.running_agent(registered, agent_address))
    applied = await demo_pull.apply_objects(host)
    console.print(f"applied on the hub (for {member} only): " + ", ".join(applied))
    with console.status(f"waiting for {member}'s pods, listed through the hub's cluster proxy"):
        result = await demo_pull.wait_pull(host, layout.root, PROPAGATION_WAIT_S)
    print_pull(console, result)
    return result


def print_pull(console: Console, result: demo_pull.PullResult) -> None:
    member = demo_pull.MEMBER
    console.print(f"Cluster {member}: mode {result.mode or '?'}, Ready {result.ready or '?'}")
    if result.ok:
        console.print(f"[green]as expected[/green]: {len(result.pods)} pods of "
                      f"{demo_pull.NAMESPACE}/{demo_pull.DEPLOYMENT} run in {member} "
                      f"({', '.join(result.pods)}), listed through the hub's cluster proxy "
                      f"({result.proxy_server}) and {member}'s tunnel")
    else:
        console.print(f"[red]{member} did not get there within {PROPAGATION_WAIT_S:.0f}s[/red]: "
                      f"`tether clusters --context hub` and `tether status deployment/"
                      f"{demo_pull.DEPLOYMENT} -n {demo_pull.NAMESPACE} --context hub` say why")


def run(data_dir: Path, console: Console) -> int:
    layout = supervisor.Layout(data_dir)
    # Controllers log retries (a member still starting, a tunnel not yet up) as warnings: into
    # a file, so the demo's own lines stay readable; the closing message says where.
    data_dir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(filename=data_dir / "demo.log", level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    try:
        state = ensure_clusters(layout, console)
    except (DemoError, supervisor.LocalError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1
    console.print(f"[green]local clusters running[/green]: {cluster_words(state)} (data in {data_dir})")
    try:
        results, karmada, pull, connect, bridged, propagated = asyncio.run(_demo(layout, console))
    except (KubeError, registry.RegistryError, bootstrap.BootstrapError, TimeoutError,
            proxy_app.ProxySetupError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        console.print(f"the demo is safe to run again; logs: {data_dir / 'demo.log'}, {layout.log}")
        return 1
    kubefed_ok = all(r.matches(EXPECTED[r.cluster]) for r in results)
    console.print("\nTry it:")
    for line in next_steps(layout, data_dir, propagated):
        console.print(f"  {line}", soft_wrap=True, highlight=False)
    console.print(f"Stop with: tether local down --data-dir {data_dir}   (this run's log: {data_dir / 'demo.log'})",
                  soft_wrap=True, highlight=False)
    return 0 if not propagated or (kubefed_ok and karmada.ok and pull.ok and connect.ok and bridged.ok) else 1
