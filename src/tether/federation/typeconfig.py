"""`tether enable` / `tether disable`: KubeFed's FederatedTypeConfigs, as `kubefedctl` manages them.

A type is named as kubectl and kubefedctl accept it, and resolved against the host's discovery at
each group's preferred version (kubefedctl's `LookupAPIResource`): the plural (`deployments`),
the group-qualified plural (`deployments.apps`), the singular (`deployment`), the kind in any
case (`Deployment`) or a short name (`deploy`). CRD types resolve the same way. A name that
matches in two groups must be group-qualified.

Enable creates the `Federated<Kind>` CRD (short names are the target's prefixed with `f`, as
kubefedctl does), waits until it is Established, then creates the FederatedTypeConfig with
`propagation: Enabled` in the hub namespace. `-o yaml` prints both instead (FTC first, then the
CRD, each after `---`). Disable sets `propagation: Disabled`; with `delete_crd` it deletes the
CRD (refused while Federated objects of the type exist) and then the FTC, as kubefedctl does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from tether.federation import crds
from tether.federation.health import HUB_NAMESPACE
from tether.federation.install import FIELD_MANAGER as INSTALL_FIELD_MANAGER
from tether.federation.install import wait_established
from tether.federation.kubefed import federated_type_names
from tether.kube import KubeClient, KubeError, NotFound
from tether.objects import Obj

FTC_API_VERSION = f"{crds.KUBEFED_CORE_GROUP}/v1beta1"
CRD_API_VERSION = "apiextensions.k8s.io/v1"
FIELD_MANAGER = "tether-enable"
DEFAULT_FEDERATED_GROUP = crds.KUBEFED_TYPES_GROUP


class FederationTypeError(Exception):
    """A type that cannot be resolved, enabled or disabled; the message says what to do."""


@dataclass(frozen=True)
class ApiType:
    """One resource type as discovery describes it (at its group's preferred version)."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    verbs: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified_name(self) -> str:
        """`deployments.apps`, or `configmaps` for the core group: also the FTC's name."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def scope(self) -> str:
        return "Namespaced" if self.namespaced else "Cluster"

    def matches(self, name: str) -> bool:
        """kubefedctl's NameMatchesResource (case-insensitive)."""
        key = name.lower()
        return (key in (self.plural, self.singular, self.kind.lower(), self.qualified_name.lower())
                or key in (s.lower() for s in self.short_names))


def _group_versions(groups: Obj) -> list[str]:
    out = ["v1"]
    for group in groups.get("groups") or []:
        preferred = (group.get("preferredVersion") or {}).get("groupVersion")
        if preferred:
            out.append(str(preferred))
    return out


async def discover_types(client: KubeClient, *, timeout_s: float | None = None) -> list[ApiType]:
    """Every top-level resource at its group's preferred version, core first."""
    groups = await client.request("GET", "/apis", timeout_s=timeout_s)
    gvs = _group_versions(groups)

    async def one(gv: str) -> list[ApiType]:
        path = f"/api/{gv}" if "/" not in gv else f"/apis/{gv}"
        try:
            listed = await client.request("GET", path, timeout_s=timeout_s)
        except KubeError as exc:
            if exc.code in (404, 503):  # a group that went away or an unavailable aggregated API
                return []
            raise
        group, _, version = gv.rpartition("/")
        found: list[ApiType] = []
        for entry in listed.get("resources") or []:
            name = str(entry.get("name", ""))
            if not name or "/" in name or not entry.get("kind"):
                continue
            found.append(ApiType(group, version, str(entry["kind"]), name, bool(entry.get("namespaced")),
                                 str(entry.get("singularName") or ""),
                                 tuple(str(s) for s in entry.get("shortNames") or ()),
                                 frozenset(str(v) for v in entry.get("verbs") or ())))
        return found

    results = await asyncio.gather(*(one(gv) for gv in gvs))
    return [t for listed in results for t in listed]


def unknown_type_message(name: str) -> str:
    return (f'the server doesn\'t have a resource type "{name}" (list the types with '
            "`kubectl api-resources`; CRD types need their CRD installed first)")


def match_type(name: str, types: Sequence[ApiType]) -> ApiType:
    """The one type `name` designates, or `FederationTypeError` (unknown, or ambiguous across groups)."""
    if not name:
        raise FederationTypeError("a resource type is required, e.g. deployments.apps")
    matched = [t for t in types if t.matches(name)]
    # kubectl prefers the exact plural/kind in the core group over a CRD sharing a short name.
    if len(matched) > 1:
        exact = [t for t in matched if t.qualified_name == name.lower()]
        matched = exact or matched
    if len({t.group for t in matched}) > 1:
        # As kubectl's group priorities do: Kubernetes' own groups come before any CRD's
        # (`networkpolicies` is networking.k8s.io's, not Calico's crd.projectcalico.org one).
        own = [t for t in matched if _kubernetes_group(t.group)]
        matched = own or matched
    if not matched:
        raise FederationTypeError(unknown_type_message(name))
    if len({t.qualified_name for t in matched}) > 1:
        names = ", ".join(sorted({t.qualified_name for t in matched}))
        raise FederationTypeError(f"{name!r} matches several resource types: {names}; "
                         "give the group-qualified plural name, e.g. " + sorted(
                             {t.qualified_name for t in matched})[0])
    return matched[0]


def _kubernetes_group(group: str) -> bool:
    """Groups kube-apiserver serves itself: the core group, dotless ones (apps, batch) and *.k8s.io."""
    return "." not in group or group.endswith(".k8s.io")


async def resolve_type(client: KubeClient, name: str) -> ApiType:
    return match_type(name, await discover_types(client))


# enable ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TypeObjects:
    """What `enable` creates: the FederatedTypeConfig and the Federated<Kind> CRD."""

    target: ApiType
    type_config: Obj
    crd: Obj

    @property
    def federated_kind(self) -> str:
        return str(self.type_config["spec"]["federatedType"]["kind"])

    @property
    def crd_name(self) -> str:
        return str(self.crd["metadata"]["name"])


def type_objects(target: ApiType, *, federated_group: str = DEFAULT_FEDERATED_GROUP,
                 namespace: str = HUB_NAMESPACE) -> TypeObjects:
    names = federated_type_names(target.kind, target.group, target.version, target.plural)
    scope = crds.federated_scope(target.kind, target.scope)
    crd = crds.federated_crd(target.kind, target.plural, scope)
    ftc = crds.federated_type_config(group=target.group, version=target.version, kind=target.kind,
                                     plural=target.plural, scope=target.scope, namespace=namespace)
    if federated_group != crds.KUBEFED_TYPES_GROUP:
        crd["spec"]["group"] = federated_group
        crd["metadata"]["name"] = f"{names.plural}.{federated_group}"
        ftc["spec"]["federatedType"]["group"] = federated_group
    if target.short_names:
        crd["spec"]["names"]["shortNames"] = [f"f{s}" for s in target.short_names]
    return TypeObjects(target, ftc, crd)


def to_yaml(objects: Iterable[Mapping[str, Any]]) -> str:
    """Documents each after `---`, keys sorted (kubefedctl's and kubectl's YAML)."""
    return "".join("---\n" + yaml.safe_dump(dict(o), sort_keys=True, default_flow_style=False)
                   for o in objects)


def _content(obj: Mapping[str, Any]) -> Obj:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items()
            if k not in ("resourceVersion", "managedFields", "generation")}
    return {**obj, "metadata": meta, "status": None}


def apply_outcome(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> str:
    """created | unchanged | configured, as kubectl apply reports it (a no-op apply may still
    bump resourceVersion, so contents are compared)."""
    if before is None:
        return "created"
    same_version = (before.get("metadata") or {}).get("resourceVersion") == (after.get("metadata") or {}).get(
        "resourceVersion")
    return "unchanged" if same_version or _content(before) == _content(after) else "configured"



def _not_installed(exc: KubeError) -> FederationTypeError:
    return FederationTypeError(f"the hub has no FederatedTypeConfig type ({exc.message}); "
                      "run `tether hub install` on the host first")


async def _type_configs(client: KubeClient, namespace: str) -> list[Obj]:
    try:
        return await client.list_objects(FTC_API_VERSION, "FederatedTypeConfig", namespace)
    except NotFound as exc:
        raise _not_installed(exc) from None


async def enable(client: KubeClient, objects: TypeObjects, *, namespace: str = HUB_NAMESPACE,
                 establish_wait_s: float = 60.0,
                 report: Callable[[str], None] = lambda line: None) -> list[str]:
    """Create (or update) the Federated<Kind> CRD, wait until Established, then the FTC."""
    configs = await _type_configs(client, namespace)
    ftc_name = objects.type_config["metadata"]["name"]
    wanted = objects.type_config["spec"]["federatedType"]
    for existing in configs:
        fed = (existing.get("spec") or {}).get("federatedType") or {}
        same_target = existing["metadata"]["name"] == ftc_name
        same_crd = (f"{fed.get('pluralName')}.{fed.get('group')}" == objects.crd_name)
        if same_target and (fed.get("group"), fed.get("pluralName")) != (wanted["group"], wanted["pluralName"]):
            raise FederationTypeError(
                f"federation is already enabled for {ftc_name!r} with federated type "
                f"{fed.get('pluralName')}.{fed.get('group')}; changing it to {objects.crd_name} is not "
                f"supported (run `tether disable {ftc_name} --delete-crd` first)")
        if same_crd and not same_target:
            raise FederationTypeError(
                f"cannot enable {ftc_name!r}: the FederatedTypeConfig {existing['metadata']['name']!r} "
                f"already uses the federated type {objects.crd_name}; pass another "
                "--federated-group to enable this type as well")
    lines: list[str] = []

    async def apply(obj: Obj, label: str) -> None:
        before = await client.get_or_none(obj["apiVersion"], obj["kind"], obj["metadata"]["name"],
                                    obj["metadata"].get("namespace"))
        # `tether hub install` applies the default types under its own field manager: keep it
        # for those, so enabling them again is a no-op rather than an ownership change.
        managers = {m.get("manager") for m in (before or {}).get("metadata", {}).get("managedFields") or []}
        manager = INSTALL_FIELD_MANAGER if INSTALL_FIELD_MANAGER in managers else FIELD_MANAGER
        after = await client.apply(obj, field_manager=manager)
        outcome = apply_outcome(before, after)
        where = f" in namespace {namespace}" if obj["metadata"].get("namespace") else ""
        line = f"{label}/{obj['metadata']['name']} {outcome}{where}"
        lines.append(line)
        report(line)

    await apply(objects.crd, "customresourcedefinition.apiextensions.k8s.io")
    await wait_established(client, [objects.crd_name], establish_wait_s)
    await apply(objects.type_config, f"federatedtypeconfig.{crds.KUBEFED_CORE_GROUP}")
    return lines


# disable ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DisableResult:
    name: str
    lines: tuple[str, ...]


async def _federated_objects_exist(client: KubeClient, fed: Mapping[str, Any]) -> bool:
    api_version = f"{fed.get('group')}/{fed.get('version')}"
    try:
        listed = await client.list_all(api_version, str(fed.get("kind")), limit=1)
    except NotFound:
        return False
    return bool(listed.items)


async def ftc_name_for(client: KubeClient, name: str) -> str:
    """The FTC name for a disable argument: group-qualified names are taken as they are (the
    target type may be gone), others are looked up in discovery (kubefedctl's rule)."""
    if "." in name:
        return name.lower()
    return (await resolve_type(client, name)).qualified_name


async def disable(client: KubeClient, name: str, *, delete_crd: bool = False,
                  namespace: str = HUB_NAMESPACE,
                  report: Callable[[str], None] = lambda line: None) -> DisableResult:
    ftc_name = await ftc_name_for(client, name)
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        report(line)

    try:
        ftc = await client.get_or_none(FTC_API_VERSION, "FederatedTypeConfig", ftc_name, namespace)
    except NotFound as exc:
        raise _not_installed(exc) from None
    if ftc is None:
        raise FederationTypeError(f"type {ftc_name!r} is not enabled (no FederatedTypeConfig {namespace}/{ftc_name}); "
                         f"enabled types: `kubectl -n {namespace} get federatedtypeconfigs`")
    fed = (ftc.get("spec") or {}).get("federatedType") or {}
    crd_name = f"{fed.get('pluralName')}.{fed.get('group')}"
    if delete_crd and await _federated_objects_exist(client, fed):
        raise FederationTypeError(f"cannot delete CRD {crd_name!r} while {fed.get('kind')} objects exist; "
                         "delete them first, or run `tether disable` without --delete-crd")
    qualified = f"{namespace}/{ftc_name}"
    if (ftc.get("spec") or {}).get("propagation") != "Disabled":
        await client.patch(FTC_API_VERSION, "FederatedTypeConfig", ftc_name,
                           {"spec": {"propagation": "Disabled"}}, namespace=namespace,
                           field_manager=FIELD_MANAGER)
        say(f'Disabled propagation for FederatedTypeConfig "{qualified}"')
    else:
        say(f'Propagation already disabled for FederatedTypeConfig "{qualified}"')
    if delete_crd:
        try:
            await client.delete(CRD_API_VERSION, "CustomResourceDefinition", crd_name)
            say(f'customresourcedefinition "{crd_name}" deleted')
        except NotFound:
            say(f'customresourcedefinition "{crd_name}" does not exist')
        try:
            await client.delete(FTC_API_VERSION, "FederatedTypeConfig", ftc_name, namespace)
        except NotFound:
            pass
        say(f'federatedtypeconfig "{qualified}" deleted')
    return DisableResult(ftc_name, tuple(lines))


async def enabled_type_configs(client: KubeClient, namespace: str = HUB_NAMESPACE) -> dict[str, Obj]:
    """FTCs with propagation Enabled, by name."""
    return {f["metadata"]["name"]: f for f in await _type_configs(client, namespace)
            if (f.get("spec") or {}).get("propagation", "Enabled") == "Enabled"}


__all__ = [
    "ApiType",
    "DisableResult",
    "FederationTypeError",
    "TypeObjects",
    "apply_outcome",
    "disable",
    "discover_types",
    "enable",
    "enabled_type_configs",
    "match_type",
    "resolve_type",
    "to_yaml",
    "type_objects",
]
