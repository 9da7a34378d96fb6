"""The RBAC decision, table-driven: rules, subjects, scopes, reasons and messages."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pytest

from tether.local.rbac.authorizer import (
    Attributes,
    Binding,
    PolicyRule,
    RoleRef,
    Subject,
    UserInfo,
    authorize,
    forbidden_status_message,
    rule_allows,
    rules_for,
    service_account_user,
)


@dataclass
class TablePolicy:
    cluster_roles: dict[str, tuple[PolicyRule, ...]] = field(default_factory=dict)
    roles: dict[tuple[str, str], tuple[PolicyRule, ...]] = field(default_factory=dict)
    cluster_bindings: list[Binding] = field(default_factory=list)
    bindings: list[Binding] = field(default_factory=list)

    def cluster_role_rules(self, name: str) -> tuple[PolicyRule, ...] | None:
        return self.cluster_roles.get(name)

    def role_rules(self, namespace: str, name: str) -> tuple[PolicyRule, ...] | None:
        return self.roles.get((namespace, name))

    def cluster_role_bindings(self, user: UserInfo) -> Iterable[Binding]:
        return self.cluster_bindings

    def role_bindings(self, namespace: str, user: UserInfo) -> Iterable[Binding]:
        return [b for b in self.bindings if b.namespace == namespace]


def rule(verbs: str, resources: str = "", names: str = "", urls: str = "") -> PolicyRule:
    """A core-group rule (or a non-resource one), from comma lists."""
    def split(text: str) -> tuple[str, ...]:
        return tuple(text.split(",")) if text else ()

    return PolicyRule(split(verbs), ("",) if resources else (), split(resources), split(names), split(urls))


def res(verb: str, resource: str, *, ns: str = "", group: str = "", sub: str = "", name: str = "",
        user: UserInfo | None = None) -> Attributes:
    return Attributes(user or UserInfo("u"), verb, True, namespace=ns, api_group=group, resource=resource,
                      subresource=sub, name=name)


def path(verb: str, url: str) -> Attributes:
    return Attributes(UserInfo("u"), verb, False, path=url)


@pytest.mark.parametrize(("rule_", "attrs", "allowed"), [
    (rule("get", resources="pods"), res("get", "pods"), True),
    (rule("get", resources="pods"), res("list", "pods"), False),
    (rule("*", resources="pods"), res("deletecollection", "pods"), True),
    (rule("get", resources="pods"), res("get", "pods", group="apps"), False),
    (PolicyRule(("get",), ("*",), ("deployments",)), res("get", "deployments", group="apps"), True),
    (PolicyRule(("get",), ("apps",), ("deployments",)), res("get", "deployments", group="apps"), True),
    (rule("get", resources="*"), res("get", "secrets"), True),
    # subresources: `pods` is not `pods/log`; `*` and `*/log` are
    (rule("get", resources="pods"), res("get", "pods", sub="log"), False),
    (rule("get", resources="pods/log"), res("get", "pods", sub="log"), True),
    (rule("get", resources="pods/log"), res("get", "pods"), False),
    (rule("get", resources="*/log"), res("get", "pods", sub="log"), True),
    (rule("get", resources="*/log"), res("get", "pods"), False),
    (rule("get", resources="*"), res("get", "pods", sub="exec"), True),
    (PolicyRule(("get",), ("cluster.tether.io",), ("clusters/proxy",), ("c1",)),
     res("get", "clusters", group="cluster.tether.io", sub="proxy", name="c1"), True),
    (PolicyRule(("get",), ("cluster.tether.io",), ("clusters/proxy",), ("c1",)),
     res("get", "clusters", group="cluster.tether.io", sub="proxy", name="c2"), False),
    # resourceNames: only requests that name one of them
    (rule("get", resources="secrets", names="a,b"), res("get", "secrets", name="b"), True),
    (rule("get", resources="secrets", names="a"), res("get", "secrets", name="c"), False),
    (rule("list", resources="secrets", names="a"), res("list", "secrets"), False),
    (rule("create", resources="secrets", names="a"), res("create", "secrets"), False),
    (rule("watch", resources="pods", names="p"), res("watch", "pods", name="p"), True),
    # non-resource URLs
    (rule("get", urls="/healthz"), path("get", "/healthz"), True),
    (rule("get", urls="/healthz"), path("get", "/healthz/etcd"), False),
    (rule("get", urls="/healthz/*"), path("get", "/healthz/etcd"), True),
    (rule("get", urls="/api/*"), path("get", "/api"), False),
    (rule("get", urls="/api*"), path("get", "/apis/apps"), True),
    (rule("get", urls="*"), path("get", "/anything"), True),
    (rule("post", urls="/healthz"), path("get", "/healthz"), False),
    # a resource rule says nothing about paths, and the reverse
    (rule("*", resources="*"), path("get", "/version"), False),
    (rule("*", urls="*"), res("get", "pods"), False),
])
def test_rule_allows(rule_: PolicyRule, attrs: Attributes, allowed: bool) -> None:
    assert rule_allows(rule_, attrs) is allowed


SA = service_account_user("team", "bot")
ALICE = UserInfo("alice", ("devs", "system:authenticated"))


def _binding(kind: str, name: str, ref_kind: str, ref: str, *subjects: Subject, ns: str = "") -> Binding:
    return Binding(kind, name, ns, RoleRef(ref_kind, ref), subjects)


POLICY = TablePolicy(
    cluster_roles={
        "pod-reader": (rule("get,list", resources="pods"),),
        "secret-reader": (rule("get", resources="secrets"),),
        "node-reader": (rule("get", resources="nodes"),),
        "health": (rule("get", urls="/healthz"),),
    },
    roles={("team", "cm-writer"): (rule("create,update", resources="configmaps"),),
           ("other", "cm-writer"): (rule("delete", resources="configmaps"),)},
    cluster_bindings=[
        _binding("ClusterRoleBinding", "devs-nodes", "ClusterRole", "node-reader", Subject("Group", "devs")),
        _binding("ClusterRoleBinding", "all-health", "ClusterRole", "health", Subject("Group", "system:authenticated")),
        # a ClusterRoleBinding to a Role is meaningless and grants nothing
        _binding("ClusterRoleBinding", "bogus", "Role", "cm-writer", Subject("User", "alice")),
    ],
    bindings=[
        _binding("RoleBinding", "bot-pods", "ClusterRole", "pod-reader",
                 Subject("ServiceAccount", "bot", "team"), ns="team"),
        _binding("RoleBinding", "bot-cm", "Role", "cm-writer", Subject("ServiceAccount", "bot"), ns="team"),
        _binding("RoleBinding", "alice-secrets", "ClusterRole", "secret-reader", Subject("User", "alice"), ns="team"),
        _binding("RoleBinding", "missing-role", "Role", "nope", Subject("User", "alice"), ns="team"),
        # a SA subject without namespace in another namespace's binding means *that* namespace
        _binding("RoleBinding", "other-bot", "Role", "cm-writer", Subject("ServiceAccount", "bot"), ns="other"),
    ],
)


@pytest.mark.parametrize(("attrs", "allowed", "reason"), [
    (res("get", "pods", ns="team", user=SA), True,
     'RBAC: allowed by RoleBinding "bot-pods/team" of ClusterRole "pod-reader" to ServiceAccount "bot/team"'),
    (res("get", "pods", ns="other", user=SA), False, ""),
    (res("get", "pods", user=SA), False, ""),  # a RoleBinding grants nothing cluster-wide
    (res("update", "configmaps", ns="team", user=SA), True,
     'RBAC: allowed by RoleBinding "bot-cm/team" of Role "cm-writer" to ServiceAccount "bot/team"'),
    (res("delete", "configmaps", ns="other", user=SA), False, ""),  # that SA subject means other:bot
    (res("get", "secrets", ns="team", user=SA), False, ""),
    (res("get", "secrets", ns="team", user=ALICE), True,
     'RBAC: allowed by RoleBinding "alice-secrets/team" of ClusterRole "secret-reader" to User "alice"'),
    (res("get", "secrets", ns="default", user=ALICE), False, ""),
    (res("get", "nodes", user=ALICE), True,
     'RBAC: allowed by ClusterRoleBinding "devs-nodes" of ClusterRole "node-reader" to Group "devs"'),
    (res("get", "nodes", ns="team", user=ALICE), True,
     'RBAC: allowed by ClusterRoleBinding "devs-nodes" of ClusterRole "node-reader" to Group "devs"'),
    (res("create", "configmaps", ns="team", user=ALICE), False, ""),
    (Attributes(SA, "get", False, path="/healthz"), True,
     'RBAC: allowed by ClusterRoleBinding "all-health" of ClusterRole "health" to Group "system:authenticated"'),
    (Attributes(UserInfo("anon", ("system:unauthenticated",)), "get", False, path="/healthz"), False, ""),
    # system:masters may do everything, whatever RBAC says
    (res("delete", "nodes", user=UserInfo("root", ("system:masters",))), True, ""),
    # a user named like a group is not in it
    (res("get", "nodes", user=UserInfo("devs")), False, ""),
])
def test_authorize(attrs: Attributes, allowed: bool, reason: str) -> None:
    decision = authorize(POLICY, attrs)
    assert (decision.allowed, decision.reason) == (allowed, reason)


def test_rules_for_collects_cluster_and_namespace_rules() -> None:
    assert set(rules_for(POLICY, SA, "team")) == {rule("get,list", resources="pods"),
                                                  rule("create,update", resources="configmaps"),
                                                  rule("get", urls="/healthz")}
    assert rules_for(POLICY, SA, "") == [rule("get", urls="/healthz")]


@pytest.mark.parametrize(("attrs", "message"), [
    (res("list", "secrets", ns="t1", user=SA),
     'secrets is forbidden: User "system:serviceaccount:team:bot" cannot list resource "secrets" in API group "" '
     'in the namespace "t1"'),
    (res("get", "deployments", ns="t1", group="apps", name="web", sub="scale", user=SA),
     'deployments.apps "web" is forbidden: User "system:serviceaccount:team:bot" cannot get resource '
     '"deployments/scale" in API group "apps" in the namespace "t1"'),
    (res("create", "clusterrolebindings", group="rbac.authorization.k8s.io", user=SA),
     'clusterrolebindings.rbac.authorization.k8s.io is forbidden: User "system:serviceaccount:team:bot" cannot '
     'create resource "clusterrolebindings" in API group "rbac.authorization.k8s.io" at the cluster scope'),
    (Attributes(SA, "get", False, path="/metrics"),
     'forbidden: User "system:serviceaccount:team:bot" cannot get path "/metrics"'),
])
def test_forbidden_message(attrs: Attributes, message: str) -> None:
    assert forbidden_status_message(attrs) == message
