"""Escalation coverage, impersonation headers, aggregation and the default policy, table-driven."""

from __future__ import annotations

import pytest

from tether.local.rbac import aggregation, escalation, impersonation, policy
from tether.local.rbac.authorizer import Attributes, PolicyRule, UserInfo


def r(verbs: str, groups: str = "", resources: str = "", names: str = "", urls: str = "") -> PolicyRule:
    def split(text: str) -> tuple[str, ...]:
        return tuple(text.split(",")) if text else ()

    return PolicyRule(split(verbs), tuple(g if g != "core" else "" for g in split(groups)), split(resources),
                      split(names), split(urls))


# escalation --------------------------------------------------------------------------------

ADMIN = (r("*", "*", "*"), r("*", urls="*"))


@pytest.mark.parametrize(("owner", "wanted", "missing"), [
    (ADMIN, [r("get,list", "core", "secrets")], []),
    ([r("get", "core", "pods")], [r("get", "core", "pods")], []),
    ([r("get", "core", "pods")], [r("get,list", "core", "pods")], [r("list", "core", "pods")]),
    ([r("get", "core", "pods")], [r("get", "core", "pods,secrets")], [r("get", "core", "secrets")]),
    ([r("*", "core", "pods")], [r("delete", "core", "pods")], []),
    ([r("get", "core", "pods")], [r("*", "core", "pods")], [r("*", "core", "pods")]),
    ([r("get", "*", "pods")], [r("get", "apps", "pods")], []),
    ([r("get", "apps", "*")], [r("get", "apps", "deployments/scale")], []),
    ([r("get", "core", "*/status")], [r("get", "core", "pods/status")], []),
    ([r("get", "core", "pods")], [r("get", "core", "pods/log")], [r("get", "core", "pods/log")]),
    # names: an owner without names covers any; with names, only those
    ([r("get", "core", "secrets")], [r("get", "core", "secrets", names="a")], []),
    ([r("get", "core", "secrets", names="a,b")], [r("get", "core", "secrets", names="b")], []),
    ([r("get", "core", "secrets", names="a")], [r("get", "core", "secrets")], [r("get", "core", "secrets")]),
    ([r("get", "core", "secrets", names="a")], [r("get", "core", "secrets", names="a,c")],
     [r("get", "core", "secrets", names="c")]),
    # URLs
    ([r("get", urls="/api/*")], [r("get", urls="/api/v1")], []),
    ([r("get", urls="/api")], [r("get", urls="/api/v1")], [r("get", urls="/api/v1")]),
    ([r("get", "core", "pods")], [r("bind", "rbac.authorization.k8s.io", "clusterroles")],
     [r("bind", "rbac.authorization.k8s.io", "clusterroles")]),
    # cluster-admin's rules are not held by someone with every verb on one resource
    ([r("*", "core", "pods")], list(ADMIN), [r("*", "*", "*"), r("*", urls="*")]),
])
def test_uncovered(owner: list[PolicyRule], wanted: list[PolicyRule], missing: list[PolicyRule]) -> None:
    assert escalation.uncovered(owner, wanted) == missing


def test_escalation_message_is_kube_apiservers() -> None:
    user = UserInfo("system:serviceaccount:t1:lim", ("system:serviceaccounts", "system:authenticated"))
    missing = escalation.uncovered([r("get", "core", "pods")], [r("get,list", "core", "secrets"),
                                                                r("get", urls="/metrics")])
    assert escalation.escalation_message(user, missing) == (
        'user "system:serviceaccount:t1:lim" (groups=["system:serviceaccounts" "system:authenticated"]) is '
        "attempting to grant RBAC permissions not currently held:\n"
        '{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}\n'
        '{NonResourceURLs:["/metrics"], Verbs:["get"]}')


# impersonation -----------------------------------------------------------------------------

ACTOR = UserInfo("hub", ("system:authenticated",))


@pytest.mark.parametrize(("headers", "expected"), [
    ({}, None),
    ({"impersonate-user": "bob"}, impersonation.Impersonation("bob")),
    ({"impersonate-user": "bob", "impersonate-group": "a, b", "impersonate-uid": "42",
      "impersonate-extra-scopes": "x, y", "impersonate-extra-acme.com%2fproject": "p"},
     impersonation.Impersonation("bob", ("a", "b"), "42", (("acme.com/project", ("p",)), ("scopes", ("x", "y"))),
                                 groups_given=True)),
])
def test_requested(headers: dict[str, str], expected: impersonation.Impersonation | None) -> None:
    assert impersonation.requested(headers) == expected


@pytest.mark.parametrize("headers", [{"impersonate-group": "a"}, {"impersonate-uid": "1"},
                                     {"impersonate-extra-k": "v"}])
def test_impersonating_without_a_user_is_refused(headers: dict[str, str]) -> None:
    with pytest.raises(impersonation.ImpersonationError, match="without impersonating a user"):
        impersonation.requested(headers)


def test_checks_cover_every_header() -> None:
    wanted = impersonation.requested({"impersonate-user": "system:serviceaccount:ns1:robot",
                                      "impersonate-group": "g1", "impersonate-uid": "u1",
                                      "impersonate-extra-scopes": "s1"})
    assert wanted is not None
    got = [(a.verb, a.api_group, a.resource, a.subresource, a.namespace, a.name)
           for a in impersonation.checks(ACTOR, wanted)]
    assert got == [
        ("impersonate", "", "serviceaccounts", "", "ns1", "robot"),
        ("impersonate", "", "groups", "", "", "g1"),
        ("impersonate", "authentication.k8s.io", "userextras", "scopes", "", "s1"),
        ("impersonate", "authentication.k8s.io", "uids", "", "", "u1"),
    ]
    user_check = impersonation.checks(ACTOR, impersonation.Impersonation("bob"))
    assert user_check == [Attributes(ACTOR, "impersonate", api_version="v1", resource="users", name="bob")]


@pytest.mark.parametrize(("wanted", "user"), [
    (impersonation.Impersonation("bob"), UserInfo("bob", ("system:authenticated",))),
    (impersonation.Impersonation("bob", ("devs",), groups_given=True),
     UserInfo("bob", ("devs", "system:authenticated"))),
    (impersonation.Impersonation("bob", ("system:unauthenticated",), groups_given=True),
     UserInfo("bob", ("system:unauthenticated",))),
    (impersonation.Impersonation("system:serviceaccount:ns1:robot"),
     UserInfo("system:serviceaccount:ns1:robot",
              ("system:serviceaccounts", "system:serviceaccounts:ns1", "system:authenticated"))),
    (impersonation.Impersonation("system:serviceaccount:ns1:robot", ("g",), groups_given=True),
     UserInfo("system:serviceaccount:ns1:robot", ("g", "system:authenticated"))),
    (impersonation.Impersonation("system:anonymous"), UserInfo("system:anonymous", ("system:unauthenticated",))),
])
def test_impersonated_identity(wanted: impersonation.Impersonation, user: UserInfo) -> None:
    assert impersonation.impersonated(wanted) == user


# aggregation -------------------------------------------------------------------------------


def _role(name: str, labels: dict[str, str], rules: list[dict[str, list[str]]],
          selectors: list[dict[str, object]] | None = None) -> dict[str, object]:
    role: dict[str, object] = {"metadata": {"name": name, "labels": labels}, "rules": rules}
    if selectors is not None:
        role["aggregationRule"] = {"clusterRoleSelectors": selectors}
    return role


GET_PODS = {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}
GET_CRS = {"verbs": ["get"], "apiGroups": ["example.com"], "resources": ["widgets"]}
VIEW_SELECTOR = [{"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}]


@pytest.mark.parametrize(("others", "expected"), [
    ([], []),
    ([_role("b", {"rbac.authorization.k8s.io/aggregate-to-view": "true"}, [GET_CRS]),
      _role("a", {"rbac.authorization.k8s.io/aggregate-to-view": "true"}, [GET_PODS, GET_CRS])],
     [GET_PODS, GET_CRS]),  # name order, each rule once
    ([_role("a", {"rbac.authorization.k8s.io/aggregate-to-view": "false"}, [GET_PODS])], []),
    ([_role("a", {}, [GET_PODS])], []),
])
def test_aggregated_rules(others: list[dict[str, object]], expected: list[object]) -> None:
    view = _role("view", {}, [GET_PODS], VIEW_SELECTOR)
    assert aggregation.aggregated_rules(view, [view, *others]) == expected


def test_a_role_without_aggregation_rule_is_left_alone() -> None:
    assert aggregation.aggregated_rules(_role("x", {}, [GET_PODS]), []) is None


def test_match_expressions_select_too() -> None:
    view = _role("view", {}, [], [{"matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]}])
    picked = _role("p", {"tier": "a"}, [GET_PODS])
    assert aggregation.aggregated_rules(view, [view, picked, _role("q", {"tier": "b"}, [GET_CRS])]) == [GET_PODS]


# the default policy ------------------------------------------------------------------------


def test_defaults_carry_bootstrap_label_and_autoupdate() -> None:
    for obj in policy.cluster_roles() + policy.cluster_role_bindings():
        assert obj["metadata"]["labels"]["kubernetes.io/bootstrapping"] == "rbac-defaults"
        assert obj["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"] == "true"
    bindings = {b["metadata"]["name"]: [s["name"] for s in b["subjects"]] for b in policy.cluster_role_bindings()}
    assert bindings == {"cluster-admin": ["system:masters"], "system:discovery": ["system:authenticated"],
                        "system:basic-user": ["system:authenticated"],
                        "system:public-info-viewer": ["system:authenticated", "system:unauthenticated"]}


def test_reconcile_adds_what_is_missing_and_keeps_extras() -> None:
    default = next(r for r in policy.cluster_roles() if r["metadata"]["name"] == "system:basic-user")
    assert policy.reconciled(default, None) == default
    assert policy.reconciled(default, default) is None
    extra = {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}
    edited = {**default, "rules": [extra], "metadata": {**default["metadata"], "labels": {"mine": "x"}}}
    fixed = policy.reconciled(default, edited)
    assert fixed is not None
    assert fixed["rules"] == [extra, *default["rules"]]
    assert fixed["metadata"]["labels"] == {"mine": "x", "kubernetes.io/bootstrapping": "rbac-defaults"}
    opted_out = {**edited, "metadata": {**edited["metadata"],
                                        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "false"}}}
    assert policy.reconciled(default, opted_out) is None
