"""Which registered Clusters the hub meshes (`tether hub run --mesh`): pure, over a data dir."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tether.app.hub_mesh import mesh_members


def cluster(name: str, *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"metadata": meta}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for name, network in (("aws", {"mode": "netns", "index": 3}), ("gcp", {"index": 4}),
                          ("rootless", {"mode": "host"}), ("broken", None)):
        (tmp_path / "clusters" / name).mkdir(parents=True)
        text = json.dumps(network) if network is not None else "{not json"
        (tmp_path / "clusters" / name / "network.json").write_text(text)
    return tmp_path


@pytest.mark.parametrize(("registered", "meshed"), [
    ([cluster("gcp"), cluster("aws")], ("aws", "gcp")),  # sorted: the same set is the same mesh
    ([cluster("aws"), cluster("gcp", deleting=True)], ("aws",)),  # leaving
    ([cluster("aws"), cluster("rootless"), cluster("broken"), cluster("elsewhere")], ("aws",)),
    ([{"metadata": "bogus"}, {}, cluster("")], ()),
])
def test_members_are_the_registered_netns_clusters_of_the_data_dir(
        root: Path, registered: list[dict[str, Any]], meshed: tuple[str, ...]) -> None:
    assert mesh_members(root, registered) == meshed
