"""JSON Pointer (RFC 6901) and JSON Patch (RFC 6902): the one implementation in tether.

- `apply_json_patch(doc, ops)`: a whole `application/json-patch+json` patch. Operations apply in
  order to a deep copy; the first failing operation aborts the whole patch, so the caller's
  document is never half-patched.
- `get(doc, path)`, `apply_operation(doc, op, path, value)`, `escape(token)`: single pointer
  operations, for the federation's overrides (KubeFed `clusterOverrides`, Karmada overriders).

Strict as evanphx/json-patch: `replace` and `remove` need an existing target, `add` an existing
parent. Every failure is a `PatchError` whose message is written for the end user.

Bounded as kube-apiserver bounds it: at most MAX_OPERATIONS operations, and `copy` operations
together may duplicate at most MAX_COPY_BYTES (a 1 KB patch of copies that each double the
document would otherwise build gigabytes before any size check could run). The copy is charged as
it is made and stops the moment the budget runs out, and no operation may nest the document
deeper than MAX_DEPTH.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

# kube-apiserver's operation limit, and the size `copy` operations may duplicate (its body limit).
MAX_OPERATIONS: Final = 10_000
MAX_COPY_BYTES: Final = 3 * 1024 * 1024
# Containers nested in a document: the recursion of this and the callers' code stays safe.
MAX_DEPTH: Final = 200


class PatchError(Exception):
    """A bad or unappliable patch; `path` is the pointer involved, when there is one."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.path = path


class PatchTooLarge(PatchError):
    """The patch exceeds a limit on its operations or on what it may build (413)."""


@dataclass
class _Budget:
    copy_bytes: int
    max_depth: int


_Op = Callable[[Any, dict[str, Any], int, _Budget], Any]


def apply_json_patch(doc: Any, operations: Any, *, max_operations: int = MAX_OPERATIONS,
                     max_copy_bytes: int = MAX_COPY_BYTES,
                     max_depth: int = MAX_DEPTH) -> Any:
    """Return `doc` with the RFC 6902 `operations` applied; `doc` is left untouched."""
    if not isinstance(operations, list):
        raise PatchError("json patch must be a list of operations")
    if len(operations) > max_operations:
        raise PatchTooLarge(
            f"The allowed maximum operations in a JSON patch is {max_operations}, got {len(operations)}"
        )
    budget = _Budget(max_copy_bytes, max_depth)
    result = copy.deepcopy(doc)
    for index, operation in enumerate(operations):
        if not isinstance(operation, dict):
            raise PatchError(f"json patch operation {index} is not an object")
        name = operation.get("op")
        handler = _OPERATIONS.get(name) if isinstance(name, str) else None
        if handler is None:
            raise PatchError(f"json patch operation {index}: unknown op {_shown(repr(name))}")
        result = handler(result, operation, index, budget)
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


def json_key(value: Any) -> Any:
    """A hashable stand-in for a JSON value: equal keys exactly when `json_equal` holds, so
    duplicate checks and list merges are one dict lookup instead of a scan."""
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int | float):
        return ("n", value)  # 1 and 1.0 are equal and hash alike
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, dict):
        return ("d", frozenset((k, json_key(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("l", tuple(json_key(v) for v in value))
    if value is None:
        return ("z",)
    return ("?", id(value))


def _shown(value: Any, limit: int = 200) -> str:
    """A value for an error message (strings as they are, the rest as repr), cut short:
    messages must not grow with the document."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def parse_pointer(pointer: Any) -> list[str]:
    """Split a JSON Pointer (RFC 6901) into unescaped reference tokens."""
    if not isinstance(pointer, str):
        raise PatchError(f"path {_shown(repr(pointer))} is not a string")
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f'path "{_shown(pointer)}" must start with "/"')
    tokens = pointer[1:].split("/")
    for token in tokens:
        if "~" in token.replace("~0", "").replace("~1", ""):
            raise PatchError(f'path "{_shown(pointer)}": invalid escape in reference token "{_shown(token)}"',
                             pointer)
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


# What one node of a copied value costs against the copy budget besides its text: copying many
# tiny values costs Python far more per byte than copying one long string.
_NODE_COST = 16


def _copy_within(value: Any, budget: _Budget, room: int, where: str, *, build: bool = True) -> Any:
    """A deep copy of `value` (or, without `build`, just the walk a copy would take), charged to
    the copy budget as it goes, refused as soon as the budget runs out or the value would nest
    deeper than `room` more levels."""
    if isinstance(value, dict):
        if room <= 0:
            raise _too_deep(budget, where)
        budget.copy_bytes -= _NODE_COST + sum(len(k) for k in value)
        _check_budget(budget, where)
        items = {k: _copy_within(v, budget, room - 1, where, build=build) for k, v in value.items()}
        return items if build else None
    if isinstance(value, list):
        if room <= 0:
            raise _too_deep(budget, where)
        budget.copy_bytes -= _NODE_COST + len(value)
        _check_budget(budget, where)
        elements = [_copy_within(v, budget, room - 1, where, build=build) for v in value]
        return elements if build else None
    budget.copy_bytes -= _NODE_COST + (len(value) if isinstance(value, str) else 0)
    _check_budget(budget, where)
    return value  # JSON scalars are immutable


def _depth_within(value: Any, room: int) -> bool:
    """Whether `value` nests at most `room` containers deep (stops at the first that does not)."""
    if isinstance(value, dict):
        return room > 0 and all(_depth_within(v, room - 1) for v in value.values())
    if isinstance(value, list):
        return room > 0 and all(_depth_within(v, room - 1) for v in value)
    return True


def _check_budget(budget: _Budget, where: str) -> None:
    if budget.copy_bytes < 0:
        raise PatchTooLarge(
            f"{where}: the JSON patch copies (or moves deeper) more than {MAX_COPY_BYTES} "
            "bytes in total (the accumulated copy size limit)"
        )


def _too_deep(budget: _Budget, where: str) -> PatchError:
    return PatchError(f"{where} would nest the object more than {budget.max_depth} levels deep")


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
    if not token.isascii() or not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise PatchError(f'path "{_shown(path)}": "{_shown(token)}" is not a valid array index')
    position = int(token) if len(token) <= 18 else length + 1
    limit = length if allow_end else length - 1
    if position > limit:
        raise PatchError(f'path "{_shown(path)}": index {_shown(token)} is out of bounds')
    return position


def _resolve(doc: Any, tokens: list[str], path: str) -> Any:
    node = doc
    for token in tokens:
        if isinstance(node, dict):
            if token not in node:
                raise PatchError(f'path "{_shown(path)}" does not exist')
            node = node[token]
        elif isinstance(node, list):
            node = node[_array_index(token, len(node), path=path, allow_end=False)]
        else:
            raise PatchError(f'path "{_shown(path)}" does not exist')
    return node


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    tokens = parse_pointer(path)
    container = _resolve(doc, tokens[:-1], path)
    if not isinstance(container, dict | list):
        raise PatchError(f'path "{_shown(path)}" does not exist')
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
            raise PatchError(f'path "{_shown(path)}" does not exist')
        return doc, container.pop(token)
    return doc, container.pop(_array_index(token, len(container), path=path, allow_end=False))


def _room(path: str, budget: _Budget) -> int:
    """How many levels a value placed at `path` may nest: its parents take the rest."""
    return budget.max_depth - len(parse_pointer(path))


def _op_add(doc: Any, operation: dict[str, Any], index: int, budget: _Budget) -> Any:
    path = _string(operation, "path", index)
    value = _value(operation, index)
    if not _depth_within(value, _room(path, budget)):
        raise _too_deep(budget, f"json patch operation {index}")
    return _add(doc, path, value)


def _op_remove(doc: Any, operation: dict[str, Any], index: int, budget: _Budget) -> Any:
    return _remove(doc, _string(operation, "path", index))[0]


def _op_replace(doc: Any, operation: dict[str, Any], index: int, budget: _Budget) -> Any:
    path = _string(operation, "path", index)
    value = _value(operation, index)
    if not _depth_within(value, _room(path, budget)):
        raise _too_deep(budget, f"json patch operation {index}")
    doc, _ = _remove(doc, path) if path else (doc, None)
    return _add(doc, path, value)


def _op_move(doc: Any, operation: dict[str, Any], index: int, budget: _Budget) -> Any:
    source = _string(operation, "from", index)
    path = _string(operation, "path", index)
    if path.startswith(source + "/"):
        raise PatchError(f'json patch operation {index}: cannot move "{_shown(source)}" into itself')
    if source == path:
        _resolve(doc, parse_pointer(source), source)  # still must exist
        return doc
    if len(parse_pointer(path)) > len(parse_pointer(source)):
        # Deeper than it was (a move to the same depth or above cannot nest deeper): measured.
        # The walk is charged like a copy: moving a large subtree deeper over and over is work.
        moved = _resolve(doc, parse_pointer(source), source)
        _copy_within(moved, budget, _room(path, budget), f"json patch operation {index}", build=False)
    doc, value = _remove(doc, source)
    return _add(doc, path, value)


def _op_copy(doc: Any, operation: dict[str, Any], index: int, budget: _Budget) -> Any:
    source = _string(operation, "from", index)
    path = _string(operation, "path", index)
    value = _resolve(doc, parse_pointer(source), source)
    return _add(doc, path, _copy_within(value, budget, _room(path, budget), f"json patch operation {index}"))


def _op_test(doc: Any, operation: dict[str, Any], index: int, budget: _Budget) -> Any:
    path = _string(operation, "path", index)
    expected = _value(operation, index)
    actual = _resolve(doc, parse_pointer(path), path)
    if not json_equal(actual, expected):
        raise PatchError(
            f'json patch test operation {index} failed: "{_shown(path)}" is {_shown(repr(actual))}, '
            f"expected {_shown(repr(expected))}"
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
