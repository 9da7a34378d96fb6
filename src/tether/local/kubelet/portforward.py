"""`pods/portforward`: relay TCP connections to `podIP:port`, in all three client forms.

1. WebSocket-tunnelled SPDY (`Sec-WebSocket-Protocol: SPDY/3.1+portforward.k8s.io`): kubectl
   1.30+ first; the SPDY byte stream rides in WebSocket binary messages.
2. Plain SPDY (`POST`, `Upgrade: SPDY/3.1`, `X-Stream-Protocol-Version: portforward.k8s.io`):
   kubectl's fallback and `KUBECTL_PORT_FORWARD_WEBSOCKETS=false`. The 101 must echo the version.
3. The Python `kubernetes` client: WebSocket `v5`/`v4.channel.k8s.io` with `?ports=a,b`; port i
   uses data channel 2i and error channel 2i+1, each opened by a `[ch, port lo, port hi]` frame.

In the SPDY forms every local connection is a (data, error) stream pair tied by `requestID`.
Each forwarded connection dials the pod, relays both ways with half-close (EOF from one side
becomes FIN / `shutdown(SHUT_WR)` on the other), and reports a failure as text on its error
stream, which kubectl prints as `an error occurred forwarding L -> P: <text>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from tether.local.errors import ApiError, bad_request
from tether.local.kubelet.exec import CONNECTION_ERRORS, Wire
from tether.local.resources import ResourceType
from tether.local.store import Store
from tether.net import spdy
from tether.net import websocket as ws
from tether.net.httpserver import Reply, Request, UpgradeResponse
from tether.objects import Obj

log = logging.getLogger(__name__)

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Dial(Protocol):
    async def __call__(self, host: str, port: int, *, timeout_s: float) -> Streams: ...

CHANNEL_PROTOCOLS = (ws.CHANNEL_V5, ws.CHANNEL_V4, spdy.PORTFORWARD_PROTOCOL, "")
DIAL_TIMEOUT_S = 5.0
PAIR_TIMEOUT_S = 30.0  # the kubelet's stream-creation timeout for the second stream of a pair
PAIR_SWEEP_S = 5.0
LINGER_S = 30.0  # after the client's EOF, how long the pod may still answer
POD_EOF_LINGER_S = 1.0  # after the pod's EOF, how long the client may still send (containerd's 1 s)
WS_PING_INTERVAL_S = 20.0  # keeps idle tunnels from being dropped by proxies along the way
INBOX_SIZE = 64
READ_CHUNK = 64 * 1024


class ByteInbox:
    """Client-to-pod bytes of one connection (None = the client's EOF), bounded for backpressure.

    `discard()` when the relay is over, so the connection's reader never waits on it again.
    """

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(INBOX_SIZE)
        self.discarded = False

    async def put(self, item: bytes | None) -> None:
        if not self.discarded:
            await self.queue.put(item)

    def discard(self) -> None:
        self.discarded = True
        while not self.queue.empty():
            self.queue.get_nowait()


@dataclass
class ClientEnd:
    """How a relay talks back to the client, whatever the transport."""

    send: Callable[[bytes], Awaitable[None]]
    send_eof: Callable[[], Awaitable[None]]
    report: Callable[[str], Awaitable[None]]
    finish: Callable[[], Awaitable[None]]
    inbox: ByteInbox = field(default_factory=ByteInbox)
    # Whether the client can be told "no more data" while it keeps sending (SPDY's FIN). Without
    # it (the channel form) the pod's EOF must end the connection, or the client never learns.
    half_close: bool = True


async def _dial_host(host: str, port: int, *, timeout_s: float) -> Streams:
    return await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)


async def relay(end: ClientEnd, pod: Obj, host: str, port: int, dial_timeout_s: float,
                linger_s: float, dial: Dial = _dial_host) -> None:
    """One forwarded connection, start to end; always calls `end.finish()`."""
    try:
        try:
            reader, writer = await dial(host, port, timeout_s=dial_timeout_s)
        except (OSError, TimeoutError) as exc:
            meta = pod["metadata"]
            await end.report(f"error forwarding port {port} to pod {meta.get('namespace')}/"
                             f"{meta['name']}, uid {meta.get('uid', '')}: {_dial_error(host, port, exc)}")
            return
        try:
            async with asyncio.TaskGroup() as group:
                up = group.create_task(_client_to_pod(end.inbox, writer))
                down = group.create_task(_pod_to_client(reader, end))
                await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
                if end.half_close or not down.done():
                    # Half-close: after the client's EOF the pod may still be answering (an HTTP
                    # server reading until EOF, then replying): it gets `linger_s`. After the
                    # pod's EOF the client gets a second, as containerd gives it: kubectl waits
                    # for the error stream's end before it lets go of the connection.
                    pod_ended = down.done() and not up.done()
                    await asyncio.wait({up, down}, timeout=min(linger_s, POD_EOF_LINGER_S) if pod_ended
                                       else linger_s)
                up.cancel()
                down.cancel()
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)
    finally:
        end.inbox.discard()
        task = asyncio.current_task()
        if task is None or not task.cancelling():  # a cancelled session has no client to tell
            await end.finish()


def _dial_error(host: str, port: int, exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"dial tcp {host}:{port}: i/o timeout"
    if isinstance(exc, ConnectionRefusedError):
        return f"dial tcp {host}:{port}: connect: connection refused"
    return f"dial tcp {host}:{port}: {exc}"


async def _client_to_pod(inbox: ByteInbox, writer: asyncio.StreamWriter) -> None:
    while True:
        item = await inbox.queue.get()
        if item is None:
            if writer.can_write_eof():
                writer.write_eof()
            return
        try:
            writer.write(item)
            await writer.drain()
        except ConnectionError:
            return


async def _pod_to_client(reader: asyncio.StreamReader, end: ClientEnd) -> None:
    try:
        while data := await reader.read(READ_CHUNK):
            await end.send(data)
    except ConnectionResetError:
        pass
    await end.send_eof()


def _pod_target(store: Store, rt: ResourceType, namespace: str, name: str) -> tuple[Obj, str]:
    pod = store.get(rt.storage_key, namespace, name)
    if pod is None:
        raise ApiError(404, "NotFound", f'pods "{name}" not found', name=name, kind="pods")
    status = pod.get("status") or {}
    phase = status.get("phase", "Pending")
    if phase != "Running":
        raise bad_request(f"unable to forward port because pod is not running. Current status={phase}")
    pod_ip = str(status.get("podIP") or "")
    if not pod_ip:
        raise bad_request(f"pod {name} has no IP address yet")
    return pod, pod_ip


class PortForwardServer:
    def __init__(self, store: Store, *, dial_timeout_s: float = DIAL_TIMEOUT_S,
                 pair_timeout_s: float = PAIR_TIMEOUT_S, linger_s: float = LINGER_S,
                 dial: Dial = _dial_host) -> None:
        self.store = store
        self.dial = dial  # the cluster fabric's open_connection: pods may live in a netns
        self.dial_timeout_s = dial_timeout_s
        self.pair_timeout_s = pair_timeout_s
        self.linger_s = linger_s

    async def __call__(self, request: Request, rt: ResourceType, namespace: str, name: str,
                       rest: str) -> Reply:
        if request.method not in ("GET", "POST"):
            raise ApiError(405, "MethodNotAllowed", "pods/portforward supports GET and POST only")
        pod, pod_ip = _pod_target(self.store, rt, namespace, name)
        kind = request.header("upgrade").lower()
        if "websocket" in kind:
            return self._websocket(request, pod, pod_ip)
        if kind.startswith("spdy/3.1"):
            offered = [p.strip() for p in request.header("x-stream-protocol-version").split(",")]
            if spdy.PORTFORWARD_PROTOCOL not in offered:
                raise ApiError(403, "Forbidden", "unable to upgrade: unable to negotiate protocol: "
                               f"client supports {offered}, server supports "
                               f"[{spdy.PORTFORWARD_PROTOCOL}]")

            async def serve_spdy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                await self._spdy(_RawLink(Wire(reader, writer)), pod, pod_ip)

            headers = [("Connection", "Upgrade"), ("Upgrade", spdy.UPGRADE_PROTOCOL),
                       ("X-Stream-Protocol-Version", spdy.PORTFORWARD_PROTOCOL)]
            return UpgradeResponse(headers, serve_spdy)
        raise bad_request("Upgrade request required")

    def _websocket(self, request: Request, pod: Obj, pod_ip: str) -> Reply:
        key = request.header("sec-websocket-key")
        if not ws.is_valid_client_key(key):
            raise bad_request("missing or invalid Sec-WebSocket-Key")
        offered = request.header("sec-websocket-protocol")
        if spdy.TUNNEL_SUBPROTOCOL in ws.offered_protocols(offered):

            async def serve_tunnel(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                await self._spdy(_TunnelLink(Wire(reader, writer)), pod, pod_ip)

            headers = ws.handshake_response_headers(key, spdy.TUNNEL_SUBPROTOCOL)
            return UpgradeResponse(headers, serve_tunnel)
        protocol = ws.negotiate(offered, CHANNEL_PROTOCOLS)
        if protocol is None:
            raise bad_request(f"unable to negotiate a WebSocket subprotocol: client offered [{offered}]")
        try:
            ports = ws.WebSocketPortForward(tuple(ws.parse_ports(request.params("ports"))))
        except ValueError as exc:
            raise bad_request(str(exc)) from None

        async def serve_channels(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._channels(Wire(reader, writer), protocol, ports, pod, pod_ip)

        return UpgradeResponse(ws.handshake_response_headers(key, protocol or None), serve_channels)

    # SPDY forms ---------------------------------------------------------------------------

    async def _spdy(self, link: _Link, pod: Obj, pod_ip: str) -> None:
        session = spdy.SpdySession()
        pairing = spdy.PortForwardPairing()
        inboxes: dict[int, ByteInbox] = {}  # data stream -> its relay's input

        async def send(frames: bytes) -> None:
            await link.send(frames + session.data_to_send())

        def end_for(request: spdy.PortForwardRequest) -> ClientEnd:
            data_id, error_id = request.data_stream, request.error_stream

            async def send_data(data: bytes) -> None:
                if session.is_open(data_id):
                    with contextlib.suppress(spdy.SpdyError):
                        await send(session.data(data_id, data))

            async def send_eof() -> None:
                if session.is_open(data_id):
                    with contextlib.suppress(spdy.SpdyError):
                        await send(session.data(data_id, b"", fin=True))

            async def report(message: str) -> None:
                if session.is_open(error_id):
                    with contextlib.suppress(spdy.SpdyError):
                        await send(session.data(error_id, message.encode()))

            async def finish() -> None:
                # kubectl waits for EOF on both streams before it lets the local socket go.
                await send_eof()
                if session.is_open(error_id):
                    with contextlib.suppress(spdy.SpdyError):
                        await send(session.data(error_id, b"", fin=True))
                inboxes.pop(data_id, None)

            return ClientEnd(send_data, send_eof, report, finish, inboxes.setdefault(data_id, ByteInbox()))

        async def refuse(stream_ids: list[int]) -> None:
            for stream_id in stream_ids:
                inboxes.pop(stream_id, None)
                await send(session.reset(stream_id, spdy.RstStatus.REFUSED_STREAM))

        async def sweep() -> None:
            # A pair whose second stream never comes would hold its first one forever.
            while True:
                await asyncio.sleep(PAIR_SWEEP_S)
                await refuse(pairing.expire(time.monotonic(), self.pair_timeout_s))

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(sweep())
                group.create_task(link.keepalive())
                while (chunk := await link.recv()) is not None:
                    for event in session.receive_data(chunk):
                        if isinstance(event, spdy.StreamOpened):
                            await send(session.reply(event.stream_id, {}))
                            try:
                                request = pairing.add(event.stream_id, event.headers, time.monotonic())
                            except spdy.PortForwardError as exc:
                                log.info("port-forward stream refused: %s", exc)
                                await refuse([event.stream_id, *pairing.remove(event.stream_id)])
                                continue
                            if event.headers.get(spdy.HEADER_STREAM_TYPE) == spdy.STREAM_TYPE_DATA:
                                fresh = inboxes.setdefault(event.stream_id, ByteInbox())
                                if event.fin:
                                    await fresh.put(None)
                            if request is not None:
                                group.create_task(relay(end_for(request), pod, pod_ip, request.port,
                                                        self.dial_timeout_s, self.linger_s, self.dial))
                        elif isinstance(event, spdy.Data):
                            inbox = inboxes.get(event.stream_id)
                            if inbox is not None:  # error streams and finished relays: dropped
                                if event.data:
                                    await inbox.put(event.data)
                                if event.fin:
                                    await inbox.put(None)
                        elif isinstance(event, spdy.StreamReset):
                            stale = inboxes.pop(event.stream_id, None)
                            if stale is not None:
                                await stale.put(None)
                            pairing.remove(event.stream_id)
                        elif isinstance(event, spdy.Ping) and not event.reply:
                            await send(session.ping(event.ping_id))  # client-go pings every 5 s
                        elif isinstance(event, spdy.GoAway | spdy.ProtocolError):
                            await send(b"")
                            raise _Done
                    await send(b"")
                raise _Done
        except* _Done:
            pass
        except* CONNECTION_ERRORS:
            pass

    # the Python client's channel form -----------------------------------------------------

    async def _channels(self, wire: Wire, protocol: str, ports: ws.WebSocketPortForward, pod: Obj,
                        pod_ip: str) -> None:
        conn = ws.WebSocketConnection()
        ends: list[ClientEnd] = []

        async def send_message(payload: bytes) -> None:
            if not conn.close_sent:
                await wire.send(conn.send_binary(payload))

        def end_for(index: int) -> ClientEnd:
            async def send_data(data: bytes) -> None:
                await send_message(ports.data_payload(index, data))

            async def send_eof() -> None:
                pass  # the channel protocol has no per-channel EOF the Python client understands

            async def report(message: str) -> None:
                await send_message(ports.error_payload(index, message))

            async def finish() -> None:
                pass

            return ClientEnd(send_data, send_eof, report, finish, half_close=False)

        async def pump() -> None:
            while data := await wire.read():
                for event in conn.receive_data(data):
                    if isinstance(event, ws.Message) and event.payload:
                        closed = ws.parse_close_channel(event.payload, protocol)
                        if closed is not None:
                            if closed % 2 == 0 and closed // 2 < len(ends):
                                await ends[closed // 2].inbox.put(None)  # v5: client's EOF
                            continue
                        try:
                            routed = ports.route(event.payload)
                        except ValueError:
                            continue  # an unknown channel: ignored, as the kubelet does
                        if routed is not None and routed[1] and routed[0] < len(ends):
                            await ends[routed[0]].inbox.put(routed[1])
                    elif isinstance(event, ws.Ping) and not conn.close_sent:
                        await wire.send(conn.send_pong(event.payload))
                    elif isinstance(event, ws.Close | ws.ProtocolError):
                        await wire.send(conn.data_to_send())
                        return
                await wire.send(conn.data_to_send())

        async def keepalive() -> None:
            while True:
                await asyncio.sleep(WS_PING_INTERVAL_S)
                if conn.close_sent:
                    return
                await wire.send(conn.send_ping(b"tether"))

        try:
            async with asyncio.TaskGroup() as group:
                for payload in ports.initial_payloads():
                    await send_message(payload)
                reader = group.create_task(pump())
                pinger = group.create_task(keepalive())
                relays = []
                for index, port in enumerate(ports.ports):
                    ends.append(end_for(index))
                    relays.append(group.create_task(relay(ends[index], pod, pod_ip, port,
                                                          self.dial_timeout_s, self.linger_s, self.dial)))
                # As the kubelet does: the connection lives while any of its ports does.
                await asyncio.wait({reader, *relays}, return_when=asyncio.FIRST_COMPLETED)
                if not reader.done():
                    await asyncio.wait(relays)
                    await wire.send(conn.send_close(ws.CloseCode.NORMAL))
                    await asyncio.wait({reader}, timeout=5.0)
                for task in (reader, pinger, *relays):
                    task.cancel()
        except* CONNECTION_ERRORS:
            pass


class _Done(Exception):
    """The client ended the SPDY session (EOF, GOAWAY or a protocol error)."""


class _Link:
    """A byte stream carrying SPDY: the upgraded socket itself, or WebSocket messages."""

    async def recv(self) -> bytes | None:
        raise NotImplementedError

    async def send(self, data: bytes) -> None:
        raise NotImplementedError

    async def keepalive(self) -> None:
        """Runs for the link's life; transports with their own pings have nothing to do."""


class _RawLink(_Link):
    def __init__(self, wire: Wire) -> None:
        self.wire = wire

    async def recv(self) -> bytes | None:
        data = await self.wire.read()
        return data or None

    async def send(self, data: bytes) -> None:
        await self.wire.send(data)


class _TunnelLink(_Link):
    """SPDY bytes in WebSocket binary messages (client-go's `tunneling_connection.go`)."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.conn = ws.WebSocketConnection()
        self.pending: list[bytes] = []

    async def recv(self) -> bytes | None:
        while not self.pending:
            data = await self.wire.read()
            if not data:
                return None
            for event in self.conn.receive_data(data):
                if isinstance(event, ws.Message):
                    self.pending.append(event.payload)
                elif isinstance(event, ws.Ping) and not self.conn.close_sent:
                    await self.wire.send(self.conn.send_pong(event.payload))
                elif isinstance(event, ws.Close | ws.ProtocolError):
                    await self.wire.send(self.conn.data_to_send())
                    return None
            await self.wire.send(self.conn.data_to_send())
        out = b"".join(self.pending)
        self.pending.clear()
        return out

    async def send(self, data: bytes) -> None:
        if data and not self.conn.close_sent:
            await self.wire.send(self.conn.send_binary(data))

    async def keepalive(self) -> None:
        while True:
            await asyncio.sleep(WS_PING_INTERVAL_S)
            if self.conn.close_sent:
                return
            await self.wire.send(self.conn.send_ping(b"tether"))
