from __future__ import annotations

from typing import Any

import pytest

from tether.objects import jsonpath
from tether.objects.jsonpath import JsonPathError

OBJ: dict[str, Any] = {
    "apiVersion": "example.com/v1",
    "metadata": {
        "name": "w1",
        "labels": {"app": "web"},
        "annotations": {"example.com/owner": "team-a", "a.b": "dots"},
    },
    "spec": {
        "replicas": 3,
        "ratio": 0.5,
        "enabled": False,
        "ports": [
            {"name": "http", "port": 80},
            {"name": "https", "port": 443},
            {"name": "metrics", "port": 9090},
        ],
    },
    "status": {
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Up"},
            {"type": "Progressing", "status": "False"},
        ],
    },
}


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (".metadata.name", ["w1"]),
        ("{.metadata.name}", ["w1"]),
        ("{ .metadata.name }", ["w1"]),
        ("$.metadata.name", ["w1"]),
        ("{$.metadata.name}", ["w1"]),
        ("metadata.name", ["w1"]),  # lenient: no leading dot
        (".spec.replicas", [3]),
        (".spec.enabled", [False]),
        (".spec.ports[0].port", [80]),
        (".spec.ports[-1].name", ["metrics"]),
        (".spec.ports[*].port", [80, 443, 9090]),
        (".spec.ports[0,2].name", ["http", "metrics"]),
        (".spec.ports[1:].name", ["https", "metrics"]),
        (".spec.ports[:2].name", ["http", "https"]),
        (".spec.ports[::2].name", ["http", "metrics"]),
        (".spec.ports[7].name", []),  # out of range: no result
        (".metadata.annotations['example.com/owner']", ["team-a"]),
        ('.metadata.annotations["a.b"]', ["dots"]),
        (".metadata.annotations.a\\.b", ["dots"]),
        (".metadata.annotations.example\\.com/owner", ["team-a"]),
        (".metadata['name','missing']", ["w1"]),
        ('.status.conditions[?(@.type=="Ready")].status', ["True"]),
        (".status.conditions[?(@.type=='Ready')].reason", ["Up"]),
        ('.status.conditions[?(@.type == "Ready")].status', ["True"]),
        ('.status.conditions[?(@.type!="Ready")].type', ["Progressing"]),
        (".status.conditions[?(@.reason)].type", ["Ready"]),
        ('.status.conditions[?(@.type=="Gone")].status', []),
        (".spec.ports[?(@.port>100)].name", ["https", "metrics"]),
        (".spec.ports[?(@.port<=443)].name", ["http", "https"]),
        (".spec.ports[?(@.port==80)].name", ["http"]),
        (".spec.ports[?(@.port=='80')].name", []),  # string and number never compare equal
        (".metadata.labels.*", ["web"]),
        ("..port", [80, 443, 9090]),
        (".missing", []),
        (".missing.deeper[0]", []),
        (".spec.replicas.deeper", []),
        (".spec.ports.name", []),  # a field of a list selects nothing, as upstream
        (".", [OBJ]),
    ],
)
def test_evaluate(expr: str, expected: list[Any]) -> None:
    assert jsonpath.evaluate(expr, OBJ) == expected


def test_evaluate_filter_against_root_path() -> None:
    obj = {"want": "b", "items": [{"n": "a"}, {"n": "b"}]}
    assert jsonpath.evaluate("{.items[?(@.n==$.want)].n}", obj) == ["b"]


def test_evaluate_boolean_literal() -> None:
    obj = {"items": [{"n": 1, "on": True}, {"n": 2, "on": False}]}
    assert jsonpath.evaluate(".items[?(@.on==true)].n", obj) == [1]


@pytest.mark.parametrize(
    "expr",
    [
        ".spec.ports[",
        ".spec.ports[x]",
        ".spec.ports[1:2:3:4]",
        ".spec.ports[::0]",
        ".status.conditions[?@.type]",
        ".status.conditions[?(@.type==Ready)]",
        ".metadata.annotations['unterminated]",
        ".a b",
        ".a)",
    ],
)
def test_invalid_expressions(expr: str) -> None:
    with pytest.raises(JsonPathError):
        jsonpath.evaluate(expr, OBJ)


def test_compile_is_cached_and_reusable() -> None:
    compiled = jsonpath.compile_path(".spec.replicas")
    assert compiled is jsonpath.compile_path(".spec.replicas")
    assert compiled.find({"spec": {"replicas": 1}}) == [1]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("s", "s"),
        (True, "true"),
        (False, "false"),
        (3, "3"),
        (3.0, "3"),
        (1.5, "1.5"),
        (-0.25, "-0.25"),
        (123456.0, "123456"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (0.0, "0"),
        ({"b": 1, "a": [1, "x"]}, '{"a":[1,"x"],"b":1}'),
        ({"h": "<&>"}, '{"h":"\\u003c\\u0026\\u003e"}'),
        (None, "<nil>"),
    ],
)
def test_to_text_prints_like_go(value: Any, text: str) -> None:
    assert jsonpath.to_text(value) == text
