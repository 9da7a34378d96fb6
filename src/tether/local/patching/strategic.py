"""Strategic merge patch, as kubectl and the official Python client send it.

A merge patch whose lists can merge: a list with a merge key (containers by name) merges item by
item, and a handful of `$` directives delete, replace, reorder and prune. The schema says which
lists merge; every other list is replaced whole, exactly as with a JSON merge patch.
"""

from __future__ import annotations

import copy
import enum
import json
from typing import Any

from tether.local.patching.errors import PatchError
from tether.local.patching.schema import MergeSchema, merge_schema_for
from tether.objects.jsonpatch import json_key

__all__ = ["MergeSchema", "apply_strategic_merge_patch", "merge_schema_for"]

_PATCH = "$patch"
_RETAIN_KEYS = "$retainKeys"
_SET_ORDER = "$setElementOrder/"
_DELETE_FROM = "$deleteFromPrimitiveList/"


class _Deleted(enum.Enum):
    """Returned by a merge when `$patch: delete` asks for the value itself to go."""

    token = enum.auto()


_DELETED = _Deleted.token


def apply_strategic_merge_patch(
    doc: dict[str, Any], patch: dict[str, Any], schema: MergeSchema
) -> dict[str, Any]:
    """Return `doc` with the strategic merge `patch` applied; neither input is mutated."""
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch must be a JSON object")
    merged = _merge_map(copy.deepcopy(doc), patch, schema)
    return {} if merged is _DELETED else merged


def _merge_value(original: Any, patch: Any, schema: MergeSchema) -> Any:
    """Merge one patch value into `original` (owned by the caller, or None when absent).

    Merging into an empty container is also how a new value gets its directives stripped.
    """
    if isinstance(patch, dict):
        return _merge_map(original if isinstance(original, dict) else {}, patch, schema)
    if isinstance(patch, list):
        return _merge_list(original if isinstance(original, list) else [], patch, schema)
    return copy.deepcopy(patch)


def _merge_map(
    original: dict[str, Any], patch: dict[str, Any], schema: MergeSchema
) -> dict[str, Any] | _Deleted:
    directive = patch.get(_PATCH, "merge")
    if directive == "delete":
        return _DELETED
    if directive == "replace":
        return _merge_map({}, {k: v for k, v in patch.items() if k != _PATCH}, schema)
    if directive != "merge":
        raise PatchError(f"unknown patch directive {_PATCH}: {directive!r}")

    if _RETAIN_KEYS in patch:
        _retain_keys(original, patch[_RETAIN_KEYS])
    # Deletions from primitive lists apply to the original, before the same field merges.
    for key, value in patch.items():
        if key.startswith(_DELETE_FROM):
            _delete_from_primitive_list(original, key[len(_DELETE_FROM) :], value)

    for key, value in patch.items():
        if key.startswith("$"):
            _check_directive(key)
            continue
        if value is None:
            original.pop(key, None)
            continue
        merged = _merge_value(original.get(key), value, schema.child(key))
        if merged is _DELETED:
            original.pop(key, None)
        else:
            original[key] = merged

    for key, order in patch.items():
        name = key[len(_SET_ORDER) :]
        if key.startswith(_SET_ORDER) and isinstance(original.get(name), list):
            original[name] = _apply_order(original[name], order, schema.child(name))
    return original


def _check_directive(key: str) -> None:
    known = key in (_PATCH, _RETAIN_KEYS) or key.startswith((_SET_ORDER, _DELETE_FROM))
    if not known:
        raise PatchError(f"unknown patch directive {key!r}")


def _retain_keys(original: dict[str, Any], keys: Any) -> None:
    # Honoured wherever the client put it: kubectl only sends it where the schema says
    # retainKeys (Deployment strategy, volume sources), so no schema check is needed.
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise PatchError(f"{_RETAIN_KEYS} must be a list of field names")
    retained = set(keys)
    for key in [k for k in original if k not in retained]:
        del original[key]


def _delete_from_primitive_list(original: dict[str, Any], name: str, values: Any) -> None:
    if not isinstance(values, list):
        raise PatchError(f"{_DELETE_FROM}{name} must be a list")
    current = original.get(name)
    if not isinstance(current, list):
        return
    removed = {json_key(v) for v in values}
    kept = [item for item in current if json_key(item) not in removed]
    if kept:
        original[name] = kept
    else:
        del original[name]  # an empty list serialises as absent on the real server


def _is_replace_marker(item: Any) -> bool:
    # The list-level marker is a bare {"$patch": "replace"} item; an item that also carries
    # fields replaces just that item (handled by _merge_map).
    return isinstance(item, dict) and item.keys() == {_PATCH} and item[_PATCH] == "replace"


def _merge_list(original: list[Any], patch: list[Any], schema: MergeSchema) -> list[Any]:
    if any(_is_replace_marker(item) for item in patch):
        return _merge_list([], [item for item in patch if not _is_replace_marker(item)], schema)
    if schema.merge_key is not None:
        return _merge_keyed_list(original, patch, schema, schema.merge_key)
    if schema.list_type == "set":
        return _merge_primitive_list(original, patch)
    replaced = (_merge_value(None, item, schema) for item in patch)
    return [item for item in replaced if item is not _DELETED]


def _merge_primitive_list(original: list[Any], patch: list[Any]) -> list[Any]:
    merged = list(original)
    present = {json_key(item) for item in merged}
    for item in patch:
        identity = json_key(item)
        if identity not in present:
            present.add(identity)
            merged.append(copy.deepcopy(item))
    return merged


def _merge_keyed_list(
    original: list[Any], patch: list[Any], schema: MergeSchema, key: str
) -> list[Any]:
    # Items found by their key through an index, not a scan per patch item: a patch of n items
    # against a list of n items stays linear. Deleted slots are dropped at the end.
    merged: list[Any] = list(original)
    alive = [True] * len(merged)
    slots: dict[Any, list[int]] = {}
    for position, old in enumerate(merged):
        if isinstance(old, dict) and key in old:
            slots.setdefault(json_key(old[key]), []).append(position)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map: {_shown(item)} does not contain declared merge key: {key}")
        identity = json_key(item[key])
        matches = [p for p in slots.get(identity, ()) if alive[p]]
        if item.get(_PATCH) == "delete":
            for position in matches:
                alive[position] = False
            continue
        if not matches:
            new = _merge_map({}, item, schema)
            if new is not _DELETED:
                slots.setdefault(identity, []).append(len(merged))
                merged.append(new)
                alive.append(True)
            continue
        result = _merge_map(merged[matches[0]], item, schema)
        if result is _DELETED:
            alive[matches[0]] = False
        else:
            merged[matches[0]] = result
    return [item for item, keep in zip(merged, alive, strict=True) if keep]


def _shown(value: Any, limit: int = 200) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _apply_order(items: list[Any], order: Any, schema: MergeSchema) -> list[Any]:
    """Reorder per `$setElementOrder`: listed items take the listed order, others keep place.

    Items the directive does not mention (added by the server or another client) keep their
    positions; an order that cannot be interpreted is ignored rather than failing the patch.
    """
    if not isinstance(order, list):
        return items
    key = schema.merge_key
    if key is not None:
        if not all(isinstance(o, dict) and key in o for o in order):
            return items
        ranks = {_identity(o[key]): rank for rank, o in enumerate(order)}

        def rank_of(item: Any) -> int | None:
            return ranks.get(_identity(item[key])) if isinstance(item, dict) else None

    else:
        ranks = {_identity(o): rank for rank, o in enumerate(order)}

        def rank_of(item: Any) -> int | None:
            return ranks.get(_identity(item))

    slots = [i for i, item in enumerate(items) if rank_of(item) is not None]
    listed = sorted((items[i] for i in slots), key=lambda item: rank_of(item) or 0)
    reordered = list(items)
    for slot, item in zip(slots, listed, strict=True):
        reordered[slot] = item
    return reordered


def _identity(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
