"""Which long-running parts a local cluster runs beyond its API server and core controllers.

Each entry builds one part from the cluster (its `ops`, `network`, `config`, `store`) and
returns an object with `async def run()`; admission plugins are added to `cluster.ops.admission`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tether.local.cluster import Component, LocalCluster


def build(cluster: LocalCluster) -> list[Component]:
    parts: list[Component] = []
    return parts
