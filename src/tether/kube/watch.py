"""Watch streams and informers: a local, eventually consistent cache of one kind.

`watch()` is one watch request: typed events until the server ends the stream. An ERROR event
raises (410 as `Expired`); the caller decides what to do.

`Informer.run()` keeps a cache in step with the server forever: list (all pages), then watch
from the list's resourceVersion; when a stream ends, watch again from the last resourceVersion
seen (bookmarks advance it without any object changing); on 410 list again and hand the
difference to the handler as ordinary ADDED/MODIFIED/DELETED events, so a consumer cannot tell a
relist from a watch. Other failures back off exponentially with jitter and resume from the last
resourceVersion. Run it inside a TaskGroup; cancelling the task is the only way to stop it.

The handler is one synchronous callback, `on_event(WatchEvent)`, called after the cache has
changed, in order, never with BOOKMARK events. It must not block: the intended use is to feed a
level-based work queue, e.g. `on_event=lambda e: engine.enqueue(e.key)`; the reconcile then reads
the cache with `informer.get(...)`.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Literal, Protocol, cast

from tether.kube import jsoncodec
from tether.kube.errors import Gone, KubeError, ServerError, error_from_status
from tether.objects import Obj

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
EVENT_TYPES: frozenset[str] = frozenset(("ADDED", "MODIFIED", "DELETED", "BOOKMARK"))
WATCH_GRACE_S = 10.0  # how long past `timeoutSeconds` a server may take to end a stream
HEALTHY_WATCH_S = 1.0  # an empty stream shorter than this counts as a failure (no hot loop)

log = logging.getLogger(__name__)


# What watches and informers need of a client. `KubeClient` is one; a protocol keeps this module
# below the client (the client's `watch` method calls in here), so the two do not import each other.


class _Kind(Protocol):
    @property
    def namespaced(self) -> bool: ...

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str: ...


class _Lines(Protocol):
    def lines(self, *, idle_timeout_s: float | None = None,
              deadline: float | None = None) -> AsyncIterator[str]: ...


class _Listed(Protocol):
    @property
    def items(self) -> tuple[Obj, ...]: ...

    @property
    def resource_version(self) -> str: ...


class WatchClient(Protocol):
    @property
    def server(self) -> str: ...

    async def resource(self, api_version: str, kind: str, *,
                       timeout_s: float | None = None) -> _Kind: ...

    def stream(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
               idle_timeout_s: float | None = None) -> AbstractAsyncContextManager[_Lines]: ...

    async def list_all(self, api_version: str, kind: str, namespace: str | None = None, *,
                       label_selector: str = "", field_selector: str = "", limit: int = 500,
                       timeout_s: float | None = None) -> _Listed: ...


@dataclass(frozen=True, order=True)
class ObjectKey:
    """Namespace ("" for cluster-scoped kinds) and name: what a level-based reconcile needs."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


def object_key(obj: Obj) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return ObjectKey(str(meta.get("namespace") or ""), str(meta.get("name") or ""))


@dataclass(frozen=True)
class WatchEvent:
    """One event. `object` is the server's object (for BOOKMARK only its resourceVersion);
    treat it as read-only, it is shared with the informer cache."""

    type: EventType
    object: Obj

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")

    @property
    def key(self) -> ObjectKey:
        return object_key(self.object)


async def watch(
    client: WatchClient,
    api_version: str,
    kind: str,
    namespace: str | None = None,
    *,
    resource_version: str = "",
    label_selector: str = "",
    field_selector: str = "",
    allow_bookmarks: bool = True,
    timeout_s: float = 300.0,
    idle_timeout_s: float | None = None,
) -> AsyncGenerator[WatchEvent, None]:
    """Events of one watch request, in server order, until the server closes the stream.

    `resource_version=""` starts with a synthetic ADDED per existing object; a resourceVersion
    replays changes after it (410 `Expired` when compacted away). The server is asked to end the
    stream after `timeout_s`; a stream still open `WATCH_GRACE_S` later, or silent for
    `idle_timeout_s`, raises `Unreachable`. Close the iterator (`contextlib.aclosing`) when
    leaving early, so the connection is released at once.
    """
    res = await client.resource(api_version, kind)
    params = {"watch": "true", "timeoutSeconds": str(max(1, round(timeout_s)))}
    if resource_version:
        params["resourceVersion"] = resource_version
    if label_selector:
        params["labelSelector"] = label_selector
    if field_selector:
        params["fieldSelector"] = field_selector
    if allow_bookmarks:
        params["allowWatchBookmarks"] = "true"
    deadline = time.monotonic() + timeout_s + WATCH_GRACE_S
    path = res.path(namespace if res.namespaced else None)
    async with client.stream("GET", path, params=params, idle_timeout_s=idle_timeout_s) as raw:
        async for line in raw.lines(idle_timeout_s=idle_timeout_s, deadline=deadline):
            if not line.strip():
                continue
            try:
                frame = jsoncodec.decode(line)
                event_type = str(frame["type"])
                obj = frame["object"]
            except (ValueError, KeyError, TypeError):
                raise ServerError(500, "InvalidWatchFrame",
                                  f"{client.server}: malformed watch frame {line[:80]!r}") from None
            if event_type == "ERROR":
                raise error_from_status(obj if isinstance(obj, dict) else {}, http_code=500)
            if event_type not in EVENT_TYPES or not isinstance(obj, dict):
                log.debug("ignoring watch event of type %r", event_type)
                continue
            yield WatchEvent(cast(EventType, event_type), obj)


@dataclass(frozen=True)
class Backoff:
    """Jittered exponential backoff: failure n waits up to base * 2**(n-1), capped."""

    base_s: float = 0.2
    max_s: float = 30.0

    def delay_s(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        return min(self.max_s, self.base_s * 2.0 ** (failures - 1)) * random.uniform(0.5, 1.0)


EventHandler = Callable[[WatchEvent], None]
Transform = Callable[[Obj], Obj]


def strip_managed_fields(obj: Obj) -> Obj:
    """An informer transform for caches that never read `metadata.managedFields` (often the
    larger part of a small object): drops them in place, as controller-runtime's
    `TransformStripManagedFields` does."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class Informer:
    def __init__(
        self,
        client: WatchClient,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        on_event: EventHandler | None = None,
        watch_timeout_s: float = 300.0,
        idle_timeout_s: float | None = None,
        list_timeout_s: float = 60.0,
        page_size: int = 500,
        backoff: Backoff | None = None,
        transform: Transform | None = None,
    ) -> None:
        """`transform` rewrites each object before it is cached and handed to `on_event`."""
        self.client = client
        self._transform = transform
        self.api_version = api_version
        self.kind = kind
        self.namespace = namespace
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._on_event = on_event
        self._watch_timeout_s = watch_timeout_s
        self._idle_timeout_s = idle_timeout_s
        self._list_timeout_s = list_timeout_s
        self._page_size = page_size
        self._backoff = backoff or Backoff()
        self._cache: dict[ObjectKey, Obj] = {}
        self._synced = asyncio.Event()
        self.resource_version = ""
        # observability, read by tests and health reports
        self.relists = 0
        self.watches = 0
        self.bookmarks = 0
        self.failures = 0  # consecutive
        self.last_error: KubeError | None = None

    def __repr__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        return f"<Informer {self.kind}.{self.api_version}{where} on {self.client.server} rv={self.resource_version}>"

    # cache -------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    async def wait_synced(self, timeout_s: float) -> None:
        """Return once the first list has filled the cache; `TimeoutError` after `timeout_s`."""
        async with asyncio.timeout(timeout_s):
            await self._synced.wait()

    def get(self, namespace: str | None, name: str) -> Obj | None:
        return self._cache.get(ObjectKey(namespace or "", name))

    def keys(self) -> builtins.list[ObjectKey]:
        return sorted(self._cache)

    def list(self) -> builtins.list[Obj]:
        return [self._cache[key] for key in sorted(self._cache)]

    # loop --------------------------------------------------------------------------------

    async def run(self) -> None:
        """Keep the cache current until cancelled. Only `KubeError`s are retried: anything else
        is a bug and ends the run (and its TaskGroup) loudly."""
        need_list = True
        while True:
            try:
                if need_list:
                    await self._relist()
                    need_list = False
                started = time.monotonic()
                seen = await self._watch_once()
                if seen or time.monotonic() - started >= HEALTHY_WATCH_S:
                    self.failures = 0
                    continue
                self.failures += 1
                delay = self._backoff.delay_s(self.failures)
            except Gone as exc:
                need_list = True
                self.failures += 1
                self.last_error = exc
                # The first 410 relists at once; a relist that keeps expiring backs off.
                delay = self._backoff.delay_s(self.failures - 1)
                log.info("%r: %s; listing again", self, exc.message)
            except KubeError as exc:
                self.failures += 1
                self.last_error = exc
                delay = self._backoff.delay_s(self.failures)
                log.warning("%r: %s (failure %d); retrying in %.2fs", self, exc, self.failures, delay)
            if delay > 0:
                await asyncio.sleep(delay)

    async def _relist(self) -> None:
        listed = await self.client.list_all(
            self.api_version, self.kind, self.namespace, label_selector=self._label_selector,
            field_selector=self._field_selector, limit=self._page_size, timeout_s=self._list_timeout_s)
        transform = self._transform
        fresh = {object_key(obj): transform(obj) if transform else obj for obj in listed.items}
        events: builtins.list[WatchEvent] = []
        for key, obj in fresh.items():
            old = self._cache.get(key)
            if old is None:
                events.append(WatchEvent("ADDED", obj))
            elif _uid(old) != _uid(obj):  # deleted and created again while we were away
                events.append(WatchEvent("DELETED", old))
                events.append(WatchEvent("ADDED", obj))
            elif _rv(old) != _rv(obj):
                events.append(WatchEvent("MODIFIED", obj))
        events.extend(WatchEvent("DELETED", old) for key, old in self._cache.items() if key not in fresh)
        self._cache = fresh
        self.resource_version = listed.resource_version
        self.relists += 1
        self._synced.set()
        log.debug("%r: listed %d objects, %d changes", self, len(fresh), len(events))
        for event in events:
            self._emit(event)

    async def _watch_once(self) -> int:
        """One watch from the current resourceVersion; how many events (bookmarks too) it saw."""
        seen = 0
        self.watches += 1
        stream = watch(self.client, self.api_version, self.kind, self.namespace,
                       resource_version=self.resource_version, label_selector=self._label_selector,
                       field_selector=self._field_selector, allow_bookmarks=True,
                       timeout_s=self._watch_timeout_s, idle_timeout_s=self._idle_timeout_s)
        async with contextlib.aclosing(stream) as events:
            async for event in events:
                seen += 1
                self.failures = 0  # the connection works again
                rv = event.resource_version
                if event.type == "BOOKMARK":
                    self.bookmarks += 1
                    if rv:
                        self.resource_version = rv
                    continue
                if self._transform is not None:
                    event = WatchEvent(event.type, self._transform(event.object))
                key = event.key
                if event.type == "DELETED":
                    self._cache.pop(key, None)
                else:
                    self._cache[key] = event.object
                if rv:
                    self.resource_version = rv
                self._emit(event)
        return seen

    def _emit(self, event: WatchEvent) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(event)
        except Exception:
            log.exception("%r: event handler failed on %s %s", self, event.type, event.key)


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")
