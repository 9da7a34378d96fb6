"""`tether mesh`: the WireGuard mesh between clusters' nodes (semaphore-wireguard compatible)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from tether.cli import options

app = typer.Typer(help="A WireGuard mesh between the nodes of clusters (semaphore-wireguard compatible).",
                  no_args_is_help=True)
console = Console(soft_wrap=True)


def _logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


async def _until_signal(work: asyncio.Task[None]) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, work.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await work


@app.command("local")
def local_mesh(
    clusters: Annotated[str, typer.Option("--clusters", help="Comma-separated --netns local clusters to mesh")],
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="The clusters' data directory "
                                                  "[default: tether local's]")] = None,
    cleanup: Annotated[bool, typer.Option("--cleanup", help="Remove the mesh's interfaces, routes, "
                                          "annotations and node underlay, then exit")] = False,
    hub_kubeconfig: options.HubKubeconfig = None,
    hub_context: options.HubContext = None,
    hub_kubeconfig_alias: options.HubKubeconfigAlias = None,
    hub_context_alias: options.HubContextAlias = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Mesh every node of the named --netns local clusters with every node of the others; runs
    until interrupted (the interfaces stay: `--cleanup` removes them). With --kubeconfig or
    --context (the hub), a MeshReady condition goes on the hub's Cluster named like each cluster."""
    from tether.app.mesh import LocalMesh, MeshLocalError
    from tether.local import supervisor

    _logging(verbose)
    root = (data_dir or supervisor.default_data_dir()).expanduser().resolve()
    mesh = LocalMesh(root, [c.strip() for c in clusters.split(",") if c.strip()])
    hub_kubeconfig = options.pick(hub_kubeconfig, hub_kubeconfig_alias, "--kubeconfig")
    hub_context = options.pick(hub_context, hub_context_alias, "--context")

    async def go() -> None:
        from tether.kube import KubeClient

        if (hub_kubeconfig or hub_context) and not cleanup:
            mesh.hub = KubeClient.from_kubeconfig(hub_kubeconfig, hub_context)
        try:
            if cleanup:
                await mesh.cleanup()
                console.print("mesh removed")
            else:
                await _until_signal(asyncio.create_task(mesh.run()))
        finally:
            await mesh.close()

    try:
        mesh.load()
        asyncio.run(go())
    except (MeshLocalError, OSError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None
    except Exception as exc:  # the boundary: a clear message, not a traceback
        from tether.kube import KubeError
        from tether.local.netns import NetnsError
        if isinstance(exc, KubeError | NetnsError):
            console.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(1) from None
        raise


@app.command("run")
def run(
    clusters_config: Annotated[Path, typer.Option("--clusters-config", envvar="SWG_CLUSTERS_CONFIG",
                                                  help="semaphore-wireguard's clusters JSON")],
    node_name: Annotated[str, typer.Option("--node-name", envvar="SWG_NODE_NAME", help="This node (downward API)")],
    key_path: Annotated[Path, typer.Option("--wg-key-path", envvar="SWG_WG_KEY_PATH",
                                           help="Where private keys are kept (0600)")] =
        Path("/var/lib/semaphore-wireguard"),
    listen_address: Annotated[str, typer.Option("--listen-address", envvar="SWG_LISTEN_ADDRESS",
                                                help="Where /metrics is served (host:port, '' = off)")] = ":7773",
    cleanup: Annotated[bool, typer.Option("--cleanup", help="Remove the interfaces (routes go with them) "
                                          "and this node's annotations, then exit")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """The per-node manager, as a DaemonSet runs it (hostNetwork, NET_ADMIN)."""
    from prometheus_client import start_http_server

    from tether.connect.mesh import config as mesh_config
    from tether.connect.mesh.manager import MeshManager, MeshOptions
    from tether.connect.mesh.plan import LocalSide, MeshConfigError
    from tether.connect.mesh.status import MeshMetrics
    from tether.kube import ClusterCredentials, KubeClient, KubeError, in_cluster
    from tether.kube.config import KubeconfigError

    _logging(verbose)

    def client_for(access: mesh_config.RemoteAccess) -> KubeClient:
        if access.remote.kubeconfig:
            return KubeClient.from_kubeconfig(Path(access.remote.kubeconfig))
        token = Path(access.token_path).read_text()
        ca: str | None = Path(access.ca_path).read_text() if access.ca_path else None
        if ca is None and access.ca_url:
            with urllib.request.urlopen(access.ca_url, timeout=10) as answer:
                ca = answer.read().decode()
        return KubeClient(ClusterCredentials.from_token(server=access.api_url, token=token, ca_bundle=ca,
                                                        name=access.remote.name))

    async def go() -> None:
        cfg = mesh_config.load(clusters_config)
        local_client = (KubeClient.from_kubeconfig(Path(cfg.local_kubeconfig)) if cfg.local_kubeconfig
                        else KubeClient(in_cluster()))
        remotes = [(a.remote, client_for(a)) for a in cfg.remotes]
        manager = MeshManager(LocalSide(cfg.local_name, node_name), local_client, remotes,
                              MeshOptions(key_dir=key_path))
        try:
            if cleanup:
                await manager.cleanup()
                return
            if listen_address:
                host, _, port = listen_address.rpartition(":")
                metrics = MeshMetrics()
                start_http_server(int(port), addr=host or "0.0.0.0", registry=metrics.registry)

                async def observe() -> None:
                    from tether.connect.mesh.status import parse_dump
                    while True:
                        found = []
                        for name, state in manager.states.items():
                            st = parse_dump(state.device.name, await state.device.dump())
                            if st is not None:
                                found.append((name, st))
                        metrics.observe(found, time.time())
                        await asyncio.sleep(5)

                asyncio.get_running_loop().create_task(observe())
            await _until_signal(asyncio.create_task(manager.run()))
        finally:
            await local_client.close()
            for _, client in remotes:
                await client.close()

    try:
        asyncio.run(go())
    except (MeshConfigError, KubeconfigError, KubeError, OSError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from None


@app.command("status")
def status(
    clusters: Annotated[str, typer.Option("--clusters", help="Local clusters meshed by `tether mesh local` "
                                          "(else: every WireGuard interface on this machine)")] = "",
    data_dir: Annotated[Path | None, typer.Option("--data-dir")] = None,
) -> None:
    """Per remote: interface, peers, latest handshake, bytes."""
    from tether.connect.mesh.status import parse_dump

    rows: list[tuple[str, str, str]] = []  # (where, remote, device)
    if clusters:
        from tether.app.mesh import LocalMesh, MeshLocalError
        from tether.connect.mesh.plan import interface_name
        from tether.local import supervisor

        root = (data_dir or supervisor.default_data_dir()).expanduser().resolve()
        mesh = LocalMesh(root, [c.strip() for c in clusters.split(",") if c.strip()])

        async def found() -> list[tuple[str, str, str]]:
            try:
                nodes = await mesh.discover()
            finally:
                await mesh.close()
            return [(f"{c}/{n}", r, interface_name(r, ns)) for (c, n), (ns, _) in sorted(nodes.items())
                    for r in mesh.names if r != c]

        try:
            mesh.load()
            rows = asyncio.run(found())
        except MeshLocalError as exc:
            console.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(1) from None
    else:
        out = subprocess.run(["wg", "show", "interfaces"], capture_output=True, text=True, check=False).stdout
        rows = [("", d.removeprefix("wireguard."), d) for d in out.split()]
    table = Table("NODE", "REMOTE", "INTERFACE", "PEERS", "LATEST HANDSHAKE", "RX", "TX", "UP")
    now = time.time()
    for where, remote, device in rows:
        dump = subprocess.run(["wg", "show", device, "dump"], capture_output=True, text=True, check=False,
                              env=dict(os.environ, WG_HIDE_KEYS="always")).stdout
        st = parse_dump(device, dump)
        if st is None:
            table.add_row(where, remote, device, "-", "-", "-", "-", "no interface")
            continue
        latest = max((p.latest_handshake for p in st.peers), default=0)
        ago = f"{int(now - latest)}s ago" if latest else "never"
        table.add_row(where, remote, device, str(len(st.peers)), ago, str(sum(p.rx_bytes for p in st.peers)),
                      str(sum(p.tx_bytes for p in st.peers)), "yes" if st.up(now) else "no")
    console.print(table)
