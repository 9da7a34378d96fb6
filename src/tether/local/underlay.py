"""The underlay: the one place where netns-mode clusters are joined to each other and to the host.

A cluster's router namespace is its gateway; the underlay is the network between gateways,
10.200.0.0/24 (cluster i's router has 10.200.0.(i+1), the host namespace 10.200.0.254). Nothing
is joined by default: two clusters' pods reach each other, and a cluster's pods reach the host,
only after `join`, and until `leave` (or until either side goes down). A join is

- a link per peer: a veth pair between the two routers (`to-<j>` in cluster i's router, `to-<i>`
  in cluster j's), each end with its router's underlay address and the peer's as point-to-point
  peer; for the host, the host link every netns cluster has anyway (`to-host`, see
  `tether.local.netns`);
- routes, tagged like every route tether adds: in each router, the peer's pod and Service ranges
  via the peer's underlay address (the host: its underlay address); in each node, the same
  destinations via its router, from the node's own pod-range address (for the node's own traffic;
  pods, in namespaces of their own, send from their pod IPs; a peer routes back the pod range, never the fabric); on the host (a join with the host), the cluster's pod range
  through the host link instead of the sink; and forwarding on in the routers.

So a member's pods reach the hub the same way whatever the hub is: the hub cluster's Service
range (its `kubernetes` ClusterIP) over a cluster join, or the host's underlay address (where
`tether hub run` or a forwarder listens) over a join with the host. A WireGuard mesh replaces the
veth pair with a tunnel interface per peer (WireGuard's AllowedIPs are the routes above) and keeps
the rest: one device per peer, one underlay address per site, the same routes.

`join_nodes`/`leave_nodes` make the other kind of join, the one a WireGuard mesh runs over (see
the section at the end): only UDP on the mesh ports between the clusters' node addresses.

`join`, `leave` and `peers` run `ip` against namespaces that exist (the clusters are up); they are
idempotent. Nodes added to a cluster later copy the router's join routes (`NetnsFabric`).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import IPv4Network
from pathlib import Path

from tether.local.netns import (
    HOST_LINK,
    NETNS_DIR,
    RTPROTO,
    UNDERLAY_METRIC,
    NetnsError,
    device_exists,
    enable_forwarding,
    exec_prefix,
    in_namespace,
    link_device,
    list_namespaces,
    node_slot,
    peer_link,
    router_namespace,
    run_ip,
    underlay_node_route,
)
from tether.local.network import NETNS, UNDERLAY_HOST_IP, ClusterNetwork
from tether.local.nft import apply_ruleset
from tether.net.nft import NftError, run_nft


class Host:
    """The host namespace as an underlay peer."""

    def __repr__(self) -> str:
        return "HOST"


HOST = Host()
Peer = ClusterNetwork | Host


# the plan (pure) ---------------------------------------------------------------------------------


def reached_through(peer: Peer) -> tuple[IPv4Network, ...]:
    """What a router routes to `peer` once joined: its pod and Service ranges, or the host's
    underlay address. The fabric stays private: an isolated API server stays isolated."""
    if isinstance(peer, Host):
        return (IPv4Network(f"{UNDERLAY_HOST_IP}/32"),)
    return (peer.pod_cidr, peer.service_cidr)


@dataclass(frozen=True)
class Side:
    """One router's half of a join: its device toward the peer and what it routes there."""

    network: ClusterNetwork
    peer: Peer

    @property
    def router(self) -> str:
        return router_namespace(self.network.index)

    @property
    def device(self) -> str:
        return HOST_LINK if isinstance(self.peer, Host) else peer_link(self.peer.index)

    def router_route(self, verb: str, dst: IPv4Network) -> list[str]:
        head = ["-n", self.router, "route", verb, str(dst)]
        tail = ["dev", self.device, "proto", RTPROTO, "metric", str(UNDERLAY_METRIC)]
        if isinstance(self.peer, Host) or verb == "del":
            return head + tail  # the host's address is the link's own peer address
        return [*head, "via", self.peer.underlay_ip, "onlink", *tail]

    def node_route(self, verb: str, node: str, dst: IPv4Network) -> list[str]:
        slot = node_slot(self.network, node)
        if slot is None:
            raise NetnsError(f"{node} is not a node namespace of cluster index {self.network.index}")
        return ["-n", node, *underlay_node_route(verb, self.network, slot, dst)]


def _check(network: ClusterNetwork) -> None:
    if network.mode != NETNS:
        raise NetnsError(f"cluster index {network.index} is rootless: only --netns clusters are on the underlay")


def veth_commands(a: ClusterNetwork, b: ClusterNetwork) -> list[list[str]]:
    """The link between two routers (a veth pair today, a tunnel per peer with a mesh)."""
    ra, rb = router_namespace(a.index), router_namespace(b.index)
    da, db = peer_link(b.index), peer_link(a.index)
    return [
        ["-n", ra, "link", "add", da, "type", "veth", "peer", "name", db, "netns", rb],
        ["-n", ra, "addr", "replace", a.underlay_ip, "peer", f"{b.underlay_ip}/32", "dev", da],
        ["-n", rb, "addr", "replace", b.underlay_ip, "peer", f"{a.underlay_ip}/32", "dev", db],
        ["-n", ra, "link", "set", da, "up"],
        ["-n", rb, "link", "set", db, "up"],
    ]


def host_route(verb: str, network: ClusterNetwork) -> list[str]:
    """The host's route to a joined cluster's pods: through its host link, not its sink."""
    head = ["route", verb, str(network.pod_cidr)]
    if verb == "del":
        return [*head, "dev", link_device(network.index), "proto", RTPROTO]
    return [*head, "via", network.underlay_ip, "dev", link_device(network.index), "onlink", "proto", RTPROTO]


# applying it -------------------------------------------------------------------------------------


def _nodes_of(network: ClusterNetwork) -> list[str]:
    pattern = re.compile(rf"tether-{network.index}-n\d+")
    return [n for n in list_namespaces() if pattern.fullmatch(n)]


def _require_up(network: ClusterNetwork) -> None:
    router = router_namespace(network.index)
    if not (NETNS_DIR / router).exists():
        raise NetnsError(f"cluster index {network.index} has no router namespace {router}: is it up "
                         "(`tether local up --netns`)?")


def _sides(a: ClusterNetwork, b: Peer) -> list[Side]:
    return [Side(a, b)] + ([Side(b, a)] if isinstance(b, ClusterNetwork) else [])


async def join(a: ClusterNetwork, b: Peer) -> None:
    """Join cluster `a` with cluster `b` or with the host (`HOST`); a no-op when joined."""
    _check(a)
    _require_up(a)
    if isinstance(b, ClusterNetwork):
        _check(b)
        _require_up(b)
        if b.index == a.index:
            raise NetnsError(f"cluster index {a.index} cannot be joined with itself")
        if not device_exists(peer_link(b.index), router_namespace(a.index)):
            for command in veth_commands(a, b):
                await run_ip(command)
    for side in _sides(a, b):
        await asyncio.to_thread(enable_forwarding, side.router)
        for dst in reached_through(side.peer):
            await run_ip(side.router_route("replace", dst))
            for node in _nodes_of(side.network):
                await run_ip(side.node_route("replace", node, dst))
    if isinstance(b, Host):
        await run_ip(host_route("replace", a))


async def leave(a: ClusterNetwork, b: Peer) -> None:
    """Undo `join(a, b)`; a no-op for what is already gone."""
    _check(a)
    if isinstance(b, Host):
        await run_ip(host_route("del", a), check=False)
    for side in _sides(a, b):
        if not (NETNS_DIR / side.router).exists():
            continue
        for dst in reached_through(side.peer):
            await run_ip(side.router_route("del", dst), check=False)
            for node in _nodes_of(side.network):
                await run_ip(side.node_route("del", node, dst), check=False)
    if isinstance(b, ClusterNetwork) and (NETNS_DIR / router_namespace(a.index)).exists():
        await run_ip(["-n", router_namespace(a.index), "link", "del", peer_link(b.index)], check=False)


async def peers(a: ClusterNetwork) -> list[Peer]:
    """Who cluster `a` is joined with now, read from its router's routes."""
    _check(a)
    _require_up(a)
    text = await run_ip(["-n", router_namespace(a.index), "-j", "-4", "route", "show", "proto", RTPROTO])
    try:
        devices = {str(r.get("dev", "")) for r in json.loads(text or "[]") if isinstance(r, dict)}
    except ValueError:
        devices = set()
    found: list[Peer] = [HOST] if HOST_LINK in devices else []
    indexes = sorted(int(d.removeprefix("to-")) for d in devices if re.fullmatch(r"to-\d+", d))
    return found + [ClusterNetwork.netns(i) for i in indexes]


# the node-level underlay (what a WireGuard mesh runs over) --------------------------------------
#
# Like the internet between two sites' nodes: a second veth between the routers (`ul-<j>`), the
# peer's *fabric* (its node addresses) routed in the routers and nodes, and an nftables filter in
# each router (table `inet tether-underlay`) that lets only UDP to the mesh ports between node
# addresses cross that link. Pod and Service ranges are not routed: they cross only inside
# WireGuard. New nodes do not copy these routes (the mesh's driver calls `join_nodes` again).

MESH_PORTS = (51820, 51851)  # one port per remote cluster index: 51820 + index


def mesh_port(remote: ClusterNetwork) -> int:
    """The port a node listens on for the mesh with cluster `remote`."""
    return MESH_PORTS[0] + remote.index


def node_link(index: int) -> str:
    return f"ul-{index}"


NODE_TABLE = "tether-underlay"


def node_filter(a: ClusterNetwork, b: ClusterNetwork) -> str:
    """The router's nft script for its node-level link to `b` (idempotent: the chain is
    flushed and rewritten)."""
    assert a.fabric_cidr is not None and b.fabric_cidr is not None
    dev = node_link(b.index)
    lo, hi = MESH_PORTS
    chain = f"to_{b.index}"
    return "\n".join([
        f"table inet {NODE_TABLE} {{}}",
        f"add chain inet {NODE_TABLE} {chain} {{ type filter hook forward priority 0; policy accept; }}",
        f"flush chain inet {NODE_TABLE} {chain}",
        f'add rule inet {NODE_TABLE} {chain} iifname "{dev}" ip saddr {b.fabric_cidr} ip daddr {a.fabric_cidr}'
        f" udp dport {lo}-{hi} counter accept",
        f'add rule inet {NODE_TABLE} {chain} oifname "{dev}" ip saddr {a.fabric_cidr} ip daddr {b.fabric_cidr}'
        f" udp dport {lo}-{hi} counter accept",
        f'add rule inet {NODE_TABLE} {chain} iifname "{dev}" counter drop',
        f'add rule inet {NODE_TABLE} {chain} oifname "{dev}" counter drop',
        "",
    ])


def check_pod_ranges(networks: list[ClusterNetwork], pod_ranges: dict[int, list[IPv4Network]] | None = None) -> None:
    """Refuse to mesh clusters whose pod ranges overlap (`pod_ranges`: extra ranges per index,
    e.g. IPPools)."""
    seen: list[tuple[int, IPv4Network]] = []
    for net in networks:
        for cidr in [net.pod_cidr, *((pod_ranges or {}).get(net.index, []))]:
            for index, other in seen:
                if index != net.index and other.overlaps(cidr):
                    raise NetnsError(f"pod ranges overlap: cluster index {index} {other} and cluster index "
                                     f"{net.index} {cidr}: clusters with overlapping pod ranges cannot be meshed")
            seen.append((net.index, cidr))


def _no_ipv6(device: str) -> Callable[[], None]:
    def write() -> None:
        Path(f"/proc/sys/net/ipv6/conf/{device}/disable_ipv6").write_text("1\n")

    return write


async def _apply_nft(namespace: str, script: str) -> None:
    """`script` into `namespace` in one transaction; a NetnsError, as every underlay failure is."""
    try:
        await apply_ruleset(namespace, script)
    except NftError as exc:
        raise NetnsError(str(exc)) from exc


async def _node_table(namespace: str) -> str:
    """The node filter table's listing in `namespace`; "" when there is none."""
    try:
        return await run_nft(["list", "table", "inet", NODE_TABLE], prefix=exec_prefix(namespace),
                             where=namespace)
    except NftError:
        return ""


async def join_nodes(a: ClusterNetwork, b: ClusterNetwork) -> None:
    """Let the nodes of `a` and `b` exchange UDP on the mesh ports, and nothing else; idempotent
    (call again after nodes were added)."""
    for n in (a, b):
        _check(n)
        _require_up(n)
    if a.index == b.index:
        raise NetnsError(f"cluster index {a.index} cannot be joined with itself")
    check_pod_ranges([a, b])
    ra, rb = router_namespace(a.index), router_namespace(b.index)
    da, db = node_link(b.index), node_link(a.index)
    if not device_exists(da, ra):
        await run_ip(["-n", ra, "link", "add", da, "type", "veth", "peer", "name", db, "netns", rb])
        await run_ip(["-n", ra, "addr", "replace", a.underlay_ip, "peer", f"{b.underlay_ip}/32", "dev", da])
        await run_ip(["-n", rb, "addr", "replace", b.underlay_ip, "peer", f"{a.underlay_ip}/32", "dev", db])
        for router, dev in ((ra, da), (rb, db)):
            # an IPv4 underlay: no link-local IPv6 chatter on it either
            await asyncio.to_thread(in_namespace, router, _no_ipv6(dev), "turning IPv6 off on the node underlay")
        await run_ip(["-n", ra, "link", "set", da, "up"])
        await run_ip(["-n", rb, "link", "set", db, "up"])
    for here, there, dev in ((a, b, da), (b, a, db)):
        assert there.fabric_cidr is not None
        router = router_namespace(here.index)
        await _apply_nft(router, node_filter(here, there))
        await asyncio.to_thread(enable_forwarding, router)
        await run_ip(["-n", router, "route", "replace", str(there.fabric_cidr), "via", there.underlay_ip,
                      "onlink", "dev", dev, "proto", RTPROTO, "metric", str(UNDERLAY_METRIC)])
        for node in _nodes_of(here):
            slot = node_slot(here, node)
            assert slot is not None
            await run_ip(["-n", node, "route", "replace", str(there.fabric_cidr), "via", here.router_ip,
                          "src", here.node_ip(slot), "proto", RTPROTO])


async def leave_nodes(a: ClusterNetwork, b: ClusterNetwork) -> None:
    """Undo `join_nodes(a, b)`; a no-op for what is already gone."""
    for here, there in ((a, b), (b, a)):
        router = router_namespace(here.index)
        if not (NETNS_DIR / router).exists():
            continue
        assert there.fabric_cidr is not None
        for node in _nodes_of(here):
            await run_ip(["-n", node, "route", "del", str(there.fabric_cidr), "proto", RTPROTO], check=False)
        await run_ip(["-n", router, "link", "del", node_link(there.index)], check=False)
        try:
            await _apply_nft(router, f"table inet {NODE_TABLE} {{}}\ndelete chain inet {NODE_TABLE} to_{there.index}\n")
        except NetnsError:
            pass  # no such chain: not joined
        listing = await _node_table(router)
        if listing and "chain " not in listing:
            await _apply_nft(router, f"delete table inet {NODE_TABLE}\n")
