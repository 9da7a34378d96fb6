"""ClusterIP and NodePort allocation: the pure plan and the admission plugin on real Operations."""

from __future__ import annotations

import ipaddress
import random
from pathlib import Path
from typing import Any

import pytest

from tether.local.errors import ApiError
from tether.local.network import ClusterNetwork
from tether.local.operations import Operations, WriteOptions
from tether.local.resources import Registry
from tether.local.services.allocation import Pools, ServiceAllocator, plan_allocation
from tether.local.store import Store

POOLS = Pools(cidr=ipaddress.IPv4Network("127.64.0.0/16"), reserved=frozenset({"127.64.0.1", "127.64.0.10"}))


def plan(spec: dict[str, Any], current: dict[str, Any] | None = None, *, ips: set[str] | None = None,
         ports: set[int] | None = None) -> Any:
    return plan_allocation(spec, current, used_ips=ips or set(), used_ports=ports or set(), pools=POOLS,
                           rng=random.Random(1))


def test_allocates_an_ip_in_range_not_reserved() -> None:
    result = plan({"type": "ClusterIP", "ports": [{"port": 80}]})
    assert not result.causes
    assert result.cluster_ip is not None
    addr = ipaddress.IPv4Address(result.cluster_ip)
    assert addr in POOLS.cidr and result.cluster_ip not in POOLS.reserved
    assert result.node_ports == (None,)


def test_requested_ip_honoured_or_rejected() -> None:
    assert plan({"clusterIP": "127.64.3.4"}).cluster_ip == "127.64.3.4"
    assert plan({"clusterIPs": ["127.64.3.4"]}).cluster_ip == "127.64.3.4"
    taken = plan({"clusterIP": "127.64.3.4"}, ips={"127.64.3.4"})
    assert "provided IP is already allocated" in taken.causes[0].message
    assert taken.causes[0].field == "spec.clusterIPs"
    outside = plan({"clusterIP": "10.0.0.1"})
    assert "provided IP is not in the valid range" in outside.causes[0].message
    assert "must be a valid IP" in plan({"clusterIP": "nope"}).causes[0].message
    # the reserved API address may be requested (the `kubernetes` Service does)
    assert plan({"clusterIP": "127.64.0.1"}).cluster_ip == "127.64.0.1"


def test_headless_and_external_name() -> None:
    assert plan({"clusterIP": "None"}).cluster_ip == "None"
    assert plan({"type": "ExternalName", "externalName": "example.com"}).cluster_ip is None
    assert plan({"type": "NodePort", "clusterIP": "None", "ports": [{"port": 1}]}).causes


def test_random_allocation_skips_used() -> None:
    used = {str(ipaddress.IPv4Address(int(POOLS.cidr.network_address) + i)) for i in range(1, 65534)}
    free = "127.64.255.254"
    used.discard(free)
    assert plan({}, ips=used).cluster_ip == free
    used.add(free)
    assert "range is full" in plan({}, ips=used).causes[0].message


def test_update_keeps_and_protects_the_ip() -> None:
    old = {"type": "ClusterIP", "clusterIP": "127.64.0.7", "clusterIPs": ["127.64.0.7"]}
    assert plan({"type": "ClusterIP"}, old).cluster_ip == "127.64.0.7"  # left out: kept
    changed = plan({"type": "ClusterIP", "clusterIP": "127.64.0.8", "clusterIPs": ["127.64.0.7"]}, old)
    assert [c.message for c in changed.causes] == ['Invalid value: "127.64.0.8": field is immutable']
    assert changed.causes[0].field == "spec.clusterIP"


def test_node_ports() -> None:
    spec = {"type": "NodePort", "ports": [{"port": 80}, {"port": 81, "nodePort": 30081}]}
    result = plan(spec)
    assert not result.causes
    assert result.node_ports[1] == 30081
    assert result.node_ports[0] is not None and 30000 <= result.node_ports[0] <= 32767
    assert result.node_ports[0] != 30081
    taken = plan(spec, ports={30081})
    assert taken.causes[0].field == "spec.ports[1].nodePort"
    assert "provided port is already allocated" in taken.causes[0].message
    outside = plan({"type": "NodePort", "ports": [{"port": 80, "nodePort": 80}]})
    assert "not in the valid range" in outside.causes[0].message
    # an update keeps the ports it had, even when the new spec leaves them out
    old = {"type": "NodePort", "clusterIP": "127.64.0.9", "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30555}]}
    again = plan({"type": "NodePort", "ports": [{"port": 80, "protocol": "TCP"}]}, old, ports=set())
    assert again.node_ports == (30555,)
    # ClusterIP services drop node ports
    assert plan({"type": "ClusterIP", "ports": [{"port": 80, "nodePort": 30000}]}).node_ports == (None,)


# the plugin on real Operations --------------------------------------------------------------


@pytest.fixture
def ops(tmp_path: Path) -> Operations:
    store = Store(tmp_path / "state.db")
    registry = Registry.with_builtins()
    operations = Operations(store, registry)
    ns = registry.lookup("", "v1", "namespaces")
    assert ns is not None
    operations.create(ns, "", {"metadata": {"name": "default"}}, WriteOptions())
    operations.admission.append(ServiceAllocator(store, ClusterNetwork.rootless(0), seed=7))
    return operations


def svc(name: str, **spec: Any) -> dict[str, Any]:
    spec.setdefault("ports", [{"port": 80}])
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}


def test_admission_allocates_rejects_and_releases(ops: Operations) -> None:
    rt = ops.registry.lookup("", "v1", "services")
    assert rt is not None
    first = ops.create(rt, "default", svc("a", clusterIP="127.64.5.5"), WriteOptions())
    assert first["spec"]["clusterIPs"] == ["127.64.5.5"]
    with pytest.raises(ApiError) as err:
        ops.create(rt, "default", svc("b", clusterIP="127.64.5.5"), WriteOptions())
    assert err.value.code == 422 and "provided IP is already allocated" in err.value.message
    with pytest.raises(ApiError) as err:
        ops.update(rt, "default", "a", {**first, "spec": {**first["spec"], "clusterIP": "127.64.5.6",
                                                           "clusterIPs": ["127.64.5.6"]}}, WriteOptions())
    assert err.value.code == 422 and "field is immutable" in err.value.message
    ops.delete(rt, "default", "a", {}, WriteOptions())
    # released at once, even before the registry's repair loop sees the deletion
    assert ops.create(rt, "default", svc("b", clusterIP="127.64.5.5"), WriteOptions())["spec"]["clusterIP"] == "127.64.5.5"


def test_allocations_survive_a_restart(tmp_path: Path, ops: Operations) -> None:
    rt = ops.registry.lookup("", "v1", "services")
    assert rt is not None
    created = ops.create(rt, "default", svc("np", type="NodePort"), WriteOptions())
    node_port = created["spec"]["ports"][0]["nodePort"]
    ops.store.close()
    store = Store(tmp_path / "state.db")
    again = Operations(store, ops.registry)
    again.admission.append(ServiceAllocator(store, ClusterNetwork.rootless(0)))
    clash = svc("np2", type="NodePort", clusterIP=created["spec"]["clusterIP"])
    clash["spec"]["ports"][0]["nodePort"] = node_port
    with pytest.raises(ApiError) as err:
        again.create(rt, "default", clash, WriteOptions())
    messages = [c.message for c in err.value.causes]
    assert any("provided IP is already allocated" in m for m in messages)
    assert any("provided port is already allocated" in m for m in messages)
    store.close()
