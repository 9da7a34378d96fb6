"""CLI failures that say what to do: a taken hub port, a local cluster that cannot change its
network mode, netns mode without root."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tether.cli.main import app

KUBECONFIG = """apiVersion: v1
kind: Config
current-context: hub
clusters: [{name: hub, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: admin, user: {token: x}}]
contexts: [{name: hub, context: {cluster: hub, user: admin}}]
"""


@pytest.mark.parametrize("flag", ["--port", "--tunnel-frontend-port"])
def test_hub_run_on_a_taken_port_names_it_and_the_way_out(tmp_path: Path, flag: str) -> None:
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {"--port": "0", "--tunnel-agent-port": "0", flag: str(port)}
        args = [arg for pair in ports.items() for arg in pair]
        result = subprocess.run([sys.executable, "-m", "tether", "hub", "run", "--kubeconfig",
                                 str(tmp_path / "kubeconfig"), "--data-dir", str(tmp_path), *args],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 is already in use" in result.stdout
    assert f"pass {flag} 0 to pick a free one" in result.stdout


def kept_cluster(root: Path, mode: str) -> None:
    directory = root / "clusters" / "cluster1"
    directory.mkdir(parents=True)
    (directory / "network.json").write_text(json.dumps({"mode": mode}))
    (directory / "state.db").write_bytes(b"")


def test_netns_on_a_rootless_data_dir_says_how_to_proceed(tmp_path: Path) -> None:
    kept_cluster(tmp_path, "rootless")
    result = CliRunner().invoke(app, ["local", "up", "--netns", "--data-dir", str(tmp_path)],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert f"cluster cluster1 in {tmp_path} was made rootless" in result.output
    assert f"tether local up --data-dir {tmp_path}\n" in result.output
    assert f"tether local up --netns --data-dir {tmp_path}-netns" in result.output
    assert f"rm -r {tmp_path / 'clusters' / 'cluster1'}" in result.output


def test_rootless_on_a_netns_data_dir_says_how_to_proceed(tmp_path: Path) -> None:
    kept_cluster(tmp_path, "netns")
    result = CliRunner().invoke(app, ["local", "up", "--no-netns", "--data-dir", str(tmp_path)],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert f"tether local up --netns --data-dir {tmp_path}\n" in result.output
    assert f"tether local up --data-dir {tmp_path}-rootless" in result.output


def test_netns_without_root_shows_a_command_that_keeps_the_virtualenv(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    result = CliRunner().invoke(app, ["local", "up", "--netns", "--data-dir", str(tmp_path)],
                                env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert 'sudo env "PATH=$PATH" tether local up --netns' in result.output
