"""May a user grant these rules? The privilege-escalation check of RBAC writes.

As kube-apiserver's RBAC registry: a Role or ClusterRole may be created or changed only by a user
who already holds every permission in it (in the Role's namespace, or cluster-wide for a
ClusterRole), unless the user may `escalate` that role; a binding may be created or changed only
by a user who holds every permission of the role it refers to (in the binding's namespace),
unless the user may `bind` that role. "Holds" is decided rule by rule after breaking each rule
into atomic ones (one group, one resource, one verb, one name), each of which must be covered by
one rule the user has.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tether.local.rbac.authorizer import ALL, PolicyRule, UserInfo


def breakdown(rule: PolicyRule) -> list[PolicyRule]:
    """The rule as atomic rules (one group, resource, verb and name; or one URL and verb)."""
    out: list[PolicyRule] = []
    for group in rule.api_groups:
        for resource in rule.resources:
            for verb in rule.verbs:
                if rule.resource_names:
                    out.extend(PolicyRule((verb,), (group,), (resource,), (name,))
                               for name in rule.resource_names)
                else:
                    out.append(PolicyRule((verb,), (group,), (resource,)))
    for url in rule.non_resource_urls:
        out.extend(PolicyRule((verb,), non_resource_urls=(url,)) for verb in rule.verbs)
    return out


def _has_all(owner: Sequence[str], wanted: Sequence[str]) -> bool:
    return all(w in owner for w in wanted)


def _resources_cover(owner: Sequence[str], wanted: Sequence[str]) -> bool:
    if ALL in owner or _has_all(owner, wanted):
        return True
    for resource in wanted:
        if resource in owner:
            continue
        if "/" not in resource:
            return False
        if f"*/{resource.split('/', 1)[1]}" not in owner:
            return False
    return True


def _url_covers(owner: str, wanted: str) -> bool:
    return owner == wanted or (owner.endswith("*") and wanted.startswith(owner.rstrip("*")))


def rule_covers(owner: PolicyRule, wanted: PolicyRule) -> bool:
    verbs = ALL in owner.verbs or _has_all(owner.verbs, wanted.verbs)
    groups = ALL in owner.api_groups or _has_all(owner.api_groups, wanted.api_groups)
    resources = _resources_cover(owner.resources, wanted.resources)
    urls = all(any(_url_covers(o, w) for o in owner.non_resource_urls) for w in wanted.non_resource_urls)
    if not wanted.resource_names:
        names = not owner.resource_names
    else:
        names = not owner.resource_names or _has_all(owner.resource_names, wanted.resource_names)
    return verbs and groups and resources and names and urls


def uncovered(owner: Iterable[PolicyRule], wanted: Iterable[PolicyRule]) -> list[PolicyRule]:
    """The atomic rules of `wanted` that no rule of `owner` covers (empty: all are held)."""
    owned = list(owner)
    missing: list[PolicyRule] = []
    for rule in wanted:
        for atom in breakdown(rule):
            if not any(rule_covers(o, atom) for o in owned) and atom not in missing:
                missing.append(atom)
    return missing


def compact(rules: Sequence[PolicyRule]) -> list[PolicyRule]:
    """Atomic rules that differ only in their verb, merged into one rule (for the message)."""
    merged: dict[tuple[tuple[str, ...], ...], list[str]] = {}
    for rule in rules:
        key = (rule.api_groups, rule.resources, rule.resource_names, rule.non_resource_urls)
        verbs = merged.setdefault(key, [])
        verbs.extend(v for v in rule.verbs if v not in verbs)
    return [PolicyRule(tuple(verbs), *key) for key, verbs in merged.items()]


def _go_quoted(values: Sequence[str]) -> str:
    # Go's %q of a []string: ["a" "b"]
    inner = " ".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
    return f"[{inner}]"


def compact_string(rule: PolicyRule) -> str:
    parts = []
    if rule.api_groups:
        parts.append(f"APIGroups:{_go_quoted(rule.api_groups)}")
    if rule.resources:
        parts.append(f"Resources:{_go_quoted(rule.resources)}")
    if rule.non_resource_urls:
        parts.append(f"NonResourceURLs:{_go_quoted(rule.non_resource_urls)}")
    if rule.resource_names:
        parts.append(f"ResourceNames:{_go_quoted(rule.resource_names)}")
    if rule.verbs:
        parts.append(f"Verbs:{_go_quoted(rule.verbs)}")
    return "{" + ", ".join(parts) + "}"


def escalation_message(user: UserInfo, missing: Sequence[PolicyRule]) -> str:
    lines = sorted({compact_string(r) for r in compact(missing)})
    return (f'user "{user.name}" (groups={_go_quoted(user.groups)}) is attempting to grant RBAC '
            "permissions not currently held:\n" + "\n".join(lines))
