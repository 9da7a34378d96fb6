"""Fixtures for the end-to-end kubectl suite: one namespace per test on the shared clusters, and a
federation whose hub is API-only."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_util import manifest, root_conftest, start_hub_run, unique


@pytest.fixture
def ns(clusters: Any) -> Iterator[str]:
    """A fresh namespace on cluster1 (created from a JSON manifest: no protobuf involved)."""
    name = unique("e2e")
    clusters.kubectl("create", "-f", "-", input=manifest({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
    yield name
    clusters.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


def _tether(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def api_only_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An API-only hub `hub` (`tether local up --hub hub`: no nodes, no workload controllers)
    with the full clusters `member1` and `member2` joined in push mode, and `tether hub run`
    serving it; the root conftest's `Clusters` (names: hub, member1, member2)."""
    data_dir = tmp_path_factory.mktemp("api-hub")
    clusters = root_conftest().start_clusters(data_dir, ["member1", "member2"],
                                              tmp_path_factory.mktemp("api-hub-cache"), hubs=("hub",))
    hub = None
    try:
        kubeconfig = str(clusters.kubeconfig)
        _tether("hub", "install", "--kubeconfig", kubeconfig, "--context", "hub")
        for member in ("member1", "member2"):
            _tether("join", member, "--cluster-context", member, "--host-kubeconfig", kubeconfig,
                    "--host-context", "hub")
        hub = start_hub_run(clusters.kubeconfig, "hub", data_dir / "hub-run.log")
        yield clusters
    finally:
        if hub is not None:
            hub.stop()
            (data_dir / "hub-run.log").write_text("\n".join(hub.snapshot()))
        subprocess.run([sys.executable, "-m", "tether", "local", "down", "--data-dir", str(data_dir)],
                       capture_output=True, timeout=120)
