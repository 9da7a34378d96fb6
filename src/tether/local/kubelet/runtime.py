"""Container processes: start in their own session, pump output to a log file, stop gracefully."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import fcntl
import os
import pty
import signal
import struct
import termios
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

KILL_WAIT_S = 5.0
MAX_LINE_BYTES = 64 * 1024


def timestamp() -> str:
    now = dt.datetime.now(dt.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond * 1000:09d}Z"


class LogWriter:
    """One log file per container run: `<RFC 3339 nano time> <stream> <line>` per line (CRI style)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = path.open("ab", buffering=0)

    def write(self, stream: str, line: bytes) -> None:
        self._file.write(f"{timestamp()} {stream} ".encode() + line.rstrip(b"\n") + b"\n")

    def close(self) -> None:
        self._file.close()


def parse_log_line(raw: bytes) -> tuple[str, str, bytes]:
    """(timestamp, stream, text) of one stored log line."""
    stamp, _, rest = raw.partition(b" ")
    stream, _, text = rest.partition(b" ")
    return stamp.decode(), stream.decode(), text


async def _pump(stream: asyncio.StreamReader | None, name: str, log: LogWriter,
                attachment: Attachment | None = None) -> None:
    if stream is None:
        return
    while True:
        try:
            line = await stream.readline()
        except ValueError:
            # A line longer than the stream's limit: take what is buffered as a partial line
            # (the real kubelet splits long lines too) rather than failing the container.
            line = await stream.read(MAX_LINE_BYTES)
        if not line:
            return
        log.write(name, line)
        if attachment is not None:
            attachment.publish(line)


# Makes the pty the command's controlling terminal, then runs the command (argv[1:]).
CTTY_SHIM = (
    "import fcntl,os,sys,termios\n"
    "fcntl.ioctl(0, termios.TIOCSCTTY, 0)\n"
    "os.execv(sys.argv[1], sys.argv[2:])\n"
)
REPLAY_BYTES = 64 * 1024
SUBSCRIBER_CHUNKS = 1024


class Attachment:
    """A container started with `stdin: true` (and maybe `tty: true`): what `attach -i` talks to.

    Output is fanned out to attached sessions; the first session also gets what the container
    wrote before it arrived (`kubectl run -it` attaches only once the pod runs).
    """

    def __init__(self, *, tty: bool, stdin_once: bool) -> None:
        self.tty = tty
        self.stdin_once = stdin_once
        self._stdin: asyncio.StreamWriter | None = None
        self._master: int | None = None
        self._subscribers: set[asyncio.Queue[bytes | None]] = set()
        self._replay = bytearray()
        self._replayed = False
        self.finished = False

    def subscribe(self) -> asyncio.Queue[bytes | None]:
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(SUBSCRIBER_CHUNKS)
        if not self._replayed and self._replay:
            queue.put_nowait(bytes(self._replay))
        self._replayed = True
        if self.finished:
            queue.put_nowait(None)
        self._subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[bytes | None]) -> None:
        self._subscribers.discard(queue)

    def publish(self, data: bytes | None) -> None:
        if data is None:
            self.finished = True
        elif not self._replayed:
            self._replay += data
            del self._replay[:-REPLAY_BYTES]
        for queue in list(self._subscribers):
            if queue.full():  # a client that does not read loses output, not the container
                continue
            queue.put_nowait(data)

    async def write(self, data: bytes) -> None:
        if self._master is not None:
            await _write_fd(self._master, data)
        elif self._stdin is not None and not self._stdin.is_closing():
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._stdin.write(data)
                await self._stdin.drain()

    async def close_input(self) -> None:
        if not self.stdin_once:
            return  # stdin stays open for the next attach, as on a real kubelet
        if self._master is not None:
            await _write_fd(self._master, b"\x04")  # end of input, as a terminal user types it
        elif self._stdin is not None:
            self._stdin.close()

    def resize(self, width: int, height: int) -> None:
        if self._master is not None:
            with contextlib.suppress(OSError):
                fcntl.ioctl(self._master, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))


async def _write_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            await asyncio.sleep(0.01)
            continue
        except OSError:
            return
        view = view[written:]


async def run_process(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    log: LogWriter,
    started: asyncio.Event | None = None,
    grace_s: Callable[[], float] = lambda: 30.0,
    attachment: Attachment | None = None,
    on_pid: Callable[[int | None], None] | None = None,
) -> int:
    """Run until the process exits (its exit code) or the caller cancels (graceful stop).

    `on_pid` hears the process id once it runs, and None once it has exited.
    """
    cwd.mkdir(parents=True, exist_ok=True)
    master = slave = -1
    if attachment is not None and attachment.tty:
        master, slave = pty.openpty()
    try:
        if master >= 0:
            process = await asyncio.create_subprocess_exec(
                *argv, env=dict(env), cwd=str(cwd), stdin=slave, stdout=slave, stderr=slave,
                start_new_session=True)
        else:
            process = await asyncio.create_subprocess_exec(
                *argv,
                env=dict(env),
                cwd=str(cwd),
                stdin=asyncio.subprocess.PIPE if attachment is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,  # its own process group: a stop reaches its children too
            )
    except OSError as exc:
        log.write("stderr", f"failed to start {argv[0]}: {exc.strerror}".encode())
        if master >= 0:
            os.close(master)
        return 127 if isinstance(exc, FileNotFoundError) else 126
    finally:
        if slave >= 0:
            os.close(slave)  # only the command holds it now: its exit reads as EIO on the master
    if attachment is not None:
        attachment._stdin = process.stdin
        attachment._master = master if master >= 0 else None
    if on_pid is not None:
        on_pid(process.pid)
    if started is not None:
        started.set()
    try:
        async with asyncio.TaskGroup() as group:
            if master >= 0:
                group.create_task(_pump_pty(master, log, attachment))
            else:
                group.create_task(_pump(process.stdout, "stdout", log, attachment))
                group.create_task(_pump(process.stderr, "stderr", log, attachment))
            code = await process.wait()
        return code
    finally:
        if attachment is not None:
            attachment.publish(None)
        if master >= 0:
            os.close(master)
        if process.returncode is None:
            await stop_process(process, grace_s())
        if on_pid is not None:
            on_pid(None)


async def _pump_pty(master: int, log: LogWriter, attachment: Attachment | None) -> None:
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[bytes | None] = asyncio.Queue()

    def readable() -> None:
        try:
            data = os.read(master, 65536)
        except BlockingIOError:
            return
        except OSError:  # EIO: the command and every holder of the pty are gone
            data = b""
        if not data:
            loop.remove_reader(master)
            chunks.put_nowait(None)
        else:
            chunks.put_nowait(data)

    os.set_blocking(master, False)
    loop.add_reader(master, readable)
    pending = b""
    try:
        while (data := await chunks.get()) is not None:
            if attachment is not None:
                attachment.publish(data)
            *lines, pending = (pending + data.replace(b"\r\n", b"\n")).split(b"\n")
            for line in lines:
                log.write("stdout", line)
        if pending:
            log.write("stdout", pending)
    finally:
        loop.remove_reader(master)


async def stop_process(process: asyncio.subprocess.Process, grace_s: float) -> None:
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, KILL_WAIT_S)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            await asyncio.wait_for(process.wait(), max(wait_s, 0.1))
            return
        except TimeoutError:
            continue
