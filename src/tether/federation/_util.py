"""Small helpers for walking and copying unstructured (JSON-shaped) Kubernetes objects.

Every compiler in this package receives read-only `Mapping`s and must hand back fresh, plain
`dict`/`list` trees that callers may serialise or mutate without aliasing the inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def thaw(value: Any) -> Any:
    """A deep, plain copy: Mappings become dicts and sequences (not strings) become lists."""
    if isinstance(value, Mapping):
        return {str(k): thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


def mapping(value: Any) -> Mapping[str, Any]:
    """`value` if it is a Mapping, else an empty one: absent and malformed read the same."""
    return value if isinstance(value, Mapping) else {}


def items(value: Any) -> Sequence[Any]:
    """`value` if it is a list/tuple, else empty."""
    return value if isinstance(value, (list, tuple)) else ()


def nested(obj: Any, *keys: str) -> Any:
    """obj[k1][k2]... or None when any step is missing or not a Mapping."""
    cur = obj
    for key in keys:
        if not isinstance(cur, Mapping) or key not in cur:
            return None
        cur = cur[key]
    return cur


def string_map(value: Any) -> dict[str, str]:
    """A labels/annotations map; non-string values are skipped, as the API would reject them."""
    return {str(k): v for k, v in mapping(value).items() if isinstance(v, str)}


def as_int(value: Any, default: int = 0) -> int:
    """An integer field; booleans and non-numbers read as `default` (YAML gives us any type)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return value
