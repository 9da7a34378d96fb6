"""Container processes: start in their own session, pump output to a log file, stop gracefully."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

KILL_WAIT_S = 5.0


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


async def _pump(stream: asyncio.StreamReader | None, name: str, log: LogWriter) -> None:
    if stream is None:
        return
    while True:
        line = await stream.readline()
        if not line:
            return
        log.write(name, line)


async def run_process(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    log: LogWriter,
    started: asyncio.Event | None = None,
    grace_s: Callable[[], float] = lambda: 30.0,
) -> int:
    """Run until the process exits (its exit code) or the caller cancels (graceful stop)."""
    cwd.mkdir(parents=True, exist_ok=True)
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            env=dict(env),
            cwd=str(cwd),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group: a stop reaches its children too
        )
    except OSError as exc:
        log.write("stderr", f"failed to start {argv[0]}: {exc.strerror}".encode())
        return 127 if isinstance(exc, FileNotFoundError) else 126
    if started is not None:
        started.set()
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(_pump(process.stdout, "stdout", log))
            group.create_task(_pump(process.stderr, "stderr", log))
            code = await process.wait()
        return code
    finally:
        if process.returncode is None:
            await stop_process(process, grace_s())


async def stop_process(process: asyncio.subprocess.Process, grace_s: float) -> None:
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, KILL_WAIT_S)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            await asyncio.wait_for(process.wait(), max(wait_s, 0.1))
            return
        except TimeoutError:
            continue
