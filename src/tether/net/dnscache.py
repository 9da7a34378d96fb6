"""A wire-level DNS answer cache: query bytes (without the ID) in, response bytes out.

Answering from here skips parsing and encoding entirely: the key is the query as sent minus its
first two bytes (the ID) plus the transport's size class, so two queries that differ in anything
that could change the answer (name case, type, class, RD, EDNS buffer size or DO bit) never share
an entry. A hit is the stored response with the new query's ID put in front.

The options inside a final EDNS0 OPT record are left out of the key: clients such as dig and
BIND send a fresh random COOKIE with every query, which would make every query a miss, and an
answer made here never depends on options. Whoever stores an answer that does depend on them (a
forwarded one carrying the upstream's server cookie) must not store it: `has_options` says when.

Entries expire at a deadline (a forwarded answer's smallest TTL, capped) or live until `clear()`
(authoritative answers, cleared whenever the data behind them changes). The cache is bounded:
when full, the oldest entry goes (insertion order; a dict keeps it).

One thread may read (`get`) while another writes (`put`, `clear`): every step is a single dict
operation under the GIL, and a reader never fails on an entry removed under it; the counters in
`stats` are approximate then.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

NEVER = float("inf")


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0


def _options_at(query: bytes) -> int:
    """Where the RDLENGTH of a final OPT record is (its options follow), or 0 when there is no
    such record: an OPT (owner root, type 41) whose RDLENGTH reaches exactly the message's end."""
    if query[10:12] != b"\x00\x01" or len(query) < 23:  # ARCOUNT 1
        return 0
    at = query.find(b"\x00\x00\x29", 12)
    for _ in range(4):
        if at < 0:
            return 0
        if at + 11 <= len(query) and int.from_bytes(query[at + 9:at + 11], "big") == len(query) - at - 11:
            return at + 9
        at = query.find(b"\x00\x00\x29", at + 1)
    return 0


def has_options(query: bytes) -> bool:
    """Whether the query carries EDNS0 options (which `WireCache.key` leaves out)."""
    at = _options_at(query)
    return at > 0 and len(query) > at + 2


class WireCache:
    def __init__(self, max_entries: int = 10_000, *, now: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self._entries: dict[bytes, tuple[bytes, float]] = {}
        self.stats = CacheStats()
        self._now = now

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def key(query: bytes, transport: int) -> bytes:
        """`transport`: the size class the answer was made for (0 = TCP, else the UDP limit)."""
        end = _options_at(query)
        return struct.pack("!H", transport & 0xFFFF) + (query[2:end] if end else query[2:])

    def get(self, query: bytes, transport: int) -> bytes | None:
        """The cached response with `query`'s ID, or None."""
        entry = self._entries.get(self.key(query, transport))
        if entry is None:
            self.stats.misses += 1
            return None
        response, expires = entry
        if expires is not NEVER and expires <= self._now():
            self._entries.pop(self.key(query, transport), None)
            self.stats.misses += 1
            return None
        self.stats.hits += 1
        return query[:2] + response[2:]

    def put(self, query: bytes, transport: int, response: bytes, ttl_s: float | None = None) -> None:
        """Store `response`; `ttl_s` None keeps it until `clear()`, 0 or less does not store it."""
        if ttl_s is not None and ttl_s <= 0:
            return
        if len(self._entries) >= self.max_entries:
            try:
                self._entries.pop(next(iter(self._entries)), None)
            except (StopIteration, RuntimeError):  # emptied (or changed) by another thread meanwhile
                pass
            self.stats.evictions += 1
        self._entries[self.key(query, transport)] = (response, NEVER if ttl_s is None else self._now() + ttl_s)

    def clear(self) -> None:
        self._entries.clear()
