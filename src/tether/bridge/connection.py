"""`tether connect` from Python: a session in a background thread, for tests, scripts and notebooks.

    from tether import bridge
    with bridge.connect(context="dev", namespaces=["shop"]) as session:
        host, port = session.address("todos-db")        # ("127.1.1.4", 27017)
        env = session.environment("deploy/api")           # Service variables point at the mappings

The session runs its own event loop in a daemon thread (so it works under a running loop too, as
in a notebook); leaving the `with` block ends it and undoes everything it set up. By default no
hosts file is written and no DNS server runs: programs get addresses (`session.address`,
`session.url`) or the environment; pass `hosts_file=` or `dns=True` for names.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.bridge import agentpods, api
from tether.bridge.channel import ClusterChannel, DirectChannel
from tether.bridge.envresolve import Environment, ServiceAddress
from tether.bridge.muxchannel import MuxChannel
from tether.bridge.session import ClusterSpec, ConnectSession, SessionError, SessionOptions
from tether.kube import KubeClient, load_kubeconfig
from tether.net.tasks import cancel_and_wait

START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ServiceMapping:
    """One mapped Service: where it listens here."""

    cluster: str
    namespace: str
    name: str
    address: str
    ports: dict[int, int]  # Service port -> local port
    names: tuple[str, ...]


class Connection:
    """A running session (see the module docstring); made by `connect`."""

    def __init__(self, session: ConnectSession, loop: asyncio.AbstractEventLoop) -> None:
        self._session = session
        self._loop = loop

    def _call(self, fn: Any) -> Any:
        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=30)

    @property
    def mappings(self) -> list[ServiceMapping]:
        def snapshot() -> list[ServiceMapping]:
            return [ServiceMapping(m.key.cluster, m.key.namespace, m.key.name, m.address,
                                   {p.port: p.local_port for p in m.ports}, m.names)
                    for m in sorted(self._session.mapped.values(), key=lambda m: m.key)]

        result: list[ServiceMapping] = self._call(snapshot)
        return result

    def mapping(self, name: str, namespace: str | None = None, cluster: str | None = None) -> ServiceMapping:
        namespace = namespace or self._session.naming.primary_namespace
        cluster = cluster or self._session.naming.primary_cluster
        for m in self.mappings:
            if (m.name, m.namespace, m.cluster) == (name, namespace, cluster):
                return m
        raise KeyError(f"Service {namespace}/{name} of {cluster} is not mapped")

    def address(self, name: str, port: int | None = None, *, namespace: str | None = None) -> tuple[str, int]:
        """Where Service `name` (its `port`, by default its first) answers on this machine."""
        m = self.mapping(name, namespace)
        local = m.ports[port] if port is not None else next(iter(m.ports.values()))
        return m.address, local

    def url(self, name: str, port: int | None = None, *, namespace: str | None = None, scheme: str = "http") -> str:
        host, local = self.address(name, port, namespace=namespace)
        return f"{scheme}://{host}:{local}"

    @property
    def dns_server(self) -> tuple[str, int] | None:
        """Where the session's DNS server answers the mapped names (`connect(dns=True)`), else None."""
        dns = self._session.dns
        return (dns.host, dns.port) if dns is not None else None

    def addresses(self, cluster: str | None = None) -> dict[tuple[str, str], ServiceAddress]:
        """The mappings as `tether.bridge.environment(addresses=...)` takes them."""
        result: dict[tuple[str, str], ServiceAddress] = self._call(lambda: self._session.addresses(cluster))
        return result

    def environment(self, target: str, *, namespace: str | None = None, container: str | None = None
                    ) -> Environment:
        """`target`'s environment with its Service variables pointing at this session's mappings."""
        spec = self._session.clusters[0]
        credentials = spec.client.credentials
        addresses = self.addresses()

        async def run() -> Environment:
            async with KubeClient(credentials) as client:
                resolved = await api.resolve_environment(
                    client, target, namespace=namespace or self._session.naming.primary_namespace,
                    container=container, addresses=addresses)
                return resolved.environment

        return api.run_sync(run)


@contextlib.contextmanager
def connect(*, context: str | None = None, kubeconfig: Path | None = None, namespaces: Sequence[str] = (),
            hosts_file: Path | None = None, dns: bool = False, env_only: bool = False,
            direct: bool = False, channel: ClusterChannel | None = None, state_root: Path | None = None
            ) -> Iterator[Connection]:
    """Map every Service of `namespaces` (default: the context's) for the duration of the block.

    Traffic goes through a bridge agent made for the session (removed at the end), or with
    `direct=True` straight from this machine; `channel` supplies one's own.
    """
    credentials = load_kubeconfig(kubeconfig, context)
    name = context or credentials.context or "cluster"
    options = SessionOptions(hosts_file=hosts_file, dns=dns, env_only=env_only, state_root=state_root,
                             dns_port=0)
    started = threading.Event()
    failure: list[BaseException] = []
    holder: dict[str, Any] = {}

    async def main() -> None:
        client = KubeClient(credentials)
        holder["task"] = asyncio.current_task()
        agent: agentpods.AgentRef | None = None
        chosen = channel
        if chosen is None and direct:
            chosen = DirectChannel(name)
        if chosen is None:
            agent = await agentpods.ensure_agent(client)
            chosen = MuxChannel(name, agentpods.portforward_connector(client, agent))
            await chosen.start()
        spec = ClusterSpec(name, client, chosen, tuple(namespaces) or (credentials.namespace or "default",),
                           context=credentials.context, kubeconfig=str(kubeconfig or ""),
                           agent=f"{agent.namespace}/{agent.name}" if agent else "",
                           agent_session=agent.session if agent else "")
        session = ConnectSession([spec], options, announce=lambda line: None)
        holder["session"] = session
        runner = asyncio.create_task(session.run())
        waiter = asyncio.create_task(session.ready.wait())
        try:
            await asyncio.wait({runner, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if runner.done():
                runner.result()  # raises what stopped it
            started.set()
            await runner
        finally:
            await cancel_and_wait(waiter)
            await cancel_and_wait(runner)
            if agent is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(agentpods.remove_agent(client, agent))
            await client.close()

    def thread_main() -> None:
        loop = asyncio.new_event_loop()
        holder["loop"] = loop
        try:
            loop.run_until_complete(main())
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)
        finally:
            started.set()
            loop.close()

    thread = threading.Thread(target=thread_main, name="tether-connect", daemon=True)
    thread.start()
    if not started.wait(START_TIMEOUT_S):
        raise SessionError(f"the session did not start within {START_TIMEOUT_S:.0f}s")
    if failure:
        raise failure[0]
    loop: asyncio.AbstractEventLoop = holder["loop"]
    try:
        yield Connection(holder["session"], loop)
    finally:
        task = holder.get("task")
        if task is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(task.cancel)
        thread.join(timeout=60)
