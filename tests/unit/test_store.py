"""The SQLite log store: revisions, restarts, watch replay, compaction."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tether.local.store import Compacted, KeyExists, RevisionMismatch, Store

CM = "/configmaps"


def cm(name: str, value: str = "a") -> dict:  # type: ignore[type-arg]
    return {"metadata": {"name": name, "namespace": "default"}, "data": {"k": value}}


def test_revisions_are_global_and_monotonic(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    a = store.create(CM, "default", "a", cm("a"))
    b = store.create("/secrets", "default", "b", cm("b"))
    a2 = store.update(CM, "default", "a", cm("a", "x"))
    revisions = [int(o["metadata"]["resourceVersion"]) for o in (a, b, a2)]
    assert revisions == sorted(revisions) and len(set(revisions)) == 3
    assert store.revision == revisions[-1]


def test_create_twice_and_stale_update_fail(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    first = store.create(CM, "default", "a", cm("a"))
    with pytest.raises(KeyExists):
        store.create(CM, "default", "a", cm("a"))
    store.update(CM, "default", "a", cm("a", "b"), expect_rv=first["metadata"]["resourceVersion"])
    with pytest.raises(RevisionMismatch):
        store.update(CM, "default", "a", cm("a", "c"), expect_rv=first["metadata"]["resourceVersion"])


def test_restart_keeps_objects_and_revision(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    store.create(CM, "default", "a", cm("a"))
    store.create(CM, "default", "b", cm("b"))
    store.delete(CM, "default", "b")
    revision = store.revision
    store.close()
    again = Store(tmp_path / "s.db")
    assert [o["metadata"]["name"] for o in again.list_objects(CM)] == ["a"]
    assert again.revision == revision
    created = again.create(CM, "default", "c", cm("c"))
    assert int(created["metadata"]["resourceVersion"]) == revision + 1


async def test_watch_replays_history_then_follows_live(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    start = store.revision
    store.create(CM, "default", "a", cm("a"))
    store.update(CM, "default", "a", cm("a", "z"))
    watcher, pages = store.watch(CM, "default", start)
    history = list(pages)
    assert [e.type for e in history] == ["ADDED", "MODIFIED"]
    assert history[1].prev is not None and history[1].prev["data"]["k"] == "a"
    store.delete(CM, "default", "a")
    event = await watcher.next(1.0)
    assert event is not None and event.type == "DELETED" and event.obj["data"]["k"] == "z"
    assert await watcher.next(0.05) is None
    watcher.close()


async def test_watch_filters_by_namespace(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    watcher, _ = store.watch(CM, "prod", store.revision)
    store.create(CM, "default", "a", cm("a"))
    store.create(CM, "prod", "a", {"metadata": {"name": "a", "namespace": "prod"}})
    event = await asyncio.wait_for(watcher.next(None), 1)
    assert event is not None and event.namespace == "prod"


def test_compaction_expires_old_revisions_but_keeps_state(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db", compact_keep=10)
    for i in range(50):
        store.update(CM, "default", "a", cm("a", str(i))) if i else store.create(CM, "default", "a", cm("a"))
    assert store.compacted > 0
    with pytest.raises(Compacted) as info:
        store.watch(CM, None, 1)
    assert "too old resource version: 1" in str(info.value)
    store.close()
    again = Store(tmp_path / "s.db", compact_keep=10)
    assert again.get(CM, "default", "a")["data"]["k"] == "49"  # type: ignore[index]
    assert again.compacted == store.compacted


def test_long_history_is_replayed_in_pages_in_order(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    store.create(CM, "default", "a", cm("a"))
    for i in range(2_500):  # more than two pages
        store.update(CM, "default", "a", cm("a", str(i)))
    watcher, pages = store.watch(CM, None, 0)
    history = list(pages)
    assert len(history) == 2_501
    assert [e.revision for e in history] == sorted(e.revision for e in history)
    assert history[-1].obj["data"]["k"] == "2499" and history[-1].prev is not None
    watcher.close()


def _rows(path: Path) -> int:
    """What another reader of the log sees: committed rows only."""
    import sqlite3

    with sqlite3.connect(str(path)) as db:
        return int(db.execute("SELECT COUNT(*) FROM log").fetchone()[0])


async def test_writes_of_one_loop_turn_commit_together_before_anyone_is_answered(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    store.create("/configmaps", "default", "a", cm("a"))
    store.create("/configmaps", "default", "b", cm("b"))
    assert store.uncommitted and _rows(tmp_path / "s.db") == 0  # one open group
    await store.flushed()
    assert not store.uncommitted and _rows(tmp_path / "s.db") == 2
    store.update("/configmaps", "default", "a", cm("a", "b"))
    store.compact(store.revision)  # joins the open group instead of opening its own
    await asyncio.sleep(0)  # the next turn commits even when no one waits
    assert not store.uncommitted and _rows(tmp_path / "s.db") == 2
    store.delete("/configmaps", "default", "b")
    store.close()  # commits what is open
    assert Store(tmp_path / "s.db").get("/configmaps", "default", "b") is None


def test_without_a_loop_every_write_commits_at_once(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    store.create("/configmaps", "default", "a", cm("a"))
    assert not store.uncommitted and _rows(tmp_path / "s.db") == 1
