"""Port-forward to a pod through the API server, as kubectl 1.37 does it.

`PortForward.open(client, namespace, pod)` upgrades one connection to `pods/NAME/portforward`:
first as WebSocket with the subprotocol `SPDY/3.1+portforward.k8s.io` (the SPDY byte stream
rides in binary messages), and where the server refuses that upgrade, as plain
`Upgrade: SPDY/3.1` with `X-Stream-Protocol-Version: portforward.k8s.io`. Each `connect(port)`
then opens one forwarded connection over that session: an error stream and a data stream, tied
by a `requestID`, as kubectl opens them; many connections share one session.

A `ForwardedStream` reads and writes the data stream (and half-closes it with FIN); a message on
the error stream (the kubelet could not dial the port) surfaces as `PortForwardError` when the
stream ends. A dropped session ends every stream with `Unreachable`. The same works through the
hub's cluster proxy, which relays upgrades to the member's API server.

Memory is bounded: the reader stops taking bytes from the connection while a stream has more
than `MAX_BUFFERED` unread, as a TCP receive window would (SPDY's own flow control is not used
by client-go or the kubelet).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import urllib.parse
from collections import deque
from dataclasses import dataclass, field

from tether.kube.client import KubeClient, Upgraded, UpgradedStream
from tether.kube.errors import KubeError, Unreachable, error_from_status
from tether.net import spdy, websocket

log = logging.getLogger(__name__)

MAX_BUFFERED = 1024 * 1024
REPLY_TIMEOUT_S = 30.0  # client-go's stream-creation timeout is 30 s too
ERROR_WAIT_S = 5.0  # after the data stream ended, how long the error stream may take to finish
READ_CHUNK = 64 * 1024
WS_MAX_MESSAGE = 16 * 1024 * 1024
Transport = str  # "websocket" or "spdy"


class PortForwardError(KubeError):
    """The kubelet reported an error for one forwarded connection (its error stream)."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "PortForwardError", message)

    def __str__(self) -> str:
        return self.message


def portforward_path(namespace: str, pod: str) -> str:
    quoted_ns, quoted_pod = urllib.parse.quote(namespace, safe=""), urllib.parse.quote(pod, safe="")
    return f"/api/v1/namespaces/{quoted_ns}/pods/{quoted_pod}/portforward"


def _header(answer: Upgraded, name: str) -> str:
    return next((v.strip() for k, v in answer.headers if k.lower() == name), "")


def _refusal(answer: Upgraded, what: str) -> KubeError:
    try:
        status = json.loads(answer.body)
    except ValueError:
        status = None
    if isinstance(status, dict) and status.get("kind") == "Status":
        return error_from_status(status, http_code=answer.status_code)
    text = answer.body[:300].decode("utf-8", "replace").strip()
    return error_from_status({"code": answer.status_code, "message": f"{what}: HTTP {answer.status_code}: {text}"},
                             http_code=answer.status_code)


def _falls_back(error: KubeError) -> bool:
    """Whether kubectl would retry with plain SPDY: the server did not take the WebSocket upgrade
    (an old server answers 400/403 'Upgrade request required' or 'unable to upgrade'), as opposed to
    refusing the request itself (no such pod, not allowed)."""
    if error.code in (401, 404):
        return False
    if error.code == 403 and "upgrade" not in error.message.lower():
        return False
    return error.code in (400, 403, 405, 426) or error.code >= 500


@dataclass
class _Stream:
    data_id: int
    error_id: int
    port: int
    chunks: deque[bytes] = field(default_factory=deque)
    buffered: int = 0
    eof: bool = False
    error_text: bytearray = field(default_factory=bytearray)
    error_done: bool = False
    failure: KubeError | None = None
    replied: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    readable: asyncio.Event = field(default_factory=asyncio.Event)
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    error_finished: asyncio.Event = field(default_factory=asyncio.Event)


class ForwardedStream:
    """One forwarded connection to the pod's port (a byte stream with half-close)."""

    def __init__(self, forward: PortForward, state: _Stream) -> None:
        self._forward = forward
        self._state = state
        self._sent_eof = False
        self._closed = False

    @property
    def port(self) -> int:
        return self._state.port

    async def receive(self, max_bytes: int = READ_CHUNK) -> bytes:
        state = self._state
        while not state.chunks:
            if state.failure is not None:
                raise state.failure
            if state.eof:
                await self._error_verdict()
                return b""
            state.readable.clear()
            await state.readable.wait()
        first = state.chunks[0]
        if len(first) <= max_bytes:
            state.chunks.popleft()
            data = first
        else:
            data, state.chunks[0] = first[:max_bytes], first[max_bytes:]
        state.buffered -= len(data)
        if state.buffered < MAX_BUFFERED:
            state.drained.set()
        return data

    async def _error_verdict(self) -> None:
        state = self._state
        if not state.error_done:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(ERROR_WAIT_S):
                    await state.error_finished.wait()
        if state.error_text:
            raise PortForwardError(state.error_text.decode("utf-8", "replace"))

    async def send(self, data: bytes) -> None:
        if self._state.failure is not None:
            raise self._state.failure
        if self._sent_eof or self._closed:
            raise PortForwardError(f"port {self.port}: the stream is closed for writing")
        await self._forward._send_data(self._state, data, fin=False)

    async def send_eof(self) -> None:
        if not self._sent_eof and not self._closed and self._state.failure is None:
            self._sent_eof = True
            await self._forward._send_data(self._state, b"", fin=True)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            await self._forward._reset(self._state)


class PortForward:
    """One upgraded port-forward connection to a pod; `connect(port)` opens forwarded streams."""

    def __init__(self, client: KubeClient, namespace: str, pod: str) -> None:
        self.client = client
        self.namespace = namespace
        self.pod = pod
        self.transport: Transport = ""
        self._exit = contextlib.AsyncExitStack()
        self._stream: UpgradedStream | None = None
        self._ws: websocket.WebSocketConnection | None = None
        self._spdy = spdy.SpdySession(client=True)
        self._streams: dict[int, _Stream] = {}  # by data and by error stream id
        self._request_ids = itertools.count(0)
        self._write_lock = asyncio.Lock()
        self._reader: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()
        self._failure: KubeError | None = None

    @classmethod
    async def open(cls, client: KubeClient, namespace: str, pod: str, *, websocket_first: bool = True,
                   timeout_s: float | None = None) -> PortForward:
        """Upgrade a connection; `NotFound`, `Forbidden`, `Unreachable` as the server answers."""
        forward = cls(client, namespace, pod)
        try:
            await forward._upgrade(websocket_first, timeout_s)
        except BaseException:
            await forward._exit.aclose()
            raise
        forward._reader = asyncio.create_task(forward._read())
        return forward

    async def _upgrade(self, websocket_first: bool, timeout_s: float | None) -> None:
        path = portforward_path(self.namespace, self.pod)
        if websocket_first:
            key = websocket.new_client_key()
            headers = [("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Sec-WebSocket-Version", "13"),
                       ("Sec-WebSocket-Key", key), ("Sec-WebSocket-Protocol", spdy.TUNNEL_SUBPROTOCOL)]
            answer = await self._exit.enter_async_context(
                self.client.upgrade("GET", path, headers=headers, timeout_s=timeout_s))
            if answer.stream is not None:
                if _header(answer, "sec-websocket-protocol") != spdy.TUNNEL_SUBPROTOCOL or \
                        _header(answer, "sec-websocket-accept") != websocket.accept_key(key):
                    raise Unreachable(self.client.server, "port-forward: the WebSocket handshake "
                                      f"did not choose {spdy.TUNNEL_SUBPROTOCOL}")
                self._stream, self.transport = answer.stream, "websocket"
                self._ws = websocket.WebSocketConnection(client=True, max_message_size=WS_MAX_MESSAGE)
                return
            error = _refusal(answer, f"port-forward to {self.namespace}/{self.pod}")
            await self._exit.aclose()
            self._exit = contextlib.AsyncExitStack()
            if not _falls_back(error):
                raise error
            log.debug("port-forward over WebSocket refused (%s); trying SPDY", error)
        headers = [("Connection", "Upgrade"), ("Upgrade", spdy.UPGRADE_PROTOCOL),
                   ("X-Stream-Protocol-Version", spdy.PORTFORWARD_PROTOCOL)]
        answer = await self._exit.enter_async_context(
            self.client.upgrade("POST", path, headers=headers, timeout_s=timeout_s))
        if answer.stream is None:
            raise _refusal(answer, f"port-forward to {self.namespace}/{self.pod}")
        self._stream, self.transport = answer.stream, "spdy"

    # -- connections

    async def connect(self, port: int, *, timeout_s: float = REPLY_TIMEOUT_S) -> ForwardedStream:
        """A new forwarded connection to `port` in the pod (the kubelet dials when it sees it)."""
        if not 0 < port < 65536:
            raise ValueError(f"port {port} out of range")
        self._check()
        request_id = str(next(self._request_ids))
        base = {"port": str(port), "requestID": request_id}
        async with self._write_lock:
            error_id, error_frame = self._spdy.open_stream({**base, "streamType": spdy.STREAM_TYPE_ERROR})
            # kubectl closes its side of the error stream at once: only the kubelet writes on it
            error_fin = self._spdy.data(error_id, b"", fin=True)
            data_id, data_frame = self._spdy.open_stream({**base, "streamType": spdy.STREAM_TYPE_DATA})
            state = _Stream(data_id, error_id, port)
            state.drained.set()
            self._streams[data_id] = self._streams[error_id] = state
            await self._write(error_frame + error_fin + data_frame)
        try:
            async with asyncio.timeout(timeout_s):
                await state.replied
        except TimeoutError:
            await self._reset(state)
            raise Unreachable(self.client.server, f"port-forward to {self.pod}:{port}: "
                              f"no reply within {timeout_s:g}s") from None
        except BaseException:
            await self._reset(state)
            raise
        return ForwardedStream(self, state)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def aclose(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.wait([self._reader])
        self._fail_all(Unreachable(self.client.server, f"port-forward to {self.pod} closed"))
        with contextlib.suppress(Exception):
            if self._ws is not None and not self._ws.closed:
                await self._write_raw(self._ws.send_close())
        await self._exit.aclose()

    async def __aenter__(self) -> PortForward:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- plumbing

    def _check(self) -> None:
        if self._failure is not None:
            raise self._failure
        if self._closed.is_set():
            raise Unreachable(self.client.server, f"port-forward to {self.pod} is closed")

    async def _send_data(self, state: _Stream, data: bytes, *, fin: bool) -> None:
        async with self._write_lock:
            if not self._spdy.is_open(state.data_id):
                if state.failure is not None:
                    raise state.failure
                raise PortForwardError(f"port {state.port}: the stream was closed by the server")
            try:
                frames = self._spdy.data(state.data_id, data, fin=fin)
            except spdy.SpdyError as exc:
                raise PortForwardError(f"port {state.port}: {exc}") from None
            await self._write(frames)

    async def _reset(self, state: _Stream) -> None:
        frames = b""
        for stream_id in (state.data_id, state.error_id):
            self._streams.pop(stream_id, None)
            if self._spdy.is_open(stream_id):
                frames += self._spdy.reset(stream_id)
        state.drained.set()
        if frames and not self._closed.is_set():
            with contextlib.suppress(KubeError):
                async with self._write_lock:
                    await self._write(frames)

    async def _write(self, frames: bytes) -> None:
        """Send SPDY bytes (under `_write_lock`), wrapped in a WebSocket message when tunnelled."""
        frames += self._spdy.data_to_send()
        if not frames:
            return
        if self._ws is not None:
            frames = self._ws.send_binary(frames)
        await self._write_raw(frames)

    async def _write_raw(self, data: bytes) -> None:
        assert self._stream is not None
        try:
            await self._stream.write(data)
        except KubeError as exc:
            self._fail_all(exc)
            raise

    def _fail_all(self, error: KubeError) -> None:
        if self._failure is None:
            self._failure = error
        self._closed.set()
        for state in {id(s): s for s in self._streams.values()}.values():
            if state.failure is None:
                state.failure = error
            if not state.replied.done():
                state.replied.set_exception(error)
                state.replied.exception()  # retrieved: nobody may be waiting any more
            state.readable.set()
            state.error_finished.set()
            state.drained.set()
        self._streams.clear()

    async def _read(self) -> None:
        assert self._stream is not None
        error: KubeError = Unreachable(self.client.server, f"port-forward to {self.pod}: the server closed it")
        try:
            while True:
                data = await self._stream.read(256 * 1024)
                if not data:
                    break
                if self._ws is not None:
                    payload = bytearray()
                    finished = False
                    for event in self._ws.receive_data(data):
                        if isinstance(event, websocket.Message):
                            payload += event.payload
                        elif isinstance(event, websocket.Ping):
                            async with self._write_lock:
                                await self._write_raw(self._ws.send_pong(event.payload))
                        elif isinstance(event, websocket.Close | websocket.ProtocolError):
                            finished = True
                    pending = self._ws.data_to_send()
                    if pending:
                        async with self._write_lock:
                            await self._write_raw(pending)
                    await self._on_spdy(bytes(payload))
                    if finished:
                        break
                else:
                    await self._on_spdy(data)
        except asyncio.CancelledError:
            raise
        except KubeError as exc:
            error = exc
        except Exception as exc:  # a broken frame from the server
            error = Unreachable(self.client.server, f"port-forward to {self.pod}: {exc}")
        self._fail_all(error)

    async def _on_spdy(self, data: bytes) -> None:
        if not data:
            return
        replies = b""
        for event in self._spdy.receive_data(data):
            if isinstance(event, spdy.StreamReplied):
                state = self._streams.get(event.stream_id)
                if state is not None and event.stream_id == state.data_id and not state.replied.done():
                    state.replied.set_result(None)
                if state is not None and event.fin:
                    self._ended(state, event.stream_id)
            elif isinstance(event, spdy.Data):
                state = self._streams.get(event.stream_id)
                if state is None:
                    continue
                if event.stream_id == state.data_id:
                    if event.data:
                        state.chunks.append(event.data)
                        state.buffered += len(event.data)
                        state.readable.set()
                elif event.data:
                    state.error_text += event.data[:4096]
                if event.fin:
                    self._ended(state, event.stream_id)
                if state.buffered >= MAX_BUFFERED:
                    state.drained.clear()
                    await state.drained.wait()  # the reader waits: the server feels it as TCP backpressure
            elif isinstance(event, spdy.StreamReset):
                state = self._streams.get(event.stream_id)
                if state is not None:
                    if event.stream_id == state.data_id:
                        if not state.replied.done():
                            state.replied.set_exception(PortForwardError(
                                f"port {state.port}: the server refused the stream"))
                        state.eof = True
                        state.readable.set()
                    self._ended(state, event.stream_id)
            elif isinstance(event, spdy.Ping) and not event.reply:
                replies += self._spdy.ping(event.ping_id)
            elif isinstance(event, spdy.StreamOpened):
                replies += self._spdy.reset(event.stream_id, spdy.RstStatus.REFUSED_STREAM)
            elif isinstance(event, spdy.ProtocolError):
                raise Unreachable(self.client.server, f"port-forward: SPDY protocol error: {event.message}")
        async with self._write_lock:  # also what the session queued itself (RST for a bad stream)
            await self._write(replies)

    def _ended(self, state: _Stream, stream_id: int) -> None:
        if stream_id == state.data_id:
            state.eof = True
            state.readable.set()
        else:
            state.error_done = True
            state.error_finished.set()
