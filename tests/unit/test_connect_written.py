"""What a controller wrote stays in front of its informer until the informer has caught up."""

from __future__ import annotations

from typing import Any

from tether.connect.mirror.runner import source_key
from tether.connect.written import ABSENT, Written
from tether.kube import ObjectKey, WatchEvent


def obj(rv: str) -> dict[str, Any]:
    return {"metadata": {"name": "x", "resourceVersion": rv}}


def test_a_write_is_seen_until_its_own_event_arrives() -> None:
    written: Written[str] = Written()
    assert written.lookup("x") is ABSENT
    written.wrote("x", obj("5"))
    written.observed("x", WatchEvent("MODIFIED", obj("4")))  # older: ours stays in front
    assert written.lookup("x") == obj("5")
    written.observed("x", WatchEvent("MODIFIED", obj("5")))
    assert written.lookup("x") is ABSENT


def test_a_delete_is_seen_until_the_deleted_event() -> None:
    written: Written[str] = Written()
    written.wrote("x", None)
    assert written.lookup("x") is None
    written.observed("x", WatchEvent("MODIFIED", obj("6")))
    assert written.lookup("x") is None
    written.observed("x", WatchEvent("DELETED", obj("7")))
    assert written.lookup("x") is ABSENT


def test_what_is_remembered_expires() -> None:
    written: Written[str] = Written(ttl_s=0.0)
    written.wrote("x", obj("5"))
    assert written.lookup("x") is ABSENT


def test_source_key_from_annotations_or_upstreams_name() -> None:
    annotated = {"metadata": {"name": "aws-a-9f3c", "annotations": {
        "connect.tether.io/source-namespace": "sys-log", "connect.tether.io/source-name": "fluentd"}}}
    assert source_key(annotated, "aws") == ObjectKey("sys-log", "fluentd")
    upstream = {"metadata": {"name": "aws-sys-log-73736d-fluentd"}}
    assert source_key(upstream, "aws") == ObjectKey("sys-log", "fluentd")
    a_slice = {"metadata": {"name": "whatever", "labels": {"kubernetes.io/service-name": "aws-ns-73736d-svc"}}}
    assert source_key(a_slice, "aws") == ObjectKey("ns", "svc")
    assert source_key({"metadata": {"name": "unrelated"}}, "aws") is None
