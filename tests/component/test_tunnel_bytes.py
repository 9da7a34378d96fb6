"""The tunnel server counts the payload bytes it carries, and the hub dashboard reads them."""

from __future__ import annotations

import asyncio

from test_tunnel_common import HOST, agent_config, echo_server, eventually, running, server_config

from tether.app.dashboard.server import tunnel_facts


def counted(series: dict[tuple[tuple[str, str], ...], float], segment: str) -> float:
    return series.get((("segment", segment),), 0.0)


async def test_data_bytes_are_counted_both_ways() -> None:
    async with running(server_config(mode="http-connect", plain_connect_port=0)) as env, \
            echo_server() as port:
        await env.add_agent(agent_config(env.server, agent_id="member1"))
        reader, writer = await asyncio.open_connection(HOST, env.server.ports["plain-connect"])
        writer.write(f"CONNECT {HOST}:{port} HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 200")
        payload = b"y" * 123_457
        writer.write(payload)
        await writer.drain()
        assert await asyncio.wait_for(reader.readexactly(len(payload)), 10) == payload
        series = env.server.metrics.counters["data_bytes_total"]
        assert counted(series, "to_agent") == len(payload)
        assert counted(series, "from_agent") == len(payload)  # the echo
        assert "konnectivity_network_proxy_server_data_bytes_total" in env.server.metrics.render()
        facts = tunnel_facts(env.server)
        assert (facts.agents, facts.established, facts.bytes_to_agents, facts.bytes_from_agents) == (
            ("member1",), 1, len(payload), len(payload))
        writer.close()
        await eventually(lambda: not env.server.state.established)
        reader, writer = await asyncio.open_connection(HOST, env.server.ports["plain-connect"])
        writer.write(b"CONNECT nowhere HTTP/1.1\r\n\r\n")  # no port: refused before any dial
        await writer.drain()
        assert (await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)).startswith(b"HTTP/1.1 4")
        writer.close()
        assert tunnel_facts(env.server).connects_refused == 1
