"""RBAC in the request path of a local cluster's API server.

The order is kube-apiserver's: authentication, then impersonation (each `Impersonate-*` header
authorized for the caller with the verb `impersonate`), then authorization of the request as the
resulting user, then the handler. Writes then pass admission, where this module adds two checks
kube-apiserver does inside its storage layer:

- a PATCH (server-side apply) or PUT that would *create* the object also needs `create`;
- writes of Roles, ClusterRoles and bindings must not grant more than the writer holds
  (`escalation`), unless the writer may `escalate` the role or `bind` the referenced role, or is
  in `system:masters`. A ClusterRole with an `aggregationRule` can gather anything, so setting
  one needs cluster-admin's permissions.

Internal controllers call `Operations` directly and carry no request identity: they pass
admission unchecked, as the real control plane's own components are authorized.
"""

from __future__ import annotations

import contextvars
import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tether.local.errors import ApiError, bad_request, not_found
from tether.local.rbac import escalation, impersonation, requestinfo
from tether.local.rbac.authorizer import (
    ANONYMOUS,
    AUTHENTICATED,
    FULL_AUTHORITY,
    RBAC_GROUP,
    UNAUTHENTICATED,
    Attributes,
    Decision,
    Policy,
    PolicyRule,
    UserInfo,
    authorize,
    forbidden_status_message,
    rules_for,
    rules_of,
)
from tether.local.rbac.requestinfo import RequestInfo
from tether.local.resources import ResourceType
from tether.objects import Obj

log = logging.getLogger(__name__)

ANONYMOUS_USER = UserInfo(ANONYMOUS, (UNAUTHENTICATED,))
ROLE_KINDS = frozenset({"Role", "ClusterRole"})
BINDING_KINDS = frozenset({"RoleBinding", "ClusterRoleBinding"})
# Fields a garbage collector may change on any object without it counting as a grant.
_IGNORED_META = ("ownerReferences", "finalizers", "managedFields", "resourceVersion", "generation",
                 "creationTimestamp", "uid", "deletionTimestamp", "deletionGracePeriodSeconds")


@dataclass(frozen=True)
class RequestContext:
    user: UserInfo
    info: RequestInfo


# The identity and request being served; None inside controllers (no HTTP request).
CURRENT: contextvars.ContextVar[RequestContext | None] = contextvars.ContextVar("rbac_request", default=None)


def certificate_user(peer_cert: Mapping[str, Any]) -> UserInfo | None:
    """The user of a verified client certificate: CN the name, each O a group; None without a
    CN (Kubernetes' x509 authenticator does not authenticate such a certificate)."""
    name = ""
    groups: list[str] = []
    for rdn in peer_cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and not name:
                name = str(value)
            elif key == "organizationName":
                groups.append(str(value))
    if not name:
        return None
    return UserInfo(name, tuple(dict.fromkeys([*groups, AUTHENTICATED])))


def forbidden(attrs: Attributes, reason: str = "") -> ApiError:
    # Who was refused what, never credentials: what an operator needs to fix a role.
    log.info("RBAC: %s", forbidden_status_message(attrs, reason))
    return ApiError(403, "Forbidden", forbidden_status_message(attrs, reason), name=attrs.name,
                    kind=attrs.resource, group=attrs.api_group)


class Enforcer:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def authorize(self, attrs: Attributes) -> Decision:
        return authorize(self.policy, attrs)

    # the request path ---------------------------------------------------------------------

    def impersonate(self, actor: UserInfo, headers: Mapping[str, str]) -> UserInfo:
        """The user the request runs as: `actor`, or whom it may impersonate (400/403 else)."""
        try:
            wanted = impersonation.requested(headers)
        except impersonation.ImpersonationError as exc:
            raise bad_request(str(exc)) from None
        if wanted is None:
            return actor
        for attrs in impersonation.checks(actor, wanted):
            decision = self.authorize(attrs)
            if not decision.allowed:
                raise forbidden(attrs, decision.reason)
        return impersonation.impersonated(wanted)

    def admit_request(self, user: UserInfo, method: str, path: str,
                      query: Mapping[str, list[str]]) -> RequestInfo:
        """The request's authorization attributes; 403 when RBAC does not allow them."""
        info = requestinfo.resolve(method, path, query)
        attrs = attributes_of(user, info)
        decision = self.authorize(attrs)
        if not decision.allowed:
            raise forbidden(attrs, decision.reason)
        return info

    # admission (inside Operations, for requests only) ---------------------------------------

    def admission(self, rt: ResourceType, obj: Obj, current: Obj | None) -> None:
        context = CURRENT.get()
        if context is None:
            return
        if current is None and context.info.resource_request and context.info.verb in ("patch", "update"):
            attrs = attributes_of(context.user, context.info, verb="create")
            decision = self.authorize(attrs)
            if not decision.allowed:
                raise forbidden(attrs, decision.reason)
        if rt.group != RBAC_GROUP or context.user.is_master():
            return
        if current is not None and _same_but_gc(obj, current):
            return
        if rt.kind in ROLE_KINDS:
            self._check_role(context.user, rt, obj, current)
        elif rt.kind in BINDING_KINDS:
            self._check_binding(context.user, rt, obj)

    def _check_role(self, user: UserInfo, rt: ResourceType, obj: Obj, current: Obj | None) -> None:
        meta = obj.get("metadata") or {}
        name, namespace = str(meta.get("name", "")), str(meta.get("namespace") or "")
        may_escalate = Attributes(user, "escalate", namespace=namespace, api_group=RBAC_GROUP, api_version="v1",
                                  resource=rt.plural, name=name)
        if self.authorize(may_escalate).allowed:
            return
        self._confirm_held(user, namespace if rt.namespaced else "", rules_of(obj), rt, name)
        aggregation = obj.get("aggregationRule")
        changed = current is None or current.get("aggregationRule") != aggregation
        if (rt.kind == "ClusterRole" and aggregation and changed
                and escalation.uncovered(rules_for(self.policy, user, ""), FULL_AUTHORITY)):
            raise ApiError(403, "Forbidden", f'{rt.qualified} "{name}" is forbidden: must have cluster-admin '
                               "privileges to use the aggregationRule", name=name, kind=rt.plural, group=rt.group)

    def _check_binding(self, user: UserInfo, rt: ResourceType, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        name, namespace = str(meta.get("name", "")), str(meta.get("namespace") or "")
        ref = obj.get("roleRef") or {}
        ref_kind, ref_name = str(ref.get("kind", "")), str(ref.get("name", ""))
        ref_resource = "roles" if ref_kind == "Role" else "clusterroles"
        may_bind = Attributes(user, "bind", namespace=namespace, api_group=RBAC_GROUP, api_version="v1",
                              resource=ref_resource, name=ref_name)
        if self.authorize(may_bind).allowed:
            return
        if ref_kind == "Role":
            rules = self.policy.role_rules(namespace, ref_name)
        elif ref_kind == "ClusterRole":
            rules = self.policy.cluster_role_rules(ref_name)
        else:
            rules = None
        if rules is None:
            raise not_found(ref_resource, ref_name, RBAC_GROUP)
        self._confirm_held(user, namespace, rules, rt, name)

    def _confirm_held(self, user: UserInfo, namespace: str, rules: tuple[PolicyRule, ...] | list[PolicyRule],
                      rt: ResourceType, name: str) -> None:
        missing = escalation.uncovered(rules_for(self.policy, user, namespace), rules)
        if missing:
            raise ApiError(403, "Forbidden",
                           f'{rt.qualified} "{name}" is forbidden: {escalation.escalation_message(user, missing)}',
                           name=name, kind=rt.plural, group=rt.group)


def attributes_of(user: UserInfo, info: RequestInfo, *, verb: str = "") -> Attributes:
    return Attributes(user, verb or info.verb, info.resource_request, namespace=info.namespace,
                      api_group=info.api_group, api_version=info.api_version, resource=info.resource,
                      subresource=info.subresource, name=info.name, path=info.path)


def _same_but_gc(new: Obj, old: Obj) -> bool:
    """True when `new` differs from `old` only in what a garbage collector may change."""
    def stripped(obj: Obj) -> Obj:
        out = copy.copy(obj)
        meta = dict(out.get("metadata") or {})
        for key in _IGNORED_META:
            meta.pop(key, None)
        out["metadata"] = meta
        out.pop("status", None)
        return out

    return stripped(new) == stripped(old)
