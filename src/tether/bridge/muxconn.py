"""A `MuxSession` driven over a `ByteStream`: streams as `ByteStream`s, UDP associations, control calls.

Both ends use `MuxConnection`: the developer side (`MuxChannel`) opens TCP and UDP streams and
accepts reverse ones; the agent accepts TCP/UDP opens and opens reverse streams. One reader task
feeds the session and wakes streams; one writer task sends whatever the session has queued, so
frames from many streams coalesce into few writes. Flow control is the session's: a stream's
`send` waits for credit, and credit goes back only as its `receive` hands data to the
application, so a slow consumer on either end holds at most one window per stream in memory.

When the transport ends, every stream and pending call fails with `ChannelLost`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tether.bridge import mux
from tether.bridge.channel import READ_CHUNK, BridgeError, ByteStream, ChannelLost, DialFailed

log = logging.getLogger(__name__)

KEEPALIVE_INTERVAL_S = 10.0
KEEPALIVE_TIMEOUT_S = 30.0  # no frame at all for this long: the transport is dead
CONTROL_TIMEOUT_S = 15.0
OUTPUT_HIGH_WATER = 256 * 1024  # queued for the transport beyond this, senders wait


class StreamReset(BridgeError):
    """The far end closed this stream abruptly (its destination reset it, or it gave up)."""


class ControlError(BridgeError):
    """The peer refused a control request."""


@dataclass(frozen=True)
class OpenRequest:
    """A stream the peer wants to open; the handler must `accept` or `reject` it."""

    connection: MuxConnection
    opened: mux.StreamOpened

    def accept(self) -> MuxStream:
        return self.connection._accept(self.opened)

    def accept_datagrams(self) -> MuxDatagrams:
        return self.connection._accept_datagrams(self.opened)

    def reject(self, reason: str) -> None:
        self.connection._reject(self.opened.stream, reason)


OpenHandler = Callable[[OpenRequest], Awaitable[None]]
ControlHandler = Callable[["MuxConnection", dict[str, Any]], Awaitable[dict[str, Any]]]


class MuxStream:
    """One multiplexed stream; a `ByteStream`."""

    def __init__(self, connection: MuxConnection, stream_id: int) -> None:
        self._connection = connection
        self.id = stream_id
        self._chunks: deque[bytes] = deque()
        self._eof = False
        self._error: BaseException | None = None
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self.bytes_in = 0
        self.bytes_out = 0

    # fed by the connection
    def _data(self, data: bytes) -> None:
        self._chunks.append(data)
        self._readable.set()

    def _end(self) -> None:
        self._eof = True
        self._readable.set()

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        self._readable.set()
        self._writable.set()

    def _window(self) -> None:
        self._writable.set()

    async def receive(self, max_bytes: int = READ_CHUNK) -> bytes:
        while not self._chunks:
            if self._eof:
                return b""
            if self._error is not None:
                if isinstance(self._error, StreamReset):
                    return b""  # the peer is done with the stream: an end, as a TCP reset reads
                raise self._error
            self._readable.clear()
            await self._readable.wait()
        first = self._chunks[0]
        if len(first) <= max_bytes:
            self._chunks.popleft()
            data = first
        else:
            data, self._chunks[0] = first[:max_bytes], first[max_bytes:]
        self.bytes_in += len(data)
        self._connection._consumed(self.id, len(data))
        return data

    async def send(self, data: bytes) -> None:
        # The session keeps a reference until it is written: never to a buffer the caller may reuse.
        view = memoryview(data if type(data) is bytes else bytes(data))
        while view:
            if self._error is not None:
                raise self._error
            session = self._connection.session
            if not session.is_open(self.id):
                raise StreamReset(f"stream {self.id} is closed")
            if session.send_window(self.id) == 0:
                self._writable.clear()
                await self._writable.wait()
                continue
            taken = session.send_data(self.id, view)
            self.bytes_out += taken
            self._connection.stats.bytes_sent += taken
            view = view[taken:]
            self._connection._kick()
        await self._connection._drained()

    async def send_eof(self) -> None:
        if self._error is None:
            self._connection._send_eof(self.id)

    async def aclose(self) -> None:
        self._connection._close_stream(self.id)
        self._fail(StreamReset("closed"))


class MuxDatagrams:
    """A UDP association over one stream: each DATA frame is one datagram."""

    def __init__(self, connection: MuxConnection, stream_id: int) -> None:
        self._connection = connection
        self.id = stream_id
        self._queue: asyncio.Queue[bytes | BaseException] = asyncio.Queue()

    def _data(self, data: bytes) -> None:
        self._queue.put_nowait(data)

    def _end(self) -> None:
        self._queue.put_nowait(StreamReset("association ended"))

    def _fail(self, error: BaseException) -> None:
        self._queue.put_nowait(error)

    def _window(self) -> None:
        pass

    async def send(self, payload: bytes) -> None:
        self.send_nowait(payload)

    def send_nowait(self, payload: bytes) -> None:
        session = self._connection.session
        if not session.is_open(self.id):
            if self._connection.lost:
                raise ChannelLost("the UDP association is closed")
            raise StreamReset("the UDP association is closed")
        if len(payload) > mux.MAX_DATA_FRAME:
            return  # larger than a frame carries: dropped, as an oversized datagram would be
        if session.send_data(self.id, payload):  # else dropped: the peer is not reading, as UDP may
            self._connection.stats.bytes_sent += len(payload)
            self._connection._kick()

    async def receive(self) -> bytes:
        item = await self._queue.get()
        if isinstance(item, BaseException):
            self._queue.put_nowait(item)  # every later receive fails the same way
            raise item
        self._connection._consumed(self.id, len(item))
        return item

    async def aclose(self) -> None:
        self._connection._close_stream(self.id)


_Endpoint = MuxStream | MuxDatagrams


@dataclass
class MuxStats:
    """Counters for status reports (payload bytes, not framing)."""

    bytes_sent: int = 0
    bytes_received: int = 0
    streams_opened: int = 0  # by this side
    streams_accepted: int = 0  # opened by the peer

    def add(self, other: MuxStats) -> None:
        self.bytes_sent += other.bytes_sent
        self.bytes_received += other.bytes_received
        self.streams_opened += other.streams_opened
        self.streams_accepted += other.streams_accepted


class MuxConnection:
    """A session over a transport; `start()` it, `aclose()` it, `wait_lost()` for its end."""

    def __init__(self, transport: ByteStream, role: mux.Role, *, on_open: OpenHandler | None = None,
                 on_control: ControlHandler | None = None, hello: dict[str, Any] | None = None,
                 window: int = mux.INITIAL_WINDOW, keepalive_s: float = KEEPALIVE_INTERVAL_S,
                 name: str = "") -> None:
        self.session = mux.MuxSession(role, window=window, hello=hello or {})
        self.stats = MuxStats()
        self.name = name or role
        self.peer_hello: dict[str, Any] = {}
        self._transport = transport
        self._on_open = on_open
        self._on_control = on_control
        self._keepalive_s = keepalive_s
        self._endpoints: dict[int, _Endpoint] = {}
        self._pending_opens: dict[int, asyncio.Future[None]] = {}
        self._calls: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._call_ids = itertools.count(1)
        self._wake_writer = asyncio.Event()
        self._flushed = asyncio.Event()
        self._flushed.set()
        self._idle = asyncio.Event()  # nothing queued for the transport
        self._hello = asyncio.Event()
        self._lost = asyncio.Event()
        self._lost_reason = ""
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_heard = 0.0

    # -- lifecycle

    async def start(self, *, hello_timeout_s: float = 15.0) -> None:
        """Run the connection and wait for the peer's HELLO (`ChannelLost` if it never comes)."""
        loop = asyncio.get_running_loop()
        self._last_heard = loop.time()
        self._spawn(self._reader())
        self._spawn(self._writer())
        if self._keepalive_s > 0:
            self._spawn(self._keepalive())
        self._kick()
        waits = [asyncio.ensure_future(self._hello.wait()), asyncio.ensure_future(self._lost.wait())]
        try:
            async with asyncio.timeout(hello_timeout_s):
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            await self._lose("the peer did not greet within the deadline")
        finally:
            for waiting in waits:
                waiting.cancel()
        if not self._hello.is_set():
            await self.aclose()
            raise ChannelLost(f"{self.name}: {self._lost_reason or 'no greeting from the peer'}")

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    @property
    def lost_reason(self) -> str:
        return self._lost_reason

    async def wait_lost(self) -> None:
        await self._lost.wait()

    async def aclose(self, reason: str = "closing") -> None:
        if not self._lost.is_set():
            self.session.goaway(reason)
            self._kick()
            await self._flush_all(1.0)
        await self._lose(reason)
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)  # their CancelledError stays theirs; ours still reaches us

    async def _lose(self, reason: str) -> None:
        if self._lost.is_set():
            return
        self._lost_reason = reason
        self._lost.set()
        error = ChannelLost(f"{self.name}: {reason}")
        for endpoint in list(self._endpoints.values()):
            endpoint._fail(error)
        self._endpoints.clear()
        for opening in self._pending_opens.values():
            if not opening.done():
                opening.set_exception(error)
        for call in self._calls.values():
            if not call.done():
                call.set_exception(error)
        self._flushed.set()
        self._idle.set()
        self._wake_writer.set()
        with contextlib.suppress(Exception):
            await self._transport.aclose()

    # -- opening and calls

    async def open_tcp(self, host: str, port: int, *, timeout_s: float) -> MuxStream:
        stream_id = self._check().open_tcp(host, port)
        stream = MuxStream(self, stream_id)
        await self._await_open(stream_id, stream, f"{host}:{port}", timeout_s)
        return stream

    async def open_udp(self, host: str, port: int, *, timeout_s: float) -> MuxDatagrams:
        stream_id = self._check().open_udp(host, port)
        datagrams = MuxDatagrams(self, stream_id)
        await self._await_open(stream_id, datagrams, f"udp {host}:{port}", timeout_s)
        return datagrams

    async def open_reverse(self, route: str, port: int, peer: str, *, timeout_s: float) -> MuxStream:
        stream_id = self._check().open_reverse(route, port, peer)
        stream = MuxStream(self, stream_id)
        await self._await_open(stream_id, stream, f"route {route} port {port}", timeout_s)
        return stream

    def _check(self) -> mux.MuxSession:
        if self._lost.is_set():
            raise ChannelLost(f"{self.name}: {self._lost_reason}")
        return self.session

    async def _await_open(self, stream_id: int, endpoint: _Endpoint, what: str, timeout_s: float) -> None:
        self.stats.streams_opened += 1
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending_opens[stream_id] = future
        self._endpoints[stream_id] = endpoint
        self._kick()
        try:
            async with asyncio.timeout(timeout_s):
                await future
        except TimeoutError:
            self._close_stream(stream_id)
            raise DialFailed(f"dial {what}: no answer within {timeout_s:g}s") from None
        except BaseException:
            self._endpoints.pop(stream_id, None)
            raise
        finally:
            self._pending_opens.pop(stream_id, None)

    async def call(self, message: dict[str, Any], *, timeout_s: float = CONTROL_TIMEOUT_S) -> dict[str, Any]:
        """Send a control request and wait for its reply; `ControlError` if the peer refuses it."""
        session = self._check()
        call_id = next(self._call_ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = future
        session.control({**message, "id": call_id})
        self._kick()
        try:
            async with asyncio.timeout(timeout_s):
                reply = await future
        except TimeoutError:
            raise ChannelLost(f"{self.name}: no answer to {message.get('op')!r} within {timeout_s:g}s") from None
        finally:
            self._calls.pop(call_id, None)
        if not reply.get("ok"):
            raise ControlError(str(reply.get("error") or "refused"))
        return reply

    # -- used by streams

    def _kick(self) -> None:
        self._idle.clear()
        if self.session.pending_output >= OUTPUT_HIGH_WATER:
            self._flushed.clear()
        self._wake_writer.set()

    async def _drained(self) -> None:
        """Wait while much is queued for the transport (so writers feel the transport's pace)."""
        if self.session.pending_output >= OUTPUT_HIGH_WATER:
            self._flushed.clear()
        await self._flushed.wait()
        if self._lost.is_set():
            raise ChannelLost(f"{self.name}: {self._lost_reason}")

    async def _flush_all(self, timeout_s: float) -> None:
        """Give the writer a bounded chance to send everything queued (a GOAWAY before closing)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()

    def _consumed(self, stream_id: int, count: int) -> None:
        if not self._lost.is_set():
            self.session.consumed(stream_id, count)
            self._kick()

    def _send_eof(self, stream_id: int) -> None:
        if self._lost.is_set():
            return
        self.session.send_eof(stream_id)
        if not self.session.is_open(stream_id):
            self._endpoints.pop(stream_id, None)
        self._kick()

    def _close_stream(self, stream_id: int) -> None:
        self._endpoints.pop(stream_id, None)
        if not self._lost.is_set() and self.session.is_open(stream_id):
            self.session.close_stream(stream_id)
            self._kick()

    def _accept(self, opened: mux.StreamOpened) -> MuxStream:
        self.stats.streams_accepted += 1
        stream = MuxStream(self, opened.stream)
        self._check().accept(opened.stream)
        self._endpoints[opened.stream] = stream
        self._kick()
        return stream

    def _accept_datagrams(self, opened: mux.StreamOpened) -> MuxDatagrams:
        self.stats.streams_accepted += 1
        datagrams = MuxDatagrams(self, opened.stream)
        self._check().accept(opened.stream)
        self._endpoints[opened.stream] = datagrams
        self._kick()
        return datagrams

    def _reject(self, stream_id: int, reason: str) -> None:
        if not self._lost.is_set() and self.session.is_open(stream_id):
            with contextlib.suppress(mux.MuxUsageError):  # already accepted: the caller closes it
                self.session.reject(stream_id, reason)
            self._kick()

    # -- tasks

    async def _writer(self) -> None:
        try:
            while not self._lost.is_set():
                await self._wake_writer.wait()
                self._wake_writer.clear()
                data = self.session.data_to_send()
                if data:
                    await self._transport.send(data)
                if self.session.pending_output < OUTPUT_HIGH_WATER:
                    self._flushed.set()
                if not self.session.pending_output and not self._wake_writer.is_set():
                    self._idle.set()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the transport failed: the connection is over
            await self._lose(f"sending failed: {exc or type(exc).__name__}")

    async def _reader(self) -> None:
        loop = asyncio.get_running_loop()
        reason = "the peer closed the connection"
        try:
            while True:
                data = await self._transport.receive(256 * 1024)
                if not data:
                    break
                self._last_heard = loop.time()
                try:
                    events = self.session.receive_data(data)
                except mux.MuxProtocolError as exc:
                    self.session.goaway(f"protocol error: {exc}")
                    self._kick()
                    reason = f"protocol error: {exc}"
                    await self._flush_all(1.0)
                    break
                for event in events:
                    self._dispatch(event)
                self._kick()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reason = f"receiving failed: {exc or type(exc).__name__}"
        await self._lose(reason)

    async def _keepalive(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._lost.is_set():
            await asyncio.sleep(self._keepalive_s)
            if loop.time() - self._last_heard > max(KEEPALIVE_TIMEOUT_S, 3 * self._keepalive_s):
                await self._lose("the peer stopped answering")
                return
            if not self._lost.is_set():
                self.session.ping(os.urandom(8))
                self._kick()

    def _dispatch(self, event: mux.Event) -> None:
        if isinstance(event, mux.DataReceived | mux.EofReceived | mux.WindowOpened):
            endpoint = self._endpoints.get(event.stream)
            if endpoint is None:
                return
            if isinstance(event, mux.DataReceived):
                self.stats.bytes_received += len(event.data)
                endpoint._data(event.data)
            elif isinstance(event, mux.EofReceived):
                endpoint._end()
            else:
                endpoint._window()
        elif isinstance(event, mux.StreamClosed):
            closed = self._endpoints.pop(event.stream, None)
            if closed is not None and event.by_peer:
                closed._fail(StreamReset(event.reason or "closed by the peer"))
        elif isinstance(event, mux.OpenReplied):
            future = self._pending_opens.get(event.stream)
            if event.ok:
                if future is not None and not future.done():
                    future.set_result(None)
                else:  # the opener gave up meanwhile
                    self._close_stream(event.stream)
            else:
                self._endpoints.pop(event.stream, None)
                if future is not None and not future.done():
                    future.set_exception(DialFailed(event.reason or "refused"))
        elif isinstance(event, mux.StreamOpened):
            if self._on_open is None:
                self.session.reject(event.stream, "this side accepts no streams")
            else:
                self._spawn(self._handle_open(OpenRequest(self, event)))
        elif isinstance(event, mux.ControlReceived):
            message = event.message
            if "op" in message:
                self._spawn(self._handle_control(message))
            else:
                call = self._calls.get(message.get("id", -1))
                if call is not None and not call.done():
                    call.set_result(message)
        elif isinstance(event, mux.HelloReceived):
            self.peer_hello = event.info
            self._hello.set()
        elif isinstance(event, mux.GoAwayReceived):
            self._spawn(self._lose(f"the peer is going away: {event.reason}" if event.reason
                                   else "the peer is going away"))

    async def _handle_open(self, request: OpenRequest) -> None:
        assert self._on_open is not None
        try:
            await self._on_open(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("%s: handling stream %d failed: %s", self.name, request.opened.stream, exc)
            self._reject(request.opened.stream, f"internal error: {type(exc).__name__}")
            self._close_stream(request.opened.stream)

    async def _handle_control(self, message: dict[str, Any]) -> None:
        call_id = message.get("id")
        if self._on_control is None:
            reply: dict[str, Any] = {"ok": False, "error": "no control requests here"}
        else:
            try:
                reply = await self._on_control(self, message)
            except BridgeError as exc:
                reply = {"ok": False, "error": str(exc)}
            except Exception as exc:
                log.warning("%s: control %r failed: %s", self.name, message.get("op"), exc)
                reply = {"ok": False, "error": f"internal error: {type(exc).__name__}"}
        if not self._lost.is_set():
            self.session.control({**reply, "id": call_id})
            self._kick()
