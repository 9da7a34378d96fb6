"""RFC 6901 JSON pointers and the RFC 6902 add/remove/replace operations.

Both dialects express per-cluster differences as JSON-patch-like operations (KubeFed's
`clusterOverrides`, Karmada's `plaintext`, and the patches Karmada's other overriders are built
from), so one strict implementation serves both. Strict means what evanphx/json-patch does:
`replace` and `remove` need an existing target, `add` needs an existing parent. Failures raise
`PatchError(path, message)` so callers can name the exact path that broke.
"""

from __future__ import annotations

from typing import Any, Literal

Op = Literal["add", "remove", "replace"]
OPS: tuple[str, ...] = ("add", "remove", "replace")


class PatchError(Exception):
    """An operation that cannot apply; `path` is the pointer as the user wrote it."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def escape(token: str) -> str:
    """One reference token, escaped for use in a pointer (`~` → `~0`, `/` → `~1`)."""
    return token.replace("~", "~0").replace("/", "~1")


def parse(path: str) -> list[str]:
    """The unescaped reference tokens of `path`; "" is the whole document."""
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(path, "a JSON pointer must be empty or start with '/'")
    tokens = path[1:].split("/")
    for token in tokens:
        rest = token.replace("~0", "").replace("~1", "")
        if "~" in rest:
            raise PatchError(path, f"invalid escape in reference token {token!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in tokens]


def _index(path: str, token: str, length: int, *, allow_end: bool) -> int:
    # RFC 6901: array indices are decimal without leading zeros; "-" is one past the end.
    if token == "-" and allow_end:
        return length
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise PatchError(path, f"{token!r} is not an array index")
    index = int(token)
    limit = length if allow_end else length - 1
    if index > limit:
        raise PatchError(path, f"array index {index} out of range (length {length})")
    return index


def get(doc: Any, path: str) -> Any:
    """The value at `path`; raises PatchError when it does not exist."""
    cur = doc
    for token in parse(path):
        if isinstance(cur, dict):
            if token not in cur:
                raise PatchError(path, f"key {token!r} does not exist")
            cur = cur[token]
        elif isinstance(cur, list):
            cur = cur[_index(path, token, len(cur), allow_end=False)]
        else:
            raise PatchError(path, f"cannot descend into a {_kind(cur)} at {token!r}")
    return cur


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def apply(doc: Any, op: str, path: str, value: Any = None) -> Any:
    """Apply one operation to `doc` in place (containers are mutated) and return the document,
    which is a new value only when `path` is "" (the whole document)."""
    if op not in OPS:
        raise PatchError(path, f"unsupported operation {op!r} (want add, remove or replace)")
    tokens = parse(path)
    if not tokens:
        if op == "remove":
            raise PatchError(path, "cannot remove the whole document")
        return value
    parent_path = "/".join(path.split("/")[:-1])
    try:
        parent = get(doc, parent_path)
    except PatchError as err:
        raise PatchError(path, err.message) from None  # name the pointer the user wrote
    last = tokens[-1]
    if isinstance(parent, dict):
        if op != "add" and last not in parent:
            raise PatchError(path, f"key {last!r} does not exist")
        if op == "remove":
            del parent[last]
        else:
            parent[last] = value
    elif isinstance(parent, list):
        if op == "add":
            parent.insert(_index(path, last, len(parent), allow_end=True), value)
        else:
            index = _index(path, last, len(parent), allow_end=False)
            if op == "remove":
                del parent[index]
            else:
                parent[index] = value
    else:
        raise PatchError(path, f"parent is a {_kind(parent)}, not an object or array")
    return doc
