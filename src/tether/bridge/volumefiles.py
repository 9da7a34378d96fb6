"""What a container's volumes hold, without I/O: which come from the API and their files.

ConfigMap, Secret, downwardAPI and projected volumes are computed from the objects as the
kubelet writes them: every key (ConfigMap `data` and `binaryData`, Secret `data`) or only the
listed `items` at their `path`, with the item's `mode`, else the volume's `defaultMode`, else
0644. Everything else (emptyDir, hostPath, persistentVolumeClaim, ephemeral, CSI, ...) has
contents only the running pod knows; those are copied out of it (`volumes.py`).
"""

from __future__ import annotations

import base64
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.bridge.envresolve import (
    PodFacts,
    ResolveError,
    field_ref,
    find_container,
    resource_field_ref,
)
from tether.objects import ObjView as Obj

DEFAULT_MODE = 0o644
API_KINDS = ("configMap", "secret", "downwardAPI", "projected")
KNOWN_KINDS = (*API_KINDS, "emptyDir", "hostPath", "persistentVolumeClaim", "ephemeral", "csi", "nfs",
               "image", "gitRepo", "iscsi", "cephfs", "rbd", "fc", "azureFile", "azureDisk")
TokenSource = Callable[[Obj], str]  # projected serviceAccountToken source -> token


@dataclass(frozen=True)
class File:
    data: bytes
    mode: int = DEFAULT_MODE


@dataclass(frozen=True)
class Mount:
    """One of the container's volumeMounts with the volume it names."""

    name: str
    mount_path: str
    kind: str
    volume: Obj
    sub_path: str = ""
    read_only: bool = False

    @property
    def from_api(self) -> bool:
        return self.kind in API_KINDS


def volume_kind(volume: Obj) -> str:
    for key in volume:
        if key != "name":
            return str(key)
    return "unknown"


def mounts(facts: PodFacts, container_name: str) -> list[Mount]:
    """The container's mounts in declaration order; a volume mounted twice appears once."""
    spec = facts.pod.get("spec") or {}
    container = find_container(spec, container_name)
    volumes = {str(v.get("name")): v for v in spec.get("volumes") or []}
    found: list[Mount] = []
    seen: set[str] = set()
    for mount in container.get("volumeMounts") or []:
        name = str(mount.get("name", ""))
        if name in seen:
            continue
        volume = volumes.get(name)
        if volume is None:
            raise ResolveError(f'volumeMount "{name}" names no volume of the pod')
        seen.add(name)
        found.append(Mount(name, str(mount.get("mountPath", "")), volume_kind(volume), volume,
                           str(mount.get("subPath") or ""), bool(mount.get("readOnly"))))
    return found


def referenced_objects(mount_list: list[Mount]) -> tuple[set[str], set[str]]:
    """ConfigMap and Secret names the API-built volumes need."""
    configmaps: set[str] = set()
    secrets: set[str] = set()
    for mount in mount_list:
        source = mount.volume.get(mount.kind) or {}
        if mount.kind == "configMap":
            configmaps.add(str(source.get("name", "")))
        elif mount.kind == "secret":
            secrets.add(str(source.get("secretName", "")))
        elif mount.kind == "projected":
            for part in source.get("sources") or []:
                if "configMap" in part:
                    configmaps.add(str((part["configMap"] or {}).get("name", "")))
                if "secret" in part:
                    secrets.add(str((part["secret"] or {}).get("name", "")))
    return configmaps, secrets


def _mode(value: Any, default: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 0o777:
        return value
    return default


def _safe_path(path: str) -> str:
    """Item paths are relative without `..` (API validation); refuse anything else all the same."""
    normal = posixpath.normpath(path)
    if not path or path.startswith("/") or normal.startswith("..") or normal == ".":
        raise ResolveError(f"volume item path {path!r} is not a relative path inside the volume")
    return normal


def _object_files(kind: str, source: Obj, objects: Mapping[str, Obj], default_mode: int) -> dict[str, File]:
    name = str(source.get("secretName" if kind == "Secret" and "secretName" in source else "name", ""))
    obj = objects.get(name)
    optional = bool(source.get("optional"))
    if obj is None:
        if optional:
            return {}
        raise ResolveError(f'{kind.lower()} "{name}" not found')
    decoded: dict[str, bytes] = {}
    if kind == "Secret":
        decoded = {str(k): base64.b64decode(str(v)) for k, v in (obj.get("data") or {}).items()}
    else:
        decoded = {str(k): str(v).encode() for k, v in (obj.get("data") or {}).items()}
        decoded.update({str(k): base64.b64decode(str(v)) for k, v in (obj.get("binaryData") or {}).items()})
    items = source.get("items")
    if not items:
        return {_safe_path(k): File(v, default_mode) for k, v in decoded.items()}
    files: dict[str, File] = {}
    for item in items:
        key = str(item.get("key", ""))
        if key not in decoded:
            if optional:
                continue
            raise ResolveError(f"{kind.lower()} {name} has no key {key!r} that the volume lists")
        files[_safe_path(str(item.get("path") or key))] = File(decoded[key], _mode(item.get("mode"), default_mode))
    return files


def _downward_files(facts: PodFacts, container: Obj | None, items: list[Obj], default_mode: int) -> dict[str, File]:
    files: dict[str, File] = {}
    spec = facts.pod.get("spec") or {}
    for item in items:
        path = _safe_path(str(item.get("path", "")))
        if "fieldRef" in item:
            text = field_ref(facts, str((item.get("fieldRef") or {}).get("fieldPath", "")), whole_maps=True)
        else:
            ref = item.get("resourceFieldRef") or {}
            target = find_container(spec, str(ref["containerName"])) if ref.get("containerName") else container
            if target is None:
                raise ResolveError(f"downwardAPI item {path}: resourceFieldRef needs containerName")
            text = resource_field_ref(facts, target, ref)
        files[path] = File(text.encode(), _mode(item.get("mode"), default_mode))
    return files


def api_files(facts: PodFacts, mount: Mount, *, container: Obj | None,
              configmaps: Mapping[str, Obj], secrets: Mapping[str, Obj],
              token: TokenSource | None = None) -> dict[str, File]:
    """The files of a ConfigMap, Secret, downwardAPI or projected volume.

    Raises ResolveError for a missing non-optional source (the kubelet's FailedMount) and for
    a downward API value only a running pod has (`_Unknown`, a ResolveError subclass's cause).
    """
    source: Obj = mount.volume.get(mount.kind) or {}
    default_mode = _mode(source.get("defaultMode"), DEFAULT_MODE)
    if mount.kind == "configMap":
        return _object_files("ConfigMap", source, configmaps, default_mode)
    if mount.kind == "secret":
        return _object_files("Secret", source, secrets, default_mode)
    if mount.kind == "downwardAPI":
        return _downward_files(facts, container, list(source.get("items") or []), default_mode)
    if mount.kind != "projected":
        raise ResolveError(f"volume {mount.name} ({mount.kind}) is not built from the API")
    files: dict[str, File] = {}
    for part in source.get("sources") or []:
        if "configMap" in part:
            files.update(_object_files("ConfigMap", part["configMap"] or {}, configmaps, default_mode))
        elif "secret" in part:
            files.update(_object_files("Secret", part["secret"] or {}, secrets, default_mode))
        elif "downwardAPI" in part:
            files.update(_downward_files(facts, container, list((part["downwardAPI"] or {}).get("items") or []),
                                         default_mode))
        elif "serviceAccountToken" in part:
            spec = part["serviceAccountToken"] or {}
            if token is None:
                raise ResolveError(f"volume {mount.name}: a ServiceAccount token needs the API")
            files[_safe_path(str(spec.get("path") or "token"))] = File(token(spec).encode(), default_mode)
        else:
            kinds = ", ".join(sorted(part))
            raise ResolveError(f"volume {mount.name}: projected source {kinds} is not supported")
    return files
