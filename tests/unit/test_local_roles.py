"""A local cluster's role: which one each `tether local up` starts, and that data keeps it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.local import roles, supervisor
from tether.local.roles import CLUSTER, HUB, RoleError


def _made(data_dir: Path, role: str | None) -> Path:
    """A cluster directory as one start leaves it (state.db), with `role` kept (None: from
    before roles existed)."""
    data_dir.mkdir(parents=True)
    (data_dir / "state.db").write_bytes(b"")
    if role is not None:
        roles.remember_role(data_dir, role)
    return data_dir


@pytest.mark.parametrize(("kept", "wanted", "expected"), [
    (None, None, CLUSTER),  # never started: a full cluster
    (None, HUB, HUB),
    (HUB, None, HUB),  # `down` then `up` keeps the role
    (HUB, HUB, HUB),
    (CLUSTER, None, CLUSTER),
    (CLUSTER, CLUSTER, CLUSTER),
])
def test_choose_role(tmp_path: Path, kept: str | None, wanted: str | None, expected: str) -> None:
    data_dir = tmp_path / "c"
    if kept is not None:
        _made(data_dir, kept)
    assert roles.choose_role(data_dir, wanted) == expected


@pytest.mark.parametrize(("kept", "wanted"), [(HUB, CLUSTER), (CLUSTER, HUB), (None, HUB)])
def test_a_kept_cluster_refuses_the_other_role_with_the_fix(tmp_path: Path, kept: str | None,
                                                             wanted: str) -> None:
    data_dir = _made(tmp_path / "c", kept)  # kept None: data from before roles, a full cluster
    with pytest.raises(RoleError) as caught:
        roles.choose_role(data_dir, wanted)
    assert str(data_dir) in str(caught.value) and "remove that directory" in str(caught.value)


def test_an_unknown_role_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RoleError, match="'worker' is not one of cluster, hub"):
        roles.choose_role(tmp_path, "worker")
    with pytest.raises(RoleError):
        roles.wanted_roles(["a"], [], "worker")


def test_a_directory_without_state_may_take_either_role(tmp_path: Path) -> None:
    roles.remember_role(tmp_path, CLUSTER)  # started once, but nothing stored yet
    assert roles.choose_role(tmp_path, HUB) == HUB


@pytest.mark.parametrize(("names", "hubs", "expected"), [
    (["cluster1", "cluster2"], [], ["cluster1", "cluster2"]),
    (["cluster1", "cluster2"], ["hub"], ["hub", "cluster1", "cluster2"]),  # the hub first
    (["hub", "cluster1"], ["hub"], ["hub", "cluster1"]),  # --hub names one of --name
    (["a"], ["h1", "h2", "h1"], ["h1", "h2", "a"]),
])
def test_plan_names(names: list[str], hubs: list[str], expected: list[str]) -> None:
    assert roles.plan_names(names, hubs) == expected


def test_wanted_roles_hubs_then_role_for_the_rest() -> None:
    assert roles.wanted_roles(["hub", "c1"], ["hub"], None) == {"hub": HUB, "c1": None}
    assert roles.wanted_roles(["a", "b"], [], HUB) == {"a": HUB, "b": HUB}
    assert roles.wanted_roles(["hub", "c1"], ["hub"], CLUSTER) == {"hub": HUB, "c1": CLUSTER}


@pytest.mark.parametrize(("count", "names", "hubs", "role", "kept", "expected"), [
    (None, [], (), None, [], ["cluster1"]),
    (None, [], (), HUB, [], ["hub"]),  # `tether local up --role hub`
    (2, [], (), HUB, [], ["cluster1", "cluster2"]),  # --clusters names them, --role applies
    (2, [], ("hub",), None, [], ["hub", "cluster1", "cluster2"]),
    (None, [], ("hub",), None, [], ["hub", "cluster1"]),
    (None, [], (), HUB, ["hub", "m"], ["hub", "m"]),  # kept clusters come back as they were
    (None, ["x"], ("hub",), None, ["old"], ["hub", "x"]),
])
def test_choose_names(tmp_path: Path, count: int | None, names: list[str], hubs: tuple[str, ...],
                      role: str | None, kept: list[str], expected: list[str]) -> None:
    layout = supervisor.Layout(tmp_path)
    if kept:
        layout.remember_names(kept)
        for name in kept:
            (layout.clusters / name).mkdir(parents=True)
    assert supervisor.choose_names(layout, count, names, hubs, role) == expected


def test_start_daemon_refuses_a_role_change_before_starting_anything(tmp_path: Path) -> None:
    layout = supervisor.Layout(tmp_path)
    _made(layout.clusters / "hub", CLUSTER)
    with pytest.raises(supervisor.LocalError, match="a full cluster"):
        supervisor.start_daemon(layout, ["hub"], hubs=("hub",))
    assert not layout.log.exists()  # no daemon was spawned


def test_cli_refuses_a_role_change_and_contradictory_flags(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tether.cli.local import app

    layout = supervisor.Layout(tmp_path)
    layout.remember_names(["hub"])
    _made(layout.clusters / "hub", HUB)
    runner = CliRunner()
    changed = runner.invoke(app, ["up", "--data-dir", str(tmp_path), "--role", "cluster"])
    assert changed.exit_code == 2 and "made for an API-only hub" in " ".join(changed.output.split())
    both = runner.invoke(app, ["up", "--data-dir", str(tmp_path), "--api-only", "--role", "cluster"])
    assert both.exit_code == 2 and "--api-only means --role hub" in both.output
    unknown = runner.invoke(app, ["up", "--data-dir", str(tmp_path), "--role", "worker"])
    assert unknown.exit_code == 2 and "'worker' is not one of cluster, hub" in unknown.output
    assert not layout.log.exists()  # nothing was started
