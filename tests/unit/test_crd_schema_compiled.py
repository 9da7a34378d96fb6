"""`schema.CompiledSchema` against the reference `prune`/`apply_defaults`/`validate`, side by side.

Schemas: the hub CRDs, the e2e kubectl CRD, every case of test_crd_schema.py and hand-written
edge cases; objects: those cases plus seeded random objects shaped by (and deviating from) each
schema: unknown fields, nulls, wrong types, enum misses, bounds, duplicates.
"""

from __future__ import annotations

import copy
import importlib.util
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.federation.crds import hub_crds
from tether.local import schema
from tether.local.resources import ResourceType

TESTS = Path(__file__).resolve().parents[1]


def _load(path: Path, name: str) -> Any:
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(path.parent))


def _params(function: Any) -> list[Any]:
    return [p.values if hasattr(p, "values") else p for p in function.pytestmark[0].args[1]]


def crd_schemas() -> list[tuple[str, Any]]:
    out = []
    kubectl = _load(TESTS / "e2e" / "test_kubectl_crd.py", "_kubectl_crd_cases")
    for crd in [*hub_crds(), kubectl.crd_manifest("example.com")]:
        for version in crd["spec"]["versions"]:
            out.append((f"{crd['metadata']['name']}/{version['name']}",
                        version["schema"]["openAPIV3Schema"]))
    return out


UNIT = _load(TESTS / "unit" / "test_crd_schema.py", "_crd_schema_cases")

EDGE_SCHEMAS: list[Any] = [
    None,
    {},
    {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
     "properties": {"spec": {"type": "object", "properties": {"a": {"type": "integer", "default": 2}},
                             "x-kubernetes-preserve-unknown-fields": True}}},
    {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "list": {"type": "array", "x-kubernetes-preserve-unknown-fields": True,
                 "items": {"type": "object", "properties": {"a": {"type": "string", "default": "d"}}}},
        "emb": {"type": "object", "x-kubernetes-embedded-resource": True,
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"spec": {"type": "object", "properties": {"n": {"type": "integer"}}}}},
        "emb2": {"type": "object", "x-kubernetes-embedded-resource": True,
                 "properties": {"spec": {"type": "object", "nullable": True}}},
        "ios": {"x-kubernetes-int-or-string": True, "pattern": "^[0-9]+%?$", "maxLength": 4},
        "bad": {"type": "string", "pattern": "([a-z"},
        "n": {"type": "number", "multipleOf": 0.5, "maximum": 10, "exclusiveMaximum": True,
              "minimum": -1, "exclusiveMinimum": True},
        "i32": {"type": "integer", "format": "int32", "minimum": 0, "enum": [1, 2, 3]},
        "set": {"type": "array", "x-kubernetes-list-type": "set", "maxItems": 3, "minItems": 1,
                "items": {"type": "string", "enum": ["a", "b", None], "nullable": True}},
        "map": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
                "items": {"type": "object", "required": ["k"], "properties": {
                    "k": {"type": "string"}, "v": {"type": "integer", "default": 0}}}},
        "free": {"type": "object", "additionalProperties": True},
        "closed": {"type": "object", "additionalProperties": False, "minProperties": 1,
                   "maxProperties": 2},
        "typed": {"type": "object", "additionalProperties": {
            "type": "object", "properties": {"x": {"type": "boolean", "default": False}}}},
        "when": {"type": "string", "format": "date-time", "minLength": 3, "nullable": True,
                 "default": "2020-01-01T00:00:00Z"},
        "nested": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
        "anything": {},
        "nullish": {"type": "object", "nullable": True, "default": {"a": 1},
                    "properties": {"a": {"type": "integer"}}},
    }, "required": ["ios", "missing"]}, "status": {"type": "object"}}},
    # not covered by the compiled form (the reference fails or is odd): left to the reference
    {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "x": {"type": "integer", "format": 32}}}}},
]


def all_schemas() -> list[Any]:
    schemas: list[Any] = [tree for _, tree in crd_schemas()] + EDGE_SCHEMAS
    schemas += [case[0] for case in _params(UNIT.test_prune)]
    schemas += [UNIT.SPEC_SCHEMA]
    schemas += [UNIT.obj_schema(spec=UNIT.obj_schema(x=case[0]))
                for case in _params(UNIT.test_validate_keywords)]
    schemas += [UNIT.obj_schema(spec=UNIT.obj_schema(x=case[0]))
                for case in _params(UNIT.test_violation_reasons)]
    return schemas


# ---------------------------------------------------------------------------------------------
# Objects shaped by a schema


SCALARS: list[Any] = [None, True, False, 0, 1, -3, 2**31, 2.5, 4.0, "", "a", "red", "50%", "10",
                      "2020-01-01T00:00:00Z", "aGVsbG8=", "10.0.0.1", "x" * 70]


def sample(rng: random.Random, tree: Any, depth: int = 0) -> Any:
    if not isinstance(tree, dict) or depth > 6 or rng.random() < 0.08:
        return rng.choice(SCALARS) if rng.random() < 0.7 or depth > 6 else {"u": rng.choice(SCALARS)}
    if rng.random() < 0.05:
        return None
    enum = tree.get("enum")
    if isinstance(enum, list) and enum and rng.random() < 0.7:
        return copy.deepcopy(rng.choice(enum))
    kind = tree.get("type")
    if kind == "object" or "properties" in tree or "additionalProperties" in tree:
        out: dict[str, Any] = {}
        for key, child in (tree.get("properties") or {}).items():
            if rng.random() < 0.7:
                out[key] = sample(rng, child, depth + 1)
        additional = tree.get("additionalProperties")
        for i in range(rng.randrange(3)):
            child = additional if isinstance(additional, dict) else None
            out[f"extra{i}"] = sample(rng, child, depth + 1)
        return out
    if kind == "array" or "items" in tree:
        items = [sample(rng, tree.get("items"), depth + 1) for _ in range(rng.randrange(4))]
        if items and rng.random() < 0.3:
            items.append(copy.deepcopy(items[0]))
        return items
    return rng.choice(SCALARS)


def resource(rng: random.Random, tree: Any) -> dict[str, Any]:
    obj = sample(rng, tree) if isinstance(tree, dict) else {}
    obj = obj if isinstance(obj, dict) else {"spec": obj}
    obj.update({"apiVersion": "example.com/v1", "kind": "Thing",
                "metadata": {"name": "n", "labels": {"a": "b"}}})
    if rng.random() < 0.2:
        obj["metadata"] = rng.choice([None, "m", {"name": "x"}])
    return obj


def objects_for(tree: Any, count: int = 60) -> list[Any]:
    rng = random.Random(repr(tree))
    return [resource(rng, tree) for _ in range(count)]


# ---------------------------------------------------------------------------------------------


def outcome(call: Any) -> Any:
    try:
        return ("ok", call())
    except Exception as exc:  # both sides must fail the same way
        return ("error", type(exc).__name__)


def assert_same(tree: Any, obj: Any) -> None:
    compiled = schema.CompiledSchema(tree)
    before = copy.deepcopy(obj)
    reference = outcome(lambda: schema.prune(obj, tree))
    assert outcome(lambda: compiled.prune(obj)) == reference
    assert obj == before
    if reference[0] != "ok":
        return
    pruned = reference[1][0]
    defaulted = outcome(lambda: schema.apply_defaults(pruned, tree))
    assert outcome(lambda: compiled.apply_defaults(pruned)) == defaulted
    assert outcome(lambda: compiled.apply_defaults(copy.deepcopy(pruned), copy=False)) == defaulted
    for value in (obj, pruned, defaulted[1] if defaulted[0] == "ok" else None):
        assert outcome(lambda v=value: compiled.validate(v)) == outcome(
            lambda v=value: schema.validate(v, tree))


@pytest.mark.parametrize(("name", "tree"), crd_schemas())
def test_crd_schemas_compiled_as_reference(name: str, tree: Any) -> None:
    for obj in objects_for(tree, 150):
        assert_same(tree, obj)


@pytest.mark.parametrize("tree", all_schemas())
def test_schemas_compiled_as_reference(tree: Any) -> None:
    for obj in objects_for(tree):
        assert_same(tree, obj)


@pytest.mark.parametrize("case", _params(UNIT.test_prune))
def test_prune_cases(case: Any) -> None:
    tree, obj, expected, removed = case
    assert schema.CompiledSchema(tree).prune(obj) == (expected, removed)
    assert_same(tree, obj)


@pytest.mark.parametrize("case", _params(UNIT.test_validate_keywords))
def test_validate_cases(case: Any) -> None:
    prop, value, expected = case
    tree = UNIT.obj_schema(spec=UNIT.obj_schema(x=prop))
    violations = schema.CompiledSchema(tree).validate({"spec": {"x": value}})
    assert [str(v) for v in violations] == expected
    assert_same(tree, {"spec": {"x": value}})


def test_hub_crds_reject_and_default_like_the_reference() -> None:
    trees = dict(crd_schemas())
    work = trees["works.work.tether.io/v1alpha1"]
    obj = {"apiVersion": "work.tether.io/v1alpha1", "kind": "Work", "metadata": {"name": "w"},
           "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                                                "metadata": {"name": "c"}, "data": {"a": "b"}}]},
                    "bogus": 1},
           "status": {"conditions": [{"type": "Applied", "status": "Maybe"}]}}
    assert_same(work, obj)
    pruned, removed = schema.CompiledSchema(work).prune(obj)
    assert removed == ["spec.bogus"]
    assert pruned["spec"]["workload"]["manifests"][0]["data"] == {"a": "b"}
    assert schema.CompiledSchema(work).validate(pruned) == schema.validate(pruned, work)
    assert schema.validate(pruned, work)  # the bad condition status is reported


def test_non_object_schemas_fall_back_to_the_reference() -> None:
    tree = {"type": "object", "properties": {"spec": "not a schema"}}
    assert outcome(lambda: schema.CompiledSchema(tree).prune({"spec": {}})) == outcome(
        lambda: schema.prune({"spec": {}}, tree))


def test_resource_types_compile_once() -> None:
    tree = UNIT.SPEC_SCHEMA
    rt = ResourceType(group="g", version="v1", plural="ps", singular="p", kind="P",
                      namespaced=True, crd=True, schema=tree)
    assert rt.compiled_schema is rt.compiled_schema
    assert rt.compiled_schema.schema is tree
