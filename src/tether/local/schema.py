"""Structural schemas of CustomResourceDefinitions (apiextensions.k8s.io/v1 openAPIV3Schema).

Pure: no I/O, and no argument is mutated. The server applies these to a custom resource on
every write, in the real server's order:

1. `prune` drops fields the schema does not declare (or reports them for
   `fieldValidation=Strict`),
2. `apply_defaults` fills `default:` values and drops `null`s the schema does not allow,
3. `validate` returns the violations for a 422 Invalid, worded as the real server words them.

`check_structural` holds the checks a CRD's schema must pass before the CRD is created.

`pattern`s are RE2 expressions, as in Go (which kube-apiserver is written in): matching takes
time linear in the input whatever the pattern, so no pattern can freeze the server, and a
pattern RE2 cannot compile (lookarounds, backreferences) is refused when the CRD is created.

Paths in violations follow upstream: object keys and array indexes are dot-joined
(`spec.ports.0.port`) because that is how the OpenAPI validator names them, except for
`x-kubernetes-list-type` duplicates, which use `spec.items[1]` like native validation.
"""

from __future__ import annotations

import base64
import binascii
import functools
import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import re2

from tether.objects import jsonpath
from tether.objects.jsonpatch import json_key

__all__ = [
    "Violation",
    "apply_defaults",
    "check_structural",
    "prune",
    "validate",
]

Schema = Mapping[str, Any]
Path = tuple[str | int, ...]

PRESERVE = "x-kubernetes-preserve-unknown-fields"
INT_OR_STRING = "x-kubernetes-int-or-string"
EMBEDDED = "x-kubernetes-embedded-resource"
LIST_TYPE = "x-kubernetes-list-type"
LIST_MAP_KEYS = "x-kubernetes-list-map-keys"
_META_FIELDS = frozenset({"apiVersion", "kind", "metadata"})
_TYPES = ("array", "boolean", "integer", "number", "object", "string")
ROOT_FIELD = "<nil>"  # how kube-apiserver names the field of an error with no path


@dataclass(frozen=True)
class Violation:
    """One field error; `reason` is the metav1 CauseType, `message` the text after the field."""

    field: str
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def _copy(value: Any) -> Any:
    """A deep copy made of plain dicts and lists, so callers' objects are never mutated."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or kind is float or value is None:
        return value  # the common cases first: no ABC check
    if kind is dict:
        return {str(k): _copy(v) for k, v in value.items()}
    if kind is list:
        return [_copy(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_copy(v) for v in value]
    return value


def _sub(schema: Schema, key: str) -> Schema | None:
    child = schema.get(key)
    return child if isinstance(child, Mapping) else None


# ---------------------------------------------------------------------------------------------
# Defaulting


def apply_defaults(obj: Any, schema: Schema | None, *, copy: bool = True) -> Any:
    """A copy of `obj` with schema defaults applied, recursively (defaults are defaulted too).

    A `null` for a property that is not `nullable` is replaced by its default, or dropped when
    it has none, as the real server does before defaulting. `copy=False` defaults `obj` itself
    (plain dicts and lists only, e.g. what `prune` returned), which the caller must own.
    """
    return _default(_copy(obj) if copy else obj, schema)


def _default(value: Any, schema: Schema | None) -> Any:
    if not schema:
        return value
    if isinstance(value, dict):
        props = _sub(schema, "properties") or {}
        for key, prop in props.items():
            has_default = prop.get("default") is not None
            if key in value and value[key] is None and not prop.get("nullable"):
                if has_default:
                    value[key] = _copy(prop["default"])
                else:
                    del value[key]
            elif key not in value and has_default:
                value[key] = _copy(prop["default"])
        additional = _sub(schema, "additionalProperties")
        for key in value:
            value[key] = _default(value[key], props.get(key, additional))
    elif isinstance(value, list):
        items = _sub(schema, "items")
        return [_default(v, items) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# Pruning


def prune(obj: Any, schema: Schema | None, *, copy: bool = True) -> tuple[Any, list[str]]:
    """A copy of `obj` without undeclared fields, and the paths removed (`spec.foo`).

    The top level is treated as an embedded resource: apiVersion, kind and metadata stay.
    Below `x-kubernetes-preserve-unknown-fields: true`, unknown fields stay but declared
    children are still pruned. `additionalProperties: true` keeps the whole value.
    `copy=False` saves the deep copy: the result may then share the values it keeps whole
    (preserved subtrees, metadata) with `obj`, which the caller must own.
    """
    removed: list[str] = []
    root = dict(schema or {})
    root[EMBEDDED] = True
    return _prune(_copy(obj) if copy else obj, root, (), removed), removed


def _is_meta(key: str, value: Any) -> bool:
    if key in ("apiVersion", "kind"):
        return isinstance(value, str)
    return key == "metadata" and isinstance(value, dict)


def _prune(value: Any, schema: Schema | None, path: Path, removed: list[str]) -> Any:
    if schema is not None and schema.get(PRESERVE) is True:
        return _skip_prune(value, schema, path, removed)
    if isinstance(value, dict):
        return _prune_object(value, schema, path, removed)
    if isinstance(value, list):
        items = _sub(schema, "items") if schema is not None else None
        return [_prune(v, items, (*path, i), removed) for i, v in enumerate(value)]
    return value


def _prune_object(
    value: dict[str, Any], schema: Schema | None, path: Path, removed: list[str]
) -> dict[str, Any]:
    props = (_sub(schema, "properties") or {}) if schema is not None else {}
    additional = schema.get("additionalProperties") if schema is not None else None
    embedded = schema is not None and schema.get(EMBEDDED) is True
    out: dict[str, Any] = {}
    for key, child in value.items():
        if embedded and _is_meta(key, child):
            out[key] = child  # embedded metadata is normalised elsewhere, not pruned
        elif key in props:
            out[key] = _prune(child, props[key], (*path, key), removed)
        elif additional is True:
            out[key] = child
        elif isinstance(additional, Mapping):
            out[key] = _prune(child, additional, (*path, key), removed)
        else:
            removed.append(_field_path((*path, key)))
    return out


def _skip_prune(value: Any, schema: Schema, path: Path, removed: list[str]) -> Any:
    """Keep unknown fields, but still prune below the children the schema does declare."""
    if isinstance(value, dict):
        props = _sub(schema, "properties") or {}
        additional = _sub(schema, "additionalProperties")
        embedded = schema.get(EMBEDDED) is True
        out: dict[str, Any] = {}
        for key, child in value.items():
            if embedded and key in _META_FIELDS:
                out[key] = child
            elif key in props:
                out[key] = _prune(child, props[key], (*path, key), removed)
            elif additional is not None:
                out[key] = _prune(child, additional, (*path, key), removed)
            else:
                out[key] = child
        return out
    if isinstance(value, list):
        items = _sub(schema, "items")
        if items is None:
            return value
        return [_skip_prune(v, items, (*path, i), removed) for i, v in enumerate(value)]
    return value


def _field_path(path: Path) -> str:
    """field.Path rendering: `spec.items[0].name`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


# ---------------------------------------------------------------------------------------------
# Validation: message helpers


def _dotted(path: Path) -> str:
    """The OpenAPI validator's naming: `spec.items.0.name`."""
    return ".".join(str(p) for p in path)


def _render(value: Any) -> str:
    """A bad value as field.Error prints it: strings quoted, scalars bare, the rest JSON."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool | int | float):
        return jsonpath.to_text(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _number(value: Any) -> str:
    """A schema bound as Go's %v prints the float64 it is stored as (1, not 1.0)."""
    return jsonpath.to_text(float(value)) if isinstance(value, int | float) else str(value)


class _Collector:
    def __init__(self) -> None:
        self.violations: list[Violation] = []

    def add(self, path: Path | str, reason: str, message: str) -> None:
        field = path if isinstance(path, str) else _dotted(path)
        self.violations.append(Violation(field, reason, message))

    def invalid(self, path: Path, value: Any, detail: str) -> None:
        self.add(path, "FieldValueInvalid", f"Invalid value: {_render(value)}: {detail}")

    def type_invalid(self, path: Path, value: Any, detail: str) -> None:
        self.add(path, "FieldValueTypeInvalid", f"Invalid value: {_render(value)}: {detail}")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    return "object" if isinstance(value, Mapping) else type(value).__name__


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


# ---------------------------------------------------------------------------------------------
# Validation


def validate(obj: Any, schema: Schema | None) -> list[Violation]:
    """Every violation of `schema` in `obj` (prune and default first, as the server does)."""
    errors = _Collector()
    if schema:
        _validate(obj, schema, (), errors)
    return errors.violations


def _validate(value: Any, schema: Schema, path: Path, errors: _Collector) -> None:
    if not _check_type(value, schema, path, errors):
        _check_enum(value, schema, path, errors)
        return
    if value is None:
        return  # an allowed null: nothing else applies
    if isinstance(value, str):
        _check_string(value, schema, path, errors)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(value, schema, path, errors)
    _check_enum(value, schema, path, errors)
    if isinstance(value, list):
        _check_array(value, schema, path, errors)
    elif isinstance(value, Mapping):
        _check_object(value, schema, path, errors)
    if "anyOf" in schema or "oneOf" in schema or "allOf" in schema or "not" in schema:
        _check_composite(value, schema, path, errors)


def _check_type(value: Any, schema: Schema, path: Path, errors: _Collector) -> bool:
    declared = schema.get("type")
    allowed = ["integer", "string"] if schema.get(INT_OR_STRING) else []
    if isinstance(declared, str) and declared:
        allowed = [declared]
    if value is None:
        if schema.get("nullable") or not allowed:
            return True
    else:
        actual = _json_type(value)
        integral_float = isinstance(value, float) and value.is_integer()
        if not allowed or actual in allowed:
            return True
        if actual == "integer" and "number" in allowed:
            return True
        if integral_float and "integer" in allowed:
            return True
    actual = _json_type(value)
    detail = f"{_dotted(path)} in body must be of type {','.join(allowed)}: {json.dumps(actual)}"
    errors.type_invalid(path, actual, detail)
    return False


def _check_enum(value: Any, schema: Schema, path: Path, errors: _Collector) -> None:
    enum = schema.get("enum")
    if not isinstance(enum, list) or any(_json_equal(value, e) for e in enum):
        return
    shown = ", ".join(json.dumps(e if isinstance(e, str) else _render(e)) for e in enum)
    errors.add(
        path,
        "FieldValueNotSupported",
        f"Unsupported value: {_render(value)}: supported values: {shown}",
    )


def _check_string(value: str, schema: Schema, path: Path, errors: _Collector) -> None:
    name = _dotted(path)
    max_length = schema.get("maxLength")
    if isinstance(max_length, int) and len(value) > max_length:
        unit = "byte" if max_length == 1 else "bytes"
        errors.add(path, "FieldValueTooLong", f"Too long: may not be more than {max_length} {unit}")
    min_length = schema.get("minLength")
    if isinstance(min_length, int) and len(value) < min_length:
        errors.invalid(path, value, f"{name} in body should be at least {min_length} chars long")
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        try:
            matched = compile_pattern(pattern).search(value) is not None
        except PatternError as exc:
            detail = f"{name} in body should match '{pattern}, but pattern is invalid: {exc}'"
            errors.invalid(path, value, detail)
        else:
            if not matched:
                errors.invalid(path, value, f"{name} in body should match '{pattern}'")
    fmt = schema.get("format")
    if isinstance(fmt, str) and not _format_ok(fmt, value):
        detail = f"{name} in body must be of type {fmt}: {json.dumps(value, ensure_ascii=False)}"
        errors.type_invalid(path, value, detail)


class PatternError(ValueError):
    """A `pattern` that RE2 (Go's regexp syntax) cannot compile."""


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # the error is the caller's to report, not stderr's


@functools.lru_cache(maxsize=1024)
def compile_pattern(pattern: str) -> Any:
    """A schema `pattern` compiled by RE2: linear-time matching, Go's syntax."""
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        raise PatternError(text) from None


_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})?")
_UUID = re.compile(r"[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")


def _format_ok(fmt: str, value: str) -> bool:
    """The string formats the server checks; unknown formats are accepted, as upstream."""
    try:
        if fmt in ("date-time", "datetime"):
            if not _DATE_TIME.fullmatch(value):
                return False
            datetime.fromisoformat(value[:10] + "T" + value[11:])
        elif fmt == "date":
            date.fromisoformat(value)
            return len(value) == 10
        elif fmt == "byte":
            base64.b64decode(value, validate=True)
        elif fmt == "uuid":
            return _UUID.fullmatch(value) is not None
        elif fmt == "ipv4":
            ipaddress.IPv4Address(value)
        elif fmt == "ipv6":
            ipaddress.IPv6Address(value)
        elif fmt == "cidr":
            ipaddress.ip_network(value, strict=False)
    except (ValueError, binascii.Error):
        return False
    return True


_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def _check_number(value: float, schema: Schema, path: Path, errors: _Collector) -> None:
    name = _dotted(path)
    fmt = schema.get("format")
    if fmt in _INT_RANGES:
        low, high = _INT_RANGES[fmt]
        if not low <= value <= high:
            errors.type_invalid(path, value, f"{name} in body must be of type {fmt}")
    multiple = schema.get("multipleOf")
    if isinstance(multiple, int | float) and multiple > 0 and (value / multiple) % 1 != 0:
        errors.invalid(path, value, f"{name} in body should be a multiple of {_number(multiple)}")
    maximum = schema.get("maximum")
    if isinstance(maximum, int | float):
        if schema.get("exclusiveMaximum") and value >= maximum:
            errors.invalid(path, value, f"{name} in body should be less than {_number(maximum)}")
        elif value > maximum:
            detail = f"{name} in body should be less than or equal to {_number(maximum)}"
            errors.invalid(path, value, detail)
    minimum = schema.get("minimum")
    if isinstance(minimum, int | float):
        if schema.get("exclusiveMinimum") and value <= minimum:
            detail = f"{name} in body should be greater than {_number(minimum)}"
            errors.invalid(path, value, detail)
        elif value < minimum:
            detail = f"{name} in body should be greater than or equal to {_number(minimum)}"
            errors.invalid(path, value, detail)


def _check_array(value: Sequence[Any], schema: Schema, path: Path, errors: _Collector) -> None:
    name = _dotted(path)
    min_items = schema.get("minItems")
    if isinstance(min_items, int) and len(value) < min_items:
        errors.invalid(path, len(value), f"{name} in body should have at least {min_items} items")
    max_items = schema.get("maxItems")
    if isinstance(max_items, int) and len(value) > max_items:
        unit = "item" if max_items == 1 else "items"
        detail = f"Too many: {len(value)}: must have at most {max_items} {unit}"
        errors.add(path, "FieldValueTooMany", detail)
    if schema.get("uniqueItems") and _first_duplicate(value) is not None:
        errors.invalid(path, "", f"{name} in body shouldn't contain duplicates")
    _check_list_type(value, schema, path, errors)
    items = _sub(schema, "items")
    if items:
        for i, item in enumerate(value):
            _validate(item, items, (*path, i), errors)


def _first_duplicate(values: Sequence[Any]) -> int | None:
    seen: set[Any] = set()
    for i, item in enumerate(values):
        key = json_key(item)
        if key in seen:
            return i
        seen.add(key)
    return None


def _check_list_type(value: Sequence[Any], schema: Schema, path: Path, errors: _Collector) -> None:
    """`x-kubernetes-list-type: set|map` forbid duplicate items / duplicate map keys."""
    list_type = schema.get(LIST_TYPE)
    if list_type == "set":
        keys: list[Any] = list(value)
    elif list_type == "map":
        names = schema.get(LIST_MAP_KEYS) or []
        keys = [
            {k: item.get(k) for k in names if k in item} if isinstance(item, Mapping) else item
            for item in value
        ]
    else:
        return
    seen: set[Any] = set()
    for i, key in enumerate(keys):
        identity = json_key(key)
        if identity in seen:
            errors.add(
                _field_path((*path, i)), "FieldValueDuplicate", f"Duplicate value: {_render(key)}"
            )
        seen.add(identity)


def _check_object(value: Mapping[str, Any], schema: Schema, path: Path, errors: _Collector) -> None:
    name = _dotted(path)
    if path and schema.get(EMBEDDED) is True:
        # An embedded object must say what it is, as the server's embedded-resource check does
        # (the top level is the request's own object: its type is checked elsewhere).
        for key in ("apiVersion", "kind"):
            if not value.get(key):
                errors.add(_field_path((*path, key)), "FieldValueRequired", "Required value: must not be empty")
    min_props = schema.get("minProperties")
    if isinstance(min_props, int) and len(value) < min_props:
        detail = f"{name} in body should have at least {min_props} properties"
        errors.invalid(path, len(value), detail)
    max_props = schema.get("maxProperties")
    if isinstance(max_props, int) and len(value) > max_props:
        unit = "item" if max_props == 1 else "items"
        detail = f"Too many: {len(value)}: must have at most {max_props} {unit}"
        errors.add(path, "FieldValueTooMany", detail)
    for key in schema.get("required") or []:
        if key not in value:
            errors.add((*path, key), "FieldValueRequired", "Required value")
    props = _sub(schema, "properties") or {}
    additional = schema.get("additionalProperties")
    for key, child in value.items():
        if key in props:
            if props[key]:
                _validate(child, props[key], (*path, key), errors)
        elif isinstance(additional, Mapping):
            _validate(child, additional, (*path, key), errors)
        elif additional is False:
            detail = f"{_dotted((*path, key))} in body is a forbidden property"
            errors.invalid((*path, key), "", detail)


def _branch(value: Any, branch: Any, path: Path) -> list[Violation]:
    found = _Collector()
    if isinstance(branch, Mapping):
        _validate(value, branch, path, found)
    return found.violations


def _closest(results: list[list[Violation]]) -> list[Violation]:
    """The failing branch with the fewest violations (the first of equals)."""
    return min(results, key=lambda r: len(r))


def _check_composite(value: Any, schema: Schema, path: Path, errors: _Collector) -> None:
    """anyOf / oneOf / allOf / not: value validations over alternatives.

    As kube-apiserver reports them: the composite failure is a root-level error (field `<nil>`,
    the node's dotted path quoted in the message), followed by the errors of the branch that
    came closest (anyOf, oneOf) or of every branch (allOf).
    """
    name = json.dumps(_dotted(path))

    def composite(detail: str) -> None:
        errors.add(ROOT_FIELD, "FieldValueInvalid", f'Invalid value: "": {name} {detail}')

    any_of = schema.get("anyOf")
    if isinstance(any_of, list) and any_of:
        results = [_branch(value, b, path) for b in any_of]
        if all(results):
            composite("must validate at least one schema (anyOf)")
            errors.violations.extend(_closest(results))
    one_of = schema.get("oneOf")
    if isinstance(one_of, list) and one_of:
        results = [_branch(value, b, path) for b in one_of]
        valid = sum(1 for r in results if not r)
        if valid != 1:
            found = "Found none valid" if not valid else f"Found {valid} valid alternatives"
            composite(f"must validate one and only one schema (oneOf). {found}")
            if not valid:
                errors.violations.extend(_closest(results))
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and all_of:
        results = [_branch(value, b, path) for b in all_of]
        failed = [r for r in results if r]
        if failed:
            for result in failed:
                errors.violations.extend(result)
            none = ". None validated" if len(failed) == len(results) else ""
            composite(f"must validate all the schemas (allOf){none}")
    negated = schema.get("not")
    if isinstance(negated, Mapping) and not _branch(value, negated, path):
        composite("must not validate the schema (not)")


# ---------------------------------------------------------------------------------------------
# Structural checks for CRD creation


def check_structural(
    schema: Any, *, path: str = "spec.versions[0].schema.openAPIV3Schema"
) -> list[str]:
    """Why `schema` cannot be a CRD's structural schema; empty when it can.

    `path` is where the schema sits in the CRD, and prefixes every message, e.g.
    `spec.versions[0].schema.openAPIV3Schema.type: Required value: must not be empty at the root`.
    """
    if not isinstance(schema, Mapping):
        return [f"{path}: Required value: a schema is required"]
    errors: list[str] = []
    root_type = schema.get("type")
    if not root_type:
        errors.append(f"{path}.type: Required value: must not be empty at the root")
    elif root_type != "object":
        errors.append(
            f"{path}.type: Invalid value: {_render(root_type)}: must be object at the root"
        )
    metadata = (_sub(schema, "properties") or {}).get("metadata")
    if isinstance(metadata, Mapping) and not _metadata_ok(metadata):
        errors.append(
            f"{path}.properties[metadata]: Forbidden: must not specify anything other than name "
            "and generateName, but metadata is implicitly specified"
        )
    _check_node(schema, path, "root", errors)
    return errors


def _metadata_ok(metadata: Schema) -> bool:
    if set(metadata) - {"type", "properties"} or metadata.get("type") not in (None, "object"):
        return False
    return not set(_sub(metadata, "properties") or {}) - {"name", "generateName"}


_LEVEL_MESSAGES = {
    "item": "must not be empty for specified array items",
    "field": "must not be empty for specified object fields",
}


def _check_node(node: Schema, path: str, level: str, errors: list[str]) -> None:
    type_ = node.get("type")
    if type_ and type_ not in _TYPES:
        supported = ", ".join(f'"{t}"' for t in _TYPES)
        errors.append(
            f"{path}.type: Unsupported value: {_render(type_)}: supported values: {supported}"
        )
    if node.get(PRESERVE) is False:
        errors.append(f"{path}.{PRESERVE}: Invalid value: false: must be true or undefined")
    exempt = node.get(PRESERVE) is True or node.get(INT_OR_STRING) or node.get(EMBEDDED)
    if not type_ and level in _LEVEL_MESSAGES and not exempt:
        errors.append(f"{path}.type: Required value: {_LEVEL_MESSAGES[level]}")
    if node.get(EMBEDDED) and type_ and type_ != "object":
        errors.append(
            f"{path}.type: Invalid value: {_render(type_)}: must be object if {EMBEDDED} is true"
        )
    pattern = node.get("pattern")
    if pattern is not None:
        if not isinstance(pattern, str):
            errors.append(f"{path}.pattern: Invalid value: {_render(pattern)}: must be a string")
        else:
            try:
                compile_pattern(pattern)
            except PatternError as exc:
                errors.append(
                    f"{path}.pattern: Invalid value: {_render(pattern)}: must be a valid regular "
                    f"expression, but isn't: error parsing regexp: {exc}"
                )
    if node.get("uniqueItems") is True:
        errors.append(
            f"{path}.uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime "
            "complexity becomes quadratic"
        )
    _check_children(node, path, type_, errors)


def _check_children(node: Schema, path: str, type_: Any, errors: list[str]) -> None:
    items = node.get("items")
    if isinstance(items, list):
        errors.append(f"{path}.items: Forbidden: items must be a schema object and not an array")
    elif isinstance(items, Mapping):
        _check_node(items, f"{path}.items", "item", errors)
    elif type_ == "array":
        errors.append(f"{path}.items: Required value: must be specified")
    props = _sub(node, "properties") or {}
    for key, child in props.items():
        if isinstance(child, Mapping):
            _check_node(child, f"{path}.properties[{key}]", "field", errors)
    additional = node.get("additionalProperties")
    if additional is not None and props:
        errors.append(
            f"{path}.additionalProperties: Forbidden: "
            "additionalProperties and properties are mutual exclusive"
        )
    if isinstance(additional, Mapping):
        _check_node(additional, f"{path}.additionalProperties", "field", errors)
