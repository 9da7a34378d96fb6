"""semaphore-wireguard's clusters config (`-clusters-config`), read as it is, so an existing
DaemonSet's ConfigMap works unchanged:

    {"local": {"name": "c1", "kubeConfigPath": ""},
     "remotes": [{"name": "c2", "remoteAPIURL": "https://...", "remoteCAURL": "https://...",
                  "remoteSATokenPath": "/etc/.../token", "kubeConfigPath": "",
                  "podSubnet": "10.4.0.0/16", "wgDeviceMTU": 1380, "wgListenPort": 51821}]}

A remote is reached with its `kubeConfigPath` when set, else `remoteAPIURL` and the token in
`remoteSATokenPath` (the upstream reads the token even when a kubeconfig is given; tether does
not). tether adds `remoteCAPath` (a PEM file) next to `remoteCAURL` and `podSubnets` (a list)
next to `podSubnet`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.connect.mesh.plan import DEFAULT_MTU, DEFAULT_PORT, MeshConfigError, Remote


@dataclass(frozen=True)
class RemoteAccess:
    remote: Remote
    api_url: str = ""
    ca_url: str = ""
    ca_path: str = ""
    token_path: str = ""


@dataclass(frozen=True)
class MeshConfig:
    local_name: str
    local_kubeconfig: str
    remotes: tuple[RemoteAccess, ...]


def _int(item: dict[str, Any], key: str, default: int, where: str) -> int:
    value = item.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise MeshConfigError(f"{where}: {key} must be a positive integer, not {value!r}")
    return value


def parse(data: Any) -> MeshConfig:
    if not isinstance(data, dict) or not isinstance(data.get("local"), dict):
        raise MeshConfigError('the config needs {"local": {"name": ...}, "remotes": [...]}')
    local = data["local"]
    name = local.get("name")
    if not isinstance(name, str) or not name:
        raise MeshConfigError("local.name is required")
    remotes = []
    for i, item in enumerate(data.get("remotes") or []):
        where = f"remotes[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
            raise MeshConfigError(f"{where}: name is required")
        subnets = item.get("podSubnets") or ([item["podSubnet"]] if item.get("podSubnet") else [])
        if not subnets or not all(isinstance(s, str) for s in subnets):
            raise MeshConfigError(f"{where} ({item['name']}): podSubnet is required")
        if not item.get("kubeConfigPath") and not (item.get("remoteAPIURL") and item.get("remoteSATokenPath")):
            raise MeshConfigError(f"{where} ({item['name']}): set kubeConfigPath, or remoteAPIURL and "
                                  "remoteSATokenPath")
        remote = Remote(item["name"], tuple(subnets), port=_int(item, "wgListenPort", DEFAULT_PORT, where),
                        mtu=_int(item, "wgDeviceMTU", DEFAULT_MTU, where),
                        kubeconfig=str(item.get("kubeConfigPath") or ""))
        remotes.append(RemoteAccess(remote, str(item.get("remoteAPIURL") or ""), str(item.get("remoteCAURL") or ""),
                                    str(item.get("remoteCAPath") or ""), str(item.get("remoteSATokenPath") or "")))
    if not remotes:
        raise MeshConfigError("the config names no remotes")
    return MeshConfig(name, str(local.get("kubeConfigPath") or ""), tuple(remotes))


def load(path: Path) -> MeshConfig:
    try:
        return parse(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        if isinstance(exc, MeshConfigError):
            raise
        raise MeshConfigError(f"{path}: {exc}") from exc
