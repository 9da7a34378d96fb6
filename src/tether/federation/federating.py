"""`tether federate`: Federated<Kind> objects from host objects or manifests (`kubefedctl federate`).

`federated_from_host` reads the target object from the host and converts it with
`kubefed.federate` (template = the object without status and with only its labels as metadata;
placement `clusterSelector: {matchLabels: {}}`, i.e. every cluster). The Federated object's
apiVersion follows the FederatedTypeConfig when the type is enabled under another
`--federated-group`.

`--contents` (namespaces only) adds every object in the namespace whose type is enabled. Unlike
kubefedctl, tether skips what controllers make and would fight over in members: objects with a
controller ownerReference (a Deployment's ReplicaSets, their Pods), the `kube-root-ca.crt`
ConfigMap, the `default` ServiceAccount and service-account-token Secrets; types that are not
enabled are reported rather than failing the whole command (`--enable-type` enables them, as
kubefedctl's does, except for Events, Endpoints and EndpointSlices, which are never federated).

`federate_manifests` is `kubefedctl federate --filename`: no server, YAML/JSON in, YAML out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from tether.federation.health import HUB_NAMESPACE
from tether.federation.kubefed import federate
from tether.federation.typeconfig import (
    FTC_API_VERSION,
    ApiType,
    FederationTypeError,
    apply_outcome,
    discover_types,
    enabled_type_configs,
)
from tether.kube import KubeClient, KubeError, NotFound
from tether.objects import Obj

FIELD_MANAGER = "tether-federate"
# Made by controllers, never federated (kubefedctl's controllerCreatedAPIResourceNames, plus
# EndpointSlices, which did not exist then).
CONTROLLER_MADE = frozenset({"endpoints", "events", "events.events.k8s.io",
                             "endpointslices.discovery.k8s.io"})


class FederateError(Exception):
    """A federate that cannot proceed; the message says what to do."""


@dataclass(frozen=True)
class Federated:
    """A Federated<Kind> object built from `source_ref` (e.g. `deployment/web`)."""

    target: ApiType
    source_ref: str
    obj: Obj

    @property
    def ref(self) -> str:
        meta = self.obj["metadata"]
        group = str(self.obj["apiVersion"]).split("/")[0]
        where = f"{meta['namespace']}/" if meta.get("namespace") else ""
        return f"{str(self.obj['kind']).lower()}.{group}/{where}{meta['name']}"


def ftc_federated_api(ftc: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(apiVersion, kind) of the federated type an FTC declares."""
    if ftc is None:
        return None
    fed = (ftc.get("spec") or {}).get("federatedType") or {}
    if not fed.get("kind"):
        return None
    return f"{fed.get('group')}/{fed.get('version', 'v1beta1')}", str(fed["kind"])


def federated_object(obj: Mapping[str, Any], ftc: Mapping[str, Any] | None = None) -> Obj:
    """`kubefed.federate(obj)`, with the apiVersion/kind the FTC declares, if given."""
    out = federate(obj)
    declared = ftc_federated_api(ftc)
    if declared is not None:
        out["apiVersion"], out["kind"] = declared
    return out


def _ref(target: ApiType, name: str, namespace: str) -> str:
    where = f"{namespace}/" if target.namespaced and namespace else ""
    return f"{target.qualified_name}/{where}{name}"


async def federated_from_host(host: KubeClient, target: ApiType, name: str, namespace: str,
                              ftc: Mapping[str, Any] | None = None) -> Federated:
    try:
        obj = await host.get(target.api_version, target.kind, name,
                             namespace if target.namespaced else None)
    except NotFound:
        where = f" in namespace {namespace!r}" if target.namespaced else ""
        raise FederateError(f'{target.qualified_name} "{name}" not found{where} on the host '
                            "(federate reads the object from the host cluster; create it there "
                            "first, or use `tether federate -f FILE`)") from None
    obj.setdefault("apiVersion", target.api_version)
    obj.setdefault("kind", target.kind)
    return from_object(target, obj, ftc)


def _skipped_content(obj: Mapping[str, Any]) -> bool:
    meta = obj.get("metadata") or {}
    if any(o.get("controller") for o in meta.get("ownerReferences") or []):
        return True
    kind, name = obj.get("kind"), meta.get("name")
    return ((kind == "ConfigMap" and name == "kube-root-ca.crt")
            or (kind == "ServiceAccount" and name == "default")
            or (kind == "Secret" and obj.get("type") == "kubernetes.io/service-account-token"))


@dataclass(frozen=True)
class Contents:
    objects: tuple[tuple[ApiType, Obj], ...]  # what to federate, from the host
    not_enabled: tuple[tuple[ApiType, int], ...]  # types with objects but no enabled FTC, and how many

    @property
    def types(self) -> list[ApiType]:
        return sorted({t for t, _ in self.objects}, key=lambda t: t.qualified_name)

    def federated(self, enabled: Mapping[str, Obj]) -> list[Federated]:
        return [from_object(t, o, enabled.get(t.qualified_name)) for t, o in self.objects]


def from_object(target: ApiType, obj: Mapping[str, Any], ftc: Mapping[str, Any] | None = None) -> Federated:
    meta = obj.get("metadata") or {}
    return Federated(target, _ref(target, str(meta.get("name")), str(meta.get("namespace") or "")),
                     federated_object(obj, ftc))


async def namespace_contents(host: KubeClient, namespace: str, *, enabled: Mapping[str, Obj],
                             include_types: Callable[[ApiType], bool] = lambda t: False,
                             federated_group: str = "types.kubefed.io") -> Contents:
    """What to federate in `namespace`: objects of enabled types (and of types `include_types`
    accepts), skipping controller-made objects; objects of other types are counted."""
    types = [t for t in await discover_types(host)
             # a type nobody can create (metrics.k8s.io's PodMetrics) cannot be propagated
             if t.namespaced and {"list", "get", "create"} <= t.verbs and t.group != "extensions"
             and t.qualified_name not in CONTROLLER_MADE
             and not (t.group == federated_group and t.kind.startswith("Federated"))
             and t.group not in ("cluster.tether.io", "work.tether.io", "core.kubefed.io",
                                 "policy.karmada.io", "scheduling.kubefed.io")]
    found: list[tuple[ApiType, Obj]] = []
    not_enabled: list[tuple[ApiType, int]] = []
    for target in types:
        try:
            listed = await host.list_objects(target.api_version, target.kind, namespace)
        except KubeError as exc:
            if exc.code in (403, 404, 405):
                continue
            raise
        objs = [o for o in listed if not _skipped_content(o)]
        if not objs:
            continue
        ftc = enabled.get(target.qualified_name)
        if ftc is None and not include_types(target):
            not_enabled.append((target, len(objs)))
            continue
        found += [(target, o) for o in sorted(objs, key=lambda o: str(o["metadata"]["name"]))]
    return Contents(tuple(found), tuple(not_enabled))


async def create(host: KubeClient, federated: Federated) -> str:
    """Create or update the Federated object on the host (server-side apply); the outcome."""
    obj = federated.obj
    meta = obj["metadata"]
    try:
        await host.resource(obj["apiVersion"], obj["kind"])
    except NotFound:
        raise FederateError(
            f"the host does not serve {obj['kind']} ({obj['apiVersion']}): the type is not enabled; "
            f"run `tether enable {federated.target.qualified_name}` or pass --enable-type") from None
    try:
        before: Obj | None = await host.get(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
    except NotFound:
        before = None
    try:
        after = await host.apply(obj, field_manager=FIELD_MANAGER)
    except KubeError as exc:
        if exc.code == 404 and meta.get("namespace"):
            raise FederateError(f"namespace {meta['namespace']!r} does not exist on the host: "
                                "Federated objects live in the namespace of their target") from None
        raise
    return apply_outcome(before, after)


async def unfederated_namespaces(host: KubeClient, items: Sequence[Federated]) -> list[str]:
    """The namespaces of `items` that have no FederatedNamespace (KubeFed propagates a namespaced
    Federated object only into clusters its namespace is placed in), leaving out namespaces
    federated by `items` themselves."""
    wanted = sorted({str(f.obj["metadata"]["namespace"]) for f in items
                     if f.obj["metadata"].get("namespace") and f.target.kind != "Namespace"})
    if not wanted:
        return []
    made = {str(f.obj["metadata"]["name"]) for f in items if f.target.kind == "Namespace"}
    ftc = await host.get_or_none(FTC_API_VERSION, "FederatedTypeConfig", "namespaces", HUB_NAMESPACE)
    api_version, kind = ftc_federated_api(ftc) or ("types.kubefed.io/v1beta1", "FederatedNamespace")
    return [ns for ns in wanted if ns not in made
            and await host.get_or_none(api_version, kind, ns, ns) is None]


async def type_config(host: KubeClient, target: ApiType, namespace: str = HUB_NAMESPACE) -> Obj | None:
    try:
        return await host.get(FTC_API_VERSION, "FederatedTypeConfig", target.qualified_name, namespace)
    except NotFound:
        return None


def require_enabled(target: ApiType, ftc: Mapping[str, Any] | None) -> None:
    if ftc is None:
        raise FederationTypeError(
            f"type {target.qualified_name!r} is not enabled for federation: run "
            f"`tether enable {target.qualified_name}` first, or pass --enable-type")
    if (ftc.get("spec") or {}).get("propagation") == "Disabled":
        raise FederationTypeError(
            f"propagation of {target.qualified_name!r} is disabled: run "
            f"`tether enable {target.qualified_name}` to enable it again")


# --filename ------------------------------------------------------------------------------------


def load_manifests(text: str, source: str = "-") -> list[Obj]:
    """The objects in a YAML/JSON stream (`kind: List` expanded, empty documents skipped)."""
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise FederateError(f"{source}: not valid YAML: {exc}") from None
    out: list[Obj] = []
    for doc in docs:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise FederateError(f"{source}: every document must be an object, found {type(doc).__name__}")
        if str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            out.extend(i for i in doc["items"] if isinstance(i, dict))
        else:
            out.append(doc)
    return out


def federate_manifests(objs: Sequence[Mapping[str, Any]], source: str = "-") -> list[Obj]:
    out: list[Obj] = []
    for index, obj in enumerate(objs):
        name = (obj.get("metadata") or {}).get("name")
        if not obj.get("kind") or not obj.get("apiVersion") or not name:
            raise FederateError(f"{source}: object {index + 1} needs apiVersion, kind and metadata.name")
        out.append(federate(obj))
    return out


__all__ = [
    "Contents",
    "FederateError",
    "Federated",
    "create",
    "enabled_type_configs",
    "federate_manifests",
    "federated_from_host",
    "federated_object",
    "from_object",
    "load_manifests",
    "namespace_contents",
    "require_enabled",
    "type_config",
]
