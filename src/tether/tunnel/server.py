"""`tether tunnel server`: apiserver-network-proxy's proxy-server, on grpc.aio.

Listeners: the frontend (gRPC `/ProxyService/Proxy` or HTTP-CONNECT, mTLS with `--server-*`, or a
Unix socket), the agent port (gRPC `/AgentService/Connect`, mTLS with `--cluster-*`), health
(`/healthz`, `/readyz`, `/ready`, `/metrics`), admin on 127.0.0.1 (`/metrics`), and optionally a
plain-HTTP CONNECT listener (the Karmada fork's `:8088`).

All protocol decisions are made by `state.ServerState`; this module moves packets between
streams and sockets. Every frontend connection has its own writer task and queue, bounded by a
flow-control window: with a tether agent (which negotiates `tether-window`) credits travel back to
the agent, so a stalled reader stalls only its own connection. A Go agent has no credits; a
connection whose reader falls more than `legacy_buffer_bytes` behind is closed instead of stalling
the agent's stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import grpc

from tether.net.metrics import Labels
from tether.net.tasks import cancel_and_wait
from tether.tunnel import httpserve
from tether.tunnel import packets as p
from tether.tunnel.connect import ConnectError, ConnectPolicy, parse_head
from tether.tunnel.metrics import SERVER_DIAL_BUCKETS, Registry
from tether.tunnel.routing import NO_AGENT, IdentifierError, Router, parse_identifiers
from tether.tunnel.state import (
    Credit,
    EndFrontend,
    ReceiveWindow,
    SendWindow,
    ServerAction,
    ServerState,
    ToAgent,
    ToFrontend,
)
from tether.tunnel.tls import ServerTLS, canonical_host, certificate_names

log = logging.getLogger("tether.tunnel.server")

CHUNK = 256 * 1024  # HTTP-CONNECT socket reads (ANP: 32 KiB; larger means fewer packets)
MAX_MESSAGE = 16 * 1024 * 1024
DEFAULT_WINDOW = 1024 * 1024
LEGACY_QUEUE_PACKETS = 256  # packets queued to a Go agent before frontends wait
CLOSE_TIMEOUT_S = 10.0
SHUTDOWN_GRACE_S = 2.0


@dataclass
class ServerConfig:
    mode: str = "grpc"  # grpc | http-connect
    server_bind_address: str = ""
    server_port: int = 8090
    agent_bind_address: str = ""
    agent_port: int = 8091
    health_bind_address: str = ""
    health_port: int = 8092
    admin_bind_address: str = "127.0.0.1"
    admin_port: int = 8095
    uds_name: str = ""
    plain_connect_port: int | None = None  # optional plain-HTTP CONNECT listener
    plain_connect_bind_address: str = ""
    frontend_tls: ServerTLS = field(default_factory=ServerTLS)
    agent_tls: ServerTLS = field(default_factory=ServerTLS)
    proxy_strategies: tuple[str, ...] = ("default",)
    server_id: str = field(default_factory=lambda: os.environ.get("PROXY_SERVER_ID") or str(uuid.uuid4()))
    server_count: int = 1
    keepalive_time_s: float = 3600.0
    frontend_keepalive_time_s: float = 3600.0
    backend_dial_timeout_s: float = 30.0
    header_timeout_s: float = 60.0
    window_bytes: int = DEFAULT_WINDOW
    legacy_buffer_bytes: int = 8 * 1024 * 1024
    # "auto": bind when the agent's certificate carries SANs (or its token names identities);
    # "strict": always; "none": ANP's behaviour (any certificate from the CA serves anything).
    agent_identity_binding: str = "auto"
    agent_tokens: dict[str, frozenset[str]] = field(default_factory=dict)  # bearer → names
    # HTTP-CONNECT listeners: None accepts every well-formed CONNECT (ANP's behaviour); a policy
    # requires Proxy-Authorization and limits where each credential may go (the hub's listener).
    connect_policy: ConnectPolicy | None = None


class _Frontend:
    """One frontend connection: its outgoing queue, receive window and send credit."""

    def __init__(self, window_bytes: int, legacy_limit: int) -> None:
        self.out: asyncio.Queue[p.Packet | None] = asyncio.Queue()
        self.recv = ReceiveWindow(window_bytes, max_chunk=legacy_limit)
        self.send = SendWindow(window_bytes)
        self.credit = asyncio.Event()
        self.credit.set()
        self.writer: asyncio.StreamWriter | None = None  # an HTTP-CONNECT client, once tunnelling


class _Backend:
    def __init__(self, backend_id: int, agent_id: str, window: int) -> None:
        self.id = backend_id
        self.agent_id = agent_id
        self.window = window  # 0: a Go agent, no credits
        self.out: asyncio.Queue[p.Packet | None] = asyncio.Queue()
        self.space = asyncio.Event()
        self.space.set()

    def send(self, packet: p.Packet) -> None:
        self.out.put_nowait(packet)
        if self.window == 0 and self.out.qsize() >= LEGACY_QUEUE_PACKETS:
            self.space.clear()


def http_status_for_dial_error(error: str) -> int:
    """ANP's `mapDialErrorToHTTPStatus`: substring match on the lower-cased error."""
    text = error.lower()
    if "i/o timeout" in text or "deadline exceeded" in text or "timeout" in text or "timed out" in text:
        return 504
    if "too many open files" in text:
        return 503
    return 502


class TunnelServer:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.state = ServerState(Router(config.proxy_strategies),
                                 dial_timeout_s=config.backend_dial_timeout_s)
        self.metrics = Registry("server")
        self.ports: dict[str, int] = {}
        self._ids = itertools.count(1)
        self._frontends: dict[int, _Frontend] = {}
        self._backends: dict[int, _Backend] = {}
        self._grpc_servers: list[grpc.aio.Server] = []
        self._servers: list[asyncio.Server] = []
        self._dial_hist = self.metrics.histogram("dial_duration_seconds", SERVER_DIAL_BUCKETS)
        self._grpc_conns: dict[str, int] = {"Proxy": 0, "Connect": 0}
        self._http_conns = 0
        self._register_gauges()

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self.close()
            raise

    async def _start(self) -> None:
        c = self.config
        await self._start_agent_listener()
        if c.mode == "grpc":
            await self._start_grpc_frontend()
        elif c.mode == "http-connect":
            await self._start_connect_frontend()
        else:
            raise ValueError(f"unknown mode {c.mode!r} (grpc or http-connect)")
        if c.plain_connect_port is not None:
            server = await asyncio.start_server(self._handle_connect, c.plain_connect_bind_address or None,
                                                c.plain_connect_port, limit=httpserve.HEADER_LIMIT)
            self._servers.append(server)
            self.ports["plain-connect"] = _port(server)
        if c.health_port >= 0:
            health = await httpserve.start(self._health_route, c.health_bind_address or None, c.health_port)
            self._servers.append(health)
            self.ports["health"] = _port(health)
        if c.admin_port >= 0:
            admin = await httpserve.start(self._admin_route, c.admin_bind_address, c.admin_port)
            self._servers.append(admin)
            self.ports["admin"] = _port(admin)

    async def serve(self, stop: asyncio.Event) -> None:
        """Run until `stop` is set, then shut down within a bounded time."""
        await self.start()
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._expire_loop(stop))
                await stop.wait()
        finally:
            await self.close()

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for backend in list(self._backends.values()):
            backend.out.put_nowait(None)
        async with asyncio.TaskGroup() as tg:
            for g in self._grpc_servers:
                tg.create_task(g.stop(SHUTDOWN_GRACE_S))
        for server in self._servers:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SHUTDOWN_GRACE_S):
                    await server.wait_closed()
        self._servers.clear()
        self._grpc_servers.clear()
        if self.config.uds_name:
            with contextlib.suppress(OSError):
                os.unlink(self.config.uds_name)

    async def _expire_loop(self, stop: asyncio.Event) -> None:
        period_s = min(1.0, max(0.05, self.config.backend_dial_timeout_s / 4 or 1.0))
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period_s):
                    await stop.wait()
            self._dispatch(self.state.expire(time.monotonic()))

    # -- listeners -----------------------------------------------------------------------------
    def _grpc_options(self, keepalive_s: float, *, agent: bool) -> list[tuple[str, Any]]:
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", MAX_MESSAGE),
            ("grpc.max_send_message_length", MAX_MESSAGE),
            ("grpc.keepalive_time_ms", int(keepalive_s * 1000)),
            ("grpc.so_reuseport", 0),
        ]
        if agent:  # Go's enforcement policy on the agent listener: MinTime 30s, PermitWithoutStream
            options += [("grpc.http2.min_ping_interval_without_data_ms", 30_000),
                        ("grpc.keepalive_permit_without_calls", 1)]
        return options

    def _add_port(self, server: grpc.aio.Server, host: str, port: int, tls: ServerTLS) -> int:
        address = f"{host or '[::]'}:{port}"
        if tls.enabled:
            return int(server.add_secure_port(address, tls.grpc_credentials()))
        log.warning("listener %s without TLS", address)
        return int(server.add_insecure_port(address))

    async def _start_agent_listener(self) -> None:
        c = self.config
        server = grpc.aio.server(options=self._grpc_options(c.keepalive_time_s, agent=True))
        handler = grpc.stream_stream_rpc_method_handler(
            self._agent_connect, request_deserializer=p.decode_lenient, response_serializer=p.encode)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "AgentService", {"Connect": handler}),))
        self.ports["agent"] = self._add_port(server, c.agent_bind_address, c.agent_port, c.agent_tls)
        await server.start()
        self._grpc_servers.append(server)

    async def _start_grpc_frontend(self) -> None:
        c = self.config
        server = grpc.aio.server(options=self._grpc_options(c.frontend_keepalive_time_s, agent=False))
        handler = grpc.stream_stream_rpc_method_handler(
            self._proxy, request_deserializer=p.decode_lenient, response_serializer=p.encode)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "ProxyService", {"Proxy": handler}),))
        if c.uds_name:
            server.add_insecure_port(f"unix:{c.uds_name}")
        if c.server_port or not c.uds_name:
            self.ports["server"] = self._add_port(server, c.server_bind_address, c.server_port,
                                                  c.frontend_tls)
        await server.start()
        if c.uds_name:
            with contextlib.suppress(OSError):
                os.chmod(c.uds_name, 0o770)
        self._grpc_servers.append(server)

    async def _start_connect_frontend(self) -> None:
        c = self.config
        if c.uds_name:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(c.uds_name)
            uds = await asyncio.start_unix_server(self._handle_connect, c.uds_name,
                                                  limit=httpserve.HEADER_LIMIT)
            os.chmod(c.uds_name, 0o770)
            self._servers.append(uds)
        if c.server_port or not c.uds_name:
            context = c.frontend_tls.ssl_context() if c.frontend_tls.enabled else None
            server = await asyncio.start_server(self._handle_connect, c.server_bind_address or None,
                                                c.server_port, ssl=context,
                                                limit=httpserve.HEADER_LIMIT,
                                                ssl_handshake_timeout=c.header_timeout_s if context else None)
            self._servers.append(server)
            self.ports["server"] = _port(server)

    # -- actions -------------------------------------------------------------------------------
    def _dispatch(self, actions: list[ServerAction]) -> None:
        for action in actions:
            if isinstance(action, ToAgent):
                backend = self._backends.get(action.backend)
                if backend is not None:
                    self.metrics.packet("to_agent", action.packet.type_name)
                    if isinstance(action.packet.payload, p.Data):
                        self.metrics.inc("data_bytes_total", (("segment", "to_agent"),),
                                         len(action.packet.payload.data))
                    backend.send(action.packet)
            elif isinstance(action, ToFrontend):
                self._to_frontend(action.frontend, action.packet)
            elif isinstance(action, EndFrontend):
                fe = self._frontends.get(action.frontend)
                if fe is not None:
                    fe.out.put_nowait(None)
            elif isinstance(action, Credit):
                fe = self._frontends.get(action.frontend)
                if fe is not None:
                    fe.send.credit(action.credit)
                    if fe.send.can_send():
                        fe.credit.set()
        for duration in self.state.dial_durations_s:
            self._dial_hist.observe(duration)
        self.state.dial_durations_s.clear()

    def _to_frontend(self, frontend: int, packet: p.Packet) -> None:
        fe = self._frontends.get(frontend)
        if fe is None:
            return
        payload = packet.payload
        if isinstance(payload, p.Data) and not fe.recv.received(len(payload.data)):
            # The reader is this far behind: close this connection, never stall the agent.
            self.metrics.inc("full_receive_channels_total")
            self._dispatch(self.state.frontend_closed(frontend))
            fe.out.put_nowait(None)
            return
        writer = fe.writer
        if writer is not None and isinstance(payload, p.Data) and fe.out.empty() \
                and not writer.is_closing() and not writer.transport.get_write_buffer_size():
            # The client's socket has caught up and nothing is queued: write now rather than
            # waking the connection's writer loop (one event-loop pass less per packet).
            writer.write(payload.data)
            self._consumed(frontend, fe, len(payload.data))
            return
        fe.out.put_nowait(packet)

    def _consumed(self, frontend: int, fe: _Frontend, n: int) -> None:
        credit = fe.recv.consumed(n)
        where = self.state.backend_of(frontend)
        if credit and where is not None:
            backend = self._backends.get(where[0])
            if backend is not None and backend.window:
                backend.send(p.window(where[1], credit))

    async def _await_send_room(self, frontend: int, fe: _Frontend, n: int) -> None:
        """Before forwarding `n` bytes to the agent: wait for credit (tether agent) or queue room
        (Go agent)."""
        where = self.state.backend_of(frontend)
        backend = self._backends.get(where[0]) if where else None
        if backend is None:
            return
        if backend.window:
            while not fe.send.can_send():
                fe.credit.clear()
                await fe.credit.wait()
            fe.send.sent(n)
        else:
            await backend.space.wait()

    # -- agent streams -------------------------------------------------------------------------
    async def _agent_connect(self, _requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        metadata = list(context.invocation_metadata() or ())
        agent_ids = [str(v) for k, v in metadata if k == p.AGENT_ID_KEY]
        if len(agent_ids) != 1:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"expected one agent ID in the context, got {agent_ids}")
        raw_ids = [str(v) for k, v in metadata if k == p.AGENT_IDENTIFIERS_KEY]
        if len(raw_ids) > 1:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"expected at most one set of agent identifiers, got {len(raw_ids)}")
        try:
            identifiers = parse_identifiers(raw_ids[0] if raw_ids else "")
        except IdentifierError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"agent identifiers: {exc}")
            raise
        tokens = [str(v) for k, v in metadata if k == p.AUTHORIZATION_KEY]
        refusal = self._authorize(agent_ids[0], identifiers.hosts, context, tokens)
        if refusal:
            log.warning("agent %s refused: %s", agent_ids[0], refusal)
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, refusal)
        offered = [str(v) for k, v in metadata if k == p.FLOW_CONTROL_KEY]
        window = self.config.window_bytes if offered else 0
        header: list[tuple[str, str]] = [(p.SERVER_ID_KEY, self.config.server_id),
                                          (p.SERVER_COUNT_KEY, str(self.config.server_count))]
        if window:
            header.append((p.FLOW_CONTROL_KEY, str(window)))
        await context.send_initial_metadata(tuple(header))
        backend = _Backend(next(self._ids), agent_ids[0], window)
        self._backends[backend.id] = backend
        self.state.agent_connected(backend.id, agent_ids[0], identifiers)
        self._grpc_conns["Connect"] += 1
        log.info("agent %s connected (backend %d, flow control %s)", agent_ids[0], backend.id,
                 "on" if window else "off")
        try:
            async with asyncio.TaskGroup() as tg:
                writer = tg.create_task(self._backend_writer(backend, context))
                await self._backend_reader(backend, context)
                writer.cancel()
        except* (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError, p.DecodeError,
                 ConnectionError):
            pass
        finally:
            self._grpc_conns["Connect"] -= 1
            self._backends.pop(backend.id, None)
            self._dispatch(self.state.agent_disconnected(backend.id))
            log.info("agent %s disconnected (backend %d)", agent_ids[0], backend.id)

    async def _backend_reader(self, backend: _Backend, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        while True:
            packet = await context.read()
            if isinstance(packet, p.Malformed):  # one bad message: drop it, keep the stream
                self.metrics.inc("malformed_packets_total", (("from", "agent"),))
                log.debug("agent %s sent a malformed packet: %s", backend.agent_id, packet.reason)
                continue
            if packet is grpc.aio.EOF or not isinstance(packet, p.Packet):
                return
            self.metrics.packet("from_agent", packet.type_name)
            if isinstance(packet.payload, p.Data):
                self.metrics.inc("data_bytes_total", (("segment", "from_agent"),),
                                 len(packet.payload.data))
            self._dispatch(self.state.agent_packet(backend.id, packet, time.monotonic()))

    async def _backend_writer(self, backend: _Backend, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        while (packet := await backend.out.get()) is not None:
            await context.write(packet)
            if not backend.space.is_set() and backend.out.qsize() < LEGACY_QUEUE_PACKETS // 2:
                backend.space.set()

    def _authorize(self, agent_id: str, hosts: tuple[str, ...],
                   context: grpc.aio.ServicerContext[Any, Any], tokens: list[str]) -> str:
        mode = self.config.agent_identity_binding
        names: set[str] = set()
        bind = mode == "strict"
        if self.config.agent_tokens:
            bearer = tokens[0][len("Bearer "):] if tokens and tokens[0].startswith("Bearer ") else ""
            allowed = self.config.agent_tokens.get(bearer) if bearer else None
            if allowed is not None:
                names |= set(allowed)
                bind = bind or (mode == "auto" and bool(allowed))
            elif not self.config.agent_tls.ca_cert:
                return "a valid bearer token is required"
        pem = (context.auth_context() or {}).get("x509_pem_cert") or []
        if pem:
            cn, sans = certificate_names(pem[0])
            names |= sans | ({cn} if cn else set())
            bind = bind or (mode == "auto" and bool(sans))
        if not bind or mode == "none":
            return ""
        canonical = {canonical_host(n) for n in names}
        claimed = [agent_id, *hosts]
        foreign = [c for c in claimed if canonical_host(c) not in canonical]
        if foreign:
            return (f"the agent's credentials name {sorted(names)}; "
                    f"it may not serve {sorted(set(foreign))}")
        return ""

    # -- gRPC frontends ------------------------------------------------------------------------
    async def _proxy(self, _requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        frontend = next(self._ids)
        fe = _Frontend(self.config.window_bytes, self.config.legacy_buffer_bytes)
        self._frontends[frontend] = fe
        self.state.frontend_opened(frontend)
        self._grpc_conns["Proxy"] += 1
        try:
            async with asyncio.TaskGroup() as tg:
                reader = tg.create_task(self._grpc_frontend_reader(frontend, fe, context))
                while (packet := await fe.out.get()) is not None:
                    await context.write(packet)
                    self.metrics.packet("to_client", packet.type_name)
                    if isinstance(packet.payload, p.Data):
                        self._consumed(frontend, fe, len(packet.payload.data))
                reader.cancel()
        except* (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError, p.DecodeError,
                 ConnectionError):
            pass
        finally:
            self._grpc_conns["Proxy"] -= 1
            self._dispatch(self.state.frontend_closed(frontend))
            self._frontends.pop(frontend, None)

    async def _grpc_frontend_reader(self, frontend: int, fe: _Frontend,
                                    context: grpc.aio.ServicerContext[Any, Any]) -> None:
        while True:
            packet = await context.read()
            if isinstance(packet, p.Malformed):
                self.metrics.inc("malformed_packets_total", (("from", "client"),))
                log.debug("frontend %d sent a malformed packet: %s", frontend, packet.reason)
            if packet is grpc.aio.EOF or not isinstance(packet, p.Packet):
                fe.out.put_nowait(None)
                return
            self.metrics.packet("from_client", packet.type_name)
            if isinstance(packet.payload, p.Data):
                await self._await_send_room(frontend, fe, len(packet.payload.data))
            self._dispatch(self.state.frontend_packet(frontend, packet, time.monotonic()))
            if isinstance(packet.payload, p.CloseRequest):
                return  # ANP stops reading after CLOSE_REQ; the writer ends on CLOSE_RSP

    # -- HTTP-CONNECT frontends ----------------------------------------------------------------
    async def _handle_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frontend = next(self._ids)
        fe = _Frontend(self.config.window_bytes, self.config.legacy_buffer_bytes)
        self._http_conns += 1
        try:
            target = await self._read_connect(reader, writer)
            if target is None:
                return
            self._frontends[frontend] = fe
            self.state.frontend_opened(frontend)
            await self._connect_tunnel(frontend, fe, target, reader, writer)
        except (ConnectionError, OSError, TimeoutError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError):
            pass
        except Exception:  # a bug must cost this connection only, never the listener
            log.exception("HTTP-CONNECT connection %d failed", frontend)
        finally:
            self._http_conns -= 1
            self._dispatch(self.state.frontend_closed(frontend))
            self._frontends.pop(frontend, None)
            writer.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await writer.wait_closed()

    async def _read_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str | None:
        """The target of a well-formed, permitted CONNECT (routed on it, not on Host:); None
        after answering anything else."""
        try:
            async with asyncio.timeout(self.config.header_timeout_s):
                head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.LimitOverrunError, asyncio.IncompleteReadError, TimeoutError):
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.write(httpserve.response(400, "bad request"))
            return None
        try:
            request = parse_head(head)
            if self.config.connect_policy is not None:
                self.config.connect_policy.decide(request)
        except ConnectError as refused:
            self.metrics.inc("http_connect_refused_total", (("code", str(refused.status)),))
            extra = "".join(f"{k}: {v}\r\n" for k, v in refused.headers)
            writer.write(httpserve.response(refused.status, refused.reason, extra=extra))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await writer.drain()
            return None
        return request.target

    async def _connect_tunnel(self, frontend: int, fe: _Frontend, target: str,
                              reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        random = secrets.randbits(63)
        self._dispatch(self.state.frontend_packet(frontend, p.dial_req(target, random), time.monotonic()))
        early = bytearray()
        answer_task = asyncio.ensure_future(fe.out.get())
        try:
            while not answer_task.done():  # watch the client while the agent dials
                read_task = asyncio.ensure_future(reader.read(CHUNK))
                done, _ = await asyncio.wait({answer_task, read_task}, return_when=asyncio.FIRST_COMPLETED)
                if read_task in done:
                    chunk = read_task.result()
                    if not chunk:
                        return  # client gone: the finally of the caller sends DIAL_CLS
                    early += chunk
                    if len(early) > self.config.window_bytes:
                        return
                else:
                    await cancel_and_wait(read_task)
        finally:
            if not answer_task.done():
                answer_task.cancel()
        answer = answer_task.result()
        rsp = answer.payload if answer is not None else None
        if not isinstance(rsp, p.DialResponse) or rsp.error or not rsp.connect_id:
            error = rsp.error if isinstance(rsp, p.DialResponse) else "dial closed"
            if error == NO_AGENT:
                writer.write(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\n\r\n"
                             b"currently no tunnels available: " + error.encode())
            else:
                writer.write(httpserve.response(http_status_for_dial_error(error), error))
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await writer.drain()
            return
        writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        # The small header limit made the reader pause its socket every 32 KiB (two epoll_ctl
        # calls and a short read per chunk); the tunnelled bytes are bounded by the send window.
        reader._limit = CHUNK  # type: ignore[attr-defined]
        connect_id = rsp.connect_id
        fe.writer = writer
        try:
            async with asyncio.TaskGroup() as tg:
                up = tg.create_task(self._connect_upstream(frontend, fe, connect_id, bytes(early), reader))
                while (packet := await fe.out.get()) is not None:
                    payload = packet.payload
                    if isinstance(payload, p.Data):
                        writer.write(payload.data)
                        await writer.drain()
                        self._consumed(frontend, fe, len(payload.data))
                    elif isinstance(payload, p.CloseResponse | p.CloseDial):
                        break
                up.cancel()
        finally:
            fe.writer = None

    async def _connect_upstream(self, frontend: int, fe: _Frontend, connect_id: int, early: bytes,
                                reader: asyncio.StreamReader) -> None:
        chunk = early
        while True:
            if chunk:
                await self._await_send_room(frontend, fe, len(chunk))
                self._dispatch(self.state.frontend_packet(frontend, p.data(connect_id, chunk)))
            chunk = await reader.read(CHUNK)
            if not chunk:
                break
        self._dispatch(self.state.frontend_packet(frontend, p.close_req(connect_id)))
        await asyncio.sleep(CLOSE_TIMEOUT_S)  # the agent's CLOSE_RSP normally ends us first
        fe.out.put_nowait(None)

    # -- health, admin, metrics ----------------------------------------------------------------
    def _health_route(self, target: str) -> tuple[int, str, str] | None:
        path = target.split("?", 1)[0]
        if path == "/healthz":
            return 200, "text/plain; charset=utf-8", "ok"
        if path in ("/readyz", "/ready"):
            if self.state.router.ready():
                return 200, "text/plain; charset=utf-8", "ok"
            return 500, "text/plain; charset=utf-8", "no connection to any proxy agent"
        if path == "/metrics":
            return 200, "text/plain; version=0.0.4", self.metrics.render()
        return None

    def _admin_route(self, target: str) -> tuple[int, str, str] | None:
        if target.split("?", 1)[0] == "/metrics":
            return 200, "text/plain; version=0.0.4", self.metrics.render()
        return None

    def _register_gauges(self) -> None:
        def one(value: float) -> dict[Labels, float]:
            return {(): value}

        m = self.metrics
        m.gauge("pending_backend_dials", lambda: one(len(self.state.pending)))
        m.gauge("established_connections", lambda: one(len(self.state.established)))
        m.gauge("ready_backend_connections", lambda: one(len(self._backends)))
        m.gauge("ready_backends", lambda: {(("proxy_strategy", s),): self.state.router.count(s)
                                           for s in self.config.proxy_strategies})
        m.gauge("grpc_connections", lambda: {(("service_method", k),): v for k, v in self._grpc_conns.items()})
        m.gauge("http_connections", lambda: one(self._http_conns))
        m.gauge("dial_failure_count", lambda: {(("reason", k),): v
                                               for k, v in self.state.failures.counts.items()})

    # -- introspection for tests and the hub ---------------------------------------------------
    def agent_ids(self) -> list[str]:
        return [b.agent_id for b in self._backends.values()]


def _port(server: asyncio.Server) -> int:
    for sock in server.sockets:
        name = sock.getsockname()
        if isinstance(name, tuple):
            return int(name[1])
    return 0
