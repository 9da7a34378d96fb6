"""ANP's HA model as the hub replicas use it: two tunnel servers behind one address (a Service),
each telling its server id and `servercount` 2; one agent dials the address until it holds a
stream to both, so a CONNECT through either server reaches the member, and when one replica
goes the other still serves."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator

from test_tunnel_common import HOST, agent_config, echo_server, eventually, running, server_config
from test_tunnel_connect import connect


@contextlib.asynccontextmanager
async def round_robin(ports: list[int]) -> AsyncIterator[int]:
    """One TCP address in front of several: each new connection goes to the next port, as a
    Service's virtual IP spreads connections over its endpoints."""
    turn = itertools.cycle(ports)
    pipes: set[asyncio.Task[None]] = set()

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, next(turn))
        except OSError:
            writer.close()
            return
        for task in (asyncio.create_task(pump(reader, up_writer)),
                     asyncio.create_task(pump(up_reader, writer))):
            pipes.add(task)
            task.add_done_callback(pipes.discard)

    server = await asyncio.start_server(forward, HOST, 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for task in list(pipes):
            task.cancel()
        await asyncio.gather(*pipes, return_exceptions=True)


async def through(port: int, echo_port: int) -> bytes:
    head, reader, writer = await connect(port, f"{HOST}:{echo_port}")
    assert head == b"HTTP/1.1 200 Connection Established\r\n\r\n", head
    writer.write(b"ping")
    await writer.drain()
    answer = await asyncio.wait_for(reader.readexactly(4), 10)
    writer.close()
    return answer


async def test_agent_connects_to_every_replica_behind_one_address() -> None:
    replica = {"mode": "http-connect", "plain_connect_port": 0, "server_count": 2}
    async with running(server_config(server_id="hub-a", **replica)) as a, \
            running(server_config(server_id="hub-b", **replica)) as b, \
            round_robin([a.server.ports["agent"], b.server.ports["agent"]]) as front, \
            echo_server() as echo:
        agent = await a.add_agent(agent_config(a.server, proxy_server_port=front), wait=False)
        await eventually(lambda: set(agent.streams) == {"hub-a", "hub-b"}, timeout_s=30,
                         what="a stream to each replica")
        assert agent.server_count == 2
        for env in (a, b):
            assert "agent-1" in env.server.agent_ids()
            assert await through(env.server.ports["plain-connect"], echo) == b"ping"

        # one replica goes: the other keeps serving the agent
        b.stop.set()
        async with asyncio.timeout(15):
            await b.task
        await eventually(lambda: set(agent.streams) == {"hub-a"}, timeout_s=30,
                         what="the stream to hub-b closed")
        assert await through(a.server.ports["plain-connect"], echo) == b"ping"
