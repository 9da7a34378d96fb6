"""`tether local`: embedded Kubernetes-API-compatible clusters on this machine."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tether.cli.options import DataDir
from tether.kube.config import default_kubeconfig_path
from tether.local import kubeconfig, netns, network, roles, supervisor
from tether.local.pki import ClusterPki, ensure_cluster_pki
from tether.local.supervisor import DEFAULT_UNAUTHENTICATED

app = typer.Typer(help="Embedded local clusters: the default target of `tether demo` and the tests.",
                  no_args_is_help=True)
console = Console()

def _layout(data_dir: Path | None) -> supervisor.Layout:
    """The clusters' files sit at the root of tether's state (`--data-dir`)."""
    return supervisor.Layout(data_dir.expanduser().resolve() if data_dir else
                             supervisor.default_data_dir().expanduser().resolve())


def _pki(layout: supervisor.Layout, name: str) -> ClusterPki:
    return ensure_cluster_pki(layout.clusters / name / "pki", name)


def _print_usage(layout: supervisor.Layout, state: dict[str, object]) -> None:
    clusters = state.get("clusters") or []
    assert isinstance(clusters, list)
    table = Table("cluster", "role", "server", "context")
    for entry in clusters:
        table.add_row(entry["name"], _role_of(entry), entry["server"], entry["name"])
    console.print(table)
    console.print(f"kubeconfig: [bold]{layout.kubeconfig}[/bold]")
    console.print(f"  export KUBECONFIG={layout.kubeconfig}")
    first = clusters[0]["name"] if clusters else "cluster1"
    console.print(f"  kubectl --context {first} get namespaces")


@app.command()
def up(
    clusters: Annotated[int | None, typer.Option("--clusters", "-n", min=1, max=16,
                                                 help="How many clusters [default: 1, or those kept in --data-dir]")] = None,
    name: Annotated[list[str] | None, typer.Option("--name", help="Cluster names (repeat); overrides --clusters")] = None,
    data_dir: DataDir = None,
    foreground: Annotated[bool, typer.Option("--foreground", help="Serve in this process until Ctrl-C")] = False,
    nodes: Annotated[int, typer.Option("--nodes", min=1, max=250, help="Nodes per cluster")] = 1,
    compact_keep: Annotated[int, typer.Option(help="Revisions of history kept for watches", min=10)] = 50_000,
    netns: Annotated[bool | None, typer.Option(
        "--netns/--no-netns",
        help="Root only: each node a network namespace, pod and service addresses private to the "
             "cluster, no route between clusters [default: the mode kept in --data-dir, else no]")] = None,
    isolate_api: Annotated[list[str] | None, typer.Option(
        "--isolate-api",
        help="With --netns: serve this cluster's API only inside its own network (repeat); only its "
             "nodes and pods reach it, as for a member behind NAT")] = None,
    max_unauthenticated_connections: Annotated[int, typer.Option(
        min=1, help="Per API server and client address: connections that have not yet sent valid "
                    "credentials; more are refused at accept")] = DEFAULT_UNAUTHENTICATED,
    role: Annotated[str | None, typer.Option(
        "--role", metavar="cluster|hub",
        help="Role of the clusters started: `cluster` (nodes, pods, controllers) or `hub`, an API "
             "server only, like Karmada's control plane [default: the role kept in --data-dir, "
             "else cluster; a lone hub is named `hub`]")] = None,
    api_only: Annotated[bool, typer.Option("--api-only", help="Same as --role hub")] = False,
    hub: Annotated[list[str] | None, typer.Option(
        "--hub", help="Also start an API-only hub with this name (repeat), next to the clusters "
                      "--clusters or --name choose")] = None,
) -> None:
    """Start local clusters (kept state is reused: `down` then `up` loses nothing)."""
    layout = _layout(data_dir)
    role = _role_option(role, api_only)
    hubs = tuple(hub or ())
    names = supervisor.choose_names(layout, clusters, list(name or []), hubs, role)
    _check_roles(layout, names, hubs, role)
    unknown = set(isolate_api or ()) - set(names)
    if unknown:
        raise typer.BadParameter(f"names no cluster being started: {', '.join(sorted(unknown))}",
                                 param_hint="--isolate-api")
    for cluster_name in names:
        if not cluster_name or cluster_name != cluster_name.lower() or "/" in cluster_name:
            raise typer.BadParameter(f"cluster name {cluster_name!r} must be lower-case, without '/'", param_hint="--name")
    _check_network_mode(layout, names, netns)
    if foreground:
        logging.basicConfig(level=os.environ.get("TETHER_LOG_LEVEL", "INFO"),
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        asyncio.run(supervisor.serve(layout, names, compact_keep=compact_keep, nodes=nodes, netns=netns,
                                     isolate_api=tuple(isolate_api or ()),
                                     max_unauthenticated=max_unauthenticated_connections,
                                     hubs=hubs, role=role))
        return
    running = supervisor.read_state(layout)
    if running is not None:
        console.print("[yellow]local clusters are already running[/yellow] (stop them with `tether local down`)")
        _print_usage(layout, running)
        return
    with console.status(f"starting {len(names)} local cluster(s): {', '.join(names)}") as status:
        ready: list[str] = []

        def progress(line: str) -> None:  # "cluster1 serving on https://127.0.0.1:PORT"
            ready.append(line.split(" ", 1)[0])
            console.print(f"  [green]✓[/green] {line}")
            status.update(f"started {len(ready)}/{len(names)} local cluster(s); waiting for the rest")

        try:
            state = supervisor.start_daemon(layout, names, nodes=nodes, compact_keep=compact_keep,
                                            netns=netns, progress=progress,
                                            isolate_api=tuple(isolate_api or ()),
                                            max_unauthenticated=max_unauthenticated_connections,
                                            hubs=hubs, role=role)
        except supervisor.LocalError as exc:
            console.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(1) from None
    console.print(f"[green]started[/green] {len(names)} local cluster(s)")
    _print_usage(layout, state)


def _role_option(role: str | None, api_only: bool) -> str | None:
    if role is not None and role not in roles.ROLES:
        raise typer.BadParameter(f"{role!r} is not one of {', '.join(roles.ROLES)}", param_hint="--role")
    if api_only and role == roles.CLUSTER:
        raise typer.BadParameter("--api-only means --role hub", param_hint="--role")
    return roles.HUB if api_only else role


def _check_roles(layout: supervisor.Layout, names: list[str], hubs: tuple[str, ...], role: str | None) -> None:
    """Fail early, with the fix, when a kept cluster is asked for the other role."""
    try:
        roles.resolve(layout.clusters, roles.wanted_roles(names, hubs, role))
    except roles.RoleError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None


def _role_of(entry: dict[str, str]) -> str:
    role = entry.get("role") or roles.persisted_role(Path(entry.get("dataDir", ""))) or roles.CLUSTER
    return "hub (API only)" if role == roles.HUB else role


def _check_network_mode(layout: supervisor.Layout, names: list[str], netns_flag: bool | None) -> None:
    """Fail early, with the fix, when the clusters cannot start in the mode asked for or kept."""
    wants_netns = False
    for cluster_name in names:
        try:
            mode = network.choose_mode(layout.clusters / cluster_name, netns_flag)
        except network.NetworkError as exc:
            kept = network.persisted_mode(layout.clusters / cluster_name)
            message = mode_conflict(layout.root, cluster_name, kept) if kept else str(exc)
            console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        wants_netns = wants_netns or mode == network.NETNS
    if wants_netns and hasattr(os, "geteuid") and os.geteuid() != 0:
        console.print(f"[red]error:[/red] {NEEDS_ROOT}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    reason = netns.unavailable_reason() if wants_netns else None
    if reason is not None:
        console.print(f"[red]error:[/red] {reason}", highlight=False)
        raise typer.Exit(2)


NEEDS_ROOT = ("--netns creates network namespaces and needs root: run it as root, e.g. "
              "`sudo env \"PATH=$PATH\" tether local up --netns` (sudo's own PATH does not hold this "
              "virtualenv), or leave out --netns for the rootless 127.0.0.0/8 address plan")


def mode_conflict(root: Path, cluster: str, kept: str) -> str:
    """Why a kept cluster cannot change its network mode, and the three ways on."""
    made = "with --netns" if kept == network.NETNS else "rootless (without --netns)"
    same = "tether local up" + (" --netns" if kept == network.NETNS else "") + f" --data-dir {root}"
    other = "" if kept == network.NETNS else " --netns"
    return (f"cluster {cluster} in {root} was made {made}; its Services and pods hold addresses "
            f"of that mode, so it cannot change mode. Either\n"
            f"  start it as it was:                 {same}\n"
            f"  use a data dir of its own:          tether local up{other} --data-dir {root}-{'netns' if other else 'rootless'}\n"
            f"  or drop its state and start afresh: rm -r {root / 'clusters' / cluster}")


@app.command()
def down(data_dir: DataDir = None) -> None:
    """Stop the local clusters; their state stays in --data-dir for the next `up`."""
    layout = _layout(data_dir)
    if supervisor.stop_daemon(layout):
        console.print("[green]stopped[/green] local clusters (state kept in " f"{layout.root})")
    else:
        console.print("no local clusters are running")
        supervisor.remove_leftovers(layout)  # netns mode: namespaces of a daemon that crashed


@app.command()
def status(data_dir: DataDir = None) -> None:
    """Show the local clusters and whether each answers /readyz."""
    layout = _layout(data_dir)
    state = supervisor.read_state(layout)
    if state is None:
        console.print("no local clusters are running (start them with `tether local up`)")
        raise typer.Exit(1)
    table = Table("cluster", "role", "server", "ready")
    for entry in state["clusters"]:
        if not entry["server"].startswith(("https://127.", "https://localhost")):
            # An isolated API server is reachable only inside its cluster's network: never probe
            # it from here (that would send traffic towards the host's default route).
            table.add_row(entry["name"], _role_of(entry), entry["server"], "isolated (inside its network)")
            continue
        ready = supervisor.probe_ready(entry["server"], _pki(layout, entry["name"]).ca_cert)
        table.add_row(entry["name"], _role_of(entry), entry["server"],
                      "[green]yes[/green]" if ready else "[red]no[/red]")
    console.print(table)
    console.print(f"kubeconfig: {layout.kubeconfig}")


@app.command("exec", context_settings={"allow_interspersed_args": False,
                                       "ignore_unknown_options": True})
def exec_in(
    cluster: Annotated[str, typer.Argument(help="The local cluster whose network the command runs in")],
    command: Annotated[list[str], typer.Argument(help="The command (after --) and its arguments")],
    data_dir: DataDir = None,
) -> None:
    """Run a command inside a local cluster's network, with a kubeconfig for it (`--context
    CLUSTER`, also the current context): netns mode in the cluster's node namespace, rootless
    as it is. `tether local exec member -- kubectl get pods`."""
    import json

    import yaml

    from tether.local import localexec

    if command[:1] == ["--"]:  # options go before CLUSTER; everything after it is the command
        command = command[1:]
    layout = _layout(data_dir)
    state = supervisor.read_state(layout)
    running = [str(c["name"]) for c in (state or {}).get("clusters") or []]
    try:
        networks = {name: json.loads((layout.clusters / name / "network.json").read_text())
                    for name in running if (layout.clusters / name / "network.json").exists()}
        config = yaml.safe_load(layout.kubeconfig.read_text()) if layout.kubeconfig.exists() else {}
        chosen = localexec.plan(cluster, command, running=running, networks=networks,
                                kubeconfig=config or {})
    except (localexec.ExecError, OSError, ValueError) as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    if chosen.namespace and os.geteuid() != 0:
        console.print(f"[red]error:[/red] {cluster} runs in network namespaces: run as root",
                      highlight=False)
        raise typer.Exit(1)
    path = layout.clusters / cluster / "exec.kubeconfig"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(yaml.safe_dump(dict(chosen.kubeconfig), sort_keys=False))
    env = localexec.environment(os.environ, chosen, str(path))
    try:
        os.execvpe(chosen.argv[0], list(chosen.argv), env)
    except OSError as exc:
        console.print(f"[red]error:[/red] cannot run {chosen.argv[0]}: {exc.strerror or exc}",
                      highlight=False)
        raise typer.Exit(127) from None


def _netns_network(layout: supervisor.Layout, name: str) -> network.ClusterNetwork:
    import json

    path = layout.clusters / name / "network.json"
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        raise typer.BadParameter(f"no local cluster {name!r} in {layout.root}", param_hint="CLUSTER") from None
    if found.get("mode") != network.NETNS:
        raise typer.BadParameter(f"{name} is not a --netns cluster: rootless clusters share the host's "
                                 "network already", param_hint="CLUSTER")
    return network.ClusterNetwork.netns(int(found["index"]))


def _join_or_leave(cluster: str, peer: str, data_dir: Path | None, joining: bool) -> None:
    from tether.local import underlay

    layout = _layout(data_dir)
    a = _netns_network(layout, cluster)
    b: underlay.Peer = underlay.HOST if peer == "host" else _netns_network(layout, peer)
    try:
        asyncio.run(underlay.join(a, b) if joining else underlay.leave(a, b))
    except netns.NetnsError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(1) from None
    what = "the host" if peer == "host" else peer
    console.print(f"{cluster} {'joined with' if joining else 'left'} {what}", highlight=False)


@app.command("join")
def join_cmd(
    cluster: Annotated[str, typer.Argument(help="A --netns local cluster")],
    peer: Annotated[str, typer.Argument(help="Another --netns local cluster, or `host`")],
    data_dir: DataDir = None,
) -> None:
    """Join two --netns clusters' networks (the underlay): each one's pods reach the other's pods
    and Services; with `host`, its pods reach the host's underlay address (10.200.0.254), where a
    hub or a forwarder may listen. Isolated APIs stay isolated. Undo with `tether local leave`."""
    _join_or_leave(cluster, peer, data_dir, joining=True)


@app.command("leave")
def leave_cmd(
    cluster: Annotated[str, typer.Argument(help="A --netns local cluster")],
    peer: Annotated[str, typer.Argument(help="The cluster (or `host`) it was joined with")],
    data_dir: DataDir = None,
) -> None:
    """Undo `tether local join`."""
    _join_or_leave(cluster, peer, data_dir, joining=False)


@app.command("kubeconfig")
def kubeconfig_path(
    data_dir: DataDir = None,
    merge: Annotated[bool, typer.Option("--merge", help="Also add the contexts to the kubeconfig kubectl "
                                        "writes to (the first existing file of $KUBECONFIG, else "
                                        "~/.kube/config)")] = False,
) -> None:
    """Print the path of a kubeconfig with one context per local cluster."""
    layout = _layout(data_dir)
    if not layout.kubeconfig.exists():
        console.print("no kubeconfig yet: start clusters with `tether local up`", style="red")
        raise typer.Exit(1)
    if merge:
        target = default_kubeconfig_path()
        kubeconfig.merge_into(target, layout.kubeconfig)
        console.print(f"merged into {target}", style="green")
    typer.echo(str(layout.kubeconfig))
