"""Large YAML and protobuf bodies are decoded in a worker process, off the event loop.

Every cluster of a daemon shares one event loop, and both decoders build objects in Python at a
megabyte or two per second: one 3 MiB body would stall every cluster for seconds (JSON is parsed
in C, fast enough to stay). Decoding is pure (bytes in, plain object out), so a worker process
does it while the loop serves others. Small bodies (kubectl's protobuf bodies are a few hundred
bytes) stay in-process, where the round trip would cost more than the decoding.

The worker is `python -m tether.local.offload`, one per event loop, started on first use, fed one
body at a time over its stdin and answering on its stdout (length-prefixed pickles: both ends
are this module). A worker that dies or takes longer than DECODE_TIMEOUT_S is killed and
replaced, and the request gets a 400 like any undecodable body.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import sys
import weakref
from typing import Any, BinaryIO

from tether.local import bodies
from tether.local.errors import ApiError

__all__ = ["DECODE_TIMEOUT_S", "OFFLOAD_BYTES", "decode", "decode_json_or_yaml"]

OFFLOAD_BYTES = 128 * 1024
DECODE_TIMEOUT_S = 60.0
_LENGTH = 8


def _frame(payload: Any) -> bytes:
    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data).to_bytes(_LENGTH, "big") + data


def _work(content_type: str, body: bytes) -> tuple[Any, ...]:
    """What the worker answers; ApiError travels as plain values."""
    try:
        decoded = bodies.decode(content_type, body)
    except ApiError as exc:
        return ("error", exc.code, exc.reason, exc.message)
    return ("ok", decoded.value, decoded.duplicates)


class _Worker:
    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    async def decode(self, content_type: str, body: bytes) -> tuple[Any, ...]:
        async with self._lock:  # one body at a time: the answers come back in order
            try:
                async with asyncio.timeout(DECODE_TIMEOUT_S):
                    return await self._exchange(content_type, body)
            except (OSError, EOFError, asyncio.IncompleteReadError, pickle.PickleError, TimeoutError):
                self._kill()
                return ("error", 400, "BadRequest", "the body of the request could not be decoded")

    async def _exchange(self, content_type: str, body: bytes) -> tuple[Any, ...]:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            proc = self._proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tether.local.offload",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(_frame((content_type, body)))
        await proc.stdin.drain()
        size = int.from_bytes(await proc.stdout.readexactly(_LENGTH), "big")
        answer: tuple[Any, ...] = pickle.loads(await proc.stdout.readexactly(size))
        return answer

    def _kill(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        self._proc = None


_workers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Worker] = weakref.WeakKeyDictionary()


def _decoded_in_python(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media in bodies.YAML_TYPES or media == bodies.PROTOBUF_TYPE


async def _offloaded(content_type: str, body: bytes) -> bodies.Decoded:
    loop = asyncio.get_running_loop()
    worker = _workers.get(loop)
    if worker is None:
        worker = _workers[loop] = _Worker()
    result = await worker.decode(content_type, body)
    if result[0] == "error":
        raise ApiError(result[1], result[2], result[3])
    return bodies.Decoded(result[1], tuple(result[2]))


async def decode(content_type: str, body: bytes) -> bodies.Decoded:
    """`bodies.decode`, with large YAML and protobuf bodies decoded in the worker process."""
    if len(body) > OFFLOAD_BYTES and _decoded_in_python(content_type):
        return await _offloaded(content_type, body)
    return bodies.decode(content_type, body)


async def decode_json_or_yaml(body: bytes) -> bodies.Decoded:
    """`bodies.decode_json_or_yaml` (apply bodies): JSON in-process, large YAML in the worker."""
    if len(body) > OFFLOAD_BYTES:
        try:
            return bodies.decode_json(body, what="")
        except ApiError as exc:
            if exc.code != 400 or not exc.message.startswith("json:"):
                raise
        return await _offloaded("application/yaml", body)
    return bodies.decode_json_or_yaml(body)


def _read(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise EOFError
    return data


def _serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    """The worker's loop: until its parent closes the pipe."""
    while True:
        try:
            size = int.from_bytes(_read(stdin, _LENGTH), "big")
            content_type, body = pickle.loads(_read(stdin, size))
        except EOFError:
            return
        stdout.write(_frame(_work(content_type, body)))
        stdout.flush()


if __name__ == "__main__":
    _serve(sys.stdin.buffer, sys.stdout.buffer)
