"""`pods/log`: container logs with follow, tailLines, sinceSeconds/sinceTime, timestamps, previous."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from tether.local.errors import ApiError, bad_request
from tether.local.kubelet.runtime import parse_log_line
from tether.local.resources import ResourceType
from tether.local.store import Store
from tether.net.httpserver import Reply, Request, Response, StreamResponse
from tether.objects import Obj

FOLLOW_POLL_S = 0.2
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"


@dataclass(frozen=True)
class LogOptions:
    container: str
    follow: bool
    previous: bool
    timestamps: bool
    tail_lines: int | None
    since: dt.datetime | None
    limit_bytes: int | None


def _int(request: Request, name: str) -> int | None:
    text = request.param(name)
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise bad_request(f"{name}: must be an integer") from None
    if value < 0:
        raise bad_request(f"{name}: must be greater than or equal to 0")
    return value


def _since(request: Request) -> dt.datetime | None:
    seconds = _int(request, "sinceSeconds")
    if seconds is not None:
        return dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)
    text = request.param("sinceTime")
    if text:
        try:
            when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
            return when if when.tzinfo else when.replace(tzinfo=dt.UTC)
        except ValueError:
            raise bad_request(f"sinceTime: {text!r} is not an RFC 3339 time") from None
    return None


def choose_container(pod: Obj, requested: str) -> str:
    names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
    init_names = [c["name"] for c in (pod.get("spec") or {}).get("initContainers") or []]
    name = pod["metadata"]["name"]
    if requested:
        if requested not in names + init_names:
            raise bad_request(f"container {requested} is not valid for pod {name}")
        return requested
    default = (pod["metadata"].get("annotations") or {}).get(DEFAULT_CONTAINER_ANNOTATION)
    if default in names:
        return str(default)
    if len(names) == 1:
        return str(names[0])
    raise bad_request(f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]")


def _container_status(pod: Obj, container: str) -> Obj | None:
    status = pod.get("status") or {}
    for entry in (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or []):
        if entry.get("name") == container:
            return dict(entry)
    return None


def log_file(pods_dir: Path, pod: Obj, container: str, *, previous: bool) -> Path:
    pod_name = pod["metadata"]["name"]
    status = _container_status(pod, container)
    if status is None:
        raise bad_request(f'container "{container}" in pod "{pod_name}" is waiting to start: ContainerCreating')
    restarts = int(status.get("restartCount", 0))
    base: Path = pods_dir / str(pod["metadata"].get("uid", "")) / "logs" / container
    if previous:
        path = base / f"{restarts - 1}.log"
        if restarts == 0 or not path.exists():
            raise bad_request(f'previous terminated container "{container}" in pod "{pod_name}" not found')
        return path
    path = base / f"{restarts}.log"
    if not path.exists():
        waiting = (status.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason", "ContainerCreating")
        raise bad_request(f'container "{container}" in pod "{pod_name}" is waiting to start: {reason}')
    return path


def _render(raw: bytes, options: LogOptions) -> bytes | None:
    stamp, _stream, text = parse_log_line(raw)
    if options.since is not None:
        try:
            when = dt.datetime.fromisoformat(stamp[:26] + "+00:00")
        except ValueError:
            when = None
        if when is not None and when < options.since:
            return None
    return (f"{stamp} ".encode() + text) if options.timestamps else text


TAIL_BLOCK_BYTES = 64 * 1024


def _read_log(path: Path, options: LogOptions) -> tuple[bytes, int]:
    """The stored log, or only its last lines when that is all that was asked for: a long-lived
    pod's log grows without bound, and `logs --tail=10` must not read all of it."""
    if options.tail_lines is None or options.since is not None:
        data = path.read_bytes()
        return data, len(data)
    with path.open("rb") as handle:
        end = handle.seek(0, 2)
        start, data = end, b""
        while start > 0 and data.count(b"\n") <= options.tail_lines:
            start = max(0, start - TAIL_BLOCK_BYTES)
            handle.seek(start)
            data = handle.read(end - start)
    if start > 0:  # drop the partial first line
        data = data[data.find(b"\n") + 1:]
    return data, end


class LogServer:
    def __init__(self, store: Store, pods_dir: Path) -> None:
        self.store = store
        self.pods_dir = pods_dir

    async def __call__(self, request: Request, rt: ResourceType, namespace: str, name: str, rest: str) -> Reply:
        if request.method != "GET":
            raise ApiError(405, "MethodNotAllowed", "pods/log supports GET only")
        pod = self.store.get("/pods", namespace, name)
        if pod is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found', name=name, kind="pods")
        options = LogOptions(
            container=choose_container(pod, request.param("container")),
            follow=request.param("follow") in ("true", "1"),
            previous=request.param("previous") in ("true", "1"),
            timestamps=request.param("timestamps") in ("true", "1"),
            tail_lines=_int(request, "tailLines"),
            since=_since(request),
            limit_bytes=_int(request, "limitBytes"),
        )
        path = log_file(self.pods_dir, pod, options.container, previous=options.previous)
        raw_log, read_to = _read_log(path, options)
        lines = [r for r in (_render(raw, options) for raw in raw_log.splitlines()) if r is not None]
        if options.tail_lines is not None:
            lines = lines[-options.tail_lines:] if options.tail_lines else []
        body = b"".join(line + b"\n" for line in lines)
        if options.limit_bytes is not None:
            body = body[: options.limit_bytes]
        if not options.follow or options.previous:
            return Response(200, body, content_type="text/plain")
        return StreamResponse(200, self._follow(pod, path, body, read_to, options),
                              content_type="text/plain")

    async def _follow(self, pod: Obj, path: Path, first: bytes, offset: int,
                      options: LogOptions) -> AsyncIterator[bytes]:
        # `offset` is where the first answer stopped reading: lines written since are sent next.
        if first:
            yield first
        pending = b""
        uid = pod["metadata"]["uid"]
        namespace, name = pod["metadata"].get("namespace", ""), pod["metadata"]["name"]
        while True:
            with path.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            offset += len(chunk)
            pending += chunk
            *complete, pending = pending.split(b"\n")
            out = [r for r in (_render(raw, options) for raw in complete) if r is not None]
            if out:
                yield b"".join(line + b"\n" for line in out)
            current = self.store.get("/pods", namespace, name)
            if current is None or current["metadata"].get("uid") != uid or self._run_over(current, options, path):
                return
            await asyncio.sleep(FOLLOW_POLL_S)

    def _run_over(self, pod: Obj, options: LogOptions, path: Path) -> bool:
        """The followed run ended: the container restarted (a new file) or terminated."""
        status = _container_status(pod, options.container) or {}
        if path.name != f"{int(status.get('restartCount', 0))}.log":
            return True
        return "terminated" in (status.get("state") or {})
