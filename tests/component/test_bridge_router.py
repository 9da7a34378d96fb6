"""The routing proxy on loopback: an "original" server, two developers' local programs reached
through parked connections (the developer side's `ParkedPool` over a `DirectChannel`), and
requests routed one by one on keep-alive connections."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

from tether.bridge import router as router_module
from tether.bridge import routing
from tether.bridge.channel import DirectChannel
from tether.bridge.parking import ParkedPool, local_handler
from tether.bridge.router import Router
from tether.net import http1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def http_server(label: str) -> tuple[asyncio.AbstractServer, int]:
    """Answers every request with `label path`, keep-alive; echoes raw bytes after `RAW`."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if head.startswith(b"PRI"):  # h2c: say who got the connection
                    writer.write(label.encode() + b" h2")
                    await writer.drain()
                    return
                if head.startswith(b"RAW"):
                    writer.write(label.encode() + b" raw " + head)
                    await writer.drain()
                    return
                request = http1.parse_request_head(head[:-4])
                body = b""
                if "content-length" in request.headers:
                    body = await reader.readexactly(int(request.headers["content-length"]))
                payload = f"{label} {request.target} {len(body)}".encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(payload), payload))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@dataclass
class Setup:
    router: Router
    port: int
    pools: dict[str, ParkedPool]
    tasks: dict[str, asyncio.Task[None]]


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(3000):  # 30 s
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def stop_pool(setup: Setup, name: str) -> None:
    task = setup.tasks[name]
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    original, original_port = await http_server("original")
    alice, alice_port = await http_server("alice")
    bob, bob_port = await http_server("bob")
    listen, park = free_port(), free_port()
    router = Router({listen: original_port}, lambda: ["127.0.0.1"])
    router.set_routes({"alice": (routing.token_digest("ta"), False), "bob": (routing.token_digest("tb"), False)})
    await router.start("127.0.0.1", park)
    channel = DirectChannel()
    pools = {name: ParkedPool(lambda: channel.open_tcp("127.0.0.1", park), name, token, port,
                              local_handler(port), size=2)
             for name, token, port in (("alice", "ta", alice_port), ("bob", "tb", bob_port))}
    tasks = {name: asyncio.create_task(pool.run()) for name, pool in pools.items()}
    # until its developer has parked, a route's requests go to the original (tested below)
    await until(lambda: all(router.routes[name].parked for name in pools), "both developers parked")
    yield Setup(router, listen, pools, tasks)
    for task in tasks.values():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await router.aclose()
    for server in (original, alice, bob):
        server.close()


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: str,
                   headers: str = "", body: bytes = b"") -> str:
    length = f"Content-Length: {len(body)}\r\n" if body else ""
    writer.write(f"GET {target} HTTP/1.1\r\nHost: s\r\n{headers}{length}\r\n".encode() + body)
    await writer.drain()
    return await read_answer(reader)


async def read_answer(reader: asyncio.StreamReader) -> str:
    parser = http1.ResponseParser()
    answer = None
    while answer is None:
        data = await reader.read(65536)
        assert data, "connection closed before the answer"
        answer = parser.feed(data)
    return answer.body.decode()


async def test_requests_on_one_connection_go_each_to_their_destination(setup: Setup) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
    assert await exchange(reader, writer, "/1") == "original /1 0"
    assert await exchange(reader, writer, "/2", "kubernetes-route-as: alice\r\n") == "alice /2 0"
    assert await exchange(reader, writer, "/3", "kubernetes-route-as: bob\r\n", b"xyz") == "bob /3 3"
    assert await exchange(reader, writer, "/4", "baggage: k=v,kubernetes-route-as=alice\r\n") == "alice /4 0"
    assert await exchange(reader, writer, "/5", "kubernetes-route-as: carol\r\n") == "original /5 0"
    writer.close()
    assert setup.router.counts() == {"alice": 2, "bob": 1}


async def test_pipelined_requests_are_answered_in_order(setup: Setup) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
    writer.write(b"GET /a HTTP/1.1\r\nHost: s\r\nkubernetes-route-as: alice\r\n\r\n"
                 b"GET /b HTTP/1.1\r\nHost: s\r\n\r\n")
    await writer.drain()
    answers: list[str] = []
    data = b""
    while len(answers) < 2:
        parser = http1.ResponseParser()
        answer = parser.feed(data) if data else None
        if answer is None:
            data += await reader.read(65536)
            continue
        answers.append(answer.body.decode())
        data = parser.take_leftover()
    assert answers == ["alice /a 0", "original /b 0"]
    writer.close()


async def test_non_http_bytes_go_to_the_original(setup: Setup) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
    writer.write(b"RAW hello\r\n\r\n")
    await writer.drain()
    assert (await reader.read()).startswith(b"original raw RAW hello")
    writer.close()


async def test_all_route_takes_every_connection(setup: Setup) -> None:
    setup.router.set_routes({"alice": (routing.token_digest("ta"), True)})
    reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
    assert await exchange(reader, writer, "/x") == "alice /x 0"
    writer.write(b"RAW x\r\n\r\n")  # spliced as bytes: the developer's program sees them
    await writer.drain()
    assert (await reader.read()).startswith(b"alice raw")
    writer.close()


async def test_many_requests_without_the_header_all_succeed(setup: Setup) -> None:
    async def client() -> int:
        reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
        ok = 0
        for i in range(100):
            ok += (await exchange(reader, writer, f"/{i}")) == f"original /{i} 0"
        writer.close()
        return ok

    assert sum(await asyncio.gather(*(client() for _ in range(5)))) == 500


async def test_a_route_whose_developer_never_parked_goes_to_the_original(setup: Setup) -> None:
    setup.router.set_routes({"alice": (routing.token_digest("ta"), False),
                             "dave": (routing.token_digest("td"), False)})
    reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
    assert await exchange(reader, writer, "/d", "kubernetes-route-as: dave\r\n") == "original /d 0"
    writer.close()


async def test_a_busy_developer_is_waited_for_then_502(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    # dave is here (a parked connection of his was handed out and is open) but has none free
    monkeypatch.setattr(router_module, "PARK_WAIT_S", 0.3)
    setup.router.set_routes({"dave": (routing.token_digest("td"), False)})
    park_port = setup.router._servers[-1].sockets[0].getsockname()[1]
    held, held_writer = await asyncio.open_connection("127.0.0.1", park_port)
    held_writer.write(routing.encode_park("dave", "td"))
    await held_writer.drain()
    assert await held.readline() == b"OK\n"
    _, first_writer = await asyncio.open_connection("127.0.0.1", setup.port)
    first_writer.write(b"GET /1 HTTP/1.1\r\nHost: s\r\nkubernetes-route-as: dave\r\n\r\n")
    await first_writer.drain()
    assert (await held.readline()).startswith(b"GO ")  # dave's only connection now carries /1
    reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
    writer.write(b"GET /2 HTTP/1.1\r\nHost: s\r\nkubernetes-route-as: dave\r\n\r\n")
    await writer.drain()
    assert (await reader.read()).startswith(b"HTTP/1.1 502")
    for w in (writer, first_writer, held_writer):
        w.close()


async def test_a_developer_gone_sends_their_requests_to_the_original_at_once(setup: Setup) -> None:
    # the client stopped (or was killed): its parked connections closed, the session object is
    # still there until the router next looks; requests with the header must not fail meanwhile
    reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
    assert await exchange(reader, writer, "/a", "kubernetes-route-as: alice\r\n") == "alice /a 0"
    writer.close()
    setup.pools["alice"].handler = local_handler(free_port())  # nothing more is served
    await stop_pool(setup, "alice")
    assert "alice" in setup.router.routes
    for i in range(3):
        reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
        # before, the router waited PARK_WAIT_S for a park that never came, then answered 502
        answer = await exchange(reader, writer, f"/{i}", "kubernetes-route-as: alice\r\n")
        assert answer == f"original /{i} 0"
        writer.close()


async def test_leaving_loses_no_request(setup: Setup) -> None:
    # requests with the header in a loop, on new and on keep-alive connections, right across
    # the developer's leave: each answered, by alice before and by the originals after
    answers: list[str] = []
    done = asyncio.Event()

    async def loop(keep_alive: bool) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
        i = 0
        while not done.is_set() or i < 20:
            if not keep_alive:
                reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
            answers.append(await exchange(reader, writer, f"/{i}", "kubernetes-route-as: alice\r\n"))
            if not keep_alive:
                writer.close()
            i += 1
        writer.close()

    clients = [asyncio.create_task(loop(keep_alive)) for keep_alive in (False, False, True, True)]
    await until(lambda: sum(a.startswith("alice") for a in answers) >= 20, "20 answers from alice")
    await setup.pools["alice"].leave()
    await stop_pool(setup, "alice")
    done.set()
    await asyncio.gather(*clients)  # `exchange` asserts every answer arrived
    assert all(a.startswith(("alice ", "original ")) for a in answers), answers
    assert answers[-1].startswith("original ")
    assert not any(setup.pools["alice"]._tasks)


def park_port(setup: Setup) -> int:
    return int(setup.router._servers[-1].sockets[0].getsockname()[1])


async def park_port_line(setup: Setup, line: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", park_port(setup))
    writer.write(line)
    await writer.drain()
    answer = await reader.readline()
    writer.close()
    return answer


@pytest.mark.parametrize("token", ["stolen", "tb"], ids=["made-up", "bobs"])
@pytest.mark.parametrize("line", [routing.encode_leave, routing.encode_park], ids=["leave", "park"])
async def test_a_park_port_line_needs_the_routes_own_token(setup: Setup, line: Callable[[str, str], bytes],
                                                            token: str) -> None:
    """A leave or a park for alice's route with another token, another developer's included, is
    refused and alice's route keeps being served."""
    reader, writer = await asyncio.open_connection("127.0.0.1", park_port(setup))
    writer.write(line("alice", token))
    await writer.drain()
    assert (await reader.readline()).startswith(b"ERR wrong token")
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
    assert await exchange(reader, writer, "/a", "kubernetes-route-as: alice\r\n") == "alice /a 0"
    writer.close()


async def test_a_developers_leave_releases_only_their_own_route(setup: Setup) -> None:
    assert await park_port_line(setup, routing.encode_leave("bob", "tb")) == b"OK\n"
    reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
    assert await exchange(reader, writer, "/b", "kubernetes-route-as: bob\r\n") == "original /b 0"
    assert await exchange(reader, writer, "/a", "kubernetes-route-as: alice\r\n") == "alice /a 0"
    writer.close()
    assert setup.router.routes["alice"].parked and not setup.router.routes["alice"].leaving


async def test_a_leave_of_an_unregistered_route_is_refused(setup: Setup) -> None:
    assert (await park_port_line(setup, routing.encode_leave("carol", "tc"))).startswith(b"ERR route 'carol' is not")


@pytest.mark.parametrize("garbage", [
    b"GET / HTTP/1.1\r\nbad header line\r\n\r\n",
    b"GET / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
    b"GET / HTTP/1.1\r\nX: " + b"a" * 300_000 + b"\r\n\r\n",
])
async def test_bad_requests_get_400_and_the_router_keeps_serving(setup: Setup, garbage: bytes) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
    writer.write(garbage)
    await writer.drain()
    answer = await reader.read()
    assert answer.startswith((b"HTTP/1.1 400", b"HTTP/1.1 431")), answer[:80]
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
    assert await exchange(reader, writer, "/after") == "original /after 0"
    writer.close()


def h2c_request(headers: list[tuple[str, str]]) -> bytes:
    import hpack

    block = hpack.Encoder().encode([(":method", "GET"), (":scheme", "http"), (":path", "/"),
                                    (":authority", "stats-api"), *headers])
    settings = (0).to_bytes(3, "big") + bytes([0x4, 0]) + (0).to_bytes(4, "big")
    frame = len(block).to_bytes(3, "big") + bytes([0x1, 0x4 | 0x1]) + (1).to_bytes(4, "big") + block
    return routing.H2_PREFACE + settings + frame


@pytest.mark.parametrize("headers, expected", [
    ([("kubernetes-route-as", "alice")], b"alice h2"),
    ([("baggage", "kubernetes-route-as=bob")], b"bob h2"),
    ([], b"original h2"),
])
async def test_h2c_connections_go_where_their_first_request_goes(setup: Setup, headers: list[tuple[str, str]],
                                                                 expected: bytes) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
    writer.write(h2c_request(headers))
    await writer.drain()
    assert await reader.read() == expected
    writer.close()


async def test_a_stopped_pool_has_finished_its_connections(setup: Setup) -> None:
    # `Holding.hold` ends the session right after the pool stops: no served connection may
    # still be running (or be left to the event loop's shutdown) by then
    setup.router.set_routes({"alice": (routing.token_digest("ta"), False), "bob": (routing.token_digest("tb"), False),
                             "carol": (routing.token_digest("tc"), False)})
    alice = setup.pools["alice"]
    pool = ParkedPool(alice.open_router, "carol", "tc", alice.port, alice.handler, size=2)
    running = asyncio.create_task(pool.run())
    await until(lambda: bool(setup.router.routes["carol"].parked), "carol parked")
    reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
    for _ in range(3):  # keep-alive: the developer's side stays open, spliced, after each answer
        assert (await exchange(reader, writer, "/x", "kubernetes-route-as: carol\r\n")).startswith("alice")
    served = list(pool._tasks)
    assert served
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running
    assert all(task.done() for task in served)
    writer.close()


async def test_a_dropped_route_is_released_only_after_its_request_in_progress(setup: Setup) -> None:
    # `tether leave` from elsewhere: the router drops the route at once, but says "released"
    # (and so lets the session and the developer's agent be deleted) only once nothing is
    # handed to the developer any more
    reader, writer = await asyncio.open_connection("127.0.0.1", setup.port)
    writer.write(b"GET /slow HTTP/1.1\r\nHost: s\r\nkubernetes-route-as: alice\r\nContent-Length: 6\r\n\r\nabc")
    await writer.drain()
    await until(lambda: bool(setup.router.routes["alice"].busy), "alice's request in progress")
    setup.router.set_routes({"bob": (routing.token_digest("tb"), False)})
    assert "alice" not in setup.router.routes
    assert not setup.router.released("alice")
    writer.write(b"def")
    await writer.drain()
    assert await read_answer(reader) == "alice /slow 6"
    await until(lambda: setup.router.released("alice"), "alice released after her last request")
    assert setup.router.released("carol")  # never routed: nothing to wait for
    writer.close()
