"""NetworkPolicy validation (networking.k8s.io/v1's ValidateNetworkPolicySpec, the checks that
matter to an enforcer: peers, ipBlock CIDRs and excepts, ports and endPort, policyTypes)."""

from __future__ import annotations

import ipaddress
from typing import Any

from tether.local.errors import Cause
from tether.local.validation import fields as f
from tether.objects import Obj

PROTOCOLS = ("SCTP", "TCP", "UDP")
POLICY_TYPES = ("Egress", "Ingress")
CIDR_HINT = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"


def _cidr(value: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(str(value), strict=False) if isinstance(value, str) and "/" in value else None
    except ValueError:
        return None


def _ip_block(block: Obj, path: str) -> list[Cause]:
    cidr = block.get("cidr")
    if not cidr:
        return [f.required(f"{path}.cidr")]
    network = _cidr(cidr)
    if network is None:
        return [f.invalid(f"{path}.cidr", cidr, CIDR_HINT)]
    causes: list[Cause] = []
    for i, text in enumerate(block.get("except") or []):
        excluded = _cidr(text)
        where = f"{path}.except[{i}]"
        if excluded is None:
            causes.append(f.invalid(where, text, CIDR_HINT))
        elif excluded.version != network.version or not excluded.subnet_of(network) or excluded == network:  # type: ignore[arg-type]
            causes.append(f.invalid(where, text, "must be a strict subset of `cidr`"))
    return causes


def _peer(peer: Any, path: str) -> list[Cause]:
    peer = f.mapping(peer)
    selectors = peer.get("podSelector") is not None or peer.get("namespaceSelector") is not None
    block = peer.get("ipBlock")
    if selectors and block is not None:
        return [f.forbidden(path, "may not specify both ipBlock and another peer")]
    if not selectors and block is None:
        return [f.required(path, "must specify a peer")]
    return _ip_block(f.mapping(block), f"{path}.ipBlock") if block is not None else []


def _port(port: Any, path: str) -> list[Cause]:
    port = f.mapping(port)
    causes: list[Cause] = []
    protocol = port.get("protocol")
    if protocol is not None and protocol not in PROTOCOLS:
        causes.append(f.not_supported(f"{path}.protocol", protocol, PROTOCOLS))
    number, end = port.get("port"), port.get("endPort")
    if isinstance(number, int):
        causes += [f.invalid(f"{path}.port", number, msg) for msg in f.port_number(number)]
    elif isinstance(number, str):
        causes += f.each(f"{path}.port", number, f.port_name(number))
    if end is not None:
        if not isinstance(number, int):
            causes.append(f.required(f"{path}.port", "must be specified when endPort is specified")
                          if number is None else f.invalid(f"{path}.endPort", end,
                                                           "may not be specified when `port` is non-numeric"))
        elif not isinstance(end, int) or end < number:
            causes.append(f.invalid(f"{path}.endPort", end, "must be greater than or equal to `port`"))
        else:
            causes += [f.invalid(f"{path}.endPort", end, msg) for msg in f.port_number(end)]
    return causes


def network_policy(obj: Obj) -> list[Cause]:
    spec = f.mapping(obj.get("spec"))
    causes: list[Cause] = []
    for direction, key in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(spec.get(direction) or []):
            rule = f.mapping(rule)
            for j, port in enumerate(rule.get("ports") or []):
                causes += _port(port, f"spec.{direction}[{i}].ports[{j}]")
            for j, peer in enumerate(rule.get(key) or []):
                causes += _peer(peer, f"spec.{direction}[{i}].{key}[{j}]")
    for i, kind in enumerate(spec.get("policyTypes") or []):
        if kind not in POLICY_TYPES:
            causes.append(f.not_supported(f"spec.policyTypes[{i}]", kind, POLICY_TYPES))
    return causes
