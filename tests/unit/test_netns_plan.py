"""The netns-mode address plan and namespace plan (pure: no root needed)."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from tether.local.netns import FabricPlan, HostFabric, NetnsError, fabric_for, owned_namespace
from tether.local.network import MAX_NETNS_CLUSTERS, ClusterNetwork, NetworkError, choose_mode


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
