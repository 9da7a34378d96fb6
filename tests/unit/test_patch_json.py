"""JSON Patch (RFC 6902): the appendix A examples plus the error cases the server maps to 422."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tether.local.patching import PatchError, apply_json_patch

# RFC 6902 appendix A, in order (A.1-A.16), minus the ones that must fail (below).
RFC_EXAMPLES = [
    (
        "A.1 add object member",
        {"foo": "bar"},
        [{"op": "add", "path": "/baz", "value": "qux"}],
        {"baz": "qux", "foo": "bar"},
    ),
    (
        "A.2 add array element",
        {"foo": ["bar", "baz"]},
        [{"op": "add", "path": "/foo/1", "value": "qux"}],
        {"foo": ["bar", "qux", "baz"]},
    ),
    (
        "A.3 remove object member",
        {"baz": "qux", "foo": "bar"},
        [{"op": "remove", "path": "/baz"}],
        {"foo": "bar"},
    ),
    (
        "A.4 remove array element",
        {"foo": ["bar", "qux", "baz"]},
        [{"op": "remove", "path": "/foo/1"}],
        {"foo": ["bar", "baz"]},
    ),
    (
        "A.5 replace value",
        {"baz": "qux", "foo": "bar"},
        [{"op": "replace", "path": "/baz", "value": "boo"}],
        {"baz": "boo", "foo": "bar"},
    ),
    (
        "A.6 move value",
        {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
        [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
        {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
    ),
    (
        "A.7 move array element",
        {"foo": ["all", "grass", "cows", "eat"]},
        [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
        {"foo": ["all", "cows", "eat", "grass"]},
    ),
    (
        "A.8 test success",
        {"baz": "qux", "foo": ["a", 2, "c"]},
        [
            {"op": "test", "path": "/baz", "value": "qux"},
            {"op": "test", "path": "/foo/1", "value": 2},
        ],
        {"baz": "qux", "foo": ["a", 2, "c"]},
    ),
    (
        "A.10 add nested member",
        {"foo": "bar"},
        [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
        {"foo": "bar", "child": {"grandchild": {}}},
    ),
    (
        "A.11 ignore unrecognised members",
        {"foo": "bar"},
        [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}],
        {"foo": "bar", "baz": "qux"},
    ),
    (
        "A.13 array value",
        {"foo": "bar"},
        [{"op": "add", "path": "/baz", "value": ["abc", "def"]}],
        {"foo": "bar", "baz": ["abc", "def"]},
    ),
    (
        "A.14 ~ escape ordering",
        {"/": 9, "~1": 10},
        [{"op": "test", "path": "/~01", "value": 10}],
        {"/": 9, "~1": 10},
    ),
    (
        "A.16 add array value",
        {"foo": ["bar"]},
        [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
        {"foo": ["bar", ["abc", "def"]]},
    ),
]


@pytest.mark.parametrize(
    ("doc", "ops", "expected"), [c[1:] for c in RFC_EXAMPLES], ids=[c[0] for c in RFC_EXAMPLES]
)
def test_rfc6902_appendix(doc: Any, ops: list[Any], expected: Any) -> None:
    assert apply_json_patch(doc, ops) == expected


@pytest.mark.parametrize(
    ("doc", "ops", "expected"),
    [
        ({"a": 1}, [{"op": "add", "path": "/a", "value": 2}], {"a": 2}),
        (
            {"a~b": 1, "c/d": 2},
            [{"op": "remove", "path": "/a~0b"}, {"op": "replace", "path": "/c~1d", "value": 3}],
            {"c/d": 3},
        ),
        ({"l": [1, 2]}, [{"op": "add", "path": "/l/2", "value": 3}], {"l": [1, 2, 3]}),
        ({"l": [1, 2]}, [{"op": "add", "path": "/l/0", "value": 0}], {"l": [0, 1, 2]}),
        ({"a": 1}, [{"op": "add", "path": "", "value": [1]}], [1]),
        ({"a": 1}, [{"op": "replace", "path": "", "value": {"b": 2}}], {"b": 2}),
        ({"a": None}, [{"op": "test", "path": "/a", "value": None}], {"a": None}),
        ({"a": 1}, [{"op": "add", "path": "/b", "value": None}], {"a": 1, "b": None}),
        (
            {"a": {"b": [1]}},
            [
                {"op": "copy", "from": "/a", "path": "/c"},
                {"op": "add", "path": "/c/b/-", "value": 2},
            ],
            {"a": {"b": [1]}, "c": {"b": [1, 2]}},
        ),
        ({"a": 1}, [{"op": "move", "from": "/a", "path": "/a"}], {"a": 1}),
        ({"a": 1.0}, [{"op": "test", "path": "/a", "value": 1}], {"a": 1.0}),
        # kubectl's finalizer removal as kubectl sends it
        (
            {"metadata": {"name": "x", "finalizers": ["f"]}},
            [{"op": "remove", "path": "/metadata/finalizers"}],
            {"metadata": {"name": "x"}},
        ),
        ({"spec": {"replicas": 1}}, [], {"spec": {"replicas": 1}}),
    ],
)
def test_operations(doc: Any, ops: list[Any], expected: Any) -> None:
    assert apply_json_patch(doc, ops) == expected


@pytest.mark.parametrize(
    ("doc", "ops", "message"),
    [
        # RFC 6902 A.9, A.12, A.15: failing tests and a missing parent
        (
            {"baz": "qux"},
            [{"op": "test", "path": "/baz", "value": "bar"}],
            "test operation 0 failed",
        ),
        (
            {"foo": "bar"},
            [{"op": "add", "path": "/baz/bat", "value": "qux"}],
            'path "/baz/bat" does not exist',
        ),
        (
            {"/": 9, "~1": 10},
            [{"op": "test", "path": "/~01", "value": "10"}],
            "test operation 0 failed",
        ),
        ({"a": True}, [{"op": "test", "path": "/a", "value": 1}], "failed"),
        ({"a": 1}, [{"op": "remove", "path": "/b"}], 'path "/b" does not exist'),
        ({"a": 1}, [{"op": "replace", "path": "/b", "value": 1}], 'path "/b" does not exist'),
        ({"l": [1]}, [{"op": "remove", "path": "/l/1"}], "out of bounds"),
        ({"l": [1]}, [{"op": "add", "path": "/l/2", "value": 1}], "out of bounds"),
        ({"l": [1]}, [{"op": "add", "path": "/l/01", "value": 1}], "not a valid array index"),
        ({"l": [1]}, [{"op": "remove", "path": "/l/-"}], "not a valid array index"),
        ({"a": 1}, [{"op": "frobnicate", "path": "/a"}], "unknown op 'frobnicate'"),
        ({"a": 1}, [{"path": "/a"}], "unknown op None"),
        ({"a": 1}, [{"op": "add", "path": "/b"}], 'missing "value"'),
        ({"a": 1}, [{"op": "add", "value": 1}], 'missing "path"'),
        ({"a": 1}, [{"op": "move", "path": "/b"}], 'missing "from"'),
        ({"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": "/a/c"}], "into itself"),
        ({"a": 1}, [{"op": "add", "path": "b", "value": 1}], 'must start with "/"'),
        ({"a": 1}, [{"op": "remove", "path": ""}], "whole document"),
        ({"a": 1}, {"op": "add"}, "must be a list"),
        ({"a": 1}, ["add"], "operation 0 is not an object"),
        ({"a": "s"}, [{"op": "add", "path": "/a/b", "value": 1}], 'path "/a/b" does not exist'),
    ],
)
def test_errors(doc: Any, ops: Any, message: str) -> None:
    with pytest.raises(PatchError) as info:
        apply_json_patch(doc, ops)
    assert message in str(info.value)


def test_inputs_are_not_mutated_even_when_a_later_operation_fails() -> None:
    doc = {"a": {"b": [1, 2]}}
    ops = [
        {"op": "add", "path": "/a/b/-", "value": {"c": 1}},
        {"op": "test", "path": "/x", "value": 1},
    ]
    before_doc, before_ops = copy.deepcopy(doc), copy.deepcopy(ops)
    with pytest.raises(PatchError):
        apply_json_patch(doc, ops)
    assert (doc, ops) == (before_doc, before_ops)


def test_result_shares_no_structure_with_the_patch() -> None:
    value = {"nested": [1]}
    result = apply_json_patch({}, [{"op": "add", "path": "/v", "value": value}])
    result["v"]["nested"].append(2)
    assert value == {"nested": [1]}
