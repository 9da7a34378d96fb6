"""Pod addresses: which range a pod's IP comes from, and a small allocator that hands them out.

The API for the kubelet (one `PodAddresses` per cluster, from `for_cluster(cluster)`):

    addresses = ipam.for_cluster(cluster)
    try:
        ip = addresses.allocate(pod, node)   # idempotent per pod: same pod, same address
    except ipam.NoAddress as exc:
        ipam.report_no_address(cluster.ops, pod, exc)   # Warning FailedCreatePodSandBox
        ...                                  # leave the pod Pending; retry when pools/labels change
    ...                                      # write status.podIP/podIPs = ip
    addresses.release(pod)                   # when the pod terminates or is deleted

Where an address comes from, as Calico IPAM decides with node-selector pools:

- If any *enabled* `projectcalico.org/v3` IPPool exists, pools are authoritative: the pod gets an
  address from a pool whose `spec.nodeSelector` matches the node's labels, preferring a block
  (`spec.blockSize`, default /26) already affine to that node, then a free block (which becomes
  affine), then borrowing from another node's block. No matching pool means no address.
- Otherwise the address comes from the node's `spec.podCIDRs`/`spec.podCIDR` (as kwok does),
  skipping the network, broadcast and first address (the node's own bridge address).

A rootless cluster gives no address outside 127.0.0.0/8 (nothing on this machine would route it:
packets to it would leave by the default route); a pool or podCIDR there is reported with the fix
(`non_local_message`). Only IPv4 is assigned (Calico's default `assign_ipv4: true, assign_ipv6: false`). Host-network
pods get the node's InternalIP and hold nothing. The allocator's state lives in memory: it is
rebuilt from the stored pods' `status.podIP` on first use (a repair pass, like the apiserver's
IP allocator repair loop), and leaked addresses of pods that no longer exist are reclaimed before
reporting exhaustion. All methods are synchronous and must be called on the event-loop thread.
"""

from __future__ import annotations

import ipaddress
import logging
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from typing import TYPE_CHECKING, Any

from tether.local import events
from tether.local.network import ROOTLESS, ClusterNetwork, is_local_range
from tether.local.operations import Operations
from tether.local.store import Store
from tether.objects import Obj, calico_selector

if TYPE_CHECKING:
    from tether.local.cluster import LocalCluster

log = logging.getLogger(__name__)

IPPOOLS = "projectcalico.org/ippools"
PODS = "/pods"
NODES = "/nodes"
DEFAULT_BLOCK_SIZE = 26
NO_ADDRESS_REASON = "FailedCreatePodSandBox"
TERMINAL_PHASES = ("Succeeded", "Failed")


class NoAddress(Exception):
    """No address can be given to this pod on this node; the message says why, for an Event."""


# plans (pure) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pool:
    name: str
    cidr: IPv4Network | None  # None: not a usable IPv4 CIDR (see `problem`)
    block_size: int
    node_selector: str
    disabled: bool
    selector: calico_selector.Selector | None
    for_workloads: bool = True
    problem: str = ""

    @property
    def usable(self) -> bool:
        return self.cidr is not None and self.selector is not None and not self.disabled and self.for_workloads

    @property
    def usable_somewhere(self) -> bool:
        """Whether IPAM may give pods its addresses (on the nodes its selector picks)."""
        return not self.disabled and self.for_workloads


FIX = ("use a range inside 127.0.0.0/8 ({hint}), or run the cluster as root in --netns mode "
       "(`sudo tether local up --netns`), where every pool's range is routed on this machine")


def non_local_message(pool: Pool, network: ClusterNetwork) -> str:
    """Why a rootless cluster cannot use `pool` ("" when it can), with the fix."""
    if pool.cidr is None or is_local_range(pool.cidr):
        return ""
    hint = f"this cluster's pod range keeps {network.pool_hint} free for pools"
    return (f"IPPool {pool.name} ({pool.cidr}) is outside 127.0.0.0/8: this local cluster runs rootless and "
            "keeps only loopback addresses on this machine, so pods given this pool's addresses would be "
            f"unreachable and packets to them would leave it; {FIX.format(hint=hint)}")


def pool_from_object(obj: Mapping[str, Any]) -> Pool:
    spec = obj.get("spec") or {}
    name = str((obj.get("metadata") or {}).get("name", ""))
    text = str(spec.get("nodeSelector") or "all()")
    problem = ""
    cidr: IPv4Network | None = None
    try:
        network = ipaddress.ip_network(str(spec.get("cidr", "")), strict=False)
        if isinstance(network, IPv4Network):
            cidr = network
        else:
            problem = "IPv6 pools are not used for pod addresses"
    except ValueError as exc:
        problem = f"invalid cidr: {exc}"
    selector: calico_selector.Selector | None = None
    try:
        selector = calico_selector.parse(text)
    except calico_selector.SelectorError as exc:
        problem = f"invalid nodeSelector: {exc}"
    block = int(spec.get("blockSize") or DEFAULT_BLOCK_SIZE)
    if cidr is not None:
        # A block cannot be larger than its pool; Calico rejects this, we clamp instead.
        block = max(block, cidr.prefixlen)
    uses = spec.get("allowedUses")
    return Pool(
        name=name, cidr=cidr, block_size=min(block, 32), node_selector=text,
        disabled=bool(spec.get("disabled")), selector=selector,
        for_workloads=not isinstance(uses, list) or "Workload" in uses, problem=problem,
    )


@dataclass(frozen=True)
class Range:
    """Where addresses may come from: a CIDR cut into blocks, minus reserved addresses."""

    cidr: IPv4Network
    block_size: int
    reserved: frozenset[int]
    label: str  # for messages: "IPPool rack-0-ippool (192.168.0.0/24)" or "podCIDR 127.16.1.0/24"


@dataclass(frozen=True)
class Source:
    ranges: tuple[Range, ...] = ()
    problem: str = ""  # non-empty: no address can be given, and this says why


def _edges(cidr: IPv4Network) -> set[int]:
    if cidr.prefixlen >= 31:
        return set()
    return {int(cidr.network_address), int(cidr.broadcast_address)}


def node_cidrs(node: Mapping[str, Any]) -> list[IPv4Network]:
    spec = node.get("spec") or {}
    texts = spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else [])
    found: list[IPv4Network] = []
    for text in texts:
        try:
            network = ipaddress.ip_network(str(text), strict=False)
        except ValueError:
            continue
        if isinstance(network, IPv4Network):
            found.append(network)
    return found


def address_source(node: Mapping[str, Any], pools: Sequence[Pool], network: ClusterNetwork | None = None) -> Source:
    """Which ranges may give `node`'s pods addresses (pure: Calico's pool choice, or podCIDR);
    for a rootless cluster's `network`, only ranges inside 127.0.0.0/8."""
    rootless = network is not None and network.mode == ROOTLESS
    meta = node.get("metadata") or {}
    name = meta.get("name", "")
    labels = meta.get("labels") or {}
    enabled = [p for p in pools if not p.disabled]
    if enabled:
        chosen = [p for p in sorted(enabled, key=lambda p: p.name)
                  if p.usable and p.selector is not None and p.selector.matches(labels)]
        if not chosen:
            listed = "; ".join(f"{p.name}: {p.node_selector}" + (f" ({p.problem})" if p.problem else "")
                               for p in sorted(enabled, key=lambda p: p.name))
            return Source(problem=f'no configured Calico pools for node "{name}": no enabled IPPool\'s '
                                  f"nodeSelector matches its labels ({listed})")
        if rootless and network is not None:
            refused = [message for p in chosen if (message := non_local_message(p, network))]
            if refused:
                return Source(problem="; ".join(refused))
        return Source(ranges=tuple(
            Range(p.cidr, p.block_size, frozenset(_edges(p.cidr)), f"IPPool {p.name} ({p.cidr})")
            for p in chosen if p.cidr is not None
        ))
    cidrs = node_cidrs(node)
    if not cidrs:
        return Source(problem=f'node "{name}" has no spec.podCIDR and no enabled IPPool exists')
    outside = [str(c) for c in cidrs if not is_local_range(c)]
    if rootless and outside and network is not None:
        hint = f"leave spec.podCIDR unset and tether assigns one in {network.pod_cidr}"
        return Source(problem=f'node "{name}" has podCIDR {", ".join(outside)} outside 127.0.0.0/8: this local '
                              "cluster runs rootless and keeps only loopback addresses on this machine, so its "
                              f"pods would be unreachable and packets to them would leave it; {FIX.format(hint=hint)}")
    return Source(ranges=tuple(
        # The first address is the node's own (its InternalIP, like a cni0 bridge).
        Range(c, c.prefixlen, frozenset(_edges(c) | {int(c.network_address) + 1}), f"podCIDR {c}")
        for c in cidrs
    ))


@dataclass(frozen=True)
class Pick:
    address: IPv4Address
    block: IPv4Network


def _blocks(rng: Range) -> Iterable[IPv4Network]:
    if rng.block_size == rng.cidr.prefixlen:
        return (rng.cidr,)
    return rng.cidr.subnets(new_prefix=rng.block_size)


def _free_in(block: IPv4Network, reserved: frozenset[int], used: set[int] | frozenset[int]) -> int | None:
    start = int(block.network_address)
    for candidate in range(start, start + block.num_addresses):
        if candidate not in used and candidate not in reserved:
            return candidate
    return None


def pick_address(source: Source, node: str, used: set[int] | frozenset[int],
                 affinity: Mapping[IPv4Network, str]) -> Pick | None:
    """The next address for a pod on `node` (pure): own blocks first, then a new block, then a
    borrowed one, as Calico IPAM does without strict affinity. None when everything is in use."""
    for wanted in ("own", "new", "borrow"):
        for rng in source.ranges:
            for block in _blocks(rng):
                owner = affinity.get(block)
                if (wanted == "own" and owner != node) or (wanted == "new" and owner is not None):
                    continue
                found = _free_in(block, rng.reserved, used)
                if found is not None:
                    return Pick(IPv4Address(found), block)
    return None


# the allocator (stateful) ------------------------------------------------------------------


@dataclass(frozen=True)
class Allocation:
    address: IPv4Address
    uid: str
    node: str


def _pod_key(pod: Mapping[str, Any]) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return (str(meta.get("namespace") or "default"), str(meta.get("name", "")))


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


def _node_ip(node: Mapping[str, Any]) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP" and address.get("address"):
            return str(address["address"])
    return ""


class PodAddresses:
    """Pod IPs for one cluster: see the module docstring for the contract."""

    def __init__(self, store: Store, network: ClusterNetwork | None = None) -> None:
        self._store = store
        self._network = network  # rootless: only loopback ranges give addresses
        self._by_pod: dict[tuple[str, str], Allocation] = {}
        self._used: set[int] = set()
        self._affinity: dict[IPv4Network, str] = {}
        self._loaded = False

    # queries -----------------------------------------------------------------------------

    def pools(self) -> list[Pool]:
        return [pool_from_object(o) for o in self._store.list_objects(IPPOOLS)]

    def source_for(self, node: Mapping[str, Any]) -> Source:
        return address_source(node, self.pools(), self._network)

    def address_of(self, pod: Mapping[str, Any]) -> str | None:
        self._ensure_loaded()
        held = self._by_pod.get(_pod_key(pod))
        return str(held.address) if held is not None and held.uid == _uid(pod) else None

    def block_affinity(self) -> dict[str, str]:
        """Block CIDR -> node, as `calicoctl ipam show --show-blocks` would list them."""
        self._ensure_loaded()
        return {str(b): n for b, n in sorted(self._affinity.items(), key=lambda i: int(i[0].network_address))}

    # changes -----------------------------------------------------------------------------

    def allocate(self, pod: Mapping[str, Any], node: Mapping[str, Any]) -> str:
        """The pod's IP on `node`: the one it already holds, else a new one. Raises NoAddress."""
        self._ensure_loaded()
        node_name = str((node.get("metadata") or {}).get("name", ""))
        if (pod.get("spec") or {}).get("hostNetwork"):
            address = _node_ip(node)
            if not address:
                raise NoAddress(f'node "{node_name}" has no InternalIP for host-network pod '
                                f"{'/'.join(_pod_key(pod))}")
            return address
        key = _pod_key(pod)
        held = self._by_pod.get(key)
        if held is not None:
            if held.uid == _uid(pod):
                return str(held.address)
            self._forget(key)  # a new pod under an old name: the old one is gone
        source = self.source_for(node)
        if source.problem:
            raise NoAddress(source.problem)
        pick = pick_address(source, node_name, self._used, self._affinity)
        if pick is None and self.repair():
            pick = pick_address(source, node_name, self._used, self._affinity)
        if pick is None:
            ranges = ", ".join(r.label for r in source.ranges)
            raise NoAddress(f'no free address for pod {"/".join(key)} on node "{node_name}": '
                            f"every address of {ranges} is in use")
        self._hold(key, Allocation(pick.address, _uid(pod), node_name), pick.block)
        return str(pick.address)

    def release(self, pod: Mapping[str, Any]) -> None:
        """Give the pod's address back (safe to call twice, or for a pod that never had one)."""
        self._ensure_loaded()
        key = _pod_key(pod)
        held = self._by_pod.get(key)
        if held is not None and (not _uid(pod) or held.uid == _uid(pod)):
            self._forget(key)

    def repair(self) -> int:
        """Drop addresses held for pods that are gone or finished; returns how many."""
        self._ensure_loaded()
        stale = []
        for key, held in self._by_pod.items():
            pod = self._store.get(PODS, *key)
            if pod is None or _uid(pod) != held.uid or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
                stale.append(key)
        for key in stale:
            self._forget(key)
        if stale:
            log.info("ipam: reclaimed %d leaked pod address(es)", len(stale))
        return len(stale)

    def rebuild(self) -> None:
        """Forget everything and re-read the addresses the stored pods hold."""
        self._by_pod.clear()
        self._used.clear()
        self._affinity.clear()
        self._loaded = True
        nodes = {n["metadata"]["name"]: n for n in self._store.list_objects(NODES)}
        pools = self.pools()
        for pod in self._store.list_objects(PODS):
            spec, status = pod.get("spec") or {}, pod.get("status") or {}
            if spec.get("hostNetwork") or status.get("phase") in TERMINAL_PHASES or not status.get("podIP"):
                continue
            try:
                address = IPv4Address(str(status["podIP"]))
            except ValueError:
                continue
            node_name = str(spec.get("nodeName", ""))
            block = self._block_of(address, nodes.get(node_name), pools)
            if int(address) in self._used:
                log.warning("ipam: %s is claimed by more than one pod; keeping the first", address)
                continue
            self._hold(_pod_key(pod), Allocation(address, _uid(pod), node_name), block)

    # internals ---------------------------------------------------------------------------

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self.rebuild()

    def _hold(self, key: tuple[str, str], held: Allocation, block: IPv4Network | None) -> None:
        self._by_pod[key] = held
        self._used.add(int(held.address))
        if block is not None:
            self._affinity.setdefault(block, held.node)

    def _forget(self, key: tuple[str, str]) -> None:
        held = self._by_pod.pop(key, None)
        if held is not None:
            self._used.discard(int(held.address))
        # Blocks stay affine to their node once claimed, as Calico's do.

    @staticmethod
    def _block_of(address: IPv4Address, node: Mapping[str, Any] | None, pools: Sequence[Pool]) -> IPv4Network | None:
        for pool in pools:
            if pool.cidr is not None and address in pool.cidr:
                return IPv4Network(f"{address}/{pool.block_size}", strict=False)
        for cidr in node_cidrs(node or {}):
            if address in cidr:
                return cidr
        return None


def report_no_address(ops: Operations, pod: Obj, error: NoAddress, *, component: str = "kubelet") -> None:
    """The Warning Event a kubelet posts when the network plugin gives a pod no address."""
    events.record(
        ops, pod, event_type="Warning", reason=NO_ADDRESS_REASON, component=component,
        message=f"Failed to create pod sandbox: failed to set up the pod network: {error}",
    )


_per_cluster: weakref.WeakKeyDictionary[LocalCluster, PodAddresses] = weakref.WeakKeyDictionary()


def for_cluster(cluster: LocalCluster) -> PodAddresses:
    """The one PodAddresses of `cluster` (made on first use; it goes with the cluster)."""
    found = _per_cluster.get(cluster)
    if found is None:
        found = _per_cluster[cluster] = PodAddresses(cluster.store, cluster.network)
    return found
