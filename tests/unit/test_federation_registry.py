"""Registry plans (pure parts of join/unjoin) and ServiceAccount token signing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether.federation import registry
from tether.local import tokens


def test_member_objects_never_carry_the_propagation_label() -> None:
    objs = registry.member_objects("east")
    assert [o["kind"] for o in objs] == ["Namespace", "ServiceAccount", "ClusterRole",
                                         "ClusterRoleBinding", "ClusterRoleBinding", "Secret"]
    for obj in objs:
        assert "app.kubernetes.io/managed-by" not in (obj["metadata"].get("labels") or {})
    role = objs[2]
    assert role["metadata"]["name"] == "tether-controller:tether-east"
    health = next(r for r in role["rules"] if "nonResourceURLs" in r)
    assert {"/healthz", "/readyz", "/livez", "/version", "/api", "/apis"} <= set(health["nonResourceURLs"])
    assert objs[5]["metadata"]["annotations"] == {"kubernetes.io/service-account.name": "tether-east"}


def test_member_credential_impersonates_but_is_not_cluster_admin() -> None:
    """The hub's member credential: impersonation for the proxy plus the controllers' verbs;
    no `*` verb, no RBAC escalation; the hub's admins are a group bound to cluster-admin."""
    objs = registry.member_objects("east")
    role, binding, admins = objs[2], objs[3], objs[4]
    verbs = {v for rule in role["rules"] for v in rule["verbs"]}
    assert "*" not in verbs and not verbs & {"escalate", "bind", "approve", "sign"}
    assert {"apiGroups": [""], "resources": ["users", "groups", "serviceaccounts"],
            "verbs": ["impersonate"]} in role["rules"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "tether-east",
                                    "namespace": "tether-system"}]
    assert admins["metadata"]["name"] == "tether:hub-admins:east"
    assert admins["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                 "name": "cluster-admin"}
    assert admins["subjects"] == [{"kind": "Group", "name": "tether:hub-admins",
                                   "apiGroup": "rbac.authorization.k8s.io"}]
    agent = registry.controller_rules(impersonate=False)
    assert not any("impersonate" in rule["verbs"] for rule in agent)


def test_conflicts() -> None:
    joined = [{"metadata": {"name": "a"}, "spec": {"apiEndpoint": "https://a", "id": "uid-a"}}]
    assert registry.check_conflicts("a", "https://a", "uid-a", joined) is True
    assert registry.check_conflicts("b", "https://b", "uid-b", joined) is False
    with pytest.raises(registry.RegistryError, match="already joined with endpoint https://a"):
        registry.check_conflicts("a", "https://other", "uid-b", joined)
    with pytest.raises(registry.RegistryError, match="already joined as 'a'"):
        registry.check_conflicts("b", "https://a-again", "uid-a", joined)


def test_topology_from_node_labels() -> None:
    def node(region: str, zone: str) -> dict:  # type: ignore[type-arg]
        return {"metadata": {"labels": {registry.REGION_LABEL: region, registry.ZONE_LABEL: zone}}}

    assert registry.topology([node("r1", "z2"), node("r2", "z1"), node("r1", "z1")]) == ("r1", ("z1", "z2"))
    assert registry.topology([{"metadata": {}}]) == ("", ())


def test_names() -> None:
    registry.validate_name("cluster-1")
    for bad in ("Cluster", "a_b", "-a", "x" * 49):
        with pytest.raises(registry.RegistryError):
            registry.validate_name(bad)


def test_jwt_round_trip_and_tamper(tmp_path: Path) -> None:
    signer = tokens.Signer.load_or_create(tmp_path)
    again = tokens.Signer.load_or_create(tmp_path)
    assert signer.key_id == again.key_id  # kept across restarts
    token = signer.sign({"iss": tokens.ISSUER, "sub": "x"})
    assert again.verify(token) == {"iss": tokens.ISSUER, "sub": "x"}
    head, body, sig = token.split(".")
    assert signer.verify(f"{head}.{body}x.{sig}") is None
    assert signer.verify("a.b") is None
    other = tokens.Signer.load_or_create(tmp_path / "other")
    assert other.verify(token) is None


def test_secret_plan() -> None:
    sa = {"metadata": {"name": "s", "uid": "u1"}}
    secret: dict[str, Any] = {"type": tokens.SA_TOKEN_TYPE, "metadata": {
        "name": "t", "annotations": {tokens.SA_NAME_ANNOTATION: "s"},
        "creationTimestamp": "2026-01-01T00:00:00Z"}}
    created = tokens.objects_time("2026-01-01T00:00:00Z") or 0.0
    assert tokens.plan_secret(secret, sa, created).action == "fill"
    assert tokens.plan_secret(secret, None, created + 1).action == "wait"
    assert tokens.plan_secret(secret, None, created + 60).action == "delete"
    filled = {**secret, "data": {"token": "x", "ca.crt": "y", "namespace": "z"},
              "metadata": {**secret["metadata"], "annotations": {
                  tokens.SA_NAME_ANNOTATION: "s", tokens.SA_UID_ANNOTATION: "u1"}}}
    assert tokens.plan_secret(filled, sa, created).action == "none"
    recreated = {"metadata": {"name": "s", "uid": "u2"}}
    assert tokens.plan_secret(filled, recreated, created).action == "delete"
    assert tokens.plan_secret({**secret, "type": "Opaque"}, None, created).action == "none"
