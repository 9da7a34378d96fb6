"""Simulated nodes, Calico IPPools and the scheduler, through the real kubectl on a 4-node cluster."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_util import manifest, poll, root_conftest, unique

from tether.local.network import ClusterNetwork

pytestmark = pytest.mark.e2e

_root = root_conftest()
Clusters = Any

# Calico's per-rack pools example (pods on rack=0 nodes from one /24, rack=1 from the next), in the
# part of the cluster's pod range no node's podCIDR uses: a rootless cluster keeps only loopback
# addresses on this machine, so it refuses the example's own 192.168.0.0/24 and 192.168.1.0/24.
RACK_POOLS = """
apiVersion: projectcalico.org/v3
kind: IPPool
metadata:
  name: rack-0-ippool
spec:
  cidr: 127.{octet}.252.0/24
  ipipMode: Always
  natOutgoing: true
  nodeSelector: rack == "0"
---
apiVersion: projectcalico.org/v3
kind: IPPool
metadata:
  name: rack-1-ippool
spec:
  cidr: 127.{octet}.253.0/24
  ipipMode: Always
  natOutgoing: true
  nodeSelector: rack == "1"
"""


@pytest.fixture(scope="module")
def c1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    data_dir = tmp_path_factory.mktemp("nodes")
    result = _root.tether("local", "up", "--data-dir", str(data_dir), "--name", "c1", "--nodes", "4")
    assert result.returncode == 0, result.stdout + result.stderr
    state = json.loads((data_dir / "daemon.json").read_text())
    servers = {c["name"]: c["server"] for c in state["clusters"]}
    started = _root.Clusters(data_dir, data_dir / "kubeconfig", ["c1"], servers, tmp_path_factory.mktemp("cache"))
    try:
        yield started
    finally:
        _root.tether("local", "down", "--data-dir", str(data_dir))


@pytest.fixture
def ns(c1: Clusters) -> Iterator[str]:
    name = unique("nodes")
    c1.kubectl("create", "namespace", name)
    yield name
    c1.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


def ready_nodes(c: Clusters) -> list[list[str]]:
    rows = [line.split() for line in c.kubectl("get", "nodes", "-o", "wide", "--no-headers").stdout.splitlines()]
    return [r for r in rows if r[1] == "Ready"]


def run_pod(c: Clusters, ns: str, name: str, **spec: Any) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
           "spec": {"containers": [{"name": "app", "image": "nginx"}], **spec}}
    c.kubectl("create", "-f", "-", input=manifest(pod))


def pod_json(c: Clusters, ns: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = c.kubectl_json("get", "pod", name, "-n", ns)
    return result


def scheduled(c: Clusters, ns: str, name: str) -> dict[str, Any] | None:
    pod = pod_json(c, ns, name)
    conditions = {x["type"]: x for x in pod.get("status", {}).get("conditions", [])}
    return pod if "PodScheduled" in conditions else None


def _pods_octet(c1: Clusters) -> int:
    """The second octet of the cluster's pod range: its address index is claimed machine-wide."""
    network = json.loads((c1.data_dir / "clusters" / "c1" / "network.json").read_text())
    return ClusterNetwork.rootless(int(network["index"])).pod_cidr.network_address.packed[1]


def test_four_ready_nodes_with_internal_ips_and_leases(c1: Clusters) -> None:
    rows = poll(lambda: (r := ready_nodes(c1)) and len(r) == 4 and r, timeout=15, what="4 Ready nodes")
    assert [(r[0], r[5]) for r in rows] == [(f"c1-node-{i}", f"127.{_pods_octet(c1)}.{i + 1}.1") for i in range(4)]
    assert {r[4] for r in rows} == {"v1.37.0"}
    node = c1.kubectl_json("get", "node", "c1-node-1")
    labels = node["metadata"]["labels"]
    assert labels["topology.kubernetes.io/zone"] == "c1-zone-1"
    assert labels["kubernetes.io/hostname"] == "c1-node-1"
    assert node["spec"]["podCIDR"] == f"127.{_pods_octet(c1)}.2.0/24"
    leases = c1.kubectl("get", "leases", "-n", "kube-node-lease", "--no-headers").stdout.split()
    assert {f"c1-node-{i}" for i in range(4)} <= set(leases)


def test_lease_is_renewed(c1: Clusters) -> None:
    def renew_time() -> str:
        return str(c1.kubectl_json("get", "lease", "c1-node-0", "-n", "kube-node-lease")["spec"]["renewTime"])

    first = poll(renew_time, timeout=15, what="a lease")
    poll(lambda: renew_time() != first, timeout=25, interval=0.5, what="a renewed lease")


def test_rack_pools_and_node_selectors(c1: Clusters, ns: str) -> None:
    for i in range(4):
        c1.kubectl("label", "nodes", f"c1-node-{i}", f"rack={i // 2}", "--overwrite")
    octet = _pods_octet(c1)
    c1.kubectl("apply", "-f", "-", input=RACK_POOLS.format(octet=octet))
    table = c1.kubectl("get", "ippool", "-o", "wide").stdout.splitlines()
    assert table[0].split() == ["NAME", "CIDR", "NAT", "IPIPMODE", "VXLANMODE", "DISABLED", "SELECTOR"]
    assert table[1].split() == ["rack-0-ippool", f"127.{octet}.252.0/24", "true", "Always", "Never", "false",
                                "rack", "==", '"0"']
    # calico-apiserver would refuse a pool overlapping the racks' ones, like a /22 around them.
    overlap = c1.kubectl("create", "-f", "-", check=False, input=manifest({
        "apiVersion": "projectcalico.org/v3", "kind": "IPPool", "metadata": {"name": "default-ipv4-ippool"},
        "spec": {"cidr": f"127.{octet}.252.0/22"}}))
    assert overlap.returncode != 0 and "overlaps with IPPool(rack-0-ippool)" in overlap.stderr
    for rack in ("0", "1"):
        for n in range(3):
            run_pod(c1, ns, f"r{rack}-{n}", nodeSelector={"rack": rack})
    for rack in ("0", "1"):
        placed = set()
        for n in range(3):
            pod = poll(lambda rack=rack, n=n: scheduled(c1, ns, f"r{rack}-{n}"), what="a scheduled pod")
            condition = next(x for x in pod["status"]["conditions"] if x["type"] == "PodScheduled")
            assert condition["status"] == "True"
            placed.add(pod["spec"]["nodeName"])
        # Spread over both nodes of the rack, nowhere else.
        assert placed == {f"c1-node-{2 * int(rack)}", f"c1-node-{2 * int(rack) + 1}"}
    # A user's labels outlive the node manager's own updates.
    assert c1.kubectl_json("get", "node", "c1-node-3")["metadata"]["labels"]["rack"] == "1"


def test_rootless_cluster_refuses_a_pool_it_cannot_keep_local(c1: Clusters) -> None:
    # The per-rack example's own pool: its addresses would have no route on this machine but the
    # default one.
    refused = c1.kubectl("apply", "-f", "-", check=False, input=manifest({
        "apiVersion": "projectcalico.org/v3", "kind": "IPPool", "metadata": {"name": "seed-rack-0"},
        "spec": {"cidr": "192.168.0.0/24", "nodeSelector": 'rack == "0"'}}))
    assert refused.returncode != 0
    assert 'The IPPool "seed-rack-0" is invalid: spec.cidr: Invalid value: "192.168.0.0/24"' in refused.stderr, \
        refused.stderr
    assert "IPPool seed-rack-0 (192.168.0.0/24) is outside 127.0.0.0/8" in refused.stderr
    assert f"127.{_pods_octet(c1)}.252.0/22" in refused.stderr and "--netns" in refused.stderr
    assert c1.kubectl("get", "ippool", "seed-rack-0", check=False).returncode != 0
    # A disabled pool only declares address space (a remote cluster's, as Semaphore-WireGuard
    # does): nothing is given from it, so nothing can leave.
    name = unique("remote-pods")
    c1.kubectl("create", "-f", "-", input=manifest({"apiVersion": "projectcalico.org/v3", "kind": "IPPool",
                                                   "metadata": {"name": name},
                                                   "spec": {"cidr": "10.4.0.0/16", "disabled": True}}))
    c1.kubectl("delete", "ippool", name)


def test_untolerated_taint_keeps_pod_pending(c1: Clusters, ns: str) -> None:
    c1.kubectl("taint", "nodes", "c1-node-2", "dedicated=gpu:NoSchedule")
    try:
        run_pod(c1, ns, "pinned", nodeSelector={"kubernetes.io/hostname": "c1-node-2"})
        pod = poll(lambda: scheduled(c1, ns, "pinned"), what="a scheduling verdict")
        condition = next(x for x in pod["status"]["conditions"] if x["type"] == "PodScheduled")
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        assert condition["message"] == ("0/4 nodes are available: 1 node(s) had untolerated taint "
                                        "{dedicated: gpu}, 3 node(s) didn't match Pod's node affinity/selector.")
        assert not pod["spec"].get("nodeName") and pod["status"]["phase"] == "Pending"
        described = c1.kubectl("describe", "pod", "pinned", "-n", ns).stdout
        assert "FailedScheduling" in described and "untolerated taint {dedicated: gpu}" in described
        events = c1.kubectl("get", "events", "-n", ns).stdout
        assert "FailedScheduling" in events and "pod/pinned" in events
        run_pod(c1, ns, "tolerant", nodeSelector={"kubernetes.io/hostname": "c1-node-2"},
                tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}])
        tolerant = poll(lambda: scheduled(c1, ns, "tolerant"), what="the tolerant pod scheduled")
        assert tolerant["spec"]["nodeName"] == "c1-node-2"
    finally:
        c1.kubectl("taint", "nodes", "c1-node-2", "dedicated-", check=False)
    # Removing the taint is a node change: the waiting pod is tried again.
    retried = poll(lambda: pod_json(c1, ns, "pinned")["spec"].get("nodeName"), what="the pod bound after untaint")
    assert retried == "c1-node-2"


def test_cordon_stops_new_pods(c1: Clusters, ns: str) -> None:
    c1.kubectl("cordon", "c1-node-1")
    try:
        status = next(r for r in ready_nodes_any(c1) if r[0] == "c1-node-1")[1]
        assert status == "Ready,SchedulingDisabled"
        for n in range(4):
            run_pod(c1, ns, f"p{n}", affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["c1-node-0", "c1-node-1"]}]}]}}})
        nodes = {poll(lambda n=n: pod_json(c1, ns, f"p{n}")["spec"].get("nodeName"), what="bound") for n in range(4)}
        assert nodes == {"c1-node-0"}
        run_pod(c1, ns, "only-cordoned", nodeSelector={"kubernetes.io/hostname": "c1-node-1"})
        pod = poll(lambda: scheduled(c1, ns, "only-cordoned"), what="a verdict")
        assert "1 node(s) were unschedulable" in pod["status"]["conditions"][0]["message"]
    finally:
        c1.kubectl("uncordon", "c1-node-1", check=False)
    assert poll(lambda: pod_json(c1, ns, "only-cordoned")["spec"].get("nodeName"), what="bound") == "c1-node-1"


def ready_nodes_any(c: Clusters) -> list[list[str]]:
    return [line.split() for line in c.kubectl("get", "nodes", "--no-headers").stdout.splitlines()]


def test_user_added_node_is_initialised(c1: Clusters) -> None:
    name = unique("extra")
    c1.kubectl("create", "-f", "-", input=manifest({"apiVersion": "v1", "kind": "Node",
                                                   "metadata": {"name": name, "labels": {"team": "a"}}}))
    try:
        row = poll(lambda: next((r for r in ready_nodes(c1) if r[0] == name), None), what="the new node Ready")
        assert row[5] == f"127.{_pods_octet(c1)}.5.1"  # the first address slot after the four configured nodes
        node = c1.kubectl_json("get", "node", name)
        assert node["metadata"]["labels"]["team"] == "a"
        assert node["spec"]["podCIDR"] == f"127.{_pods_octet(c1)}.5.0/24"
    finally:
        c1.kubectl("delete", "node", name, check=False)
