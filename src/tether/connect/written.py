"""What a controller just wrote, kept in front of its informer cache until the cache catches up.

Informers lag behind the writes a controller makes. So that the next reconcile of a key plans
from what the controller itself just wrote (and not from a cache a moment old, which costs a
conflict and a retry), a successful write is remembered until the informer delivers the event
carrying it: watch events come in write order, so any event for that object seen before ours is
older and the remembered object stays in front of it. A relist can skip an object's exact
version, so what is remembered also expires after `ttl_s`.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from tether.kube import WatchEvent
from tether.objects import Obj

K = TypeVar("K", bound=Hashable)
_ABSENT = object()


@dataclass
class _Entry:
    obj: Obj | None  # None: deleted by us
    resource_version: str
    at: float


class Written(Generic[K]):
    def __init__(self, ttl_s: float = 10.0) -> None:
        self.ttl_s = ttl_s
        self._entries: dict[K, _Entry] = {}

    def lookup(self, key: K) -> Obj | object | None:
        """The remembered object, None if we deleted it, or `ABSENT` when nothing is remembered."""
        entry = self._entries.get(key)
        if entry is None:
            return _ABSENT
        if time.monotonic() - entry.at >= self.ttl_s:
            del self._entries[key]
            return _ABSENT
        return entry.obj

    def wrote(self, key: K, result: Obj | None) -> None:
        rv = str(((result or {}).get("metadata") or {}).get("resourceVersion") or "")
        self._entries[key] = _Entry(result, rv, time.monotonic())

    def forget(self, key: K) -> None:
        self._entries.pop(key, None)

    def observed(self, key: K, event: WatchEvent) -> None:
        """The informer delivered `event` for `key`: drop what it has caught up with."""
        entry = self._entries.get(key)
        if entry is None:
            return
        if entry.obj is None:
            if event.type == "DELETED":
                del self._entries[key]
        elif event.resource_version == entry.resource_version:
            del self._entries[key]

    def remembered(self) -> Iterator[K]:
        return iter(list(self._entries))


ABSENT = _ABSENT
