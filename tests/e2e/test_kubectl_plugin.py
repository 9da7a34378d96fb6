"""`kubectl tether`: the `kubectl-tether` entry point on PATH makes every command a kubectl plugin."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_util import kubectl_binary, root_conftest

pytestmark = pytest.mark.e2e
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A local cluster that is its own hub with itself joined (no `hub run`: nothing changes)."""
    data_dir = tmp_path_factory.mktemp("plugin")
    clusters = root_conftest().start_clusters(data_dir, ["plug"], tmp_path_factory.mktemp("plugin-cache"))
    try:
        kubeconfig = str(clusters.kubeconfig)
        for args in (["hub", "install", "--kubeconfig", kubeconfig, "--context", "plug"],
                     ["join", "plug", "--cluster-context", "plug", "--host-kubeconfig", kubeconfig,
                      "--host-context", "plug"]):
            result = subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True,
                                    text=True, timeout=120)
            assert result.returncode == 0, result.stdout + result.stderr
        yield clusters
    finally:
        subprocess.run([sys.executable, "-m", "tether", "local", "down", "--data-dir",
                        str(data_dir)], capture_output=True, timeout=120)


def run(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    # PATH holds only the venv's bin and the system's: kubectl finds kubectl-tether there
    full = {**os.environ, "PATH": f"{BIN}:/usr/bin:/bin", **env}
    full.pop("KUBECONFIG", None)
    full.update(env)
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=full)


def table(text: str) -> list[list[str]]:
    """The rows without AGE (seconds tick between the two runs)."""
    rows = [line.split() for line in text.splitlines() if line.strip()]
    age = rows[0].index("AGE")
    return [row[:age] + row[age + 1:] for row in rows]


def test_kubectl_tether_clusters_is_tether_clusters(hub: Any) -> None:
    kubeconfig = str(hub.kubeconfig)
    plugins = run([kubectl_binary(), "plugin", "list"])
    assert f"{BIN}/kubectl-tether" in plugins.stdout, plugins.stdout + plugins.stderr
    direct = run([str(BIN / "tether"), "clusters", "--kubeconfig", kubeconfig, "--context", "plug"])
    assert direct.returncode == 0, direct.stderr
    assert table(direct.stdout)[1][:2] == ["plug", "Push"]
    for argv, env in (
        # kubectl's habit: global flags first
        (["tether", "--kubeconfig", kubeconfig, "--context", "plug", "clusters"], {}),
        (["tether", "clusters", "--context", "plug"], {"KUBECONFIG": kubeconfig}),
    ):
        plugin = run([kubectl_binary(), *argv], **env)
        assert plugin.returncode == 0, plugin.stderr
        assert table(plugin.stdout) == table(direct.stdout)


def test_kubectl_tether_says_which_flag_a_command_does_not_take(hub: Any) -> None:
    result = run([kubectl_binary(), "tether", "-n", "default", "clusters"])
    assert result.returncode == 2
    assert "`kubectl tether clusters` does not take -n" in result.stderr
