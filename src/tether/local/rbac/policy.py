"""The default ClusterRoles and ClusterRoleBindings every local cluster starts with.

The ones kube-apiserver bootstraps that mean something here (Kubernetes' bootstrap policy, kept
to the resources this API server serves): `cluster-admin` for `system:masters`;
`system:discovery` and `system:basic-user` for every authenticated user;
`system:public-info-viewer` for everyone, authenticated or not; the user-facing `admin`, `edit`
and `view`, built by aggregation from `system:aggregate-to-{admin,edit,view}` and from any
ClusterRole labelled `rbac.authorization.k8s.io/aggregate-to-<role>: "true"`.

Each carries `kubernetes.io/bootstrapping: rbac-defaults` and
`rbac.authorization.kubernetes.io/autoupdate: "true"`. At every start the cluster puts back what
is missing (missing rules, subjects, labels; extra ones an administrator added are kept, as
kube-apiserver's reconciliation does), unless its autoupdate annotation says `"false"`.
"""

from __future__ import annotations

import copy

from tether.objects import Obj

RBAC_API_VERSION = "rbac.authorization.k8s.io/v1"
BOOTSTRAP_LABEL = "kubernetes.io/bootstrapping"
BOOTSTRAP_VALUE = "rbac-defaults"
AUTOUPDATE_ANNOTATION = "rbac.authorization.kubernetes.io/autoupdate"
AGGREGATE_TO = "rbac.authorization.k8s.io/aggregate-to-"

READ = ["get", "list", "watch"]
WRITE = ["create", "update", "patch", "delete", "deletecollection"]
READ_WRITE = READ + WRITE

DISCOVERY_URLS = ["/livez", "/readyz", "/healthz", "/version", "/version/", "/openapi", "/openapi/*",
                  "/api", "/api/*", "/apis", "/apis/*"]
PUBLIC_INFO_URLS = ["/livez", "/readyz", "/healthz", "/version", "/version/"]


def _rule(verbs: list[str], groups: list[str], resources: list[str]) -> Obj:
    return {"verbs": verbs, "apiGroups": groups, "resources": resources}


def _urls(verbs: list[str], urls: list[str]) -> Obj:
    return {"verbs": verbs, "nonResourceURLs": urls}


def _aggregation(role: str) -> Obj:
    return {"clusterRoleSelectors": [{"matchLabels": {f"{AGGREGATE_TO}{role}": "true"}}]}


def _meta(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {"name": name, "labels": {**(labels or {}), BOOTSTRAP_LABEL: BOOTSTRAP_VALUE},
            "annotations": {AUTOUPDATE_ANNOTATION: "true"}}


def _cluster_role(name: str, rules: list[Obj] | None = None, *, labels: dict[str, str] | None = None,
                  aggregate: str = "") -> Obj:
    role: Obj = {"apiVersion": RBAC_API_VERSION, "kind": "ClusterRole", "metadata": _meta(name, labels)}
    if aggregate:
        role["aggregationRule"] = _aggregation(aggregate)
    role["rules"] = rules or []
    return role


_VIEW_RULES = [
    _rule(READ, [""], ["pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
                       "services", "services/status", "endpoints", "persistentvolumeclaims",
                       "persistentvolumeclaims/status", "configmaps"]),
    _rule(READ, [""], ["limitranges", "resourcequotas", "bindings", "events", "pods/status",
                       "resourcequotas/status", "namespaces/status", "replicationcontrollers/status",
                       "pods/log"]),
    # reading namespaces at the namespace scope means reading *this* namespace
    _rule(READ, [""], ["namespaces"]),
    _rule(READ, ["discovery.k8s.io"], ["endpointslices"]),
    _rule(READ, ["apps"], ["controllerrevisions", "statefulsets", "statefulsets/status", "statefulsets/scale",
                           "daemonsets", "daemonsets/status", "deployments", "deployments/status",
                           "deployments/scale", "replicasets", "replicasets/status", "replicasets/scale"]),
    _rule(READ, ["autoscaling"], ["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
    _rule(READ, ["batch"], ["jobs", "cronjobs", "cronjobs/status", "jobs/status"]),
    _rule(READ, ["policy"], ["poddisruptionbudgets", "poddisruptionbudgets/status"]),
    _rule(READ, ["networking.k8s.io"], ["networkpolicies", "ingresses", "ingresses/status"]),
]

_EDIT_RULES = [
    # reading what can escalate (exec into a pod, read a token)
    _rule(READ, [""], ["pods/attach", "pods/proxy", "pods/exec", "pods/portforward", "secrets",
                       "services/proxy"]),
    _rule(["impersonate"], [""], ["serviceaccounts"]),
    _rule(WRITE, [""], ["pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward"]),
    _rule(["create"], [""], ["pods/eviction"]),
    _rule(WRITE, [""], ["replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
                        "services", "services/proxy", "persistentvolumeclaims", "configmaps", "secrets"]),
    _rule(["create"], [""], ["serviceaccounts/token"]),
    _rule(WRITE, ["apps"], ["statefulsets", "statefulsets/scale", "daemonsets", "deployments",
                            "deployments/scale", "deployments/rollback", "replicasets", "replicasets/scale"]),
    _rule(WRITE, ["autoscaling"], ["horizontalpodautoscalers"]),
    _rule(WRITE, ["batch"], ["jobs", "cronjobs"]),
    _rule(WRITE, ["policy"], ["poddisruptionbudgets"]),
    _rule(WRITE, ["networking.k8s.io"], ["networkpolicies", "ingresses"]),
]

_ADMIN_RULES = [
    _rule(["create"], ["authorization.k8s.io"], ["localsubjectaccessreviews"]),
    _rule(READ_WRITE, ["rbac.authorization.k8s.io"], ["roles", "rolebindings"]),
]


def cluster_roles() -> list[Obj]:
    roles = [
        _cluster_role("cluster-admin", [_rule(["*"], ["*"], ["*"]), _urls(["*"], ["*"])]),
        _cluster_role("system:discovery", [_urls(["get"], DISCOVERY_URLS)]),
        _cluster_role("system:basic-user", [
            _rule(["create"], ["authorization.k8s.io"], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
            _rule(["create"], ["authentication.k8s.io"], ["selfsubjectreviews"]),
        ]),
        _cluster_role("system:public-info-viewer", [_urls(["get"], PUBLIC_INFO_URLS)]),
        _cluster_role("admin", aggregate="admin"),
        _cluster_role("edit", labels={f"{AGGREGATE_TO}admin": "true"}, aggregate="edit"),
        _cluster_role("view", labels={f"{AGGREGATE_TO}edit": "true"}, aggregate="view"),
        _cluster_role("system:aggregate-to-admin", _ADMIN_RULES, labels={f"{AGGREGATE_TO}admin": "true"}),
        _cluster_role("system:aggregate-to-edit", _EDIT_RULES, labels={f"{AGGREGATE_TO}edit": "true"}),
        _cluster_role("system:aggregate-to-view", _VIEW_RULES, labels={f"{AGGREGATE_TO}view": "true"}),
    ]
    return copy.deepcopy(roles)


def _cluster_binding(role: str, groups: list[str]) -> Obj:
    return {
        "apiVersion": RBAC_API_VERSION, "kind": "ClusterRoleBinding", "metadata": _meta(role),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g} for g in groups],
    }


def cluster_role_bindings() -> list[Obj]:
    return [
        _cluster_binding("cluster-admin", ["system:masters"]),
        _cluster_binding("system:discovery", ["system:authenticated"]),
        _cluster_binding("system:basic-user", ["system:authenticated"]),
        _cluster_binding("system:public-info-viewer", ["system:authenticated", "system:unauthenticated"]),
    ]


def reconciled(default: Obj, current: Obj | None) -> Obj | None:
    """What to write so `current` has everything `default` has (None: nothing to write).

    Missing objects are created; ones whose autoupdate annotation is `"false"` are left alone;
    otherwise missing labels, annotations, rules (not for aggregated roles, whose rules
    the aggregation controller owns), the aggregation rule and subjects are added, and a
    binding's roleRef is put back.
    """
    if current is None:
        return copy.deepcopy(default)
    meta = current.get("metadata") or {}
    if (meta.get("annotations") or {}).get(AUTOUPDATE_ANNOTATION) == "false":
        return None
    updated = copy.deepcopy(current)
    new_meta = updated.setdefault("metadata", {})
    for key in ("labels", "annotations"):
        new_meta[key] = {**default["metadata"][key], **(new_meta.get(key) or {})}  # set values win
    if default["kind"] == "ClusterRole":
        if "aggregationRule" in default:
            updated["aggregationRule"] = copy.deepcopy(default["aggregationRule"])
        else:
            rules = list(updated.get("rules") or [])
            rules.extend(r for r in default["rules"] if r not in rules)
            updated["rules"] = rules
    else:
        updated["roleRef"] = copy.deepcopy(default["roleRef"])
        subjects = list(updated.get("subjects") or [])
        subjects.extend(s for s in default["subjects"] if s not in subjects)
        updated["subjects"] = subjects
    return None if updated == current else updated
