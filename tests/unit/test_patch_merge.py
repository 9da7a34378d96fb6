"""JSON Merge Patch (RFC 7386): the appendix A table and the kubectl label/scale patches."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tether.local.patching import apply_merge_patch

# RFC 7386 appendix A, row by row.
RFC_EXAMPLES: list[tuple[Any, Any, Any]] = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("doc", "patch", "expected"), RFC_EXAMPLES)
def test_rfc7386_appendix(doc: Any, patch: Any, expected: Any) -> None:
    assert apply_merge_patch(doc, patch) == expected


@pytest.mark.parametrize(
    ("doc", "patch", "expected"),
    [
        # kubectl label / annotate
        (
            {"metadata": {"name": "cm", "labels": {"a": "1"}}},
            {"metadata": {"labels": {"b": "2"}}},
            {"metadata": {"name": "cm", "labels": {"a": "1", "b": "2"}}},
        ),
        # kubectl label a-
        (
            {"metadata": {"labels": {"a": "1", "b": "2"}}},
            {"metadata": {"labels": {"a": None}}},
            {"metadata": {"labels": {"b": "2"}}},
        ),
        # kubectl scale on /scale
        (
            {"spec": {"replicas": 1}, "status": {"replicas": 1}},
            {"spec": {"replicas": 3}},
            {"spec": {"replicas": 3}, "status": {"replicas": 1}},
        ),
        # lists are replaced whole, even lists of objects with names
        (
            {"spec": {"containers": [{"name": "a"}, {"name": "b"}]}},
            {"spec": {"containers": [{"name": "c"}]}},
            {"spec": {"containers": [{"name": "c"}]}},
        ),
        # deleting an absent key is not an error
        ({"a": 1}, {"b": None}, {"a": 1}),
        # a scalar replaced by an object merges against {}
        ({"a": 1}, {"a": {"b": 1, "c": None}}, {"a": {"b": 1}}),
        ({"a": 1}, {}, {"a": 1}),
    ],
)
def test_kubernetes_patches(doc: Any, patch: Any, expected: Any) -> None:
    assert apply_merge_patch(doc, patch) == expected


def test_inputs_are_not_mutated_and_result_is_independent() -> None:
    doc = {"a": {"b": [1]}, "c": {"d": 1}}
    patch = {"a": {"x": {"y": [2]}}, "c": None}
    before_doc, before_patch = copy.deepcopy(doc), copy.deepcopy(patch)
    result = apply_merge_patch(doc, patch)
    assert result == {"a": {"b": [1], "x": {"y": [2]}}}
    result["a"]["b"].append(9)
    result["a"]["x"]["y"].append(9)
    assert (doc, patch) == (before_doc, before_patch)
