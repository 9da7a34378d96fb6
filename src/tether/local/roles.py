"""A local cluster's role: a full cluster, or an API-only hub like Karmada's control plane.

A full cluster (`cluster`) runs nodes, kubelets, the scheduler, the workload and Service
controllers, DNS and the service proxy. A hub (`hub`) is an API server with what a
kube-apiserver does itself plus the controllers Karmada's control plane keeps: namespace
lifecycle, garbage collection, CRD cleanup, ServiceAccount tokens, ClusterRole aggregation,
APIServices and Service IP allocation. Nothing on a hub runs a Deployment or schedules a pod, so
objects stored there are templates only (federation writes the members' summed status onto them).

The role is kept in the cluster's data directory (`cluster.json`): `down` then `up` keeps it, and
asking a kept cluster for the other role is refused (its stored objects were made for that role).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

CLUSTER = "cluster"
HUB = "hub"
ROLES = (CLUSTER, HUB)
ROLE_FILE = "cluster.json"
DEFAULT_HUB_NAME = "hub"


class RoleError(Exception):
    """A role that cannot be used, with what to do instead."""


def persisted_role(data_dir: Path) -> str | None:
    """The role a cluster's data directory was started with (None: never started)."""
    try:
        role = json.loads((data_dir / ROLE_FILE).read_text()).get("role")
    except (OSError, ValueError, AttributeError):
        return None
    return role if role in ROLES else None


def choose_role(data_dir: Path, wanted: str | None) -> str:
    """The role to start in: the one asked for, else the kept one, else a full cluster."""
    if wanted is not None and wanted not in ROLES:
        raise RoleError(f"role {wanted!r} is not one of {', '.join(ROLES)}")
    # Data made before roles existed (no cluster.json) is a full cluster's.
    kept = persisted_role(data_dir) or CLUSTER
    if wanted is None:
        return kept
    if kept != wanted and (data_dir / "state.db").exists():
        raise RoleError(f"cluster data in {data_dir} was made for {describe(kept)} and keeps that "
                        f"role: start it without asking for {describe(wanted)}, or remove that "
                        f"directory to start afresh as one")
    return wanted


def remember_role(data_dir: Path, role: str) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / ROLE_FILE).write_text(json.dumps({"role": role}))


def describe(role: str) -> str:
    return "an API-only hub" if role == HUB else "a full cluster"


def plan_names(names: Sequence[str], hubs: Sequence[str]) -> list[str]:
    """The clusters one `tether local up` starts: `names` (from --name, --clusters or the data
    dir) with every --hub name not among them added in front, so that a hub is the kubeconfig's
    current context."""
    extra = [h for h in dict.fromkeys(hubs) if h not in names]
    return [*extra, *names]


def wanted_roles(names: Sequence[str], hubs: Sequence[str], role: str | None) -> dict[str, str | None]:
    """name -> the role asked for (None: the kept one): --hub names are hubs, the rest get
    --role (the role of every cluster started, unless --hub names it)."""
    if role is not None and role not in ROLES:
        raise RoleError(f"role {role!r} is not one of {', '.join(ROLES)}")
    return {n: HUB if n in hubs else role for n in names}


def resolve(clusters_dir: Path, wanted: Mapping[str, str | None]) -> dict[str, str]:
    """name -> the role each cluster starts with (RoleError naming the fix when one cannot)."""
    return {name: choose_role(clusters_dir / name, role) for name, role in wanted.items()}
