"""One naming rule for every command's cluster options, and `--data-dir` wherever state is kept.

A command that talks to one cluster takes `--context`/`--kubeconfig`; one that talks to two takes
`--host-context`/`--host-kubeconfig` for the hub and `--cluster-context`/`--cluster-kubeconfig`
for the member. Names used before (and kubefedctl's) keep working, hidden from the help.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from tether.cli.main import app

TWO_CLUSTERS = {"join", "unjoin"}
# commands that read or write files of their own (clusters, agents, hub certificates, kubeconfigs)
STATEFUL = {"demo", "local up", "local down", "local status", "local kubeconfig", "local exec",
            "local join", "local leave", "hub run",
            "register", "agent run", "agent stop", "agent start", "agent manifest", "kubeconfig",
            "logs", "exec", "mesh local", "mesh status", "connect", "quit", "bridge status"}
# what each command accepted before the rule: scripts written against it keep working
LEGACY = {
    "join": {"--cluster-context", "--cluster-kubeconfig", "--host-context", "--host-kubeconfig",
             "--kubeconfig", "--host-cluster-context"},
    "unjoin": {"--cluster-context", "--cluster-kubeconfig", "--host-context", "--host-kubeconfig",
               "--kubeconfig", "--host-cluster-context"},
    "clusters": {"--host-context", "--host-kubeconfig", "--kubeconfig"},
    "enable": {"--host-context", "--host-cluster-context", "--host-kubeconfig", "--kubeconfig"},
    "disable": {"--host-context", "--host-cluster-context", "--host-kubeconfig", "--kubeconfig"},
    "federate": {"--host-context", "--host-cluster-context", "--host-kubeconfig", "--kubeconfig"},
    "get": {"--host-context", "--host-cluster-context", "--host-kubeconfig", "--kubeconfig"},
    "describe": {"--host-context", "--host-cluster-context", "--host-kubeconfig", "--kubeconfig"},
    "hub install": {"--context", "--kubeconfig"},
    "hub run": {"--context", "--kubeconfig"},
    "status": {"--context", "--host-context", "--kubeconfig"},
    "token create": {"--host-context", "--kubeconfig"},
    "token delete": {"--host-context", "--kubeconfig"},
    "register": {"--context", "--kubeconfig"},
    "agent run": {"--member-context", "--member-kubeconfig"},
    "proxy serve": {"--host-context", "--host-kubeconfig", "--kubeconfig"},
    "kubeconfig": {"--host-context", "--host-kubeconfig", "--kubeconfig"},
    "logs": {"--host-context", "--host-kubeconfig", "--kubeconfig"},
    "exec": {"--host-context", "--host-kubeconfig", "--kubeconfig"},
    "whoami": {"--context", "--kubeconfig"},
    "rebalance": {"--context", "--host-context", "--kubeconfig"},
}


def commands() -> Iterator[tuple[str, Any]]:
    def walk(command: Any, path: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
        subcommands = getattr(command, "commands", None)
        if subcommands is None:
            yield " ".join(path), command
            return
        for name, sub in subcommands.items():
            yield from walk(sub, (*path, name))

    yield from walk(typer.main.get_command(app), ())


def names(command: Any, *, hidden: bool | None = None) -> set[str]:
    """Long option names of `command`; only shown (False) or only hidden (True) ones if asked."""
    out: set[str] = set()
    for param in command.params:
        if param.param_type_name != "option" or (hidden is not None and bool(param.hidden) != hidden):
            continue
        out.update(o for o in [*param.opts, *param.secondary_opts] if o.startswith("--"))
    return out


ALL = dict(commands())


def about_clusters(options: set[str]) -> set[str]:
    return {o for o in options if "context" in o or "kubeconfig" in o}


@pytest.mark.parametrize("path", sorted(ALL))
def test_cluster_options_follow_the_rule(path: str) -> None:
    shown = about_clusters(names(ALL[path], hidden=False))
    if not shown:
        return  # talks to no cluster through a kubeconfig
    if path in TWO_CLUSTERS:
        assert shown == {"--host-context", "--host-kubeconfig", "--cluster-context", "--cluster-kubeconfig"}
    else:
        assert shown == {"--context", "--kubeconfig"}, f"tether {path}: one cluster, so --context/--kubeconfig"


@pytest.mark.parametrize("path", sorted(LEGACY))
def test_names_used_before_still_work(path: str) -> None:
    assert LEGACY[path] <= names(ALL[path]), f"tether {path} dropped {LEGACY[path] - names(ALL[path])}"


@pytest.mark.parametrize("path", sorted(ALL))
def test_every_context_option_has_its_kubeconfig(path: str) -> None:
    every = names(ALL[path], hidden=False)
    for option in (o for o in every if o.endswith("context")):
        assert option.replace("context", "kubeconfig") in every, f"tether {path} {option}"


@pytest.mark.parametrize("path", sorted(STATEFUL))
def test_commands_that_keep_state_take_data_dir(path: str) -> None:
    assert "--data-dir" in names(ALL[path], hidden=False)


def test_the_stateful_list_covers_every_data_dir_command() -> None:
    assert {p for p, c in ALL.items() if "--data-dir" in names(c)} == STATEFUL


@pytest.mark.parametrize(("args", "shows"), [
    (["clusters", "--help"], "--context"),
    (["join", "--help"], "--host-context"),
])
def test_aliases_stay_out_of_the_help(args: list[str], shows: str) -> None:
    out = CliRunner().invoke(app, args, env={"COLUMNS": "200"}).output
    assert shows in out
    assert "--host-cluster-context" not in out and "--karmada-context" not in out


def test_a_name_and_its_alias_given_different_values_is_an_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["clusters", "--context", "a", "--host-context", "b"])
    assert result.exit_code == 2
    assert "given twice" in result.output


def test_an_alias_reaches_the_command(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("contexts: []\nclusters: []\nusers: []\n")
    result = CliRunner().invoke(app, ["clusters", "--host-kubeconfig", str(kubeconfig),
                                      "--host-cluster-context", "from-alias"])
    assert result.exit_code == 1
    assert "from-alias" in result.output and "not found" in result.output
