"""The mesh's pure logic: names, annotations (malformed ones skipped), the peer diff, config,
key files, `wg show dump` parsing, and the node underlay's filter."""

from __future__ import annotations

import base64
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from tether.connect.mesh import config, keys
from tether.connect.mesh.plan import (
    CurrentPeer,
    LocalSide,
    MeshConfigError,
    Peer,
    Remote,
    check_remotes,
    interface_name,
    parse_endpoint,
    peers_from_nodes,
    plan_peers,
)
from tether.connect.mesh.status import MeshMetrics, parse_dump
from tether.local import underlay
from tether.local.netns import NetnsError
from tether.local.network import ClusterNetwork

KEY_A = base64.b64encode(b"a" * 32).decode()
KEY_B = base64.b64encode(b"b" * 32).decode()
KEY_C = base64.b64encode(b"c" * 32).decode()


def node(name: str, annotations: dict[str, str], cidrs: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if cidrs is not None:
        spec = {"podCIDR": cidrs[0], "podCIDRs": cidrs} if cidrs else {}
    return {"metadata": {"name": name, "annotations": annotations}, "spec": spec}


def ann(local: str, key: str, endpoint: str) -> dict[str, str]:
    return {f"{local}.wireguard.semaphore.uw.io/pubKey": key, f"{local}.wireguard.semaphore.uw.io/endpoint": endpoint}


@pytest.mark.parametrize(("remote", "scope", "expected"), [
    ("aws", "", "wireguard.aws"),
    ("gcp12", "", "wireguard.gcp12"),  # exactly 15
])
def test_interface_name_is_semaphores_when_it_fits(remote: str, scope: str, expected: str) -> None:
    assert interface_name(remote, scope) == expected


@pytest.mark.parametrize(("remote", "scope"), [("gcp123", ""), ("a-very-long-cluster-name", ""),
                                               ("b", "tether-3-n0"), ("b", "tether-3-n1")])
def test_interface_name_is_short_stable_and_unique_otherwise(remote: str, scope: str) -> None:
    name = interface_name(remote, scope)
    assert len(name) <= 15 and name == interface_name(remote, scope)
    assert name.startswith("wg.")
    others = {interface_name(remote, s) for s in ("x", "y", "z", scope)}
    assert len(others) == 4


@pytest.mark.parametrize("bad", ["", "a b", "a/b"])
def test_interface_name_refuses_unusable_remote_names(bad: str) -> None:
    with pytest.raises(MeshConfigError):
        interface_name(bad)


@pytest.mark.parametrize(("text", "expected"), [
    ("10.0.0.1:51820", "10.0.0.1:51820"),
    (" 10.0.0.1:1 ", "10.0.0.1:1"),
    ("10.0.0.1", None),
    ("10.0.0.1:0", None),
    ("10.0.0.1:70000", None),
    ("host.example:51820", None),
    ("10.0.0.1:port", None),
    ("[::1]:51820", None),  # semaphore-wireguard resolves udp4 only
])
def test_parse_endpoint(text: str, expected: str | None) -> None:
    assert parse_endpoint(text) == expected


def test_malformed_annotations_are_skipped_without_dropping_other_peers() -> None:
    nodes = [
        node("good", ann("a", KEY_A, "10.1.0.2:51820"), ["10.4.1.0/24"]),
        node("bad-key", ann("a", "not-base64!", "10.1.0.3:51820"), ["10.4.2.0/24"]),
        node("short-key", ann("a", base64.b64encode(b"x" * 16).decode(), "10.1.0.3:51820"), ["10.4.2.0/24"]),
        node("bad-endpoint", ann("a", KEY_B, "nowhere"), ["10.4.3.0/24"]),
        node("no-cidr", ann("a", KEY_C, "10.1.0.5:51820"), []),
        node("other-cluster", ann("z", KEY_C, "10.1.0.6:51820"), ["10.4.6.0/24"]),
        node("plain", {}, ["10.4.7.0/24"]),
    ]
    peers, skipped = peers_from_nodes(nodes, "a")
    assert peers == [Peer("good", KEY_A, "10.1.0.2:51820", ("10.4.1.0/24",))]
    assert {s.node for s in skipped} == {"bad-key", "short-key", "bad-endpoint", "no-cidr"}


def test_dual_stack_pod_cidrs_are_all_allowed() -> None:
    peers, _ = peers_from_nodes([node("n", ann("a", KEY_A, "10.1.0.2:51820"), ["10.4.1.0/24", "fd00::/64"])], "a")
    assert peers[0].allowed_ips == ("10.4.1.0/24", "fd00::/64")


def test_a_public_key_announced_twice_is_kept_once() -> None:
    nodes = [node("n2", ann("a", KEY_A, "10.1.0.3:51820"), ["10.4.2.0/24"]),
             node("n1", ann("a", KEY_A, "10.1.0.2:51820"), ["10.4.1.0/24"])]
    peers, skipped = peers_from_nodes(nodes, "a")
    assert [p.node for p in peers] == ["n1"] and [s.node for s in skipped] == ["n2"]


def test_plan_peers_sets_new_and_changed_and_removes_gone() -> None:
    want = [Peer("n1", KEY_A, "10.1.0.2:51820", ("10.4.1.0/24",)),
            Peer("n2", KEY_B, "10.1.0.3:51820", ("10.4.2.0/24",))]
    have = [CurrentPeer(KEY_A, "10.1.0.2:51820", ("10.4.1.0/24",), 25),
            CurrentPeer(KEY_C, "10.1.0.9:51820", ("10.4.9.0/24",), 25)]
    plan = plan_peers(want, have)
    assert [p.node for p in plan.upsert] == ["n2"] and plan.remove == (KEY_C,)
    assert plan_peers(want[:1], have[:1]).empty
    moved = [CurrentPeer(KEY_A, "10.1.0.7:51820", ("10.4.1.0/24",), 25)]
    assert [p.node for p in plan_peers(want[:1], moved).upsert] == ["n1"]
    no_keepalive = [CurrentPeer(KEY_A, "10.1.0.2:51820", ("10.4.1.0/24",), None)]
    assert plan_peers(want[:1], no_keepalive).upsert


def test_check_remotes_refuses_overlaps_duplicates_and_shared_ports() -> None:
    local = LocalSide("a", "n", ("10.16.0.0/16",))
    check_remotes(local, [Remote("b", ("10.17.0.0/16",), port=51821), Remote("c", ("10.18.0.0/16",), port=51822)])
    with pytest.raises(MeshConfigError, match=re.escape("overlap: a 10.16.0.0/16 and b 10.16.4.0/24")):
        check_remotes(local, [Remote("b", ("10.16.4.0/24",))])
    with pytest.raises(MeshConfigError, match="overlap"):
        check_remotes(local, [Remote("b", ("10.17.0.0/16",), port=1), Remote("c", ("10.17.128.0/17",), port=2)])
    with pytest.raises(MeshConfigError, match="own listen port"):
        check_remotes(local, [Remote("b", ("10.17.0.0/16",)), Remote("c", ("10.18.0.0/16",))])
    with pytest.raises(MeshConfigError, match="distinct"):
        check_remotes(local, [Remote("a", ("10.17.0.0/16",))])


def test_semaphore_wireguard_config_reads_as_is() -> None:
    cfg = config.parse({
        "local": {"name": "c1", "kubeConfigPath": ""},
        "remotes": [{"name": "c2", "remoteAPIURL": "https://lb.c2", "remoteCAURL": "https://ca.c2",
                     "remoteSATokenPath": "/t", "kubeConfigPath": "", "podSubnet": "10.4.0.0/16",
                     "wgDeviceMTU": 1380, "wgListenPort": 51821, "resyncPeriod": "0"}]})
    assert cfg.local_name == "c1"
    (r,) = cfg.remotes
    assert (r.remote.name, r.remote.pod_subnets, r.remote.mtu, r.remote.port) == ("c2", ("10.4.0.0/16",), 1380, 51821)
    assert (r.api_url, r.ca_url, r.token_path) == ("https://lb.c2", "https://ca.c2", "/t")


@pytest.mark.parametrize(("data", "message"), [
    ({}, "local"),
    ({"local": {"name": "c1"}, "remotes": []}, "no remotes"),
    ({"local": {"name": "c1"}, "remotes": [{"name": "c2", "kubeConfigPath": "/k"}]}, "podSubnet"),
    ({"local": {"name": "c1"}, "remotes": [{"name": "c2", "podSubnet": "10.4.0.0/16"}]}, "kubeConfigPath"),
    ({"local": {"name": "c1"}, "remotes": [{"name": "c2", "podSubnet": "10.4.0.0/16", "kubeConfigPath": "/k",
                                            "wgListenPort": "x"}]}, "wgListenPort"),
])
def test_bad_config_says_what_to_fix(data: Any, message: str) -> None:
    with pytest.raises(MeshConfigError, match=message):
        config.parse(data)


def test_keys_are_0600_and_reused(tmp_path: Path) -> None:
    first = keys.load_or_create(tmp_path / "k", "wireguard.b")
    path = tmp_path / "k" / "wireguard.b.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = keys.load_or_create(tmp_path / "k", "wireguard.b")
    assert again == first and first.private not in repr(first)
    assert keys.load_or_create(tmp_path / "k", "wireguard.c").public != first.public
    path.write_text("garbage")
    with pytest.raises(keys.KeyError_, match="remove it"):
        keys.load_or_create(tmp_path / "k", "wireguard.b")


DUMP = (f"PRIVATE\t{KEY_A}\t51821\toff\n"
        f"{KEY_B}\t(none)\t10.1.0.3:51820\t10.4.2.0/24\t1700000000\t1200\t3400\t25\n"
        f"{KEY_C}\t(none)\t(none)\t10.4.3.0/24\t0\t0\t0\t25\n")


def test_parse_dump_and_metrics() -> None:
    st = parse_dump("wireguard.b", DUMP)
    assert st is not None and st.listen_port == 51821 and len(st.peers) == 2
    assert st.up(1700000060) and not st.up(1700000000 + 1000)
    assert "PRIVATE" not in repr(st)
    metrics = MeshMetrics()
    metrics.observe([("b", st)], 1700000060)
    assert metrics.registry.get_sample_value("semaphore_wg_peer_receive_bytes_total",
                                             {"device": "wireguard.b", "public_key": KEY_B}) == 1200
    assert metrics.registry.get_sample_value("tether_mesh_remote_up", {"remote": "b"}) == 1
    assert parse_dump("x", "") is None


def test_node_underlay_filter_lets_only_mesh_udp_between_node_addresses() -> None:
    a, b = ClusterNetwork.netns(1), ClusterNetwork.netns(2)
    script = underlay.node_filter(a, b)
    assert f'iifname "ul-2" ip saddr {b.fabric_cidr} ip daddr {a.fabric_cidr} udp dport 51820-51851' in script
    assert 'iifname "ul-2" counter drop' in script and 'oifname "ul-2" counter drop' in script
    assert str(a.pod_cidr) not in script and str(b.service_cidr) not in script
    assert underlay.mesh_port(b) == 51822


def test_overlapping_pod_ranges_are_refused() -> None:
    a, b = ClusterNetwork.netns(1), ClusterNetwork.netns(2)
    underlay.check_pod_ranges([a, b])
    with pytest.raises(NetnsError, match="cannot be meshed"):
        underlay.check_pod_ranges([a, b], {2: [a.pod_cidr.subnets(new_prefix=24).__next__()]})


def test_mesh_verdict_for_the_hub_condition() -> None:
    from tether.connect.mesh.status import DeviceStatus, PeerStatus, mesh_verdict

    fresh = DeviceStatus("wg.b.1", 51821, (PeerStatus(KEY_A, "10.1.0.2:51821", "10.4.1.0/24", 1000, 1, 1),))
    stale = DeviceStatus("wg.b.2", 51821, (PeerStatus(KEY_B, "10.1.0.3:51821", "10.4.2.0/24", 100, 1, 1),))
    never = DeviceStatus("wg.b.3", 51821, ())
    assert mesh_verdict("b", [fresh], 1010).status == "True"
    degraded = mesh_verdict("b", [fresh, stale], 1010)
    assert (degraded.status, degraded.reason) == ("False", "MeshDegraded") and "wg.b.2" in degraded.message
    assert mesh_verdict("b", [stale, never], 1010).reason == "MeshDown"
    assert mesh_verdict("b", [], 1010).reason == "MeshDown"
