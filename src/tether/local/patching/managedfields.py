"""Server-side apply and `metadata.managedFields` bookkeeping.

Every write credits its manager with the fields it set. An apply additionally *releases* the
fields its manager applied last time but not this time, which is what lets a key removed from a
manifest disappear from the object, and it refuses (409) to change a field another manager set
to a different value unless forced. This follows structured-merge-diff's rules on a smaller
schema (see `schema.py`): list-maps and sets where the schema names them, atomic lists elsewhere.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, replace
from typing import Any

from tether.local.patching.errors import ApplyConflictError, FieldConflict, PatchError
from tether.local.patching.fieldsets import (
    FieldPath,
    FieldSet,
    compare,
    diff,
    fieldset_of,
    from_fields_v1,
    item_element,
    item_elements,
    managed_view,
    path_string,
    shared_fields_v1,
    to_fields_v1,
    walk,
)
from tether.local.patching.schema import UNTYPED, MergeSchema

__all__ = [
    "FieldPath",
    "FieldSet",
    "fieldset_of",
    "from_fields_v1",
    "record_update",
    "server_side_apply",
    "to_fields_v1",
]

# Metadata an apply may not set: the server owns it. name, namespace, labels, annotations,
# finalizers and ownerReferences pass through as ordinary fields.
_SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
    "managedFields",
)

_EMPTY: FieldSet = frozenset()


@dataclass(frozen=True)
class _Entry:
    """One managedFields entry with its field set parsed."""

    manager: str
    operation: str
    api_version: str
    time: str | None
    subresource: str
    fields: FieldSet

    @property
    def identity(self) -> tuple[str, str, str, str]:
        # An applier keeps one entry across API versions; updaters get one per version.
        version = "" if self.operation == "Apply" else self.api_version
        return (self.manager, self.operation, self.subresource, version)

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
        }
        if self.time is not None:
            entry["time"] = self.time
        entry["fieldsType"] = "FieldsV1"
        entry["fieldsV1"] = shared_fields_v1(self.fields)  # stored objects are read-only
        if self.subresource:
            entry["subresource"] = self.subresource
        return entry


def server_side_apply(
    live: dict[str, Any] | None,
    applied: dict[str, Any],
    *,
    manager: str,
    force: bool,
    api_version: str,
    now: str,
    schema: MergeSchema | None,
    subresource: str = "",
) -> dict[str, Any]:
    """Return the object after `manager` applies `applied` to `live` (None: create).

    With `subresource="status"` only the applied `.status` counts, merged into the live one
    under the schema (conditions keyed by type: another manager's stay), in an entry of its own.
    Raises ApplyConflictError when the apply would change fields another manager owns
    (unless `force`, which takes them over) and PatchError for an unusable configuration.
    """
    if not isinstance(applied, dict):
        raise PatchError("apply configuration must be a JSON or YAML object")
    root = schema or UNTYPED
    if subresource == "status":
        config = {"status": _without_nulls(applied.get("status") or {})}
    else:
        config = _apply_config(applied)  # a fresh structure: _merge takes its values as they are
    current = live if live is not None else {}  # only read
    entries = _read_entries(current)
    mine = _Entry(manager, "Apply", api_version, now, subresource, fieldset_of(config, schema))
    previous = next((e for e in entries if e.identity == mine.identity), None)

    merged: dict[str, Any] = _merge(copy.deepcopy(current), config, root)
    others = [e for e in entries if e.identity != mine.identity]
    changed: FieldSet = _EMPTY
    if others:  # what the apply changed only matters to the fields of other managers
        added, modified, _ = compare(
            walk(managed_view(current), root), walk(managed_view(merged), root)
        )
        changed = added | modified
    conflicts = _conflicts(others, changed)
    if conflicts and not force:
        raise ApplyConflictError(conflicts)
    # Forcing takes the conflicting fields away from their owners; shared equal values stay.
    others = [replace(e, fields=e.fields - changed) for e in others]

    kept = mine.fields.union(*(e.fields for e in others))
    _prune(merged, (previous.fields if previous else _EMPTY) - kept, kept, root)
    _write_entries(merged, _replace_entry(entries, mine, others))
    return merged


def record_update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    *,
    manager: str,
    api_version: str,
    now: str,
    schema: MergeSchema | None,
    subresource: str = "",
) -> dict[str, Any]:
    """Return `new` with managedFields crediting `manager` for what this write changed.

    Fields the write changed move from their previous owners to `manager`, as on a real
    server. A body without managedFields keeps the stored ones. The result shares with `new`
    only values that are also in `old` (the same objects, as when `new` was built from a stored,
    read-only `old`); everything else is copied.
    """
    if old is None or new is old:
        result = copy.deepcopy(new)
    else:
        result = _copy_unshared(new, old)
        result_meta = result.get("metadata")
        shared_meta = result_meta is old.get("metadata")
        if shared_meta and isinstance(result_meta, dict):
            result["metadata"] = dict(result_meta)  # managedFields are written into it
    if not manager:
        return result  # nobody to credit; leave whatever the body says
    metadata = result.get("metadata")
    sent_fields = isinstance(metadata, dict) and "managedFields" in metadata
    entries = _read_entries(result if sent_fields or old is None else old)

    root = schema or UNTYPED
    added, modified, removed = diff(managed_view(old or {}), managed_view(result), root)
    changed = added | modified
    identity = (manager, "Update", subresource, api_version)
    previous = next((e for e in entries if e.identity == identity), None)
    if previous is None and not changed:
        # Fields this write removed are owned by no one any more: they no longer exist.
        _write_entries(result, [replace(e, fields=e.fields - removed) for e in entries])
        return result

    owned = ((previous.fields if previous else _EMPTY) - removed) | changed
    unchanged = previous is not None and not changed and owned == previous.fields
    time = previous.time if previous is not None and unchanged else now
    mine = _Entry(manager, "Update", api_version, time, subresource, owned)
    others = [replace(e, fields=e.fields - changed - removed) for e in entries if e.identity != identity]
    _write_entries(result, _replace_entry(entries, mine, others))
    return result


def _copy_unshared(value: Any, old: Any) -> Any:
    """A deep copy of `value`, except where it holds the very objects `old` holds at that place."""
    if value is old:
        return value
    if isinstance(value, dict):
        if not isinstance(old, dict):
            return copy.deepcopy(value)
        return {k: _copy_unshared(v, old.get(k)) for k, v in value.items()}
    if isinstance(value, list):
        if not isinstance(old, list):
            return copy.deepcopy(value)
        return [_copy_unshared(v, old[i] if i < len(old) else None) for i, v in enumerate(value)]
    if value is None or isinstance(value, str | int | float):
        return value  # immutable JSON scalars (bool is an int)
    return copy.deepcopy(value)


def _apply_config(applied: dict[str, Any]) -> dict[str, Any]:
    """The applied object minus what an apply to the main resource may not set."""
    config: dict[str, Any] = _without_nulls(applied)
    config.pop("status", None)
    metadata = config.get("metadata")
    if isinstance(metadata, dict):
        for key in _SERVER_METADATA:
            metadata.pop(key, None)
    return config


def _without_nulls(value: Any) -> Any:
    # An explicit null in an apply configuration means "not set" here; structured-merge-diff
    # would record ownership of the null, which buys nothing for these clients.
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _merge(live: Any, applied: Any, schema: MergeSchema) -> Any:
    """Merge an apply configuration into the live value; the caller owns both, and the result
    takes the configuration's values without copying them."""
    if schema is UNTYPED and not isinstance(live, dict):
        return applied  # no list keys to validate below, nothing to merge into: the value itself
    # New values merge into empty containers too, so their list keys get validated.
    if isinstance(applied, dict) and not schema.atomic_map:
        merged = live if isinstance(live, dict) else {}
        for key, value in applied.items():
            merged[key] = _merge(merged.get(key), value, schema.child(key))
        return merged
    if isinstance(applied, list) and schema.list_type != "atomic":
        return _merge_items(live if isinstance(live, list) else [], applied, schema)
    return applied


def _merge_items(live: list[Any], applied: list[Any], schema: MergeSchema) -> list[Any]:
    applied_elements = _require_item_keys(applied, schema)
    live_elements = item_elements(live, schema)
    if live_elements is None:
        return applied  # a live list we cannot key is simply replaced
    position = {element: i for i, element in enumerate(live_elements)}
    merged = list(live)
    for element, item in zip(applied_elements, applied, strict=True):
        if element in position:
            merged[position[element]] = _merge(live[position[element]], item, schema)
        else:
            merged.append(item)
    return merged


def _require_item_keys(items: list[Any], schema: MergeSchema) -> list[str]:
    elements = []
    for item in items:
        element = item_element(item, schema)
        if element is None:
            keys = ", ".join(schema.keys)
            raise PatchError(f"list item {item!r} must be an object with key fields ({keys})")
        if element in elements:
            raise PatchError(f"duplicate entries for key {element[2:]}")
        elements.append(element)
    return elements


def _conflicts(others: list[_Entry], changed: FieldSet) -> list[FieldConflict]:
    conflicts = []
    for entry in others:
        for path in sorted(entry.fields & changed, key=path_string):
            conflicts.append(FieldConflict(entry.manager, path_string(path), entry.api_version))
    return conflicts


def _prune(obj: dict[str, Any], stale: FieldSet, kept: FieldSet, schema: MergeSchema) -> None:
    """Remove `stale` paths, except where someone still owns a field beneath them."""
    kept_ancestors = {path[:i] for path in kept for i in range(1, len(path))}
    for path in sorted(stale, key=len):
        if path not in kept_ancestors and not _is_item_key_field(path):
            _remove_path(obj, path, kept, schema)


def _is_item_key_field(path: FieldPath) -> bool:
    """A key field of a list-map item: it lives and dies with the item, never on its own."""
    if len(path) < 2 or not path[-2].startswith("k:") or not path[-1].startswith("f:"):
        return False
    return path[-1][2:] in json.loads(path[-2][2:])


def _remove_path(obj: dict[str, Any], path: FieldPath, kept: FieldSet, schema: MergeSchema) -> None:
    chain: list[tuple[Any, Any]] = []  # (container, key or index) from the root down
    node: Any = obj
    for element in path:
        if element.startswith("f:") and isinstance(node, dict) and element[2:] in node:
            accessor: Any = element[2:]
            schema = schema.child(accessor)
        elif element.startswith(("k:", "v:")) and isinstance(node, list):
            accessor = next(
                (i for i, item in enumerate(node) if item_element(item, schema) == element), None
            )
            if accessor is None:
                return
        else:
            return  # already gone, e.g. with an ancestor removed earlier
        chain.append((node, accessor))
        node = node[accessor]
    # Delete the value, then any map or list the deletion left empty that nobody owns:
    # the real server never serialises those either.
    for depth in range(len(chain) - 1, -1, -1):
        container, accessor = chain[depth]
        is_target = depth == len(chain) - 1
        if not is_target and (container[accessor] or path[: depth + 1] in kept):
            break
        del container[accessor]


def _read_entries(obj: dict[str, Any]) -> list[_Entry]:
    metadata = obj.get("metadata")
    raw = metadata.get("managedFields") if isinstance(metadata, dict) else None
    if not isinstance(raw, list):
        return []
    entries = []
    for item in raw:
        entry = _parse_entry(item)
        if entry is not None:
            entries.append(entry)
    return entries


def _parse_entry(item: Any) -> _Entry | None:
    # A malformed entry (hand-edited, or from a client bug) is dropped rather than failing
    # the write; the real server resets unusable managedFields the same way.
    if not isinstance(item, dict) or not isinstance(item.get("manager"), str):
        return None
    operation = item.get("operation")
    if operation not in ("Apply", "Update"):
        return None
    try:
        fields = from_fields_v1(item.get("fieldsV1", {}))
    except PatchError:
        return None
    time = item.get("time")
    return _Entry(
        manager=item["manager"],
        operation=operation,
        api_version=str(item.get("apiVersion", "")),
        time=time if isinstance(time, str) else None,
        subresource=str(item.get("subresource", "")),
        fields=fields,
    )


def _replace_entry(entries: list[_Entry], mine: _Entry, others: list[_Entry]) -> list[_Entry]:
    """`others` in their original order with `mine` in its old slot (or last)."""
    by_identity = {e.identity: e for e in others}
    result = []
    for entry in entries:
        result.append(mine if entry.identity == mine.identity else by_identity[entry.identity])
    if all(e.identity != mine.identity for e in entries):
        result.append(mine)
    return result


def _write_entries(obj: dict[str, Any], entries: list[_Entry]) -> None:
    rendered = [e.to_dict() for e in entries if e.fields]
    if rendered:
        obj.setdefault("metadata", {})["managedFields"] = rendered
    elif isinstance(obj.get("metadata"), dict):
        obj["metadata"].pop("managedFields", None)
