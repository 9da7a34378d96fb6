"""`tether connect` wired up: clusters by context or through the hub, a channel into each, a session.

A cluster named with `-C NAME` is reached through the hub's cluster proxy: a kubeconfig for it is
issued as `tether kubeconfig NAME` issues one (the hub is `--hub-context`), so a Pull member
behind NAT is reached the same way as any other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tether.app import clusterproxy
from tether.bridge import routes, sessionstate
from tether.bridge.channel import ClusterChannel, DirectChannel
from tether.bridge.session import ClusterSpec, ConnectSession, SessionOptions
from tether.kube import KubeClient, load_kubeconfig
from tether.net import daemon


class ConnectError(Exception):
    """The session could not be set up (the message says what to change)."""


@dataclass(frozen=True)
class ConnectRequest:
    contexts: tuple[str, ...] = ()
    members: tuple[str, ...] = ()
    hub_context: str | None = None
    kubeconfig: Path | None = None
    namespaces: tuple[str, ...] = ()
    hosts_file: Path | None = None
    dns: bool = False
    dns_address: str = "127.1.0.53"
    dns_port: int = 53
    env_only: bool = False
    direct: bool = True
    routes: bool = False
    state_root: Path | None = None


async def _member_kubeconfig(request: ConnectRequest, name: str) -> Path:
    hub = KubeClient(load_kubeconfig(request.kubeconfig, request.hub_context))
    async with hub:
        try:
            return await clusterproxy.write_kubeconfig(hub, name, state_dir=request.state_root)
        except clusterproxy.ProxySetupError as exc:
            raise ConnectError(f"-C {name}: {exc}") from None


def _channel(name: str, request: ConnectRequest) -> ClusterChannel:
    return DirectChannel(name)


async def open_clusters(request: ConnectRequest) -> list[ClusterSpec]:
    """One `ClusterSpec` per context and per hub member asked for (the current context if none)."""
    wanted: list[tuple[str | None, Path | None, str | None]] = []  # (session name, kubeconfig, context)
    for context in request.contexts:
        wanted.append((context, request.kubeconfig, context))
    for member in request.members:
        wanted.append((member, await _member_kubeconfig(request, member), None))
    if not wanted:
        wanted.append((None, request.kubeconfig, None))
    specs: list[ClusterSpec] = []
    for name, kubeconfig, chosen in wanted:
        credentials = load_kubeconfig(kubeconfig, chosen)
        label = name or credentials.context or "cluster"
        namespaces = request.namespaces or (credentials.namespace or "default",)
        specs.append(ClusterSpec(label, KubeClient(credentials), _channel(label, request), tuple(namespaces),
                                 context=credentials.context, kubeconfig=str(kubeconfig or "")))
    return specs


def session_options(request: ConnectRequest) -> SessionOptions:
    return SessionOptions(hosts_file=request.hosts_file, dns=request.dns, dns_address=request.dns_address,
                          dns_port=request.dns_port, env_only=request.env_only, state_root=request.state_root,
                          routes=request.routes)


async def serve(request: ConnectRequest, announce: Callable[[str], None]) -> None:
    """Run a session until cancelled."""
    specs = await open_clusters(request)
    try:
        session = ConnectSession(specs, session_options(request), announce)
        await session.run()
    finally:
        for spec in specs:
            with contextlib.suppress(Exception):
                await spec.client.close()


def clean_up(record: sessionstate.Recorded) -> list[str]:
    """Undo what a session that has ended left behind (all of it when it was killed)."""
    def remove_table(name: str) -> None:
        if routes.table_exists_sync(name):
            routes.delete_table_sync(name)

    done = sessionstate.clean_local(record, daemon.alive, None)
    if record.nft_table and routes.table_exists_sync(record.nft_table):
        remove_table(record.nft_table)
        done.append(f"deleted nftables table {record.nft_table}")
    return done
