"""The cluster registry: push-mode join and unjoin (as `kubefedctl join` / `karmadactl join`).

Join, in the member (namespace `tether-system`):
  - ServiceAccount `tether-<name>` (Karmada's `karmada-<cluster>`; one per joined name, so two
    hubs joining one member under the same name share it): the member credential the hub keeps,
  - ClusterRole and ClusterRoleBinding `tether-controller:tether-<name>` (`controller_rules`):
    what tether's controllers do in a member (read, write and delete any object they propagate,
    health and discovery paths) plus `impersonate` on users, groups and serviceaccounts, which the
    cluster proxy needs to send each request as its caller. Not `cluster-admin`: no
    `escalate`/`bind`, so it cannot grant itself more through RBAC writes,
  - ClusterRoleBinding `tether:hub-admins:<name>`: the group `tether:hub-admins` (what the hub's
    admins are called in a member, see `tether.federation.clusterproxy`) to `cluster-admin`,
  - Secret `tether-<name>-token` of type `kubernetes.io/service-account-token`, waited for until
    the token controller fills it.
  These carry `cluster.tether.io/joined-as=<name>`, never `app.kubernetes.io/managed-by=tether`
  (that label marks propagated objects, which unjoin deletes first).
On the hub: Secret `tether-system/<name>` (`token`, `caBundle`), the `Cluster` (Push), and the
execution namespace `tether-es-<name>` for the cluster's Works.

Every step is an idempotent server-side apply or a delete that tolerates 404, so a join or
unjoin that failed half way is finished by running it again.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.federation.crds import CLUSTER_API_VERSION, execution_namespace
from tether.federation.health import HUB_NAMESPACE, member_credentials
from tether.federation.model import MANAGED_BY_LABEL, MANAGED_BY_VALUE
from tether.kube import KubeClient, KubeError, NotFound
from tether.objects import Obj

FIELD_MANAGER = "tether-registry"
MEMBER_NAMESPACE = "tether-system"
JOINED_AS_LABEL = "cluster.tether.io/joined-as"
UNJOIN_ANNOTATION = "cluster.tether.io/unjoin"  # "delete-resources" | "keep-resources"
REGION_LABEL = "topology.kubernetes.io/region"
ZONE_LABEL = "topology.kubernetes.io/zone"
HEALTH_URLS = ("/healthz", "/readyz", "/livez", "/version")
DISCOVERY_URLS = ("/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*")
HUB_ADMINS_GROUP = "tether:hub-admins"
CONTROLLER_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete",
                    "deletecollection")
TOKEN_WAIT_S = 30.0
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class RegistryError(Exception):
    """A join/unjoin that cannot proceed, with a message for the user."""


def service_account_name(cluster: str) -> str:
    return f"tether-{cluster}"


def role_name(cluster: str) -> str:
    return f"tether-controller:{service_account_name(cluster)}"


def token_secret_name(cluster: str) -> str:
    return f"{service_account_name(cluster)}-token"


def agent_account(cluster: str) -> str:
    """The hub ServiceAccount a pull cluster's agent authenticates as."""
    return f"tether-agent-{cluster}"


def agent_token_secret(cluster: str) -> str:
    return f"{agent_account(cluster)}-token"


def agent_role(cluster: str) -> str:
    return f"tether:agent:{cluster}"


@dataclass(frozen=True)
class JoinOptions:
    name: str
    region: str = ""
    zones: tuple[str, ...] = ()
    provider: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    token_wait_s: float = TOKEN_WAIT_S


@dataclass(frozen=True)
class JoinResult:
    name: str
    api_endpoint: str
    cluster_id: str
    region: str
    zones: tuple[str, ...]
    already_joined: bool
    steps: tuple[str, ...]


@dataclass(frozen=True)
class UnjoinResult:
    name: str
    deleted_resources: tuple[str, ...]
    kept_resources: bool
    steps: tuple[str, ...]
    member_skipped: str = ""  # why the member was not cleaned (with --force)


def validate_name(name: str) -> None:
    if not _NAME.match(name) or len(name) > 48:
        raise RegistryError(f"cluster name {name!r} must be a DNS label (lower-case letters, digits, "
                            "'-'), at most 48 characters")


def hub_admins_binding(cluster: str) -> str:
    return f"{HUB_ADMINS_GROUP}:{cluster}"


def controller_rules(*, impersonate: bool) -> list[Obj]:
    """What tether's controllers need in a member: every object they may propagate (any type,
    which is why resources are `*`), the health and discovery paths, and for the hub's member
    credential `impersonate` (the proxy acts as its callers). Note for readers: whoever may
    impersonate any group may impersonate `system:masters`; the credential is kept where only
    the hub's admins and the hub itself can read it."""
    rules: list[Obj] = [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": list(CONTROLLER_VERBS)},
        {"nonResourceURLs": [*HEALTH_URLS, *DISCOVERY_URLS], "verbs": ["get"]},
    ]
    if impersonate:
        rules.append({"apiGroups": [""], "resources": ["users", "groups", "serviceaccounts"],
                      "verbs": ["impersonate"]})
    return rules


def labels(name: str) -> dict[str, str]:
    return {JOINED_AS_LABEL: name, "app.kubernetes.io/part-of": "tether-registry"}


def member_objects(name: str) -> list[Obj]:
    """What join creates in the member, in creation order."""
    sa = service_account_name(name)
    meta = {"labels": labels(name)}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MEMBER_NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": sa, "namespace": MEMBER_NAMESPACE, **meta}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": role_name(name), **meta},
         "rules": controller_rules(impersonate=True)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": role_name(name), **meta},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": role_name(name)},
         "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": MEMBER_NAMESPACE}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": hub_admins_binding(name), **meta},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "cluster-admin"},
         "subjects": [{"kind": "Group", "name": HUB_ADMINS_GROUP,
                       "apiGroup": "rbac.authorization.k8s.io"}]},
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
         "metadata": {"name": token_secret_name(name), "namespace": MEMBER_NAMESPACE,
                      "labels": labels(name),
                      "annotations": {"kubernetes.io/service-account.name": sa}}},
    ]


def topology(nodes: Sequence[Mapping[str, Any]]) -> tuple[str, tuple[str, ...]]:
    """Region (the most common among nodes) and zones (all, sorted) from node labels."""
    regions: Counter[str] = Counter()
    zones: set[str] = set()
    for node in nodes:
        node_labels = node.get("metadata", {}).get("labels") or {}
        if node_labels.get(REGION_LABEL):
            regions[node_labels[REGION_LABEL]] += 1
        if node_labels.get(ZONE_LABEL):
            zones.add(node_labels[ZONE_LABEL])
    region = regions.most_common(1)[0][0] if regions else ""
    return region, tuple(sorted(zones))


def cluster_object(options: JoinOptions, endpoint: str, cluster_id: str, region: str,
                   zones: tuple[str, ...]) -> Obj:
    spec: Obj = {
        "id": cluster_id,
        "syncMode": "Push",
        "apiEndpoint": endpoint,
        "secretRef": {"namespace": HUB_NAMESPACE, "name": options.name},
    }
    if region:
        spec["region"] = region
    if zones:
        spec["zones"] = list(zones)
    if options.provider:
        spec["provider"] = options.provider
    return {"apiVersion": CLUSTER_API_VERSION, "kind": "Cluster",
            "metadata": {"name": options.name, "labels": dict(options.labels)}, "spec": spec}


def check_conflicts(name: str, endpoint: str, cluster_id: str,
                    clusters: Sequence[Mapping[str, Any]]) -> bool:
    """True when `name` is already joined to this member; raises on a conflicting registration."""
    already = False
    for cluster in clusters:
        other = cluster["metadata"]["name"]
        spec = cluster.get("spec") or {}
        if other == name:
            if spec.get("apiEndpoint") and spec.get("apiEndpoint") != endpoint:
                raise RegistryError(
                    f"cluster {name!r} is already joined with endpoint {spec.get('apiEndpoint')}; "
                    f"unjoin it first (`tether unjoin {name}`) or pick another name")
            already = True
        elif cluster_id and spec.get("id") == cluster_id:
            raise RegistryError(
                f"this member (kube-system uid {cluster_id}) is already joined as {other!r}; "
                f"one member can be joined once (unjoin {other!r} first)")
    return already



async def _wait_token(member: KubeClient, name: str, sa_uid: str, secret_obj: Obj, wait_s: float) -> Obj:
    """The token Secret once filled for *this* ServiceAccount (uid), re-created if it went away
    (the token controller deletes Secrets left from an earlier ServiceAccount of that name)."""
    deadline = time.monotonic() + wait_s
    while True:
        secret = await member.get_or_none("v1", "Secret", token_secret_name(name), MEMBER_NAMESPACE)
        if secret is None:
            await member.apply(secret_obj, field_manager=FIELD_MANAGER)
        else:
            annotations = secret["metadata"].get("annotations") or {}
            uid = annotations.get("kubernetes.io/service-account.uid")
            if (secret.get("data") or {}).get("token") and uid in (None, sa_uid):
                return secret
        if time.monotonic() >= deadline:
            raise RegistryError(
                f"the member did not issue a token for ServiceAccount {MEMBER_NAMESPACE}/"
                f"{service_account_name(name)} within {wait_s:.0f}s (is its token controller running?)")
        await asyncio.sleep(0.2)


async def join(host: KubeClient, member: KubeClient, options: JoinOptions) -> JoinResult:
    name = options.name
    validate_name(name)
    endpoint = member.credentials.server
    try:
        kube_system = await member.get("v1", "Namespace", "kube-system")
    except KubeError as exc:
        raise RegistryError(f"cannot reach the member at {endpoint}: {exc}") from None
    cluster_id = str(kube_system["metadata"].get("uid", ""))
    try:
        existing = await host.list_objects(CLUSTER_API_VERSION, "Cluster")
    except NotFound:
        raise RegistryError("the hub has no Cluster type: run `tether hub install` first") from None
    already = check_conflicts(name, endpoint, cluster_id, existing)
    steps: list[str] = []
    sa_uid = ""
    objs = member_objects(name)
    for obj in objs:
        applied = await member.apply(obj, field_manager=FIELD_MANAGER)
        if obj["kind"] == "ServiceAccount":
            sa_uid = str(applied["metadata"].get("uid", ""))
        steps.append(f"member: {obj['kind']} {_ref(obj)}")
    secret = await _wait_token(member, name, sa_uid, objs[-1], options.token_wait_s)
    data = secret.get("data") or {}
    ca_pem = member.credentials.ca_pem or (base64.b64decode(data["ca.crt"]) if data.get("ca.crt") else b"")
    region, zones = options.region, options.zones
    if not region or not zones:
        nodes = await member.list_objects("v1", "Node")
        found_region, found_zones = topology(nodes)
        region, zones = region or found_region, zones or found_zones
    hub_objects: list[Obj] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": HUB_NAMESPACE}},
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": execution_namespace(name), "labels": labels(name)}},
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": name, "namespace": HUB_NAMESPACE, "labels": labels(name)},
         "data": {"token": data["token"], "caBundle": base64.b64encode(ca_pem).decode()}},
        cluster_object(options, endpoint, cluster_id, region, zones),
    ]
    for obj in hub_objects:
        await host.apply(obj, field_manager=FIELD_MANAGER)
        steps.append(f"hub: {obj['kind']} {_ref(obj)}")
    return JoinResult(name, endpoint, cluster_id, region, zones, already, tuple(steps))


def _ref(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta.get("name"))


# unjoin --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApiResource:
    group_version: str
    plural: str
    kind: str
    namespaced: bool

    def path(self, namespace: str = "", name: str = "") -> str:
        base = f"/api/{self.group_version}" if "/" not in self.group_version else f"/apis/{self.group_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


async def deletable_resources(client: KubeClient) -> list[ApiResource]:
    """Every listable, deletable resource at its group's preferred version (discovery)."""
    group_versions = ["v1"]
    for group in (await client.request("GET", "/apis")).get("groups", []):
        preferred = (group.get("preferredVersion") or {}).get("groupVersion")
        if preferred:
            group_versions.append(preferred)
    out: list[ApiResource] = []
    for gv in group_versions:
        path = f"/api/{gv}" if "/" not in gv else f"/apis/{gv}"
        try:
            listed = (await client.request("GET", path)).get("resources", [])
        except KubeError:
            continue
        for entry in listed:
            verbs = set(entry.get("verbs") or [])
            if "/" in entry["name"] or not {"list", "delete"} <= verbs:
                continue
            if entry["kind"] in ("Event",):
                continue
            out.append(ApiResource(gv, entry["name"], entry["kind"], bool(entry.get("namespaced"))))
    return out


async def delete_managed(member: KubeClient, selector: str = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}",
                         ) -> list[str]:
    """Delete every object labelled `selector`: namespaced ones first, namespaces last."""
    resources = await deletable_resources(member)
    order = sorted(resources, key=lambda r: (not r.namespaced, r.kind == "Namespace"))
    deleted: list[str] = []
    for resource in order:
        try:
            items = (await member.request("GET", resource.path(),
                                          params={"labelSelector": selector})).get("items", [])
        except KubeError as exc:
            if exc.code in (403, 404, 405):
                continue
            raise
        for item in items:
            meta = item.get("metadata") or {}
            if meta.get("deletionTimestamp"):
                continue
            try:
                await member.request("DELETE", resource.path(meta.get("namespace", ""), meta["name"]),
                                     body={"propagationPolicy": "Background"})
            except NotFound:
                pass
            where = f"{meta['namespace']}/" if meta.get("namespace") else ""
            deleted.append(f"{resource.kind} {where}{meta['name']}")
    return deleted


async def _delete(client: KubeClient, api_version: str, kind: str, name: str,
                  namespace: str | None = None) -> bool:
    try:
        await client.delete(api_version, kind, name, namespace)
        return True
    except NotFound:
        return False


async def member_client_from_hub(host: KubeClient, name: str) -> KubeClient | None:
    """A client for a joined member, from its Cluster and hub Secret (None when not joined)."""
    cluster = await host.get_or_none(CLUSTER_API_VERSION, "Cluster", name)
    if cluster is None:
        return None
    ref = (cluster.get("spec") or {}).get("secretRef") or {}
    secret = await host.get_or_none("v1", "Secret", ref.get("name", name), ref.get("namespace", HUB_NAMESPACE))
    if secret is None:
        return None
    return KubeClient(member_credentials(cluster, secret))


async def unjoin(host: KubeClient, member: KubeClient | None, name: str, *, keep_resources: bool = False,
                 force: bool = False, uses_own_token: bool = False) -> UnjoinResult:
    """Remove `name`: propagated objects (unless keep_resources), member SA/RBAC/Secret, hub side.

    `member` None means the member cannot be addressed (no credentials left); with `force` the
    hub side is cleaned anyway. `uses_own_token`: `member` authenticates with the joined
    ServiceAccount's token, so the ServiceAccount is deleted last and its Secret is left to the
    member's token controller (deleting it first would revoke the token mid-way).
    """
    validate_name(name)
    steps: list[str] = []
    cluster = await host.get_or_none(CLUSTER_API_VERSION, "Cluster", name)
    if cluster is not None and not cluster["metadata"].get("deletionTimestamp"):
        # Tell the propagation engine to stop dispatching to this cluster, and what to keep.
        mark = "keep-resources" if keep_resources else "delete-resources"
        await host.request("PATCH", f"/apis/{CLUSTER_API_VERSION}/clusters/{name}",
                           body={"metadata": {"annotations": {UNJOIN_ANNOTATION: mark}}},
                           content_type="application/merge-patch+json",
                           params={"fieldManager": FIELD_MANAGER})
    deleted: list[str] = []
    skipped = ""
    if member is None:
        skipped = "no credentials for the member"
        if not force:
            raise RegistryError(f"cluster {name!r}: {skipped}; pass --cluster-context, or --force "
                                "to remove it from the hub only")
    else:
        try:
            if not keep_resources:
                deleted = await delete_managed(member)
                steps += [f"member: deleted {d}" for d in deleted]
            if uses_own_token and await _delete(member, "rbac.authorization.k8s.io/v1",
                                                "ClusterRoleBinding", hub_admins_binding(name)):
                # not part of the credential's own access: deleted while that still holds
                steps.append(f"member: deleted ClusterRoleBinding {hub_admins_binding(name)}")
            if uses_own_token and await _hand_over_to_gc(member, name):
                steps.append(f"member: deleted ClusterRoleBinding {role_name(name)} (its ClusterRole, "
                             "ServiceAccount and token Secret follow by garbage collection)")
            else:
                for api_version, kind, obj_name, namespace in _member_cleanup(name, uses_own_token):
                    if await _delete(member, api_version, kind, obj_name, namespace):
                        steps.append(f"member: deleted {kind} {namespace + '/' if namespace else ''}{obj_name}")
        except KubeError as exc:
            if not force:
                raise RegistryError(f"cleaning up the member failed: {exc}; retry, or pass --force "
                                    "to remove it from the hub only") from None
            skipped = str(exc)
    for api_version, kind, obj_name, namespace in _hub_cleanup(name):
        try:
            if await _delete(host, api_version, kind, obj_name, namespace):
                steps.append(f"hub: deleted {kind} {namespace + '/' if namespace else ''}{obj_name}")
        except KubeError as exc:
            if exc.code == 404 and kind == "Cluster":  # no Cluster type: the hub was never installed
                continue
            raise
    return UnjoinResult(name, tuple(deleted), keep_resources, tuple(steps), skipped)


def _hub_cleanup(name: str) -> list[tuple[str, str, str, str | None]]:
    """What join or register made on the hub, in deletion order. A pull agent's Works Role and
    RoleBinding live in the execution namespace and go with it; deleting its ServiceAccount
    revokes the agent's token."""
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        ("v1", "Namespace", execution_namespace(name), None),
        (rbac, "ClusterRoleBinding", agent_role(name), None),
        (rbac, "ClusterRole", agent_role(name), None),
        (rbac, "RoleBinding", agent_role(name), HUB_NAMESPACE),
        (rbac, "Role", agent_role(name), HUB_NAMESPACE),
        ("coordination.k8s.io/v1", "Lease", name, HUB_NAMESPACE),
        ("v1", "Secret", agent_token_secret(name), HUB_NAMESPACE),
        ("v1", "ServiceAccount", agent_account(name), HUB_NAMESPACE),
        ("v1", "Secret", name, HUB_NAMESPACE),
        (CLUSTER_API_VERSION, "Cluster", name, None),
    ]


async def _hand_over_to_gc(member: KubeClient, name: str) -> bool:
    """Remove the join's access with its own token: False when its binding is already gone.

    Under RBAC the first deletion of the binding, role or account ends the token's access, so
    nothing could be deleted after it. The role and the account are made dependents of the
    binding first (ownerReferences, which RBAC does not count as a grant) and the binding is
    deleted last: the member's garbage collector removes the role and the account, and its
    token controller the token Secret.
    """
    rbac = "rbac.authorization.k8s.io/v1"
    binding = await member.get_or_none(rbac, "ClusterRoleBinding", role_name(name))
    if binding is None:
        return False
    owner = {"metadata": {"ownerReferences": [
        {"apiVersion": rbac, "kind": "ClusterRoleBinding", "name": role_name(name),
         "uid": binding["metadata"]["uid"]}]}}
    for path in (f"/apis/{rbac}/clusterroles/{role_name(name)}",
                 f"/api/v1/namespaces/{MEMBER_NAMESPACE}/serviceaccounts/{service_account_name(name)}"):
        try:
            await member.request("PATCH", path, body=owner, content_type="application/merge-patch+json",
                                 params={"fieldManager": FIELD_MANAGER})
        except NotFound:
            pass
    await _delete(member, rbac, "ClusterRoleBinding", role_name(name))
    return True


def _member_cleanup(name: str, uses_own_token: bool) -> list[tuple[str, str, str, str | None]]:
    rbac = "rbac.authorization.k8s.io/v1"
    steps: list[tuple[str, str, str, str | None]] = [
        (rbac, "ClusterRoleBinding", hub_admins_binding(name), None),
        (rbac, "ClusterRoleBinding", role_name(name), None),
        (rbac, "ClusterRole", role_name(name), None),
    ]
    secret = ("v1", "Secret", token_secret_name(name), MEMBER_NAMESPACE)
    account = ("v1", "ServiceAccount", service_account_name(name), MEMBER_NAMESPACE)
    return [*steps, account] if uses_own_token else [*steps, secret, account]


async def list_clusters(host: KubeClient) -> list[Obj]:
    try:
        return sorted(await host.list_objects(CLUSTER_API_VERSION, "Cluster"),
                      key=lambda c: c["metadata"]["name"])
    except NotFound:
        raise RegistryError("the hub has no Cluster type: run `tether hub install` first") from None
