"""The per-node manager: for each remote, a level-based reconcile (engine) that observes the
remote Nodes and the interface, plans with `plan.plan_peers` and applies the difference.

A reconcile of remote R on local node N:
1. ensure the interface (key from disk, listen port, MTU, up) and the route(s) for R's pod subnets;
2. annotate N with `R.wireguard.semaphore.uw.io/pubKey` and `.../endpoint` (merge patch; only
   when they differ) in the local cluster, which R's managers read;
3. list R's Nodes, turn those annotated for the local cluster into peers (malformed annotations
   are logged and skipped), diff with `wg show dump`, `wg set` the difference (peers of nodes that
   went away are removed).
It requeues itself every `resync_s` (remote Nodes are polled, not watched: a list of Nodes per
second per remote is cheap, and a remote API outage then leaves the peers as they are).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tether.connect.mesh import keys
from tether.connect.mesh.device import Device, DeviceError, clamp_mss
from tether.connect.mesh.plan import (
    LocalSide,
    Remote,
    Skipped,
    check_remotes,
    endpoint_annotation,
    interface_name,
    peers_from_nodes,
    plan_peers,
    pubkey_annotation,
    route_targets,
)
from tether.engine import Engine, RequeueAfter
from tether.kube import KubeClient, KubeError

log = logging.getLogger(__name__)


@dataclass
class RemoteState:
    remote: Remote
    client: KubeClient
    device: Device
    public_key: str = ""
    peers: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    syncs_ok: int = 0
    syncs_failed: int = 0
    last_error: str = ""


@dataclass
class MeshOptions:
    key_dir: Path = keys.DEFAULT_KEY_DIR
    namespace: str = ""  # the node's network namespace (local clusters); "" = the caller's
    endpoint_ip: str = ""  # default: the local Node's first InternalIP
    route_source: str = ""  # a local address in the node's pod range, when pods share the node's namespace
    resync_s: float = 1.0


class MeshManager:
    def __init__(self, local: LocalSide, local_client: KubeClient,
                 remotes: Sequence[tuple[Remote, KubeClient]], options: MeshOptions) -> None:
        check_remotes(local, [r for r, _ in remotes])
        self.local = local
        self.local_client = local_client
        self.options = options
        self.states = {
            r.name: RemoteState(r, c, Device(interface_name(r.name, options.namespace), options.namespace))
            for r, c in remotes
        }
        self.engine: Engine[str] = Engine(f"mesh-{local.node}", self.reconcile, max_backoff_s=5.0)

    async def _endpoint_ip(self) -> str:
        if self.options.endpoint_ip:
            return self.options.endpoint_ip
        node = await self.local_client.get("v1", "Node", self.local.node)
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP":
                return str(address["address"])
        raise RequeueAfter(2.0)  # no InternalIP yet

    async def reconcile(self, name: str) -> None:
        state = self.states[name]
        remote = state.remote
        try:
            pair = keys.load_or_create(self.options.key_dir, state.device.name)
            state.public_key = pair.public
            await state.device.ensure(pair.private, remote.port, remote.mtu)
            await state.device.ensure_routes(route_targets(remote), self.options.route_source)
            await self._annotate(remote, pair.public, f"{await self._endpoint_ip()}:{remote.port}")
            nodes = await state.client.list_all("v1", "Node")
            desired, skipped = peers_from_nodes(nodes.items, self.local.cluster)
            for s in skipped:
                if s not in state.skipped:
                    log.warning("mesh %s: node %s skipped: %s", name, s.node, s.reason)
            state.skipped = skipped
            change = plan_peers(desired, await state.device.peers())
            if not change.empty:
                log.info("mesh %s: %d peer(s) set, %d removed", name, len(change.upsert), len(change.remove))
                await state.device.apply_peers(change)
            state.peers = len(desired)
            state.syncs_ok += 1
            state.last_error = ""
        except (KubeError, DeviceError, keys.KeyError_, OSError) as exc:
            state.syncs_failed += 1
            state.last_error = str(exc)
            log.warning("mesh %s: %s", name, exc)
            raise RequeueAfter(min(5.0, self.options.resync_s * 2)) from exc
        raise RequeueAfter(self.options.resync_s)

    async def _annotate(self, remote: Remote, public_key: str, endpoint: str) -> None:
        node = await self.local_client.get("v1", "Node", self.local.node)
        have = (node.get("metadata") or {}).get("annotations") or {}
        want = {pubkey_annotation(remote.name): public_key, endpoint_annotation(remote.name): endpoint}
        if any(have.get(k) != v for k, v in want.items()):
            await self.local_client.patch("v1", "Node", self.local.node, {"metadata": {"annotations": want}})

    async def run(self) -> None:
        try:
            await clamp_mss(self.options.namespace)
        except DeviceError as exc:
            log.warning("mesh: no MSS clamping: %s", exc)
        for name in self.states:
            self.engine.enqueue(name)
        await self.engine.run()

    async def cleanup(self) -> None:
        """Remove the interfaces (their routes and peers go with them) and this node's
        annotations. Keys stay on disk: a later start reuses them."""
        for state in self.states.values():
            await state.device.delete()
        try:
            await clamp_mss(self.options.namespace, remove=True)
        except DeviceError as exc:
            log.warning("mesh: %s", exc)
        drop: dict[str, None] = {}
        for name in self.states:
            drop[pubkey_annotation(name)] = None
            drop[endpoint_annotation(name)] = None
        try:
            await self.local_client.patch("v1", "Node", self.local.node, {"metadata": {"annotations": drop}})
        except KubeError as exc:
            log.warning("mesh: could not remove the annotations of %s: %s", self.local.node, exc)


async def wait_devices_gone(devices: Sequence[Device], timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        if not [d for d in devices if await d.exists()]:
            return
        await asyncio.sleep(0.1)
