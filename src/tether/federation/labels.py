"""metav1.LabelSelector and NodeSelectorRequirement matching, for cluster and resource selection.

Federation cannot import `tether.objects.selectors` (capabilities do not import each other), and it
only needs the structured (map) form of selectors, not the string grammar. Semantics follow
k8s.io/apimachinery: `matchLabels` and `matchExpressions` are ANDed, an empty selector `{}`
matches everything, `NotIn`/`DoesNotExist` match objects that lack the key. An expression with an
unknown operator makes the selector match nothing, as Karmada does when
`LabelSelectorAsSelector` fails ("should not happen because of the webhook").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._util import items, mapping


def match_requirement(requirement: Any, labels: Mapping[str, str]) -> bool:
    """One `{key, operator, values}` requirement (label selector or node selector form)."""
    req = mapping(requirement)
    key = str(req.get("key", ""))
    op = str(req.get("operator", ""))
    values = [str(v) for v in items(req.get("values"))]
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        # Node-selector numeric comparison: both sides must be integers.
        if not present or len(values) != 1:
            return False
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def match_label_selector(selector: Any, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector. `None` is the caller's business (it means "nothing" or "all"
    depending on the API), so it is not accepted here; `{}` matches everything."""
    sel = mapping(selector)
    for key, value in mapping(sel.get("matchLabels")).items():
        if labels.get(str(key)) != str(value):
            return False
    return all(match_requirement(expr, labels) for expr in items(sel.get("matchExpressions")))
