"""Per-cluster overrides: KubeFed `clusterOverrides` and Karmada's overriders.

Both operate on a plain copy of the object and fail with `OverrideError(path, message)`; the
compilers turn that into `ClusterFailure(cluster, "ApplyOverridesFailed", "<path>: <message>")`
for that one cluster, so a typo in one cluster's override never blocks the others.

KubeFed: each override is `{path, op?, value?}`, `op` add|remove|replace (default replace), applied
in order as JSON-patch operations. `/metadata/name`, `/metadata/namespace`,
`/metadata/generateName` and `/kind` may not be overridden (KubeFed's invalidPaths).

Karmada: one `overriders` block applies, in Karmada's fixed order, imageOverrider,
commandOverrider, argsOverrider, labelsOverrider, annotationsOverrider, fieldOverrider, plaintext.
- imageOverrider: `predicate.path` names one image field; without it every
  `containers[*].image` of the pod template is rewritten (Pod, ReplicaSet, Deployment, DaemonSet,
  StatefulSet, Job as in Karmada; CronJob too — a tether extension, Karmada skips CronJobs).
  `component` Registry|Repository|Tag with `operator` add (append the value to the component),
  replace, remove (see `images.py` for how Karmada splits an image).
- commandOverrider/argsOverrider: for containers named `containerName`, `add` appends the values,
  `remove` drops every occurrence of them; a container without the field gets one (an empty one
  for remove, as in Karmada). Same kinds as images.
- labelsOverrider/annotationsOverrider: `add` sets keys (creating the map), `replace` and `remove`
  touch only keys that exist. Keys are escaped in the pointer (Karmada does not escape, so keys
  with `/` break there; here they work).
- fieldOverrider: `fieldPath` points at a string field holding JSON or YAML; `yaml` (preferred
  when both are given) or `json` operations with `subPath` pointers are applied inside it and the
  document is re-serialised (YAML with sorted keys, as sigs.k8s.io/yaml does; compact JSON).
- plaintext: JSON-patch operations `{path, operator, value}`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import yaml

from tether.objects import jsonpatch

from ._util import items, mapping, thaw
from .images import ImageError, parse_image


class OverrideError(Exception):
    """An override that cannot be applied; `path` is the JSON pointer involved."""

    def __init__(self, path: str, message: str) -> None:
        # JSON patch messages already name their pointer; others get it in front.
        super().__init__(message if f'"{path}"' in message else f"{path}: {message}")
        self.path = path
        self.message = message


def _patch(doc: Any, op: str, path: str, value: Any = None) -> Any:
    try:
        return jsonpatch.apply_operation(doc, op, path, thaw(value))
    except jsonpatch.PatchError as err:
        raise OverrideError(err.path, err.message) from None


# ---------------------------------------------------------------------------------------------
# KubeFed

KUBEFED_INVALID_PATHS = frozenset(
    {"/metadata/namespace", "/metadata/name", "/metadata/generateName", "/kind"}
)


def apply_kubefed_overrides(obj: Mapping[str, Any], overrides: Sequence[Any]) -> dict[str, Any]:
    """Apply one cluster's `clusterOverrides` to a copy of `obj`."""
    doc = thaw(obj)
    for raw in overrides:
        override = mapping(raw)
        path = override.get("path")
        if not isinstance(path, str) or path == "":
            raise OverrideError(str(path or ""), "override path must be a non-empty JSON pointer")
        if path in KUBEFED_INVALID_PATHS:
            raise OverrideError(path, "this path may not be overridden")
        op = str(override.get("op") or "replace")
        doc = _patch(doc, op, path, override.get("value"))
    return dict(doc)


# ---------------------------------------------------------------------------------------------
# Karmada

_POD_SPEC_PATHS: Mapping[str, str] = {
    "Pod": "/spec",
    "ReplicaSet": "/spec/template/spec",
    "Deployment": "/spec/template/spec",
    "DaemonSet": "/spec/template/spec",
    "StatefulSet": "/spec/template/spec",
    "Job": "/spec/template/spec",
    "CronJob": "/spec/jobTemplate/spec/template/spec",
}


def _containers(doc: Any) -> tuple[str, Sequence[Any]]:
    prefix = _POD_SPEC_PATHS.get(str(mapping(doc).get("kind", "")), "")
    if not prefix:
        return "", ()
    try:
        spec = jsonpatch.get(doc, prefix)
    except jsonpatch.PatchError:
        return prefix, ()
    return prefix, items(mapping(spec).get("containers"))


def _new_image(current: str, overrider: Mapping[str, Any], path: str) -> str:
    try:
        image = parse_image(current)
    except ImageError as err:
        raise OverrideError(path, f"failed to parse image value({current}), error: {err}") from None
    component = overrider.get("component")
    op = overrider.get("operator")
    value = str(overrider.get("value", "") or "")
    if component == "Registry":
        registry = {"add": image.registry + value, "replace": value, "remove": ""}
        image = replace(image, registry=registry.get(str(op), image.registry))
    elif component == "Repository":
        repository = {"add": image.repository + value, "replace": value, "remove": ""}
        image = replace(image, repository=repository.get(str(op), image.repository))
    elif component == "Tag":
        if op == "add":
            image = image.with_tag_or_digest(image.tag_or_digest + value)
        elif op == "replace":
            image = image.with_tag_or_digest(value)
        elif op == "remove":
            image = image.without_tag_or_digest()
    else:
        raise OverrideError(path, f"unsupported image component({component})")
    return str(image)


def _apply_image(doc: Any, overrider: Mapping[str, Any]) -> Any:
    predicate = overrider.get("predicate")
    if predicate is not None:
        path = str(mapping(predicate).get("path", ""))
        try:
            current = jsonpatch.get(doc, path)
        except jsonpatch.PatchError as err:
            raise OverrideError(path, f"failed to obtain image value: {err.message}") from None
        if not isinstance(current, str):
            raise OverrideError(path, "the predicate path does not hold a string")
        return _patch(doc, "replace", path, _new_image(current, overrider, path))
    prefix, containers = _containers(doc)
    for index, container in enumerate(containers):
        path = f"{prefix}/containers/{index}/image"
        current = mapping(container).get("image")
        if isinstance(current, str):
            doc = _patch(doc, "replace", path, _new_image(current, overrider, path))
    return doc


def _command_args(field: str) -> Callable[[Any, Mapping[str, Any]], Any]:
    def apply(doc: Any, overrider: Mapping[str, Any]) -> Any:
        prefix, containers = _containers(doc)
        name = overrider.get("containerName")
        op = overrider.get("operator")
        values = [str(v) for v in items(overrider.get("value"))]
        for index, container in enumerate(containers):
            if mapping(container).get("name") != name:
                continue
            current = [str(v) for v in items(mapping(container).get(field))]
            if op == "add":
                new = current + values
            elif op == "remove":
                new = [v for v in current if v not in values]
            else:
                new = current
            doc = _patch(doc, "add", f"{prefix}/containers/{index}/{field}", new)
        return doc

    return apply


def _labels_annotations(field: str) -> Callable[[Any, Mapping[str, Any]], Any]:
    def apply(doc: Any, overrider: Mapping[str, Any]) -> Any:
        op = str(overrider.get("operator", ""))
        for key, value in mapping(overrider.get("value")).items():
            path = f"/metadata/{field}/{jsonpatch.escape(str(key))}"
            existing = mapping(mapping(mapping(doc).get("metadata")).get(field))
            if op in ("remove", "replace"):
                if key not in existing:
                    continue
            elif op == "add":
                metadata = doc.setdefault("metadata", {})
                if not isinstance(metadata.get(field), dict):
                    metadata[field] = {}
            doc = _patch(doc, op, path, value)
        return doc

    return apply


def _apply_field(doc: Any, overrider: Mapping[str, Any]) -> Any:
    path = str(overrider.get("fieldPath", ""))
    try:
        raw = jsonpatch.get(doc, path)
    except jsonpatch.PatchError as err:
        raise OverrideError(path, err.message) from None
    if not isinstance(raw, str):
        raise OverrideError(path, "the value at fieldPath is not a string")
    yaml_ops, json_ops = items(overrider.get("yaml")), items(overrider.get("json"))
    if not yaml_ops and not json_ops:
        return doc
    try:
        inner = yaml.safe_load(raw) if yaml_ops else json.loads(raw)
    except (yaml.YAMLError, ValueError) as err:
        kind = "YAML" if yaml_ops else "JSON"
        raise OverrideError(path, f"the value at fieldPath is not valid {kind}: {err}") from None
    for raw_op in yaml_ops or json_ops:
        op = mapping(raw_op)
        sub_path = str(op.get("subPath", ""))
        try:
            inner = jsonpatch.apply_operation(inner, str(op.get("operator", "")), sub_path,
                                  thaw(op.get("value")))
        except jsonpatch.PatchError as err:
            raise OverrideError(f"{path}{err.path}", err.message) from None
    if yaml_ops:
        text = yaml.safe_dump(inner, default_flow_style=False, sort_keys=True)
    else:
        text = json.dumps(inner, separators=(",", ":"))
    return _patch(doc, "replace", path, text)


def _apply_plaintext(doc: Any, overrider: Mapping[str, Any]) -> Any:
    return _patch(doc, str(overrider.get("operator", "")), str(overrider.get("path", "")),
                  overrider.get("value"))


# Karmada's fixed application order; each entry is a list of overriders of that type.
KARMADA_OVERRIDERS: tuple[tuple[str, Callable[[Any, Mapping[str, Any]], Any]], ...] = (
    ("imageOverrider", _apply_image),
    ("commandOverrider", _command_args("command")),
    ("argsOverrider", _command_args("args")),
    ("labelsOverrider", _labels_annotations("labels")),
    ("annotationsOverrider", _labels_annotations("annotations")),
    ("fieldOverrider", _apply_field),
    ("plaintext", _apply_plaintext),
)


def apply_overriders(obj: Mapping[str, Any], overriders: Any) -> dict[str, Any]:
    """Apply one Karmada `overriders` block to a copy of `obj`, in Karmada's order."""
    doc = thaw(obj)
    block = mapping(overriders)
    for field, apply in KARMADA_OVERRIDERS:
        for overrider in items(block.get(field)):
            doc = apply(doc, mapping(overrider))
    if not isinstance(doc, dict):
        raise OverrideError("", "the overridden document is not an object")
    return doc
