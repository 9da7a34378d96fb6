"""Small helpers for walking and copying unstructured (JSON-shaped) Kubernetes objects.

Every compiler in this package receives read-only `Mapping`s and must hand back fresh, plain
`dict`/`list` trees that callers may serialise or mutate without aliasing the inputs.
(`start_in` is the odd one out: starting a watch in a controller's TaskGroup.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

_SCALARS = (str, int, float, bool, type(None))


def thaw(value: Any) -> Any:
    """A deep, plain copy: Mappings become dicts and sequences (not strings) become lists."""
    # concrete types first: an isinstance check against the Mapping ABC costs several times
    # more, and copies of whole objects make many of them
    if isinstance(value, _SCALARS):
        return value
    if isinstance(value, dict | Mapping):
        return {k if isinstance(k, str) else str(k): thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


def mapping(value: Any) -> Mapping[str, Any]:
    """`value` if it is a Mapping, else an empty one: absent and malformed read the same."""
    return value if isinstance(value, dict | Mapping) else {}


def items(value: Any) -> Sequence[Any]:
    """`value` if it is a list/tuple, else empty."""
    return value if isinstance(value, (list, tuple)) else ()


def nested(obj: Any, *keys: str) -> Any:
    """obj[k1][k2]... or None when any step is missing or not a Mapping."""
    cur = obj
    for key in keys:
        if not isinstance(cur, dict | Mapping) or key not in cur:
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


def start_in(group: asyncio.TaskGroup, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """`group.create_task(coro)`, or, once the group is shutting down (a watch asked for by an
    event or reconcile still finishing while the controller stops), the cancellation the caller
    is about to get anyway: neither a RuntimeError logged as a failure nor a leaked coroutine."""
    try:
        return group.create_task(coro)
    except RuntimeError:
        coro.close()
        raise asyncio.CancelledError from None
