"""Which remote pods belong to which network set, and the GlobalNetworkSet each set should be.

semaphore-policy watches pods carrying `policy.semaphore.uw.io/name` in the remote cluster and
keeps one Calico GlobalNetworkSet per (namespace, label value) in the local cluster, named
`<cluster>-<namespace>-<value>` and labelled so Calico policies can select it. Empty sets are
deleted. Where upstream falls short, here:

- a pod that has completed (phase Succeeded or Failed) leaves its set (upstream keeps its IP
  until the pod object is deleted);
- a pod whose label value changes leaves the old set (upstream only adds it to the new one);
- every pod IP counts, IPv6 as /128 (upstream uses `status.podIP` as a /32 only);
- hostNetwork pods are skipped (their IP is the node's).
"""

from __future__ import annotations

import copy
import ipaddress
from dataclasses import dataclass
from typing import Any, Literal

from tether.connect import names
from tether.objects import Obj

NAME_LABEL = "policy.semaphore.uw.io/name"
NAMESPACE_LABEL = "policy.semaphore.uw.io/namespace"
CLUSTER_LABEL = "policy.semaphore.uw.io/cluster"
MANAGED_BY_LABEL = "managed-by"
MANAGER = "semaphore-policy"
POD_SELECTOR = NAME_LABEL  # label existence


@dataclass(frozen=True, order=True)
class SetKey:
    """One set: the pods of `namespace` whose name label is `name`."""

    namespace: str
    name: str


def membership(pod: Obj) -> tuple[SetKey, tuple[str, ...]] | None:
    """The set a pod belongs to and the nets it adds, or None when it adds nothing."""
    meta = pod.get("metadata") or {}
    value = (meta.get("labels") or {}).get(NAME_LABEL)
    if not value:
        return None
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if spec.get("hostNetwork") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    ips = [str(p.get("ip")) for p in status.get("podIPs") or [] if isinstance(p, dict) and p.get("ip")]
    if not ips and status.get("podIP"):
        ips = [str(status["podIP"])]
    nets = []
    for ip in ips:
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            continue
        nets.append(f"{address}/{address.max_prefixlen}")
    if not nets:
        return None
    return SetKey(str(meta.get("namespace", "")), str(value)), tuple(nets)


def set_name(cluster: str, key: SetKey) -> str:
    return names.network_set_name(cluster, key.namespace, key.name)


def set_labels(cluster: str, key: SetKey) -> dict[str, str]:
    return {MANAGED_BY_LABEL: MANAGER, NAME_LABEL: key.name, NAMESPACE_LABEL: key.namespace, CLUSTER_LABEL: cluster}


def _net_key(net: str) -> tuple[int, int, int]:
    parsed = ipaddress.ip_network(net, strict=False)
    return parsed.version, int(parsed.network_address), parsed.prefixlen


def desired_set(cluster: str, key: SetKey, nets: set[str] | frozenset[str], api_version: str) -> Obj | None:
    if not nets:
        return None
    return {
        "apiVersion": api_version,
        "kind": "GlobalNetworkSet",
        "metadata": {"name": set_name(cluster, key), "labels": set_labels(cluster, key)},
        "spec": {"nets": sorted(nets, key=_net_key)},
    }


def key_of_set(obj: Obj) -> SetKey | None:
    found = (obj.get("metadata") or {}).get("labels") or {}
    if found.get(NAME_LABEL) and found.get(NAMESPACE_LABEL):
        return SetKey(str(found[NAMESPACE_LABEL]), str(found[NAME_LABEL]))
    return None


@dataclass(frozen=True)
class SetStep:
    action: Literal["create", "update", "delete"]
    obj: Obj


def plan_set(desired: Obj | None, existing: Obj | None) -> SetStep | None:
    if desired is None:
        return None if existing is None else SetStep("delete", existing)
    if existing is None:
        return SetStep("create", desired)
    labels: dict[str, Any] = (existing.get("metadata") or {}).get("labels") or {}
    wanted_labels = desired["metadata"]["labels"]
    same_nets = sorted((existing.get("spec") or {}).get("nets") or []) == sorted(desired["spec"]["nets"])
    if same_nets and all(labels.get(k) == v for k, v in wanted_labels.items()):
        return None
    updated = copy.deepcopy(existing)
    updated["apiVersion"] = desired["apiVersion"]
    updated["metadata"]["labels"] = {**labels, **wanted_labels}
    updated.setdefault("spec", {})["nets"] = desired["spec"]["nets"]
    updated["metadata"].pop("managedFields", None)
    return SetStep("update", updated)


# plain NetworkPolicy ipBlocks (clusters without Calico) ---------------------------------------

FROM_ANNOTATION = "policy.semaphore.uw.io/ingress-from"  # a Calico selector over set labels
PORTS_ANNOTATION = "policy.semaphore.uw.io/ingress-ports"  # "8889/TCP,53/UDP,8888"
SOURCE_POLICY_LABEL = "policy.semaphore.uw.io/from-policy"


class PortsError(ValueError):
    pass


def parse_ports(text: str) -> list[Obj]:
    """`PORT[/PROTOCOL]` items, comma-separated (protocol TCP when left out)."""
    out: list[Obj] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        port, _, protocol = item.partition("/")
        protocol = protocol.upper() or "TCP"
        if protocol not in ("TCP", "UDP", "SCTP"):
            raise PortsError(f"{item!r}: protocol must be TCP, UDP or SCTP")
        if port.isdigit():
            if not 0 < int(port) <= 65535:
                raise PortsError(f"{item!r}: a port is 1..65535")
            out.append({"protocol": protocol, "port": int(port)})
        elif port and port.replace("-", "").isalnum():
            out.append({"protocol": protocol, "port": port})
        else:
            raise PortsError(f"{item!r}: not a port number or name")
    return out


def companion_policy(template: Obj, cluster: str, nets: list[str]) -> Obj:
    """The NetworkPolicy that lets `nets` (this remote's sets the template selects) reach the
    template's pods on its ports. One per template and remote: NetworkPolicies add up, so each
    remote's controller owns its own and none overwrites another's."""
    meta = template.get("metadata") or {}
    notes = meta.get("annotations") or {}
    ports = parse_ports(str(notes.get(PORTS_ANNOTATION, "")))
    rules: list[Obj] = []
    if nets:
        rule: Obj = {"from": [{"ipBlock": {"cidr": net}} for net in sorted(nets, key=_net_key)]}
        if ports:
            rule["ports"] = ports
        rules.append(rule)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": names.fit(f"{meta.get('name', '')}-{cluster}", names.SUBDOMAIN_MAX),
            "namespace": meta.get("namespace", ""),
            "labels": {MANAGED_BY_LABEL: MANAGER, CLUSTER_LABEL: cluster, SOURCE_POLICY_LABEL: str(meta.get("name", ""))},
            "ownerReferences": [{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                                 "name": meta.get("name", ""), "uid": meta.get("uid", ""),
                                 "controller": False, "blockOwnerDeletion": False}],
        },
        "spec": {"podSelector": copy.deepcopy((template.get("spec") or {}).get("podSelector") or {}),
                 "policyTypes": ["Ingress"], "ingress": rules},
    }


def companion_differs(existing: Obj, wanted: Obj) -> bool:
    return (existing.get("spec") != wanted["spec"]
            or any(((existing.get("metadata") or {}).get("labels") or {}).get(k) != v
                   for k, v in wanted["metadata"]["labels"].items()))
