"""The lean HTTP/1.1 pool against small real servers on 127.0.0.1: reuse, stale connections,
cancellation, dialers, refusals, and how `KubeClient` reports them."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from tether.kube import ClusterCredentials, KubeClient, Unreachable
from tether.kube.transport import ConnectOptions
from tether.net.httpclient import ConnectionPool, TransportError

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Server"], Awaitable[None]]


@dataclass
class Server:
    handler: Handler
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    port: int = 0


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":")[1]))
    return head.split(b"\r\n", 1)[0]


def ok(body: bytes = b"{}") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


@contextlib.asynccontextmanager
async def serving(handler: Handler) -> AsyncIterator[Server]:
    server = Server(handler)
    tasks: set[asyncio.Task[None]] = set()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.connections += 1
        tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            await handler(reader, writer, server)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    listener = await asyncio.start_server(accept, "127.0.0.1", 0)
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        listener.close()
        for task in tasks:
            task.cancel()
        await listener.wait_closed()


async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
    while True:
        server.requests.append(await read_request(reader))
        writer.write(ok(b'{"n": %d}' % len(server.requests)))
        await writer.drain()


async def one_per_connection_without_saying_so(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                                               server: Server) -> None:
    server.requests.append(await read_request(reader))
    writer.write(ok())  # keep-alive by HTTP/1.1 rules, yet the server hangs up
    await writer.drain()


@contextlib.asynccontextmanager
async def stale_pool(server: Server) -> AsyncIterator[ConnectionPool]:
    """A pool whose idle connection the server has hung up, handed out as if that was not seen
    yet (the race a real client meets)."""
    pool = ConnectionPool("127.0.0.1", server.port, ssl_context=None, keepalive_expiry_s=60)
    try:
        await pool.request("GET", "/a", [])
        pool._idle[0].usable = lambda now, expiry_s: True  # type: ignore[method-assign]
        await asyncio.sleep(0.05)
        yield pool
    finally:
        await pool.close()


async def test_connections_are_reused() -> None:
    async with serving(keep_alive) as server:
        pool = ConnectionPool("127.0.0.1", server.port, ssl_context=None)
        try:
            answers = [await pool.request("GET", f"/x/{i}", [("Accept", "application/json")]) for i in range(5)]
        finally:
            await pool.close()
    assert [a.body for a in answers] == [b'{"n": %d}' % i for i in range(1, 6)]
    assert server.connections == 1
    assert server.requests[0] == b"GET /x/0 HTTP/1.1"


async def test_concurrent_requests_open_parallel_connections_up_to_the_limit() -> None:
    async with serving(keep_alive) as server:
        pool = ConnectionPool("127.0.0.1", server.port, ssl_context=None, max_connections=3)
        try:
            await asyncio.gather(*(pool.request("GET", "/", []) for _ in range(12)))
        finally:
            await pool.close()
    assert 1 <= server.connections <= 3
    assert len(server.requests) == 12


async def test_a_get_on_a_connection_the_server_closed_is_tried_again() -> None:
    async with serving(one_per_connection_without_saying_so) as server:
        pool = ConnectionPool("127.0.0.1", server.port, ssl_context=None)
        try:
            await pool.request("GET", "/a", [])
            await asyncio.sleep(0.05)  # the hang-up may or may not have been seen by now
            await pool.request("GET", "/b", [])
        finally:
            await pool.close()
    assert server.requests == [b"GET /a HTTP/1.1", b"GET /b HTTP/1.1"]
    assert server.connections == 2


async def test_a_write_on_a_stale_connection_is_not_replayed() -> None:
    """A PATCH whose connection died under it may have been processed: the caller decides."""
    async with serving(one_per_connection_without_saying_so) as server, stale_pool(server) as pool:
        with pytest.raises(TransportError) as caught:
            await pool.request("PATCH", "/b", [], b"{}")
    assert caught.value.sent and not caught.value.answered


async def test_a_cancelled_request_closes_its_connection() -> None:
    async def slow_then_fast(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        while True:
            line = await read_request(reader)
            server.requests.append(line)
            if b"/slow" in line:
                await asyncio.sleep(10)
            writer.write(ok())
            await writer.drain()

    async with serving(slow_then_fast) as server:
        pool = ConnectionPool("127.0.0.1", server.port, ssl_context=None)
        try:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    await pool.request("GET", "/slow", [])
            answer = await pool.request("GET", "/fast", [])
        finally:
            await pool.close()
    assert answer.status == 200
    assert server.connections == 2  # the slow connection was not handed out again


async def test_refused_connection_is_not_sent() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        pool = ConnectionPool("127.0.0.1", port, ssl_context=None)
        with pytest.raises(TransportError) as caught:
            await pool.request("POST", "/", [], b"{}")
    assert not caught.value.sent
    assert f"127.0.0.1:{port}" in str(caught.value)


async def test_a_dialer_carries_the_connections() -> None:
    dials: list[tuple[str, int]] = []
    async with serving(keep_alive) as server:
        async def dialer(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            dials.append((host, port))
            return await asyncio.open_connection("127.0.0.1", server.port)

        pool = ConnectionPool("member.invalid", 6443, ssl_context=None, dialer=dialer)
        try:
            await pool.request("GET", "/1", [])
            await pool.request("GET", "/2", [])
        finally:
            await pool.close()
    assert dials == [("member.invalid", 6443)]


async def test_chunked_answers_and_errors_through_kube_client() -> None:
    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        while True:
            line = await read_request(reader)
            server.requests.append(line)
            if b"/missing" in line:
                body = b'{"kind":"Status","code":404,"reason":"NotFound","message":"x not found"}'
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                             b"6\r\n{\"a\": \r\n2\r\n1}\r\n0\r\n\r\n")
            await writer.drain()

    async with serving(chunked) as server:
        credentials = ClusterCredentials.from_token(server=f"http://127.0.0.1:{server.port}/prefix",
                                                    token="t0ken", ca_bundle=None)
        async with KubeClient(credentials) as client:
            assert await client.request("GET", "/api/v1/a", params={"labelSelector": "x=y,z"}) == {"a": 1}
            with pytest.raises(Exception, match="x not found"):
                await client.request("GET", "/missing")
    assert server.requests[0] == b"GET /prefix/api/v1/a?labelSelector=x%3Dy%2Cz HTTP/1.1"
    assert server.connections == 1


async def test_kube_client_reports_a_write_it_cannot_confirm_as_sent() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        server.requests.append(await read_request(reader))  # read it, never answer

    async with serving(hang_up) as server:
        credentials = ClusterCredentials.from_token(server=f"http://127.0.0.1:{server.port}",
                                                    token="t", ca_bundle=None)
        async with KubeClient(credentials, connect=ConnectOptions(connect_timeout_s=2)) as client:
            with pytest.raises(Unreachable) as caught:
                await client.request("POST", "/api/v1/namespaces", body={}, timeout_s=5)
    assert caught.value.request_sent
    assert len(server.requests) == 1  # a write is never repeated when it may have landed


async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
    """A watch-like answer: chunked lines, one every few milliseconds, then the end."""
    while True:
        server.requests.append(await read_request(reader))
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in (b'{"n": 1}\r', b'\n{"n": 2}\n{"n"', b': 3}\n'):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def test_streamed_answers_arrive_in_pieces_and_free_the_connection_when_read() -> None:
    async with serving(trickle) as server:
        pool = ConnectionPool("127.0.0.1", server.port, ssl_context=None)
        try:
            answer = await pool.open("GET", "/watch", [])
            pieces = [piece async for piece in answer.chunks()]
            answer.close()
            assert b"".join(pieces) == b'{"n": 1}\r\n{"n": 2}\n{"n": 3}\n'
            assert len(pieces) >= 2  # it did not wait for the end
            again = await pool.open("GET", "/watch", [])
            await again.read()
            again.close()
            assert server.connections == 1  # read to the end: reused

            early = await pool.open("GET", "/watch", [])
            async for _ in early.chunks():
                break
            early.close()
            last = await pool.open("GET", "/watch", [])
            await last.read()
            last.close()
            assert server.connections == 2  # closed before the end: not reused
        finally:
            await pool.close()


async def test_kube_client_stream_lines_across_chunk_boundaries() -> None:
    async with serving(trickle) as server:
        credentials = ClusterCredentials.from_token(server=f"http://127.0.0.1:{server.port}",
                                                    token="t", ca_bundle=None)
        async with KubeClient(credentials) as client, client.stream("GET", "/w") as raw:
            assert raw.status_code == 200
            assert raw.headers.get("Transfer-Encoding") == "chunked"
            lines = [line async for line in raw.lines(idle_timeout_s=5)]
    assert lines == ['{"n": 1}', '{"n": 2}', '{"n": 3}']


async def test_bytes_sent_while_idle_never_answer_the_next_request() -> None:
    async def late_408(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        server.requests.append(await read_request(reader))
        writer.write(ok(b'{"first": true}'))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(5)  # keeps the connection open: only the stray bytes tell

    async with serving(late_408) as server:
        pool = ConnectionPool("127.0.0.1", server.port, ssl_context=None)
        try:
            await pool.request("GET", "/a", [])
            await asyncio.sleep(0.2)
            answer = await pool.request("POST", "/b", [], b"{}")
        finally:
            await pool.close()
    assert answer.status == 200 and answer.body == b'{"first": true}'
    assert server.requests == [b"GET /a HTTP/1.1", b"POST /b HTTP/1.1"]
    assert server.connections == 2


async def test_a_stream_on_a_connection_the_server_closed_is_opened_again() -> None:
    async with serving(one_per_connection_without_saying_so) as server, stale_pool(server) as pool:
        answer = await pool.open("GET", "/watch", [])
        body = await answer.read()
        answer.close()
    assert answer.status == 200 and body == b"{}"
    assert server.requests == [b"GET /a HTTP/1.1", b"GET /watch HTTP/1.1"]


async def test_stream_lines_split_only_at_newlines() -> None:
    # NEL and LINE SEPARATOR inside a value, \r\n split over chunks, a long line in pieces, an
    # empty line, and a two-byte character split over chunks in a last line without \n
    raw = [p.encode() for p in ('{"v": "a\u0085b\u2028c"}\r', "\n", "x" * 5000, "y" * 5000 + "\n\n")]
    raw += ["é".encode()[:1], "é".encode()[1:] + b"tail"]

    async def odd_lines(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        server.requests.append(await read_request(reader))
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in raw:
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            await asyncio.sleep(0.005)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async with serving(odd_lines) as server:
        credentials = ClusterCredentials.from_token(server=f"http://127.0.0.1:{server.port}",
                                                    token="t", ca_bundle=None)
        async with KubeClient(credentials) as client, client.stream("GET", "/w") as stream:
            lines = [line async for line in stream.lines(idle_timeout_s=5)]
    assert lines == ['{"v": "a\u0085b\u2028c"}', "x" * 5000 + "y" * 5000, "", "étail"]
