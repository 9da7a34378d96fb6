"""JSON Merge Patch (RFC 7386) for `application/merge-patch+json` requests."""

from __future__ import annotations

import copy
from typing import Any


def apply_merge_patch(doc: Any, patch: Any) -> Any:
    """Return `doc` merged with `patch`: objects merge, `null` deletes, anything else replaces.

    Neither argument is mutated; the result shares no structure with them.
    """
    return _merge(copy.deepcopy(doc), patch, share=False)


def merge_patch_shared(doc: Any, patch: Any) -> Any:
    """`apply_merge_patch(doc, patch)` without copying what the patch leaves alone.

    Neither argument is mutated; the result shares the subtrees of `doc` the patch does not
    touch (for read-only documents such as stored objects) and copies what it takes from `patch`.
    """
    return _merge(doc, patch, share=True)


def _merge(target: Any, patch: Any, *, share: bool) -> Any:
    """Merge into `target`, which the caller owns and may be modified in place unless `share`
    (then every map on the patch's paths is copied first)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        result: dict[str, Any] = {}
    else:
        result = dict(target) if share else target
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            # An absent target merges against {}, which strips nulls nested in the patch.
            result[key] = _merge(result.get(key), value, share=share)
    return result
