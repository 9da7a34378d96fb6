"""`kubectl tether ...`: every tether command as a kubectl plugin (`kubectl-tether` on PATH).

kubectl hands a plugin every argument after its name and refuses global flags before it, so
users write kubectl's global flags where kubectl habits put them: anywhere, often first
(`kubectl tether --context hub clusters`). `plan` moves `--context`, `--kubeconfig` and
`-n/--namespace` given before the command to after it, where tether's commands take them; a
command without `--kubeconfig` still gets it as `$KUBECONFIG` (what every tether command reads),
and one without `--context` or `--namespace` says so instead of guessing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import typer

PROG = "kubectl tether"
# kubectl's global flags that tether's commands share, with the long name each means
GLOBAL_FLAGS = {"--context": "--context", "--kubeconfig": "--kubeconfig", "-n": "--namespace",
                "--namespace": "--namespace"}


class PluginError(Exception):
    pass


@dataclass(frozen=True)
class Plan:
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


def _split_flag(args: Sequence[str], i: int) -> tuple[str, str, int] | None:
    """(flag, value, next index) if args[i] is one of the global flags, else None."""
    arg = args[i]
    name, eq, value = arg.partition("=")
    if name not in GLOBAL_FLAGS:
        return None
    if eq:
        return name, value, i + 1
    if i + 1 >= len(args):
        raise PluginError(f"{name} needs a value")
    return name, args[i + 1], i + 2


def _is_group(command: Any) -> bool:
    # typer carries its own copy of click: look at what a group does, not at its class
    return callable(getattr(command, "get_command", None))


def _accepts(command: Any, long_name: str, given: str) -> bool:
    for param in getattr(command, "params", ()):
        opts = getattr(param, "opts", ())
        if getattr(param, "param_type_name", "") == "option" and long_name in opts and given in opts:
            return True
    return False


def plan(root: Any, args: Sequence[str]) -> Plan:
    """Where kubectl's global flags go for tether's command line `args` (pure)."""
    moved: list[tuple[str, str]] = []
    path: list[str] = []
    command = root
    i = 0
    while i < len(args) and _is_group(command):
        found = _split_flag(args, i)
        if found:
            moved.append((found[0], found[1]))
            i = found[2]
            continue
        sub = command.get_command(typer.Context(command), args[i])
        if sub is None:
            break  # --help, a typo: tether's own message says what is wrong
        path.append(args[i])
        command = sub
        i += 1
    rest = list(args[i:])
    extra: list[str] = []
    env: dict[str, str] = {}
    for flag, value in moved:
        long_name = GLOBAL_FLAGS[flag]
        if _is_group(command):
            if long_name == "--kubeconfig":
                env["KUBECONFIG"] = value
                continue
            raise PluginError(f"{flag} goes after the command (`{PROG} COMMAND {flag} ...`)")
        if _accepts(command, long_name, flag):
            extra += [flag, value]
        elif long_name == "--kubeconfig":
            env["KUBECONFIG"] = value
        else:
            raise PluginError(f"`{PROG} {' '.join(path)}` does not take {flag}")
    return Plan(tuple([*path, *extra, *rest]), env)


def main() -> None:
    """The `kubectl-tether` entry point."""
    from tether.cli.main import app

    root = typer.main.get_command(app)
    try:
        chosen = plan(root, sys.argv[1:])
    except PluginError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    os.environ.update(chosen.env)
    root.main(args=list(chosen.argv), prog_name=PROG)
