"""Policies, pods, namespaces and network sets -> one nftables script per node (pure).

What is modelled (see docs/local-clusters.md, "Policy enforcement"):

- Kubernetes `NetworkPolicy`: podSelector, policyTypes, ingress `from` / egress `to` peers
  (podSelector, namespaceSelector, both, ipBlock with except), ports (numeric or named, TCP,
  UDP, SCTP, endPort). A Kubernetes policy is a Calico policy of order 1000 whose rules allow.
- Calico `NetworkPolicy` / `GlobalNetworkPolicy` (either API group): selector expressions,
  `namespaceSelector` (GlobalNetworkPolicy), `types`, `order` (lower first, none last, ties by
  name), rules with `action` Allow / Deny / Pass / Log, protocol, source and destination `nets`,
  `notNets`, `selector`, `namespaceSelector` (`global()`: GlobalNetworkSets) and `ports`
  (numbers, `a:b` ranges, names).
- `doNotTrack` GlobalNetworkPolicies apply to host endpoints, which here are host-network pods
  (reached by their node's address); their rules go to the raw table with `notrack`. No rule
  matching: normal (tracked) processing goes on, as in Calico.

Evaluation per pod and direction, as Calico's default tier: policies that select the pod in
order; the first rule that matches decides (Allow: on to the other direction's check, Deny: drop,
Pass: the rest of the tier is skipped, so the pod's default (allow) applies, Log: logged, on to the
next rule); when at least one policy selected the pod and none decided, drop. Replies to allowed
connections pass (`ct state established,related`). Traffic from the pod's own node (the kubelet's
probes, port-forward) always reaches it, as Kubernetes requires: the fabric range is allowed in.

What cannot be expressed becomes a `Problem` (an Event on the policy): an Allow rule with an
unsupported match is left out (it allows less), a Deny rule is kept without the unsupported match
(it denies more), a Pass rule is left out: never a silent allow.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.objects import Obj, calico_selector
from tether.objects.selectors import SelectorError, label_selector_from_dict

TABLE = "tether-policy"
RAW_TABLE = "tether-notrack"
K8S_ORDER = 1000.0
NAMESPACE_LABEL = "projectcalico.org/namespace"
NAME_LABEL = "projectcalico.org/name"
LEGACY_ANNOTATION = "net.beta.kubernetes.io/network-policy"
PROTOCOLS = {"TCP": "tcp", "UDP": "udp", "SCTP": "sctp", "ICMP": "icmp", 6: "tcp", 17: "udp", 132: "sctp", 1: "icmp"}
PORTED = ("tcp", "udp", "sctp")
UNSUPPORTED_RULE_FIELDS = ("http", "icmp", "notICMP", "notProtocol")
UNSUPPORTED_ENTITY_FIELDS = ("notSelector", "notPorts", "serviceAccounts", "services")


@dataclass(frozen=True)
class Endpoint:
    """A pod as policy sees it."""

    uid: str
    namespace: str
    name: str
    ip: str
    node: str
    labels: Mapping[str, str]
    ports: Mapping[str, tuple[str, int]]  # container port name -> (protocol, number)
    host_network: bool = False
    link: str = ""  # the node's end of its veth (empty: host network)


@dataclass(frozen=True)
class Problem:
    """Something a policy asks that the enforcer cannot do (an Event on the object)."""

    kind: str  # NetworkPolicy, GlobalNetworkPolicy, Namespace
    api_version: str
    namespace: str
    name: str
    message: str


@dataclass(frozen=True)
class Policy:
    """Kubernetes or Calico policy in one normal form."""

    kind: str
    api_version: str
    namespace: str  # "" for global
    name: str
    order: float
    selects: tuple[str, ...]  # endpoint uids it applies to
    ingress: tuple[tuple[str, ...], ...] | None  # per rule: its nft statements; None: no ingress
    egress: tuple[tuple[str, ...], ...] | None
    do_not_track: bool = False


@dataclass(frozen=True)
class Plan:
    scripts: Mapping[str, str]  # node name -> nft script
    problems: tuple[Problem, ...] = field(default=())


# selectors ---------------------------------------------------------------------------------------


def namespace_labels(namespaces: Iterable[Obj]) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for ns in namespaces:
        meta = ns.get("metadata") or {}
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        labels.setdefault("kubernetes.io/metadata.name", str(meta.get("name", "")))
        labels.setdefault(NAME_LABEL, str(meta.get("name", "")))
        found[str(meta.get("name", ""))] = labels
    return found


def _calico_labels(endpoint: Endpoint) -> dict[str, str]:
    return {**endpoint.labels, NAMESPACE_LABEL: endpoint.namespace}


def _k8s_match(selector: Any, labels: Mapping[str, str]) -> bool:
    return label_selector_from_dict(selector if isinstance(selector, dict) else {}).matches(labels)


def _calico_match(text: str, labels: Mapping[str, str]) -> bool:
    return calico_selector.matches(text or "all()", labels)


# rendering helpers -------------------------------------------------------------------------------


def _addr_set(values: Iterable[str]) -> str:
    items = sorted(set(values), key=lambda v: ipaddress.ip_network(v, strict=False))
    return items[0] if len(items) == 1 else "{ " + ", ".join(items) + " }"


def _port_set(ranges: Iterable[tuple[int, int]]) -> str:
    items = sorted(set(ranges))
    texts = [str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in items]
    return texts[0] if len(texts) == 1 else "{ " + ", ".join(texts) + " }"


def _ipv4_nets(values: Iterable[Any]) -> list[str]:
    out: list[str] = []
    for value in values:
        try:
            net = ipaddress.ip_network(str(value), strict=False)
        except ValueError:
            continue
        if net.version == 4:
            out.append(str(net))
    return out


class _Context:
    def __init__(self, endpoints: Sequence[Endpoint], namespaces: Mapping[str, Mapping[str, str]],
                 sets: Sequence[Obj]) -> None:
        self.endpoints = [e for e in endpoints if e.ip]
        self.namespaces = namespaces
        self.sets = sets
        self.problems: list[Problem] = []

    def problem(self, policy: Obj, message: str) -> None:
        meta = policy.get("metadata") or {}
        self.problems.append(Problem(str(policy.get("kind", "")), str(policy.get("apiVersion", "")),
                                     str(meta.get("namespace", "")), str(meta.get("name", "")), message))


# Kubernetes NetworkPolicy -------------------------------------------------------------------------


def _k8s_peer_ips(ctx: _Context, namespace: str, peer: Obj) -> tuple[list[Endpoint], list[str], list[str]]:
    """(pods, ipBlock cidrs, their excepts) a `from`/`to` peer means."""
    block = peer.get("ipBlock")
    if isinstance(block, dict):
        return [], _ipv4_nets([block.get("cidr")]), _ipv4_nets(block.get("except") or [])
    pod_sel, ns_sel = peer.get("podSelector"), peer.get("namespaceSelector")
    pods = []
    for e in ctx.endpoints:
        if e.host_network:
            continue
        if ns_sel is None:
            in_ns = e.namespace == namespace
        else:
            in_ns = _k8s_match(ns_sel, ctx.namespaces.get(e.namespace, {}))
        if in_ns and (pod_sel is None or _k8s_match(pod_sel, e.labels)):
            pods.append(e)
    return pods, [], []


def _k8s_ports(ports: Sequence[Any], target: Endpoint | None) -> list[tuple[str, list[tuple[int, int]]]] | None:
    """[(protocol, port ranges)] for the rule's ports against `target` (named ports resolved
    on it); None: any port. A named port the target lacks gives nothing."""
    if not ports:
        return None
    by_protocol: dict[str, list[tuple[int, int]]] = {}
    for port in ports:
        if not isinstance(port, dict):
            continue
        protocol = PROTOCOLS.get(str(port.get("protocol") or "TCP"), "tcp")
        number = port.get("port")
        if number is None:
            by_protocol.setdefault(protocol, []).append((1, 65535))
        elif isinstance(number, int):
            end = port.get("endPort")
            by_protocol.setdefault(protocol, []).append((number, end if isinstance(end, int) and end >= number else number))
        elif target is not None and str(number) in target.ports:
            named_protocol, resolved = target.ports[str(number)]
            if named_protocol == protocol:
                by_protocol.setdefault(protocol, []).append((resolved, resolved))
    return sorted(by_protocol.items())


def _k8s_rules(ctx: _Context, policy: Obj, rules: Sequence[Any], direction: str,
               selected: Sequence[Endpoint]) -> tuple[tuple[str, ...], ...]:
    """nft statements of each allow (one rule line each), against the selected pods' named ports."""
    namespace = str((policy.get("metadata") or {}).get("namespace", ""))
    peer_key, addr = ("from", "saddr") if direction == "ingress" else ("to", "daddr")
    out: list[str] = []
    for rule in rules:
        if not isinstance(rule, dict):
            continue
        ports = rule.get("ports") or []
        peers = rule.get(peer_key)
        targets: list[tuple[str, str, Endpoint | None]] = []  # (address match, except match, port target)
        if not peers:
            targets.append(("", "", None))
        for peer in peers or []:
            if not isinstance(peer, dict):
                continue
            pods, cidrs, excepts = _k8s_peer_ips(ctx, namespace, peer)
            if cidrs:
                excluded = f"ip {addr} != {_addr_set(excepts)} " if excepts else ""
                targets.append((f"ip {addr} {_addr_set(cidrs)} ", excluded, None))
            if direction == "egress" and any(isinstance(p, dict) and isinstance(p.get("port"), str) for p in ports):
                targets += [(f"ip {addr} {pod.ip} ", "", pod) for pod in pods]  # named ports: per peer
            elif pods:
                targets.append((f"ip {addr} {_addr_set(p.ip + '/32' for p in pods)} ", "", None))
        for match, excluded, peer_pod in targets:
            # ingress: named ports are the selected pod's own (one line per distinct resolution)
            port_targets: list[Endpoint | None] = [peer_pod] if direction == "egress" else list(selected) or [None]
            lines: set[str] = set()
            for target in port_targets:
                resolved = _k8s_ports(ports, target)
                if resolved is None:
                    lines.add(f"{match}{excluded}accept")
                    continue
                for protocol, ranges in resolved:
                    if ranges:
                        own = f"ip daddr {target.ip} " if direction == "ingress" and target is not None and \
                            any(isinstance(p, dict) and isinstance(p.get("port"), str) for p in ports) else ""
                        lines.add(f"{match}{excluded}{own}{protocol} dport {_port_set(ranges)} accept")
            out += sorted(lines)
    return tuple((line,) for line in out)


def k8s_policy(ctx: _Context, policy: Obj) -> Policy:
    meta, spec = policy.get("metadata") or {}, policy.get("spec") or {}
    namespace = str(meta.get("namespace", ""))
    selected = [e for e in ctx.endpoints if not e.host_network and e.namespace == namespace
                and _k8s_match(spec.get("podSelector") or {}, e.labels)]
    types = spec.get("policyTypes") or (["Ingress"] + (["Egress"] if "egress" in spec else []))
    ingress = _k8s_rules(ctx, policy, spec.get("ingress") or [], "ingress", selected) if "Ingress" in types else None
    egress = _k8s_rules(ctx, policy, spec.get("egress") or [], "egress", selected) if "Egress" in types else None
    return Policy("NetworkPolicy", str(policy.get("apiVersion", "")), namespace, str(meta.get("name", "")),
                  K8S_ORDER, tuple(e.uid for e in selected), ingress, egress)


# Calico policies -------------------------------------------------------------------------------


def _calico_ports(ctx: _Context, policy: Obj, values: Sequence[Any], target: Endpoint | None) -> list[tuple[int, int]] | None:
    ranges: list[tuple[int, int]] = []
    for value in values:
        if isinstance(value, int):
            ranges.append((value, value))
            continue
        text = str(value)
        found = re.fullmatch(r"(\d+)(?::(\d+))?", text)
        if found:
            ranges.append((int(found.group(1)), int(found.group(2) or found.group(1))))
        elif target is not None and text in target.ports:
            ranges.append((target.ports[text][1],) * 2)
        elif target is None:
            ctx.problem(policy, f"named port {text!r} in a rule whose endpoint is not one pod cannot be resolved")
            return None
    return ranges


def _calico_entity(ctx: _Context, policy: Obj, entity: Any, addr: str, namespace: str,
                   problems: list[str]) -> list[str] | None:
    """nft matches for a rule's source or destination (without ports); None: matches nothing."""
    if not isinstance(entity, dict):
        return []
    for key in UNSUPPORTED_ENTITY_FIELDS:
        if entity.get(key):
            problems.append(f"{key} is not supported")
    matches: list[str] = []
    nets = _ipv4_nets(entity.get("nets") or [])
    if entity.get("nets"):
        if not nets:
            return None
        matches.append(f"ip {addr} {_addr_set(nets)}")
    not_nets = _ipv4_nets(entity.get("notNets") or [])
    if not_nets:
        matches.append(f"ip {addr} != {_addr_set(not_nets)}")
    selector = entity.get("selector")
    ns_selector = entity.get("namespaceSelector")
    if selector is not None or ns_selector is not None:
        ips: list[str] = []
        if str(ns_selector or "").strip() == "global()":
            for s in ctx.sets:
                labels = {str(k): str(v) for k, v in ((s.get("metadata") or {}).get("labels") or {}).items()}
                if _calico_match(str(selector or ""), labels):
                    ips += _ipv4_nets((s.get("spec") or {}).get("nets") or [])
        else:
            for e in ctx.endpoints:
                if ns_selector is not None:
                    in_ns = _calico_match(str(ns_selector), ctx.namespaces.get(e.namespace, {}))
                else:
                    in_ns = not namespace or e.namespace == namespace
                if in_ns and _calico_match(str(selector or ""), _calico_labels(e)):
                    ips.append(f"{e.ip}/32")
        if not ips:
            return None
        matches.append(f"ip {addr} {_addr_set(ips)}")
    return matches


def _calico_rules(ctx: _Context, policy: Obj, rules: Sequence[Any], direction: str,
                  selected: Sequence[Endpoint], do_not_track: bool) -> tuple[tuple[str, ...], ...]:
    namespace = str((policy.get("metadata") or {}).get("namespace", ""))
    out: list[tuple[str, ...]] = []
    own = selected[0] if len(selected) == 1 else None
    for index, rule in enumerate(rules):
        if not isinstance(rule, dict):
            continue
        action = str(rule.get("action", ""))
        problems = [f"{key} is not supported" for key in UNSUPPORTED_RULE_FIELDS if rule.get(key)]
        if rule.get("ipVersion") == 6:
            continue  # IPv6 only: nothing here carries IPv6
        protocol_value = rule.get("protocol")
        protocol = PROTOCOLS.get(protocol_value) if protocol_value is not None else None
        if protocol_value is not None and protocol is None:
            problems.append(f"protocol {protocol_value!r} is not supported")
        source = _calico_entity(ctx, policy, rule.get("source"), "saddr", namespace, problems)
        destination = _calico_entity(ctx, policy, rule.get("destination"), "daddr", namespace, problems)
        sport_values = (rule.get("source") or {}).get("ports") or []
        dport_values = (rule.get("destination") or {}).get("ports") or []
        # a named port is the selected pod's (ingress destination / egress source)
        sports = _calico_ports(ctx, policy, sport_values, own if direction == "egress" else None)
        dports = _calico_ports(ctx, policy, dport_values, own if direction == "ingress" else None)
        where = f"{direction}[{index}]"
        if problems:
            for problem in problems:
                ctx.problem(policy, f"{where}: {problem}; " + (
                    "the rule is left out (it allows nothing)" if action != "Deny"
                    else "the rule denies without that condition (it denies more)"))
            if action != "Deny":
                continue
        if source is None or destination is None or sports is None or dports is None:
            continue  # matches nothing
        parts = [*source, *destination]
        if (sports or dports) and protocol is None:
            ctx.problem(policy, f"{where}: ports without a protocol; the rule is left out")
            continue
        if protocol is not None:
            parts.append(f"meta l4proto {protocol}")
        if sports:
            parts.append(f"{protocol} sport {_port_set(sports)}")
        if dports:
            parts.append(f"{protocol} dport {_port_set(dports)}")
        verdict = {"Allow": "notrack accept" if do_not_track else "accept", "Deny": "drop", "Pass": "accept",
                   "Log": f'log prefix "calico-{direction} " continue'}.get(action)
        if verdict is None:
            continue
        line = " ".join([*parts, verdict]).replace(" continue", "")
        out.append((line,))
    return tuple(out)


def calico_policy(ctx: _Context, policy: Obj) -> Policy:
    meta, spec = policy.get("metadata") or {}, policy.get("spec") or {}
    kind = str(policy.get("kind", "NetworkPolicy"))
    namespace = str(meta.get("namespace", "")) if kind == "NetworkPolicy" else ""
    do_not_track = bool(spec.get("doNotTrack"))
    if spec.get("preDNAT"):
        ctx.problem(policy, "preDNAT policies are not supported; the policy is not applied to any endpoint "
                    "(nothing it allows is allowed by it)")
    ns_selector = spec.get("namespaceSelector")
    selected = []
    for e in ctx.endpoints:
        if e.host_network != do_not_track:
            continue  # doNotTrack: host endpoints only; the rest: workload endpoints only
        if namespace and e.namespace != namespace:
            continue
        if ns_selector and not _calico_match(str(ns_selector), ctx.namespaces.get(e.namespace, {})):
            continue
        if _calico_match(str(spec.get("selector") or ""), _calico_labels(e)):
            selected.append(e)
    if spec.get("preDNAT"):
        selected = []
    types = spec.get("types") or (
        (["Ingress"] if spec.get("ingress") or not spec.get("egress") else []) + (["Egress"] if spec.get("egress") else []))
    order_value = spec.get("order")
    order = float(order_value) if isinstance(order_value, (int, float)) else float("inf")
    ingress = _calico_rules(ctx, policy, spec.get("ingress") or [], "ingress", selected, do_not_track) \
        if "Ingress" in types else None
    egress = _calico_rules(ctx, policy, spec.get("egress") or [], "egress", selected, do_not_track) \
        if "Egress" in types else None
    return Policy(kind, str(policy.get("apiVersion", "")), namespace, str(meta.get("name", "")), order,
                  tuple(e.uid for e in selected), ingress, egress, do_not_track)


# the scripts ----------------------------------------------------------------------------------


def _chain(name: str, policies: Sequence[Policy], direction: str, final: str) -> str:
    lines = [f"    chain {name} {{"]
    for policy in policies:
        rules = policy.ingress if direction == "ingress" else policy.egress
        lines.append(f"        # {policy.kind} {policy.namespace}/{policy.name}".replace(" /", " "))
        lines += [f"        {statement}" for rule in rules or () for statement in rule]
    lines.append(f"        {final}")
    lines.append("    }")
    return "\n".join(lines)


def render_node(node: str, endpoints: Sequence[Endpoint], policies: Sequence[Policy],
                always_allowed: Sequence[str]) -> str:
    """The node's two tables: `tether-policy` (filter) and `tether-notrack` (raw)."""
    ordered = sorted(policies, key=lambda p: (p.order, p.namespace, p.name))
    ingress_map: list[str] = []
    egress_map: list[str] = []
    chains: list[str] = []
    raw_in: list[str] = []
    raw_out: list[str] = []
    raw_chains: list[str] = []
    for n, endpoint in enumerate(e for e in endpoints if e.node == node):
        for direction in ("ingress", "egress"):
            applying = [p for p in ordered if endpoint.uid in p.selects and not p.do_not_track
                        and (p.ingress if direction == "ingress" else p.egress) is not None]
            untracked = [p for p in ordered if endpoint.uid in p.selects and p.do_not_track
                         and (p.ingress if direction == "ingress" else p.egress) is not None]
            if applying and endpoint.link:
                chain = f"pod-{n}-{direction}"
                chains.append(_chain(chain, applying, direction, "drop"))
                (ingress_map if direction == "ingress" else egress_map).append(f'"{endpoint.link}" : jump {chain}')
            if untracked:
                chain = f"hep-{n}-{direction}"
                raw_chains.append(_chain(chain, untracked, direction, "return"))
                (raw_in if direction == "ingress" else raw_out).append(
                    f"ip {'daddr' if direction == 'ingress' else 'saddr'} {endpoint.ip} jump {chain}")

    def elements(items: list[str]) -> str:
        return f" elements = {{ {', '.join(items)} }};" if items else ""

    allowed = f"        ip saddr {_addr_set(always_allowed)} accept\n" if always_allowed else ""
    script = [
        f"table ip {TABLE} {{}}", f"delete table ip {TABLE}", f"table ip {TABLE} {{",
        "    map ingress { type ifname : verdict;" + elements(ingress_map) + " }",
        "    map egress { type ifname : verdict;" + elements(egress_map) + " }",
        "    chain egress-forward {",
        "        type filter hook forward priority 0; policy accept;",
        "        ct state established,related accept",
        "        iifname vmap @egress",
        "    }",
        "    chain egress-input {",
        "        type filter hook input priority 0; policy accept;",
        "        ct state established,related accept",
        "        iifname vmap @egress",
        "    }",
        "    chain ingress-forward {",
        "        type filter hook forward priority 1; policy accept;",
        "        ct state established,related accept",
        allowed + "        oifname vmap @ingress",
        "    }",
        *chains,
        "}",
        f"table ip {RAW_TABLE} {{}}", f"delete table ip {RAW_TABLE}", f"table ip {RAW_TABLE} {{",
        "    chain prerouting {",
        "        type filter hook prerouting priority -300; policy accept;",
        *[f"        {line}" for line in raw_in],
        "    }",
        "    chain output {",
        "        type filter hook output priority -300; policy accept;",
        *[f"        {line}" for line in raw_out],
        "    }",
        *raw_chains,
        "}",
    ]
    return "\n".join(script) + "\n"


def plan(*, k8s_policies: Iterable[Obj], calico_policies: Iterable[Obj], endpoints: Sequence[Endpoint],
         namespaces: Iterable[Obj], network_sets: Iterable[Obj], nodes: Iterable[str],
         always_allowed: Sequence[str] = ()) -> Plan:
    """Every node's script and what could not be expressed."""
    namespace_list = list(namespaces)
    ctx = _Context(endpoints, namespace_labels(namespace_list), list(network_sets))
    policies: list[Policy] = []
    for policy in k8s_policies:
        try:
            policies.append(k8s_policy(ctx, policy))
        except SelectorError as exc:
            ctx.problem(policy, f"selector: {exc}; the policy selects nothing")
    for policy in calico_policies:
        try:
            policies.append(calico_policy(ctx, policy))
        except calico_selector.SelectorError as exc:
            ctx.problem(policy, f"selector: {exc}; the policy selects nothing")
    for ns in namespace_list:
        meta = ns.get("metadata") or {}
        if LEGACY_ANNOTATION in (meta.get("annotations") or {}):
            ctx.problems.append(Problem("Namespace", "v1", "", str(meta.get("name", "")),
                                        f"the annotation {LEGACY_ANNOTATION} (pre-1.7 DefaultDeny) is not supported: "
                                        "nothing is denied by it; use a NetworkPolicy with an empty podSelector"))
    scripts = {node: render_node(node, endpoints, policies, always_allowed) for node in nodes}
    return Plan(scripts, tuple(ctx.problems))
