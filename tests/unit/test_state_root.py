"""One root for tether's per-user state: `--data-dir`, else `$TETHER_HOME`, else XDG."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.app.clusterproxy import default_kubeconfig_path
from tether.cli.options import state_root
from tether.local import supervisor


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TETHER_HOME", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    return tmp_path / "home"


def test_the_root_is_the_xdg_data_dir_by_default(home: Path) -> None:
    root = home / ".local" / "share" / "tether"
    assert state_root(None) == root
    assert supervisor.default_data_dir() == root  # local clusters at the root, not in a tree of their own
    assert default_kubeconfig_path("m", "hub") == root / "kubeconfigs" / "hub--m.yaml"


def test_tether_home_and_xdg_move_the_root(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert state_root(None) == tmp_path / "xdg" / "tether"
    monkeypatch.setenv("TETHER_HOME", str(tmp_path / "th"))
    assert state_root(None) == tmp_path / "th"
    assert supervisor.default_data_dir() == tmp_path / "th"
    assert state_root(tmp_path / "given") == tmp_path / "given"
    assert default_kubeconfig_path("m", "hub", tmp_path / "given") == tmp_path / "given" / "kubeconfigs" / "hub--m.yaml"


def test_clusters_kept_in_the_old_local_dir_are_still_found(home: Path) -> None:
    root = home / ".local" / "share" / "tether"
    (root / "local" / "clusters" / "cluster1").mkdir(parents=True)
    assert supervisor.default_data_dir() == root / "local"
    (root / "clusters").mkdir()
    assert supervisor.default_data_dir() == root
