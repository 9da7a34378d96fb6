"""Finding 7: connections without credentials must not exhaust a listener or its memory.

Before: ~4,100 idle TLS connections made the API server refuse everyone, a silent connection
was kept for asyncio's default 60 s handshake, and each connection cost ~276 KB. Now one client
address holds at most 256 unauthenticated connections per listener (refused at accept), a TLS
handshake must finish within 10 s, a full listener evicts a flooding address's connection for a
light client, and what a wave of connections allocated is freed when they close.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tether.local.cluster import LocalCluster, server_ssl_context
from tether.local.pki import ClusterPki, ensure_cluster_pki
from tether.net import connections
from tether.net.connections import ConnectionLimits
from tether.net.httpserver import HttpServer, Request, Response

HOST = "127.0.0.1"
ATTACKER = "127.0.0.2"
TOKEN = "let-me-in"
DEADLINE_S = 30.0  # generous; well below asyncio's default 60 s TLS handshake timeout


async def handler(request: Request) -> Response:
    if request.header("authorization") == f"Bearer {TOKEN}":
        request.authenticated()
        return Response(200, b'{"who":"client"}')
    return Response(401, b'{"reason":"Unauthorized"}')


@pytest.fixture
def pki(tmp_path: Path) -> ClusterPki:
    return ensure_cluster_pki(tmp_path / "pki", "conn")


def client_context(pki: ClusterPki) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pki.ca_cert))


@contextlib.asynccontextmanager
async def serving(pki: ClusterPki, limits: ConnectionLimits | None = None) -> AsyncIterator[HttpServer]:
    server = HttpServer(handler, host=HOST, port=0, ssl_context=server_ssl_context(pki), limits=limits)
    await server.start()
    try:
        yield server
    finally:
        await server.close(grace_s=1.0)


Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def open_tls(server: HttpServer, pki: ClusterPki, source: str) -> Stream | None:
    """A TLS connection from `source`, or None when the server refused it."""
    try:
        return await asyncio.wait_for(asyncio.open_connection(
            HOST, server.port, ssl=client_context(pki), server_hostname="localhost",
            local_addr=(source, 0)), DEADLINE_S)
    except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
        return None


async def flood(server: HttpServer, pki: ClusterPki, source: str, count: int) -> list[Stream]:
    """`count` idle TLS connections from `source`, 100 at a time; the ones the server kept."""
    gate = asyncio.Semaphore(100)

    async def one() -> Stream | None:
        async with gate:
            return await open_tls(server, pki, source)

    opened = await asyncio.gather(*(one() for _ in range(count)))
    return [stream for stream in opened if stream is not None]


async def ask(stream: Stream, token: str | None = TOKEN) -> int:
    """One keep-alive request; the status, or 0 when the connection was closed instead."""
    reader, writer = stream
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    writer.write(f"GET /x HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode())
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), DEADLINE_S)
    except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
        return 0
    length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
    await reader.readexactly(length)
    return int(head.split(b" ")[1])


async def close_all(streams: list[Stream]) -> None:
    for _, writer in streams:
        writer.close()
    for _, writer in streams:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 5)


async def until(check: Callable[[], bool], what: str) -> None:
    for _ in range(int(DEADLINE_S / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_idle_flood_from_another_address_does_not_stop_a_client(pki: ClusterPki) -> None:
    """The finding as it was: ~4,100 idle TLS connections, with the default limits."""
    async with serving(pki) as server:
        kept = await flood(server, pki, ATTACKER, 4200)
        try:
            limit = ConnectionLimits().max_unauthenticated_per_address
            assert len(kept) <= limit
            assert server.table.counts().get(ATTACKER) == limit
            assert server.table.refused >= 4200 - limit
            client = await open_tls(server, pki, HOST)
            assert client is not None, "the client on 127.0.0.1 was refused"
            assert await ask(client) == 200
            assert await ask(client) == 200  # keep-alive: the same connection serves on
            client[1].close()
        finally:
            await close_all(kept)


async def test_a_full_listener_makes_room_for_a_light_client(pki: ClusterPki) -> None:
    """Flooding from several addresses fills the global cap; a client holding no connection
    still gets in (an attacker's oldest unauthenticated connection goes), and a connection
    that authenticated before the flood is never the one evicted."""
    limits = ConnectionLimits(max_connections=40, max_unauthenticated_per_address=16)
    async with serving(pki, limits) as server:
        veteran = await open_tls(server, pki, "127.0.0.5")
        assert veteran is not None and await ask(veteran) == 200
        kept: list[Stream] = []
        try:
            for source in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
                kept += await flood(server, pki, source, 20)
            assert len(server.table) == limits.max_connections
            client = await open_tls(server, pki, HOST)
            assert client is not None, "a full listener refused the light client"
            assert await ask(client) == 200
            assert server.table.evicted >= 1
            assert await ask(veteran) == 200  # authenticated: never evicted
            # the evicted connections were really closed; the other flooders' still answer
            statuses = [await ask(stream, token=None) for stream in kept]
            assert statuses.count(0) == server.table.evicted
            assert set(statuses) == {0, 401}
            client[1].close()
            veteran[1].close()
        finally:
            await close_all(kept)


async def test_authenticated_connections_are_not_limited_per_address(pki: ClusterPki) -> None:
    limits = ConnectionLimits(max_unauthenticated_per_address=4)
    async with serving(pki, limits) as server:
        streams: list[Stream] = []
        try:
            for _ in range(12):  # three times the unauthenticated limit, each authenticating at once
                stream = await open_tls(server, pki, HOST)
                assert stream is not None
                assert await ask(stream) == 200
                streams.append(stream)
            assert all([await ask(stream) == 200 for stream in streams])
            anonymous = [await open_tls(server, pki, HOST) for _ in range(4)]
            assert all(s is not None for s in anonymous)
            assert [await ask(s, token=None) for s in anonymous if s is not None] == [401] * 4
            # A 401 does not authenticate: the fifth anonymous connection is one too many.
            assert await open_tls(server, pki, HOST) is None
            streams += [s for s in anonymous if s is not None]
        finally:
            await close_all(streams)


async def test_handshake_timeout_closes_a_silent_connection(pki: ClusterPki,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert ConnectionLimits().handshake_timeout_s == 10.0
    limits = ConnectionLimits(handshake_timeout_s=0.5)
    async with serving(pki, limits) as server:
        reader, writer = await asyncio.open_connection(HOST, server.port, local_addr=(ATTACKER, 0))
        await until(lambda: len(server.table) == 1, "the silent connection to be accepted")
        assert server.table.counts() == {ATTACKER: 1}  # counted before any TLS byte arrived
        async with asyncio.timeout(DEADLINE_S):
            assert await reader.read() == b""  # the server closed it
        await until(lambda: len(server.table) == 0, "the table to forget it")
        writer.close()


async def test_tls_handshakes_are_paced_across_loop_steps(pki: ClusterPki,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """200 ClientHellos arriving together used to be answered in one step of the event loop
    (~200 ms of CPU while every other connection waited); now at most HANDSHAKES_PER_STEP
    handshake steps run per loop step."""
    per_step: list[int] = []
    step = connections._HandshakePacer._step

    def counted(self: connections._HandshakePacer) -> None:
        waiting = len(self._queue)
        step(self)
        per_step.append(waiting - len(self._queue))

    monkeypatch.setattr(connections._HandshakePacer, "_step", counted)
    async with serving(pki) as server:
        streams = await flood(server, pki, ATTACKER, 60)
        try:
            assert len(streams) == 60
            assert all([await ask(stream) == 200 for stream in streams])
        finally:
            await close_all(streams)
    assert sum(per_step) >= 60  # every handshake went through the pacer
    assert max(per_step) == connections.HANDSHAKES_PER_STEP  # a backlog formed, and was bounded


def live_tls_objects() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects()
               if isinstance(o, (connections.Connection, ssl.SSLObject, asyncio.StreamWriter)))


async def test_waves_of_idle_connections_return_to_baseline(pki: ClusterPki) -> None:
    """Each wave's connection objects (the table's records, TLS objects, streams) are freed
    when its connections close, so waves do not accumulate."""
    async with serving(pki) as server:
        baseline = live_tls_objects()
        sizes = []
        for _ in range(3):
            wave = await flood(server, pki, ATTACKER, 200)
            assert len(wave) == 200 and len(server.table) == 200
            sizes.append(live_tls_objects() - baseline)
            await close_all(wave)
            del wave
            await until(lambda: len(server.table) == 0 and not server.table.unauthenticated,
                        "the server to forget the wave")
            await until(lambda: live_tls_objects() <= baseline, "the wave's objects to be freed")
        # client and server side: a Connection, two SSLObjects, two StreamWriters per connection
        assert all(size >= 200 * 3 for size in sizes)


@pytest.fixture
def cluster(in_process_cluster: LocalCluster) -> LocalCluster:
    return in_process_cluster


async def test_the_api_server_lifts_the_limit_for_authenticated_callers(cluster: LocalCluster) -> None:
    """Every kubectl and controller of the machine comes from 127.0.0.1: once a request
    carried a valid token its connection no longer counts against the anonymous limit."""
    limit = ConnectionLimits().max_unauthenticated_per_address
    context = ssl.create_default_context(cafile=str(cluster.pki.ca_cert))
    token = cluster.pki.token()
    streams: list[Stream] = []

    async def get(stream: Stream, path: str, auth: bool) -> int:
        reader, writer = stream
        header = f"Authorization: Bearer {token}\r\n" if auth else ""
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n{header}\r\n".encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), DEADLINE_S)
        await reader.readexactly(int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0]))
        return int(head.split(b" ")[1])

    opener: Callable[[], Awaitable[Any]] = lambda: asyncio.open_connection(  # noqa: E731
        HOST, cluster.port, ssl=context, server_hostname="localhost")
    try:
        for _ in range(limit + 20):
            stream = await opener()
            assert await get(stream, "/api/v1/namespaces/default", auth=True) == 200
            streams.append(stream)
        # Anonymous health checks do not authenticate a connection.
        anonymous = await opener()
        assert await get(anonymous, "/readyz", auth=False) == 200
        streams.append(anonymous)
        server = cluster._http
        assert server.table.counts() == {HOST: 1}
        assert len(server.table) == limit + 21
    finally:
        await close_all(streams)


async def test_a_refused_socket_is_closed_at_accept(pki: ClusterPki) -> None:
    """Refusals happen before TLS: the peer sees the socket end, no handshake bytes."""
    loop = asyncio.get_running_loop()
    async with serving(pki, ConnectionLimits(max_unauthenticated_per_address=1)) as server:
        first = socket.create_connection((HOST, server.port), source_address=(ATTACKER, 0))
        await until(lambda: len(server.table) == 1, "the first connection")
        second = socket.create_connection((HOST, server.port), source_address=(ATTACKER, 0))
        second.setblocking(False)
        try:
            async with asyncio.timeout(DEADLINE_S):
                try:
                    received = await loop.sock_recv(second, 1)
                except ConnectionResetError:
                    received = b""
            assert received == b""
            assert server.table.refused == 1 and len(server.table) == 1
        finally:
            first.close()
            second.close()
