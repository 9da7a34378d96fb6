"""Pod IPAM: pool choice (Calico node selectors), podCIDR fallback, exhaustion, release, rebuild."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.local.network import ClusterNetwork
from tether.local.nodes import ippool_crd
from tether.local.nodes.ipam import (
    IPPOOLS,
    PODS,
    NoAddress,
    PodAddresses,
    Source,
    address_source,
    pick_address,
    pool_from_object,
)
from tether.local.store import Store

Obj = dict[str, Any]


def node(name: str, labels: dict[str, str] | None = None, cidr: str | None = None, ip: str = "") -> Obj:
    obj: Obj = {"metadata": {"name": name, "labels": labels or {}}, "spec": {}, "status": {}}
    if cidr:
        obj["spec"] = {"podCIDR": cidr, "podCIDRs": [cidr]}
    if ip:
        obj["status"]["addresses"] = [{"type": "InternalIP", "address": ip}]
    return obj


def pool(name: str, cidr: str, selector: str | None = None, **spec: Any) -> Obj:
    body: Obj = {"cidr": cidr, **spec}
    if selector is not None:
        body["nodeSelector"] = selector
    return {"apiVersion": "projectcalico.org/v3", "kind": "IPPool", "metadata": {"name": name}, "spec": body}


def pod(name: str, uid: str | None = None, *, node_name: str = "", ip: str = "", phase: str = "",
        host_network: bool = False) -> Obj:
    obj: Obj = {"metadata": {"name": name, "namespace": "default", "uid": uid or f"uid-{name}"},
                "spec": {"nodeName": node_name}, "status": {}}
    if ip:
        obj["status"]["podIP"] = ip
    if phase:
        obj["status"]["phase"] = phase
    if host_network:
        obj["spec"]["hostNetwork"] = True
    return obj


RACK0 = node("kube-node-0", {"rack": "0"}, "127.16.1.0/24")
RACK0B = node("kube-node-1", {"rack": "0"}, "127.16.2.0/24")
RACK1 = node("kube-node-2", {"rack": "1"}, "127.16.3.0/24")
RACK1B = node("kube-node-3", {"rack": "1"}, "127.16.4.0/24")
RACK_POOLS = [
    pool("rack-0-ippool", "192.168.0.0/24", 'rack == "0"', ipipMode="Always", natOutgoing=True),
    pool("rack-1-ippool", "192.168.1.0/24", 'rack == "1"', ipipMode="Always", natOutgoing=True),
]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "state.db")
    yield opened
    opened.close()


def add_pools(store: Store, *pools: Obj) -> None:
    for p in pools:
        store.create(IPPOOLS, "", p["metadata"]["name"], p)


# pure --------------------------------------------------------------------------------------


def test_pool_defaults_and_problems() -> None:
    p = pool_from_object(pool("p", "10.0.0.0/16"))
    assert (p.block_size, p.node_selector, p.disabled, p.usable) == (26, "all()", False, True)
    assert pool_from_object(pool("p", "10.0.0.0/28")).block_size == 28  # a block fits in its pool
    assert "invalid cidr" in pool_from_object(pool("p", "nonsense")).problem
    assert "nodeSelector" in pool_from_object(pool("p", "10.0.0.0/16", "rack ==")).problem
    assert not pool_from_object(pool("p", "10.0.0.0/16", allowedUses=["Tunnel"])).usable


@pytest.mark.parametrize(
    ("the_node", "pools", "expected"),
    [
        (RACK0, RACK_POOLS, ["192.168.0.0/24"]),
        (RACK1, RACK_POOLS, ["192.168.1.0/24"]),
        (RACK0, [], ["127.16.1.0/24"]),  # no pools: the node's podCIDR
        (RACK0, [pool("all", "10.1.0.0/16")], ["10.1.0.0/16"]),  # nodeSelector defaults to all()
        (RACK0, [pool("off", "10.1.0.0/16", disabled=True)], ["127.16.1.0/24"]),  # disabled pools don't count
        (RACK0, [pool("b", "10.2.0.0/16"), pool("a", "10.1.0.0/16")], ["10.1.0.0/16", "10.2.0.0/16"]),
        (RACK0, [pool("v6", "fd00::/64"), pool("v4", "10.1.0.0/16")], ["10.1.0.0/16"]),
    ],
)
def test_address_source(the_node: Obj, pools: list[Obj], expected: list[str]) -> None:
    source = address_source(the_node, [pool_from_object(p) for p in pools])
    assert source.problem == ""
    assert [str(r.cidr) for r in source.ranges] == expected


def test_enabled_pools_are_authoritative() -> None:
    source = address_source(node("lonely", {"rack": "9"}, "127.16.9.0/24"),
                            [pool_from_object(p) for p in RACK_POOLS])
    assert source.ranges == ()
    assert 'no configured Calico pools for node "lonely"' in source.problem
    assert 'rack-0-ippool: rack == "0"' in source.problem


def test_only_disabled_or_unmatched_pools() -> None:
    pools = [pool_from_object(pool("off", "10.1.0.0/16", 'rack == "0"', disabled=True)),
             pool_from_object(pool("other", "10.2.0.0/16", 'rack == "1"'))]
    assert "no configured Calico pools" in address_source(RACK0, pools).problem


def test_node_without_podcidr_and_no_pools() -> None:
    assert "has no spec.podCIDR" in address_source(node("bare"), []).problem


def test_pick_prefers_own_block_then_new_then_borrowed() -> None:
    source = address_source(RACK0, [pool_from_object(pool("p", "10.0.0.0/30", blockSize=31))])
    blocks = {ipaddress.IPv4Network("10.0.0.0/31"): "other", ipaddress.IPv4Network("10.0.0.2/31"): "kube-node-0"}
    first = pick_address(source, "kube-node-0", set(), blocks)
    assert first is not None and str(first.address) == "10.0.0.2"  # .3 is the pool's broadcast
    used = {int(first.address)}
    borrowed = pick_address(source, "kube-node-0", used, blocks)
    assert borrowed is not None and str(borrowed.address) == "10.0.0.1"  # .0 is the pool's network
    assert pick_address(source, "kube-node-0", used | {int(borrowed.address)}, blocks) is None
    assert pick_address(Source(), "n", set(), {}) is None


# the allocator -----------------------------------------------------------------------------


def test_rack_pools_give_each_node_its_own_block(store: Store) -> None:
    """Calico's per-rack pools example: two racks, one /24 each; each node gets its own /26 block."""
    add_pools(store, *RACK_POOLS)
    ipam = PodAddresses(store)
    got = {n["metadata"]["name"]: ipam.allocate(pod(f"p-{n['metadata']['name']}"), n)
           for n in (RACK0, RACK0B, RACK1, RACK1B)}
    assert got == {"kube-node-0": "192.168.0.1", "kube-node-1": "192.168.0.64",
                   "kube-node-2": "192.168.1.1", "kube-node-3": "192.168.1.64"}
    assert ipam.allocate(pod("again"), RACK1) == "192.168.1.2"  # its own block first
    assert ipam.block_affinity() == {"192.168.0.0/26": "kube-node-0", "192.168.0.64/26": "kube-node-1",
                                     "192.168.1.0/26": "kube-node-2", "192.168.1.64/26": "kube-node-3"}


def test_podcidr_skips_network_gateway_and_broadcast(store: Store) -> None:
    ipam = PodAddresses(store)
    assert ipam.allocate(pod("a"), RACK0) == "127.16.1.2"
    assert ipam.allocate(pod("b"), RACK0) == "127.16.1.3"


def test_allocate_is_idempotent_per_pod_and_release_reuses(store: Store) -> None:
    ipam = PodAddresses(store)
    a = pod("a")
    first = ipam.allocate(a, RACK0)
    assert ipam.allocate(a, RACK0) == first
    assert ipam.address_of(a) == first
    second = ipam.allocate(pod("b"), RACK0)
    ipam.release(a)
    ipam.release(a)  # twice is fine
    assert ipam.address_of(a) is None
    assert ipam.allocate(pod("c"), RACK0) == first  # the lowest free address comes back
    assert second != first


def test_same_name_new_uid_gets_a_fresh_allocation(store: Store) -> None:
    ipam = PodAddresses(store)
    old = ipam.allocate(pod("a", "u1"), RACK0)
    ipam.allocate(pod("filler"), RACK0)
    assert ipam.allocate(pod("a", "u2"), RACK0) == old  # the old pod's address was freed first
    ipam.release(pod("a", "u1"))  # a stale release does not free the new pod's address
    assert ipam.address_of(pod("a", "u2")) == old


def test_exhaustion_and_leak_repair(store: Store) -> None:
    add_pools(store, pool("tiny", "10.9.0.0/30", blockSize=30))  # two usable addresses
    ipam = PodAddresses(store)
    kept = pod("kept")
    store.create(PODS, "default", "kept", kept)
    ipam.allocate(kept, RACK0)
    ipam.allocate(pod("leaked"), RACK0)  # never stored: reclaimable
    third = pod("third")
    store.create(PODS, "default", "third", third)
    assert ipam.allocate(third, RACK0) == "10.9.0.2"
    with pytest.raises(NoAddress, match=r"every address of IPPool tiny \(10.9.0.0/30\) is in use"):
        ipam.allocate(pod("fourth"), RACK0)


def test_disabled_pool_never_used(store: Store) -> None:
    add_pools(store, pool("off", "10.8.0.0/24", disabled=True), pool("on", "10.7.0.0/24", 'rack == "0"'))
    ipam = PodAddresses(store)
    assert ipam.allocate(pod("a"), RACK0).startswith("10.7.0.")
    with pytest.raises(NoAddress, match='no configured Calico pools for node "kube-node-2"'):
        ipam.allocate(pod("b"), RACK1)


def test_rebuild_from_stored_pods(store: Store) -> None:
    add_pools(store, *RACK_POOLS)
    for p in (pod("x", node_name="kube-node-0", ip="192.168.0.1"),
              pod("y", node_name="kube-node-0", ip="192.168.0.2"),
              pod("done", node_name="kube-node-0", ip="192.168.0.3", phase="Succeeded"),
              pod("host", node_name="kube-node-0", ip="127.16.1.1", host_network=True)):
        store.create(PODS, "default", p["metadata"]["name"], p)
    ipam = PodAddresses(store)
    assert ipam.address_of(pod("x")) == "192.168.0.1"
    assert ipam.address_of(pod("done")) is None
    assert ipam.block_affinity() == {"192.168.0.0/26": "kube-node-0"}
    # The finished pod's address is free again; the held ones are not handed out twice.
    assert ipam.allocate(pod("z"), RACK0) == "192.168.0.3"
    assert ipam.allocate(pod("w"), RACK0) == "192.168.0.4"


def test_host_network_pods_use_the_node_ip(store: Store) -> None:
    ipam = PodAddresses(store)
    with_ip = node("n", cidr="127.16.1.0/24", ip="127.16.1.1")
    assert ipam.allocate(pod("h", host_network=True), with_ip) == "127.16.1.1"
    assert ipam.allocate(pod("p"), with_ip) == "127.16.1.2"  # nothing was held for it


# validation of IPPools, as calico-apiserver does -------------------------------------------


def test_ippool_validation() -> None:
    assert ippool_crd.ippool_causes(RACK_POOLS[0], [RACK_POOLS[1]]) == []
    fields = lambda obj, others=(): [c.field for c in ippool_crd.ippool_causes(obj, list(others))]  # noqa: E731
    assert fields(pool("p", "nope")) == ["spec.cidr"]
    assert fields(pool("p", "10.0.0.0/16", "rack ==")) == ["spec.nodeSelector"]
    assert fields(pool("p", "10.0.0.0/16", blockSize=12)) == ["spec.blockSize"]
    assert fields(pool("p", "10.0.0.0/28", blockSize=26)) == ["spec.blockSize"]
    overlap = ippool_crd.ippool_causes(pool("default-ipv4-ippool", "192.168.0.0/16"), RACK_POOLS)
    assert overlap[0].message.startswith(
        "IPPool(default-ipv4-ippool) CIDR overlaps with IPPool(rack-0-ippool) CIDR 192.168.0.0/24")


# a rootless cluster keeps only loopback addresses --------------------------------------------


ROOTLESS = ClusterNetwork.rootless(0)


def test_rootless_refuses_a_pool_outside_loopback() -> None:
    causes = ippool_crd.ippool_causes(RACK_POOLS[0], [], ROOTLESS)
    assert [c.field for c in causes] == ["spec.cidr"]
    message = causes[0].message
    assert message.startswith('Invalid value: "192.168.0.0/24": IPPool rack-0-ippool (192.168.0.0/24) is outside '
                              "127.0.0.0/8")
    assert "127.16.252.0/22" in message and "sudo tether local up --netns" in message
    # loopback pools, pools nothing is given from, IPv6 pools (never used) and netns clusters pass
    ok = [pool("p", "127.16.252.0/24"), pool("p", "10.4.0.0/16", disabled=True),
          pool("p", "10.4.0.0/16", allowedUses=["Tunnel"]), pool("p", "fd00::/64")]
    assert [ippool_crd.ippool_causes(p, [], ROOTLESS) for p in ok] == [[], [], [], []]
    assert ippool_crd.ippool_causes(RACK_POOLS[0], [], ClusterNetwork.netns(0)) == []
    assert ippool_crd.ippool_causes(RACK_POOLS[0], []) == []  # no network: Calico's checks only


def test_rootless_gives_no_address_outside_loopback() -> None:
    pools = [pool_from_object(p) for p in RACK_POOLS]
    source = address_source(RACK0, pools, ROOTLESS)
    assert not source.ranges and "IPPool rack-0-ippool (192.168.0.0/24) is outside 127.0.0.0/8" in source.problem
    assert address_source(RACK0, pools, ClusterNetwork.netns(0)).ranges  # netns: routed locally
    assert address_source(RACK0, pools).ranges
    stray = node("user-node", cidr="10.244.0.0/24")
    problem = address_source(stray, [], ROOTLESS).problem
    assert problem.startswith('node "user-node" has podCIDR 10.244.0.0/24 outside 127.0.0.0/8')
    assert "leave spec.podCIDR unset" in problem and "--netns" in problem
    assert address_source(RACK0, [], ROOTLESS).ranges  # its podCIDR is loopback


def test_rootless_allocation_reports_the_pool(store: Store) -> None:
    """A pool stored before the check existed: the pod gets no address and the kubelet's Event
    (FailedCreatePodSandBox) carries the reason."""
    add_pools(store, RACK_POOLS[0])
    with pytest.raises(NoAddress, match=r"rack-0-ippool \(192.168.0.0/24\) is outside 127.0.0.0/8"):
        PodAddresses(store, ROOTLESS).allocate(pod("a"), RACK0)
