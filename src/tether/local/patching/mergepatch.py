"""JSON Merge Patch (RFC 7386) for `application/merge-patch+json` requests."""

from __future__ import annotations

import copy
from typing import Any


def apply_merge_patch(doc: Any, patch: Any) -> Any:
    """Return `doc` merged with `patch`: objects merge, `null` deletes, anything else replaces.

    Neither argument is mutated; the result shares no structure with them.
    """
    return _merge(copy.deepcopy(doc), patch)


def _merge(target: Any, patch: Any) -> Any:
    """Merge into `target`, which the caller owns and may be modified in place."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            # An absent target merges against {}, which strips nulls nested in the patch.
            result[key] = _merge(result.get(key), value)
    return result
