"""Discovery documents, legacy (per group-version) and aggregated (apidiscovery.k8s.io/v2)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tether.local.resources import Registry, ResourceType

AGGREGATED_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
AGGREGATED_V2BETA1_CONTENT_TYPE = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
SCALE_KIND = {"group": "autoscaling", "version": "v1", "kind": "Scale"}
SUBRESOURCE_VERBS = ("get", "patch", "update")


def wants_aggregated(accept: str) -> str:
    """The aggregated content type the client asked for, or "" for legacy discovery."""
    for part in accept.split(","):
        if "as=APIGroupDiscoveryList" in part:
            return AGGREGATED_V2BETA1_CONTENT_TYPE if "v=v2beta1" in part else AGGREGATED_CONTENT_TYPE
    return ""


def _gv(group: str, version: str) -> dict[str, str]:
    return {"groupVersion": f"{group}/{version}" if group else version, "version": version}


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def api_group(registry: Registry, group: str) -> dict[str, Any] | None:
    versions = registry.group_versions().get(group)
    if not versions or not group:
        return None
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": [_gv(group, v) for v in versions],
        "preferredVersion": _gv(group, versions[0]),
    }


def api_group_list(registry: Registry) -> dict[str, Any]:
    groups = []
    for group, versions in registry.group_versions().items():
        if group:
            groups.append(
                {"name": group, "versions": [_gv(group, v) for v in versions],
                 "preferredVersion": _gv(group, versions[0])}
            )
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def _legacy_resource(rt: ResourceType) -> list[dict[str, Any]]:
    main: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        main["shortNames"] = list(rt.short_names)
    if rt.categories:
        main["categories"] = list(rt.categories)
    out = [main]
    for sub in rt.all_subresources():
        entry: dict[str, Any] = {"name": f"{rt.plural}/{sub}", "singularName": "", "namespaced": rt.namespaced,
                                 "kind": rt.kind, "verbs": list(SUBRESOURCE_VERBS)}
        if sub == "scale":
            entry.update(group="autoscaling", version="v1", kind="Scale")
        elif sub in ("log",):
            entry.update(kind="Pod", verbs=["get"])
        elif sub in ("exec", "attach", "portforward", "proxy"):
            entry.update(kind=f"{rt.kind}{sub.capitalize()}Options" if sub != "proxy" else f"{rt.kind}ProxyOptions",
                         verbs=["create", "get"])
        elif sub in ("binding", "eviction", "token"):
            entry.update(kind={"binding": "Binding", "eviction": "Eviction", "token": "TokenRequest"}[sub],
                         verbs=["create"])
            if sub == "eviction":
                entry.update(group="policy", version="v1")
            if sub == "token":
                entry.update(group="authentication.k8s.io", version="v1")
        elif sub == "finalize":
            entry.update(verbs=["update"])
        out.append(entry)
    return out


def api_resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = registry.in_group_version(group, version)
    if not types:
        return None
    resources: list[dict[str, Any]] = []
    for rt in types:
        resources.extend(_legacy_resource(rt))
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def _aggregated_resource(rt: ResourceType) -> dict[str, Any]:
    kind = {"group": rt.group, "version": rt.version, "kind": rt.kind}
    entry: dict[str, Any] = {
        "resource": rt.plural,
        "responseKind": kind,
        "scope": "Namespaced" if rt.namespaced else "Cluster",
        "singularResource": rt.singular,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    subs = []
    for legacy in _legacy_resource(rt)[1:]:
        sub_kind = {"group": legacy.get("group", rt.group), "version": legacy.get("version", rt.version),
                    "kind": legacy["kind"]}
        subs.append({"subresource": legacy["name"].split("/", 1)[1], "responseKind": sub_kind,
                     "verbs": legacy["verbs"]})
    if subs:
        entry["subresources"] = subs
    return entry


def aggregated(registry: Registry, *, core: bool) -> dict[str, Any]:
    items = []
    for group, versions in registry.group_versions().items():
        if (group == "") != core:
            continue
        items.append(
            {
                "metadata": {"name": group, "creationTimestamp": None},
                "versions": [
                    {
                        "version": v,
                        "freshness": "Current",
                        "resources": [_aggregated_resource(rt) for rt in registry.in_group_version(group, v)],
                    }
                    for v in versions
                ],
            }
        )
    return {"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items}


def etag(document: dict[str, Any]) -> str:
    return '"' + hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:32] + '"'
