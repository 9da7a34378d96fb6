"""The wire-level DNS answer cache: what the key leaves out (the ID, EDNS options) and keeps,
expiry, bounds."""

from __future__ import annotations

import struct

from tether.net import dnswire as w
from tether.net.dnscache import WireCache, has_options


def with_cookie(query: bytes, cookie: bytes) -> bytes:
    """The query with an EDNS COOKIE option (code 10) in its OPT record's data."""
    option = struct.pack("!HH", 10, len(cookie)) + cookie
    return query[:-2] + struct.pack("!H", len(option)) + option


def test_id_and_cookies_are_not_in_the_key() -> None:
    query = w.make_query(1, "a.clusterset.local", w.TYPE_A, edns=1232)
    first, second = with_cookie(query, b"12345678"), with_cookie(query, b"abcdefgh")
    assert has_options(first) and not has_options(query)
    assert WireCache.key(first, 1) == WireCache.key(second, 1) == WireCache.key(query, 1)
    assert WireCache.key(struct.pack("!H", 9) + query[2:], 1) == WireCache.key(query, 1)


def test_what_changes_the_answer_is_in_the_key() -> None:
    base = w.make_query(1, "a.clusterset.local", w.TYPE_A, edns=1232)
    for other in (w.make_query(1, "A.clusterset.local", w.TYPE_A, edns=1232),  # 0x20 case
                  w.make_query(1, "a.clusterset.local", w.TYPE_AAAA, edns=1232),
                  w.make_query(1, "a.clusterset.local", w.TYPE_A, edns=4096),  # buffer size
                  w.make_query(1, "a.clusterset.local", w.TYPE_A),  # no EDNS
                  w.make_query(1, "a.clusterset.local", w.TYPE_A, edns=1232, recursion=False)):
        assert WireCache.key(other, 1) != WireCache.key(base, 1)
    assert WireCache.key(base, 0) != WireCache.key(base, 1)  # TCP and UDP answers differ in size


def test_hits_carry_the_new_id_and_entries_expire() -> None:
    now = [100.0]
    cache = WireCache(2, now=lambda: now[0])
    query = w.make_query(7, "a.clusterset.local", w.TYPE_A)
    cache.put(query, 1, b"\x00\x07answer", ttl_s=5)
    assert cache.get(struct.pack("!H", 0xBEEF) + query[2:], 1) == b"\xbe\xefanswer"
    now[0] += 5
    assert cache.get(query, 1) is None and len(cache) == 0
    cache.put(query, 1, b"x", ttl_s=0)  # nothing to keep
    assert len(cache) == 0


def test_bounded_oldest_first() -> None:
    cache = WireCache(2)
    queries = [w.make_query(1, f"n{i}.clusterset.local", w.TYPE_A) for i in range(3)]
    for q in queries:
        cache.put(q, 1, b"\x00\x01r")
    assert len(cache) == 2 and cache.get(queries[0], 1) is None and cache.get(queries[2], 1) is not None
    assert cache.stats.evictions == 1
