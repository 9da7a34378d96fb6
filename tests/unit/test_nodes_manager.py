"""Node shapes (pure), and the node manager and scheduler driven step by step on a real store."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.local.errors import ApiError
from tether.local.network import ClusterNetwork
from tether.local.nodes import ippool_crd, shape
from tether.local.nodes.ipam import NoAddress, PodAddresses
from tether.local.nodes.manager import HEARTBEAT_S, LEASE_RENEW_S, NodeManager
from tether.local.nodes.scheduler import Scheduler, bind
from tether.local.operations import Operations, WriteOptions
from tether.local.resources import Registry
from tether.local.store import Store

Obj = dict[str, Any]
SEED = shape.NodeSeed(name="c1-node-1", index=1, cluster="c1", internal_ip="127.16.2.1", pod_cidr="127.16.2.0/24")
ADMIN = WriteOptions(manager="kubectl")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> str:
        return f"2026-01-01T00:{int(self.now) // 60 % 60:02d}:{int(self.now) % 60:02d}Z"


@pytest.fixture
def ops(tmp_path: Path) -> Iterator[Operations]:
    store = Store(tmp_path / "state.db")
    operations = Operations(store, Registry.with_builtins())
    namespaces = operations.registry.lookup("", "v1", "namespaces")
    assert namespaces is not None
    for name in ("default", "kube-node-lease"):
        operations.create(namespaces, "", {"metadata": {"name": name}}, ADMIN)
    yield operations
    store.close()


def rt(ops: Operations, group: str, version: str, plural: str) -> Any:
    found = ops.registry.lookup(group, version, plural)
    assert found is not None
    return found


# shapes ------------------------------------------------------------------------------------


def test_new_node_is_initialised_like_kwok() -> None:
    node = shape.new_node(SEED, "2026-01-01T00:00:00Z")
    assert node["metadata"]["labels"]["topology.kubernetes.io/zone"] == "c1-zone-1"
    assert node["metadata"]["labels"]["topology.kubernetes.io/region"] == "c1-region"
    assert node["spec"] == {"podCIDR": "127.16.2.0/24", "podCIDRs": ["127.16.2.0/24"]}
    status = node["status"]
    assert {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]} == {
        "Ready": ("True", "KubeletReady"), "MemoryPressure": ("False", "KubeletHasSufficientMemory"),
        "DiskPressure": ("False", "KubeletHasNoDiskPressure"), "PIDPressure": ("False", "KubeletHasSufficientPID"),
        "NetworkUnavailable": ("False", "RouteCreated")}
    assert status["addresses"] == [{"type": "InternalIP", "address": "127.16.2.1"},
                                   {"type": "Hostname", "address": "c1-node-1"}]
    assert status["nodeInfo"]["kubeletVersion"] == "v1.37.0"
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}


def test_spec_update_only_fills_what_is_missing() -> None:
    node = shape.new_node(SEED, "t0")
    assert shape.spec_update(node, SEED) is None
    node["metadata"]["labels"]["rack"] = "0"
    node["metadata"]["labels"]["topology.kubernetes.io/zone"] = "mine"
    node["spec"].update(unschedulable=True, taints=[{"key": "k", "effect": "NoSchedule"}])
    del node["metadata"]["labels"]["kubernetes.io/os"]
    fixed = shape.spec_update(node, SEED)
    assert fixed is not None
    assert fixed["metadata"]["labels"]["kubernetes.io/os"] == "linux"
    assert fixed["metadata"]["labels"]["rack"] == "0"
    assert fixed["metadata"]["labels"]["topology.kubernetes.io/zone"] == "mine"
    assert fixed["spec"]["unschedulable"] is True and fixed["spec"]["taints"]


def test_status_update_heartbeats_only_when_due_and_keeps_user_values() -> None:
    status = shape.new_node(SEED, "t0")["status"]
    assert shape.status_update(status, SEED, "t1", heartbeat=False) is None
    beat = shape.status_update(status, SEED, "t1", heartbeat=True)
    assert beat is not None
    times = {c["type"]: (c["lastHeartbeatTime"], c["lastTransitionTime"]) for c in beat["conditions"]}
    assert times["Ready"] == ("t1", "t0")
    assert times["NetworkUnavailable"] == ("t0", "t0")
    status["capacity"]["pods"] = "3"
    status["conditions"][-1]["status"] = "Unknown"  # e.g. marked by a node lifecycle controller
    fixed = shape.status_update(status, SEED, "t2", heartbeat=False)
    assert fixed is not None and fixed["capacity"]["pods"] == "3"
    ready = next(c for c in fixed["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["lastTransitionTime"]) == ("True", "t2")


# the manager -------------------------------------------------------------------------------


def test_manager_registers_nodes_leases_and_heartbeats(ops: Operations) -> None:
    clock = Clock()
    manager = NodeManager(ops, ClusterNetwork.rootless(0), "c1", 3, clock=clock, wall=clock.wall)
    for name in manager.configured:
        manager._sync(name)
    nodes = {n["metadata"]["name"]: n for n in ops.store.list_objects("/nodes")}
    assert sorted(nodes) == ["c1-node-0", "c1-node-1", "c1-node-2"]
    assert nodes["c1-node-2"]["spec"]["podCIDR"] == "127.16.3.0/24"
    lease = ops.store.get("coordination.k8s.io/leases", "kube-node-lease", "c1-node-0")
    assert lease is not None and lease["spec"]["holderIdentity"] == "c1-node-0"
    assert lease["metadata"]["ownerReferences"][0]["uid"] == nodes["c1-node-0"]["metadata"]["uid"]
    revision = ops.store.revision
    manager._sync("c1-node-0")  # nothing is due: nothing is written
    assert ops.store.revision == revision
    clock.now += LEASE_RENEW_S
    manager._sync("c1-node-0")  # the lease only
    assert ops.store.revision == revision + 1
    clock.now += HEARTBEAT_S
    manager._sync("c1-node-0")  # lease and node status
    assert ops.store.revision == revision + 3
    node = ops.store.get("/nodes", "", "c1-node-0")
    assert node is not None
    assert shape.ready_heartbeat(node["status"]) == clock.wall()


def test_manager_keeps_user_changes_and_adopts_user_nodes(ops: Operations) -> None:
    manager = NodeManager(ops, ClusterNetwork.rootless(0), "c1", 1, clock=Clock())
    manager._sync("c1-node-0")
    nodes = rt(ops, "", "v1", "nodes")
    node = copy.deepcopy(ops.get(nodes, "", "c1-node-0"))
    node["metadata"]["labels"]["rack"] = "0"
    node["spec"].update(unschedulable=True, taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}])
    ops.update(nodes, "", "c1-node-0", node, ADMIN)
    manager._sync("c1-node-0")
    kept = ops.get(nodes, "", "c1-node-0")
    assert kept["metadata"]["labels"]["rack"] == "0" and kept["spec"]["unschedulable"] is True
    assert kept["spec"]["taints"] == [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    ops.create(nodes, "", {"metadata": {"name": "extra"}}, ADMIN)
    manager._sync("extra")
    extra = ops.get(nodes, "", "extra")
    assert extra["spec"]["podCIDR"] == "127.16.2.0/24"  # the next free slot after the configured one
    assert extra["status"]["addresses"][0] == {"type": "InternalIP", "address": "127.16.2.1"}
    assert extra["metadata"]["labels"]["kubernetes.io/hostname"] == "extra"
    ops.delete(nodes, "", "c1-node-0", {}, ADMIN)
    manager._sync("c1-node-0")  # a configured node comes back, as a kubelet re-registers
    assert ops.find(nodes, "", "c1-node-0") is not None


# the scheduler -----------------------------------------------------------------------------


def make_pod(ops: Operations, name: str, **spec: Any) -> Obj:
    body = {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "nginx"}], **spec}}
    return ops.create(rt(ops, "", "v1", "pods"), "default", body, ADMIN)


async def test_scheduler_binds_spreads_and_reports(ops: Operations) -> None:
    manager = NodeManager(ops, ClusterNetwork.rootless(0), "c1", 2, clock=Clock())
    for name in manager.configured:
        manager._sync(name)
    scheduler = Scheduler(ops)
    for i in range(4):
        make_pod(ops, f"p{i}")
        await scheduler._reconcile(("default", f"p{i}"))
    placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in ops.store.list_objects("/pods")}
    assert placed == {"p0": "c1-node-0", "p1": "c1-node-1", "p2": "c1-node-0", "p3": "c1-node-1"}
    p0 = ops.store.get("/pods", "default", "p0")
    assert p0 is not None
    assert [(c["type"], c["status"]) for c in p0["status"]["conditions"]] == [("PodScheduled", "True")]
    make_pod(ops, "picky", nodeSelector={"rack": "9"})
    await scheduler._reconcile(("default", "picky"))
    picky = ops.store.get("/pods", "default", "picky")
    assert picky is not None and not picky["spec"].get("nodeName")
    condition = picky["status"]["conditions"][0]
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert condition["message"] == "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
    warnings = [e for e in ops.store.list_objects("/events", "default") if e["reason"] == "FailedScheduling"]
    assert len(warnings) == 1 and warnings[0]["involvedObject"]["name"] == "picky"
    await scheduler._reconcile(("default", "picky"))  # the same verdict is not reported twice
    assert len([e for e in ops.store.list_objects("/events", "default") if e["reason"] == "FailedScheduling"]) == 1
    with pytest.raises(ApiError, match="already assigned"):
        bind(ops, "default", "p0", "c1-node-1")


async def test_ipam_for_scheduled_pods_follows_rack_pools(ops: Operations) -> None:
    """Calico's per-rack pools example end to end in-process: label racks, apply pools, schedule, allocate."""
    ippool_crd.ensure_crd(ops)
    ops.admission.append(ippool_crd.admission(ops))
    manager = NodeManager(ops, ClusterNetwork.rootless(0), "c1", 4, clock=Clock())
    for name in manager.configured:
        manager._sync(name)
    nodes = rt(ops, "", "v1", "nodes")
    for i in range(4):
        node = copy.deepcopy(ops.get(nodes, "", f"c1-node-{i}"))
        node["metadata"]["labels"]["rack"] = str(i // 2)
        ops.update(nodes, "", f"c1-node-{i}", node, ADMIN)
    pools = rt(ops, "projectcalico.org", "v3", "ippools")
    for rack in ("0", "1"):
        ops.create(pools, "", {"metadata": {"name": f"rack-{rack}-ippool"},
                               "spec": {"cidr": f"192.168.{rack}.0/24", "ipipMode": "Always",
                                        "natOutgoing": True, "nodeSelector": f'rack == "{rack}"'}}, ADMIN)
    with pytest.raises(ApiError, match="overlaps"):
        ops.create(pools, "", {"metadata": {"name": "default-ipv4-ippool"}, "spec": {"cidr": "192.168.0.0/16"}},
                   ADMIN)
    stored = ops.get(pools, "", "rack-0-ippool")
    assert stored["spec"]["blockSize"] == 26 and stored["spec"]["disabled"] is False  # schema defaults
    scheduler = Scheduler(ops)
    ipam = PodAddresses(ops.store)
    got: dict[str, str] = {}
    for i in range(5):
        make_pod(ops, f"nginx-{i}")
        await scheduler._reconcile(("default", f"nginx-{i}"))
        pod = ops.get(rt(ops, "", "v1", "pods"), "default", f"nginx-{i}")
        got[pod["metadata"]["name"]] = ipam.allocate(pod, ops.get(nodes, "", pod["spec"]["nodeName"]))
    assert got == {"nginx-0": "192.168.0.1", "nginx-1": "192.168.0.64", "nginx-2": "192.168.1.1",
                   "nginx-3": "192.168.1.64", "nginx-4": "192.168.0.2"}
    ops.create(nodes, "", {"metadata": {"name": "rackless"}}, ADMIN)
    manager._sync("rackless")
    with pytest.raises(NoAddress, match='no configured Calico pools for node "rackless"'):
        ipam.allocate(make_pod(ops, "stray"), ops.get(nodes, "", "rackless"))


def test_lease_goes_with_its_node(ops: Operations) -> None:
    """Leases carry an ownerReference to their Node, so the garbage collector removes them."""
    manager = NodeManager(ops, ClusterNetwork.rootless(0), "c1", 1, clock=Clock())
    manager._sync("c1-node-0")
    lease = ops.store.get("coordination.k8s.io/leases", "kube-node-lease", "c1-node-0")
    node = ops.store.get("/nodes", "", "c1-node-0")
    assert lease is not None and node is not None
    assert lease["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "c1-node-0", "uid": node["metadata"]["uid"]}]


async def test_binding_subresource_handler(ops: Operations) -> None:
    from typing import cast

    from tether.local.nodes.scheduler import binding_handler
    from tether.net.httpserver import Request, Response

    manager = NodeManager(ops, ClusterNetwork.rootless(0), "c1", 1, clock=Clock())
    manager._sync("c1-node-0")
    make_pod(ops, "manual", schedulerName="my-scheduler")
    body = b'{"apiVersion":"v1","kind":"Binding","metadata":{"name":"manual"},"target":{"kind":"Node","name":"c1-node-0"}}'
    request = Request("POST", "", "", {}, {"content-type": "application/json"}, body,
                      cast(Any, None), cast(Any, None))
    reply = await binding_handler(ops)(request, rt(ops, "", "v1", "pods"), "default", "manual", "")
    assert isinstance(reply, Response) and reply.status == 201
    bound = ops.get(rt(ops, "", "v1", "pods"), "default", "manual")
    assert bound["spec"]["nodeName"] == "c1-node-0"
    assert bound["status"]["conditions"][0]["type"] == "PodScheduled"
    with pytest.raises(ApiError, match="already assigned"):
        await binding_handler(ops)(request, rt(ops, "", "v1", "pods"), "default", "manual", "")
