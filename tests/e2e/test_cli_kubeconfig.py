"""`tether` reads kubeconfigs as kubectl does: every file of `$KUBECONFIG` merged (the first to set
a name wins, `current-context` from the first file that has one, relative paths against their
own file, missing files skipped), and `--kubeconfig` alone when given."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.e2e


def split(source: Path, directory: Path, context: str, *, relative_ca: bool = False) -> Path:
    """A kubeconfig with only `context` (and its cluster and user) of `source`."""
    doc = yaml.safe_load(source.read_text())
    ctx = next(c for c in doc["contexts"] if c["name"] == context)
    cluster = next(c for c in doc["clusters"] if c["name"] == ctx["context"]["cluster"])
    user = next(u for u in doc["users"] if u["name"] == ctx["context"]["user"])
    directory.mkdir(parents=True, exist_ok=True)
    if relative_ca:
        (directory / "pki").mkdir(exist_ok=True)
        ca = base64.b64decode(cluster["cluster"].pop("certificate-authority-data"))
        (directory / "pki" / "ca.crt").write_bytes(ca)
        cluster["cluster"]["certificate-authority"] = "pki/ca.crt"
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "current-context": context,
                           "clusters": [cluster], "users": [user], "contexts": [ctx]}
    path = directory / f"{context}.yaml"
    path.write_text(yaml.safe_dump(out))
    return path


def whoami(*args: str, kubeconfig_env: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": kubeconfig_env}
    return subprocess.run([sys.executable, "-m", "tether", "whoami", *args], capture_output=True,
                          text=True, timeout=60, env=env, cwd=cwd)


def server_of(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines()[0].removeprefix("server: ")


def test_kubeconfig_with_several_files(clusters: Any, tmp_path: Path) -> None:
    first, second = clusters.names[0], clusters.names[1]
    hub = split(clusters.kubeconfig, tmp_path / "hub", first)
    member = split(clusters.kubeconfig, tmp_path / "member", second, relative_ca=True)
    merged = os.pathsep.join([str(hub), str(tmp_path / "missing.yaml"), str(member)])
    # the member's context lives in the second file; its CA path is relative to that file
    assert server_of(whoami("--context", second, kubeconfig_env=merged, cwd=tmp_path)) == clusters.servers[second]
    # current-context comes from the first file
    assert server_of(whoami(kubeconfig_env=merged, cwd=tmp_path)) == clusters.servers[first]
    # --kubeconfig replaces $KUBECONFIG
    assert server_of(whoami("--kubeconfig", str(member), kubeconfig_env=str(hub), cwd=tmp_path)) \
        == clusters.servers[second]
    refused = whoami("--kubeconfig", str(hub), "--context", second, kubeconfig_env=merged, cwd=tmp_path)
    assert refused.returncode == 1 and f"context '{second}' not found" in refused.stderr + refused.stdout
