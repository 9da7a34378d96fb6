"""The options every command shares, named by one rule.

A command that talks to one cluster takes `--context`/`--kubeconfig` for it (the hub, for the
hub's commands; the member, for the commands a member runs). A command that talks to two takes
`--host-context`/`--host-kubeconfig` for the hub and `--cluster-context`/`--cluster-kubeconfig`
for the member. kubefedctl's `--host-cluster-context`, karmadactl's `--karmada-context` and the
names tether used before stay as hidden aliases (`*Alias` below), resolved with `pick`.

`--data-dir` is the root of tether's per-user state on every command that keeps any:
`$TETHER_HOME`, else `$XDG_DATA_HOME/tether` (`~/.local/share/tether`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, TypeVar

import typer

from tether.net import daemon

T = TypeVar("T")
Opt = typer.Option

KUBECONFIG_HELP = "(default: every file of $KUBECONFIG, merged as kubectl does, else ~/.kube/config)"

# one cluster, whichever it is
Context = Annotated[str | None, Opt("--context", help="Context in the kubeconfig (default: the current "
                                    "context)")]
Kubeconfig = Annotated[Path | None, Opt("--kubeconfig", help=f"Kubeconfig file {KUBECONFIG_HELP}")]

# one cluster: the hub
HubContext = Annotated[str | None, Opt("--context", help="The hub's context in the kubeconfig "
                                       "(default: the current context)")]
HubKubeconfig = Annotated[Path | None, Opt("--kubeconfig", help=f"Kubeconfig file {KUBECONFIG_HELP}")]
HubContextAlias = Annotated[str | None, Opt("--host-context", "--host-cluster-context",
                                            "--karmada-context", hidden=True)]
HubKubeconfigAlias = Annotated[Path | None, Opt("--host-kubeconfig", hidden=True)]

# one cluster: the member a command runs for
MemberContext = Annotated[str | None, Opt("--context", help="The member's context in the kubeconfig "
                                          "(default: the current context)")]
MemberKubeconfig = Annotated[Path | None, Opt("--kubeconfig", help=f"Kubeconfig file {KUBECONFIG_HELP}")]
MemberContextAlias = Annotated[str | None, Opt("--member-context", "--cluster-context", hidden=True)]
MemberKubeconfigAlias = Annotated[Path | None, Opt("--member-kubeconfig", "--cluster-kubeconfig",
                                                   hidden=True)]

# two clusters: the hub (host) and a member
HostContext = Annotated[str | None, Opt("--host-context", help="The hub's context in the kubeconfig "
                                        "(default: the current context)")]
HostKubeconfig = Annotated[Path | None, Opt("--host-kubeconfig", help=f"The hub's kubeconfig {KUBECONFIG_HELP}")]
HostContextAlias = Annotated[str | None, Opt("--host-cluster-context", "--karmada-context", hidden=True)]
HostKubeconfigAlias = Annotated[Path | None, Opt("--kubeconfig", hidden=True)]
ClusterKubeconfig = Annotated[Path | None, Opt("--cluster-kubeconfig", help="The member's kubeconfig "
                                               "(default: the hub's)")]

DataDir = Annotated[Path | None, Opt("--data-dir", help="Root of tether's state (default: $TETHER_HOME, "
                                     "else $XDG_DATA_HOME/tether, i.e. ~/.local/share/tether)")]


def pick(value: T | None, alias: T | None, name: str) -> T | None:
    """The value of an option given under its name or under one of its hidden aliases."""
    if value is not None and alias is not None and value != alias:
        raise typer.BadParameter(f"given twice with different values ({value} and {alias})",
                                 param_hint=name)
    return value if value is not None else alias


def state_root(data_dir: Path | None) -> Path:
    """The root of tether's state for this command: `--data-dir`, else `$TETHER_HOME` (or XDG)."""
    return (data_dir or daemon.state_home()).expanduser().resolve()
