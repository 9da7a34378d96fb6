"""`tether mesh local`: the WireGuard mesh between `--netns` local clusters, one manager per node.

Wires `local` (the clusters' networks, the node-level underlay) to `connect.mesh` (the managers):
for every pair of the named clusters, `underlay.join_nodes` (only UDP on the mesh ports between
node addresses); for every node of every cluster, a `MeshManager` inside the node's namespace
with every other cluster as a remote (port 51820 + the remote's index, the remote's pod range,
routes from the node's pod-range address since pods share their node's namespace). Nodes added
later get a manager (and the underlay routes) within a second; nodes that go lose theirs.
Keys live in `<data-dir>/mesh/keys/<cluster>/<node>/`. Nodes labelled
`mesh.tether.io/managed=false` are left alone (like nodes a DaemonSet's nodeSelector excludes).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import time
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

from tether.connect.mesh.device import mesh_devices
from tether.connect.mesh.manager import MeshManager, MeshOptions
from tether.connect.mesh.plan import LocalSide, Remote
from tether.connect.mesh.status import MESH_READY, DeviceStatus, mesh_verdict, parse_dump
from tether.federation.crds import CLUSTER_API_VERSION
from tether.federation.health import Condition, find_condition, with_condition
from tether.kube import KubeClient, KubeError
from tether.local import underlay
from tether.local.netns import NetnsError, list_namespaces, node_slot
from tether.local.network import ClusterNetwork
from tether.net.tasks import cancel_and_wait

log = logging.getLogger(__name__)
POLL_S = 1.0
# what a DaemonSet's nodeSelector does on a real cluster: a Node labelled
# `mesh.tether.io/managed=false` gets no manager (its annotations are left as they are)
UNMANAGED_LABEL = "mesh.tether.io/managed"
HUB_EVERY = 5  # rounds between MeshReady reports to the hub


async def write_mesh_ready(hub: KubeClient, name: str, status: str, reason: str, message: str, now: float) -> None:
    """`MeshReady` on the hub's Cluster `name` (skipped when the hub has no such Cluster), written
    only when it changes; its transition time moves only when the status does."""
    try:
        cluster = await hub.get_or_none(CLUSTER_API_VERSION, "Cluster", name)
        if cluster is None:
            return
        current_status = cluster.get("status") or {}
        current = find_condition(current_status, MESH_READY)
        wanted = Condition(MESH_READY, status, reason, message, now)
        if wanted.same(current):
            return
        if current is not None and current.status == wanted.status:
            wanted = Condition(MESH_READY, status, reason, message, current.last_transition_s)
        conditions = with_condition(current_status.get("conditions") or [], wanted)
        await hub.patch(CLUSTER_API_VERSION, "Cluster", name, {"status": {"conditions": conditions}},
                        subresource="status")
    except KubeError as exc:
        log.warning("mesh: could not report %s's mesh to the hub: %s", name, exc)


class MeshLocalError(Exception):
    """The named clusters cannot be meshed (not netns, not up, overlapping pod ranges)."""


@dataclass
class LocalMesh:
    root: Path
    names: list[str]
    networks: dict[str, ClusterNetwork] = field(default_factory=dict)
    clients: dict[str, KubeClient] = field(default_factory=dict)
    managers: dict[tuple[str, str], MeshManager] = field(default_factory=dict)
    tasks: dict[tuple[str, str], asyncio.Task[None]] = field(default_factory=dict)
    hub: KubeClient | None = None  # set: a MeshReady condition on the hub's Cluster of each cluster
    own_hub: bool = True  # close `hub` with the rest (False: the hub process's own client)

    def load(self) -> None:
        if len(self.names) < 2:
            raise MeshLocalError("a mesh needs at least two clusters (--clusters a,b)")
        for name in self.names:
            path = self.root / "clusters" / name / "network.json"
            try:
                found = json.loads(path.read_text())
            except OSError as exc:
                raise MeshLocalError(f"no cluster {name!r} in {self.root}: start it with "
                                     "`tether local up --netns`") from exc
            if found.get("mode") not in (None, "netns") or "index" not in found:
                raise MeshLocalError(f"cluster {name!r} is not a --netns cluster: only they have node namespaces")
            self.networks[name] = ClusterNetwork.netns(int(found["index"]))
        try:
            underlay.check_pod_ranges(list(self.networks.values()))
        except NetnsError as exc:
            raise MeshLocalError(str(exc)) from exc
        for name in self.names:
            self.clients[name] = KubeClient.from_kubeconfig(self.root / "kubeconfig", name)

    def namespace_of(self, cluster: str, node: dict[str, object]) -> tuple[str, int] | None:
        network = self.networks[cluster]
        status = node.get("status")
        addresses = status.get("addresses") if isinstance(status, dict) else None
        for address in addresses or []:
            if isinstance(address, dict) and address.get("type") == "InternalIP":
                assert network.fabric_cidr is not None
                ip = ipaddress.IPv4Address(str(address.get("address")))
                if ip in network.fabric_cidr:
                    slot = int(ip) - int(network.fabric_cidr.network_address) - 2
                    ns = f"tether-{network.index}-n{slot}"
                    return (ns, slot) if node_slot(network, ns) == slot else None
        return None

    def manager_for(self, cluster: str, node: str, namespace: str, slot: int) -> MeshManager:
        network = self.networks[cluster]
        remotes = [
            (Remote(other, (str(self.networks[other].pod_cidr),), port=underlay.mesh_port(self.networks[other])),
             self.clients[other])
            for other in self.names if other != cluster
        ]
        options = MeshOptions(key_dir=self.root / "mesh" / "keys" / cluster / node, namespace=namespace,
                              endpoint_ip=network.node_ip(slot), route_source=network.node_pod_gateway(slot))
        return MeshManager(LocalSide(cluster, node, (str(network.pod_cidr),)), self.clients[cluster], remotes,
                           options)

    async def discover(self) -> dict[tuple[str, str], tuple[str, int]]:
        found: dict[tuple[str, str], tuple[str, int]] = {}
        for cluster in self.names:
            nodes = await self.clients[cluster].list_all("v1", "Node")
            for node in nodes.items:
                if ((node.get("metadata") or {}).get("labels") or {}).get(UNMANAGED_LABEL) == "false":
                    continue
                where = self.namespace_of(cluster, node)
                if where is not None and Path(f"/run/netns/{where[0]}").exists():
                    found[(cluster, str(node["metadata"]["name"]))] = where
        return found

    async def join_all(self) -> None:
        for a, b in combinations(self.names, 2):
            await underlay.join_nodes(self.networks[a], self.networks[b])

    async def run(self) -> None:
        """Mesh the clusters until cancelled."""
        await self.join_all()
        rounds = 0
        try:
            while True:
                try:
                    found = await self.discover()
                except Exception as exc:  # an API outage: keep the mesh as it is (fail-static)
                    log.warning("mesh: listing nodes failed: %s", exc)
                    await asyncio.sleep(POLL_S)
                    continue
                if set(found) - set(self.managers):
                    await self.join_all()  # routes to the other sites' nodes for the new node
                for key, (namespace, slot) in found.items():
                    if key not in self.managers:
                        log.info("mesh: node %s of %s joins the mesh", key[1], key[0])
                        self.managers[key] = self.manager_for(key[0], key[1], namespace, slot)
                        self.tasks[key] = asyncio.create_task(self.managers[key].run())
                for key in [k for k in self.managers if k not in found]:
                    log.info("mesh: node %s of %s left", key[1], key[0])
                    task = self.tasks.pop(key)
                    await cancel_and_wait(task)
                    gone = self.managers.pop(key)
                    for state in gone.states.values():
                        await state.device.delete()  # the Node is gone: nothing to annotate
                if self.hub is not None and rounds % HUB_EVERY == 0:
                    await self.report_to_hub()
                rounds += 1
                await asyncio.sleep(POLL_S)
        finally:
            for task in self.tasks.values():
                task.cancel()
            for task in self.tasks.values():
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def report_to_hub(self) -> None:
        """`MeshReady` on the hub's Cluster named like each meshed cluster (those the hub does
        not know are skipped): True while every other node's interface to it shook hands lately."""
        assert self.hub is not None
        toward: dict[str, list[DeviceStatus]] = {name: [] for name in self.names}
        for manager in self.managers.values():
            for remote, state in manager.states.items():
                found = parse_dump(state.device.name, await state.device.dump())
                if found is not None:
                    toward[remote].append(found)
        now = time.time()
        for name, devices in toward.items():
            verdict = mesh_verdict(name, devices, now)
            await write_mesh_ready(self.hub, name, verdict.status, verdict.reason, verdict.message, now)

    async def cleanup(self) -> None:
        """Remove every interface, route and annotation the mesh made, and the node underlay."""
        for (cluster, node), (namespace, slot) in (await self.discover()).items():
            await self.manager_for(cluster, node, namespace, slot).cleanup()
        # nodes deleted while the mesh was down keep their namespace until the cluster stops
        for network in self.networks.values():
            for namespace in list_namespaces():
                if node_slot(network, namespace) is not None:
                    for device in await mesh_devices(namespace):
                        await device.delete()
        for a, b in combinations(self.names, 2):
            await underlay.leave_nodes(self.networks[a], self.networks[b])

    async def close(self) -> None:
        for client in [*self.clients.values(), *([self.hub] if self.hub and self.own_hub else [])]:
            await client.close()
