"""kubectl get -w: one header, then one row per change, for tables, JSON and watch events."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from e2e_util import Streamed, manifest, poll

pytestmark = pytest.mark.e2e


def configmap(name: str, ns: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data}


def first_word(line: str) -> str:
    return line.split()[0] if line.split() else ""


def test_get_watch_table(clusters: Any, ns: str) -> None:
    clusters.kubectl("create", "-f", "-", input=manifest(configmap("w0", ns, a="1")))
    with Streamed(clusters, "get", "cm", "-n", ns, "-w", "--request-timeout=30s") as watch:
        watch.wait_for_line(lambda line: first_word(line) == "w0")
        clusters.kubectl("create", "-f", "-", input=manifest(configmap("w1", ns, a="1", b="2")))
        row = watch.wait_for_line(lambda line: first_word(line) == "w1")
        assert row.split()[1] == "2"  # DATA column
        clusters.kubectl("patch", "-n", ns, "cm", "w0", "--type=merge", "-p", '{"data":{"x":"1","y":"2"}}')
        watch.wait_for_line(lambda line: first_word(line) == "w0" and line.split()[1] == "3")
        clusters.kubectl("delete", "-n", ns, "cm", "w1")
        # A deletion shows the object's last row again.
        poll(lambda: len([line for line in watch.snapshot() if first_word(line) == "w1"]) >= 2, what="w1 deleted row")
        assert watch.running()
        lines = watch.snapshot()
    headers = [line for line in lines if first_word(line) == "NAME"]
    assert len(headers) == 1, lines
    assert lines[0].split() == ["NAME", "DATA", "AGE"]
    names = [first_word(line) for line in lines[1:] if first_word(line) != "kube-root-ca.crt"]
    assert names[:1] == ["w0"] and names.count("w0") == 2 and names.count("w1") == 2
    assert set(names) <= {"w0", "w1", "kube-root-ca.crt"}


def parse_json_stream(text: str) -> list[dict[str, Any]]:
    decoder = json.JSONDecoder()
    found, pos = [], 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return found
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except ValueError:
            return found
        found.append(obj)


def test_get_watch_only_and_events(clusters: Any, ns: str) -> None:
    clusters.kubectl("create", "-f", "-", input=manifest(configmap("e0", ns, a="1")))
    with Streamed(clusters, "get", "cm", "-n", ns, "--watch-only", "--output-watch-events", "-o", "json") as watch:

        def events() -> list[dict[str, Any]]:
            return parse_json_stream("\n".join(watch.snapshot()))

        # --watch-only skips the current state: touch e0 until the watch is seen to be running.
        def probe() -> bool:
            if any(e["object"]["metadata"]["name"] == "e0" for e in events()):
                return True
            clusters.kubectl("annotate", "-n", ns, "cm", "e0", f"probe={time.monotonic()}", "--overwrite")
            return any(e["object"]["metadata"]["name"] == "e0" for e in events())

        poll(probe, interval=0.2, what="the watch to start")
        clusters.kubectl("create", "-f", "-", input=manifest(configmap("e1", ns, a="1")))
        clusters.kubectl("label", "-n", ns, "cm", "e1", "seen=yes")
        clusters.kubectl("delete", "-n", ns, "cm", "e1")
        poll(lambda: any(e.get("type") == "DELETED" for e in events()), what="the DELETED event")
        got = [(e["type"], e["object"]["metadata"]["name"]) for e in events()]
    assert {t for t, n in got if n == "e0"} == {"MODIFIED"}, got
    assert [t for t, n in got if n == "e1"] == ["ADDED", "MODIFIED", "DELETED"], got
    deleted = next(e for e in events() if e["type"] == "DELETED")
    assert deleted["object"]["metadata"]["labels"] == {"seen": "yes"}
    assert deleted["object"]["kind"] == "ConfigMap"


def test_get_watch_label_selector(clusters: Any, ns: str) -> None:
    with Streamed(clusters, "get", "cm", "-n", ns, "-w", "-l", "app=sel") as watch:
        clusters.kubectl("create", "-f", "-", input=manifest(configmap("other", ns, a="1")))
        sel = configmap("picked", ns, a="1")
        sel["metadata"]["labels"] = {"app": "sel"}
        clusters.kubectl("create", "-f", "-", input=manifest(sel))
        watch.wait_for_line(lambda line: first_word(line) == "picked")
        lines = watch.snapshot()
    assert not any(first_word(line) == "other" for line in lines), lines


def test_get_watch_deployments(clusters: Any, ns: str) -> None:
    clusters.kubectl("create", "deployment", "wd", "-n", ns, "--image=nginx:1.27", "--replicas=1")
    with Streamed(clusters, "get", "deploy", "-n", ns, "-w") as watch:
        watch.wait_for_line(lambda line: first_word(line) == "wd")
        clusters.kubectl("scale", "-n", ns, "deploy", "wd", "--replicas=4")
        watch.wait_for_line(lambda line: first_word(line) == "wd" and line.split()[1].endswith("/4"))
        lines = watch.snapshot()
    assert lines[0].split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert sum(1 for line in lines if first_word(line) == "NAME") == 1
