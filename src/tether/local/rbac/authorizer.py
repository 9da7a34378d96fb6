"""The RBAC decision: may this user do this verb on this resource (or path)?

The semantics are the Kubernetes RBAC authorizer's:

- permissions only add up; nothing denies. A request is allowed when one rule of one role bound
  to the user matches it, and gets "no opinion" otherwise (the API server then refuses it);
- ClusterRoleBindings grant their ClusterRole everywhere; RoleBindings grant their Role or
  ClusterRole only in the binding's namespace;
- a rule matches a resource request when its verbs, apiGroups, resources and resourceNames all
  match: `*` matches everything in its field, `*/status` matches the `status` subresource of any
  resource, `pods` does not match `pods/log`, and a rule with resourceNames never matches a
  request without a name (list, create);
- a rule matches a non-resource request when its verbs match and one of its nonResourceURLs is
  the path, `*`, or ends in `*` and is a prefix of the path;
- a subject matches a user by name (User), by membership (Group), or as
  `system:serviceaccount:<namespace>:<name>` (ServiceAccount; a RoleBinding's subject without a
  namespace means the binding's namespace);
- members of `system:masters` are allowed everything, before RBAC is asked (kube-apiserver's
  privileged-group authorizer), so deleting the `cluster-admin` binding cannot lock them out.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

SYSTEM_MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
ANONYMOUS = "system:anonymous"
SERVICEACCOUNTS = "system:serviceaccounts"
SA_PREFIX = "system:serviceaccount:"
RBAC_GROUP = "rbac.authorization.k8s.io"
ALL = "*"


@dataclass(frozen=True)
class UserInfo:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def is_master(self) -> bool:
        return SYSTEM_MASTERS in self.groups

    def extra_dict(self) -> dict[str, list[str]]:
        return {key: list(values) for key, values in self.extra}


def service_account_user(namespace: str, name: str) -> UserInfo:
    """The identity a ServiceAccount token stands for, with the groups Kubernetes gives it."""
    return UserInfo(f"{SA_PREFIX}{namespace}:{name}", (*service_account_groups(namespace), AUTHENTICATED))


def service_account_groups(namespace: str) -> tuple[str, ...]:
    return (SERVICEACCOUNTS, f"{SERVICEACCOUNTS}:{namespace}")


def split_service_account(username: str) -> tuple[str, str] | None:
    """(namespace, name) of `system:serviceaccount:<ns>:<name>`, else None."""
    if not username.startswith(SA_PREFIX):
        return None
    namespace, sep, name = username[len(SA_PREFIX):].partition(":")
    if not sep or not namespace or not name or ":" in name:
        return None
    return namespace, name


@dataclass(frozen=True)
class Attributes:
    """What a request asks to do (kube-apiserver's authorizer.Attributes)."""

    user: UserInfo
    verb: str
    resource_request: bool = True
    namespace: str = ""
    api_group: str = ""
    api_version: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""
    path: str = ""


@dataclass(frozen=True)
class PolicyRule:
    verbs: tuple[str, ...]
    api_groups: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    resource_names: tuple[str, ...] = ()
    non_resource_urls: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> PolicyRule:
        return cls(
            verbs=_strings(raw.get("verbs")),
            api_groups=_strings(raw.get("apiGroups")),
            resources=_strings(raw.get("resources")),
            resource_names=_strings(raw.get("resourceNames")),
            non_resource_urls=_strings(raw.get("nonResourceURLs")),
        )

    def to_dict(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {"verbs": list(self.verbs)}
        if self.api_groups:
            out["apiGroups"] = list(self.api_groups)
        if self.resources:
            out["resources"] = list(self.resources)
        if self.resource_names:
            out["resourceNames"] = list(self.resource_names)
        if self.non_resource_urls:
            out["nonResourceURLs"] = list(self.non_resource_urls)
        return out


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(str(v) for v in value if isinstance(v, str))


def rules_of(obj: Mapping[str, Any]) -> tuple[PolicyRule, ...]:
    rules = obj.get("rules")
    if not isinstance(rules, list):
        return ()
    return tuple(PolicyRule.from_dict(r) for r in rules if isinstance(r, dict))


@dataclass(frozen=True)
class Subject:
    kind: str  # User | Group | ServiceAccount
    name: str
    namespace: str = ""


@dataclass(frozen=True)
class RoleRef:
    kind: str  # Role | ClusterRole
    name: str


@dataclass(frozen=True)
class Binding:
    kind: str  # RoleBinding | ClusterRoleBinding
    name: str
    namespace: str
    role_ref: RoleRef
    subjects: tuple[Subject, ...] = field(default_factory=tuple)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Binding:
        meta = obj.get("metadata") or {}
        ref = obj.get("roleRef") or {}
        subjects = []
        for raw in obj.get("subjects") or []:
            if isinstance(raw, dict):
                subjects.append(Subject(str(raw.get("kind", "")), str(raw.get("name", "")),
                                        str(raw.get("namespace") or "")))
        return cls(
            kind=str(obj.get("kind", "")),
            name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace") or ""),
            role_ref=RoleRef(str(ref.get("kind", "")), str(ref.get("name", ""))),
            subjects=tuple(subjects),
        )


class Policy(Protocol):
    """The RBAC objects the authorizer reads (an index in memory, or a table in a test)."""

    def cluster_role_rules(self, name: str) -> tuple[PolicyRule, ...] | None: ...

    def role_rules(self, namespace: str, name: str) -> tuple[PolicyRule, ...] | None: ...

    def cluster_role_bindings(self, user: UserInfo) -> Iterable[Binding]:
        """At least every ClusterRoleBinding that names the user, or a group of it (more is fine)."""
        ...

    def role_bindings(self, namespace: str, user: UserInfo) -> Iterable[Binding]:
        """At least every RoleBinding in `namespace` that names the user or a group of it."""
        ...


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


# matching ----------------------------------------------------------------------------------


def verb_matches(rule: PolicyRule, verb: str) -> bool:
    return ALL in rule.verbs or verb in rule.verbs


def group_matches(rule: PolicyRule, group: str) -> bool:
    return ALL in rule.api_groups or group in rule.api_groups


def resource_matches(rule: PolicyRule, resource: str, subresource: str) -> bool:
    combined = f"{resource}/{subresource}" if subresource else resource
    for candidate in rule.resources:
        if candidate in (ALL, combined):
            return True
        if subresource and candidate == f"*/{subresource}":
            return True
    return False


def name_matches(rule: PolicyRule, name: str) -> bool:
    return not rule.resource_names or name in rule.resource_names


def url_matches(pattern: str, path: str) -> bool:
    if pattern in (ALL, path):
        return True
    return pattern.endswith("*") and path.startswith(pattern.rstrip("*"))


def rule_allows(rule: PolicyRule, attrs: Attributes) -> bool:
    if attrs.resource_request:
        return (verb_matches(rule, attrs.verb) and group_matches(rule, attrs.api_group)
                and resource_matches(rule, attrs.resource, attrs.subresource)
                and name_matches(rule, attrs.name))
    return verb_matches(rule, attrs.verb) and any(url_matches(u, attrs.path) for u in rule.non_resource_urls)


def applies_to(user: UserInfo, subject: Subject, binding_namespace: str) -> bool:
    if subject.kind == "User":
        return user.name == subject.name
    if subject.kind == "Group":
        return subject.name in user.groups
    if subject.kind == "ServiceAccount":
        namespace = subject.namespace or binding_namespace
        return bool(namespace) and user.name == f"{SA_PREFIX}{namespace}:{subject.name}"
    return False


def binding_applies(user: UserInfo, binding: Binding) -> Subject | None:
    for subject in binding.subjects:
        if applies_to(user, subject, binding.namespace):
            return subject
    return None


# decisions ---------------------------------------------------------------------------------


def _bound_rules(policy: Policy, user: UserInfo, namespace: str
                 ) -> Iterator[tuple[Binding, Subject, tuple[PolicyRule, ...]]]:
    """(binding, the subject that matched, the rules it grants) for each binding of the user:
    ClusterRoleBindings first, then the RoleBindings of `namespace` (when given)."""
    for binding in policy.cluster_role_bindings(user):
        subject = binding_applies(user, binding)
        if subject is None or binding.role_ref.kind != "ClusterRole":
            continue
        rules = policy.cluster_role_rules(binding.role_ref.name)
        if rules:
            yield binding, subject, rules
    if not namespace:
        return
    for binding in policy.role_bindings(namespace, user):
        subject = binding_applies(user, binding)
        if subject is None:
            continue
        if binding.role_ref.kind == "ClusterRole":
            rules = policy.cluster_role_rules(binding.role_ref.name)
        elif binding.role_ref.kind == "Role":
            rules = policy.role_rules(namespace, binding.role_ref.name)
        else:
            rules = None
        if rules:
            yield binding, subject, rules


def authorize(policy: Policy, attrs: Attributes) -> Decision:
    if attrs.user.is_master():
        return Decision(True, "")
    for binding, subject, rules in _bound_rules(policy, attrs.user, attrs.namespace):
        if any(rule_allows(rule, attrs) for rule in rules):
            return Decision(True, _allowed_reason(binding, subject))
    return Decision(False, "")


def _allowed_reason(binding: Binding, subject: Subject) -> str:
    where = f'"{binding.name}"' if binding.kind == "ClusterRoleBinding" else f'"{binding.name}/{binding.namespace}"'
    who = subject.name if subject.kind != "ServiceAccount" else f"{subject.name}/{subject.namespace or binding.namespace}"
    return (f"RBAC: allowed by {binding.kind} {where} of {binding.role_ref.kind} "
            f'"{binding.role_ref.name}" to {subject.kind} "{who}"')


def rules_for(policy: Policy, user: UserInfo, namespace: str) -> list[PolicyRule]:
    """Every rule RBAC grants the user in `namespace` ("" for the cluster scope only).

    For `system:masters` members this is only what their bindings say; that they may do
    everything anyway is the caller's to add (as kube-apiserver's privileged-group authorizer).
    """
    out: list[PolicyRule] = []
    for _, _, rules in _bound_rules(policy, user, namespace):
        out.extend(rules)
    return out


FULL_AUTHORITY = (
    PolicyRule(verbs=(ALL,), api_groups=(ALL,), resources=(ALL,)),
    PolicyRule(verbs=(ALL,), non_resource_urls=(ALL,)),
)


def forbidden_message(attrs: Attributes) -> str:
    """kube-apiserver's reason text for a refused request (without the `<kind> is forbidden:`)."""
    user = attrs.user.name
    if not attrs.resource_request:
        return f'User "{user}" cannot {attrs.verb} path "{attrs.path}"'
    resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    if attrs.namespace:
        return (f'User "{user}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.api_group}" '
                f'in the namespace "{attrs.namespace}"')
    return f'User "{user}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.api_group}" at the cluster scope'


def forbidden_status_message(attrs: Attributes, reason: str = "") -> str:
    """The whole message of a 403 `Status` (apimachinery's NewForbidden around the reason)."""
    text = forbidden_message(attrs)
    if reason:
        text = f"{text}: {reason}"
    if not attrs.resource_request:
        return f"forbidden: {text}"
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    if attrs.name:
        return f'{qualified} "{attrs.name}" is forbidden: {text}'
    return f"{qualified} is forbidden: {text}"
