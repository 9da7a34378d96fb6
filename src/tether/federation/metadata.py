"""What tether stamps on every object it creates in a member, and what it strips from templates.

Kept in one place so both dialects mark their objects identically: the executor finds tether's
objects by `app.kubernetes.io/managed-by: tether` and traces them back by `tether.io/source`.
"""

from __future__ import annotations

from typing import Any

from .model import (
    KUBEFED_MANAGED_LABEL,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    SOURCE_ANNOTATION,
    Dialect,
    ResourceRef,
)

# Server-owned metadata that must not travel from a template to a member: the member API server
# assigns its own (and rejects some, e.g. resourceVersion on create).
SERVER_METADATA = (
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "ownerReferences",
    "resourceVersion",
    "selfLink",
    "uid",
    "finalizers",
)


def source_value(dialect: Dialect, ref: ResourceRef) -> str:
    """`<dialect>:<apiVersion>/<kind>/<namespace>/<name>` (see model.SOURCE_ANNOTATION)."""
    return f"{dialect}:{ref.api_version}/{ref.kind}/{ref.namespace}/{ref.name}"


def strip_server_fields(doc: dict[str, Any]) -> dict[str, Any]:
    """Drop `status` and server-owned metadata from a plain object, in place."""
    doc.pop("status", None)
    metadata = doc.get("metadata")
    if isinstance(metadata, dict):
        for key in SERVER_METADATA:
            metadata.pop(key, None)
    return doc


def stamp(doc: dict[str, Any], dialect: Dialect, source: ResourceRef) -> dict[str, Any]:
    """Add tether's labels and source annotation to a plain object, in place."""
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict):
        metadata = doc["metadata"] = {}
    labels = metadata.get("labels")
    if not isinstance(labels, dict):
        labels = metadata["labels"] = {}
    annotations = metadata.get("annotations")
    if not isinstance(annotations, dict):
        annotations = metadata["annotations"] = {}
    if dialect == "kubefed":
        labels[KUBEFED_MANAGED_LABEL] = "true"
    labels[MANAGED_BY_LABEL] = MANAGED_BY_VALUE
    annotations[SOURCE_ANNOTATION] = source_value(dialect, source)
    return doc
