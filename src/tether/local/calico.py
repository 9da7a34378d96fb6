"""Calico's resources in a local cluster: the CRDs, served in both of Calico's API groups.

`crd.projectcalico.org/v1` (Calico's own CRDs, its storage on a Kubernetes datastore) and
`projectcalico.org/v3` (what the Calico API server serves, and what controllers such as
semaphore-policy write) are one store here, seen through two groups with the same schema
(`crds.SHARED_STORAGE_GROUPS`): a GlobalNetworkSet written through v3 is read through v1 and
the other way round, as on a cluster running Calico's API server.

Served: GlobalNetworkSet, NetworkSet, NetworkPolicy, GlobalNetworkPolicy (both groups) and
IPPool (v1 here; v3 is `nodes.ippool_crd`, which IPAM reads). The admission plugin makes the
checks Calico's API server makes on writes: nets are CIDRs, selectors parse, rule actions,
protocols and ports are valid. Policies are enforced in netns mode
(`tether.local.netpolicy`) and stored only in rootless mode.
"""

from __future__ import annotations

import copy
import ipaddress
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tether.local.errors import ApiError, Cause, invalid
from tether.local.nodes import ippool_crd
from tether.local.operations import Operations, WriteOptions
from tether.local.resources import ResourceType
from tether.objects import Obj, calico_selector

if TYPE_CHECKING:
    from tether.local.cluster import Component, LocalCluster

V1_GROUP = "crd.projectcalico.org"
V3_GROUP = "projectcalico.org"
GROUPS = (V1_GROUP, V3_GROUP)
MANAGER = "tether-calico"
PRESERVE = {"x-kubernetes-preserve-unknown-fields": True}

_ACTIONS = ("Allow", "Deny", "Log", "Pass")
_PROTOCOLS = ("TCP", "UDP", "ICMP", "ICMPv6", "SCTP", "UDPLite")
_PORTED = ("TCP", "UDP", "SCTP", 6, 17, 132)
_PORT_RANGE = re.compile(r"^(\d+)(?::(\d+))?$")


def _string(description: str = "") -> Obj:
    out: Obj = {"type": "string"}
    if description:
        out["description"] = description
    return out


def _strings() -> Obj:
    return {"type": "array", "items": {"type": "string"}}


def _int_or_string() -> Obj:
    return {"x-kubernetes-int-or-string": True}


def _entity() -> Obj:
    return {"type": "object", **PRESERVE, "properties": {
        "nets": _strings(), "notNets": _strings(),
        "selector": _string("Calico selector of endpoints (and network sets)"),
        "notSelector": _string(), "namespaceSelector": _string("Calico selector of namespaces; global() for "
                                                               "non-namespaced resources"),
        "ports": {"type": "array", "items": _int_or_string()},
        "notPorts": {"type": "array", "items": _int_or_string()},
        "serviceAccounts": {"type": "object", "properties": {"names": _strings(), "selector": _string()}},
        "services": {"type": "object", "properties": {"name": _string(), "namespace": _string()}},
    }}


def _rule() -> Obj:
    return {"type": "object", **PRESERVE, "required": ["action"], "properties": {
        "action": _string("Allow, Deny, Log or Pass"),
        "ipVersion": {"type": "integer"},
        "protocol": _int_or_string(),
        "notProtocol": _int_or_string(),
        "icmp": {"type": "object", "properties": {"type": {"type": "integer"}, "code": {"type": "integer"}}},
        "notICMP": {"type": "object", "properties": {"type": {"type": "integer"}, "code": {"type": "integer"}}},
        "source": _entity(),
        "destination": _entity(),
        "http": {"type": "object", **PRESERVE},
        "metadata": {"type": "object", "properties": {
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}}}},
    }}


def _policy_spec(global_: bool) -> Obj:
    props: Obj = {
        "order": {"type": "number"},
        "tier": _string(),
        "selector": _string("Calico selector of the endpoints the policy applies to"),
        "types": _strings(),
        "ingress": {"type": "array", "items": _rule()},
        "egress": {"type": "array", "items": _rule()},
        "serviceAccountSelector": _string(),
        "performanceHints": _strings(),
    }
    if global_:
        props.update({"namespaceSelector": _string(), "doNotTrack": {"type": "boolean"},
                      "preDNAT": {"type": "boolean"}, "applyOnForward": {"type": "boolean"}})
    return {"type": "object", **PRESERVE, "properties": props}


def _set_spec() -> Obj:
    return {"type": "object", "properties": {"nets": _strings()}}


_KINDS: tuple[tuple[str, str, bool, Callable[[], Obj]], ...] = (
    ("GlobalNetworkSet", "globalnetworksets", False, _set_spec),
    ("NetworkSet", "networksets", True, _set_spec),
    ("NetworkPolicy", "networkpolicies", True, lambda: _policy_spec(False)),
    ("GlobalNetworkPolicy", "globalnetworkpolicies", False, lambda: _policy_spec(True)),
)


def crd(group: str, kind: str, plural: str, namespaced: bool, spec: Obj) -> Obj:
    version = "v1" if group == V1_GROUP else "v3"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced" if namespaced else "Cluster",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "versions": [{
                "name": version, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                    "metadata": {"type": "object"}, "spec": spec}}},
            }],
        },
    }


def calico_crds() -> list[Obj]:
    out = [crd(group, kind, plural, namespaced, make())
           for group in GROUPS for kind, plural, namespaced, make in _KINDS]
    ippool_v1 = copy.deepcopy(ippool_crd.ippool_crd())
    ippool_v1["metadata"]["name"] = f"ippools.{V1_GROUP}"
    ippool_v1["spec"]["group"] = V1_GROUP
    ippool_v1["spec"]["versions"][0]["name"] = "v1"
    out.append(ippool_v1)
    return out


def ensure_crds(ops: Operations) -> None:
    """Create the CRDs unless something (a user, Calico's own manifests, an earlier start) did."""
    rt = ops.registry.lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    if rt is None:
        return
    opts = WriteOptions(manager=MANAGER, user=f"system:serviceaccount:{MANAGER}")
    for body in calico_crds():
        if ops.find(rt, "", body["metadata"]["name"]) is not None:
            continue
        try:
            ops.create(rt, "", body, opts)
        except ApiError as exc:
            if exc.code != 409:
                raise


# what Calico's API server checks -------------------------------------------------------------


def _cidr_causes(values: Any, field: str) -> list[Cause]:
    causes = []
    for i, value in enumerate(values or []):
        try:
            ipaddress.ip_network(str(value), strict=False)
        except ValueError:
            causes.append(Cause("FieldValueInvalid", f"Invalid value: {value!r}: must be a CIDR or an IP address",
                                f"{field}[{i}]"))
    return causes


def _selector_causes(value: Any, field: str) -> list[Cause]:
    if value in (None, ""):
        return []
    try:
        calico_selector.parse(str(value))
    except calico_selector.SelectorError as exc:
        return [Cause("FieldValueInvalid", f"Invalid value: {value!r}: {exc}", field)]
    return []


def _port_causes(values: Any, field: str) -> list[Cause]:
    causes = []
    for i, port in enumerate(values or []):
        where = f"{field}[{i}]"
        if isinstance(port, bool) or not isinstance(port, int | str):
            causes.append(Cause("FieldValueInvalid", f"Invalid value: {port!r}: a port, a range or a name", where))
            continue
        if isinstance(port, int):
            if not 0 <= port <= 65535:
                causes.append(Cause("FieldValueInvalid", f"Invalid value: {port}: must be 0..65535", where))
            continue
        match = _PORT_RANGE.match(port)
        if match:
            low, high = int(match.group(1)), int(match.group(2) or match.group(1))
            if not 0 <= low <= high <= 65535:
                causes.append(Cause("FieldValueInvalid", f"Invalid value: {port!r}: not a port range", where))
        elif not re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", port) or len(port) > 15:
            causes.append(Cause("FieldValueInvalid", f"Invalid value: {port!r}: not a port, range or port name",
                                where))
    return causes


def _entity_causes(entity: Any, field: str, ported: bool) -> list[Cause]:
    if not isinstance(entity, dict):
        return []
    causes = _cidr_causes(entity.get("nets"), f"{field}.nets") + _cidr_causes(entity.get("notNets"),
                                                                              f"{field}.notNets")
    for key in ("selector", "notSelector", "namespaceSelector"):
        causes += _selector_causes(entity.get(key), f"{field}.{key}")
    accounts = entity.get("serviceAccounts")
    if isinstance(accounts, dict):
        causes += _selector_causes(accounts.get("selector"), f"{field}.serviceAccounts.selector")
    for key in ("ports", "notPorts"):
        if entity.get(key):
            causes += _port_causes(entity.get(key), f"{field}.{key}")
            if not ported:
                causes.append(Cause("FieldValueInvalid", "rules that specify ports must set protocol to TCP, "
                                    "UDP or SCTP", f"{field}.{key}"))
    return causes


def _protocol_causes(value: Any, field: str) -> list[Cause]:
    if value is None:
        return []
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 255:
        return []
    if isinstance(value, str) and (value in _PROTOCOLS or (value.isdigit() and 1 <= int(value) <= 255)):
        return []
    return [Cause("FieldValueNotSupported", f"Unsupported value: {value!r}: supported values: "
                  + ", ".join(f'"{p}"' for p in _PROTOCOLS) + " or 1..255", field)]


def policy_causes(spec: Any) -> list[Cause]:
    if not isinstance(spec, dict):
        return []
    causes = _selector_causes(spec.get("selector"), "spec.selector")
    causes += _selector_causes(spec.get("namespaceSelector"), "spec.namespaceSelector")
    causes += _selector_causes(spec.get("serviceAccountSelector"), "spec.serviceAccountSelector")
    for i, kind in enumerate(spec.get("types") or []):
        if kind not in ("Ingress", "Egress"):
            causes.append(Cause("FieldValueNotSupported", f'Unsupported value: {kind!r}: supported values: '
                                '"Ingress", "Egress"', f"spec.types[{i}]"))
    for direction in ("ingress", "egress"):
        for i, rule in enumerate(spec.get(direction) or []):
            if not isinstance(rule, dict):
                continue
            where = f"spec.{direction}[{i}]"
            if rule.get("action") not in _ACTIONS:
                causes.append(Cause("FieldValueNotSupported", f"Unsupported value: {rule.get('action')!r}: "
                                    "supported values: " + ", ".join(f'"{a}"' for a in _ACTIONS),
                                    f"{where}.action"))
            causes += _protocol_causes(rule.get("protocol"), f"{where}.protocol")
            causes += _protocol_causes(rule.get("notProtocol"), f"{where}.notProtocol")
            ported = rule.get("protocol") in _PORTED
            causes += _entity_causes(rule.get("source"), f"{where}.source", ported)
            causes += _entity_causes(rule.get("destination"), f"{where}.destination", ported)
    return causes


def causes_for(kind: str, obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if kind in ("GlobalNetworkSet", "NetworkSet"):
        return _cidr_causes((spec or {}).get("nets") if isinstance(spec, dict) else None, "spec.nets")
    if kind in ("NetworkPolicy", "GlobalNetworkPolicy"):
        return policy_causes(spec)
    return []


def admission(rt: ResourceType, obj: Obj, current: Obj | None) -> None:
    """An `ops.admission` plugin: Calico's API server's checks, for both groups."""
    if rt.group not in GROUPS:
        return
    causes = causes_for(rt.kind, obj)
    if causes:
        raise invalid(rt.kind, str((obj.get("metadata") or {}).get("name", "")), causes, rt.group)


def build(cluster: LocalCluster) -> list[Component]:
    """Registered before the API serves, so Calico manifests apply as soon as the cluster is up;
    nothing runs here (`tether.local.netpolicy` enforces policies in netns mode)."""
    ensure_crds(cluster.ops)
    cluster.ops.admission.append(admission)
    return []
