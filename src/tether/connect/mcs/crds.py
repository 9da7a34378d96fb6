"""The MCS API's CustomResourceDefinitions, as sigs.k8s.io/mcs-api and about-api publish them.

- `serviceexports.multicluster.x-k8s.io` (namespaced; `svcex`, `svcexport`) and
  `serviceimports.multicluster.x-k8s.io` (`svcim`, `svcimport`): v1alpha1 and v1beta1 both
  served, v1beta1 stored. The versions differ only in what v1beta1 adds (a ServiceExport spec
  with `exportedLabels`/`exportedAnnotations`; up to two ServiceImport `ips`), so one store
  serves both without conversion.
- `clusterproperties.about.k8s.io` (cluster-scoped): v1alpha1 and v1beta1, `spec.value` a string
  of 1 to 128,000 characters. Well-known names: `cluster.clusterset.k8s.io` (the cluster id) and
  `clusterset.k8s.io` (the clusterset it belongs to). `about.k8s.io` is a protected group, so the
  CRD carries the `api-approved.kubernetes.io` annotation.
"""

from __future__ import annotations

from typing import Any

Crd = dict[str, Any]
MCS_GROUP = "multicluster.x-k8s.io"
ABOUT_GROUP = "about.k8s.io"
VERSIONS = ("v1alpha1", "v1beta1")
STORAGE = "v1beta1"
APPROVAL = "https://github.com/kubernetes/enhancements/tree/master/keps/sig-multicluster/2149-clusterid"


def _string(**extra: Any) -> dict[str, Any]:
    return {"type": "string", **extra}


def _conditions() -> dict[str, Any]:
    return {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
            "items": {"type": "object", "required": ["type", "status", "lastTransitionTime", "reason", "message"],
                      "properties": {
                          "type": _string(maxLength=316),
                          "status": _string(enum=["True", "False", "Unknown"]),
                          "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0},
                          "lastTransitionTime": _string(format="date-time"),
                          "reason": _string(maxLength=1024),
                          "message": _string(maxLength=32768)}}}


def _session_affinity_config() -> dict[str, Any]:
    return {"type": "object", "properties": {"clientIP": {"type": "object", "properties": {
        "timeoutSeconds": {"type": "integer", "format": "int32"}}}}}


def _export_schema(version: str) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "apiVersion": _string(), "kind": _string(), "metadata": {"type": "object"},
        "status": {"type": "object", "properties": {"conditions": _conditions()}},
    }
    if version == "v1beta1":
        properties["spec"] = {"type": "object", "properties": {
            "exportedLabels": {"type": "object", "additionalProperties": _string()},
            "exportedAnnotations": {"type": "object", "additionalProperties": _string()}}}
    return {"type": "object", "properties": properties}


def _import_schema(version: str) -> dict[str, Any]:
    port = {"type": "object", "required": ["port"], "properties": {
        "name": _string(), "protocol": _string(default="TCP"), "appProtocol": _string(),
        "port": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 65535}}}
    spec: dict[str, Any] = {
        "type": "object", "required": ["ports", "type"], "properties": {
            "ports": {"type": "array", "items": port, "x-kubernetes-list-type": "atomic"},
            "ips": {"type": "array", "items": _string(), "maxItems": 2 if version == "v1beta1" else 1},
            "type": _string(enum=["ClusterSetIP", "Headless"]),
            "sessionAffinity": _string(),
            "sessionAffinityConfig": _session_affinity_config(),
            "ipFamilies": {"type": "array", "items": _string(), "maxItems": 2},
            "internalTrafficPolicy": _string(),
            "trafficDistribution": _string(),
        }}
    status = {"type": "object", "properties": {
        "clusters": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["cluster"],
                     "items": {"type": "object", "required": ["cluster"], "properties": {"cluster": _string()}}},
        "conditions": _conditions()}}
    return {"type": "object", "properties": {"apiVersion": _string(), "kind": _string(),
                                             "metadata": {"type": "object"}, "spec": spec, "status": status}}


def _crd(group: str, kind: str, plural: str, scope: str, short: list[str], schema: Any,
         columns: list[dict[str, Any]]) -> Crd:
    versions = []
    for version in VERSIONS:
        versions.append({"name": version, "served": True, "storage": version == STORAGE,
                         "schema": {"openAPIV3Schema": schema(version)}, "subresources": {"status": {}},
                         "additionalPrinterColumns": columns})
    names: dict[str, Any] = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()}
    if short:
        names["shortNames"] = short
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}", "labels": {"app.kubernetes.io/part-of": "tether-connect"}},
            "spec": {"group": group, "scope": scope, "names": names, "versions": versions}}


def service_export_crd() -> Crd:
    return _crd(MCS_GROUP, "ServiceExport", "serviceexports", "Namespaced", ["svcex", "svcexport"], _export_schema,
                [{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}])


def service_import_crd() -> Crd:
    return _crd(MCS_GROUP, "ServiceImport", "serviceimports", "Namespaced", ["svcim", "svcimport"], _import_schema,
                [{"name": "Type", "type": "string", "jsonPath": ".spec.type"},
                 {"name": "IP", "type": "string", "jsonPath": ".spec.ips"},
                 {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}])


def _property_schema(version: str) -> dict[str, Any]:
    del version
    return {"type": "object", "properties": {
        "apiVersion": _string(), "kind": _string(), "metadata": {"type": "object"},
        "spec": {"type": "object", "required": ["value"],
                 "properties": {"value": _string(minLength=1, maxLength=128000)}}}}


def cluster_property_crd() -> Crd:
    crd = _crd(ABOUT_GROUP, "ClusterProperty", "clusterproperties", "Cluster", [], _property_schema,
               [{"name": "Value", "type": "string", "jsonPath": ".spec.value"},
                {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}])
    for version in crd["spec"]["versions"]:
        version.pop("subresources")
    # *.k8s.io is a protected group: the API server wants to know where the API was approved
    crd["metadata"]["annotations"] = {"api-approved.kubernetes.io": APPROVAL}
    return crd


def member_crds() -> list[Crd]:
    """What a member of a clusterset needs: ServiceExport, ServiceImport, ClusterProperty."""
    return [service_export_crd(), service_import_crd(), cluster_property_crd()]
