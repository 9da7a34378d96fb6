"""Field sets: which fields of an object a manager owns, in Kubernetes' FieldsV1 notation.

A path is a tuple of FieldsV1 elements: `f:<field>` for a map field, `k:{"name":"c"}` for an
item of a list-map, `v:"x"` for an item of a set. A field set holds the paths a manager owns;
it holds scalars, atomic lists, atomic or empty maps and list items, but not the non-empty maps
above them, the same rule structured-merge-diff uses.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tether.local.patching.errors import PatchError
from tether.local.patching.schema import UNTYPED, MergeSchema
from tether.objects.jsonpatch import json_equal

FieldPath = tuple[str, ...]
FieldSet = frozenset[FieldPath]

# The server owns these; they never appear in a manager's set (upstream's stripMeta list).
_SERVER_METADATA = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
        "managedFields",
    }
)


@dataclass(frozen=True)
class Node:
    """One value in an object, as seen by the field-set walk."""

    value: Any
    member: bool  # would be in a field set: scalars, list items, atomic and empty values
    leaf: bool  # compared by value (nothing below it is walked)
    # A map named by the schema (spec, template, strategy): such structs always exist on a
    # typed object, so a write never "creates" them.
    struct: bool = False


def managed_view(obj: dict[str, Any]) -> dict[str, Any]:
    """The part of `obj` that field managers can own: no type, identity or server metadata."""
    view = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    metadata = view.get("metadata")
    if isinstance(metadata, dict):
        kept = {k: v for k, v in metadata.items() if k not in _SERVER_METADATA}
        if kept:
            view["metadata"] = kept
        else:
            del view["metadata"]
    return view


def walk(obj: dict[str, Any], schema: MergeSchema) -> dict[FieldPath, Node]:
    """Every path in `obj` (already a managed view) with what the field-set rules say of it."""
    nodes: dict[FieldPath, Node] = {}
    _walk_fields(obj, (), schema, nodes)
    return nodes


def compare(
    old: dict[FieldPath, Node], new: dict[FieldPath, Node]
) -> tuple[FieldSet, FieldSet, FieldSet]:
    """What a write did: (added, modified, removed) paths between two walks.

    A map that a write brings into existence counts as added (FieldsV1 shows it as "."),
    except the structs a typed object always has and lists, mirroring real Update entries.
    """
    added = frozenset(p for p, n in new.items() if p not in old and _created_as_value(n))
    modified = frozenset(
        p
        for p, n in new.items()
        if p in old and (n.leaf or old[p].leaf) and not json_equal(n.value, old[p].value)
    )
    removed = frozenset(p for p in old if p not in new)
    return added, modified, removed


def diff(old: dict[str, Any], new: dict[str, Any], schema: MergeSchema) -> tuple[FieldSet, FieldSet, FieldSet]:
    """`compare(walk(old, schema), walk(new, schema))` (both managed views), without walking the
    values `old` and `new` share: the same object on both sides holds no difference, and a
    non-empty map on both sides is only walked into (it is never compared as a whole)."""
    old_nodes: dict[FieldPath, Node] = {}
    new_nodes: dict[FieldPath, Node] = {}
    _diff_fields(old, new, (), schema, old_nodes, new_nodes)
    return compare(old_nodes, new_nodes)


def _diff_fields(
    old: dict[str, Any],
    new: dict[str, Any],
    path: FieldPath,
    schema: MergeSchema,
    old_nodes: dict[FieldPath, Node],
    new_nodes: dict[FieldPath, Node],
) -> None:
    for key, value in new.items():
        child_path = (*path, f"f:{key}")
        child = schema.child(key)
        struct = schema.has_child(key) or (not path and key == "metadata")
        if key in old:
            before = old[key]
            if before is value:
                continue
            if (isinstance(before, dict) and before and isinstance(value, dict) and value
                    and not child.atomic_map):
                _diff_fields(before, value, child_path, child, old_nodes, new_nodes)
                continue
            _walk_value(before, child_path, child, old_nodes, struct=struct)
        _walk_value(value, child_path, child, new_nodes, struct=struct)
    for key, before in old.items():
        if key not in new:
            struct = schema.has_child(key) or (not path and key == "metadata")
            _walk_value(before, (*path, f"f:{key}"), schema.child(key), old_nodes, struct=struct)


def _created_as_value(node: Node) -> bool:
    return node.member or (isinstance(node.value, dict) and not node.struct)


def _walk_fields(
    obj: dict[str, Any], path: FieldPath, schema: MergeSchema, nodes: dict[FieldPath, Node]
) -> None:
    for key, value in obj.items():
        # metadata is ObjectMeta on every kind, custom resources included.
        struct = schema.has_child(key) or (not path and key == "metadata")
        _walk_value(value, (*path, f"f:{key}"), schema.child(key), nodes, struct=struct)


def _walk_value(
    value: Any,
    path: FieldPath,
    schema: MergeSchema,
    nodes: dict[FieldPath, Node],
    *,
    member: bool = False,
    struct: bool = False,
) -> None:
    if isinstance(value, dict) and value and not schema.atomic_map:
        nodes[path] = Node(value, member=member, leaf=False, struct=struct)
        _walk_fields(value, path, schema, nodes)
        return
    elements = item_elements(value, schema) if isinstance(value, list) and value else None
    if elements is None:
        nodes[path] = Node(value, member=True, leaf=True)
        return
    nodes[path] = Node(value, member=False, leaf=False)
    for element, item in zip(elements, value, strict=True):
        _walk_value(item, (*path, element), schema, nodes, member=True)


def item_elements(items: list[Any], schema: MergeSchema) -> list[str] | None:
    """Path elements for the items of a mergeable list, or None to treat it as atomic.

    A list whose items lack a key or repeat one cannot be tracked item by item; owning it as
    one value keeps the bookkeeping consistent instead of failing the write.
    """
    if schema.list_type == "atomic":
        return None
    elements = []
    for item in items:
        element = item_element(item, schema)
        if element is None:
            return None
        elements.append(element)
    return elements if len(set(elements)) == len(elements) else None


def item_element(item: Any, schema: MergeSchema) -> str | None:
    if schema.list_type == "set":
        return "v:" + _compact(item)
    if not isinstance(item, dict):
        return None
    key: dict[str, Any] = {}
    for name in schema.keys:
        if name in item:
            key[name] = item[name]
        elif name in schema.key_defaults:
            key[name] = schema.key_defaults[name]
        else:
            return None
    return "k:" + _compact(key)


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def fieldset_of(obj: dict[str, Any], schema: MergeSchema | None) -> FieldSet:
    """The fields a manager owns by applying `obj` (custom resources: schema None)."""
    nodes = walk(managed_view(obj), schema or UNTYPED)
    return frozenset(path for path, node in nodes.items() if node.member)


def to_fields_v1(fields: FieldSet) -> dict[str, Any]:
    """Render a field set as FieldsV1 JSON: `{"f:data": {"f:a": {}}}`."""
    tree: dict[str, Any] = {}
    for path in fields:
        node = tree
        for element in path:
            node = node.setdefault(element, {})
    # "." marks a member that also has owned children (a list item and its fields).
    for path in fields:
        node = tree
        for element in path:
            node = node[element]
        if node:
            node["."] = {}
    return _sorted_tree(tree)


# Trees `shared_fields_v1` rendered, by field set and by the tree's identity (the tree is held,
# so its id stays unique). Writes of one kind mostly own the same fields, and the next write of
# an object parses the trees the previous one rendered; both lookups skip the tree walks.
_CACHE_LIMIT = 2048
_RENDERED: dict[FieldSet, dict[str, Any]] = {}
_PARSED: dict[int, tuple[dict[str, Any], FieldSet]] = {}


def shared_fields_v1(fields: FieldSet) -> dict[str, Any]:
    """`to_fields_v1(fields)`, shared with other callers: for read-only objects only."""
    tree = _RENDERED.get(fields)
    if tree is None:
        if len(_RENDERED) >= _CACHE_LIMIT:
            _RENDERED.clear()
            _PARSED.clear()
        tree = to_fields_v1(fields)
        _RENDERED[fields] = tree
        _PARSED[id(tree)] = (tree, fields)
    return tree


def _sorted_tree(tree: dict[str, Any]) -> dict[str, Any]:
    return {k: _sorted_tree(tree[k]) for k in sorted(tree, key=lambda k: (k != ".", k))}


def from_fields_v1(fields_v1: Any) -> FieldSet:
    """Parse FieldsV1 JSON back into a field set; PatchError if it is malformed."""
    if not isinstance(fields_v1, dict):
        raise PatchError("fieldsV1 must be a JSON object")
    known = _PARSED.get(id(fields_v1))
    if known is not None and known[0] is fields_v1:
        return known[1]
    return frozenset(_parse_fields(fields_v1, ()))


def _parse_fields(tree: dict[str, Any], path: FieldPath) -> Iterator[FieldPath]:
    for element, subtree in tree.items():
        if element == ".":
            yield path
            continue
        if not isinstance(subtree, dict) or element[:2] not in ("f:", "k:", "v:", "i:"):
            raise PatchError(f"invalid fieldsV1 element {element!r}")
        child = (*path, element)
        if not subtree:
            yield child
        else:
            yield from _parse_fields(subtree, child)


def path_string(path: FieldPath) -> str:
    """Render a path the way the API server names fields in conflicts: `.spec.a[name="c"]`."""
    parts = []
    for element in path:
        kind, text = element[:2], element[2:]
        if kind == "f:":
            parts.append("." + text)
        elif kind == "k:":
            key = json.loads(text)
            parts.append("[" + ",".join(f"{k}={_compact(v)}" for k, v in key.items()) + "]")
        elif kind == "v:":
            parts.append("[=" + text + "]")
        else:
            parts.append("[" + text + "]")
    return "".join(parts)
