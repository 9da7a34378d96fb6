"""JSON Pointer (RFC 6901) and JSON Patch (RFC 6902): the one implementation in tether.

- `apply_json_patch(doc, ops)`: a whole `application/json-patch+json` patch. Operations apply in
  order to a deep copy; the first failing operation aborts the whole patch, so the caller's
  document is never half-patched.
- `get(doc, path)`, `apply_operation(doc, op, path, value)`, `escape(token)`: single pointer
  operations, for the federation's overrides (KubeFed `clusterOverrides`, Karmada overriders).

Strict as evanphx/json-patch: `replace` and `remove` need an existing target, `add` an existing
parent. Every failure is a `PatchError` whose message is written for the end user.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any


class PatchError(Exception):
    """A bad or unappliable patch; `path` is the pointer involved, when there is one."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.path = path


_Op = Callable[[Any, dict[str, Any], int], Any]


def apply_json_patch(doc: Any, operations: Any) -> Any:
    """Return `doc` with the RFC 6902 `operations` applied; `doc` is left untouched."""
    if not isinstance(operations, list):
        raise PatchError("json patch must be a list of operations")
    result = copy.deepcopy(doc)
    for index, operation in enumerate(operations):
        if not isinstance(operation, dict):
            raise PatchError(f"json patch operation {index} is not an object")
        name = operation.get("op")
        handler = _OPERATIONS.get(name) if isinstance(name, str) else None
        if handler is None:
            raise PatchError(f"json patch operation {index}: unknown op {name!r}")
        result = handler(result, operation, index)
    return result


def json_equal(a: Any, b: Any) -> bool:
    """Equality in the JSON sense: unlike Python's ==, true is not 1 and 1 is 1.0."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def parse_pointer(pointer: Any) -> list[str]:
    """Split a JSON Pointer (RFC 6901) into unescaped reference tokens."""
    if not isinstance(pointer, str):
        raise PatchError(f"path {pointer!r} is not a string")
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f'path "{pointer}" must start with "/"')
    tokens = pointer[1:].split("/")
    for token in tokens:
        if "~" in token.replace("~0", "").replace("~1", ""):
            raise PatchError(f'path "{pointer}": invalid escape in reference token "{token}"', pointer)
    # ~1 must be decoded before ~0, else "~01" would wrongly become "/".
    return [token.replace("~1", "/").replace("~0", "~") for token in tokens]


def escape(token: str) -> str:
    """One reference token, escaped for use in a pointer (`~` -> `~0`, `/` -> `~1`)."""
    return token.replace("~", "~0").replace("/", "~1")


def get(doc: Any, path: str) -> Any:
    """The value at `path`; PatchError when it does not exist."""
    try:
        return _resolve(doc, parse_pointer(path), path)
    except PatchError as err:
        raise PatchError(err.message, path) from None


SINGLE_OPERATIONS = ("add", "remove", "replace")


def apply_operation(doc: Any, op: str, path: str, value: Any = None) -> Any:
    """Apply one add/remove/replace to `doc` in place (containers are mutated) and return the
    document, which is a new value only when `path` is "" (the whole document)."""
    try:
        if op == "add":
            return _add(doc, path, value)
        if op == "remove":
            return _remove(doc, path)[0]
        if op == "replace":
            _resolve(doc, parse_pointer(path), path)  # the target must exist
            return _add(_remove(doc, path)[0], path, value) if path else value
    except PatchError as err:
        raise PatchError(err.message, path) from None
    raise PatchError(f"unsupported operation {op!r} (want add, remove or replace)", path)


def _string(operation: dict[str, Any], member: str, index: int) -> str:
    if member not in operation:
        raise PatchError(f'json patch operation {index} ({operation["op"]}) is missing "{member}"')
    value = operation[member]
    if not isinstance(value, str):
        raise PatchError(f'json patch operation {index}: "{member}" must be a string')
    return value


def _value(operation: dict[str, Any], index: int) -> Any:
    if "value" not in operation:  # null is a valid value, so test presence, not truth
        raise PatchError(f'json patch operation {index} ({operation["op"]}) is missing "value"')
    return copy.deepcopy(operation["value"])


def _array_index(token: str, length: int, *, path: str, allow_end: bool) -> int:
    # RFC 6901: decimal digits without leading zeros; "-" only where appending makes sense.
    if token == "-" and allow_end:
        return length
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise PatchError(f'path "{path}": "{token}" is not a valid array index')
    position = int(token)
    limit = length if allow_end else length - 1
    if position > limit:
        raise PatchError(f'path "{path}": index {position} is out of bounds')
    return position


def _resolve(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f'path "{path}" does not exist')
            node = node[token]
        elif isinstance(node, list):
            node = node[_array_index(token, len(node), path=path, allow_end=False)]
        else:
            raise PatchError(f'path "{path}" does not exist')
    return node


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    tokens = parse_pointer(path)
    container = _resolve(doc, tokens[:-1], path)
    if not isinstance(container, dict | list):
        raise PatchError(f'path "{path}" does not exist')
    return container, tokens[-1]


def _add(doc: Any, path: str, value: Any) -> Any:
    if path == "":
        return value
    container, token = _parent(doc, path)
    if isinstance(container, dict):
        container[token] = value
    else:
        container.insert(_array_index(token, len(container), path=path, allow_end=True), value)
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    """Remove the value at `path`; return the new document and the removed value."""
    if path == "":
        raise PatchError("cannot remove the whole document")
    container, token = _parent(doc, path)
    if isinstance(container, dict):
        if token not in container:
            raise PatchError(f'path "{path}" does not exist')
        return doc, container.pop(token)
    return doc, container.pop(_array_index(token, len(container), path=path, allow_end=False))


def _op_add(doc: Any, operation: dict[str, Any], index: int) -> Any:
    return _add(doc, _string(operation, "path", index), _value(operation, index))


def _op_remove(doc: Any, operation: dict[str, Any], index: int) -> Any:
    return _remove(doc, _string(operation, "path", index))[0]


def _op_replace(doc: Any, operation: dict[str, Any], index: int) -> Any:
    path = _string(operation, "path", index)
    value = _value(operation, index)
    doc, _ = _remove(doc, path) if path else (doc, None)
    return _add(doc, path, value)


def _op_move(doc: Any, operation: dict[str, Any], index: int) -> Any:
    source = _string(operation, "from", index)
    path = _string(operation, "path", index)
    if path.startswith(source + "/"):
        raise PatchError(f'json patch operation {index}: cannot move "{source}" into itself')
    if source == path:
        _resolve(doc, parse_pointer(source), source)  # still must exist
        return doc
    doc, value = _remove(doc, source)
    return _add(doc, path, value)


def _op_copy(doc: Any, operation: dict[str, Any], index: int) -> Any:
    source = _string(operation, "from", index)
    value = _resolve(doc, parse_pointer(source), source)
    return _add(doc, _string(operation, "path", index), copy.deepcopy(value))


def _op_test(doc: Any, operation: dict[str, Any], index: int) -> Any:
    path = _string(operation, "path", index)
    expected = _value(operation, index)
    actual = _resolve(doc, parse_pointer(path), path)
    if not json_equal(actual, expected):
        raise PatchError(
            f'json patch test operation {index} failed: "{path}" is {actual!r}, expected {expected!r}'
        )
    return doc


_OPERATIONS: dict[str, _Op] = {
    "add": _op_add,
    "remove": _op_remove,
    "replace": _op_replace,
    "move": _op_move,
    "copy": _op_copy,
    "test": _op_test,
}
