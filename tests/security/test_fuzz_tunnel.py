"""Fuzzing the tunnel with hypothesis: the ANP packet decoder, the HTTP-CONNECT parser, both state
machines, a real agent driven by a hostile server, and a real server's listeners fed garbage.

Each test prints how many inputs it tried (on the terminal, whatever `-s` says). Runs are
derandomized, so a failure reproduces. The I/O tests run the tunnel in a background event loop on
127.0.0.1 and keep every dial on loopback: the fuzzed agent may dial only `localhost:<echo>`
(a name pattern, so no other name is ever resolved), and frames that decode to a DIAL_REQ for
any other name are dropped before they are sent.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import sys
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "component"))
from test_tunnel_common import (
    HOST,
    agent_config,
    echo_server,
    eventually,
    running,
    server_config,
)

from tether.tunnel import client
from tether.tunnel import packets as p
from tether.tunnel.agent import AgentConfig, TunnelAgent
from tether.tunnel.connect import ConnectError, ConnectPolicy, ConnectRequest, parse_head, token_key
from tether.tunnel.destinations import DestinationError, parse_destination, parse_patterns
from tether.tunnel.routing import AgentIdentifiers
from tether.tunnel.server import TunnelServer
from tether.tunnel.state import AgentState, ServerState

T = TypeVar("T")
# Derandomized: every run tries the same cases, so a larger count buys no new coverage over time,
# only CI minutes (2,000 cost most of a minute of every run).
FAST = settings(max_examples=600, database=None, derandomize=True, deadline=None,
                suppress_health_check=list(HealthCheck))
IO = settings(max_examples=200, database=None, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))


def report(capsys: pytest.CaptureFixture[str], what: str, count: int) -> None:
    with capsys.disabled():
        print(f"\n[fuzz] {what}: {count} inputs tried, no crash")


# -- strategies --------------------------------------------------------------------------------

ints = st.one_of(st.integers(0, 8), st.integers(-(2**63), 2**63 - 1),
                 st.sampled_from([0, 1, -1, 2**31, 2**63 - 1, -(2**63)]))
texts = st.one_of(st.text(max_size=40), st.sampled_from(["", "tcp", "udp", "tcp4", "tcp6"]))
addresses = st.one_of(
    st.text(max_size=60),
    st.builds(lambda h, port: f"{h}:{port}", st.sampled_from(
        ["127.0.0.1", "[::1]", "::1", "10.0.0.1", "localhost", "", "[", "0.0.0.0", "999.1.1.1"]),
        st.one_of(st.integers(-10, 70000), st.sampled_from([0, 65535, 65536, 99999, 2**64]))),
)
payloads = st.one_of(
    st.builds(p.DialRequest, texts, addresses, ints),
    st.builds(p.DialResponse, texts, ints, ints),
    st.builds(p.Data, ints, texts, st.binary(max_size=64)),
    st.builds(p.CloseRequest, ints),
    st.builds(p.CloseResponse, texts, ints),
    st.builds(p.CloseDial, ints),
    st.just(p.Drain()),
    st.builds(p.WindowUpdate, ints, ints),
)
packets = st.builds(p.Packet.of, payloads)
unknown_packets = st.builds(lambda t: p.Packet(t, None), st.integers(7, 99) | st.integers(101, 10**6))


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid encoding of some packet with a few bytes flipped, cut, inserted or repeated."""
    buf = bytearray(p.encode(draw(packets)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "delete", "repeat", "varint"]))
        at = draw(st.integers(0, len(buf)))
        if op == "flip" and buf:
            i = min(at, len(buf) - 1)
            buf[i] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del buf[at:]
        elif op == "insert":
            buf[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del buf[at:at + draw(st.integers(1, 4))]
        elif op == "repeat":
            buf += buf[at:]
        elif op == "varint":  # an absurd length or value where a varint was
            buf[at:at] = b"\xff" * draw(st.integers(1, 11))
    return bytes(buf)


frames = st.one_of(st.binary(max_size=200), mutated(), packets.map(p.encode),
                   unknown_packets.map(p.encode))


# -- the decoder -------------------------------------------------------------------------------

def _decodes_or_refuses(buf: bytes) -> None:
    try:
        packet = p.decode(buf)
    except p.DecodeError:
        assert isinstance(p.decode_lenient(buf), p.Malformed)
        return
    assert isinstance(packet, p.Packet)
    p.encode(packet)  # whatever decodes can be sent on


def test_decoder_arbitrary_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    count = 0

    @FAST
    @given(st.binary(max_size=600))
    def check(buf: bytes) -> None:
        nonlocal count
        count += 1
        _decodes_or_refuses(buf)

    check()
    report(capsys, "packet decoder, arbitrary bytes", count)


def test_decoder_mutations_of_every_packet_type(capsys: pytest.CaptureFixture[str]) -> None:
    count = 0

    @FAST
    @given(packets, mutated())
    def check(packet: p.Packet, buf: bytes) -> None:
        nonlocal count
        count += 2
        assert p.decode(p.encode(packet)) == packet  # the unmutated encoding round-trips
        _decodes_or_refuses(buf)

    check()
    report(capsys, "packet decoder, valid encodings of every type and mutations of them", count)


# -- the CONNECT parser ------------------------------------------------------------------------

header_names = st.one_of(st.sampled_from(["Host", "Content-Length", "Transfer-Encoding",
                                          "Proxy-Authorization", "X-A"]),
                         st.text(max_size=12))
lengths = st.one_of(st.integers(-(10**30), 10**30).map(str),
                    st.sampled_from(["-1", "0", "00", "+1", " 1", "1e9", "0x10", "", "9" * 5000]))
header_values = st.one_of(st.text(max_size=40), lengths,
                          st.sampled_from(["Bearer x", "Basic %%%", "Basic " + "A" * 1000]))


@st.composite
def heads(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        return draw(st.binary(max_size=300)) + b"\r\n\r\n"
    method = draw(st.sampled_from(["CONNECT", "GET", "connect", "CONNECT ", ""]) | st.text(max_size=8))
    target = draw(addresses | st.sampled_from(["127.0.0.1:443", "[::1]:6443", "/", "*"]))
    version = draw(st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2", "http/1.1", ""]) |
                   st.text(max_size=8))
    headers = draw(st.lists(st.tuples(header_names, header_values), max_size=8))
    sep = draw(st.sampled_from([": ", ":", " : ", "\r\n ", "\n"]))
    lines = [f"{method} {target} {version}", *(f"{k}{sep}{v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogatepass")


def test_connect_parser(capsys: pytest.CaptureFixture[str]) -> None:
    count = 0
    policy = ConnectPolicy({token_key("t"): frozenset({parse_destination("127.0.0.1:443")})},
                           parse_patterns("10.0.0.0/8:443"))

    @FAST
    @given(heads())
    def check(head: bytes) -> None:
        nonlocal count
        count += 1
        try:
            request = parse_head(head)
        except ConnectError as refused:
            assert refused.status in (400, 405), refused.status
            return
        assert isinstance(request, ConnectRequest)
        assert 1 <= request.destination.port <= 65535
        assert all(v == "0" for v in request.header("content-length"))
        assert not request.header("transfer-encoding")
        try:
            policy.decide(request)
        except ConnectError as refused:
            assert refused.status in (403, 407), refused.status

    check()
    for length in ("-1", "-99999999999999999999", "99999999999999999999999", "1", "abc"):
        head = f"CONNECT 127.0.0.1:443 HTTP/1.1\r\nContent-Length: {length}\r\n\r\n".encode()
        with pytest.raises(ConnectError) as refused:
            parse_head(head)
        assert refused.value.status == 400
    report(capsys, "HTTP-CONNECT parser and policy", count)


# -- the state machines ------------------------------------------------------------------------

agent_events = st.lists(st.one_of(
    st.tuples(st.just("packet"), packets | unknown_packets),
    st.tuples(st.just("dial_done"), st.integers(0, 8), st.sampled_from(["", "refused"])),
    st.tuples(st.just("target_closed"), st.integers(0, 8)),
    st.tuples(st.just("stream_lost")),
), max_size=30)


def test_agent_state_machine_never_raises(capsys: pytest.CaptureFixture[str]) -> None:
    count = 0

    @FAST
    @given(agent_events, st.booleans())
    def check(events: list[tuple[Any, ...]], restricted: bool) -> None:
        nonlocal count
        count += 1
        state = AgentState(parse_patterns("127.0.0.0/8:443,*.svc") if restricted else ())
        for event in events:
            if event[0] == "packet":
                state.server_packet(event[1])
            elif event[0] == "dial_done":
                state.dial_done(event[1], event[2])
            elif event[0] == "target_closed":
                state.target_closed(event[1])
            else:
                state.stream_lost()
            for random, cid in state.dialing.items():
                assert state.conns[cid].phase == "dialing" and state.conns[cid].random == random

    check()
    report(capsys, "agent state machine, event sequences", count)


server_events = st.lists(st.one_of(
    st.tuples(st.just("agent_packet"), st.integers(1, 2), packets | unknown_packets),
    st.tuples(st.just("frontend_packet"), st.integers(10, 12), packets | unknown_packets),
    st.tuples(st.just("frontend_opened"), st.integers(10, 12)),
    st.tuples(st.just("frontend_closed"), st.integers(10, 12)),
    st.tuples(st.just("agent_disconnected"), st.integers(1, 2)),
    st.tuples(st.just("expire"), st.floats(0, 100)),
), max_size=30)


def test_server_state_machine_never_raises(capsys: pytest.CaptureFixture[str]) -> None:
    count = 0

    @FAST
    @given(server_events)
    def check(events: list[tuple[Any, ...]]) -> None:
        nonlocal count
        count += 1
        state = ServerState(dial_timeout_s=5.0)
        for backend in (1, 2):
            state.agent_connected(backend, f"a{backend}", AgentIdentifiers())
        for event in events:
            kind, *args = event
            getattr(state, kind)(*args)

    check()
    report(capsys, "server state machine, event sequences", count)


# -- the real tunnel: served by the test's loop, fuzzed from a worker thread ---------------------

class OnLoop:
    """Hypothesis drives examples synchronously: it runs in a worker thread (`asyncio.to_thread`)
    and hands coroutines to the test's event loop, where the tunnel runs."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)


# -- the agent, driven by a hostile server ------------------------------------------------------

class HostileServer:
    """`/AgentService/Connect` that sends whatever frames it is given and records the agent's
    packets."""

    def __init__(self) -> None:
        self.outbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.inbox: asyncio.Queue[p.Packet | p.Malformed] = asyncio.Queue()
        self.server = grpc.aio.server()
        handler = grpc.stream_stream_rpc_method_handler(
            self._connect, request_deserializer=p.decode_lenient, response_serializer=bytes)
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "AgentService", {"Connect": handler}),))
        self.port = self.server.add_insecure_port(f"{HOST}:0")

    async def _connect(self, _requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.send_initial_metadata(((p.SERVER_ID_KEY, "hostile"), (p.SERVER_COUNT_KEY, "1"),
                                             (p.FLOW_CONTROL_KEY, "65536")))

        async def read() -> None:
            while isinstance(packet := await context.read(), p.Packet | p.Malformed):
                self.inbox.put_nowait(packet)

        reader = asyncio.create_task(read())
        try:
            while (frame := await self.outbox.get()) is not None:
                await context.write(frame)
        finally:
            reader.cancel()

    async def expect(self, match: Callable[[p.Packet], bool]) -> p.Packet:
        async with asyncio.timeout(30):
            while True:
                packet = await self.inbox.get()
                if isinstance(packet, p.Packet) and match(packet):
                    return packet


def _safe_for_loopback(frame: bytes) -> bool:
    """False for a frame the agent would take as a DIAL_REQ to a name other than localhost."""
    packet = p.decode_lenient(frame)
    if not isinstance(packet, p.Packet) or not isinstance(packet.payload, p.DialRequest):
        return True
    try:
        dest = parse_destination(packet.payload.address)
    except DestinationError:
        return True
    return dest.ip is not None or dest.host == "localhost"


async def test_agent_driven_by_a_hostile_server(capsys: pytest.CaptureFixture[str]) -> None:
    async with echo_server() as echo:
        hostile = HostileServer()
        await hostile.server.start()
        try:
            count = await _drive_agent(hostile, echo)
        finally:
            hostile.outbox.put_nowait(None)
            await hostile.server.stop(None)
    report(capsys, "agent packet handler, frames from a hostile server", count)


async def _drive_agent(hostile: HostileServer, echo: int) -> int:
    background = OnLoop()
    stop = asyncio.Event()
    config = AgentConfig(proxy_server_host=HOST, proxy_server_port=hostile.port, agent_id="fuzzed",
                         health_server_port=-1, admin_server_port=-1, sync_interval_s=0.2,
                         sync_interval_cap_s=1.0, probe_interval_s=0.1,
                         allowed_destinations=parse_patterns(f"localhost:{echo}"))
    agent = TunnelAgent(config)
    task = asyncio.create_task(agent.run(stop))
    await eventually(lambda: bool(agent.streams), 30, "the agent's stream")
    count = 0
    checks = iter(range(10**12, 10**13))

    async def serves(random: int) -> None:
        hostile.outbox.put_nowait(p.encode(p.dial_req(f"localhost:{echo}", random)))
        rsp = await hostile.expect(lambda q: isinstance(q.payload, p.DialResponse)
                                   and q.payload.random == random)
        assert isinstance(rsp.payload, p.DialResponse)
        assert not rsp.payload.error and rsp.payload.connect_id, rsp
        cid = rsp.payload.connect_id
        hostile.outbox.put_nowait(p.encode(p.data(cid, b"ping")))
        got = await hostile.expect(lambda q: isinstance(q.payload, p.Data) and q.payload.connect_id == cid)
        assert isinstance(got.payload, p.Data) and bytes(got.payload.data) == b"ping"
        hostile.outbox.put_nowait(p.encode(p.close_req(cid)))

    @IO
    @given(st.lists(frames, min_size=1, max_size=12))
    def check(batch: list[bytes]) -> None:
        nonlocal count
        sent = [f for f in batch if _safe_for_loopback(f)]
        count += len(sent)
        for frame in sent:
            hostile.outbox.put_nowait(frame)
        background.run(serves(next(checks)))
        assert not task.done(), task

    try:
        await asyncio.to_thread(check)
        assert agent.streams and not task.done()
        assert agent.metrics.counters.get("malformed_packets_total", {}).get((), 0) > 0
    finally:
        stop.set()
        async with asyncio.timeout(30):
            await task
    return count


# -- the server's listeners, fed garbage --------------------------------------------------------

TOKEN = "fuzz-proxy-token"
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
garbage = st.one_of(
    st.binary(max_size=400),
    heads(),
    st.builds(lambda b: H2_PREFACE + b, st.binary(max_size=200)),
    st.builds(lambda h, b: h + b, heads(), st.binary(max_size=200)),
)


async def connect_head(port: int, target: str, extra: str = "") -> tuple[
        bytes, asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(f"CONNECT {target} HTTP/1.1\r\n{extra}\r\n".encode())
    await writer.drain()
    return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20), reader, writer


def _throw(port: int, data: bytes) -> None:
    """Send `data`, half-close, read what comes back for a moment, close."""
    with socket.create_connection((HOST, port), timeout=10) as sock, contextlib.suppress(OSError):
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(0.2)
        while sock.recv(65536):
            pass


def _grpc_garbage(port: int, method: str, messages: list[bytes], agent_id: str | None) -> None:
    with grpc.insecure_channel(f"{HOST}:{port}") as channel:
        call = channel.stream_stream(method, request_serializer=bytes, response_deserializer=bytes)
        metadata = ((p.AGENT_ID_KEY, agent_id),) if agent_id else ()
        with contextlib.suppress(grpc.RpcError):
            for _ in call(iter(messages), metadata=metadata, timeout=30):
                pass


async def test_server_frontends_survive_garbage(capsys: pytest.CaptureFixture[str]) -> None:
    async with echo_server() as echo:
        policy = ConnectPolicy({token_key(TOKEN): frozenset({parse_destination(f"{HOST}:{echo}")})})
        async with running(server_config(plain_connect_port=0, connect_policy=policy)) as env:
            await env.add_agent(agent_config(env.server, health_server_port=-1, admin_server_port=-1))
            listeners, count = await _throw_garbage(env.server, echo)
            assert not env.task.done() and not env.agents[0][2].done()
    report(capsys, f"server listeners ({', '.join(listeners)}, gRPC streams), garbage", count)


async def _throw_garbage(server: TunnelServer, echo: int) -> tuple[list[str], int]:
    listeners = sorted(server.ports)
    count = 0

    @IO
    @given(st.sampled_from([*listeners, "grpc-proxy", "grpc-agent"]),
           st.lists(garbage, min_size=1, max_size=3), st.sampled_from([None, "fuzz-agent", ""]))
    def check(where: str, blobs: list[bytes], agent_id: str | None) -> None:
        nonlocal count
        count += len(blobs)
        if where == "grpc-proxy":
            _grpc_garbage(server.ports["server"], p.PROXY_METHOD, blobs, None)
        elif where == "grpc-agent":
            _grpc_garbage(server.ports["agent"], p.CONNECT_METHOD, blobs, agent_id)
        else:
            for blob in blobs:
                _throw(server.ports[where], blob)

    await asyncio.to_thread(check)
    await eventually(lambda: server.agent_ids() == ["agent-1"], 30, "fakes gone")
    # a valid CONNECT with the token still works; without it: 407; a gRPC dial works
    auth = base64.b64encode(f"x:{TOKEN}".encode()).decode()
    head, reader, writer = await connect_head(server.ports["plain-connect"], f"{HOST}:{echo}",
                                              f"Proxy-Authorization: Basic {auth}\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    writer.write(b"alive")
    assert await asyncio.wait_for(reader.readexactly(5), 20) == b"alive"
    writer.close()
    head, _, writer = await connect_head(server.ports["plain-connect"], f"{HOST}:{echo}")
    assert head.startswith(b"HTTP/1.1 407 "), head
    writer.close()
    reader, writer = await client.dial(f"{HOST}:{server.ports['server']}", HOST, echo, timeout_s=20)
    writer.write(b"grpc ok")
    assert await asyncio.wait_for(reader.readexactly(7), 20) == b"grpc ok"
    writer.close()
    return listeners, count
