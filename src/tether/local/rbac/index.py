"""The RBAC objects of one cluster in memory, shaped for the authorizer's questions.

Loaded once from the store, then kept current from its change stream inside each write
(`Store.subscribe`), so a request right after `kubectl create rolebinding` is judged with the new
binding and no request reads the database. Bindings are indexed by subject (user, group,
ServiceAccount), so a decision looks only at the bindings that can apply to the caller.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tether.local.rbac.authorizer import (
    Binding,
    PolicyRule,
    UserInfo,
    rules_of,
    split_service_account,
)
from tether.local.store import Event, Store

ROLES = "rbac.authorization.k8s.io/roles"
CLUSTER_ROLES = "rbac.authorization.k8s.io/clusterroles"
ROLE_BINDINGS = "rbac.authorization.k8s.io/rolebindings"
CLUSTER_ROLE_BINDINGS = "rbac.authorization.k8s.io/clusterrolebindings"
RESOURCES = (ROLES, CLUSTER_ROLES, ROLE_BINDINGS, CLUSTER_ROLE_BINDINGS)

SubjectKey = tuple[str, ...]  # ("User", name) | ("Group", name) | ("ServiceAccount", ns, name)


def _subject_keys(binding: Binding) -> set[SubjectKey]:
    keys: set[SubjectKey] = set()
    for subject in binding.subjects:
        if subject.kind in ("User", "Group"):
            keys.add((subject.kind, subject.name))
        elif subject.kind == "ServiceAccount":
            keys.add(("ServiceAccount", subject.namespace or binding.namespace, subject.name))
    return keys


def _user_keys(user: UserInfo) -> list[SubjectKey]:
    keys: list[SubjectKey] = [("User", user.name)]
    keys.extend(("Group", group) for group in user.groups)
    account = split_service_account(user.name)
    if account is not None:
        keys.append(("ServiceAccount", *account))
    return keys


class _Bindings:
    """Bindings of one scope (the cluster, or one namespace), by name and by subject."""

    def __init__(self) -> None:
        self.by_name: dict[str, Binding] = {}
        self.by_subject: dict[SubjectKey, set[str]] = {}

    def put(self, binding: Binding) -> None:
        self.remove(binding.name)
        self.by_name[binding.name] = binding
        for key in _subject_keys(binding):
            self.by_subject.setdefault(key, set()).add(binding.name)

    def remove(self, name: str) -> None:
        old = self.by_name.pop(name, None)
        if old is None:
            return
        for key in _subject_keys(old):
            names = self.by_subject.get(key)
            if names is not None:
                names.discard(name)
                if not names:
                    del self.by_subject[key]

    def for_user(self, user: UserInfo) -> list[Binding]:
        names: set[str] = set()
        for key in _user_keys(user):
            names |= self.by_subject.get(key, set())
        return [self.by_name[n] for n in sorted(names)]


class RbacIndex:
    """Implements `authorizer.Policy` over the cluster's current RBAC objects."""

    def __init__(self) -> None:
        self._cluster_roles: dict[str, tuple[PolicyRule, ...]] = {}
        self._roles: dict[tuple[str, str], tuple[PolicyRule, ...]] = {}
        self._cluster_bindings = _Bindings()
        self._role_bindings: dict[str, _Bindings] = {}

    @classmethod
    def following(cls, store: Store) -> RbacIndex:
        """An index loaded from `store` and updated by every later write to it."""
        index = cls()
        for resource in RESOURCES:
            for obj in store.list_objects(resource):
                index.put(resource, obj)
        store.subscribe(RESOURCES, index.apply)
        return index

    # the change stream ---------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        if event.type == "DELETED":
            self.remove(event.resource, event.namespace, event.name)
        else:
            self.put(event.resource, event.obj)

    def put(self, resource: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name, namespace = str(meta.get("name", "")), str(meta.get("namespace") or "")
        if resource == CLUSTER_ROLES:
            self._cluster_roles[name] = rules_of(obj)
        elif resource == ROLES:
            self._roles[(namespace, name)] = rules_of(obj)
        elif resource == CLUSTER_ROLE_BINDINGS:
            self._cluster_bindings.put(Binding.from_object({**obj, "kind": "ClusterRoleBinding"}))
        elif resource == ROLE_BINDINGS:
            binding = Binding.from_object({**obj, "kind": "RoleBinding"})
            self._role_bindings.setdefault(namespace, _Bindings()).put(binding)

    def remove(self, resource: str, namespace: str, name: str) -> None:
        if resource == CLUSTER_ROLES:
            self._cluster_roles.pop(name, None)
        elif resource == ROLES:
            self._roles.pop((namespace, name), None)
        elif resource == CLUSTER_ROLE_BINDINGS:
            self._cluster_bindings.remove(name)
        elif resource == ROLE_BINDINGS:
            scope = self._role_bindings.get(namespace)
            if scope is not None:
                scope.remove(name)
                if not scope.by_name:
                    del self._role_bindings[namespace]

    # authorizer.Policy ---------------------------------------------------------------------

    def cluster_role_rules(self, name: str) -> tuple[PolicyRule, ...] | None:
        return self._cluster_roles.get(name)

    def role_rules(self, namespace: str, name: str) -> tuple[PolicyRule, ...] | None:
        return self._roles.get((namespace, name))

    def cluster_role_bindings(self, user: UserInfo) -> Iterable[Binding]:
        return self._cluster_bindings.for_user(user)

    def role_bindings(self, namespace: str, user: UserInfo) -> Iterable[Binding]:
        scope = self._role_bindings.get(namespace)
        return scope.for_user(user) if scope is not None else ()
