"""Object storage: one SQLite append-only log whose row id is the resourceVersion (as kine does).

Every write appends a row (ADDED, MODIFIED or DELETED with the object as it then was), so the
row id is one global, monotonic revision. Current state is kept in memory for reads and rebuilt
from the log at start; watches replay the log from any revision that compaction has not removed.
All methods run on the event loop thread: a write and the notification of its watchers happen in
one synchronous step, so a watcher that registers and replays in one step sees no gap.

Writes are committed in groups: the first write in a turn of the event loop opens a transaction
and the next turn commits it, with every write made in between (a transaction per write cost ~40 us
of CPU and blocked the loop ~150 us on WAL writes; ten in one ~11 us each). The API server answers
a request only once `flushed` says its writes are committed: no writer is told "done" before its
write is in the log. Watchers are still notified in the write's own step (the no-gap rule above),
so a watch may show a write up to one turn of the loop before it is committed: a process killed in
that turn loses it as if it had never been made, and its writer never got an answer. `close`
commits what is open. Without a running event loop (tools, tests) every write commits at once.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.local.limits import MAX_OBJECT_BYTES
from tether.objects import Obj, jsoncodec

WATCH_QUEUE_LIMIT = 10_000
HISTORY_PAGE = 1_000


class StoreError(Exception):
    pass


class KeyExists(StoreError):
    pass


class KeyMissing(StoreError):
    pass


class RevisionMismatch(StoreError):
    pass


class ObjectTooLarge(StoreError):
    """The object's JSON is larger than the store keeps (etcd's request limit, 1.5 MiB)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"the object is {size} bytes as JSON; the limit is {limit}")
        self.size = size
        self.limit = limit


class Compacted(StoreError):
    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")
        self.requested = requested
        self.oldest = oldest


@dataclass(frozen=True)
class Event:
    type: str  # ADDED | MODIFIED | DELETED
    revision: int
    resource: str  # "<group>/<plural>", one storage key for every version of a type
    namespace: str
    name: str
    obj: Obj
    prev: Obj | None
    # `obj` as compact JSON (what the log row holds), so watch streams need not encode it again;
    # "" when unknown. Stored objects are never mutated, so it stays true.
    text: str = ""


class WatchOverflow(StoreError):
    """The watcher fell too far behind; it must re-watch from its last revision."""


class Watcher:
    def __init__(self, store: Store, resource: str | None, namespace: str | None,
                 resources: frozenset[str] | None = None) -> None:
        self._store = store
        self.resource = resource
        self.namespace = namespace
        self.resources = resources
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self.overflowed = False

    def wants(self, event: Event) -> bool:
        if self.resource is not None and event.resource != self.resource:
            return False
        if self.resources is not None and event.resource not in self.resources:
            return False
        return self.namespace is None or event.namespace == self.namespace

    def push(self, event: Event | None) -> None:
        if self._queue.qsize() >= WATCH_QUEUE_LIMIT:
            self.overflowed = True
            self._queue.put_nowait(None)
            self._store.unwatch(self)
            return
        self._queue.put_nowait(event)

    def pending(self) -> bool:
        return not self._queue.empty()

    async def next(self, timeout_s: float | None = None) -> Event | None:
        """The next event, or None on timeout; raises WatchOverflow when cut off."""
        if not self._queue.empty():
            # Fast path: one write fans out to every watcher, so events are usually waiting;
            # `wait_for` would wrap each get in a new task and a timer handle.
            event = self._queue.get_nowait()
        elif timeout_s is None:
            event = await self._queue.get()
        else:
            try:
                async with asyncio.timeout(timeout_s):  # unlike wait_for, no task per wait
                    event = await self._queue.get()
            except TimeoutError:
                return None
        if event is None:
            raise WatchOverflow("watcher fell behind")
        return event

    def close(self) -> None:
        self._store.unwatch(self)


def _encode(obj: Obj, sort_keys: bool = False) -> bytes:
    return jsoncodec.encode(obj, sort_keys=sort_keys)


class Store:
    def __init__(self, path: Path | str, *, compact_keep: int = 50_000) -> None:
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(
            """
            CREATE TABLE IF NOT EXISTS log (
                rv INTEGER PRIMARY KEY AUTOINCREMENT,
                resource TEXT NOT NULL,
                namespace TEXT NOT NULL,
                name TEXT NOT NULL,
                type TEXT NOT NULL,
                obj TEXT NOT NULL,
                prev_rv INTEGER NOT NULL DEFAULT 0
            );
            CREATE INDEX IF NOT EXISTS log_key ON log(resource, namespace, name, rv);
            CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
            """
        )
        self.compact_keep = compact_keep
        self.max_object_bytes = MAX_OBJECT_BYTES
        self._objects: dict[str, dict[tuple[str, str], Obj]] = {}
        self._watchers: set[Watcher] = set()
        self._listeners: list[tuple[frozenset[str], Callable[[Event], None]]] = []
        # The object of the latest write with its JSON, so the write's response reuses it.
        self._last_written: tuple[Obj, str] | None = None
        # Which resources are encoded with sorted keys (custom resources, as kube-apiserver
        # encodes them); set by the API's operations, which know the types.
        self.sort_keys: Callable[[str], bool] = lambda resource: False
        self.revision = 0
        self.compacted = 0
        self._open = False  # a transaction holds writes the next turn of the loop commits
        self._flush_waiters: list[asyncio.Future[None]] = []
        self._load()

    def _load(self) -> None:
        row = self._db.execute("SELECT MAX(rv) FROM log").fetchone()
        self.revision = int(row[0] or 0)
        seq = self._db.execute("SELECT seq FROM sqlite_sequence WHERE name='log'").fetchone()
        if seq:
            self.revision = max(self.revision, int(seq[0]))
        meta = self._db.execute("SELECT value FROM meta WHERE key='compacted'").fetchone()
        self.compacted = int(meta[0]) if meta else 0
        rows = self._db.execute(
            """
            SELECT resource, namespace, name, type, obj FROM log
            WHERE rv IN (SELECT MAX(rv) FROM log GROUP BY resource, namespace, name)
            """
        )
        for resource, namespace, name, kind, text in rows:
            if kind != "DELETED":
                self._objects.setdefault(resource, {})[(namespace, name)] = jsoncodec.decode(text)

    def close(self) -> None:
        self.commit()
        for watcher in list(self._watchers):
            watcher.push(None)
        self._db.close()

    # group commit ------------------------------------------------------------------------

    def _begin(self) -> None:
        if self._open:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop to commit later: the statement commits by itself
        self._db.execute("BEGIN")
        self._open = True
        loop.call_soon(self.commit)

    def commit(self) -> None:
        """Commit the open group of writes, if any, and release whoever waits for it."""
        waiters, self._flush_waiters = self._flush_waiters, []
        error: sqlite3.Error | None = None
        if self._open:
            self._open = False
            try:
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                error = exc
        for waiter in waiters:
            if not waiter.done():
                if error is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(StoreError(f"commit failed: {error}"))
        if error is not None:
            raise error

    @property
    def uncommitted(self) -> bool:
        return self._open

    async def flushed(self) -> None:
        """Return once every write made so far is committed (`StoreError` if the commit failed)."""
        if not self._open:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._flush_waiters.append(waiter)
        await waiter

    # reads -------------------------------------------------------------------------------

    def get(self, resource: str, namespace: str, name: str) -> Obj | None:
        return self._objects.get(resource, {}).get((namespace, name))

    def list_objects(self, resource: str, namespace: str | None = None) -> list[Obj]:
        """Objects in key order (namespace, then name). Callers must not mutate them."""
        bucket = self._objects.get(resource, {})
        keys = sorted(bucket) if namespace is None else sorted(k for k in bucket if k[0] == namespace)
        return [bucket[k] for k in keys]

    def count(self, resource: str) -> int:
        return len(self._objects.get(resource, {}))

    def resources(self) -> Iterator[str]:
        return iter(list(self._objects))

    # writes ------------------------------------------------------------------------------

    def _append(self, event_type: str, resource: str, namespace: str, name: str, obj: Obj,
                prev_rv: int) -> tuple[int, str]:
        rv = self.revision + 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(rv)
        raw = _encode(obj, self.sort_keys(resource))
        if len(raw) > self.max_object_bytes and event_type != "DELETED":
            raise ObjectTooLarge(len(raw), self.max_object_bytes)
        text = raw.decode()
        self._begin()
        self._db.execute(
            "INSERT INTO log (rv, resource, namespace, name, type, obj, prev_rv) VALUES (?,?,?,?,?,?,?)",
            (rv, resource, namespace, name, event_type, text, prev_rv),
        )
        self.revision = rv
        self._last_written = (obj, text)
        return rv, text

    def encoded(self, obj: Obj) -> str | None:
        """`obj` as compact JSON when it is the object the latest write stored, else None."""
        last = self._last_written
        return last[1] if last is not None and last[0] is obj else None

    def _notify(self, event: Event) -> None:
        for resources, listener in self._listeners:
            if event.resource in resources:
                listener(event)
        for watcher in list(self._watchers):
            if watcher.wants(event):
                watcher.push(event)

    def create(self, resource: str, namespace: str, name: str, obj: Obj) -> Obj:
        bucket = self._objects.setdefault(resource, {})
        if (namespace, name) in bucket:
            raise KeyExists(name)
        rv, text = self._append("ADDED", resource, namespace, name, obj, 0)
        bucket[(namespace, name)] = obj
        self._notify(Event("ADDED", rv, resource, namespace, name, obj, None, text))
        self._maybe_compact()
        return obj

    def update(self, resource: str, namespace: str, name: str, obj: Obj, *, expect_rv: str | None = None) -> Obj:
        bucket = self._objects.get(resource, {})
        prev = bucket.get((namespace, name))
        if prev is None:
            raise KeyMissing(name)
        prev_rv = int(prev["metadata"]["resourceVersion"])
        if expect_rv is not None and expect_rv != str(prev_rv):
            raise RevisionMismatch(name)
        rv, text = self._append("MODIFIED", resource, namespace, name, obj, prev_rv)
        bucket[(namespace, name)] = obj
        self._notify(Event("MODIFIED", rv, resource, namespace, name, obj, prev, text))
        self._maybe_compact()
        return obj

    def delete(self, resource: str, namespace: str, name: str, *, expect_rv: str | None = None) -> Obj:
        bucket = self._objects.get(resource, {})
        prev = bucket.get((namespace, name))
        if prev is None:
            raise KeyMissing(name)
        prev_rv = int(prev["metadata"]["resourceVersion"])
        if expect_rv is not None and expect_rv != str(prev_rv):
            raise RevisionMismatch(name)
        final: Obj = jsoncodec.decode(_encode(prev, self.sort_keys(resource)))
        rv, text = self._append("DELETED", resource, namespace, name, final, prev_rv)
        del bucket[(namespace, name)]
        self._notify(Event("DELETED", rv, resource, namespace, name, final, prev, text))
        self._maybe_compact()
        return final

    # watch -------------------------------------------------------------------------------

    def watch(self, resource: str | None, namespace: str | None, since: int, *,
              resources: Collection[str] | None = None) -> tuple[Watcher, Iterator[Event]]:
        """Register a watcher and return it with the events after `since` it missed.

        `resources` narrows a watcher of every resource (`resource` None) to some: a component
        that reacts to a few types is then not woken for every other write.

        The missed events are read lazily, a page at a time, up to the revision at registration
        (later ones reach the watcher itself): a watch from an old revision must not load its
        whole history into memory. Compaction while the pages are read raises `Compacted`.
        """
        if since < self.compacted:
            raise Compacted(since, self.compacted)
        only = frozenset(resources) if resources is not None else None
        watcher = Watcher(self, resource, namespace, only)
        history = self._history(resource, namespace, since, self.revision) if since < self.revision else iter(())
        if only is not None:
            history = (event for event in history if event.resource in only)
        self._watchers.add(watcher)
        return watcher, history

    def subscribe(self, resources: Collection[str], listener: Callable[[Event], None]) -> Callable[[], None]:
        """Call `listener` inside every write to one of `resources`, before the write returns.

        For in-memory indexes that must never lag the store (what the authorizer reads): the
        next request after a write already sees it. The listener must be quick and must not
        write. Returns the function that unsubscribes.
        """
        entry = (frozenset(resources), listener)
        self._listeners.append(entry)

        def unsubscribe() -> None:
            if entry in self._listeners:
                self._listeners.remove(entry)

        return unsubscribe

    def unwatch(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)

    def _history(self, resource: str | None, namespace: str | None, since: int, upto: int) -> Iterator[Event]:
        sql = "SELECT rv, type, resource, namespace, name, obj, prev_rv FROM log WHERE rv > ? AND rv <= ?"
        filters: list[Any] = []
        if resource is not None:
            sql += " AND resource = ?"
            filters.append(resource)
        if namespace is not None:
            sql += " AND namespace = ?"
            filters.append(namespace)
        sql += f" ORDER BY rv LIMIT {HISTORY_PAGE}"
        after = since
        while True:
            if after < self.compacted:
                raise Compacted(after, self.compacted)
            rows = self._db.execute(sql, [after, upto, *filters]).fetchall()
            if not rows:
                return
            prevs = self._objects_at({int(r[6]) for r in rows if r[6]})
            for rv, kind, res, ns, name, text, prev_rv in rows:
                yield Event(kind, rv, res, ns, name, jsoncodec.decode(text), prevs.get(int(prev_rv)), text)
            after = int(rows[-1][0])

    def _objects_at(self, revisions: set[int]) -> dict[int, Obj]:
        if not revisions:
            return {}
        found: dict[int, Obj] = {}
        ids = sorted(revisions)
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            marks = ",".join("?" * len(part))
            for rv, text in self._db.execute(f"SELECT rv, obj FROM log WHERE rv IN ({marks})", part):
                found[int(rv)] = jsoncodec.decode(text)
        return found

    # compaction --------------------------------------------------------------------------

    def _maybe_compact(self) -> None:
        if self.revision - self.compacted > self.compact_keep * 2:
            self.compact(self.revision - self.compact_keep)

    def compact(self, revision: int) -> None:
        """Forget history at and below `revision`, keeping each object's latest row."""
        revision = min(revision, self.revision)
        if revision <= self.compacted:
            return
        own = not self._open  # else the open group of writes carries the compaction too
        if own:
            self._db.execute("BEGIN")
        self._db.execute(
            """
            DELETE FROM log WHERE rv <= ? AND rv NOT IN (
                SELECT MAX(rv) FROM log GROUP BY resource, namespace, name
            )
            """,
            (revision,),
        )
        self._db.execute("DELETE FROM log WHERE rv <= ? AND type = 'DELETED'", (revision,))
        self._db.execute(
            "INSERT INTO meta(key, value) VALUES('compacted', ?) "
            "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (revision,),
        )
        if own:
            self._db.execute("COMMIT")
        self.compacted = revision


async def follow(
    store: Store,
    resource: str | None,
    namespace: str | None,
    *,
    on_event: Callable[[Event], None],
    resync: Callable[[], None],
    resources: Collection[str] | None = None,
) -> None:
    """Feed a component from the store's change stream, forever.

    `resync` is called with the watcher registered in the same synchronous step, so nothing
    written in between is missed; it is called again whenever the watcher fell behind and was cut
    off (a 10,000-object deletecollection), so the component converges instead of crashing.
    """
    while True:
        watcher, _ = store.watch(resource, namespace, store.revision, resources=resources)
        resync()
        try:
            while True:
                event = await watcher.next(None)
                if event is not None:
                    on_event(event)
        except WatchOverflow:
            continue
        finally:
            watcher.close()
