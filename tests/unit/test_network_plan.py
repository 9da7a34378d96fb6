"""The rootless address plan (two blocks of 48 indexes) and claiming an index per mode."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from tether.local.network import (
    MAX_CLUSTERS,
    MAX_NETNS_CLUSTERS,
    NETNS,
    ROOTLESS,
    ClusterNetwork,
    IndexClaim,
    NetworkError,
    claim_index,
    free_indexes,
    max_clusters,
    try_claim,
)

RESERVED = [ipaddress.IPv4Network("127.0.0.0/16"), ipaddress.IPv4Network("127.208.0.0/12"),
            ipaddress.IPv4Network("127.224.0.0/11")]


def test_limits_per_mode() -> None:
    assert (MAX_CLUSTERS, MAX_NETNS_CLUSTERS) == (96, 32)
    assert max_clusters(ROOTLESS) == 96
    assert max_clusters(NETNS) == 32


def test_no_two_rootless_indexes_share_an_address_and_none_touches_reserved_ranges() -> None:
    ranges: list[tuple[int, ipaddress.IPv4Network]] = []
    for i in range(MAX_CLUSTERS):
        net = ClusterNetwork.rootless(i)
        assert net.pod_cidr.prefixlen == net.service_cidr.prefixlen == 16
        ranges += [(i, net.pod_cidr), (i, net.service_cidr)]
    for x, (i, first) in enumerate(ranges):
        assert first.is_loopback, first
        assert not any(first.overlaps(r) for r in RESERVED), (i, first)
        for j, second in ranges[x + 1:]:
            assert not first.overlaps(second), (i, first, j, second)


def test_first_block_keeps_the_old_addresses() -> None:
    # what clusters started before the second block existed hold in their stores
    for i in range(48):
        net = ClusterNetwork.rootless(i)
        assert str(net.pod_cidr) == f"127.{16 + i}.0.0/16"
        assert str(net.service_cidr) == f"127.{64 + i}.0.0/16"
    zero = ClusterNetwork.rootless(0)
    assert (str(zero.pod_cidr), str(zero.service_cidr)) == ("127.16.0.0/16", "127.64.0.0/16")
    assert (zero.node_ip(0), zero.api_service_ip, zero.dns_service_ip) == ("127.16.1.1", "127.64.0.1", "127.64.0.10")
    last_of_old = ClusterNetwork.rootless(31)
    assert (str(last_of_old.pod_cidr), str(last_of_old.service_cidr)) == ("127.47.0.0/16", "127.95.0.0/16")
    end = ClusterNetwork.rootless(47)
    assert (str(end.pod_cidr), str(end.service_cidr)) == ("127.63.0.0/16", "127.111.0.0/16")


def test_second_block() -> None:
    net = ClusterNetwork.rootless(48)
    assert (str(net.pod_cidr), str(net.service_cidr)) == ("127.112.0.0/16", "127.160.0.0/16")
    assert (net.node_ip(0), str(net.node_pod_cidr(1)), net.dns_service_ip) == (
        "127.112.1.1", "127.112.2.0/24", "127.160.0.10")
    last = ClusterNetwork.rootless(95)
    assert (str(last.pod_cidr), str(last.service_cidr)) == ("127.159.0.0/16", "127.207.0.0/16")
    assert ClusterNetwork.of(60, ROOTLESS) == ClusterNetwork.rootless(60)


@pytest.mark.parametrize(("mode", "index", "message"), [
    (ROOTLESS, 96, "cluster index 96 is outside 0..95 (rootless mode has 96 address ranges)"),
    (ROOTLESS, -1, "cluster index -1 is outside 0..95"),
    (NETNS, 32, "cluster index 32 is outside 0..31 (netns mode has 32 address ranges)"),
    (NETNS, 48, "outside 0..31"),
])
def test_out_of_range_indexes(mode: str, index: int, message: str) -> None:
    with pytest.raises(NetworkError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ClusterNetwork.of(index, mode)


def test_netns_claims_stay_below_32_while_rootless_claims_go_on(tmp_path: Path) -> None:
    held: list[IndexClaim] = []
    try:
        for _ in range(MAX_NETNS_CLUSTERS):
            held.append(claim_index(None, tmp_path, mode=NETNS))
        assert sorted(c.index for c in held) == list(range(32))
        with pytest.raises(NetworkError) as failed:
            claim_index(None, tmp_path, mode=NETNS)
        message = str(failed.value)
        assert "all 32 netns-mode local cluster address ranges (indexes 0..31) are in use" in message
        assert "`tether local down`" in message and "without --netns" in message
        with pytest.raises(NetworkError):
            claim_index(40, tmp_path, mode=NETNS)  # a preferred index the mode cannot use is ignored
        rootless = claim_index(None, tmp_path)
        held.append(rootless)
        assert rootless.index == 32
        assert free_indexes(NETNS, tmp_path) == []
        assert free_indexes(ROOTLESS, tmp_path) == list(range(33, 96))
    finally:
        for claim in held:
            claim.release()


def test_preferred_index_is_kept_per_mode(tmp_path: Path) -> None:
    restarted = claim_index(70, tmp_path)  # a rootless cluster's persisted second-block index
    assert restarted.index == 70
    netns = claim_index(5, tmp_path, mode=NETNS)  # a netns cluster's persisted index
    assert netns.index == 5
    moved = claim_index(70, tmp_path, mode=NETNS)  # 70 is no netns index: the lowest free one
    assert moved.index == 0
    for claim in (restarted, netns, moved):
        claim.release()


def test_rootless_claims_fill_all_96_then_fail(tmp_path: Path) -> None:
    held = [claim_index(None, tmp_path) for _ in range(MAX_CLUSTERS)]
    try:
        assert [c.index for c in held] == list(range(32, 96)) + list(range(32))
        assert try_claim(0, tmp_path) is None
        with pytest.raises(NetworkError, match=r"all 96 rootless-mode .* \(indexes 0\.\.95\) .* `tether local down`$"):
            claim_index(None, tmp_path)
    finally:
        for claim in held:
            claim.release()
    assert len(free_indexes(lock_dir=tmp_path)) == 96


def test_rootless_clusters_leave_the_netns_indexes_free(tmp_path: Path) -> None:
    held = [claim_index(None, tmp_path) for _ in range(MAX_CLUSTERS - MAX_NETNS_CLUSTERS)]
    try:
        assert sorted(c.index for c in held) == list(range(MAX_NETNS_CLUSTERS, MAX_CLUSTERS))
        assert free_indexes(NETNS, tmp_path) == list(range(MAX_NETNS_CLUSTERS))
        netns = claim_index(None, tmp_path, mode=NETNS)  # still possible with 64 rootless running
        held.append(netns)
        assert netns.index == 0
        overflow = claim_index(None, tmp_path)  # only then does a rootless cluster take a low one
        held.append(overflow)
        assert overflow.index == 1
    finally:
        for claim in held:
            claim.release()
