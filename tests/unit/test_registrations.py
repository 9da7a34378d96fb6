"""Least-privilege pull registration, pure parts: the bootstrap token's objects and rights, the
registry controller's decisions, the local clusters' bootstrap-token authenticator."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tether.federation import bootstrap as b
from tether.federation import registrations as r
from tether.local import bootstrap_tokens as bt

NOW = 1_000_000.0


def _token(cluster: str = "m1", expires: float | None = NOW + 60, **labels: str) -> dict[str, Any]:
    secret = b.bootstrap_secret("abc123", "0123456789abcdef", cluster, expires or 0)
    if expires is None:
        del secret["data"]["expiration"]
    secret["metadata"]["labels"].update(labels)
    return secret


def _request(cluster: str = "m1", *, submitted: bool = True, created: float = NOW - 100,
             **spec: Any) -> dict[str, Any]:
    request = b.registration_request("abc123", cluster)
    request["metadata"]["creationTimestamp"] = b.rfc3339(created)
    request["metadata"]["generation"] = 2
    if submitted:
        request["spec"].update({"apiEndpoint": "https://10.0.0.1:6443", "clusterID": "uid-1",
                                "credentials": {"token": "member-token", "caBundle": "Q0E="}})
    request["spec"].update(spec)
    return request


# what a token may do -------------------------------------------------------------------------


def test_bootstrap_token_is_kubeadms_secret_for_one_cluster() -> None:
    secret = b.bootstrap_secret("abc123", "0123456789abcdef", "m1", NOW + 60)
    assert secret["metadata"] == {"name": "bootstrap-token-abc123", "namespace": "kube-system",
                                  "labels": {b.BOOTSTRAP_LABEL: "abc123",
                                             b.BOOTSTRAP_FOR_LABEL: "m1"}}
    assert secret["type"] == "bootstrap.kubernetes.io/token"
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data["token-id"] == "abc123" and data["token-secret"] == "0123456789abcdef"
    assert data["usage-bootstrap-authentication"] == "true"
    assert "usage-bootstrap-signing" not in data
    assert data["expiration"] == b.rfc3339(NOW + 60)
    assert all(g.startswith("system:bootstrappers:") for g in data["auth-extra-groups"].split(","))


def test_bootstrap_rights_are_its_own_request_and_the_cluster_info() -> None:
    role, binding = b.bootstrap_rbac("abc123")
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == "tether-system"
    for rule in role["rules"]:
        assert rule["resourceNames"], rule  # everything by name: no list, no create
        assert "secrets" not in rule["resources"]
        assert not {"create", "list", "watch", "bind", "escalate", "*"} & set(rule["verbs"])
    assert {(tuple(rule["resources"]), tuple(rule["resourceNames"])) for rule in role["rules"]} == {
        (("clusterregistrationrequests",), ("abc123",)), (("configmaps",), ("tether-cluster-info",))}
    assert binding["subjects"] == [{"kind": "User", "name": "system:bootstrap:abc123",
                                    "apiGroup": "rbac.authorization.k8s.io"}]
    assert binding["roleRef"]["kind"] == "Role"


def test_anonymous_may_read_only_the_public_cluster_info() -> None:
    role, binding = b.public_cluster_info_rbac()
    assert role["metadata"]["namespace"] == "kube-public"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"],
                              "resourceNames": ["cluster-info"], "verbs": ["get"]}]
    assert binding["subjects"][0]["name"] == "system:anonymous"


def test_agent_rights_are_its_own_cluster_lease_and_works() -> None:
    objs = b.agent_rbac("m1")
    cluster_rules = objs[0]["rules"]
    assert all(rule["resourceNames"] == ["m1"] for rule in cluster_rules)
    roles = {o["metadata"]["namespace"]: o for o in objs if o["kind"] == "Role"}
    assert set(roles) == {"tether-system", "tether-es-m1"}
    assert roles["tether-system"]["rules"] == [{
        "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["m1"],
        "verbs": ["get", "update", "patch"]}]
    every = [rule for o in objs for rule in o.get("rules", [])]
    assert not any(res in ("secrets", "*") for rule in every for res in rule["resources"])
    assert not any(verb in ("create", "delete", "*") for rule in every for verb in rule["verbs"])


def test_cluster_info_ca_is_read_from_kubeadms_kubeconfig() -> None:
    info = {"data": {"kubeconfig": b.public_kubeconfig("https://hub:6443", b"PEM-BYTES")}}
    assert b.ca_from_cluster_info(info) == b"PEM-BYTES"
    assert b.ca_from_cluster_info({"data": {"kubeconfig": "no ca here"}}) == b""
    assert b.ca_from_cluster_info({}) == b""


def test_decided_waits_for_the_submitted_generation() -> None:
    request = _request()
    assert b.decided(request, 2) is None
    request["status"] = r.decision_status(b.APPROVED, "RegistrationApproved", "ok", 1, NOW)
    assert b.decided(request, 2) is None  # an older decision: not about this submission
    request["status"] = r.decision_status(b.DENIED, "RegistrationDenied", "no", 2, NOW)
    decision = b.decided(request, 2)
    assert decision is not None and decision["type"] == "Denied" and decision["message"] == "no"


# the registry controller's decisions ---------------------------------------------------------


def test_approves_a_valid_submission() -> None:
    decided = r.plan(_request(), _token(), [], NOW)
    assert decided.action == "approve" and decided.submission is not None
    assert decided.submission.cluster == "m1" and decided.submission.token == "member-token"
    assert decided.recheck_s == pytest.approx(60)  # cleaned up at the token's expiry
    assert "member-token" not in repr(decided.submission)


@pytest.mark.parametrize(("request_", "token", "clusters", "message"), [
    (_request("other"), _token("m1"), [], "may register 'm1', not 'other'"),
    (_request(), _token(**{b.BOOTSTRAP_FOR_LABEL: ""}), [], "names no cluster"),
    (_request(apiEndpoint="http://10.0.0.1"), _token(), [], "apiEndpoint must be https"),
    (_request(proxyURL="file:///etc"), _token(), [], "proxyURL must be http"),
    (_request(), _token(), [{"metadata": {"name": "m1"}, "spec": {"apiEndpoint": "https://x"}}],
     "already joined with endpoint"),
    (_request(), _token(), [{"metadata": {"name": "m2"}, "spec": {"id": "uid-1"}}],
     "already joined as 'm2'"),
])
def test_denies(request_: dict[str, Any], token: dict[str, Any], clusters: list[dict[str, Any]],
                message: str) -> None:
    decided = r.plan(request_, token, clusters, NOW)
    assert decided.action == "deny" and message in decided.message


def test_cluster_name_comes_from_the_token_not_the_request() -> None:
    """The bootstrap identity may rewrite its whole request; the cluster it may register is
    the one the admin put on the token's Secret."""
    forged = _request("m1")
    assert r.plan(forged, _token("victim"), [], NOW).action == "deny"


def test_waits_for_a_submission() -> None:
    decided = r.plan(_request(submitted=False), _token(), [], NOW)
    assert decided.action == "wait" and decided.recheck_s == pytest.approx(60)
    assert r.plan(_request(submitted=False), _token(expires=None), [], NOW).recheck_s is None


@pytest.mark.parametrize(("request_", "token", "expected"), [
    (None, None, r.Plan("cleanup")),
    (_request(), None, r.Plan("cleanup", "its bootstrap token is gone", delete_request=True)),
    (_request(), _token(expires=NOW), r.Plan("cleanup", "its bootstrap token expired",
                                              delete_request=True, delete_token=True)),
    (_request(submitted=False), _token(expires=NOW - 1),
     r.Plan("cleanup", "its bootstrap token expired", delete_request=True, delete_token=True)),
    (None, _token(), r.Plan("cleanup", "registration collected", delete_token=True)),
])
def test_cleanup(request_: dict[str, Any] | None, token: dict[str, Any] | None,
                 expected: r.Plan) -> None:
    assert r.plan(request_, token, [], NOW) == expected


def test_a_fresh_request_waits_for_its_token() -> None:
    """`token create` makes the request before the token: not cleaned up in between."""
    decided = r.plan(_request(created=NOW - 1), None, [], NOW)
    assert decided.action == "wait" and decided.recheck_s == pytest.approx(r.TOKEN_RECHECK_S)
    assert r.plan(_request(created=NOW - 31), None, [], NOW).action == "cleanup"  # the grace is over


def test_a_fresh_request_whose_token_was_seen_is_cleaned_up_at_once() -> None:
    """A short-lived token that expired and was removed (a token cleaner) within the grace."""
    assert r.plan(_request(created=NOW - 5), None, [], NOW, token_seen=True) == r.Plan(
        "cleanup", "its bootstrap token is gone", delete_request=True)


def test_hub_objects_for_an_approved_registration() -> None:
    decided = r.plan(_request(proxyURL="http://127.0.0.1:8088"), _token(), [], NOW)
    assert decided.submission is not None
    objs = r.hub_objects(decided.submission)
    kinds = [(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in objs]
    assert ("Secret", "tether-system", "m1") in kinds
    assert ("Lease", "tether-system", "m1") in kinds
    assert kinds[-2] == ("Cluster", "", "m1") and kinds[-1][0] == "Secret"
    secret = next(o for o in objs if o["metadata"]["name"] == "m1" and o["kind"] == "Secret")
    assert base64.b64decode(secret["data"]["token"]) == b"member-token"
    cluster = objs[-2]
    assert cluster["spec"] == {"id": "uid-1", "syncMode": "Pull",
                               "apiEndpoint": "https://10.0.0.1:6443",
                               "secretRef": {"namespace": "tether-system", "name": "m1"},
                               "proxyURL": "http://127.0.0.1:8088"}


# local clusters: kube-apiserver's bootstrap-token authenticator -------------------------------


def test_bootstrap_identity() -> None:
    secret = _token()
    found = bt.identity_from_secret("abc123.0123456789abcdef", secret, NOW)
    assert found == bt.Identity("system:bootstrap:abc123",
                                ("system:bootstrappers", "system:bootstrappers:tether",
                                 "system:authenticated"))


@pytest.mark.parametrize("change", [
    "wrong-secret", "expired", "at-expiry", "no-auth-usage", "deleting", "other-type",
    "bad-extra-group", "bad-expiration", "other-id",
])
def test_bootstrap_identity_refusals(change: str) -> None:
    secret = _token()
    token = "abc123.0123456789abcdef"
    data = secret["data"]
    enc = {"wrong-secret": None, "expired": ("expiration", b.rfc3339(NOW - 1)),
           "at-expiry": ("expiration", b.rfc3339(NOW)),
           "no-auth-usage": ("usage-bootstrap-authentication", "false"),
           "bad-extra-group": ("auth-extra-groups", "system:masters"),
           "bad-expiration": ("expiration", "tomorrow"), "other-id": ("token-id", "zzz999")}
    if change == "wrong-secret":
        token = "abc123.0123456789abcdee"
    elif change == "deleting":
        secret["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    elif change == "other-type":
        secret["type"] = "Opaque"
    else:
        key, value = enc[change]  # type: ignore[misc]
        data[key] = base64.b64encode(value.encode()).decode()
    assert bt.identity_from_secret(token, secret, NOW) is None


def test_bootstrap_token_syntax() -> None:
    assert bt.identity_from_secret("abc123.0123456789abcdef", None, NOW) is None
    for bad in ("abc123.short", "ABC123.0123456789abcdef", "abc123.0123456789abcdef0"):
        assert bt.identity_from_secret(bad, _token(), NOW) is None


def test_token_cleaner_plan() -> None:
    assert bt.plan_cleanup(_token(expires=NOW - 1), NOW) == bt.Cleanup(True)
    assert bt.plan_cleanup(_token(expires=NOW + 30), NOW) == bt.Cleanup(False, 30.0)
    assert bt.plan_cleanup(_token(expires=None), NOW) == bt.Cleanup(False)
    elsewhere = _token(expires=NOW - 1)
    elsewhere["metadata"]["namespace"] = "default"
    assert bt.plan_cleanup(elsewhere, NOW) == bt.Cleanup(False)
