"""Idle timeouts of the local HTTP server (`http._Deadlines`): stalled clients are closed,
served ones are not, and the sweep stops with the last connection."""

from __future__ import annotations

import asyncio
import time

import pytest

from tether.net import httpserver as http
from tether.net.httpserver import HttpServer, Request, Response

IDLE_S = 0.3


@pytest.fixture
def short_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http, "IDLE_TIMEOUT_S", IDLE_S)
    monkeypatch.setattr(http, "SWEEP_INTERVAL_S", 0.05)


async def handler(request: Request) -> Response:
    return Response(200, b'{"ok":true,"len":%d}' % len(request.body))


async def closed_after(reader: asyncio.StreamReader) -> float:
    started = time.monotonic()
    async with asyncio.timeout(5):
        while await reader.read(65536):
            pass
    return time.monotonic() - started


@pytest.mark.usefixtures("short_idle")
@pytest.mark.parametrize("sent", [b"", b"GET / HTTP/1.1\r\nHost: x\r\n",
                                  b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"])
async def test_stalled_clients_are_closed(sent: bytes) -> None:
    server = HttpServer(handler, host="127.0.0.1", port=0)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(sent)
        waited = await closed_after(reader)
        assert IDLE_S * 0.8 <= waited < IDLE_S + 1.0
        writer.close()
    finally:
        await server.close()


@pytest.mark.usefixtures("short_idle")
async def test_busy_connection_is_served_then_closed_when_idle() -> None:
    server = HttpServer(handler, host="127.0.0.1", port=0)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        for _ in range(5):  # together longer than IDLE_S, each wait shorter
            await asyncio.sleep(IDLE_S / 3)
            writer.write(b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi")
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 ")
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            assert await reader.readexactly(length) == b'{"ok":true,"len":2}'
        assert await closed_after(reader) < IDLE_S + 1.0
        writer.close()
        sweeper = server._deadlines._sweeper
        assert sweeper is not None
        for _ in range(100):  # the sweep ends with the last connection
            if not server._connections and sweeper.done():
                break
            await asyncio.sleep(0.02)
        assert sweeper.done()
        assert not server._deadlines.due
    finally:
        await server.close()
