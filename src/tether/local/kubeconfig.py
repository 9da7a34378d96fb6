"""Kubeconfig files for local clusters: one context per cluster, credentials embedded."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tether.local.pki import ClusterPki


@dataclass(frozen=True)
class ClusterAccess:
    name: str
    server: str
    pki: ClusterPki


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def build(clusters: list[ClusterAccess]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "current-context": clusters[0].name if clusters else "",
        "clusters": [
            {"name": c.name, "cluster": {"server": c.server, "certificate-authority-data": _b64(c.pki.ca_cert)}}
            for c in clusters
        ],
        "users": [
            {
                "name": f"{c.name}-admin",
                "user": {
                    "client-certificate-data": _b64(c.pki.admin_cert),
                    "client-key-data": _b64(c.pki.admin_key),
                },
            }
            for c in clusters
        ],
        "contexts": [
            {"name": c.name, "context": {"cluster": c.name, "user": f"{c.name}-admin", "namespace": "default"}}
            for c in clusters
        ],
    }


def write(path: Path, clusters: list[ClusterAccess]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(build(clusters), sort_keys=False))
    tmp.chmod(0o600)
    tmp.replace(path)
    return path


def merge_into(target: Path, source: Path) -> None:
    """Add (or replace) the source's clusters, users and contexts in the target kubeconfig."""
    new = yaml.safe_load(source.read_text())
    old: dict[str, Any] = yaml.safe_load(target.read_text()) if target.exists() else {}
    old = old or {"apiVersion": "v1", "kind": "Config"}
    for section in ("clusters", "users", "contexts"):
        names = {entry["name"] for entry in new.get(section, [])}
        kept = [e for e in old.get(section) or [] if e.get("name") not in names]
        old[section] = kept + new.get(section, [])
    old.setdefault("current-context", new.get("current-context", ""))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(old, sort_keys=False))
    target.chmod(0o600)
