"""What the API server's hot path reuses instead of recomputing: a write's JSON (for its answer
and every watcher), structure shared with read-only stored objects, and field-set diffs that skip
shared values. Each shortcut must give exactly what the long way gives."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tether.local import schema, watching
from tether.local.patching import (
    apply_merge_patch,
    merge_patch_shared,
    record_update,
    server_side_apply,
)
from tether.local.patching.fieldsets import (
    compare,
    diff,
    fieldset_of,
    from_fields_v1,
    managed_view,
    shared_fields_v1,
    to_fields_v1,
    walk,
)
from tether.local.patching.schema import UNTYPED, merge_schema_for
from tether.local.store import Event, Store
from tether.net import httpserver as http

Obj = dict[str, Any]


def work(status: Obj | None = None) -> Obj:
    obj: Obj = {
        "apiVersion": "work.tether.io/v1alpha1", "kind": "Work",
        "metadata": {"name": "w", "namespace": "ns", "labels": {"a": "1"}, "finalizers": ["f"],
                     "resourceVersion": "7", "generation": 1},
        "spec": {"workload": {"manifests": [{"kind": "ConfigMap", "data": {"k": "v"}}]}},
    }
    if status is not None:
        obj["status"] = status
    return obj


STATUS = {"conditions": [{"type": "Applied", "status": "True"}],
          "manifestStatuses": [{"identifier": {"name": "c"}, "applied": True, "status": {"x": 1}}]}


# merge patch sharing ----------------------------------------------------------------------


@pytest.mark.parametrize("patch", [
    {"status": {"conditions": [{"type": "Applied", "status": "False"}]}},
    {"status": {"manifestStatuses": None, "extra": {"a": None, "b": [1, {"c": None}]}}},
    {"metadata": {"labels": {"a": None, "b": "2"}}, "spec": None},
    {"status": None},
    [1, 2],
    "text",
])
def test_merge_patch_shared_gives_the_same_document_and_mutates_nothing(patch: Any) -> None:
    doc = work(copy.deepcopy(STATUS))
    before = copy.deepcopy(doc)
    patch_before = copy.deepcopy(patch)
    assert merge_patch_shared(doc, patch) == apply_merge_patch(doc, patch)
    assert doc == before and patch == patch_before


def test_merge_patch_shared_shares_only_what_the_patch_leaves_alone() -> None:
    doc = work(copy.deepcopy(STATUS))
    patch = {"status": {"conditions": [{"type": "Applied", "status": "False"}]}}
    out = merge_patch_shared(doc, patch)
    assert out is not doc and out["status"] is not doc["status"]
    assert out["spec"] is doc["spec"] and out["metadata"] is doc["metadata"]
    assert out["status"]["manifestStatuses"] is doc["status"]["manifestStatuses"]
    assert out["status"]["conditions"] is not patch["status"]["conditions"]  # copied from the patch


# field-set diff ---------------------------------------------------------------------------


def _pairs() -> list[tuple[Obj, Obj]]:
    base = work(copy.deepcopy(STATUS))
    shared_status = dict(base)
    shared_status["status"] = {**STATUS, "conditions": [{"type": "Applied", "status": "False"}]}
    relabelled = dict(base)
    relabelled["metadata"] = {**base["metadata"], "labels": {"b": "2"}, "annotations": {}}
    emptied = copy.deepcopy(base)
    emptied["spec"] = {}
    emptied["status"]["manifestStatuses"] = []
    retyped = copy.deepcopy(base)
    retyped["spec"] = "atomic now"
    del retyped["metadata"]["finalizers"]
    bools = copy.deepcopy(base)
    bools["status"]["manifestStatuses"][0]["status"]["x"] = True  # 1 -> true is a change in JSON
    return [(base, shared_status), (base, relabelled), (base, emptied), (emptied, base), (base, retyped),
            (retyped, base), (base, bools), ({}, base), (base, {}), (base, base)]


@pytest.mark.parametrize(("old", "new"), _pairs())
def test_diff_equals_compare_of_two_walks(old: Obj, new: Obj) -> None:
    old_view, new_view = managed_view(old), managed_view(new)
    assert diff(old_view, new_view, UNTYPED) == compare(walk(old_view, UNTYPED), walk(new_view, UNTYPED))


def test_diff_follows_a_typed_schema() -> None:
    schema = merge_schema_for("apps", "Deployment")
    assert schema is not None
    old = {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}, "replicas": 1}}
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"].append({"name": "b", "image": "y"})
    new["spec"]["replicas"] = 2
    assert diff(old, new, schema) == compare(walk(old, schema), walk(new, schema))


# record_update with shared structure ------------------------------------------------------


def test_record_update_copies_what_is_not_shared_with_old() -> None:
    old = work(copy.deepcopy(STATUS))
    old["metadata"]["managedFields"] = [{"manager": "m", "operation": "Update", "apiVersion": "v1",
                                         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
    new = dict(old)
    new["metadata"] = dict(old["metadata"])
    new["status"] = {"conditions": [{"type": "Applied", "status": "False"}]}
    args: dict[str, Any] = {"manager": "x", "api_version": "v1", "now": "T", "schema": None,
                            "subresource": "status"}
    shared = record_update(old, new, **args)
    assert shared == record_update(copy.deepcopy(old), copy.deepcopy(new), **args)
    assert shared["spec"] is old["spec"]  # shared with the (read-only) old object
    assert shared["status"] is not new["status"]  # the caller's own values are copied
    assert shared["metadata"] is not old["metadata"] and "managedFields" in old["metadata"]
    assert old["metadata"]["managedFields"][0]["manager"] == "m"


def test_record_update_never_writes_into_old_metadata_it_shares() -> None:
    old = work()
    new = {**old, "spec": {"other": True}}  # the very metadata dict of old
    before = copy.deepcopy(old)
    out = record_update(old, new, manager="x", api_version="v1", now="T", schema=None)
    assert "managedFields" in out["metadata"] and old == before


# one encoding per write -------------------------------------------------------------------


def test_store_hands_out_the_json_of_the_latest_write_only(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    a = store.create("/configmaps", "default", "a", {"metadata": {"name": "a"}, "data": {"k": "é"}})
    # UTF-8 as is, as kube-apiserver (Go) writes it
    assert store.encoded(a) == json.dumps(a, separators=(",", ":"), ensure_ascii=False)
    b = store.update("/configmaps", "default", "a", {"metadata": {"name": "a"}, "data": {"k": "b"}})
    assert store.encoded(a) is None and store.encoded(dict(b)) is None
    assert store.encoded(b) == json.dumps(b, separators=(",", ":"))


def test_event_line_reuses_the_event_text_only_for_its_own_object() -> None:
    obj = {"metadata": {"name": "a", "resourceVersion": "3"}, "data": {"k": "\u00e9\n"}}
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)  # as the store writes it
    event = Event("MODIFIED", 3, "/configmaps", "default", "a", obj, None, text)
    assert watching._event_line("ADDED", event, obj) == watching._line("ADDED", obj)
    other = {**obj, "apiVersion": "v2"}
    assert watching._event_line("MODIFIED", event, other) == watching._line("MODIFIED", other)
    no_text = Event("DELETED", 3, "/configmaps", "default", "a", obj, None)
    assert watching._event_line("DELETED", no_text, obj) == watching._line("DELETED", obj)


# cached renderings ------------------------------------------------------------------------


def test_shared_fields_v1_renders_like_to_fields_v1_and_parses_back_without_a_walk() -> None:
    fields = fieldset_of({"metadata": {"labels": {"a": "1"}}, "spec": {"x": [1], "y": {"z": True}}}, None)
    tree = shared_fields_v1(fields)
    assert tree == to_fields_v1(fields) and shared_fields_v1(frozenset(fields)) is tree
    assert from_fields_v1(tree) is fields  # the cached set, not a re-parse
    copied = copy.deepcopy(tree)
    assert from_fields_v1(copied) == fields and from_fields_v1(copied) is not fields

def test_http_reason_phrases() -> None:
    assert (http._reason(200), http._reason(404), http._reason(422)) == (
        "OK", "Not Found", "Unprocessable Entity")
    assert http._reason(599) == "Unknown"


def test_apply_defaults_in_place_equals_the_copying_form() -> None:
    spec = {"type": "object", "properties": {
        "a": {"type": "string", "default": "x"},
        "b": {"type": "object", "properties": {"c": {"type": "integer", "default": 3}}},
        "d": {"type": "string"}}}
    obj = {"b": {}, "d": None}
    expected = schema.apply_defaults(obj, spec)
    assert obj == {"b": {}, "d": None}
    assert schema.apply_defaults(obj, spec, copy=False) == expected == {"a": "x", "b": {"c": 3}}
    assert obj is not None and obj["b"] == {"c": 3}  # defaulted in place


# internal watchers narrowed to what they act on -------------------------------------------


def test_a_watcher_of_some_resources_sees_only_them(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    store.create("/pods", "default", "early", {"metadata": {"name": "early"}})
    store.create("/secrets", "default", "early", {"metadata": {"name": "early"}})
    watcher, history = store.watch(None, None, 0, resources=("/pods", "/nodes"))
    assert [(e.resource, e.name) for e in history] == [("/pods", "early")]
    store.create("/configmaps", "default", "a", {"metadata": {"name": "a"}})
    store.create("/nodes", "", "n", {"metadata": {"name": "n"}})
    everything, _ = store.watch(None, None, store.revision)
    store.create("/pods", "default", "p", {"metadata": {"name": "p"}})
    seen = []
    while watcher.pending():
        event = asyncio.run(watcher.next(0))
        assert event is not None
        seen.append((event.resource, event.name))
    assert seen == [("/nodes", "n"), ("/pods", "p")]
    assert everything.pending()


# server-side apply without extra copies ---------------------------------------------------


def _containers(value: Any) -> list[int]:
    if isinstance(value, dict):
        return [id(value), *(i for v in value.values() for i in _containers(v))]
    if isinstance(value, list):
        return [id(value), *(i for v in value for i in _containers(v))]
    return []


@pytest.mark.parametrize("typed", [False, True])
def test_server_side_apply_shares_no_container_with_its_inputs(typed: bool) -> None:
    merge_schema = merge_schema_for("", "ConfigMap") if typed else None
    applied: Obj = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "c", "labels": {"a": "1"}, "finalizers": ["x"]},
                    "data": {"k": "v"}, "extra": [{"n": [1]}], "gone": None}
    applied_before = copy.deepcopy(applied)
    created = server_side_apply(None, applied, manager="m", force=True, api_version="v1", now="T",
                                schema=merge_schema)
    live = copy.deepcopy(created)
    again: Obj = {**copy.deepcopy(applied), "data": {"k": "w", "z": "1"}}
    updated = server_side_apply(live, again, manager="n", force=True, api_version="v1", now="T",
                                schema=merge_schema)
    assert applied == applied_before and live == created
    assert created["data"] == {"k": "v"} and "gone" not in created
    assert updated["data"] == {"k": "w", "z": "1"}
    assert not set(_containers(created)) & set(_containers(applied))
    assert not set(_containers(updated)) & (set(_containers(live)) | set(_containers(again)))


# watch events written together --------------------------------------------------------------


def test_queued_watch_events_go_out_in_one_chunk_of_whole_lines(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    request = watching.WatchRequest(
        storage_key="/configmaps", namespace=None, since=str(store.revision),
        matches=lambda obj: True, timeout_s=None, bookmarks=False, send_initial_events=False,
        initial=list, bookmark_object=lambda rv: {"metadata": {"resourceVersion": rv}},
        render=lambda obj, first: obj)

    async def first_chunks() -> list[bytes]:
        chunks = watching.stream(store, request)
        for name in ("a", "b", "c"):  # a burst: three writes before the stream runs
            store.create("/configmaps", "default", name, {"metadata": {"name": name}})
        first = await anext(chunks)
        store.create("/configmaps", "default", "d", {"metadata": {"name": "d"}})
        second = await anext(chunks)
        await chunks.aclose()  # type: ignore[attr-defined]
        return [first, second]

    first, second = asyncio.run(first_chunks())
    lines = first.decode().splitlines()
    assert [json.loads(line)["object"]["metadata"]["name"] for line in lines] == ["a", "b", "c"]
    assert first.endswith(b"\n") and json.loads(second)["object"]["metadata"]["name"] == "d"
