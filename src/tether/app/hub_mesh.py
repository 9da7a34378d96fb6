"""The hub meshes its registered members by itself (`tether hub run --mesh`).

The members are the hub's registered Clusters (not being deleted) that are `--netns` local
clusters in the hub's data directory (`<data-dir>/clusters/<name>/network.json`): exactly what
`tether mesh local --clusters ...` would be told, with the hub's own client for the `MeshReady`
conditions. A Cluster event (and a recheck every `RECHECK_S`) makes the hub look again: when the
set changes, the running mesh stops and one for the new set starts (keys stay on disk, the
managers are level-based, so the pairs that stay keep their keys and peers). When a member
leaves, what the mesh made is removed first (interfaces, routes, annotations, underlay links) so
that no node keeps a peer or a route toward a cluster that is no longer a member.

Clusters that are not local `--netns` clusters are not meshed by the hub: real clusters run
`tether mesh run` as a DaemonSet (deploy/mesh/).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tether.app.mesh import LocalMesh, MeshLocalError, write_mesh_ready
from tether.connect.fleetwatch import MemberSignal
from tether.net.tasks import cancel_and_wait

if TYPE_CHECKING:
    from tether.app.hub import Hub

log = logging.getLogger(__name__)
RECHECK_S = 10.0  # a cluster started after its Cluster was registered has no Cluster event


def is_netns_cluster(root: Path, name: str) -> bool:
    try:
        found = json.loads((root / "clusters" / name / "network.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(found, dict) and found.get("mode") in (None, "netns") and "index" in found


def mesh_members(root: Path, clusters: list[dict[str, object]]) -> tuple[str, ...]:
    """The registered Clusters to mesh: not being deleted, and local --netns clusters under `root`."""
    names: set[str] = set()
    for cluster in clusters:
        meta = cluster.get("metadata")
        if not isinstance(meta, dict) or meta.get("deletionTimestamp"):
            continue
        name = str(meta.get("name") or "")
        if name and is_netns_cluster(root, name):
            names.add(name)
    return tuple(sorted(names))


class HubMesh:
    def __init__(self, hub: Hub, root: Path) -> None:
        self.hub = hub
        self.root = root
        self.signal = MemberSignal(RECHECK_S)
        self.names: tuple[str, ...] = ()
        self.refused: tuple[str, ...] = ()  # a set the mesh refused (overlapping pod ranges): not retried
        self.mesh: LocalMesh | None = None
        self.task: asyncio.Task[None] | None = None
        self._group: asyncio.TaskGroup | None = None

    def members_changed(self) -> None:
        self.signal.set()

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                await self.signal.each_change(self._sync, "hub mesh")
        finally:
            self._group = None
            await self._stop(cleanup=False)  # the mesh outlives the hub, as a DaemonSet's would

    async def _sync(self) -> None:
        wanted = mesh_members(self.root, self.hub.shared.clusters.list())
        running = self.task is not None and not self.task.done()
        if wanted == self.refused or (wanted == self.names and (running or len(wanted) < 2)):
            return
        left = set(self.names) - set(wanted)
        await self._stop(cleanup=bool(left))
        self.names, self.refused = wanted, ()
        if len(wanted) < 2:
            return
        mesh = LocalMesh(self.root, list(wanted), own_hub=False)
        try:
            mesh.load()
        except MeshLocalError as exc:
            log.error("hub mesh: cannot mesh %s: %s", ", ".join(wanted), exc)
            self.refused = wanted
            await mesh.close()
            for name in wanted:
                await write_mesh_ready(self.hub.host, name, "False", "MeshRefused", str(exc), time.time())
            return
        mesh.hub = self.hub.host
        log.info("hub mesh: meshing %s", ", ".join(wanted))
        self.mesh = mesh
        assert self._group is not None
        self.task = self._group.create_task(self._supervise(mesh))

    async def _supervise(self, mesh: LocalMesh) -> None:
        try:
            await mesh.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("hub mesh: the mesh of %s failed; it starts again", ", ".join(mesh.names))
            await asyncio.sleep(2.0)
            self.signal.set()

    async def _stop(self, *, cleanup: bool) -> None:
        mesh, task = self.mesh, self.task
        self.mesh = self.task = None
        if task is not None:
            await cancel_and_wait(task)
        if mesh is None:
            return
        try:
            if cleanup:
                log.info("hub mesh: a member left; removing the mesh of %s before meshing the rest",
                         ", ".join(mesh.names))
                await mesh.cleanup()
        except Exception as exc:  # a member's cluster already gone: what is left there goes with it
            log.warning("hub mesh: cleaning up the mesh of %s: %s", ", ".join(mesh.names), exc)
        finally:
            await mesh.close()


def build(hub: Hub, root: Path) -> HubMesh:
    mesh = HubMesh(hub, root)
    hub.shared.cluster_handlers.append(lambda _event: mesh.members_changed())
    return mesh
