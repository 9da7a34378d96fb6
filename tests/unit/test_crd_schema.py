from __future__ import annotations

import copy
from typing import Any

import pytest

from tether.local import schema
from tether.local.schema import Violation


def obj_schema(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


SPEC_SCHEMA = obj_schema(
    spec=obj_schema(
        replicas={"type": "integer", "default": 1},
        mode={"type": "string", "enum": ["fast", "safe"], "default": "safe"},
        ports={
            "type": "array",
            "items": obj_schema(
                port={"type": "integer"},
                protocol={"type": "string", "default": "TCP"},
            ),
        },
        labels={
            "type": "object",
            "additionalProperties": obj_schema(v={"type": "string", "default": "x"}),
        },
        tuning={
            "type": "object",
            "default": {},
            "properties": {"level": {"type": "integer", "default": 3}},
        },
        note={"type": "string", "nullable": True},
    ),
)


# ---------------------------------------------------------------------------------------------
# Defaulting


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ({}, {}),  # `spec` itself has no default
        ({"spec": {}}, {"spec": {"replicas": 1, "mode": "safe", "tuning": {"level": 3}}}),
        (
            {"spec": {"replicas": 5, "mode": "fast", "tuning": {"level": 1}}},
            {"spec": {"replicas": 5, "mode": "fast", "tuning": {"level": 1}}},
        ),
        (
            {"spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}], "tuning": {}}},
            {
                "spec": {
                    "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
                    "replicas": 1,
                    "mode": "safe",
                    "tuning": {"level": 3},
                }
            },
        ),
        (
            {"spec": {"labels": {"a": {}, "b": {"v": "y"}}, "tuning": {}}},
            {
                "spec": {
                    "labels": {"a": {"v": "x"}, "b": {"v": "y"}},
                    "replicas": 1,
                    "mode": "safe",
                    "tuning": {"level": 3},
                }
            },
        ),
        # null for a non-nullable field: defaulted when it has a default, dropped otherwise
        (
            {"spec": {"replicas": None, "ports": None, "note": None, "tuning": {}}},
            {"spec": {"replicas": 1, "note": None, "mode": "safe", "tuning": {"level": 3}}},
        ),
    ],
)
def test_apply_defaults(obj: dict[str, Any], expected: dict[str, Any]) -> None:
    before = copy.deepcopy(obj)
    assert schema.apply_defaults(obj, SPEC_SCHEMA) == expected
    assert obj == before  # pure: the input is untouched


def test_apply_defaults_copies_default_values() -> None:
    shared = {"type": "object", "default": {"k": ["v"]}}
    out = schema.apply_defaults({}, obj_schema(a=shared, b=shared))
    out["a"]["k"].append("w")
    assert out["b"] == {"k": ["v"]}
    assert shared["default"] == {"k": ["v"]}


def test_apply_defaults_without_schema() -> None:
    assert schema.apply_defaults({"a": 1}, None) == {"a": 1}
    assert schema.apply_defaults([1, 2], {"type": "array"}) == [1, 2]


# ---------------------------------------------------------------------------------------------
# Pruning


@pytest.mark.parametrize(
    ("tree", "obj", "expected", "removed"),
    [
        (
            obj_schema(spec=obj_schema(a={"type": "string"})),
            {
                "apiVersion": "example.com/v1",
                "kind": "Widget",
                "metadata": {"name": "w", "labels": {"x": "y"}},
                "spec": {"a": "1", "b": 2},
                "extra": True,
            },
            {
                "apiVersion": "example.com/v1",
                "kind": "Widget",
                "metadata": {"name": "w", "labels": {"x": "y"}},
                "spec": {"a": "1"},
            },
            ["spec.b", "extra"],
        ),
        (
            obj_schema(
                spec=obj_schema(items={"type": "array", "items": obj_schema(n={"type": "string"})})
            ),
            {"spec": {"items": [{"n": "a", "x": 1}, {"n": "b"}, {"y": 2}]}},
            {"spec": {"items": [{"n": "a"}, {"n": "b"}, {}]}},
            ["spec.items[0].x", "spec.items[2].y"],
        ),
        (
            obj_schema(spec={"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
            {"spec": {"anything": {"goes": [1, 2]}}},
            {"spec": {"anything": {"goes": [1, 2]}}},
            [],
        ),
        (
            # Declared children of a preserved object are still pruned.
            obj_schema(
                spec={
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {"strict": obj_schema(a={"type": "string"})},
                }
            ),
            {"spec": {"free": 1, "strict": {"a": "x", "b": "y"}}},
            {"spec": {"free": 1, "strict": {"a": "x"}}},
            ["spec.strict.b"],
        ),
        (
            obj_schema(
                spec=obj_schema(
                    template={
                        "type": "object",
                        "x-kubernetes-embedded-resource": True,
                        "properties": {"spec": obj_schema(image={"type": "string"})},
                    }
                )
            ),
            {
                "spec": {
                    "template": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": "p"},
                        "spec": {"image": "nginx", "bogus": 1},
                        "status": {},
                    }
                }
            },
            {
                "spec": {
                    "template": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": "p"},
                        "spec": {"image": "nginx"},
                    }
                }
            },
            ["spec.template.spec.bogus", "spec.template.status"],
        ),
        (
            # apiVersion/kind/metadata are only kept at the top and in embedded resources.
            obj_schema(spec=obj_schema(a={"type": "string"})),
            {"spec": {"a": "x", "kind": "Nope", "metadata": {}}},
            {"spec": {"a": "x"}},
            ["spec.kind", "spec.metadata"],
        ),
        (
            obj_schema(
                spec={"type": "object", "additionalProperties": obj_schema(v={"type": "string"})}
            ),
            {"spec": {"k1": {"v": "a", "w": "b"}, "k2": {}}},
            {"spec": {"k1": {"v": "a"}, "k2": {}}},
            ["spec.k1.w"],
        ),
        (
            obj_schema(spec={"type": "object", "additionalProperties": True}),
            {"spec": {"k": {"deep": 1}}},
            {"spec": {"k": {"deep": 1}}},
            [],
        ),
        (
            obj_schema(spec=obj_schema(list={"type": "array"})),  # array without items schema
            {"spec": {"list": [{"a": 1}, "s", 3]}},
            {"spec": {"list": [{}, "s", 3]}},
            ["spec.list[0].a"],
        ),
    ],
)
def test_prune(
    tree: dict[str, Any], obj: dict[str, Any], expected: dict[str, Any], removed: list[str]
) -> None:
    before = copy.deepcopy(obj)
    pruned, paths = schema.prune(obj, tree)
    assert pruned == expected
    assert paths == removed
    assert obj == before


def test_prune_without_schema_keeps_only_type_meta() -> None:
    obj = {"apiVersion": "v1", "kind": "K", "metadata": {"name": "n"}, "spec": {}}
    assert schema.prune(obj, None) == (
        {"apiVersion": "v1", "kind": "K", "metadata": {"name": "n"}},
        ["spec"],
    )


def test_root_preserve_unknown_fields_keeps_everything() -> None:
    tree = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    obj = {"apiVersion": "v1", "kind": "K", "metadata": {}, "spec": {"x": 1}, "status": {"y": 2}}
    assert schema.prune(obj, tree) == (obj, [])


# ---------------------------------------------------------------------------------------------
# Validation


def errors(tree: dict[str, Any], obj: Any) -> list[str]:
    return [str(v) for v in schema.validate(obj, tree)]


@pytest.mark.parametrize(
    ("prop", "value", "expected"),
    [
        ({"type": "integer"}, 3, []),
        ({"type": "integer"}, 3.0, []),  # an integral float is an integer
        (
            {"type": "integer"},
            "string",
            ['spec.x: Invalid value: "string": spec.x in body must be of type integer: "string"'],
        ),
        (
            {"type": "integer"},
            1.5,
            ['spec.x: Invalid value: "number": spec.x in body must be of type integer: "number"'],
        ),
        (
            {"type": "integer"},
            True,
            ['spec.x: Invalid value: "boolean": spec.x in body must be of type integer: "boolean"'],
        ),
        ({"type": "number"}, 3, []),
        ({"type": "number"}, 2.5, []),
        ({"type": "string"}, "s", []),
        (
            {"type": "string"},
            ["a"],
            ['spec.x: Invalid value: "array": spec.x in body must be of type string: "array"'],
        ),
        (
            {"type": "object"},
            None,
            ['spec.x: Invalid value: "null": spec.x in body must be of type object: "null"'],
        ),
        ({"type": "object", "nullable": True}, None, []),
        ({"nullable": True}, 5, []),
        ({}, {"any": "thing"}, []),
        ({"x-kubernetes-int-or-string": True}, 8080, []),
        ({"x-kubernetes-int-or-string": True}, "http", []),
        (
            {"x-kubernetes-int-or-string": True},
            True,
            [
                'spec.x: Invalid value: "boolean": spec.x in body must be of type integer,string: "boolean"'
            ],
        ),
        (
            {"x-kubernetes-int-or-string": True},
            1.2,
            [
                'spec.x: Invalid value: "number": spec.x in body must be of type integer,string: "number"'
            ],
        ),
        ({"x-kubernetes-int-or-string": True, "nullable": True}, None, []),
        (
            {"type": "string", "enum": ["a", "b"]},
            "x",
            ['spec.x: Unsupported value: "x": supported values: "a", "b"'],
        ),
        (
            {"type": "integer", "enum": [1, 2]},
            "x",
            [
                'spec.x: Invalid value: "string": spec.x in body must be of type integer: "string"',
                'spec.x: Unsupported value: "x": supported values: "1", "2"',
            ],
        ),
        (
            {"type": "string", "enum": ["a", "b"]},
            True,
            [
                'spec.x: Invalid value: "boolean": spec.x in body must be of type string: "boolean"',
                'spec.x: Unsupported value: true: supported values: "a", "b"',
            ],
        ),
        ({"type": "integer", "enum": [1, 2]}, 2, []),
        (
            {"type": "integer", "minimum": 1, "maximum": 10},
            0,
            ["spec.x: Invalid value: 0: spec.x in body should be greater than or equal to 1"],
        ),
        (
            {"type": "integer", "minimum": 1, "maximum": 10},
            11,
            ["spec.x: Invalid value: 11: spec.x in body should be less than or equal to 10"],
        ),
        (
            {"type": "integer", "minimum": 1, "exclusiveMinimum": True},
            1,
            ["spec.x: Invalid value: 1: spec.x in body should be greater than 1"],
        ),
        (
            {"type": "number", "maximum": 0.5, "exclusiveMaximum": True},
            0.5,
            ["spec.x: Invalid value: 0.5: spec.x in body should be less than 0.5"],
        ),
        (
            {"type": "integer", "multipleOf": 5},
            12,
            ["spec.x: Invalid value: 12: spec.x in body should be a multiple of 5"],
        ),
        ({"type": "integer", "minimum": 1, "maximum": 10}, 10, []),
        (
            {"type": "string", "maxLength": 3},
            "abcd",
            ["spec.x: Too long: may not be more than 3 bytes"],
        ),
        (
            {"type": "string", "maxLength": 1},
            "ab",
            ["spec.x: Too long: may not be more than 1 byte"],
        ),
        (
            {"type": "string", "minLength": 3},
            "ab",
            ['spec.x: Invalid value: "ab": spec.x in body should be at least 3 chars long'],
        ),
        ({"type": "string", "maxLength": 2}, "éé", []),  # characters, not bytes
        (
            {"type": "string", "pattern": "^[a-z]+$"},
            "ABC",
            ["spec.x: Invalid value: \"ABC\": spec.x in body should match '^[a-z]+$'"],
        ),
        ({"type": "string", "pattern": "[0-9]"}, "a1b", []),  # unanchored, as in Go
        (
            {"type": "string", "format": "date-time"},
            "yesterday",
            [
                'spec.x: Invalid value: "yesterday": spec.x in body must be of type date-time: "yesterday"'
            ],
        ),
        ({"type": "string", "format": "date-time"}, "2025-06-01T12:00:00Z", []),
        ({"type": "string", "format": "date-time"}, "2025-06-01T12:00:00.5+02:00", []),
        (
            {"type": "string", "format": "date"},
            "2025-02-30",
            [
                'spec.x: Invalid value: "2025-02-30": spec.x in body must be of type date: "2025-02-30"'
            ],
        ),
        ({"type": "string", "format": "byte"}, "aGVsbG8=", []),
        (
            {"type": "string", "format": "byte"},
            "not base64!",
            [
                'spec.x: Invalid value: "not base64!": spec.x in body must be of type byte: "not base64!"'
            ],
        ),
        ({"type": "string", "format": "ipv4"}, "10.0.0.1", []),
        ({"type": "string", "format": "uuid"}, "123e4567-e89b-12d3-a456-426614174000", []),
        ({"type": "string", "format": "made-up"}, "whatever", []),
        ({"type": "integer", "format": "int32"}, 2**31 - 1, []),
        (
            {"type": "integer", "format": "int32"},
            2**31,
            ["spec.x: Invalid value: 2147483648: spec.x in body must be of type int32"],
        ),
        ({"type": "integer", "format": "int64"}, 2**40, []),
        (
            {"type": "array", "items": {"type": "string"}, "minItems": 1},
            [],
            ["spec.x: Invalid value: 0: spec.x in body should have at least 1 items"],
        ),
        (
            {"type": "array", "items": {"type": "string"}, "maxItems": 2},
            ["a", "b", "c"],
            ["spec.x: Too many: 3: must have at most 2 items"],
        ),
        (
            {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
            [1, 2, 1],
            ['spec.x: Invalid value: "": spec.x in body shouldn\'t contain duplicates'],
        ),
        ({"type": "array", "items": {}, "uniqueItems": True}, [1, True, 1.5], []),
        (
            {"type": "array", "items": {"type": "integer", "minimum": 1}},
            [1, 0, "z"],
            [
                "spec.x.1: Invalid value: 0: spec.x.1 in body should be greater than or equal to 1",
                'spec.x.2: Invalid value: "string": spec.x.2 in body must be of type integer: "string"',
            ],
        ),
        (
            {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            ["a", "b", "a"],
            ['spec.x[2]: Duplicate value: "a"'],
        ),
        (
            {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": obj_schema(name={"type": "string"}, v={"type": "integer"}),
            },
            [{"name": "a", "v": 1}, {"name": "b"}, {"name": "a", "v": 2}],
            ['spec.x[2]: Duplicate value: {"name":"a"}'],
        ),
        (
            {"type": "object", "additionalProperties": {"type": "integer"}},
            {"a": 1, "b": "two"},
            [
                'spec.x.b: Invalid value: "string": spec.x.b in body must be of type integer: "string"'
            ],
        ),
        (
            {"type": "object", "minProperties": 1},
            {},
            ["spec.x: Invalid value: 0: spec.x in body should have at least 1 properties"],
        ),
        (
            {"type": "object", "maxProperties": 1},
            {"a": 1, "b": 2},
            ["spec.x: Too many: 2: must have at most 1 item"],
        ),
        (
            {"type": "object", "additionalProperties": False, "properties": {"a": {}}},
            {"a": 1, "b": 2},
            ['spec.x.b: Invalid value: "": spec.x.b in body is a forbidden property'],
        ),
    ],
)
def test_validate_keywords(prop: dict[str, Any], value: Any, expected: list[str]) -> None:
    tree = obj_schema(spec=obj_schema(x=prop))
    assert errors(tree, {"spec": {"x": value}}) == expected


def test_validate_required_and_reasons() -> None:
    tree = {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "spec": {
                "type": "object",
                "required": ["replicas", "image"],
                "properties": {"replicas": {"type": "integer"}, "image": {"type": "string"}},
            }
        },
    }
    assert schema.validate({}, tree) == [Violation("spec", "FieldValueRequired", "Required value")]
    assert schema.validate({"spec": {"image": "nginx"}}, tree) == [
        Violation("spec.replicas", "FieldValueRequired", "Required value")
    ]
    violations = schema.validate({"spec": {"replicas": "string", "image": "nginx"}}, tree)
    assert violations == [
        Violation(
            "spec.replicas",
            "FieldValueTypeInvalid",
            'Invalid value: "string": spec.replicas in body must be of type integer: "string"',
        )
    ]
    assert str(violations[0]).startswith("spec.replicas: Invalid value")


@pytest.mark.parametrize(
    ("prop", "value", "reason"),
    [
        ({"type": "string", "enum": ["a"]}, "b", "FieldValueNotSupported"),
        ({"type": "string", "maxLength": 1}, "bb", "FieldValueTooLong"),
        ({"type": "array", "maxItems": 0, "items": {"type": "string"}}, ["a"], "FieldValueTooMany"),
        ({"type": "integer", "minimum": 2}, 1, "FieldValueInvalid"),
        ({"type": "string", "format": "date"}, "x", "FieldValueTypeInvalid"),
        (
            {"type": "array", "x-kubernetes-list-type": "set", "items": {}},
            [1, 1],
            "FieldValueDuplicate",
        ),
    ],
)
def test_violation_reasons(prop: dict[str, Any], value: Any, reason: str) -> None:
    [violation] = schema.validate({"x": value}, obj_schema(x=prop))
    assert violation.reason == reason
    assert violation.field == ("x[1]" if reason == "FieldValueDuplicate" else "x")


def test_validate_nested_arrays_of_objects() -> None:
    tree = obj_schema(
        spec=obj_schema(
            ports={
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["port"],
                    "properties": {"port": {"type": "integer", "maximum": 65535}},
                },
            }
        )
    )
    obj = {"spec": {"ports": [{"port": 80}, {}, {"port": 70000}]}}
    assert errors(tree, obj) == [
        "spec.ports.1.port: Required value",
        "spec.ports.2.port: Invalid value: 70000: spec.ports.2.port in body should be less than or "
        "equal to 65535",
    ]


QUANTITY = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True,
            "pattern": "^[0-9]+[KMG]?$"}
ONE_OF_AB = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
             "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}


@pytest.mark.parametrize(
    ("prop", "value", "expected"),
    [
        (QUANTITY, 2, []),
        (QUANTITY, "2G", []),
        (QUANTITY, "2x", ["spec.x: Invalid value: \"2x\": spec.x in body should match '^[0-9]+[KMG]?$'"]),
        (QUANTITY, True, ['spec.x: Invalid value: "boolean": spec.x in body must be of type '
                          'integer,string: "boolean"']),
        (
            {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
             "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
            {},
            ['<nil>: Invalid value: "": "spec.x" must validate at least one schema (anyOf)',
             "spec.x.a: Required value"],
        ),
        (ONE_OF_AB, {"b": "1"}, []),
        (ONE_OF_AB, {"a": "1", "b": "1"},
         ['<nil>: Invalid value: "": "spec.x" must validate one and only one schema (oneOf). '
          "Found 2 valid alternatives"]),
        (ONE_OF_AB, {},
         ['<nil>: Invalid value: "": "spec.x" must validate one and only one schema (oneOf). '
          "Found none valid", "spec.x.a: Required value"]),
        ({"type": "string", "allOf": [{"minLength": 2}, {"maxLength": 3}]}, "abcd",
         ["spec.x: Too long: may not be more than 3 bytes",
          '<nil>: Invalid value: "": "spec.x" must validate all the schemas (allOf)']),
        ({"type": "string", "allOf": [{"minLength": 2}, {"enum": ["bb"]}]}, "a",
         ['spec.x: Invalid value: "a": spec.x in body should be at least 2 chars long',
          'spec.x: Unsupported value: "a": supported values: "bb"',
          '<nil>: Invalid value: "": "spec.x" must validate all the schemas (allOf). None validated']),
        ({"type": "string", "not": {"enum": ["root"]}}, "root",
         ['<nil>: Invalid value: "": "spec.x" must not validate the schema (not)']),
        ({"type": "string", "not": {"enum": ["root"]}}, "user", []),
    ],
)
def test_validate_composites(prop: dict[str, Any], value: Any, expected: list[str]) -> None:
    tree = obj_schema(spec=obj_schema(x=prop))
    assert errors(tree, {"spec": {"x": value}}) == expected


def test_composite_violation_is_a_root_field_error() -> None:
    [violation, _] = schema.validate({"x": {}}, obj_schema(x=ONE_OF_AB))
    assert (violation.field, violation.reason) == ("<nil>", "FieldValueInvalid")


def test_embedded_resources_must_name_their_type() -> None:
    embedded = {"type": "object", "x-kubernetes-embedded-resource": True,
                "x-kubernetes-preserve-unknown-fields": True}
    tree = obj_schema(spec=obj_schema(items={"type": "array", "items": embedded}))
    good = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {}}
    assert errors(tree, {"spec": {"items": [good]}}) == []
    assert errors(tree, {"spec": {"items": [good, {"kind": "ConfigMap"}, {"apiVersion": "v1", "kind": ""}]}}) == [
        "spec.items[1].apiVersion: Required value: must not be empty",
        "spec.items[2].kind: Required value: must not be empty",
    ]


def test_validate_without_schema() -> None:
    assert schema.validate({"anything": 1}, None) == []
    assert schema.validate({"anything": 1}, {}) == []


def test_full_pipeline_prune_default_validate() -> None:
    obj = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"replicas": None, "mode": "turbo", "unknown": 1},
    }
    pruned, removed = schema.prune(obj, SPEC_SCHEMA)
    assert removed == ["spec.unknown"]
    defaulted = schema.apply_defaults(pruned, SPEC_SCHEMA)
    assert defaulted["spec"]["replicas"] == 1
    assert errors(SPEC_SCHEMA, defaulted) == [
        'spec.mode: Unsupported value: "turbo": supported values: "fast", "safe"'
    ]


# ---------------------------------------------------------------------------------------------
# Structural checks

BASE = "spec.versions[0].schema.openAPIV3Schema"


@pytest.mark.parametrize(
    ("tree", "expected"),
    [
        (obj_schema(spec=obj_schema(a={"type": "string"})), []),
        ({"type": "object", "x-kubernetes-preserve-unknown-fields": True}, []),
        ({}, [f"{BASE}.type: Required value: must not be empty at the root"]),
        (
            {"type": "array", "items": {"type": "string"}},
            [f'{BASE}.type: Invalid value: "array": must be object at the root'],
        ),
        (
            obj_schema(spec={"properties": {"a": {"type": "string"}}}),
            [
                f"{BASE}.properties[spec].type: Required value: must not be empty for specified object fields"
            ],
        ),
        (obj_schema(spec={"x-kubernetes-preserve-unknown-fields": True}), []),
        (obj_schema(port={"x-kubernetes-int-or-string": True}), []),
        (
            obj_schema(list={"type": "array", "items": {}}),
            [
                f"{BASE}.properties[list].items.type: Required value: must not be empty for specified array items"
            ],
        ),
        (
            obj_schema(list={"type": "array"}),
            [f"{BASE}.properties[list].items: Required value: must be specified"],
        ),
        (
            obj_schema(list={"type": "array", "items": [{"type": "string"}]}),
            [
                f"{BASE}.properties[list].items: Forbidden: items must be a schema object and not an array"
            ],
        ),
        (
            obj_schema(x={"type": "strin"}),
            [
                f'{BASE}.properties[x].type: Unsupported value: "strin": supported values: '
                '"array", "boolean", "integer", "number", "object", "string"'
            ],
        ),
        (
            obj_schema(x={"type": "object", "x-kubernetes-preserve-unknown-fields": False}),
            [
                f"{BASE}.properties[x].x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined"
            ],
        ),
        (
            obj_schema(x={"type": "array", "uniqueItems": True, "items": {"type": "string"}}),
            [
                f"{BASE}.properties[x].uniqueItems: Forbidden: uniqueItems cannot be set to true since "
                "the runtime complexity becomes quadratic"
            ],
        ),
        (
            obj_schema(
                x={
                    "type": "object",
                    "properties": {"a": {"type": "string"}},
                    "additionalProperties": {"type": "string"},
                }
            ),
            [
                f"{BASE}.properties[x].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
            ],
        ),
        (
            obj_schema(x={"type": "object", "additionalProperties": {}}),
            [
                f"{BASE}.properties[x].additionalProperties.type: Required value: must not be empty for specified object fields"
            ],
        ),
        (
            obj_schema(x={"type": "string", "x-kubernetes-embedded-resource": True}),
            [
                f'{BASE}.properties[x].type: Invalid value: "string": must be object if x-kubernetes-embedded-resource is true'
            ],
        ),
        (obj_schema(metadata=obj_schema(name={"type": "string", "maxLength": 10})), []),
        (
            obj_schema(metadata=obj_schema(labels={"type": "object"})),
            [
                f"{BASE}.properties[metadata]: Forbidden: must not specify anything other than name and "
                "generateName, but metadata is implicitly specified"
            ],
        ),
        ("not a schema", [f"{BASE}: Required value: a schema is required"]),
    ],
)
def test_check_structural(tree: Any, expected: list[str]) -> None:
    assert schema.check_structural(tree) == expected


def test_check_structural_custom_path_and_multiple_errors() -> None:
    tree = {"properties": {"a": {}, "b": {"type": "array"}}}
    assert schema.check_structural(tree, path="spec.versions[2].schema.openAPIV3Schema") == [
        "spec.versions[2].schema.openAPIV3Schema.type: Required value: must not be empty at the root",
        "spec.versions[2].schema.openAPIV3Schema.properties[a].type: Required value: "
        "must not be empty for specified object fields",
        "spec.versions[2].schema.openAPIV3Schema.properties[b].items: Required value: must be specified",
    ]
