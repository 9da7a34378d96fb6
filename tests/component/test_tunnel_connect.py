"""HTTP-CONNECT mode, destHost routing and the reusable tunnel."""

from __future__ import annotations

import asyncio

from test_tunnel_common import HOST, agent_config, echo_server, eventually, running, server_config

from tether.tunnel import client


async def connect(port: int, target: str, *, extra: str = "") -> tuple[bytes, asyncio.StreamReader,
                                                                        asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(f"CONNECT {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    return head, reader, writer


async def test_http_connect_dials_through_to_echo() -> None:
    async with running(server_config(mode="http-connect", plain_connect_port=0)) as env, \
            echo_server() as port:
        await env.add_agent(agent_config(env.server))
        for listener in ("server", "plain-connect"):
            head, reader, writer = await connect(env.server.ports[listener], f"{HOST}:{port}")
            assert head == b"HTTP/1.1 200 Connection Established\r\n\r\n"
            payload = b"x" * 300_000
            writer.write(payload)
            await writer.drain()
            assert await asyncio.wait_for(reader.readexactly(len(payload)), 10) == payload
            writer.close()
        await eventually(lambda: not env.server.state.established and not env.server.state.pending)


async def test_http_connect_errors() -> None:
    async with running(server_config(mode="http-connect")) as env:
        port = env.server.ports["server"]
        head, _, w = await connect(port, f"{HOST}:1")
        assert head.startswith(b"HTTP/1.1 500 ")
        w.close()
        await env.add_agent(agent_config(env.server))
        head, r, w = await connect(port, f"{HOST}:1")
        assert head.startswith(b"HTTP/1.1 502 ")
        assert b"connection refused" in await asyncio.wait_for(r.read(), 5)
        w.close()
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 405 ")
        writer.close()


async def test_http_connect_routes_on_request_target_with_desthost() -> None:
    config = server_config(mode="http-connect", proxy_strategies=("destHost",))
    async with running(config) as env, echo_server("127.0.0.2") as port_b, \
            echo_server("127.0.0.1") as port_a:
        a = await env.add_agent(agent_config(env.server, agent_id="a", agent_identifiers="host=127.0.0.1"))
        b = await env.add_agent(agent_config(env.server, agent_id="b", agent_identifiers="ipv4=127.0.0.2"))
        head, _, w = await connect(env.server.ports["server"], f"127.0.0.2:{port_b}")
        assert head.startswith(b"HTTP/1.1 200")
        assert b.open_endpoints == 1 and a.open_endpoints == 0
        w.close()
        head, _, w = await connect(env.server.ports["server"], f"127.0.0.1:{port_a}")
        assert head.startswith(b"HTTP/1.1 200")
        assert a.open_endpoints == 1
        w.close()
        head, _, w = await connect(env.server.ports["server"], f"127.0.0.3:{port_a}")
        assert head.startswith(b"HTTP/1.1 500")  # no agent for that host: exact match only
        w.close()


async def test_grpc_desthost_picks_agent_by_host() -> None:
    async with running(server_config(proxy_strategies=("destHost", "default"))) as env, \
            echo_server("127.0.0.2") as port:
        a = await env.add_agent(agent_config(env.server, agent_id="a", agent_identifiers="host=127.0.0.1"))
        b = await env.add_agent(agent_config(env.server, agent_id="b", agent_identifiers="host=127.0.0.2"))
        for _ in range(5):
            r, w = await client.dial(env.frontend, "127.0.0.2", port, timeout_s=5)
            w.write(b"ping")
            assert await asyncio.wait_for(r.readexactly(4), 5) == b"ping"
            assert b.open_endpoints == 1 and a.open_endpoints == 0
            w.close()
            await eventually(lambda: b.open_endpoints == 0)


async def test_reusable_tunnel_many_dials_on_one_connection() -> None:
    async with running() as env, echo_server() as port:
        await env.add_agent(agent_config(env.server))
        async with client.TunnelClient(env.frontend, timeout_s=5) as tunnel:
            pairs = await asyncio.gather(*(tunnel.dial(HOST, port) for _ in range(50)))
            for i, (_, w) in enumerate(pairs):
                w.write(f"msg {i}".encode())
            for i, (r, _) in enumerate(pairs):
                want = f"msg {i}".encode()
                assert await asyncio.wait_for(r.readexactly(len(want)), 5) == want
            assert len(env.server.state.established) == 50
            for _, w in pairs:
                w.close()
        await eventually(lambda: not env.server.state.established)


async def test_dialer_fits_kube_connect_options() -> None:
    import functools

    from tether.kube import ConnectOptions

    async with running() as env, echo_server() as port:
        await env.add_agent(agent_config(env.server))
        options = ConnectOptions(dialer=functools.partial(client.dial, env.frontend, timeout_s=5))
        assert options.dialer is not None
        r, w = await options.dialer(HOST, port)
        w.write(b"kube")
        assert await asyncio.wait_for(r.readexactly(4), 5) == b"kube"
        w.close()
