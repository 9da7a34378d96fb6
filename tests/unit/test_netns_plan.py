"""The netns-mode address plan, namespace plan, host routes and underlay plan (pure: no root needed)."""

from __future__ import annotations

import asyncio
import ipaddress
import json
from ipaddress import IPv4Network
from pathlib import Path

import pytest

from tether.local.netns import (
    RTPROTO,
    FabricPlan,
    HostFabric,
    HostPlan,
    NetnsError,
    fabric_for,
    link_device,
    owned_namespace,
    parse_routes,
    peer_link,
    pod_link,
    pod_namespace,
    route_changes,
    shadowed,
    sink_device,
)
from tether.local.network import MAX_NETNS_CLUSTERS, ClusterNetwork, NetworkError, choose_mode
from tether.local.underlay import HOST, Side, host_route, join, reached_through, veth_commands


def test_netns_ranges_never_overlap_between_clusters_or_kinds() -> None:
    ranges: list[ipaddress.IPv4Network] = []
    for i in range(MAX_NETNS_CLUSTERS):
        net = ClusterNetwork.netns(i)
        assert net.fabric_cidr is not None
        ranges += [net.pod_cidr, net.service_cidr, net.fabric_cidr]
    for x, first in enumerate(ranges):
        for second in ranges[x + 1:]:
            assert not first.overlaps(second), (first, second)
    assert all(r.is_private and not r.is_loopback for r in ranges)


def test_node_addresses() -> None:
    net = ClusterNetwork.netns(3)
    assert net.node_ip(0) == "10.131.0.2"
    assert net.node_ip(1) == "10.131.0.3"
    assert net.router_ip == "10.131.0.1"
    assert str(net.node_pod_cidr(1)) == "10.19.2.0/24"
    assert net.dns_service_ip == "10.99.0.10"
    rootless = ClusterNetwork.rootless(3)
    assert rootless.node_ip(0) == "127.19.1.1"  # unchanged
    with pytest.raises(NetworkError):
        _ = rootless.router_ip


def test_plan_routes_each_node_to_the_others() -> None:
    plan = FabricPlan(ClusterNetwork.netns(2))
    assert plan.router == "tether-2" and plan.node(1) == "tether-2-n1"
    commands = plan.node_commands(1, [0, 1])
    assert ["-n", "tether-2-n1", "route", "add", "10.18.1.0/24", "via", "10.130.0.2"] in commands
    assert ["-n", "tether-2-n0", "route", "add", "10.18.2.0/24", "via", "10.130.0.3"] in commands
    assert ["-n", "tether-2", "route", "add", "10.18.2.0/24", "via", "10.130.0.3"] in commands
    assert ["-n", "tether-2-n1", "route", "add", "10.98.0.0/16", "via", "10.130.0.1"] in commands
    # nothing refers to another cluster's namespaces or the host namespace
    names = {c[c.index("-n") + 1] for c in commands if "-n" in c} | {c[2] for c in commands if c[:2] == ["netns", "add"]}
    assert names <= {"tether-2", "tether-2-n0", "tether-2-n1"}
    assert ["-n", "tether-2", "route", "add", "local", "10.98.0.0/16", "dev", "lo"] in plan.router_commands()
    assert all(len(c[c.index("link") + 2]) <= 15 for c in commands if "link" in c and "add" in c)


def test_slot_and_resolv_conf() -> None:
    plan = FabricPlan(ClusterNetwork.netns(0))
    assert plan.slot_of("10.128.0.2") == 0
    assert plan.slot_of("10.128.0.1") is None
    assert plan.slot_of("127.0.0.1") is None
    conf = plan.resolv_conf()
    assert "nameserver 10.96.0.10" in conf
    assert "search default.svc.cluster.local svc.cluster.local cluster.local" in conf
    with pytest.raises(NetnsError):
        FabricPlan(ClusterNetwork.rootless(0))


def test_owned_namespace_names_are_exact() -> None:
    assert owned_namespace(1, "tether-1") and owned_namespace(1, "tether-1-n12")
    assert not owned_namespace(1, "tether-12") and not owned_namespace(1, "tether-1-nx")
    assert not owned_namespace(1, "tether-1-n1-extra")


def test_pod_gets_its_own_namespace_joined_to_its_node_by_a_veth() -> None:
    plan = FabricPlan(ClusterNetwork.netns(2))
    uid = "3f1c9a2e-0000-4000-8000-000000000001"
    pod, link = pod_namespace(2, uid), pod_link(uid)
    assert owned_namespace(2, pod) and not owned_namespace(3, pod) and len(link) <= 15
    commands = plan.pod_commands(0, uid, "10.18.1.7")
    assert commands[0] == ["netns", "add", pod]
    assert ["-n", "tether-2-n0", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", pod] in commands
    assert ["-n", pod, "addr", "add", "10.18.1.7/32", "dev", "eth0"] in commands
    # the default route goes via the node's pod-range address, which the node holds on lo
    assert ["-n", pod, "route", "add", "default", "via", "10.18.1.1", "dev", "eth0"] in commands
    assert commands[-1] == ["-n", "tether-2-n0", "route", "replace", "10.18.1.7/32", "dev", link, "scope", "link",
                            "proto", "116"]
    assert pod_namespace(2, uid) == pod and pod_namespace(2, uid + "x") != pod


def test_fabric_for_mode() -> None:
    assert type(fabric_for(ClusterNetwork.rootless(0), 1)) is HostFabric
    assert fabric_for(ClusterNetwork.netns(0), 1).mode == "netns"


def test_mode_is_kept_with_the_data(tmp_path: Path) -> None:
    assert choose_mode(tmp_path, None) == "rootless"
    assert choose_mode(tmp_path, True) == "netns"
    (tmp_path / "network.json").write_text(json.dumps({"index": 1, "mode": "netns"}))
    assert choose_mode(tmp_path, None) == "netns"
    assert choose_mode(tmp_path, False) == "rootless"  # no objects yet: nothing holds addresses
    (tmp_path / "state.db").write_bytes(b"")
    with pytest.raises(NetworkError, match="--netns"):
        choose_mode(tmp_path, False)
    (tmp_path / "network.json").write_text(json.dumps({"index": 1}))  # written before modes existed
    assert choose_mode(tmp_path, None) == "rootless"


# how a netns cluster meets the host, and other clusters (pure plans) ------------------------------


def test_host_plan_devices_and_addresses() -> None:
    plan = HostPlan(ClusterNetwork.netns(5))
    assert (plan.sink, plan.link) == ("tether-5-sink", "tether-5-link")
    commands = plan.device_commands()
    assert ["link", "add", "tether-5-sink", "type", "bridge"] in commands
    assert ["link", "set", "dev", "tether-5-sink", "arp", "off", "multicast", "off"] in commands
    assert ["link", "add", "tether-5-link", "type", "veth", "peer", "name", "to-host", "netns", "tether-5"] in commands
    assert ["addr", "add", "10.200.0.254", "peer", "10.200.0.6/32", "dev", "tether-5-link"] in commands
    assert ["-n", "tether-5", "addr", "add", "10.200.0.6", "peer", "10.200.0.254/32", "dev", "to-host"] in commands
    names = [c[2] for c in commands if c[:2] == ["link", "add"]] + [peer_link(31), sink_device(31), link_device(31)]
    assert all(len(n) <= 15 for n in names), names  # IFNAMSIZ


def test_everything_of_a_cluster_ends_at_its_sink_unless_routed_through_the_link() -> None:
    network = ClusterNetwork.netns(5)
    plan = HostPlan(network)
    pools = [IPv4Network("198.18.0.0/24"), IPv4Network("10.21.7.0/24"), IPv4Network("127.9.0.0/16")]
    assert plan.sink_routes(pools) == {
        network.pod_cidr, network.service_cidr, network.fabric_cidr, IPv4Network("10.200.0.0/24"),
        IPv4Network("198.18.0.0/24"),  # a pool outside the cluster's ranges; loopback needs no route
    }
    assert plan.link_routes(["10.101.0.1", "10.101.3.4", "None", "fd00::1", "10.102.0.1"]) == {
        IPv4Network("10.101.0.1/32"), IPv4Network("10.101.3.4/32"), IPv4Network("10.101.0.10/32")}
    assert plan.sink_route("replace", network.pod_cidr) == [
        "route", "replace", "10.21.0.0/16", "dev", "tether-5-sink", "proto", RTPROTO, "metric", "4005"]
    assert plan.link_route("replace", IPv4Network("10.101.0.1/32")) == [
        "route", "replace", "10.101.0.1/32", "via", "10.200.0.6", "dev", "tether-5-link", "onlink", "proto", RTPROTO]


def test_route_changes_remove_then_add_only_the_difference() -> None:
    a, b, c = (IPv4Network(f"10.101.0.{i}/32") for i in (1, 2, 3))
    made = route_changes([a, b], [b, c], lambda verb, dst: [verb, str(dst)])
    assert made == [["del", "10.101.0.1/32"], ["replace", "10.101.0.3/32"]]
    assert route_changes([a], [a], lambda verb, dst: [verb, str(dst)]) == []


def test_parse_routes_keeps_ipv4_destinations() -> None:
    text = json.dumps([{"dst": "10.16.0.0/16", "dev": "tether-0-sink"}, {"dst": "10.96.0.1", "dev": "to-3"},
                       {"dst": "default", "dev": "eth0"}, {"dev": "x"}])
    assert parse_routes(text) == {IPv4Network("10.16.0.0/16"), IPv4Network("10.96.0.1/32")}
    assert parse_routes(text, device_prefix="to-") == {IPv4Network("10.96.0.1/32")}
    assert parse_routes("") == set() and parse_routes("not json") == set()


def test_underlay_join_plan() -> None:
    a, b = ClusterNetwork.netns(1), ClusterNetwork.netns(2)
    assert veth_commands(a, b)[0] == ["-n", "tether-1", "link", "add", "to-2", "type", "veth", "peer", "name",
                                      "to-1", "netns", "tether-2"]
    assert ["-n", "tether-1", "addr", "replace", "10.200.0.2", "peer", "10.200.0.3/32", "dev", "to-2"] in \
        veth_commands(a, b)
    side = Side(a, b)
    # the peer's pods and Services, never its fabric: an isolated API server stays isolated
    assert reached_through(b) == (b.pod_cidr, b.service_cidr)
    assert side.router_route("replace", b.pod_cidr) == [
        "-n", "tether-1", "route", "replace", "10.18.0.0/16", "via", "10.200.0.3", "onlink", "dev", "to-2",
        "proto", RTPROTO, "metric", "10"]
    assert side.node_route("replace", "tether-1-n0", b.pod_cidr) == [
        "-n", "tether-1-n0", "route", "replace", "10.18.0.0/16", "via", "10.129.0.1", "src", "10.17.1.1",
        "proto", RTPROTO]  # from the node's pod-range address: b routes a's pods back, not a's fabric
    with pytest.raises(NetnsError):
        side.node_route("replace", "tether-2-n0", b.pod_cidr)
    host = Side(a, HOST)
    assert reached_through(HOST) == (IPv4Network("10.200.0.254/32"),)
    assert host.router_route("replace", IPv4Network("10.200.0.254/32")) == [
        "-n", "tether-1", "route", "replace", "10.200.0.254/32", "dev", "to-host", "proto", RTPROTO, "metric", "10"]
    assert host_route("replace", a) == ["route", "replace", "10.17.0.0/16", "via", "10.200.0.2", "dev",
                                        "tether-1-link", "onlink", "proto", RTPROTO]
    with pytest.raises(NetnsError):
        asyncio.run(join(ClusterNetwork.rootless(1), HOST))


def test_shadowing_routes_are_reported() -> None:
    routes = json.dumps([
        {"dst": "default", "gateway": "192.0.2.1", "dev": "eth0"},
        {"dst": "192.0.2.0/24", "dev": "eth0", "protocol": "kernel"},
        {"dst": "10.0.0.0/8", "dev": "vpn0", "protocol": "static"},  # less specific: the sink wins
        {"dst": "10.21.0.0/16", "dev": "tether-5-sink", "protocol": RTPROTO},
    ])
    # a pool the same size as the host's network (its metric wins), one larger; one more specific is fine
    found = shadowed(routes, [IPv4Network("192.0.2.0/24"), IPv4Network("192.0.2.0/23"),
                              IPv4Network("192.0.2.128/25"), IPv4Network("10.21.0.0/16")])
    assert found == [f"the host's route 192.0.2.0/24 dev eth0 covers part of 192.0.2.0/{n}: from the host, those "
                     "addresses go there, not to this cluster; use a range this machine does not" for n in (23, 24)]
