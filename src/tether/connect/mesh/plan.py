"""The mesh's pure logic: interface names, annotations, peers from remote Nodes, the diff."""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

ANNOTATION_DOMAIN = "wireguard.semaphore.uw.io"
KEEPALIVE_S = 25
DEFAULT_PORT = 51820
# WireGuard's own default: 1500 minus the worst-case (IPv6) outer overhead of 80 bytes.
DEFAULT_MTU = 1420
IFNAMSIZ = 15  # Linux interface names: at most 15 characters


class MeshConfigError(ValueError):
    """A mesh configuration that cannot work (bad names, overlapping pod subnets)."""


def pubkey_annotation(remote: str) -> str:
    return f"{remote}.{ANNOTATION_DOMAIN}/pubKey"


def endpoint_annotation(remote: str) -> str:
    return f"{remote}.{ANNOTATION_DOMAIN}/endpoint"


def interface_name(remote: str, scope: str = "") -> str:
    """`wireguard.<remote>` as semaphore-wireguard names it when that fits in 15 characters and
    nothing else shares the host's wireguard-go control sockets (/var/run/wireguard/<name>.sock);
    otherwise a stable short name derived from the remote and the scope (the node namespace)."""
    if not remote or any(c in remote for c in " /"):
        raise MeshConfigError(f"remote cluster name {remote!r} cannot name an interface")
    plain = f"wireguard.{remote}"
    if not scope and len(plain) <= IFNAMSIZ:
        return plain
    digest = hashlib.sha256(f"{scope}\0{remote}".encode()).hexdigest()
    return f"wg.{remote[:4]}.{digest[:6]}"  # at most 3+4+1+6 = 14 characters


def valid_key(text: str) -> bool:
    try:
        return len(base64.b64decode(text, validate=True)) == 32
    except (binascii.Error, ValueError):
        return False


def parse_endpoint(text: str) -> str | None:
    """`<IPv4>:<port>` (semaphore-wireguard resolves udp4), normalised; None when malformed."""
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        return None
    try:
        address = ipaddress.IPv4Address(host)
        number = int(port)
    except ValueError:
        return None
    if not 0 < number < 65536:
        return None
    return f"{address}:{number}"


@dataclass(frozen=True)
class Peer:
    """A remote node as a WireGuard peer."""

    node: str
    public_key: str
    endpoint: str
    allowed_ips: tuple[str, ...]
    keepalive_s: int = KEEPALIVE_S


@dataclass(frozen=True)
class Skipped:
    node: str
    reason: str


def pod_cidrs(node: Mapping[str, Any]) -> tuple[str, ...]:
    spec = node.get("spec") or {}
    found = [str(c) for c in (spec.get("podCIDRs") or []) if c]
    if not found and spec.get("podCIDR"):
        found = [str(spec["podCIDR"])]
    out: list[str] = []
    for cidr in found:
        try:
            out.append(str(ipaddress.ip_network(cidr, strict=False)))
        except ValueError:
            continue
    return tuple(dict.fromkeys(out))


def peers_from_nodes(nodes: Iterable[Mapping[str, Any]], local: str) -> tuple[list[Peer], list[Skipped]]:
    """The peers the remote Nodes announce to cluster `local`; malformed ones are skipped with a
    reason (never fatal, never dropping the others)."""
    peers: list[Peer] = []
    skipped: list[Skipped] = []
    for node in nodes:
        meta = node.get("metadata") or {}
        name = str(meta.get("name", ""))
        annotations = meta.get("annotations") or {}
        key = annotations.get(pubkey_annotation(local))
        endpoint_text = annotations.get(endpoint_annotation(local))
        if key is None and endpoint_text is None:
            continue  # not meshed with us (yet)
        if not isinstance(key, str) or not valid_key(key):
            skipped.append(Skipped(name, f"malformed {pubkey_annotation(local)}"))
            continue
        endpoint = parse_endpoint(endpoint_text) if isinstance(endpoint_text, str) else None
        if endpoint is None:
            skipped.append(Skipped(name, f"malformed {endpoint_annotation(local)}: {endpoint_text!r}"))
            continue
        cidrs = pod_cidrs(node)
        if not cidrs:
            skipped.append(Skipped(name, "no podCIDR"))
            continue
        peers.append(Peer(name, key, endpoint, cidrs))
    # two nodes announcing the same key would fight over one peer: keep the first by name
    by_key: dict[str, Peer] = {}
    for peer in sorted(peers, key=lambda p: p.node):
        if peer.public_key in by_key:
            skipped.append(Skipped(peer.node, f"public key already used by {by_key[peer.public_key].node}"))
            continue
        by_key[peer.public_key] = peer
    return list(by_key.values()), skipped


@dataclass(frozen=True)
class CurrentPeer:
    public_key: str
    endpoint: str | None
    allowed_ips: tuple[str, ...]
    keepalive_s: int | None


@dataclass(frozen=True)
class PeerPlan:
    """What `wg set` must change: peers to set (added or changed) and keys to remove."""

    upsert: tuple[Peer, ...] = ()
    remove: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.upsert and not self.remove


def plan_peers(desired: Sequence[Peer], current: Sequence[CurrentPeer]) -> PeerPlan:
    have = {p.public_key: p for p in current}
    want = {p.public_key: p for p in desired}
    upsert = []
    for key, peer in sorted(want.items()):
        now = have.get(key)
        if (now is None or now.endpoint != peer.endpoint or now.keepalive_s != peer.keepalive_s
                or sorted(now.allowed_ips) != sorted(peer.allowed_ips)):
            upsert.append(peer)
    remove = tuple(sorted(k for k in have if k not in want))
    return PeerPlan(tuple(upsert), remove)


@dataclass(frozen=True)
class Remote:
    """One remote cluster as the local manager sees it."""

    name: str
    pod_subnets: tuple[str, ...]
    port: int = DEFAULT_PORT
    mtu: int = DEFAULT_MTU
    kubeconfig: str = ""
    context: str = ""


@dataclass(frozen=True)
class LocalSide:
    cluster: str
    node: str
    pod_subnets: tuple[str, ...] = field(default=())


def check_remotes(local: LocalSide, remotes: Sequence[Remote]) -> None:
    """Refuse what cannot work: duplicate names or ports, overlapping pod subnets (a packet to
    an overlapping address could not be routed to one cluster only)."""
    names = [r.name for r in remotes]
    if len(set(names)) != len(names) or local.cluster in names:
        raise MeshConfigError(f"remote names must be distinct and differ from the local cluster: {names}")
    ports = [r.port for r in remotes]
    if len(set(ports)) != len(ports):
        raise MeshConfigError(f"each remote needs its own listen port (one UDP socket per interface): {ports}")
    ranges: list[tuple[str, ipaddress.IPv4Network | ipaddress.IPv6Network]] = []
    for owner, subnets in [(local.cluster, local.pod_subnets), *((r.name, r.pod_subnets) for r in remotes)]:
        for text in subnets:
            try:
                ranges.append((owner, ipaddress.ip_network(text, strict=False)))
            except ValueError as exc:
                raise MeshConfigError(f"{owner}: pod subnet {text!r} is not a CIDR") from exc
    for i, (a_owner, a) in enumerate(ranges):
        for b_owner, b in ranges[i + 1:]:
            if a_owner != b_owner and a.version == b.version and a.overlaps(b):
                raise MeshConfigError(
                    f"pod subnets overlap: {a_owner} {a} and {b_owner} {b}; clusters whose pod "
                    "subnets overlap cannot be meshed (give one of them another pod range)")


def route_targets(remote: Remote) -> tuple[str, ...]:
    return tuple(str(ipaddress.ip_network(s, strict=False)) for s in remote.pod_subnets)
