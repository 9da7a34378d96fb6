"""DirectChannel and splice against real sockets on loopback."""

from __future__ import annotations

import asyncio

import pytest

from tether.bridge.channel import DialFailed, DirectChannel, splice, stream_from_asyncio


async def _echo_server() -> tuple[asyncio.Server, int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_direct_channel_round_trip_and_half_close() -> None:
    server, port = await _echo_server()
    async with server:
        stream = await DirectChannel().open_tcp("127.0.0.1", port)
        await stream.send(b"hello")
        await stream.send_eof()
        received = b""
        while chunk := await stream.receive():
            received += chunk
        assert received == b"hello"
        await stream.aclose()


async def test_refused_dial_is_dial_failed() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    with pytest.raises(DialFailed, match=f"127.0.0.1:{port}"):
        await DirectChannel().open_tcp("127.0.0.1", port, timeout_s=2)


async def test_splice_joins_a_client_to_a_server_through_the_channel() -> None:
    server, port = await _echo_server()
    channel = DirectChannel()

    async def front(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await splice(stream_from_asyncio(reader, writer), await channel.open_tcp("127.0.0.1", port))

    async with server, await asyncio.start_server(front, "127.0.0.1", 0) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.sockets[0].getsockname()[1])
        writer.write(b"x" * 100_000)
        writer.write_eof()
        data = await asyncio.wait_for(reader.read(-1), 10)
        assert data == b"x" * 100_000
        writer.close()


async def test_udp_association() -> None:
    loop = asyncio.get_running_loop()

    class Reply(asyncio.DatagramProtocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

        def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
            self.transport.sendto(data.upper(), addr)  # type: ignore[attr-defined]

    transport, _ = await loop.create_datagram_endpoint(Reply, local_addr=("127.0.0.1", 0))
    port = transport.get_extra_info("sockname")[1]
    try:
        udp = await DirectChannel().open_udp("127.0.0.1", port)
        await udp.send(b"ping")
        assert await asyncio.wait_for(udp.receive(), 5) == b"PING"
        await udp.aclose()
    finally:
        transport.close()
