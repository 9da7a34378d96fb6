"""Address plan of a local cluster: pod and service ranges that never overlap between clusters.

Rootless mode uses 127.0.0.0/8, which Linux routes to the loopback device in full, so processes
bind any of those addresses without privileges. Cluster i (0 <= i < 96) is in block b = i // 48
at slot j = i % 48: pods in 127.(16+96b+j).0.0/16 (one /24 per node) and services in
127.(64+96b+j).0.0/16. Block 0 (i < 48) is the original plan, pods 127.16-63 and services
127.64-111, unchanged: a cluster keeps its index across restarts (network.json), and its Services
and pods hold addresses of its ranges, so an index must always map to the same ranges. Block 1
(48 <= i < 96) takes the next free octets: pods 127.112-159, services 127.160-207. 127.0.0.0/16
(127.0.0.1 and friends, used by everything else) and 127.208.0.0 and above stay untouched.

Netns mode (`tether local up --netns`, root) uses private ranges that exist only inside the
cluster's network namespaces (see `tether.local.netns`): pods in 10.(16+i).0.0/16 (node k gets
10.(16+i).(k+1).0/24), services in 10.(96+i).0.0/16, and a fabric 10.(128+i).0.0/24 that links
the nodes: the router namespace has .1, node k has .(k+2), its InternalIP. With i < 32
(MAX_NETNS_CLUSTERS) the three kinds of range never meet, and no two clusters share one; a
netns cluster therefore claims an index below 32, a rootless one any index below 96.

Netns clusters also meet the host and each other on an underlay (see `tether.local.netns` and
`tether.local.underlay`): 10.200.0.0/24, where cluster i's router has 10.200.0.(i+1) and the host
10.200.0.254 (the same address on every host link, as one site seen from every cluster).

Both modes share one index space (the machine-wide claims below), so a netns cluster and a
rootless cluster never hold the same index. A new rootless cluster takes the lowest free index
from 32 up first, and an index below 32 only when those are gone, so rootless clusters leave
the netns indexes free.

Rootless clusters can keep only loopback addresses on this machine: an IP pool or podCIDR outside
127.0.0.0/8 (`is_local_range`) would give pods addresses no route on this machine leads to, and
packets for them would leave by the default route. Those are refused (`ippool_crd`, `ipam`), and
`pool_hint` names a range inside the cluster's own pod range that no node's podCIDR ever uses.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO

MAX_CLUSTERS = 96  # indexes 0..95: the rootless limit, and the whole index space
MAX_NETNS_CLUSTERS = 32  # netns mode: indexes 0..31 (10.x ranges above would collide)
ROOTLESS_BLOCK = 48  # rootless indexes per block of 127.x octets (see the module docstring)
MAX_NODES = 250
ROOTLESS = "rootless"
NETNS = "netns"
MODES = (ROOTLESS, NETNS)
UNDERLAY_CIDR = ipaddress.IPv4Network("10.200.0.0/24")
UNDERLAY_HOST_IP = "10.200.0.254"  # the host namespace's address on every host link
LOOPBACK_V4 = ipaddress.IPv4Network("127.0.0.0/8")
LOOPBACK_V6 = ipaddress.IPv6Network("::1/128")


class NetworkError(Exception):
    pass


@dataclass(frozen=True)
class ClusterNetwork:
    index: int
    pod_cidr: ipaddress.IPv4Network
    service_cidr: ipaddress.IPv4Network
    mode: str = ROOTLESS
    fabric_cidr: ipaddress.IPv4Network | None = None  # netns mode: the node addresses

    @classmethod
    def rootless(cls, index: int) -> ClusterNetwork:
        _check_index(index, ROOTLESS)
        block, slot = divmod(index, ROOTLESS_BLOCK)
        pods = 16 + 2 * ROOTLESS_BLOCK * block + slot  # block 0: 16..63, block 1: 112..159
        services = pods + ROOTLESS_BLOCK  # block 0: 64..111, block 1: 160..207
        return cls(
            index=index,
            pod_cidr=ipaddress.IPv4Network(f"127.{pods}.0.0/16"),
            service_cidr=ipaddress.IPv4Network(f"127.{services}.0.0/16"),
        )

    @classmethod
    def netns(cls, index: int) -> ClusterNetwork:
        _check_index(index, NETNS)
        return cls(
            index=index,
            pod_cidr=ipaddress.IPv4Network(f"10.{16 + index}.0.0/16"),
            service_cidr=ipaddress.IPv4Network(f"10.{96 + index}.0.0/16"),
            mode=NETNS,
            fabric_cidr=ipaddress.IPv4Network(f"10.{128 + index}.0.0/24"),
        )

    @classmethod
    def of(cls, index: int, mode: str) -> ClusterNetwork:
        if mode not in MODES:
            raise NetworkError(f"network mode {mode!r} is not one of {', '.join(MODES)}")
        return cls.netns(index) if mode == NETNS else cls.rootless(index)

    @property
    def router_ip(self) -> str:
        """Netns mode: the router namespace's address on the fabric (the nodes' gateway)."""
        if self.fabric_cidr is None:
            raise NetworkError("only a netns-mode cluster has a fabric")
        return str(self.fabric_cidr.network_address + 1)

    def node_pod_cidr(self, node_index: int) -> ipaddress.IPv4Network:
        if not 0 <= node_index < MAX_NODES:
            raise NetworkError(f"node index {node_index} is outside 0..{MAX_NODES - 1}")
        return list(self.pod_cidr.subnets(new_prefix=24))[node_index + 1]

    def node_pod_gateway(self, node_index: int) -> str:
        """The first address of the node's pod /24 (IPAM never hands it out): rootless, the
        node's InternalIP; netns, the node's source address toward joined peers, so their
        replies come back through the pod range they route."""
        return str(self.node_pod_cidr(node_index).network_address + 1)

    def node_ip(self, node_index: int) -> str:
        """The node's InternalIP: rootless, the first address of its pod range (like a cni0
        bridge); netns, its address on the cluster's fabric."""
        if self.fabric_cidr is not None:
            if not 0 <= node_index < MAX_NODES:
                raise NetworkError(f"node index {node_index} is outside 0..{MAX_NODES - 1}")
            return str(self.fabric_cidr.network_address + 2 + node_index)
        return str(self.node_pod_cidr(node_index).network_address + 1)

    @property
    def underlay_ip(self) -> str:
        """Netns mode: the router namespace's address on the underlay (host and joined clusters)."""
        if self.fabric_cidr is None:
            raise NetworkError("only a netns-mode cluster is on the underlay")
        return str(UNDERLAY_CIDR.network_address + 1 + self.index)

    @property
    def own_ranges(self) -> tuple[ipaddress.IPv4Network, ...]:
        """Every range whose addresses belong to this cluster (pods, Services, netns: the fabric)."""
        return (self.pod_cidr, self.service_cidr, *((self.fabric_cidr,) if self.fabric_cidr else ()))

    @property
    def pool_hint(self) -> str:
        """A range for an IP pool inside the pod range that no node's podCIDR uses (nodes take
        the /24s from .1 up to .250)."""
        return str(ipaddress.IPv4Network(f"{self.pod_cidr.network_address + 252 * 256}/22"))

    @property
    def api_service_ip(self) -> str:
        """`kubernetes.default` gets the first address of the service range, as on real clusters."""
        return str(self.service_cidr.network_address + 1)

    @property
    def dns_service_ip(self) -> str:
        return str(self.service_cidr.network_address + 10)


def is_local_range(cidr: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    """Whether every address of `cidr` stays on this machine without any route (loopback)."""
    if isinstance(cidr, ipaddress.IPv4Network):
        return cidr.subnet_of(LOOPBACK_V4)
    return cidr.subnet_of(LOOPBACK_V6)


def max_clusters(mode: str) -> int:
    """How many cluster indexes `mode` can use: indexes 0..max_clusters(mode) - 1."""
    if mode not in MODES:
        raise NetworkError(f"network mode {mode!r} is not one of {', '.join(MODES)}")
    return MAX_NETNS_CLUSTERS if mode == NETNS else MAX_CLUSTERS


def _check_index(index: int, mode: str) -> None:
    limit = max_clusters(mode)
    if not 0 <= index < limit:
        raise NetworkError(f"cluster index {index} is outside 0..{limit - 1} ({mode} mode has {limit} "
                           f"address ranges)")


def persisted_mode(data_dir: Path) -> str | None:
    """The network mode a cluster's data directory was started with (None: never started)."""
    try:
        mode = json.loads((data_dir / "network.json").read_text()).get("mode", ROOTLESS)
    except (OSError, ValueError, AttributeError):
        return None
    return mode if mode in MODES else ROOTLESS


def choose_mode(data_dir: Path, netns: bool | None) -> str:
    """The mode to start in: the one asked for, else the kept one, else rootless.

    A cluster keeps its mode: its Services and pods hold addresses of that mode's ranges.
    """
    kept = persisted_mode(data_dir)
    if netns is None:
        return kept or ROOTLESS
    wanted = NETNS if netns else ROOTLESS
    if kept is not None and kept != wanted and (data_dir / "state.db").exists():
        flag = "--netns" if kept == NETNS else "no --netns"
        raise NetworkError(f"cluster data in {data_dir} was made in {kept} mode and its objects hold "
                           f"{kept} addresses: start it with {flag}, or remove that directory to "
                           f"start afresh in {wanted} mode")
    return wanted


LOCK_DIR = Path(os.environ.get("TETHER_LOCK_DIR", "/tmp/tether-local-locks"))


class IndexClaim:
    """Holds one cluster index machine-wide for as long as the process lives (an flock).

    Two local clusters with the same index would share pod and service addresses; every
    cluster on the machine, whatever its data directory, claims its own.
    """

    def __init__(self, index: int, handle: IO[bytes]) -> None:
        self.index = index
        self._handle = handle

    def release(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self._handle, fcntl.LOCK_UN)
        self._handle.close()


def try_claim(index: int, lock_dir: Path = LOCK_DIR) -> IndexClaim | None:
    """Claim exactly `index`, or None when a running cluster holds it."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    handle = (lock_dir / f"cluster-{index}.lock").open("ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return IndexClaim(index, handle)


def claim_index(preferred: int | None, lock_dir: Path = LOCK_DIR, mode: str = ROOTLESS) -> IndexClaim:
    """Claim an index `mode` can use: `preferred` (the one a restarted cluster had) if it is
    free and valid for the mode, else the lowest free one."""
    limit = max_clusters(mode)
    lock_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        lock_dir.chmod(0o1777)  # shared by every user's clusters on this machine
    first = [preferred] if preferred is not None and 0 <= preferred < limit else []
    # Rootless clusters take the indexes netns mode cannot use first, so that rootless clusters
    # running on the machine leave the 32 netns indexes to netns clusters as long as they can.
    order = (list(range(MAX_NETNS_CLUSTERS, limit)) + list(range(MAX_NETNS_CLUSTERS))
             if mode == ROOTLESS else list(range(limit)))
    for index in first + [i for i in order if i != preferred]:
        claim = try_claim(index, lock_dir)
        if claim is not None:
            return claim
    other = "" if mode == ROOTLESS else f", or start this one without --netns ({MAX_CLUSTERS} rootless ranges)"
    raise NetworkError(f"all {limit} {mode}-mode local cluster address ranges (indexes 0..{limit - 1}) are in "
                       f"use on this machine: stop a local cluster with `tether local down`{other}")


def free_indexes(mode: str = ROOTLESS, lock_dir: Path = LOCK_DIR) -> list[int]:
    """The indexes `mode` can use that no running cluster holds now (a snapshot: another
    cluster may claim one at any moment)."""
    free: list[int] = []
    for index in range(max_clusters(mode)):
        claim = try_claim(index, lock_dir)
        if claim is not None:
            free.append(index)
            claim.release()
    return free
