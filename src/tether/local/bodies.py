"""Request bodies (JSON, YAML, Kubernetes protobuf) into plain objects, within limits.

A decoded body holds only what JSON can: dicts with string keys, lists, strings, finite numbers,
booleans and null, nested at most MAX_NESTING_DEPTH containers deep. Anything else is a 400
BadRequest (an ApiError), never an exception the server did not expect:

- JSON: NaN and Infinity (which Python's parser accepts and Go's refuses) are refused.
- YAML: parsed with the C loader when PyYAML has it; aliases are expanded into separate copies
  within MAX_YAML_EXPANDED_BYTES (an alias bomb is refused, a self-referencing alias is refused
  by the depth bound), timestamps stay strings and other keys become strings, as the Go YAML to
  JSON conversion does; `!!set`, `!!omap` and `!!pairs` have no JSON form and are refused.
- Protobuf: `tether.local.protobuf` decodes; its embedded JSON (managedFields) is bounded too.

Keys that appear twice in one object are reported as `duplicate field "spec.replicas"` paths
(the last one wins, as in Go), for fieldValidation to warn or refuse.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import yaml

from tether.local.errors import ApiError, bad_request
from tether.local.limits import MAX_NESTING_DEPTH, MAX_YAML_EXPANDED_BYTES
from tether.objects import jsoncodec

__all__ = ["Decoded", "decode", "decode_json", "decode_json_or_yaml", "decode_yaml", "field_path"]

JSON_TYPES = ("", "application/json", "*/*", "text/plain")
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")
PROTOBUF_TYPE = "application/vnd.kubernetes.protobuf"


@dataclass(frozen=True)
class Decoded:
    value: Any
    duplicates: tuple[str, ...] = ()  # field paths of keys given more than once


def decode(content_type: str, body: bytes) -> Decoded:
    """A request body by its media type; an empty body is None."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media in JSON_TYPES:
        return decode_json(body)
    if media in YAML_TYPES:
        return decode_yaml(body)
    if media == PROTOBUF_TYPE:
        return _decode_protobuf(body)
    from tether.local.errors import unsupported_media_type

    raise unsupported_media_type(media, ["application/json", "application/yaml", PROTOBUF_TYPE])


def decode_json_or_yaml(body: bytes) -> Decoded:
    """An apply body: clients send JSON (valid YAML), which the far faster JSON parser reads."""
    if not body:
        return Decoded(None)
    try:
        return decode_json(body, what="")
    except ApiError as exc:
        if exc.code != 400 or not exc.message.startswith("json:"):
            raise
    return decode_yaml(body)


# ---------------------------------------------------------------------------------------------
# JSON


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number {text} is out of range")
    return value


def decode_json(body: bytes, *, what: str = "the body of the request") -> Decoded:
    """`what` names the body in messages; empty means "mark the message for a YAML retry"."""
    if not body:
        return Decoded(None)
    fast = _decode_plain(body)
    if fast is not None:
        return fast
    found: list[tuple[dict[str, Any], list[str]]] = []

    def pairs_to_dict(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        if len(out) != len(pairs):
            seen: set[str] = set()
            again = [k for k, _ in pairs if k in seen or seen.add(k)]  # type: ignore[func-returns-value]
            found.append((out, sorted(set(again))))
        return out

    try:
        value = json.loads(body, object_pairs_hook=pairs_to_dict, parse_constant=_no_constant,
                           parse_float=_finite_float)
    except RecursionError:
        raise _too_deep(what or "the body of the request") from None
    except (ValueError, UnicodeDecodeError) as exc:
        if not what:
            raise bad_request(f"json: {exc}") from None
        raise bad_request(f"{what} could not be decoded as JSON: {exc}") from None
    # Nesting deeper than the bound needs at least that many brackets: most bodies skip the check.
    if body.count(b"{") + body.count(b"[") > MAX_NESTING_DEPTH:
        if json.detect_encoding(body) in ("utf-8", "utf-8-sig"):
            if _nesting_exceeds(body, MAX_NESTING_DEPTH):
                raise _too_deep(what or "the body of the request")
        elif not found:
            _check_tree(value, {}, what=what or "the body of the request")
    if not found:
        return Decoded(value)
    duplicates = {id(obj): names for obj, names in found}
    dup_paths = _check_tree(value, duplicates, what=what or "the body of the request")
    return Decoded(value, tuple(dup_paths))


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
# Every byte to "0" for a digit and " " otherwise: a run of 20 zeros is a number that may not
# fit 64 bits, which orjson would read as a float.
_DIGITS = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))
_LONG_DIGITS = b"0" * 20


def _decode_plain(body: bytes) -> Decoded | None:
    """The common body (UTF-8, no escapes, no duplicate keys, no huge integers, nested within
    bounds) decoded by orjson; None sends the body to the standard library's slower parser,
    which finds the duplicates' paths and words the errors. orjson refuses NaN, Infinity and
    numbers that overflow to infinity, as this module does.

    Duplicate keys without a walk of the tree: without a backslash every string is written
    literally, so a colon is either in a string or after a key. orjson's compact re-encoding
    of the value writes the strings and keys it kept, each with its colons: as many colons as
    the body exactly when no key came twice (a dropped duplicate takes its own colon along)."""
    if b"\\" in body or _LONG_DIGITS in body.translate(_DIGITS):
        return None
    ok, value = jsoncodec.try_decode(body)
    if not ok:
        return None
    if body.count(b"{") + body.count(b"[") > MAX_NESTING_DEPTH and _nesting_exceeds(body, MAX_NESTING_DEPTH):
        return None
    if jsoncodec.encode(value).count(b":") != body.count(b":"):
        return None
    return Decoded(value)


_ALL_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def _nesting_exceeds(body: bytes, limit: int) -> bool:
    """Whether valid JSON text nests deeper than `limit`, from its bytes at C speed (a walk of
    the decoded tree costs seconds for a 3 MiB body of small arrays): without strings, only
    brackets are left, and each pass of removing adjacent `[]` pairs peels exactly one level."""
    brackets = _JSON_STRING.sub(b"", body).translate(_ALL_BRACKETS, _NOT_BRACKETS)
    for _ in range(limit):
        if not brackets:
            return False
        brackets = brackets.replace(b"[]", b"")
    return bool(brackets)


def _too_deep(what: str) -> ApiError:
    return bad_request(f"{what} nests objects and arrays deeper than {MAX_NESTING_DEPTH} levels")


def _check_tree(value: Any, duplicates: dict[int, list[str]], *, what: str) -> list[str]:
    """Check the depth of a decoded JSON tree; return the paths of duplicated keys."""
    paths: list[str] = []
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 1, ())]
    while stack:
        node, depth, path = stack.pop()
        if depth > MAX_NESTING_DEPTH:
            raise _too_deep(what)
        if isinstance(node, dict):
            names = duplicates.get(id(node))
            if names:
                paths.extend(field_path((*path, name)) for name in names)
            for key, child in node.items():
                if isinstance(child, dict | list):
                    stack.append((child, depth + 1, (*path, key) if duplicates else ()))
        elif isinstance(node, list):
            for index, child in enumerate(node):
                if isinstance(child, dict | list):
                    stack.append((child, depth + 1, (*path, index) if duplicates else ()))
    return sorted(paths)


def field_path(path: tuple[str | int, ...]) -> str:
    """Kubernetes' field path rendering: `spec.containers[0].name`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


# ---------------------------------------------------------------------------------------------
# YAML

_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_BaseLoader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc]
    """The safe loader, minus the YAML types JSON cannot hold, noting duplicated keys."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.duplicated: list[tuple[dict[str, Any], list[str]]] = []

    def construct_yaml_map(self, node: Any) -> Any:
        data: dict[Any, Any] = {}
        yield data
        own = [k.value for k, _ in node.value
               if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge"]
        data.update(self.construct_mapping(node))
        if len(set(own)) != len(own):
            seen: set[str] = set()
            again = sorted({k for k in own if k in seen or seen.add(k)})  # type: ignore[func-returns-value]
            self.duplicated.append((data, again))

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[str, Any]:
        # Keys become JSON's strings as they are read: `1` and `true` are two keys, not one.
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
        mapping: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, list | dict):
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, "found an unhashable key",
                    key_node.start_mark)
            mapping[_key(key, "the body of the request")] = self.construct_object(value_node, deep=deep)
        return mapping

    def construct_undefined(self, node: Any) -> Any:
        raise yaml.constructor.ConstructorError(
            None, None, f"the YAML tag {node.tag} has no JSON form", node.start_mark)


def _as_text(loader: Any, node: Any) -> Any:
    return loader.construct_scalar(node)


def _binary_text(loader: Any, node: Any) -> Any:
    # Go's YAML->JSON conversion carries !!binary on as its base64 text.
    return "".join(str(loader.construct_scalar(node)).split())


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_yaml_map)
_Loader.add_constructor(_TIMESTAMP, _as_text)
_Loader.add_constructor("tag:yaml.org,2002:binary", _binary_text)
for _tag in ("tag:yaml.org,2002:set", "tag:yaml.org,2002:omap", "tag:yaml.org,2002:pairs"):
    _Loader.add_constructor(_tag, _Loader.construct_undefined)
_Loader.add_constructor(None, _Loader.construct_undefined)


def decode_yaml(body: bytes, *, what: str = "the body of the request") -> Decoded:
    if not body:
        return Decoded(None)
    try:
        text = body.decode("utf-8")
        loader = _Loader(text)
        try:
            value = loader.get_single_data()
        finally:
            loader.dispose()
    except RecursionError:
        raise _too_deep(what) from None
    except (yaml.YAMLError, UnicodeDecodeError, ValueError, TypeError, OverflowError) as exc:
        # TypeError: an unhashable key (`? [a]: b`); OverflowError: a float beyond range.
        raise bad_request(f"{what} could not be decoded as YAML: {exc}") from None
    duplicates = {id(obj): names for obj, names in loader.duplicated}
    expanded, dup_paths = _expand(value, duplicates, what=what)
    return Decoded(expanded, tuple(dup_paths))


def _key(key: Any, what: str) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float) and math.isfinite(key):
        return json.dumps(key)
    raise bad_request(f"{what} could not be decoded as YAML: the key {key!r} has no JSON form")


def _expand(value: Any, duplicates: dict[int, list[str]], *, what: str) -> tuple[Any, list[str]]:
    """A JSON-only copy of a loaded YAML tree: shared (aliased) parts become separate copies.

    Bounded twice: the copy's JSON size (MAX_YAML_EXPANDED_BYTES, against alias bombs) and its
    depth (MAX_NESTING_DEPTH, which also ends a self-referencing alias)."""
    budget = MAX_YAML_EXPANDED_BYTES
    paths: list[str] = []
    root: list[Any] = [None]
    # (source node, container to put the copy in, key or index there, depth, path)
    stack: list[tuple[Any, Any, Any, int, tuple[str | int, ...]]] = [(value, root, 0, 1, ())]
    while stack:
        node, parent, slot, depth, path = stack.pop()
        if isinstance(node, dict):
            if depth > MAX_NESTING_DEPTH:
                raise _too_deep(what)
            copy: Any = {}
            budget -= 2
            names = duplicates.get(id(node))
            if names:
                paths.extend(field_path((*path, name)) for name in names)
            for key, child in node.items():
                name = _key(key, what)
                budget -= len(name) + 3
                copy[name] = None
                stack.append((child, copy, name, depth + 1, (*path, name) if duplicates else ()))
        elif isinstance(node, list):
            if depth > MAX_NESTING_DEPTH:
                raise _too_deep(what)
            copy = [None] * len(node)
            budget -= 2 + len(node)
            for index, child in enumerate(node):
                stack.append((child, copy, index, depth + 1, (*path, index) if duplicates else ()))
        elif isinstance(node, str):
            copy = node
            budget -= len(node) + 2
        elif node is None or isinstance(node, bool | int):
            copy = node
            budget -= 5
        elif isinstance(node, float):
            if not math.isfinite(node):
                raise bad_request(f"{what} could not be decoded as YAML: {node} is not a JSON number")
            copy = node
            budget -= 8
        else:
            raise bad_request(f"{what} could not be decoded as YAML: a {type(node).__name__} "
                              "has no JSON form")
        if budget < 0:
            raise bad_request(f"{what} could not be decoded as YAML: its aliases expand to more "
                              f"than {MAX_YAML_EXPANDED_BYTES} bytes")
        parent[slot] = copy
    return root[0], sorted(paths)


# ---------------------------------------------------------------------------------------------
# Protobuf


def _decode_protobuf(body: bytes) -> Decoded:
    from tether.local import protobuf

    try:
        value = protobuf.decode_k8s_protobuf(body)
    except protobuf.ProtobufError as exc:
        raise ApiError(415, "UnsupportedMediaType",
                       f"the protobuf body could not be decoded: {exc}") from None
    except RecursionError:
        raise _too_deep("the body of the request") from None
    _check_tree(value, {}, what="the body of the request")
    return Decoded(value)

