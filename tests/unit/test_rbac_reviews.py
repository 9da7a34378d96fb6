"""The review kinds answered from a policy table: access reviews, rules review, whoami."""

from __future__ import annotations

from typing import Any

import pytest
from test_rbac_authorizer import TablePolicy, _binding

from tether.local.errors import ApiError
from tether.local.rbac.authorizer import PolicyRule, Subject, UserInfo, service_account_user
from tether.local.rbac.reviews import review

AUTHZ = "authorization.k8s.io"
POLICY = TablePolicy(
    cluster_roles={"pod-reader": (PolicyRule(("get",), ("",), ("pods",)),),
                   "health": (PolicyRule(("get",), non_resource_urls=("/healthz",)),)},
    cluster_bindings=[_binding("ClusterRoleBinding", "all-health", "ClusterRole", "health",
                               Subject("Group", "system:authenticated"))],
    bindings=[_binding("RoleBinding", "bot-pods", "ClusterRole", "pod-reader", Subject("User", "bob"), ns="t1")],
)
BOB = UserInfo("bob", ("system:authenticated",))


def _body(kind: str, spec: dict[str, Any], group: str = AUTHZ) -> dict[str, Any]:
    return {"apiVersion": f"{group}/v1", "kind": kind, "spec": spec}


@pytest.mark.parametrize(("kind", "spec", "status"), [
    ("SelfSubjectAccessReview", {"resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "t1"}},
     {"allowed": True, "reason": 'RBAC: allowed by RoleBinding "bot-pods/t1" of ClusterRole "pod-reader" to User "bob"'}),
    ("SelfSubjectAccessReview", {"resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "t2"}},
     {"allowed": False}),
    ("SelfSubjectAccessReview", {"nonResourceAttributes": {"verb": "get", "path": "/healthz"}},
     {"allowed": True, "reason": 'RBAC: allowed by ClusterRoleBinding "all-health" of ClusterRole "health" '
                                 'to Group "system:authenticated"'}),
    # a SubjectAccessReview is about exactly the identity given: no system:authenticated added
    ("SubjectAccessReview", {"user": "bob", "nonResourceAttributes": {"verb": "get", "path": "/healthz"}},
     {"allowed": False}),
    ("SubjectAccessReview", {"user": "bob", "resourceAttributes": {"verb": "get", "resource": "pods",
                                                                   "namespace": "t1"}},
     {"allowed": True, "reason": 'RBAC: allowed by RoleBinding "bot-pods/t1" of ClusterRole "pod-reader" to User "bob"'}),
    ("SubjectAccessReview", {"user": "eve", "groups": ["system:masters"],
                             "resourceAttributes": {"verb": "delete", "resource": "nodes"}}, {"allowed": True}),
])
def test_access_reviews(kind: str, spec: dict[str, Any], status: dict[str, Any]) -> None:
    assert review(POLICY, AUTHZ, kind, _body(kind, spec), user=BOB)["status"] == status


def test_local_subject_access_review_is_confined_to_its_namespace() -> None:
    spec = {"user": "bob", "resourceAttributes": {"verb": "get", "resource": "pods"}}
    answer = review(POLICY, AUTHZ, "LocalSubjectAccessReview", _body("LocalSubjectAccessReview", spec),
                    user=BOB, namespace="t1")
    assert answer["status"]["allowed"] is True
    assert answer["spec"]["resourceAttributes"]["namespace"] == "t1"
    other = {"user": "bob", "resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "t2"}}
    with pytest.raises(ApiError) as refused:
        review(POLICY, AUTHZ, "LocalSubjectAccessReview", _body("LocalSubjectAccessReview", other),
               user=BOB, namespace="t1")
    assert refused.value.code == 400


@pytest.mark.parametrize(("kind", "spec", "code"), [
    ("SelfSubjectAccessReview", {}, 422),
    ("SelfSubjectAccessReview", {"resourceAttributes": {"verb": "get"}, "nonResourceAttributes": {"verb": "get"}}, 422),
    ("SubjectAccessReview", {"resourceAttributes": {"verb": "get", "resource": "pods"}}, 422),
    ("SelfSubjectRulesReview", {}, 400),
])
def test_malformed_reviews(kind: str, spec: dict[str, Any], code: int) -> None:
    with pytest.raises(ApiError) as refused:
        review(POLICY, AUTHZ, kind, _body(kind, spec), user=BOB)
    assert refused.value.code == code


def test_rules_review_lists_resource_and_path_rules() -> None:
    answer = review(POLICY, AUTHZ, "SelfSubjectRulesReview", _body("SelfSubjectRulesReview", {"namespace": "t1"}),
                    user=BOB)
    assert answer["status"] == {
        "resourceRules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}],
        "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}],
        "incomplete": False,
    }
    masters = review(POLICY, AUTHZ, "SelfSubjectRulesReview", _body("SelfSubjectRulesReview", {"namespace": "t1"}),
                     user=UserInfo("root", ("system:masters",)))
    assert {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]} in masters["status"]["resourceRules"]


def test_self_subject_review_is_the_caller() -> None:
    user = service_account_user("t1", "bot")
    answer = review(POLICY, "authentication.k8s.io", "SelfSubjectReview",
                    {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}, user=user)
    assert answer["status"]["userInfo"] == {
        "username": "system:serviceaccount:t1:bot",
        "groups": ["system:serviceaccounts", "system:serviceaccounts:t1", "system:authenticated"]}
