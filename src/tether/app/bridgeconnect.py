"""`tether connect` wired up: clusters by context or through the hub, a channel into each, a session.

A cluster named with `-C NAME` is reached through the hub's cluster proxy: a kubeconfig for it is
issued as `tether kubeconfig NAME` issues one (the hub is `--context`), so a Pull member
behind NAT is reached the same way as any other. Such a member is waited for (bounded by
`MEMBER_WAIT_S`) while the hub answers 503: a member registered a moment ago has an agent that
reports and opens its tunnel on its own schedule, and until the tunnel is up the hub's proxy has
no way to it ("no tunnels available"); the first request of a session would otherwise end it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tether.app import clusterproxy
from tether.bridge import agentpods, routes, sessionstate
from tether.bridge.channel import ClusterChannel, DirectChannel
from tether.bridge.muxchannel import MuxChannel
from tether.bridge.session import ClusterSpec, ConnectSession, SessionOptions
from tether.kube import KubeClient, KubeError, ServerError, load_kubeconfig
from tether.net import daemon

log = logging.getLogger(__name__)

MEMBER_WAIT_S = 60.0  # a member through the hub that answers 503 (its tunnel not up yet)
MEMBER_RETRY_S = 1.0


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


def _hub_unavailable(error: KubeError) -> bool:
    """The hub's proxy could not reach the member (no tunnel yet, member unreachable): worth
    waiting for, unlike a refusal or a missing cluster."""
    return isinstance(error, ServerError) and error.code == 503


async def wait_for_member(client: KubeClient, name: str, announce: Callable[[str], None], *,
                          wait_s: float = MEMBER_WAIT_S, retry_s: float = MEMBER_RETRY_S) -> None:
    """Return once `name` answers through the hub's proxy; `ConnectError` after `wait_s`."""
    deadline = time.monotonic() + wait_s
    announced = False
    while True:
        try:
            await client.request("GET", "/version", timeout_s=max(1.0, min(30.0, deadline - time.monotonic())))
            return
        except KubeError as exc:
            if not _hub_unavailable(exc):
                raise
            if time.monotonic() + retry_s >= deadline:
                raise ConnectError(f"-C {name}: the hub cannot reach the member after {wait_s:.0f} s: "
                                   f"{exc.message}") from None
            if not announced:
                announce(f"waiting for {name} through the hub: {exc.message}")
                announced = True
        await asyncio.sleep(retry_s)


async def _channel(spec: ClusterSpec, request: ConnectRequest, announce: Callable[[str], None]) -> ClusterChannel:
    """The way into the cluster: its bridge agent through a port-forward (made on demand), or direct."""
    if request.direct:
        return DirectChannel(spec.name)
    try:
        agent = await agentpods.ensure_agent(spec.client, session=spec.agent_session or None)
    except agentpods.AgentError as exc:
        raise ConnectError(f"{spec.name}: {exc}") from None
    spec.agent = f"{agent.namespace}/{agent.name}"
    spec.agent_session = agent.session
    announce(f"bridge agent {spec.agent} in {spec.name} is Ready")
    channel = MuxChannel(spec.name, agentpods.portforward_connector(spec.client, agent))
    try:
        await channel.start()
    except BaseException:
        await channel.aclose()
        raise
    return channel


async def open_clusters(request: ConnectRequest,
                        announce: Callable[[str], None] = lambda _line: None) -> list[ClusterSpec]:
    """One `ClusterSpec` per context and per hub member asked for (the current context if none);
    hub members once they answer through the hub."""
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
        specs.append(ClusterSpec(label, KubeClient(credentials), DirectChannel(label), tuple(namespaces),
                                 context=credentials.context, kubeconfig=str(kubeconfig or ""),
                                 agent_session=agentpods.new_session() if not request.direct else ""))
    try:
        for spec, (name, _, chosen) in zip(specs, wanted, strict=True):
            if chosen is None and name in request.members:
                await wait_for_member(spec.client, spec.name, announce)
    except BaseException:
        for spec in specs:
            with contextlib.suppress(Exception):
                await spec.client.close()
        raise
    return specs


def session_options(request: ConnectRequest) -> SessionOptions:
    return SessionOptions(hosts_file=request.hosts_file, dns=request.dns, dns_address=request.dns_address,
                          dns_port=request.dns_port, env_only=request.env_only, state_root=request.state_root,
                          routes=request.routes)


async def serve(request: ConnectRequest, announce: Callable[[str], None]) -> None:
    """Run a session until cancelled; its agents are removed on the way out."""
    if request.routes and request.direct:
        raise ConnectError("--routes carries traffic through the bridge agent: leave out --direct")
    if request.state_root is not None:
        for record in sessionstate.read_all(request.state_root):
            if not daemon.alive(record.pid):
                for line in await remove_recorded_agents(record):
                    announce(f"cleaned up after session {record.pid}, which is gone: {line}")
    specs = await open_clusters(request, announce)
    try:
        session = ConnectSession(specs, session_options(request), announce)
        session.write_early_state()  # the agents are recorded before they exist: a kill now is cleaned too
        for spec in specs:
            spec.channel = await _channel(spec, request, announce)
        await session.run()
    finally:
        await asyncio.shield(_remove_agents(specs, announce))


async def _remove_agents(specs: list[ClusterSpec], announce: Callable[[str], None]) -> None:
    for spec in specs:
        with contextlib.suppress(Exception):
            await spec.channel.aclose()
        if spec.agent_session:
            try:
                await agentpods.remove_agent(spec.client, _agent_ref(spec.agent_session))
            except KubeError as exc:
                announce(f"could not remove the bridge agent from {spec.name}: {exc} (`tether quit` retries)")
        with contextlib.suppress(Exception):
            await spec.client.close()


def _agent_ref(session: str) -> agentpods.AgentRef:
    return agentpods.AgentRef(agentpods.NAMESPACE, agentpods.agent_name(session), session)


async def remove_recorded_agents(record: sessionstate.Recorded) -> list[str]:
    """Remove the agents a session recorded (it was killed, or could not remove them itself)."""
    done: list[str] = []
    for cluster in record.doc.get("clusters") or []:
        session = str(cluster.get("agentSession") or "")
        if not session:
            continue
        kubeconfig = Path(cluster["kubeconfig"]) if cluster.get("kubeconfig") else None
        try:
            credentials = load_kubeconfig(kubeconfig, cluster.get("context") or None)
            async with KubeClient(credentials) as client:
                ref = _agent_ref(session)
                if await client.get_or_none("apps/v1", "Deployment", ref.name, ref.namespace) is not None:
                    await agentpods.remove_agent(client, ref)
                    done.append(f"removed the bridge agent {ref.namespace}/{ref.name} from {cluster.get('name')}")
        except (KubeError, OSError, ValueError) as exc:
            done.append(f"could not remove the bridge agent from {cluster.get('name')}: {exc}")
    return done


def clean_up(record: sessionstate.Recorded) -> list[str]:
    """Undo what a session that has ended left behind (all of it when it was killed)."""
    agents = asyncio.run(remove_recorded_agents(record))
    def remove_table(name: str) -> None:
        if routes.table_exists_sync(name):
            routes.delete_table_sync(name)

    done = sessionstate.clean_local(record, daemon.alive, None)
    if record.nft_table and routes.table_exists_sync(record.nft_table):
        remove_table(record.nft_table)
        done.append(f"deleted nftables table {record.nft_table}")
    return done + agents
