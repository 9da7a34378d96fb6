"""Where `kubectl tether` puts kubectl's global flags (pure: the CLI's command tree only)."""

from __future__ import annotations

import pytest
import typer

from tether.cli.kubectl_plugin import Plan, PluginError, plan
from tether.cli.main import app

ROOT = typer.main.get_command(app)


@pytest.mark.parametrize(("args", "expected"), [
    # after the command: untouched
    (["clusters", "--context", "hub"], Plan(("clusters", "--context", "hub"))),
    # before it: moved after the command path
    (["--context", "hub", "clusters", "-o", "wide"],
     Plan(("clusters", "--context", "hub", "-o", "wide"))),
    (["--context=hub", "--kubeconfig", "/k", "clusters"],
     Plan(("clusters", "--context", "hub", "--kubeconfig", "/k"))),
    (["-n", "web", "status", "deployment", "app"],
     Plan(("status", "-n", "web", "deployment", "app"))),
    (["--context", "hub", "hub", "install"], Plan(("hub", "install", "--context", "hub"))),
    # a command without --kubeconfig still reads $KUBECONFIG
    (["--kubeconfig", "/k", "version"], Plan(("version",), {"KUBECONFIG": "/k"})),
    # `local up -n` is --clusters, not a namespace: -n is only moved onto --namespace
    (["--help"], Plan(("--help",))),
    ([], Plan(())),
])
def test_plan(args: list[str], expected: Plan) -> None:
    assert plan(ROOT, args) == expected


@pytest.mark.parametrize(("args", "message"), [
    (["-n", "web", "clusters"], "does not take -n"),
    (["-n", "3", "local", "up"], "does not take -n"),
    (["--context", "hub", "version"], "does not take --context"),
    (["--context"], "needs a value"),
    (["--context", "hub", "local"], "goes after the command"),
])
def test_plan_refuses(args: list[str], message: str) -> None:
    with pytest.raises(PluginError, match=message):
        plan(ROOT, args)
