"""Watch streams: replay from a resourceVersion, selector transitions, bookmarks, Table events."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

from tether.local.errors import expired
from tether.local.store import Compacted, Event, Store, Watcher, WatchOverflow
from tether.objects import Obj, jsoncodec

BOOKMARK_INTERVAL_S = 15.0
BATCH_EVENTS = 64  # queued events sent together, at most


@dataclass(frozen=True)
class WatchRequest:
    storage_key: str
    namespace: str | None
    since: str  # "" or "0" means: start with the current state
    matches: Callable[[Obj], bool]
    timeout_s: float | None
    bookmarks: bool
    send_initial_events: bool
    initial: Callable[[], list[Obj]]  # the current state, used when since is "" or "0"
    bookmark_object: Callable[[str], Obj]  # an empty object of the kind carrying only a RV
    render: Callable[[Obj, bool], Obj]  # (object, first event) -> what goes on the wire
    sort_keys: bool = False  # custom resources: encoded as maps, keys sorted (see encoding.py)


def _line(event_type: str, obj: Obj, sort_keys: bool = False) -> bytes:
    return b'{"type":"%s","object":%s}\n' % (
        event_type.encode(), jsoncodec.encode(obj, sort_keys=sort_keys))


def _event_line(event_type: str, event: Event, rendered: Obj, sort_keys: bool = False) -> bytes:
    """`_line(event_type, rendered)`, reusing the event's JSON when `rendered` is its object: one
    write fans out to every watcher, and each would encode the same object again."""
    if rendered is event.obj and event.text:
        return b'{"type":"%s","object":%s}\n' % (event_type.encode(), event.text.encode())
    return _line(event_type, rendered, sort_keys)


def _transition(event: Event, matches: Callable[[Obj], bool]) -> str | None:
    """What a watcher with a selector sees for this event (cacher semantics)."""
    now = matches(event.obj)
    if event.type == "ADDED":
        return "ADDED" if now else None
    if event.type == "DELETED":
        return "DELETED" if now else None
    was = event.prev is not None and matches(event.prev)
    if now and was:
        return "MODIFIED"
    if now:
        return "ADDED"
    if was:
        return "DELETED"
    return None


def error_event(status: Obj) -> bytes:
    return _line("ERROR", status)


def stream(store: Store, request: WatchRequest) -> AsyncIterator[bytes]:
    """Register the watcher and take the initial state now, in one synchronous step, so no write
    falls between them; the returned generator then streams."""
    start_with_state = request.since in ("", "0") or request.send_initial_events
    since = store.revision if start_with_state else int(request.since)
    if since > store.revision:
        # Waiting for a future revision is not worth it here: say what happened instead.
        since = store.revision
    try:
        watcher, history = store.watch(request.storage_key, request.namespace, since)
    except Compacted as exc:
        return _single(error_event(expired(str(exc)).status()))
    initial = request.initial() if start_with_state else []
    return _events(store, request, watcher, history, since, initial, start_with_state)


async def _single(line: bytes) -> AsyncIterator[bytes]:
    yield line


async def _events(store: Store, request: WatchRequest, watcher: Watcher, history: Iterator[Event], since: int,
                  initial: list[Obj], start_with_state: bool) -> AsyncIterator[bytes]:
    first = True
    deadline = time.monotonic() + request.timeout_s if request.timeout_s else None
    try:
        if start_with_state:
            for obj in initial:
                if request.matches(obj):
                    yield _line("ADDED", request.render(obj, first), request.sort_keys)
                    first = False
            if request.send_initial_events:
                mark = request.bookmark_object(str(since))
                mark["metadata"]["annotations"] = {"k8s.io/initial-events-end": "true"}
                yield _line("BOOKMARK", mark, request.sort_keys)
        last_rv = since
        try:
            for past in history:
                kind = _transition(past, request.matches)
                last_rv = past.revision
                if kind:
                    yield _event_line(kind, past, request.render(past.obj, first), request.sort_keys)
                    first = False
        except Compacted as exc:  # compacted while a long history was being replayed
            yield error_event(expired(str(exc)).status())
            return
        next_bookmark = time.monotonic() + BOOKMARK_INTERVAL_S
        while True:
            now = time.monotonic()
            wait = next_bookmark - now if request.bookmarks else None
            if deadline is not None:
                remaining = deadline - now
                if remaining <= 0 and not watcher.pending():
                    # Every write up to store.revision was queued to us synchronously, so with
                    # the queue drained the bookmark may claim it; with events still queued it
                    # must not, or a client resuming from it would skip them.
                    if request.bookmarks:
                        yield _line("BOOKMARK", request.bookmark_object(str(max(last_rv, store.revision))), request.sort_keys)
                    return
                wait = max(remaining, 0.0) if wait is None else max(min(wait, remaining), 0.0)
            try:
                event = await watcher.next(wait)
            except WatchOverflow:
                return  # the client re-watches from its last resourceVersion
            if event is None:
                if request.bookmarks and time.monotonic() >= next_bookmark:
                    yield _line("BOOKMARK", request.bookmark_object(str(max(last_rv, store.revision))), request.sort_keys)
                    next_bookmark = time.monotonic() + BOOKMARK_INTERVAL_S
                continue
            # Events already queued go out with this one, in one chunk (one write, one TLS
            # record, one send): in a burst of writes, a send per event per watcher is most of
            # what a watch costs the server. Lines stay whole; a client reads them as before.
            lines: list[bytes] = []
            overflowed = False
            while True:
                last_rv = event.revision
                kind = _transition(event, request.matches)
                if kind:
                    lines.append(_event_line(kind, event, request.render(event.obj, first), request.sort_keys))
                    first = False
                if not watcher.pending() or len(lines) >= BATCH_EVENTS:
                    break
                try:
                    event = await watcher.next(0)
                except WatchOverflow:
                    overflowed = True
                    break
                if event is None:
                    break
            if lines:
                yield b"".join(lines)
            if overflowed:
                return  # the client re-watches from its last resourceVersion
    finally:
        watcher.close()
