"""The review kinds: create-only questions to the authorizer and authenticator, never stored.

- `SelfSubjectAccessReview` (authorization.k8s.io/v1): may *I* do this? (`kubectl auth can-i`)
- `SubjectAccessReview`: may this user (spec.user/groups/uid/extra) do this? Exactly the identity
  given: no `system:authenticated` is added.
- `LocalSubjectAccessReview`: a SubjectAccessReview confined to the URL's namespace.
- `SelfSubjectRulesReview`: every rule I hold in spec.namespace (`kubectl auth can-i --list`).
- `SelfSubjectReview` (authentication.k8s.io/v1): who am I? (`kubectl auth whoami`)

Answers are the object sent with `status` filled: `allowed`, `denied` (always false: RBAC never
denies, it has no opinion), `reason`; for rules, `resourceRules`, `nonResourceRules` and
`incomplete`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from tether.local.errors import ApiError, Cause, bad_request, invalid
from tether.local.rbac.authorizer import (
    FULL_AUTHORITY,
    Attributes,
    Policy,
    UserInfo,
    authorize,
    rules_for,
)
from tether.objects import Obj

AUTHORIZATION = "authorization.k8s.io"
AUTHENTICATION = "authentication.k8s.io"
KINDS = frozenset({(AUTHORIZATION, "SelfSubjectAccessReview"), (AUTHORIZATION, "SubjectAccessReview"),
                   (AUTHORIZATION, "LocalSubjectAccessReview"), (AUTHORIZATION, "SelfSubjectRulesReview"),
                   (AUTHENTICATION, "SelfSubjectReview")})


def _spec(obj: Obj) -> Obj:
    spec = obj.get("spec")
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise bad_request("spec must be an object")
    return spec


def _text(raw: Mapping[str, Any], key: str) -> str:
    value = raw.get(key)
    return value if isinstance(value, str) else ""


def attributes(kind: str, user: UserInfo, spec: Obj) -> Attributes:
    """The question a review's spec asks, for `user`; 422 when it asks none or two."""
    resource = spec.get("resourceAttributes")
    non_resource = spec.get("nonResourceAttributes")
    if (resource is None) == (non_resource is None):
        raise invalid(kind, "", [Cause("FieldValueRequired",
                                       "exactly one of nonResourceAttributes or resourceAttributes must be specified",
                                       "spec.resourceAttributes")], AUTHORIZATION)
    if isinstance(resource, dict):
        return Attributes(user, _text(resource, "verb"), True, namespace=_text(resource, "namespace"),
                          api_group=_text(resource, "group"), api_version=_text(resource, "version"),
                          resource=_text(resource, "resource"), subresource=_text(resource, "subresource"),
                          name=_text(resource, "name"))
    if isinstance(non_resource, dict):
        return Attributes(user, _text(non_resource, "verb"), False, path=_text(non_resource, "path"))
    raise bad_request("resourceAttributes and nonResourceAttributes must be objects")


def _user_from_spec(kind: str, spec: Obj) -> UserInfo:
    name = _text(spec, "user")
    groups = tuple(g for g in spec.get("groups") or [] if isinstance(g, str))
    if not name and not groups:
        raise invalid(kind, "", [Cause("FieldValueRequired", "at least one of user or group must be specified",
                                       "spec.user")], AUTHORIZATION)
    extra_raw = spec.get("extra") or {}
    extra = tuple(sorted((str(k), tuple(str(v) for v in values or []))
                         for k, values in extra_raw.items())) if isinstance(extra_raw, dict) else ()
    return UserInfo(name, groups, _text(spec, "uid"), extra)


def _access_status(policy: Policy, attrs: Attributes) -> Obj:
    decision = authorize(policy, attrs)
    status: Obj = {"allowed": decision.allowed}
    if decision.reason:
        status["reason"] = decision.reason
    return status


def _rules_status(policy: Policy, user: UserInfo, namespace: str) -> Obj:
    rules = (list(FULL_AUTHORITY) if user.is_master() else []) + rules_for(policy, user, namespace)
    resource_rules, non_resource_rules = [], []
    for rule in rules:
        if rule.resources:
            entry: Obj = {"verbs": list(rule.verbs), "apiGroups": list(rule.api_groups),
                          "resources": list(rule.resources)}
            if rule.resource_names:
                entry["resourceNames"] = list(rule.resource_names)
            resource_rules.append(entry)
        if rule.non_resource_urls:
            non_resource_rules.append({"verbs": list(rule.verbs), "nonResourceURLs": list(rule.non_resource_urls)})
    return {"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": False}


def review(policy: Policy, group: str, kind: str, obj: Obj, *, user: UserInfo, namespace: str = "") -> Obj:
    """The answered review (`obj` is the request body, checked to be of this kind)."""
    answer = copy.deepcopy(obj)
    meta = answer.setdefault("metadata", {})
    meta.setdefault("creationTimestamp", None)
    spec = _spec(answer)
    if (group, kind) == (AUTHENTICATION, "SelfSubjectReview"):
        info: Obj = {"username": user.name, "groups": list(user.groups)}
        if user.uid:
            info["uid"] = user.uid
        if user.extra:
            info["extra"] = user.extra_dict()
        answer["status"] = {"userInfo": info}
        return answer
    if kind == "SelfSubjectAccessReview":
        answer["status"] = _access_status(policy, attributes(kind, user, spec))
    elif kind == "SubjectAccessReview":
        answer["status"] = _access_status(policy, attributes(kind, _user_from_spec(kind, spec), spec))
    elif kind == "LocalSubjectAccessReview":
        if spec.get("nonResourceAttributes") is not None:
            raise invalid(kind, "", [Cause("FieldValueForbidden", "disallowed on this kind of request",
                                           "spec.nonResourceAttributes")], AUTHORIZATION)
        resource = spec.get("resourceAttributes")
        if isinstance(resource, dict):
            asked = _text(resource, "namespace")
            if asked and asked != namespace:
                raise bad_request(f"spec.resourceAttributes.namespace must match namespace: {namespace}")
            resource["namespace"] = namespace
        meta["namespace"] = namespace
        answer["status"] = _access_status(policy, attributes(kind, _user_from_spec(kind, spec), spec))
    elif kind == "SelfSubjectRulesReview":
        wanted = _text(spec, "namespace")
        if not wanted:
            raise bad_request("no namespace on request")
        answer["status"] = _rules_status(policy, user, wanted)
    else:  # pragma: no cover - KINDS lists what reaches here
        raise ApiError(405, "MethodNotAllowed", f"{kind} is not a review kind")
    return answer
