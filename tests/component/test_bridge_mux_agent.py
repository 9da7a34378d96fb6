"""The bridge agent and MuxChannel over real loopback sockets: TCP, UDP, reverse routes, reconnection."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from tether.bridge.agent import AgentConfig, BridgeAgent, ReverseRoutes, RouteNotFound, dial_reverse
from tether.bridge.channel import (
    ByteStream,
    ChannelLost,
    DialFailed,
    ReverseStream,
    splice,
    stream_from_asyncio,
)
from tether.bridge.muxchannel import MuxChannel, tcp_connector
from tether.bridge.muxconn import ControlError

DEADLINE_S = 30.0


async def _echo_server() -> tuple[asyncio.Server, int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


class _UdpEcho(asyncio.DatagramProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.DatagramTransport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.transport.sendto(b"re:" + data, addr)


@contextlib.asynccontextmanager
async def _agent(routes: ReverseRoutes | None = None) -> AsyncIterator[BridgeAgent]:
    agent = BridgeAgent(AgentConfig(host="127.0.0.1", port=0, control_port=0), routes or ReverseRoutes())
    await agent.start()
    try:
        yield agent
    finally:
        await agent.stop(grace_s=1.0)


async def _until(check: object) -> None:
    async with asyncio.timeout(DEADLINE_S):
        while not check():  # type: ignore[operator]  # noqa: ASYNC110 - polling state other tasks own
            await asyncio.sleep(0.02)


async def _read_all(stream: object) -> bytes:
    received = b""
    async with asyncio.timeout(DEADLINE_S):
        while chunk := await stream.receive():  # type: ignore[attr-defined]
            received += chunk
    return received


async def test_tcp_through_agent_with_half_close_and_bulk() -> None:
    server, port = await _echo_server()
    async with server, _agent() as agent, MuxChannel("test", tcp_connector("127.0.0.1", agent.port)) as channel:
        payload = bytes(range(256)) * 20_000  # 5 MB: several windows, so flow control must turn over
        stream = await channel.open_tcp("127.0.0.1", port)

        async def write() -> None:
            await stream.send(payload)
            await stream.send_eof()

        writer = asyncio.create_task(write())
        assert await _read_all(stream) == payload
        await writer
        await stream.aclose()
        assert channel.agent.get("role") == "agent"
        assert (channel.stats.bytes_sent, channel.stats.bytes_received, channel.stats.streams_opened) == \
            (len(payload), len(payload), 1)


async def test_many_streams_at_once() -> None:
    server, port = await _echo_server()
    async with server, _agent() as agent, MuxChannel("test", tcp_connector("127.0.0.1", agent.port)) as channel:
        async def one(i: int) -> bytes:
            stream = await channel.open_tcp("127.0.0.1", port)
            await stream.send(f"stream {i}".encode())
            await stream.send_eof()
            data = await _read_all(stream)
            await stream.aclose()
            return data

        results = await asyncio.gather(*(one(i) for i in range(50)))
        assert results == [f"stream {i}".encode() for i in range(50)]


async def test_refused_destination_and_agent_loop() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    closed_port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    async with _agent() as agent, MuxChannel("test", tcp_connector("127.0.0.1", agent.port)) as channel:
        with pytest.raises(DialFailed, match=r"refused|Connect call failed|connect"):
            await channel.open_tcp("127.0.0.1", closed_port)
        with pytest.raises(DialFailed, match="bridge agent itself"):
            await channel.open_tcp("127.0.0.1", agent.port)
        with pytest.raises(DialFailed, match="bridge agent itself"):
            await channel.open_tcp("localhost", agent.control_port)
        with pytest.raises(DialFailed, match="resolve"):
            await channel.open_tcp("no-such-host.invalid", 80)
        # the connection survives refusals
        assert channel.connected


async def test_udp_association() -> None:
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(_UdpEcho, local_addr=("127.0.0.1", 0))
    port = transport.get_extra_info("sockname")[1]
    try:
        async with _agent() as agent, MuxChannel("test", tcp_connector("127.0.0.1", agent.port)) as channel:
            datagrams = await channel.open_udp("127.0.0.1", port)
            for i in range(3):
                await datagrams.send(f"q{i}".encode())
                async with asyncio.timeout(DEADLINE_S):
                    assert await datagrams.receive() == f"re:q{i}".encode()
            await datagrams.aclose()
    finally:
        transport.close()


async def test_reverse_route_in_process_and_over_control_port() -> None:
    routes = ReverseRoutes()
    seen: list[ReverseStream] = []

    async def handler(reverse: ReverseStream) -> None:
        seen.append(reverse)
        data = await reverse.stream.receive()
        await reverse.stream.send(b"developer got " + data)
        await reverse.stream.send_eof()

    async with _agent(routes) as agent, MuxChannel("test", tcp_connector("127.0.0.1", agent.port)) as channel:
        registration = await channel.serve_reverse("naison-e4be", 3001, handler)
        # a router in the agent's process
        stream = await routes.open("naison-e4be", 3001, "10.0.0.9:5555")
        await stream.send(b"hello")
        assert await _read_all(stream) == b"developer got hello"
        assert (seen[0].route, seen[0].port, seen[0].peer) == ("naison-e4be", 3001, "10.0.0.9:5555")
        # a router in another pod: HTTP upgrade on the control port
        reader, writer = await asyncio.open_connection("127.0.0.1", agent.control_port)
        writer.write(b"POST /v1/reverse/naison-e4be?port=3001&peer=p HTTP/1.1\r\nHost: agent\r\n"
                     b"Connection: Upgrade\r\nUpgrade: tether-reverse\r\nContent-Length: 0\r\n\r\n")
        async with asyncio.timeout(DEADLINE_S):
            head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101")
        upgraded = stream_from_asyncio(reader, writer)
        await upgraded.send(b"ping")
        assert await _read_all(upgraded) == b"developer got ping"
        await upgraded.aclose()
        # the same with the client helper a router pod uses
        helper = await dial_reverse("127.0.0.1", agent.control_port, "naison-e4be", 3001, "router:1")
        await helper.send(b"hi")
        assert await _read_all(helper) == b"developer got hi"
        await helper.aclose()
        assert seen[-1].peer == "router:1"
        with pytest.raises(RouteNotFound):
            await dial_reverse("127.0.0.1", agent.control_port, "nobody", 3001)
        with pytest.raises(DialFailed, match="serves no route"):
            await dial_reverse("127.0.0.1", agent.control_port, "naison-e4be", 9999)
        # an unknown route is a 404, and a port the developer does not serve is refused
        with pytest.raises(RouteNotFound):
            await routes.open("someone-else", 3001)
        with pytest.raises(DialFailed, match="serves no route"):
            await routes.open("naison-e4be", 9999)
        await registration.aclose()
        await _until(lambda: "naison-e4be" not in routes)


async def test_route_taken_by_another_client() -> None:
    async def handler(reverse: ReverseStream) -> None:
        await reverse.stream.aclose()

    async with _agent() as agent, MuxChannel("a", tcp_connector("127.0.0.1", agent.port)) as first, \
            MuxChannel("b", tcp_connector("127.0.0.1", agent.port)) as second:
        await first.serve_reverse("shared", 80, handler)
        with pytest.raises(ControlError, match="another client"):
            await second.serve_reverse("shared", 80, handler)


async def test_agent_replaced_in_flight_fails_then_recovers() -> None:
    server, port = await _echo_server()
    routes = ReverseRoutes()
    agent = BridgeAgent(AgentConfig(host="127.0.0.1", port=0, control_port=0), routes)
    await agent.start()
    mux_port = agent.port

    async def handler(reverse: ReverseStream) -> None:
        await splice(reverse.stream, reverse.stream)

    async with server, MuxChannel("test", tcp_connector("127.0.0.1", mux_port),
                                  reconnect_deadline_s=DEADLINE_S) as channel:
        await channel.serve_reverse("mine", 1, handler)
        stream = await channel.open_tcp("127.0.0.1", port)
        await agent.stop(grace_s=0.5)
        with pytest.raises(ChannelLost):
            async with asyncio.timeout(DEADLINE_S):
                while True:
                    await stream.send(b"x")
                    await stream.receive()
        # the replacement listens on the same port; opens wait for it and the route comes back
        replacement = BridgeAgent(AgentConfig(host="127.0.0.1", port=mux_port, control_port=0), routes)
        await replacement.start()
        try:
            again = await channel.open_tcp("127.0.0.1", port)
            await again.send(b"back")
            await again.send_eof()
            assert await _read_all(again) == b"back"
            await _until(lambda: "mine" in routes)
            assert channel.connects == 2
        finally:
            await replacement.stop(grace_s=0.5)


async def test_open_without_agent_fails_within_deadline() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    channel = MuxChannel("nowhere", tcp_connector("127.0.0.1", port), reconnect_deadline_s=0.5)
    with pytest.raises(ChannelLost, match="no bridge agent in nowhere"):
        await channel.open_tcp("127.0.0.1", 80)
    await channel.aclose()


async def test_slow_reader_bounds_what_the_agent_buffers() -> None:
    """A destination that sends fast to a client that does not read: the agent stops reading it
    once the client's window is used up, rather than buffering everything."""
    total = 32 * 1024 * 1024
    written = 0
    done = asyncio.Event()

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal written
        chunk = b"z" * 65536
        try:
            while written < total:
                writer.write(chunk)
                await writer.drain()
                written += len(chunk)
        finally:
            done.set()
            writer.close()

    server = await asyncio.start_server(flood, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, _agent() as agent, MuxChannel("test", tcp_connector("127.0.0.1", agent.port)) as channel:
        stream = await channel.open_tcp("127.0.0.1", port)
        await _until(lambda: written >= 1024 * 1024)  # a window's worth got through
        await asyncio.sleep(1.0)  # plenty of time to buffer everything, were nothing holding it back
        assert written < 12 * 1024 * 1024, written  # one 1 MiB window plus socket buffers, not 32 MiB
        assert not done.is_set()
        for connection in agent._connections:
            assert connection.session.pending_output < 2 * 1024 * 1024
        received = 0
        async with asyncio.timeout(DEADLINE_S):
            while chunk := await stream.receive():
                received += len(chunk)
        assert received == total
        await stream.aclose()


async def test_agent_process_stops_on_sigterm_and_clients_notice() -> None:
    """`tether bridge agent` as a process: SIGTERM sends GOAWAY, the client's connection ends, the
    process exits 0 within its grace (bounded by the watchdog)."""
    import re
    import signal
    import sys

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tether", "bridge", "agent", "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0",
        "--grace", "2", "-v", stderr=asyncio.subprocess.PIPE)
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(DEADLINE_S):
            while not (found := re.search(rb"mux on 127\.0\.0\.1:(\d+)", await proc.stderr.readline())):
                pass
        channel = MuxChannel("proc", tcp_connector("127.0.0.1", int(found.group(1))), reconnect_deadline_s=1.0)
        await channel.start()
        status = await channel.status()
        assert status["ok"] is True
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(DEADLINE_S):
            assert await proc.wait() == 0
        await _until(lambda: not channel.connected)
        with pytest.raises(ChannelLost):
            await channel.open_tcp("127.0.0.1", 1)
        await channel.aclose()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_a_reconnecting_clients_route_cannot_be_taken_by_another() -> None:
    async def handler(reverse: ReverseStream) -> None:
        await reverse.stream.aclose()

    proxy_up = asyncio.Event()
    proxy_up.set()
    links: list[asyncio.StreamWriter] = []

    async with _agent() as agent:
        async def via_proxy() -> ByteStream:  # the first client's link, which the test cuts
            await proxy_up.wait()
            reader, writer = await asyncio.open_connection("127.0.0.1", agent.port)
            links.append(writer)
            return stream_from_asyncio(reader, writer)

        async with MuxChannel("a", via_proxy, reconnect_deadline_s=DEADLINE_S) as first, \
                MuxChannel("b", tcp_connector("127.0.0.1", agent.port)) as second:
            await first.serve_reverse("alice", 80, handler)
            proxy_up.clear()
            links[-1].transport.abort()  # alice's link drops; she is reconnecting
            await _until(lambda: "alice" not in agent.routes)
            with pytest.raises(ControlError, match="reconnecting"):
                await second.serve_reverse("alice", 80, handler)
            proxy_up.set()  # alice is back: her route is hers again
            await _until(lambda: "alice" in agent.routes and first.connects == 2)
            assert first.connected
