"""The index following the store, and the admission checks on RBAC writes, on a real store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.local.errors import ApiError
from tether.local.operations import Operations, WriteOptions
from tether.local.rbac.authorizer import Attributes, UserInfo, service_account_user
from tether.local.rbac.component import ensure_default_policy
from tether.local.rbac.enforcer import CURRENT, Enforcer, RequestContext, certificate_user
from tether.local.rbac.index import RbacIndex
from tether.local.rbac.requestinfo import resolve
from tether.local.resources import Registry
from tether.local.store import Store

RBAC = "rbac.authorization.k8s.io"
BOT = service_account_user("t1", "bot")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Operations, Enforcer]]:
    """Operations on a real store, with the enforcer's admission and the default policy."""
    store = Store(tmp_path / "state.db")
    operations = Operations(store, Registry.with_builtins())
    enforcer = Enforcer(RbacIndex.following(store))
    operations.admission.append(enforcer.admission)
    namespaces = operations.registry.lookup("", "v1", "namespaces")
    assert namespaces is not None
    for name in ("t1", "t2"):
        operations.create(namespaces, "", {"metadata": {"name": name}}, WriteOptions())
    ensure_default_policy(operations)
    yield operations, enforcer
    store.close()


@pytest.fixture
def ops(cluster: tuple[Operations, Enforcer]) -> Operations:
    return cluster[0]


@pytest.fixture
def enforcer(cluster: tuple[Operations, Enforcer]) -> Enforcer:
    return cluster[1]


def _create(ops: Operations, plural: str, obj: dict[str, Any], namespace: str = "") -> dict[str, Any]:
    rt = ops.registry.lookup(RBAC, "v1", plural)
    assert rt is not None
    return ops.create(rt, namespace, obj, WriteOptions())


def _as(user: UserInfo, method: str, path: str) -> Any:
    return CURRENT.set(RequestContext(user, resolve(method, path, {})))


def _role(name: str, rules: list[dict[str, Any]], namespace: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": f"{RBAC}/v1", "kind": "Role" if namespace else "ClusterRole", "metadata": meta,
            "rules": rules}


def _binding(name: str, kind: str, role: str, namespace: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": f"{RBAC}/v1", "kind": "RoleBinding" if namespace else "ClusterRoleBinding",
            "metadata": meta, "roleRef": {"apiGroup": RBAC, "kind": kind, "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "t1"}]}


def test_the_index_follows_every_write(ops: Operations, enforcer: Enforcer) -> None:
    get_secret = Attributes(BOT, "get", namespace="t1", resource="secrets", name="s")
    assert not enforcer.authorize(get_secret).allowed
    _create(ops, "roles", _role("reader", [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}], "t1"), "t1")
    assert not enforcer.authorize(get_secret).allowed  # a role alone grants nothing
    _create(ops, "rolebindings", _binding("bot-reader", "Role", "reader", "t1"), "t1")
    assert enforcer.authorize(get_secret).allowed  # the very next decision sees the binding
    rt = ops.registry.lookup(RBAC, "v1", "roles")
    assert rt is not None
    ops.delete(rt, "t1", "reader", {}, WriteOptions())
    assert not enforcer.authorize(get_secret).allowed  # a binding to a missing role grants nothing


def test_defaults_let_everyone_discover_and_nobody_else_read(enforcer: Enforcer) -> None:
    assert enforcer.authorize(Attributes(BOT, "get", False, path="/apis/apps/v1")).allowed
    assert enforcer.authorize(Attributes(BOT, "create", api_group="authorization.k8s.io",
                                         resource="selfsubjectaccessreviews")).allowed
    assert not enforcer.authorize(Attributes(BOT, "list", resource="namespaces")).allowed
    anonymous = UserInfo("system:anonymous", ("system:unauthenticated",))
    assert enforcer.authorize(Attributes(anonymous, "get", False, path="/version")).allowed
    assert not enforcer.authorize(Attributes(anonymous, "get", False, path="/api")).allowed


def test_rbac_writes_cannot_grant_what_the_writer_lacks(ops: Operations) -> None:
    # bot may write roles and bindings in t1, and read pods there
    _create(ops, "roles", _role("rbac-writer", [
        {"apiGroups": [RBAC], "resources": ["roles", "rolebindings"], "verbs": ["create", "update"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}], "t1"), "t1")
    _create(ops, "rolebindings", _binding("bot-writer", "Role", "rbac-writer", "t1"), "t1")
    token = _as(BOT, "POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/t1/roles")
    try:
        _create(ops, "roles", _role("pods", [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}], "t1"), "t1")
        with pytest.raises(ApiError) as refused:
            _create(ops, "roles", _role("secrets", [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
                                        "t1"), "t1")
        assert refused.value.code == 403
        assert 'roles.rbac.authorization.k8s.io "secrets" is forbidden: user "system:serviceaccount:t1:bot"' \
            in refused.value.message
        assert '{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}' in refused.value.message
        with pytest.raises(ApiError) as bind_admin:
            _create(ops, "rolebindings", _binding("bot-admin", "ClusterRole", "cluster-admin", "t1"), "t1")
        assert bind_admin.value.code == 403
        with pytest.raises(ApiError) as missing:
            _create(ops, "rolebindings", _binding("bot-nothing", "Role", "nope", "t1"), "t1")
        assert missing.value.code == 404
        # a role it holds entirely may be bound
        _create(ops, "rolebindings", _binding("bot-pods", "Role", "pods", "t1"), "t1")
    finally:
        CURRENT.reset(token)
    # with `escalate` on roles and `bind` on cluster-admin it may do both
    _create(ops, "roles", _role("escalator", [
        {"apiGroups": [RBAC], "resources": ["roles"], "verbs": ["escalate"]},
        {"apiGroups": [RBAC], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["cluster-admin"]}],
        "t1"), "t1")
    _create(ops, "rolebindings", _binding("bot-escalator", "Role", "escalator", "t1"), "t1")
    token = _as(BOT, "POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/t1/roles")
    try:
        _create(ops, "roles", _role("secrets", [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}],
                                    "t1"), "t1")
        _create(ops, "rolebindings", _binding("bot-admin", "ClusterRole", "cluster-admin", "t1"), "t1")
    finally:
        CURRENT.reset(token)


def test_an_aggregation_rule_needs_cluster_admin(ops: Operations) -> None:
    _create(ops, "clusterroles", _role("cr-writer", [
        {"apiGroups": [RBAC], "resources": ["clusterroles"], "verbs": ["create"]}]))
    _create(ops, "clusterrolebindings", _binding("bot-cr-writer", "ClusterRole", "cr-writer"))
    role = _role("gather", [])
    role["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}
    token = _as(BOT, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles")
    try:
        with pytest.raises(ApiError) as refused:
            _create(ops, "clusterroles", role)
        assert "must have cluster-admin privileges to use the aggregationRule" in refused.value.message
    finally:
        CURRENT.reset(token)


def test_apply_that_creates_needs_create(ops: Operations) -> None:
    _create(ops, "roles", _role("patcher", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"]}],
                                "t1"), "t1")
    _create(ops, "rolebindings", _binding("bot-patcher", "Role", "patcher", "t1"), "t1")
    rt = ops.registry.lookup("", "v1", "configmaps")
    assert rt is not None
    body = b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"}}'
    token = _as(BOT, "PATCH", "/api/v1/namespaces/t1/configmaps/cm")
    try:
        with pytest.raises(ApiError) as refused:
            ops.patch(rt, "t1", "cm", "application/apply-patch+yaml", body, WriteOptions(manager="m"))
        assert refused.value.code == 403
        assert 'cannot create resource "configmaps"' in refused.value.message
    finally:
        CURRENT.reset(token)
    ops.patch(rt, "t1", "cm", "application/apply-patch+yaml", body, WriteOptions(manager="m"))  # as the system
    token = _as(BOT, "PATCH", "/api/v1/namespaces/t1/configmaps/cm")
    try:  # once it exists, patch is enough
        ops.patch(rt, "t1", "cm", "application/apply-patch+yaml", body, WriteOptions(manager="m"))
    finally:
        CURRENT.reset(token)


@pytest.mark.parametrize(("cert", "user"), [
    ({"subject": ((("commonName", "carol"),), (("organizationName", "devs"),), (("organizationName", "ops"),))},
     UserInfo("carol", ("devs", "ops", "system:authenticated"))),
    ({"subject": ((("organizationName", "system:masters"),),)}, None),
    ({"subject": ()}, None),
])
def test_certificate_user(cert: dict[str, Any], user: UserInfo | None) -> None:
    assert certificate_user(cert) == user
