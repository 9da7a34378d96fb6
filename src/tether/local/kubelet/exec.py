"""`pods/exec` and `pods/attach`: the kubelet's streaming subresources, served in-process.

Transports (see docs/api-server-notes.md):

- WebSocket (`GET`, `Upgrade: websocket`, subprotocol `v5.channel.k8s.io` or `v4.channel.k8s.io`):
  kubectl 1.30+ and the Python clients. Binary messages whose first byte is the channel.
- SPDY/3.1 (`POST`, `Upgrade: SPDY/3.1`, `X-Stream-Protocol-Version: v4.channel.k8s.io`): what
  kubectl falls back to (and uses with `KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false`); one SPDY stream
  per channel, told apart by the `streamType` header.

Both feed the same session code through `Channels`. Exec runs the command *on this machine*, with
the container's environment (`Kubelet.exec_environment`) and the pod's directory as working
directory: local clusters have no container isolation. Attach follows the container's log file
live (stdout and stderr as they are written); stdin cannot reach a container's process, so
`attach -i` is refused up front with a clear message.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import pty
import shutil
import ssl
import struct
import sys
import termios
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tether.local.errors import ApiError, bad_request
from tether.local.kubelet import environment
from tether.local.kubelet.kubelet import Kubelet
from tether.local.kubelet.logs import choose_container, log_file
from tether.local.kubelet.runtime import Attachment, parse_log_line, stop_process
from tether.local.resources import ResourceType
from tether.local.store import Store
from tether.net import spdy
from tether.net import websocket as ws
from tether.net.httpserver import Reply, Request, UpgradeResponse
from tether.objects import Obj

log = logging.getLogger(__name__)

WS_PROTOCOLS = (ws.CHANNEL_V5, ws.CHANNEL_V4)
# Over SPDY v4 is enough: kubectl offers v5..v1 and v5 only adds the stdin-close message that
# SPDY already expresses with FIN. The 101 must name the chosen version or kubectl gives up.
SPDY_PROTOCOLS = (ws.CHANNEL_V4,)
READ_CHUNK = 64 * 1024
INBOX_SIZE = 64  # pending client messages before the socket reader stops reading (backpressure)
STREAM_CREATION_TIMEOUT_S = 30.0  # the kubelet's default for SPDY streams to show up
CLOSE_WAIT_S = 5.0  # for the client's close after our final status, before dropping the socket
WRITE_TIMEOUT_S = 60.0  # a client that reads nothing for this long is treated as gone
OUTPUT_DRAIN_S = 5.0  # background children may hold stdout open after the command exited
STOP_GRACE_S = 1.0  # SIGTERM -> SIGKILL for a command whose client went away
ATTACH_POLL_S = 0.2
TTY_WRITE_TIMEOUT_S = 10.0
PTY_HIGH_WATER = 64  # queued pty reads before reading pauses until the client catches up
PTY_LOW_WATER = 16
CONNECTION_ERRORS = (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError)

# Makes the pty the command's controlling terminal (Ctrl-C -> SIGINT, job control, SIGWINCH),
# then becomes the command. A tiny exec shim instead of `preexec_fn`, which is unsafe in a
# process with threads.
_CTTY_SHIM = (
    "import fcntl,os,sys,termios\n"
    "fcntl.ioctl(0, termios.TIOCSCTTY, 0)\n"
    "os.execv(sys.argv[1], sys.argv[2:])\n"
)


def flag(request: Request, name: str) -> bool:
    """A boolean query parameter; the Python client sends `True`, client-go `true`."""
    return request.param(name).lower() in ("true", "1")


# --------------------------------------------------------------------------------------------
# What arrives from the client, whatever the transport
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StdinData:
    data: bytes


@dataclass(frozen=True)
class StdinClosed:
    pass


@dataclass(frozen=True)
class Resize:
    size: ws.TerminalSize


Input = StdinData | StdinClosed | Resize


class Inbox:
    """Client input for the session, bounded so a slow consumer slows the socket reader.

    `discard()` (session over) drops what is queued and everything after, so the reader never
    blocks on a queue nobody empties.
    """

    def __init__(self, size: int = INBOX_SIZE) -> None:
        self.queue: asyncio.Queue[Input] = asyncio.Queue(size)
        self.discarded = False

    async def put(self, item: Input) -> None:
        if not self.discarded:
            await self.queue.put(item)

    async def get(self) -> Input:
        return await self.queue.get()

    def discard(self) -> None:
        self.discarded = True
        while not self.queue.empty():
            self.queue.get_nowait()


class Wire:
    """The upgraded socket: whole frames per write, so concurrent senders never interleave."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def send(self, data: bytes) -> None:
        if not data:
            return
        self.writer.write(data)
        await asyncio.wait_for(self.writer.drain(), WRITE_TIMEOUT_S)

    async def read(self) -> bytes:
        return await self.reader.read(READ_CHUNK)


class Channels(Protocol):
    """The session's view of a connection: numbered output channels and an input inbox."""

    inbox: Inbox

    async def pump(self) -> None:
        """Read the client until it closes or goes away (then return)."""

    async def ready(self) -> bool:
        """Wait until every expected stream exists; False if they never came."""

    async def write(self, channel: int, data: bytes) -> None: ...

    async def end(self, channel: int) -> None:
        """No more output on `channel`."""

    async def finish(self, status: bytes) -> None:
        """Deliver the final Status (channel 3) and start closing."""


class WebSocketChannels:
    def __init__(self, wire: Wire, protocol: str) -> None:
        self.wire = wire
        self.protocol = protocol
        self.conn = ws.WebSocketConnection()
        self.inbox = Inbox()

    async def pump(self) -> None:
        while True:
            data = await self.wire.read()
            if not data:
                return
            for event in self.conn.receive_data(data):
                if isinstance(event, ws.Message):
                    await self._on_message(event.payload)
                elif isinstance(event, ws.Ping) and not self.conn.close_sent:
                    # client-go pings every 5 s and fails the stream without pongs.
                    await self.wire.send(self.conn.send_pong(event.payload))
                elif isinstance(event, ws.Close | ws.ProtocolError):
                    await self.wire.send(self.conn.data_to_send())
                    return
            await self.wire.send(self.conn.data_to_send())

    async def _on_message(self, payload: bytes) -> None:
        if not payload:
            return
        closed = ws.parse_close_channel(payload, self.protocol)
        if closed is not None:
            if closed == ws.STDIN:
                await self.inbox.put(StdinClosed())
            return
        channel, data = ws.parse_channel(payload)
        if channel == ws.STDIN and data:
            await self.inbox.put(StdinData(data))
        elif channel == ws.RESIZE:
            for size in _resizes(data):
                await self.inbox.put(Resize(size))

    async def ready(self) -> bool:
        return True

    async def write(self, channel: int, data: bytes) -> None:
        if data and not self.conn.close_sent:
            await self.wire.send(self.conn.send_binary(ws.channel_frame(channel, data)))

    async def end(self, channel: int) -> None:
        pass  # the channel protocols end output channels by closing the connection

    async def finish(self, status: bytes) -> None:
        # client-go reads channel 3 until EOF, so the Close frame is what delivers the status.
        if not self.conn.close_sent:
            await self.wire.send(self.conn.send_binary(ws.channel_frame(ws.ERROR, status)))
            await self.wire.send(self.conn.send_close(ws.CloseCode.NORMAL))


def _resizes(data: bytes) -> list[ws.TerminalSize]:
    try:
        return ws.parse_resize(data)
    except (ValueError, UnicodeDecodeError):
        return []  # a garbled resize is not worth ending the session over


STREAM_TYPES = {"error": ws.ERROR, "stdin": ws.STDIN, "stdout": ws.STDOUT, "stderr": ws.STDERR,
                "resize": ws.RESIZE}


class SpdyChannels:
    """v4 channel semantics over SPDY: one stream per channel, FIN closes a direction."""

    def __init__(self, wire: Wire, expected: set[int]) -> None:
        self.wire = wire
        self.session = spdy.SpdySession()
        self.inbox = Inbox()
        self.expected = expected
        self.streams: dict[int, int] = {}  # channel -> stream id
        self.channel_of: dict[int, int] = {}  # stream id -> channel
        self._all_there = asyncio.Event()
        self._resize_buffer = b""

    async def pump(self) -> None:
        while True:
            data = await self.wire.read()
            if not data:
                return
            for event in self.session.receive_data(data):
                if isinstance(event, spdy.StreamOpened):
                    await self._opened(event)
                elif isinstance(event, spdy.Data):
                    await self._data(event)
                elif isinstance(event, spdy.Ping) and not event.reply:
                    await self.wire.send(self.session.ping(event.ping_id))
                elif isinstance(event, spdy.GoAway | spdy.ProtocolError):
                    await self.wire.send(self.session.data_to_send())
                    return
            await self.wire.send(self.session.data_to_send())

    async def _opened(self, event: spdy.StreamOpened) -> None:
        channel = STREAM_TYPES.get(event.headers.get(spdy.HEADER_STREAM_TYPE, ""))
        if channel is None or channel in self.streams:
            await self.wire.send(self.session.reset(event.stream_id, spdy.RstStatus.REFUSED_STREAM))
            return
        await self.wire.send(self.session.reply(event.stream_id, {}))
        self.streams[channel] = event.stream_id
        self.channel_of[event.stream_id] = channel
        if self.expected <= set(self.streams):
            self._all_there.set()
        if event.fin and channel == ws.STDIN:
            await self.inbox.put(StdinClosed())

    async def _data(self, event: spdy.Data) -> None:
        channel = self.channel_of.get(event.stream_id)
        if channel == ws.STDIN:
            if event.data:
                await self.inbox.put(StdinData(event.data))
            if event.fin:
                await self.inbox.put(StdinClosed())
        elif channel == ws.RESIZE:
            # client-go writes one JSON document per line; a frame may split one.
            self._resize_buffer += event.data
            *lines, self._resize_buffer = self._resize_buffer.split(b"\n")
            for line in lines:
                for size in _resizes(line):
                    await self.inbox.put(Resize(size))

    async def ready(self) -> bool:
        try:
            await asyncio.wait_for(self._all_there.wait(), STREAM_CREATION_TIMEOUT_S)
        except TimeoutError:
            return False
        return True

    async def write(self, channel: int, data: bytes) -> None:
        stream = self.streams.get(channel)
        if data and stream is not None and self.session.is_open(stream):
            with contextlib.suppress(spdy.SpdyError):
                await self.wire.send(self.session.data(stream, data))

    async def end(self, channel: int) -> None:
        stream = self.streams.get(channel)
        if stream is not None and self.session.is_open(stream):
            with contextlib.suppress(spdy.SpdyError):
                await self.wire.send(self.session.data(stream, b"", fin=True))

    async def finish(self, status: bytes) -> None:
        await self.write(ws.ERROR, status)
        for channel in (ws.ERROR, ws.STDOUT, ws.STDERR):
            await self.end(channel)


# --------------------------------------------------------------------------------------------
# Connection lifecycle shared by exec and attach
# --------------------------------------------------------------------------------------------

Session = Callable[[Channels], Awaitable[bytes]]


async def serve_channels(channels: Channels, session: Session, what: str) -> None:
    """Run `session` while reading the client; deliver its Status; close within bounds.

    A client that goes away cancels the session (which stops its command); a finished session
    gets CLOSE_WAIT_S for the client's own close, so no buffered output is lost to a reset.
    """
    try:
        async with asyncio.TaskGroup() as group:
            pump = group.create_task(channels.pump())
            if not await channels.ready():
                pump.cancel()
                return
            job = group.create_task(_guarded(session, channels, what))
            await asyncio.wait({pump, job}, return_when=asyncio.FIRST_COMPLETED)
            if job.done():
                channels.inbox.discard()
                await channels.finish(job.result())
                await asyncio.wait({pump}, timeout=CLOSE_WAIT_S)
            job.cancel()
            pump.cancel()
    except* CONNECTION_ERRORS:
        pass  # the client went away; nothing is left to tell it


async def _guarded(session: Session, channels: Channels, what: str) -> bytes:
    try:
        return await session(channels)
    except asyncio.CancelledError:
        raise
    except CONNECTION_ERRORS:
        raise
    except Exception as exc:  # a bug must end this stream with a Status, not hang it
        log.exception("%s failed", what)
        return ws.status_error(str(exc))


@dataclass(frozen=True)
class StreamOptions:
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool

    @classmethod
    def of(cls, request: Request) -> StreamOptions:
        tty = flag(request, "tty")
        # A tty merges stderr into stdout, as the kubelet does (it drops stderr with tty).
        options = cls(flag(request, "stdin"), flag(request, "stdout"),
                      flag(request, "stderr") and not tty, tty)
        if not (options.stdin or options.stdout or flag(request, "stderr")):
            raise bad_request("you must specify at least one of stdin, stdout, stderr")
        return options

    def spdy_streams(self) -> set[int]:
        expected = {ws.ERROR}
        for wanted, channel in ((self.stdin, ws.STDIN), (self.stdout, ws.STDOUT),
                                (self.stderr, ws.STDERR), (self.tty, ws.RESIZE)):
            if wanted:
                expected.add(channel)
        return expected


def upgrade(request: Request, options: StreamOptions, session: Session, what: str) -> Reply:
    """Answer the upgrade for whichever transport the client asked for."""
    kind = request.header("upgrade").lower()
    if "websocket" in kind:
        if request.method != "GET":
            raise bad_request("WebSocket upgrades must use GET")
        key = request.header("sec-websocket-key")
        if not ws.is_valid_client_key(key):
            raise bad_request("missing or invalid Sec-WebSocket-Key")
        protocol = ws.negotiate(request.header("sec-websocket-protocol"), WS_PROTOCOLS)
        if protocol is None:
            offered = request.header("sec-websocket-protocol")
            raise bad_request(f"unable to negotiate a WebSocket subprotocol: client offered "
                              f"[{offered}], server supports {list(WS_PROTOCOLS)}")

        async def serve_ws(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await serve_channels(WebSocketChannels(Wire(reader, writer), protocol), session, what)

        return UpgradeResponse(ws.handshake_response_headers(key, protocol), serve_ws)
    if kind.startswith("spdy/3.1"):
        versions = [p.strip() for p in request.header("x-stream-protocol-version").split(",")]
        chosen = next((p for p in versions if p in SPDY_PROTOCOLS), None)
        if chosen is None:
            raise ApiError(403, "Forbidden", f"unable to upgrade: unable to negotiate protocol: "
                           f"client supports {versions}, server supports {list(SPDY_PROTOCOLS)}")

        async def serve_spdy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            channels = SpdyChannels(Wire(reader, writer), options.spdy_streams())
            await serve_channels(channels, session, what)

        headers = [("Connection", "Upgrade"), ("Upgrade", spdy.UPGRADE_PROTOCOL),
                   ("X-Stream-Protocol-Version", chosen)]
        return UpgradeResponse(headers, serve_spdy)
    raise bad_request("Upgrade request required")


def get_pod(store: Store, rt: ResourceType, namespace: str, name: str) -> Obj:
    pod = store.get(rt.storage_key, namespace, name)
    if pod is None:
        raise ApiError(404, "NotFound", f'pods "{name}" not found', name=name, kind="pods")
    return pod


def running_container(pod: Obj, requested: str, verb: str) -> Obj:
    """The container spec to exec into / attach to, with the kubelet's and apiserver's refusals."""
    phase = (pod.get("status") or {}).get("phase", "Pending")
    if phase in ("Succeeded", "Failed"):
        raise bad_request(f"cannot {verb} into a container in a completed pod; current phase is {phase}")
    name = choose_container(pod, requested)
    spec = pod.get("spec") or {}
    container = next((c for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
                      if c.get("name") == name), None)
    if container is None:  # pragma: no cover - choose_container already refused it
        raise bad_request(f"container {name} is not valid for pod {pod['metadata']['name']}")
    if phase != "Running" or not _is_running(pod, name):
        # What the kubelet answers when the runtime has no running container by that name.
        raise bad_request(f'container not found ("{name}")')
    return dict(container)


def _is_running(pod: Obj, container: str) -> bool:
    status = pod.get("status") or {}
    entries = (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or [])
    entry = next((e for e in entries if e.get("name") == container), None)
    if entry is None:
        return True  # a status without container detail (set by hand): trust the phase
    return "running" in (entry.get("state") or {})


# --------------------------------------------------------------------------------------------
# exec
# --------------------------------------------------------------------------------------------


def _stream_target(store: Store, request: Request, rt: ResourceType, namespace: str, name: str,
                   verb: str) -> tuple[Obj, Obj]:
    """The pod and the running container an exec or attach request is for (or a 4xx Status)."""
    if request.method not in ("GET", "POST"):
        raise ApiError(405, "MethodNotAllowed", f"pods/{verb} supports GET and POST only")
    pod = get_pod(store, rt, namespace, name)
    return pod, running_container(pod, request.param("container"), verb)


class ExecServer:
    """`pods/exec`: run `command` with the container's env in the pod's directory."""

    def __init__(self, store: Store, kubelet: Kubelet) -> None:
        self.store = store
        self.kubelet = kubelet

    async def __call__(self, request: Request, rt: ResourceType, namespace: str, name: str,
                       rest: str) -> Reply:
        pod, container = _stream_target(self.store, request, rt, namespace, name, "exec")
        command = request.params("command")
        if not command or not command[0]:
            raise bad_request("you must specify at least 1 command")
        options = StreamOptions.of(request)
        try:
            env, cwd = self.kubelet.exec_environment(pod, container)
        except environment.ConfigError as exc:
            raise ApiError(500, "InternalError", f"Internal error occurred: {exc}") from None
        if not env.get("POD_IP"):
            # A pod the kubelet does not run here has an empty runtime address; use the status.
            env["POD_IP"] = str((pod.get("status") or {}).get("podIP") or "")

        try:
            # the pod's network (netns mode) and, as root, its volumes at their mount paths
            prefix = self.kubelet.command_prefix(pod, container, env, cwd)
        except Exception as exc:  # NetnsError (the pod's node has no namespace yet) or MountError
            raise bad_request(f"cannot exec in pod {name}: {exc}") from None

        async def session(channels: Channels) -> bytes:
            return await run_command(channels, command, env, cwd, options, prefix=prefix)

        return upgrade(request, options, session, f"exec in {namespace}/{name}")


def _resolve(argv0: str, env: dict[str, str]) -> str | None:
    if "/" in argv0:
        return argv0 if os.access(argv0, os.X_OK) else None
    return shutil.which(argv0, path=env.get("PATH", os.defpath))


def not_found_status(argv0: str) -> bytes:
    # containerd/runc's wording, which users search for.
    return ws.status_error(f'error executing command in container: exec: "{argv0}": '
                           "executable file not found in $PATH")


async def run_command(channels: Channels, argv: Sequence[str], env: dict[str, str], cwd: Path,
                      options: StreamOptions, *, prefix: Sequence[str] = ()) -> bytes:
    """Run one command to completion; returns the Status for channel 3."""
    executable = _resolve(argv[0], env)
    if executable is None:
        return not_found_status(argv[0])
    if options.tty:
        return await _run_tty(channels, executable, argv, env, cwd, options, prefix=prefix)
    pipe, null = asyncio.subprocess.PIPE, asyncio.subprocess.DEVNULL
    try:
        process = await asyncio.create_subprocess_exec(
            *prefix, executable, *argv[1:], env=env, cwd=str(cwd),
            stdin=pipe if options.stdin else null,
            stdout=pipe if options.stdout else null,
            stderr=pipe if options.stderr else null,
            start_new_session=True,  # its own process group: stopping it reaches its children
        )
    except OSError as exc:
        return ws.status_error(f"error executing command in container: {exc}")
    try:
        async with asyncio.TaskGroup() as group:
            feeder = group.create_task(_feed_stdin(channels.inbox, process.stdin))
            outputs = [group.create_task(_copy_out(stream, channels, channel))
                       for stream, channel in ((process.stdout, ws.STDOUT), (process.stderr, ws.STDERR))
                       if stream is not None]
            code = await process.wait()
            if outputs:
                await asyncio.wait(outputs, timeout=OUTPUT_DRAIN_S)
            for task in (feeder, *outputs):
                task.cancel()
    finally:
        if process.returncode is None:
            await stop_process(process, STOP_GRACE_S)
    return ws.status_exit_code(code, argv)


async def _feed_stdin(inbox: Inbox, stdin: asyncio.StreamWriter | None) -> None:
    """Client input -> the command's stdin; consumes the inbox even when there is no stdin."""
    while True:
        item = await inbox.get()
        if stdin is None or stdin.is_closing():
            continue
        try:
            if isinstance(item, StdinData):
                stdin.write(item.data)
                await stdin.drain()
            elif isinstance(item, StdinClosed):
                stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            stdin.close()  # the command stopped reading; later input is dropped


async def _copy_out(stream: asyncio.StreamReader, channels: Channels, channel: int) -> None:
    while data := await stream.read(READ_CHUNK):
        await channels.write(channel, data)
    await channels.end(channel)


class _PtyReader:
    """Reads the pty master off the event loop's selector, pausing while the client lags."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.paused = False
        self.done = False
        self.loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self.fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""  # EIO: every holder of the slave end has closed it
        if not data:
            self.stop()
            self.queue.put_nowait(None)
            return
        self.queue.put_nowait(data)
        if self.queue.qsize() >= PTY_HIGH_WATER:
            self.loop.remove_reader(self.fd)
            self.paused = True

    async def get(self) -> bytes | None:
        item = await self.queue.get()
        if self.paused and not self.done and self.queue.qsize() <= PTY_LOW_WATER:
            self.paused = False
            self.loop.add_reader(self.fd, self._readable)
        return item

    def stop(self) -> None:
        if not self.done:
            self.done = True
            self.loop.remove_reader(self.fd)


async def _write_fd(fd: int, data: bytes) -> None:
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            writable = loop.create_future()
            loop.add_writer(fd, writable.set_result, None)
            try:
                await asyncio.wait_for(writable, TTY_WRITE_TIMEOUT_S)
            finally:
                loop.remove_writer(fd)


def set_window_size(fd: int, size: ws.TerminalSize) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", size.height, size.width, 0, 0))


async def _run_tty(channels: Channels, executable: str, argv: Sequence[str], env: dict[str, str],
                   cwd: Path, options: StreamOptions, *, prefix: Sequence[str] = ()) -> bytes:
    master, slave = pty.openpty()
    try:
        process = await asyncio.create_subprocess_exec(
            *prefix, sys.executable, "-I", "-S", "-c", _CTTY_SHIM, executable, *argv,
            env=env, cwd=str(cwd), stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
        )
    except OSError as exc:
        os.close(master)
        return ws.status_error(f"error executing command in container: {exc}")
    finally:
        os.close(slave)  # only the command holds it now, so its exit reads as EIO on the master
    os.set_blocking(master, False)
    reader = _PtyReader(master)

    async def output() -> None:
        while (data := await reader.get()) is not None:
            if options.stdout:
                await channels.write(ws.STDOUT, data)
        await channels.end(ws.STDOUT)

    async def input_() -> None:
        while True:
            item = await channels.inbox.get()
            if isinstance(item, Resize):
                with contextlib.suppress(OSError):
                    set_window_size(master, item.size)
            elif isinstance(item, StdinData) and options.stdin:
                await _write_fd(master, item.data)
            elif isinstance(item, StdinClosed) and options.stdin:
                await _write_fd(master, b"\x04")  # end of input, as a terminal user types it

    try:
        async with asyncio.TaskGroup() as group:
            feeder = group.create_task(input_())
            out = group.create_task(output())
            code = await process.wait()
            await asyncio.wait({out}, timeout=OUTPUT_DRAIN_S)
            feeder.cancel()
            out.cancel()
    finally:
        reader.stop()
        os.close(master)
        if process.returncode is None:
            await stop_process(process, STOP_GRACE_S)
    return ws.status_exit_code(code, argv)


# --------------------------------------------------------------------------------------------
# attach
# --------------------------------------------------------------------------------------------


class AttachServer:
    """`pods/attach`: the container's output as it is written (its log file, followed live)."""

    def __init__(self, store: Store, kubelet: Kubelet) -> None:
        self.store = store
        self.kubelet = kubelet

    async def __call__(self, request: Request, rt: ResourceType, namespace: str, name: str,
                       rest: str) -> Reply:
        pod, container = _stream_target(self.store, request, rt, namespace, name, "attach")
        options = StreamOptions.of(request)
        uid = pod["metadata"]["uid"]
        attachment = self.kubelet.attachments.get((uid, container["name"]))
        if attachment is not None:
            async def live(channels: Channels) -> bytes:
                return await _attach_live(channels, attachment, options)

            return upgrade(request, options, live, f"attach to {namespace}/{name}")
        if options.stdin:
            raise bad_request(f"container {container['name']} in pod {name} was not started with "
                              "stdin: true, so there is no input to attach to; use `kubectl attach` "
                              "without -i, or `kubectl exec -i`")
        path = log_file(self.kubelet.pods_dir, pod, container["name"], previous=False)

        async def session(channels: Channels) -> bytes:
            return await self._follow(channels, rt, namespace, name, uid, container["name"], path,
                                      options)

        return upgrade(request, options, session, f"attach to {namespace}/{name}")

    async def _follow(self, channels: Channels, rt: ResourceType, namespace: str, name: str,
                      uid: str, container: str, path: Path, options: StreamOptions) -> bytes:
        offset = path.stat().st_size  # attach shows what is written from now on, not history
        pending = b""
        async with asyncio.TaskGroup() as group:
            drain = group.create_task(_drop_input(channels.inbox))
            while True:
                with path.open("rb") as handle:
                    handle.seek(offset)
                    chunk = handle.read(READ_CHUNK)
                offset += len(chunk)
                *lines, pending = (pending + chunk).split(b"\n")
                for raw in lines:
                    _, stream, text = parse_log_line(raw)
                    channel = ws.STDERR if stream == "stderr" and options.stderr else ws.STDOUT
                    if (channel == ws.STDOUT and options.stdout) or channel == ws.STDERR:
                        await channels.write(channel, text + b"\n")
                if chunk:
                    continue  # more may be waiting: read again before sleeping
                pod = self.store.get(rt.storage_key, namespace, name)
                if pod is None or pod["metadata"].get("uid") != uid or _run_over(pod, container, path):
                    break
                await asyncio.sleep(ATTACH_POLL_S)
            drain.cancel()
        return ws.status_success()


async def _attach_live(channels: Channels, attachment: Attachment, options: StreamOptions) -> bytes:
    """Attach to a container's running process: its output, and input/resizes to it."""
    output = attachment.subscribe()

    async def out() -> None:
        while (data := await output.get()) is not None:
            if options.stdout:
                await channels.write(ws.STDOUT, data)
        await channels.end(ws.STDOUT)

    async def into() -> None:
        while True:
            item = await channels.inbox.get()
            if isinstance(item, Resize):
                attachment.resize(item.size.width, item.size.height)
            elif isinstance(item, StdinData) and options.stdin:
                await attachment.write(item.data)
            elif isinstance(item, StdinClosed) and options.stdin:
                await attachment.close_input()

    try:
        async with asyncio.TaskGroup() as group:
            feeder = group.create_task(into())
            await group.create_task(out())
            feeder.cancel()
    finally:
        attachment.unsubscribe(output)
    return ws.status_success()


async def _drop_input(inbox: Inbox) -> None:
    while True:
        await inbox.get()  # resizes and the like: nothing to apply them to


def _run_over(pod: Obj, container: str, path: Path) -> bool:
    status = pod.get("status") or {}
    entries = (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or [])
    entry: Obj = next((e for e in entries if e.get("name") == container), {})
    if path.name != f"{int(entry.get('restartCount', 0))}.log":
        return True
    return "terminated" in (entry.get("state") or {})

