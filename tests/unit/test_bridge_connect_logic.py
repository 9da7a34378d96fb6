"""`tether connect`'s pure parts: address allocation, names, the hosts-file block, DNS answers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.bridge import hostsfile
from tether.bridge.localdns import Table, Zone, local_answer
from tether.bridge.mapping import (
    Allocation,
    Naming,
    ServiceInfo,
    ServiceKey,
    allocate,
    block,
    host_names,
    mark_unusable,
)
from tether.net import dnswire as w


def svc(name: str, ns: str = "shop", ports: tuple[tuple[str, int], ...] = (("TCP", 80),), cluster: str = "c1"
        ) -> ServiceInfo:
    return ServiceInfo(ServiceKey(cluster, ns, name), "10.0.0.1", ports)


def test_blocks_start_where_bridge_to_kubernetes_starts_and_do_not_overlap() -> None:
    first, second = block(0), block(1)
    assert first[0] == "127.1.1.1" and "127.1.1.0" not in first and "127.1.1.255" not in first
    assert second[0] == "127.1.9.1" and not set(first) & set(second)
    with pytest.raises(ValueError):
        block(40)


def test_allocation_keeps_addresses_and_reuses_freed_ones() -> None:
    a = allocate(["c1"], [svc("b"), svc("a")], Allocation())
    assert a.assigned[ServiceKey("c1", "shop", "a")] == "127.1.1.1"
    assert a.assigned[ServiceKey("c1", "shop", "b")] == "127.1.1.2"
    later = allocate(["c1"], [svc("b"), svc("0-new")], a)
    assert later.assigned[ServiceKey("c1", "shop", "b")] == "127.1.1.2"  # kept though `a` went
    assert later.assigned[ServiceKey("c1", "shop", "0-new")] == "127.1.1.1"
    two = allocate(["c1", "c2"], [svc("a"), svc("a", cluster="c2")], Allocation())
    assert two.assigned[ServiceKey("c2", "shop", "a")] == "127.1.9.1"


def test_a_busy_address_is_skipped() -> None:
    a = allocate(["c1"], [svc("a")], Allocation())
    again = allocate(["c1"], [svc("a")], mark_unusable(a, "127.1.1.1"))
    assert again.assigned[ServiceKey("c1", "shop", "a")] == "127.1.1.2"


@pytest.mark.parametrize(("key", "multi", "names"), [
    (ServiceKey("c1", "shop", "db"), False, ("db", "db.shop", "db.shop.svc", "db.shop.svc.cluster.local")),
    (ServiceKey("c1", "other", "db"), False, ("db.other", "db.other.svc", "db.other.svc.cluster.local")),
    (ServiceKey("c2", "shop", "db"), True, ("db.shop.c2",)),
    (ServiceKey("c1", "shop", "db"), True, ("db", "db.shop", "db.shop.svc", "db.shop.svc.cluster.local",
                                            "db.shop.c1")),
    (ServiceKey("c2", "shop", "db"), False, ()),  # a second cluster without multi naming: no names
    (ServiceKey("c1", "shop", "Bad_Name"), False, ()),
    (ServiceKey("c2_x", "shop", "db"), True, ()),  # the cluster's name is not a label
])
def test_host_names(key: ServiceKey, multi: bool, names: tuple[str, ...]) -> None:
    assert host_names(key, Naming("c1", "shop", multi)) == names


@pytest.mark.parametrize(("spec", "mapped"), [
    ({"clusterIP": "10.0.0.5", "ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]},
     (("TCP", 80), ("UDP", 53))),
    ({"clusterIP": "None", "ports": [{"port": 80}]}, None),  # headless
    ({"type": "ExternalName", "externalName": "x.example"}, None),
    ({"clusterIP": "10.0.0.5", "ports": [{"port": 9, "protocol": "SCTP"}]}, None),
])
def test_service_info(spec: dict[str, object], mapped: tuple[tuple[str, int], ...] | None) -> None:
    info = ServiceInfo.of("c1", {"metadata": {"name": "s", "namespace": "n"}, "spec": spec})
    assert (info.ports if info else None) == mapped


def test_hosts_block_round_trip_keeps_every_other_byte() -> None:
    original = "127.0.0.1 localhost\r\n# mine\n\n10.0.0.1 db"
    block = hostsfile.render_block(7, [("127.1.1.1", ("a", "a.ns")), ("127.1.1.2", ())])
    added = hostsfile.with_block(original, block)
    assert "127.1.1.1\ta a.ns\n" in added and "127.1.1.2" not in added
    assert hostsfile.owners(added) == [7]
    assert hostsfile.strip_blocks(added, lambda pid: pid == 7) == original
    assert hostsfile.strip_blocks(added, lambda pid: False) == added


def test_unterminated_block_stops_at_the_users_lines() -> None:
    text = "a\n# BEGIN tether connect pid=3 (x)\n127.1.1.1\tq\n10.0.0.1 mine\n"
    assert hostsfile.strip_blocks(text, lambda pid: True) == "a\n10.0.0.1 mine\n"


def test_update_drops_dead_owners_only(tmp_path: Path) -> None:
    path = tmp_path / "hosts"
    path.write_text("127.0.0.1 localhost\n")
    hostsfile.update(path, 10, hostsfile.render_block(10, [("127.1.1.1", ("a",))]), lambda pid: True)
    hostsfile.update(path, 11, hostsfile.render_block(11, [("127.1.1.2", ("b",))]), lambda pid: True)
    assert hostsfile.owners(path.read_text()) == [10, 11]
    hostsfile.update(path, 11, hostsfile.render_block(11, [("127.1.1.2", ("b",))]), lambda pid: pid != 10)
    assert hostsfile.owners(path.read_text()) == [11]
    hostsfile.update(path, 11, "", lambda pid: True)
    assert path.read_text() == "127.0.0.1 localhost\n"


def _ask(name: str, qtype: int = w.TYPE_A) -> w.Message:
    return w.parse_message(w.make_query(1, name, qtype))


async def _never(query: bytes) -> bytes:
    raise AssertionError("not forwarded")


@pytest.mark.parametrize(("name", "qtype", "rcode", "address", "forwarded"), [
    ("db", w.TYPE_A, w.RCODE_NOERROR, "127.1.1.1", False),
    ("DB.shop.svc.cluster.local", w.TYPE_A, w.RCODE_NOERROR, "127.1.1.1", False),
    ("db", w.TYPE_AAAA, w.RCODE_NOERROR, None, False),
    ("pod-1.web.shop.svc.cluster.local", w.TYPE_A, None, None, True),
    ("example.com", w.TYPE_A, w.RCODE_REFUSED, None, False),
])
def test_dns_answers(name: str, qtype: int, rcode: int | None, address: str | None, forwarded: bool) -> None:
    table = Table({"db": "127.1.1.1", "db.shop.svc.cluster.local": "127.1.1.1"}, (Zone("cluster.local", _never),))
    reply = local_answer(_ask(name, qtype), table)
    if forwarded:
        assert reply is None
        return
    assert reply is not None and reply.rcode == rcode
    got = [r.rdata.address for r in reply.answers if isinstance(r.rdata, w.A)]
    assert got == ([address] if address else [])


def test_cluster_ranges_from_nodes_servicecidrs_and_seen_addresses() -> None:
    from tether.bridge.routes import cluster_ranges

    nodes = [{"spec": {"podCIDR": "10.16.1.0/24", "podCIDRs": ["10.16.1.0/24"]}}, {"spec": {"podCIDR": "10.16.2.0/24"}}]
    cidrs = [{"spec": {"cidrs": ["10.96.0.0/16", "fd00::/108"]}}]
    got = cluster_ranges(nodes, cidrs, ["10.96.0.10", "10.97.0.5", "127.64.0.1", "None"])
    assert got == ["10.16.1.0/24", "10.16.2.0/24", "10.96.0.0/16", "10.97.0.5/32"]  # loopback and IPv6 left out


def test_nft_table_redirects_tcp_and_each_udp_port_and_guards_the_rest() -> None:
    import shutil
    import subprocess

    from tether.bridge.routes import UdpRedirect, render_table

    script = render_table("tether-bridge-1", ["10.16.0.0/16", "10.96.0.10/32"], 40000,
                          [UdpRedirect("10.96.0.10", 53, 40001)])
    assert "ip daddr 10.96.0.10 udp dport 53 redirect to :40001" in script
    assert "ip daddr @cluster meta l4proto tcp redirect to :40000" in script
    assert "ip daddr @cluster drop" in script
    assert script.index("delete table ip tether-bridge-1") < script.index("table ip tether-bridge-1 {\n")
    nft = shutil.which("nft")
    if nft and os.geteuid() == 0:  # the kernel's own parser, without loading anything (-c)
        done = subprocess.run([nft, "-c", "-f", "-"], input=script.replace(
            "table ip tether-bridge-1 {}\ndelete table ip tether-bridge-1\n", ""), text=True, capture_output=True)
        assert done.returncode == 0, done.stderr
