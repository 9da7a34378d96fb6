"""The tunnel over gRPC on 127.0.0.1: clients dial through the server and an agent to targets."""

from __future__ import annotations

import asyncio

import pytest
from test_tunnel_common import HOST, agent_config, echo_server, eventually, running

from tether.tunnel import client


async def roundtrip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes) -> bytes:
    writer.write(payload)
    await writer.drain()
    got = await asyncio.wait_for(reader.readexactly(len(payload)), 10)
    return got


async def test_grpc_client_dials_through_to_echo() -> None:
    async with running() as env, echo_server() as port:
        await env.add_agent(agent_config(env.server))
        reader, writer = await client.dial(env.frontend, HOST, port, timeout_s=5)
        assert await roundtrip(reader, writer, b"hello tunnel") == b"hello tunnel"
        big = bytes(range(256)) * 8192  # 2 MiB
        assert await roundtrip(reader, writer, big) == big
        writer.close()
        await eventually(lambda: not env.server.state.established and not env.server.state.frontends)


async def test_dial_error_is_reported() -> None:
    async with running() as env:
        await env.add_agent(agent_config(env.server))
        with pytest.raises(client.DialError) as info:
            await client.dial(env.frontend, HOST, 1, timeout_s=5)
        assert "connection refused" in str(info.value) and info.value.reason == "endpoint"


async def test_no_agent_available() -> None:
    async with running() as env:
        with pytest.raises(client.DialError, match="No agent available"):
            await client.dial(env.frontend, HOST, 1, timeout_s=5)
