"""The `ippools.projectcalico.org` CRD (Calico's v3 IPPool) and the checks Calico's API server makes.

Registered through `Operations` like any client would, so `kubectl apply` of Calico manifests
works; its printer columns follow `calicoctl get ippool -o wide`. One check is tether's own: a
rootless cluster refuses an enabled workload pool outside 127.0.0.0/8, whose addresses it could
not keep on this machine (see `tether.local.network`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from tether.local.errors import ApiError, Cause, invalid
from tether.local.network import ROOTLESS, ClusterNetwork
from tether.local.nodes.ipam import IPPOOLS, non_local_message, pool_from_object
from tether.local.operations import Operations, WriteOptions
from tether.local.resources import ResourceType
from tether.objects import Obj, calico_selector

CRD_NAME = "ippools.projectcalico.org"
MANAGER = "tether-node-manager"
_MODES = ["Never", "Always", "CrossSubnet"]


def _column(name: str, path: str, type_: str = "string", priority: int = 0) -> Obj:
    column: Obj = {"name": name, "type": type_, "jsonPath": path}
    if priority:
        column["priority"] = priority
    return column


def ippool_crd() -> Obj:
    spec_props: Obj = {
        "cidr": {"type": "string", "description": "The pool's CIDR."},
        "blockSize": {"type": "integer", "default": 26, "description": "Prefix length of the blocks "
                      "handed to nodes (IPv4 20..32)."},
        "ipipMode": {"type": "string", "enum": _MODES, "default": "Never"},
        "vxlanMode": {"type": "string", "enum": _MODES, "default": "Never"},
        "natOutgoing": {"type": "boolean", "default": False},
        "disabled": {"type": "boolean", "default": False,
                     "description": "When true, IPAM assigns no addresses from this pool."},
        "disableBGPExport": {"type": "boolean"},
        "nodeSelector": {"type": "string", "default": "all()",
                         "description": "Calico selector: the nodes whose pods may use this pool."},
        "allowedUses": {"type": "array", "items": {"type": "string"}},
        "assignmentMode": {"type": "string"},
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": "projectcalico.org",
            "scope": "Cluster",
            "names": {"plural": "ippools", "singular": "ippool", "kind": "IPPool", "listKind": "IPPoolList"},
            "versions": [{
                "name": "v3",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": {"type": "object", "required": ["cidr"], "properties": spec_props},
                    },
                }},
                "additionalPrinterColumns": [
                    _column("CIDR", ".spec.cidr"),
                    _column("NAT", ".spec.natOutgoing", "boolean"),
                    _column("IPIPMODE", ".spec.ipipMode"),
                    _column("VXLANMODE", ".spec.vxlanMode", priority=1),
                    _column("DISABLED", ".spec.disabled", "boolean"),
                    _column("SELECTOR", ".spec.nodeSelector"),
                ],
            }],
        },
    }


def ensure_crd(ops: Operations) -> None:
    """Create the IPPool CRD unless something (a user, an earlier start) already did."""
    rt = ops.registry.lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    if rt is None or ops.find(rt, "", CRD_NAME) is not None:
        return
    try:
        ops.create(rt, "", ippool_crd(), WriteOptions(manager=MANAGER, user=f"system:serviceaccount:{MANAGER}"))
    except ApiError as exc:
        if exc.code != 409:
            raise


def ippool_causes(obj: Obj, others: list[Obj], network: ClusterNetwork | None = None) -> list[Cause]:
    """What Calico's API server would reject in an IPPool, and (given a rootless cluster's
    `network`) a pool whose addresses would leave this machine (pure)."""
    spec = obj.get("spec") or {}
    causes: list[Cause] = []
    try:
        cidr = ipaddress.ip_network(str(spec.get("cidr", "")), strict=False)
    except ValueError:
        return [Cause("FieldValueInvalid", f"Invalid value: {spec.get('cidr')!r}: must be a CIDR", "spec.cidr")]
    pool = pool_from_object(obj)
    if network is not None and network.mode == ROOTLESS and pool.cidr is not None and pool.usable_somewhere:
        problem = non_local_message(pool, network)
        if problem:
            causes.append(Cause("FieldValueInvalid", f'Invalid value: "{cidr}": {problem}', "spec.cidr"))
    block = spec.get("blockSize")
    low, high = (20, 32) if cidr.version == 4 else (116, 128)
    if isinstance(block, int) and not low <= block <= high:
        causes.append(Cause("FieldValueInvalid", f"Invalid value: {block}: must be between {low} and {high}",
                            "spec.blockSize"))
    elif isinstance(block, int) and block < cidr.prefixlen:
        causes.append(Cause("FieldValueInvalid",
                            f"Invalid value: {block}: the pool's prefix /{cidr.prefixlen} is smaller than a block",
                            "spec.blockSize"))
    try:
        calico_selector.parse(str(spec.get("nodeSelector") or "all()"))
    except calico_selector.SelectorError as exc:
        causes.append(Cause("FieldValueInvalid", f"Invalid value: {exc}", "spec.nodeSelector"))
    name = (obj.get("metadata") or {}).get("name")
    for other in others:
        if (other.get("metadata") or {}).get("name") == name:
            continue
        theirs = pool_from_object(other).cidr
        if theirs is not None and theirs.version == cidr.version and theirs.overlaps(cidr):
            causes.append(Cause("FieldValueInvalid", f"IPPool({name}) CIDR overlaps with IPPool("
                                f"{other['metadata'].get('name')}) CIDR {theirs}", "spec.cidr"))
    return causes


def admission(ops: Operations, network: ClusterNetwork | None = None) -> Callable[[ResourceType, Obj, Obj | None], None]:
    """An admission plugin for `ops.admission` that validates IPPools as calico-apiserver does
    (and, given the cluster's `network`, refuses pools a rootless cluster cannot keep local)."""

    def admit(rt: ResourceType, obj: Obj, current: Obj | None) -> None:
        if rt.group not in ("projectcalico.org", "crd.projectcalico.org") or rt.kind != "IPPool":
            return
        causes = ippool_causes(obj, ops.store.list_objects(IPPOOLS), network)
        if causes:
            raise invalid(rt.kind, obj.get("metadata", {}).get("name", ""), causes, rt.group)

    return admit
