"""Shared pieces of the tunnel component tests: an echo target, a server and agents on
127.0.0.1:0, and bounded waits. No tests here."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from tether.tunnel.agent import AgentConfig, TunnelAgent
from tether.tunnel.server import ServerConfig, TunnelServer
from tether.tunnel.tls import ServerTLS

HOST = "127.0.0.1"


async def eventually(check: Callable[[], bool], timeout_s: float = 10.0, what: str = "") -> None:
    async with asyncio.timeout(timeout_s):
        while not check():  # noqa: ASYNC110 (polling state owned by other tasks)
            await asyncio.sleep(0.02)
    assert check(), what


@contextlib.asynccontextmanager
async def echo_server(host: str = HOST) -> AsyncIterator[int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, host, 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2):
                await server.wait_closed()


def server_config(**changes: object) -> ServerConfig:
    base = ServerConfig(server_bind_address=HOST, server_port=0, agent_bind_address=HOST,
                        agent_port=0, health_bind_address=HOST, health_port=0, admin_port=0,
                        plain_connect_bind_address=HOST,
                        server_id="server-1")
    return replace(base, **changes)  # type: ignore[arg-type]


def agent_config(server: TunnelServer, **changes: object) -> AgentConfig:
    base = AgentConfig(proxy_server_host=HOST, proxy_server_port=server.ports["agent"],
                       agent_id="agent-1", health_server_host=HOST, health_server_port=0,
                       admin_server_port=0, sync_interval_s=0.2, sync_interval_cap_s=1.0,
                       probe_interval_s=0.1)
    return replace(base, **changes)  # type: ignore[arg-type]


@dataclass
class Running:
    server: TunnelServer
    stop: asyncio.Event
    task: asyncio.Task[None]
    agents: list[tuple[TunnelAgent, asyncio.Event, asyncio.Task[None]]] = field(default_factory=list)

    async def add_agent(self, config: AgentConfig, *, wait: bool = True) -> TunnelAgent:
        agent = TunnelAgent(config)
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop))
        self.agents.append((agent, stop, task))
        if wait:
            async with asyncio.timeout(10):
                await agent.connected.wait()
            await eventually(lambda: config.agent_id in self.server.agent_ids())
        return agent

    async def stop_agent(self, agent: TunnelAgent) -> None:
        for entry in self.agents:
            if entry[0] is agent:
                entry[1].set()
                async with asyncio.timeout(10):
                    await entry[2]
                self.agents.remove(entry)
                return

    @property
    def frontend(self) -> str:
        return f"{HOST}:{self.server.ports['server']}"


async def start_server(config: ServerConfig) -> tuple[TunnelServer, asyncio.Event, asyncio.Task[None]]:
    server = TunnelServer(config)
    stop = asyncio.Event()
    await server.start()
    server.start = _noop  # type: ignore[method-assign]  # serve() below must not bind again
    task = asyncio.create_task(server.serve(stop))
    return server, stop, task


async def _noop() -> None:
    return None


@contextlib.asynccontextmanager
async def running(config: ServerConfig | None = None) -> AsyncIterator[Running]:
    server, stop, task = await start_server(config or server_config())
    env = Running(server, stop, task)
    try:
        yield env
    finally:
        for _agent, agent_stop, agent_task in env.agents:
            agent_stop.set()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(10):
                    await agent_task
        stop.set()
        async with asyncio.timeout(15):
            await task


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def tls_files(directory: Path) -> dict[str, ServerTLS]:
    from tether.tunnel import pki

    pki.write_pkis(directory, "127.0.0.1")
    front = directory / "frontend"
    agent = directory / "agent"
    return {
        "frontend": ServerTLS(str(front / "issued/proxy-frontend.crt"),
                              str(front / "private/proxy-frontend.key"), str(front / "issued/ca.crt")),
        "agent": ServerTLS(str(agent / "issued/proxy-frontend.crt"),
                           str(agent / "private/proxy-frontend.key"), str(agent / "issued/ca.crt")),
    }
