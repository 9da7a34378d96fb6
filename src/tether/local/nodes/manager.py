"""The node manager: registers the cluster's simulated nodes and keeps them alive.

For each node (the `cluster.config.nodes` configured ones, and any a user adds with kubectl)
it does what a kubelet, the node-IPAM controller and kwok's node stages do together: create the
Node if it is a configured one and missing, fill in missing labels and the podCIDR, keep the
status initialised, renew the node's Lease in `kube-node-lease` every 10 s, and refresh the
conditions' `lastHeartbeatTime` every 40 s (not on every renewal: that would be a write per
node every 10 s for watchers to digest, for no information).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import time
from collections.abc import Callable

from tether.engine import Engine, RequeueAfter
from tether.local import events
from tether.local.errors import ApiError
from tether.local.network import MAX_NODES, ClusterNetwork, NetworkError
from tether.local.nodes import shape
from tether.local.nodes.ipam import NODES, node_cidrs
from tether.local.operations import Operations, WriteOptions
from tether.local.resources import ResourceType
from tether.local.store import Watcher, WatchOverflow
from tether.objects import Obj, times

log = logging.getLogger(__name__)

MANAGER = "tether-node-manager"
LEASE_RENEW_S = 10.0
HEARTBEAT_S = 40.0
# Look at every node this often. A tick as long as the renewal period would let renewals slip
# to every other tick (20 s) whenever one reconcile runs a little later than the previous one.
TICK_S = LEASE_RENEW_S / 4
CONFLICT_RETRY_S = 0.05


class NodeManager:
    def __init__(self, ops: Operations, network: ClusterNetwork, cluster: str, count: int, *,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], str] = times.now_rfc3339) -> None:
        self.ops = ops
        self.network = network
        self.cluster = cluster
        self.configured = {shape.node_name(cluster, i): i for i in range(count)}
        self._clock = clock  # paces renewals
        self._wall = wall  # timestamps written into objects
        self._renewed: dict[str, float] = {}  # node -> clock() of its last Lease renewal
        self._beaten: dict[str, float] = {}  # node -> clock() of its last status heartbeat
        self._index: dict[str, int] = {}  # user-added node -> the address slot it was given
        # podCIDR -> slot, the inverse of network.node_pod_cidr (slot i is the (i+1)th /24).
        subnets = list(network.pod_cidr.subnets(new_prefix=24))[1:MAX_NODES + 1]
        self._slots = {str(cidr): i for i, cidr in enumerate(subnets)}
        self.engine: Engine[str] = Engine("node-manager", self._reconcile)

    def _opts(self) -> WriteOptions:
        return WriteOptions(manager=MANAGER, user=f"system:node:{MANAGER}")

    def _rt(self, group: str, version: str, plural: str) -> ResourceType:
        rt = self.ops.registry.lookup(group, version, plural)
        assert rt is not None, plural
        return rt

    # loop --------------------------------------------------------------------------------

    async def run(self) -> None:
        store = self.ops.store
        watcher, _ = store.watch(NODES, None, store.revision)
        self._enqueue_all()
        async with asyncio.TaskGroup() as group:
            group.create_task(self.engine.run())
            group.create_task(self._feed(watcher))
            group.create_task(self._tick())

    def _enqueue_all(self) -> None:
        for name in self.configured:
            self.engine.enqueue(name)
        for node in self.ops.store.list_objects(NODES):
            self.engine.enqueue(node["metadata"]["name"])

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            self._enqueue_all()

    async def _feed(self, watcher: Watcher) -> None:
        store = self.ops.store
        try:
            while True:
                try:
                    event = await watcher.next(None)
                except WatchOverflow:
                    watcher.close()
                    watcher, _ = store.watch(NODES, None, store.revision)
                    self._enqueue_all()
                    continue
                if event is not None:
                    self.engine.enqueue(event.name)
        finally:
            watcher.close()

    # one node ----------------------------------------------------------------------------

    def _slot(self, name: str, node: Obj | None) -> int | None:
        """The address slot (node index) of a node: configured ones by name; one a user added
        keeps the slot its podCIDR names, else gets the first free one (as node-IPAM would)."""
        if name in self.configured:
            return self.configured[name]
        if name in self._index:
            return self._index[name]
        taken = set(self.configured.values()) | set(self._index.values())
        for other in self.ops.store.list_objects(NODES):
            if other["metadata"]["name"] != name:
                taken.update(self._slots[str(c)] for c in node_cidrs(other) if str(c) in self._slots)
        own = [self._slots[str(c)] for c in node_cidrs(node or {}) if str(c) in self._slots]
        free = (i for i in range(len(self.configured), MAX_NODES) if i not in taken)
        slot = next((i for i in own if i not in taken), None)
        slot = next(free, None) if slot is None else slot
        if slot is not None:
            self._index[name] = slot
        return slot

    def _seed(self, name: str, node: Obj | None) -> shape.NodeSeed | None:
        slot = self._slot(name, node)
        if slot is None:
            return None
        try:
            return shape.NodeSeed(name=name, index=slot, cluster=self.cluster,
                                  internal_ip=self.network.node_ip(slot),
                                  pod_cidr=str(self.network.node_pod_cidr(slot)))
        except NetworkError as exc:
            log.warning("node %s gets no addresses: %s", name, exc)
            return None

    async def _reconcile(self, name: str) -> None:
        try:
            self._sync(name)
        except ApiError as exc:
            if exc.code != 409:
                raise
            raise RequeueAfter(CONFLICT_RETRY_S) from None  # someone else wrote first: look again

    def _sync(self, name: str) -> None:
        nodes = self._rt("", "v1", "nodes")
        node = self.ops.store.get(NODES, "", name)
        if node is None:
            self._renewed.pop(name, None)
            self._beaten.pop(name, None)
            self._index.pop(name, None)
            if name not in self.configured:
                return  # a user deleted a node of their own; its Lease goes by ownerReference
        seed = self._seed(name, node)
        if seed is None:
            return
        now, tick = self._wall(), self._clock()
        if node is None:
            node = self.ops.create(nodes, "", shape.new_node(seed, now), self._opts())
            self._beaten[name] = tick
            events.record(self.ops, node, event_type="Normal", reason="Starting", message="Starting kubelet.",
                          component="kubelet")
        fixed = shape.spec_update(node, seed)
        if fixed is not None:
            node = self.ops.update(nodes, "", name, fixed, self._opts())
        due = tick - self._beaten.get(name, -math.inf) >= HEARTBEAT_S
        status = shape.status_update(node.get("status"), seed, now, heartbeat=due)
        if status is not None:
            updated = copy.deepcopy(node)
            updated["status"] = status
            node = self.ops.update(nodes, "", name, updated, self._opts(), subresource="status")
        if due:
            self._beaten[name] = tick
        if tick - self._renewed.get(name, -math.inf) >= LEASE_RENEW_S:
            self._renew_lease(node)
            self._renewed[name] = tick

    def _renew_lease(self, node: Obj) -> None:
        leases = self._rt("coordination.k8s.io", "v1", "leases")
        name = node["metadata"]["name"]
        current = self.ops.find(leases, shape.LEASE_NAMESPACE, name)
        lease = shape.lease(node, times.now_micro(), current)
        try:
            if current is None:
                self.ops.create(leases, shape.LEASE_NAMESPACE, lease, self._opts())
            else:
                self.ops.update(leases, shape.LEASE_NAMESPACE, name, lease, self._opts())
        except ApiError as exc:
            if exc.code == 409:
                raise
            # kube-node-lease may be gone (deleted by a user): the node lives on without a lease.
            log.debug("lease of node %s not renewed: %s", name, exc)
