"""`tether tunnel agent`: apiserver-network-proxy's proxy-agent, on grpc.aio.

The agent dials out to the server's agent port (`/AgentService/Connect`), announces `agentid` and
`agentidentifiers`, reads `serverid`/`servercount` from the initial metadata and keeps one stream
per server replica (a new TCP connection per attempt, duplicates by serverID closed), with ANP's
backoff: 1 s, factor 1.5, 10 % jitter, 10 s cap. The server pushes DIAL_REQ; every dial becomes a TCP
connection to the target with its own reader and writer, so a slow target stalls only itself.
With a tether server, `tether-window` credits bound what either side buffers per connection.
On the first SIGTERM the agent sends DRAIN on every stream and stops opening new ones
(`drain()`); `drained()` waits until its connections have closed, which the CLI bounds with
`--drain-timeout`.

Nothing the server sends can end the agent: every DIAL_REQ is validated by the state machine
before any socket call (and checked against `allowed_destinations`, resolving a name first when
only a network pattern can allow it, then dialling the checked address); a malformed message is
counted and skipped; an unexpected error while handling one packet, one target connection or
one server stream is logged and ends that packet, connection or stream only, and the agent
reconnects as after any stream loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import random
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from tether.tunnel import httpserve
from tether.tunnel import packets as p
from tether.tunnel.destinations import Pattern, allows
from tether.tunnel.metrics import AGENT_DIAL_BUCKETS, Registry
from tether.tunnel.routing import parse_identifiers
from tether.tunnel.state import (
    AgentAction,
    AgentState,
    CancelDial,
    CloseTarget,
    ReceiveWindow,
    Send,
    SendWindow,
    StartDial,
    TargetCredit,
    WriteTarget,
)
from tether.tunnel.tls import ClientTLS

log = logging.getLogger("tether.tunnel.agent")

READ_CHUNK = 256 * 1024
MAX_MESSAGE = 16 * 1024 * 1024
MAX_WINDOW = 1 << 30
HANDSHAKE_TIMEOUT_S = 10.0
DRAIN_TIMEOUT_S = 20.0
_FAMILIES = {"tcp": socket.AF_UNSPEC, "tcp4": socket.AF_INET, "tcp6": socket.AF_INET6}


@dataclass
class AgentConfig:
    proxy_server_host: str = "127.0.0.1"
    proxy_server_port: int = 8091
    tls: ClientTLS | None = None
    agent_id: str = field(default_factory=lambda: os.environ.get("PROXY_AGENT_ID") or str(uuid.uuid4()))
    agent_identifiers: str = ""
    health_server_host: str = ""
    health_server_port: int = 8093
    admin_bind_address: str = "127.0.0.1"
    admin_server_port: int = 8094
    sync_interval_s: float = 1.0
    sync_interval_cap_s: float = 10.0
    probe_interval_s: float = 1.0
    sync_forever: bool = False
    keepalive_time_s: float = 3600.0
    dial_timeout_s: float = 5.0
    window_bytes: int = 1024 * 1024  # offered to the server; 0 = plain ANP, no credits
    token_path: str = ""
    allowed_destinations: tuple[Pattern, ...] = ()  # empty: every valid destination


def go_dial_error(address: str, exc: BaseException) -> str:
    """Error text shaped like Go's, since servers map substrings to HTTP statuses."""
    if isinstance(exc, TimeoutError):
        return f"dial tcp {address}: i/o timeout"
    if isinstance(exc, socket.gaierror):
        return f"dial tcp: lookup {address.rsplit(':', 1)[0].strip('[]')}: no such host"
    if isinstance(exc, ConnectionRefusedError):
        return f"dial tcp {address}: connect: connection refused"
    if isinstance(exc, OSError) and exc.errno == 24:
        return f"dial tcp {address}: socket: too many open files"
    if isinstance(exc, OSError) and exc.strerror:
        return f"dial tcp {address}: connect: {exc.strerror.lower()}"
    return f"dial tcp {address}: {exc}"


class NotAllowed(Exception):
    """No address a name resolved to is on the allow-list."""


class Backoff:
    """wait.Backoff{Duration: base, Factor: 1.5, Jitter: 0.1, Cap: cap}."""

    def __init__(self, base_s: float, cap_s: float, rng: random.Random | None = None) -> None:
        self.base_s, self.cap_s = base_s, cap_s
        self.rng = rng or random.Random()
        self.current_s = base_s

    def next(self) -> float:
        delay = self.current_s + self.rng.random() * 0.1 * self.current_s
        self.current_s = min(self.current_s * 1.5, self.cap_s)
        return min(delay, self.cap_s * 1.1)

    def reset(self) -> None:
        self.current_s = self.base_s


class _Target:
    def __init__(self, window: int) -> None:
        self.queue: asyncio.Queue[p.Chunk | None] = asyncio.Queue()
        # The server may overshoot the window by one packet (its reads are up to 256 KiB).
        self.recv = ReceiveWindow(window or (8 * 1024 * 1024), max_chunk=1 << 20)
        self.send = SendWindow(window) if window else None
        self.credit = asyncio.Event()
        self.credit.set()
        self.closing = asyncio.Event()
        self.writer: asyncio.StreamWriter | None = None  # set while `_downstream` runs

    def write_now(self, chunk: p.Chunk) -> bool:
        """Write straight to the target when nothing is queued and its socket has caught up
        (what `_downstream` would do next, without waking it). False: queue it instead."""
        writer = self.writer
        if writer is None or not self.queue.empty() or self.closing.is_set() or writer.is_closing() \
                or writer.transport.get_write_buffer_size():
            return False
        writer.write(chunk)
        return True


class _ServerStream:
    """One agent↔server stream: its state machine and its target connections."""

    def __init__(self, agent: TunnelAgent, call: Any, channel: grpc.aio.Channel, server_id: str,
                 window: int) -> None:
        self.agent = agent
        self.call = call
        self.channel = channel
        self.server_id = server_id
        self.window = window
        self.state = AgentState(agent.config.allowed_destinations)
        self.out: asyncio.Queue[p.Packet | None] = asyncio.Queue()
        self.targets: dict[int, _Target] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self._tg: asyncio.TaskGroup | None = None

    def send(self, packet: p.Packet) -> None:
        self.agent.metrics.packet("to_server", packet.type_name)
        self.out.put_nowait(packet)

    async def serve(self) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                writer = tg.create_task(self._writer())
                try:
                    await self._reader()
                finally:
                    self._apply(self.state.stream_lost())
                    for task in self.tasks.values():
                        task.cancel()
                    writer.cancel()
        except* (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError, p.DecodeError,
                 ConnectionError):
            pass
        finally:
            self.call.cancel()
            await self.channel.close(grace=None)

    async def _reader(self) -> None:
        while True:
            packet = await self.call.read()
            if isinstance(packet, p.Malformed):
                self.agent.metrics.inc("malformed_packets_total")
                log.debug("server %s sent a malformed packet (%d bytes): %s", self.server_id,
                          packet.size, packet.reason)
                continue
            if packet is grpc.aio.EOF or not isinstance(packet, p.Packet):
                return
            self.agent.metrics.packet("from_server", packet.type_name)
            try:
                self._apply(self.state.server_packet(packet))
            except Exception:  # one packet's bug must not end the stream, let alone the agent
                self.agent.metrics.inc("packet_handling_errors_total")
                log.exception("handling a %s packet from server %s failed", packet.type_name,
                              self.server_id)

    async def _writer(self) -> None:
        while (packet := await self.out.get()) is not None:
            await self.call.write(packet)

    def _apply(self, actions: list[AgentAction]) -> None:
        for action in actions:
            if isinstance(action, Send):
                self.send(action.packet)
            elif isinstance(action, StartDial):
                assert self._tg is not None
                target = _Target(self.window)
                self.targets[action.connect_id] = target
                self.tasks[action.connect_id] = self._tg.create_task(self._connection(action, target))
            elif isinstance(action, CancelDial):
                task = self.tasks.get(action.connect_id)
                if task is not None:
                    task.cancel()
            elif isinstance(action, WriteTarget):
                target_or_none = self.targets.get(action.connect_id)
                if target_or_none is not None and not target_or_none.closing.is_set():
                    if not target_or_none.recv.received(len(action.data)):
                        target_or_none.closing.set()  # the server overran its window
                    if target_or_none.write_now(action.data):
                        self._target_consumed(action.connect_id, target_or_none, len(action.data))
                    else:
                        target_or_none.queue.put_nowait(action.data)
            elif isinstance(action, CloseTarget):
                found = self.targets.get(action.connect_id)
                if found is not None:
                    found.closing.set()
            elif isinstance(action, TargetCredit):
                found = self.targets.get(action.connect_id)
                if found is not None and found.send is not None:
                    found.send.credit(action.credit)
                    if found.send.can_send():
                        found.credit.set()

    async def _open(self, dial: StartDial) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Connect to a validated destination; with `check_resolved`, to the first address the
        name resolves to that the allow-list permits."""
        dest = dial.destination
        if dest is None:  # the state machine always sets it; refuse rather than guess
            raise NotAllowed("no validated destination")
        family = _FAMILIES.get(dial.protocol, socket.AF_UNSPEC)
        host = dest.host
        if dial.check_resolved:
            loop = asyncio.get_running_loop()
            infos = await loop.getaddrinfo(dest.host, dest.port, family=family,
                                           type=socket.SOCK_STREAM)
            for info in infos:
                try:
                    ip = ipaddress.ip_address(str(info[4][0]))
                except ValueError:
                    continue
                if allows(self.agent.config.allowed_destinations, dest, resolved=ip):
                    host = ip.compressed
                    break
            else:
                raise NotAllowed(f"no address of {dest.host} is allowed")
        return await asyncio.open_connection(host, dest.port, family=family, limit=READ_CHUNK)

    async def _connection(self, dial: StartDial, target: _Target) -> None:
        try:
            await self._serve_connection(dial, target)
        except Exception:  # this connection only: never the stream's TaskGroup
            self.agent.metrics.inc("endpoint_errors_total")
            log.exception("connection %d to %s failed", dial.connect_id, dial.address)

    async def _serve_connection(self, dial: StartDial, target: _Target) -> None:
        connect_id, address = dial.connect_id, dial.address
        loop = asyncio.get_running_loop()
        started = loop.time()
        writer: asyncio.StreamWriter | None = None
        try:
            try:
                async with asyncio.timeout(self.agent.config.dial_timeout_s):
                    reader, writer = await self._open(dial)
            except Exception as exc:  # every dial failure is a DIAL_RSP error
                reason = "timeout" if isinstance(exc, TimeoutError) else "error"
                self.agent.metrics.inc("endpoint_dial_failure_total", (("reason", reason),))
                if isinstance(exc, NotAllowed):
                    error = f"dial {dial.protocol} {address}: destination not allowed by this agent"
                else:
                    error = go_dial_error(address, exc)
                self._apply(self.state.dial_done(connect_id, error))
                return
            self.agent.dial_hist.observe(loop.time() - started)
            actions = self.state.dial_done(connect_id)
            if any(isinstance(a, CloseTarget) for a in actions):
                return  # cancelled by DIAL_CLS while connecting
            self._apply(actions)
            self.agent.open_endpoints += 1
            try:
                async with asyncio.TaskGroup() as tg:
                    pumps = [tg.create_task(self._upstream(connect_id, reader, target)),
                             tg.create_task(self._downstream(connect_id, writer, target)),
                             tg.create_task(target.closing.wait())]
                    await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
                    for task in pumps:
                        task.cancel()
            except* (ConnectionError, OSError):
                pass
            except* Exception:
                self.agent.metrics.inc("endpoint_errors_total")
                log.exception("connection %d to %s failed", connect_id, address)
            finally:
                self.agent.open_endpoints -= 1
        finally:
            if writer is not None:
                writer.close()
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(1.0):
                        await writer.wait_closed()
            self.targets.pop(connect_id, None)
            self.tasks.pop(connect_id, None)
            self._apply(self.state.target_closed(connect_id))

    async def _upstream(self, connect_id: int, reader: asyncio.StreamReader, target: _Target) -> None:
        while True:
            if target.send is not None:
                while not target.send.can_send():
                    target.credit.clear()
                    await target.credit.wait()
            chunk = await reader.read(READ_CHUNK)
            if not chunk:
                return
            if target.send is not None:
                target.send.sent(len(chunk))
            self.send(p.data(connect_id, chunk))

    async def _downstream(self, connect_id: int, writer: asyncio.StreamWriter, target: _Target) -> None:
        target.writer = writer
        try:
            while (chunk := await target.queue.get()) is not None:
                writer.write(chunk)
                await writer.drain()
                self._target_consumed(connect_id, target, len(chunk))
            await target.closing.wait()
        finally:
            target.writer = None

    def _target_consumed(self, connect_id: int, target: _Target, n: int) -> None:
        credit = target.recv.consumed(n)
        if credit and self.window:
            self.send(p.window(connect_id, credit))


class TunnelAgent:
    def __init__(self, config: AgentConfig) -> None:
        parse_identifiers(config.agent_identifiers, strict=True)  # refuse unknown keys early
        self.config = config
        self.metrics = Registry("agent")
        self.dial_hist = self.metrics.histogram("dial_duration_seconds", AGENT_DIAL_BUCKETS)
        self.streams: dict[str, _ServerStream] = {}
        self.server_count = 1
        self.open_endpoints = 0
        self.draining = False
        self.ports: dict[str, int] = {}
        self.connected = asyncio.Event()
        self._servers: list[asyncio.Server] = []
        self._backoff = Backoff(config.sync_interval_s, config.sync_interval_cap_s)
        m = self.metrics
        m.gauge("open_server_connections", lambda: {(): float(len(self.streams))})
        m.gauge("known_server_count", lambda: {(): float(self.server_count)})
        m.gauge("open_endpoint_connections", lambda: {(): float(self.open_endpoints)})

    # -- lifecycle -----------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Keep streams to every server replica until `stop` is set."""
        c = self.config
        if c.health_server_port >= 0:
            health = await httpserve.start(self._health_route, c.health_server_host or None,
                                           c.health_server_port)
            self._servers.append(health)
            self.ports["health"] = _port(health)
        if c.admin_server_port >= 0:
            admin = await httpserve.start(self._admin_route, c.admin_bind_address, c.admin_server_port)
            self._servers.append(admin)
            self.ports["admin"] = _port(admin)
        try:
            async with asyncio.TaskGroup() as tg:
                sync = tg.create_task(self._sync(tg))
                await stop.wait()
                sync.cancel()
                for stream in list(self.streams.values()):
                    stream.call.cancel()
        finally:
            for server in self._servers:
                server.close()
            self._servers.clear()

    def drain(self) -> None:
        """First SIGTERM: DRAIN on every stream, no new streams."""
        if self.draining:
            return
        self.draining = True
        for stream in self.streams.values():
            stream.send(p.drain())

    async def drained(self, poll_s: float = 0.1) -> None:
        """Return once no target connection is open and the DRAINs are sent (the servers send
        no new dials to a draining agent while another one can take them); unbounded: the
        caller bounds the wait."""
        while self._busy():  # noqa: ASYNC110 (state owned by many tasks)
            await asyncio.sleep(poll_s)

    def _busy(self) -> bool:
        return self.open_endpoints > 0 or any(s.targets or not s.out.empty()
                                              for s in self.streams.values())

    async def drain_then_stop(self, stop: asyncio.Event, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """SIGTERM: DRAIN, wait for the open connections to end, at most `timeout_s`, then
        set `stop` (which `run` obeys at once)."""
        self.drain()
        try:
            async with asyncio.timeout(timeout_s):
                await self.drained()
        except TimeoutError:
            log.info("drain timeout (%.1fs): stopping with %d open connection(s)", timeout_s,
                     self.open_endpoints)
        stop.set()

    async def _sync(self, tg: asyncio.TaskGroup) -> None:
        while True:
            if self.draining or (len(self.streams) >= self.server_count and not self.config.sync_forever):
                await asyncio.sleep(self.config.probe_interval_s)
                continue
            outcome = await self._connect_once(tg)
            if outcome == "connected":
                self._backoff.reset()
                continue
            if outcome == "duplicate":
                self._backoff.reset()
                await asyncio.sleep(self.config.sync_interval_s)
                continue
            self.metrics.inc("server_connection_failure_count", (("direction", "to_server"),))
            await asyncio.sleep(self._backoff.next())

    async def _connect_once(self, tg: asyncio.TaskGroup) -> str:
        c = self.config
        target = f"{c.proxy_server_host}:{c.proxy_server_port}"
        options: list[tuple[str, Any]] = [
            ("grpc.use_local_subchannel_pool", 1),  # a new TCP connection per attempt
            ("grpc.max_receive_message_length", MAX_MESSAGE),
            ("grpc.max_send_message_length", MAX_MESSAGE),
            ("grpc.keepalive_time_ms", int(c.keepalive_time_s * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.enable_retries", 0),
        ]
        if c.tls is not None:
            channel = grpc.aio.secure_channel(target, c.tls.grpc_credentials(),
                                              options=options + c.tls.grpc_options())
        else:
            channel = grpc.aio.insecure_channel(target, options=options)
        metadata: list[tuple[str, str]] = [(p.AGENT_ID_KEY, c.agent_id)]
        if c.agent_identifiers:
            metadata.append((p.AGENT_IDENTIFIERS_KEY, c.agent_identifiers))
        if c.window_bytes:
            metadata.append((p.FLOW_CONTROL_KEY, str(c.window_bytes)))
        if c.token_path:
            token = Path(c.token_path).read_text().strip()
            metadata.append((p.AUTHORIZATION_KEY, "Bearer " + token))
        try:
            call = channel.stream_stream(p.CONNECT_METHOD, request_serializer=p.encode,
                                         response_deserializer=p.decode_lenient)(metadata=tuple(metadata))
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                header = await call.initial_metadata()
            values = {k: str(v) for k, v in (header or ())}
            if p.SERVER_ID_KEY not in values:
                code = await call.code()
                raise ConnectionError(f"no serverid from {target}: {code.name}: {await call.details()}")
            server_id = values[p.SERVER_ID_KEY]
            count = int(values.get(p.SERVER_COUNT_KEY, "1"))
            window = int(values.get(p.FLOW_CONTROL_KEY, "0")) if c.window_bytes else 0
            window = min(max(window, 0), MAX_WINDOW)  # nonsense from a server: no credits
        except (grpc.aio.AioRpcError, ConnectionError, TimeoutError, ValueError) as exc:
            log.info("connecting to %s failed: %s", target, _short(exc))
            await channel.close(grace=None)
            return "failed"
        if server_id in self.streams:
            call.cancel()
            await channel.close(grace=None)
            return "duplicate"
        self.server_count = max(1, count)
        stream = _ServerStream(self, call, channel, server_id, window)
        self.streams[server_id] = stream
        if self.draining:
            stream.send(p.drain())
        self.connected.set()
        log.info("connected to server %s at %s (servercount %d)", server_id, target, count)

        async def serve() -> None:
            try:
                await stream.serve()
            except Exception:  # one stream's failure: reconnect, as after any stream loss
                log.exception("stream to server %s failed", server_id)
            finally:
                self.streams.pop(server_id, None)
                if not self.streams:
                    self.connected.clear()
                self.metrics.inc("server_connection_failure_count", (("direction", "from_server"),))
                log.info("stream to server %s ended", server_id)

        tg.create_task(serve())
        return "connected"

    # -- health --------------------------------------------------------------------------------
    def _health_route(self, target: str) -> tuple[int, str, str] | None:
        path, _, query = target.partition("?")
        if path == "/healthz":
            return 200, "text/plain; charset=utf-8", "ok"
        if path in ("/readyz", "/ready"):
            if self.streams:
                body = "[+]server-connected ok\nreadyz check passed\n" if "verbose" in query else "ok"
                return 200, "text/plain; charset=utf-8", body
            return 503, "text/plain; charset=utf-8", ("[-]server-connected failed: no servers connected\n"
                                                      "readyz check failed\n")
        if path == "/metrics":
            return 200, "text/plain; version=0.0.4", self.metrics.render()
        return None

    def _admin_route(self, target: str) -> tuple[int, str, str] | None:
        return self._health_route(target) if target.startswith("/metrics") else None


def _short(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return str(exc) or type(exc).__name__


def _port(server: asyncio.Server) -> int:
    for sock in server.sockets:
        name = sock.getsockname()
        if isinstance(name, tuple):
            return int(name[1])
    return 0

