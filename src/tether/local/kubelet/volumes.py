"""Pod volumes: what their files hold, how they are written, and where a container sees them.

Files. configMap, secret, downwardAPI and projected volumes (the ServiceAccount token volume is
a projected one) are computed from the store (`payload`, pure) and written the way the real
kubelet's atomic writer does: the files go into a fresh `..<time>` directory, the `..data`
symlink is swapped to it in one rename, and each top-level name is a symlink through `..data`.
A reader never sees half an update, and a directory bound elsewhere shows new content at once.
emptyDir is a plain directory; hostPath is the host's own path.

Mount paths. As root, each process container runs in its own mount namespace: `MOUNT_SHIM`
(run before the container's command) unshares the mount namespace, makes every mount private
(nothing propagates back to the host), binds each volume at its `mountPath` (read-only where
the spec says, and always for configMap, secret, downwardAPI and projected volumes, as the
kubelet does), then execs the command. The rest of the host's filesystem stays visible. A
`subPath` binds the one file or directory, resolved when the container starts, so like in
Kubernetes it does not follow later updates. A missing mount point is created on the host
(an empty directory or file), since a mount needs one.

Without root, nothing can be mounted: each mount's real location is in `TETHER_MOUNT_<PATH>`
(`mount_env_name`), which tether's own in-cluster loader honours.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.local.kubelet import environment
from tether.objects import ObjView as Obj
from tether.objects.podfiles import mount_env_name

DEFAULT_MODE = 0o644
ATOMIC_KINDS = ("configMap", "secret", "downwardAPI", "projected")
DATA_LINK = "..data"
PROBE_TIMEOUT_S = 10.0
# The token a projected serviceAccountToken source asks for: (pod, source) -> token text.
TokenSource = Callable[[Obj, Obj], str]


@dataclass(frozen=True)
class File:
    data: bytes
    mode: int = DEFAULT_MODE


Payload = Mapping[str, File]  # relative path -> content


def volume_kind(volume: Obj) -> str:
    for kind in (*ATOMIC_KINDS, "emptyDir", "hostPath"):
        if kind in volume:
            return kind
    return "other"


# what the files hold (pure) ------------------------------------------------------------------


def _mode(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 0o777 else default


def _object_files(kind: str, source: Obj, namespace: str, lookup: environment.Lookup,
                  default_mode: int) -> dict[str, File]:
    field = "secretName" if kind == "secret" and "secretName" in source else "name"
    name = str(source.get(field, ""))
    obj = lookup(namespace, name)
    optional = bool(source.get("optional"))
    if obj is None:
        if optional:
            return {}
        raise environment.ConfigError(f'{kind.lower()} "{name}" not found')
    decoded: dict[str, bytes] = {}
    if kind == "secret":
        decoded = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    else:
        decoded = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
        decoded.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
    items = source.get("items")
    if not items:
        return {k: File(v, default_mode) for k, v in decoded.items()}
    files: dict[str, File] = {}
    for item in items:
        key = str(item.get("key", ""))
        if key not in decoded:
            if optional:
                continue
            raise environment.ConfigError(f"{kind.lower()} references non-existent config key: {key}")
        files[str(item.get("path", key))] = File(decoded[key], _mode(item.get("mode"), default_mode))
    return files


def _field_text(pod: Obj, path: str) -> str:
    meta = pod.get("metadata") or {}
    if path in ("metadata.labels", "metadata.annotations"):
        values = meta.get(path.split(".", 1)[1]) or {}
        return "\n".join(f"{k}={json.dumps(str(v))}" for k, v in sorted(values.items()))
    return environment.field_value(pod, path)


def _downward_files(items: Sequence[Obj], pod: Obj, default_mode: int) -> dict[str, File]:
    files: dict[str, File] = {}
    for item in items:
        if "fieldRef" in item:
            text = _field_text(pod, str((item.get("fieldRef") or {}).get("fieldPath", "")))
        else:  # resourceFieldRef: local clusters do not account resources
            text = "0"
        files[str(item.get("path", ""))] = File(text.encode(), _mode(item.get("mode"), default_mode))
    return files


def payload(pod: Obj, volume: Obj, *, configmaps: environment.Lookup, secrets: environment.Lookup,
            token: TokenSource) -> dict[str, File]:
    """The files of a configMap, secret, downwardAPI or projected volume.

    Raises environment.ConfigError when a source it needs is missing (the kubelet's FailedMount).
    """
    namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
    kind = volume_kind(volume)
    source: Obj = volume.get(kind) or {}
    default_mode = _mode(source.get("defaultMode"), DEFAULT_MODE)
    if kind == "configMap":
        return _object_files("configMap", source, namespace, configmaps, default_mode)
    if kind == "secret":
        return _object_files("secret", source, namespace, secrets, default_mode)
    if kind == "downwardAPI":
        return _downward_files(source.get("items") or [], pod, default_mode)
    if kind != "projected":
        raise ValueError(f"volume kind {kind} has no payload")
    files: dict[str, File] = {}
    for part in source.get("sources") or []:
        if "configMap" in part:
            files.update(_object_files("configMap", part["configMap"], namespace, configmaps, default_mode))
        elif "secret" in part:
            files.update(_object_files("secret", part["secret"], namespace, secrets, default_mode))
        elif "downwardAPI" in part:
            files.update(_downward_files((part["downwardAPI"] or {}).get("items") or [], pod, default_mode))
        elif "serviceAccountToken" in part:
            spec = part["serviceAccountToken"] or {}
            files[str(spec.get("path", "token"))] = File(token(pod, spec).encode(), default_mode)
    return files


# writing them ----------------------------------------------------------------------------------


def write_atomic(target: Path, files: Payload) -> None:
    """Make `target` hold exactly `files`, switching from the old content in one rename."""
    target.mkdir(parents=True, exist_ok=True)
    stamp = f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns() % 10**9:09d}"
    fresh = target / stamp
    fresh.mkdir()
    for directory in (target, fresh):  # readable by a container's non-root user (not umask's)
        directory.chmod(0o755)
    for relative, content in files.items():
        parts = Path(relative).parts
        if not parts or relative.startswith("/") or ".." in parts:
            continue  # validation refuses such paths; never write outside the volume anyway
        directory = fresh
        for part in parts[:-1]:
            directory = directory / part
            if not directory.is_dir():
                directory.mkdir(mode=0o755)
        descriptor = os.open(directory / parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, content.mode)
        try:
            os.write(descriptor, content.data)
            os.fchmod(descriptor, content.mode)  # not the umask's idea of it
        finally:
            os.close(descriptor)
    link = target / DATA_LINK
    previous = os.readlink(link) if link.is_symlink() else None
    temporary = target / "..data_tmp"
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    temporary.symlink_to(stamp)
    temporary.replace(link)
    names = {Path(p).parts[0] for p in files if Path(p).parts}
    for name in names:
        entry = target / name
        if not entry.is_symlink():
            if entry.exists():
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            entry.symlink_to(f"{DATA_LINK}/{name}")
    for entry in target.iterdir():
        if entry.name.startswith(".."):
            continue
        if entry.name not in names and entry.is_symlink():
            entry.unlink()
    if previous and previous != stamp:
        shutil.rmtree(target / previous, ignore_errors=True)


def _check_host_path(volume: Obj) -> None:
    spec = volume.get("hostPath") or {}
    path, kind = Path(str(spec.get("path", ""))), str(spec.get("type") or "")
    if kind == "DirectoryOrCreate":
        path.mkdir(mode=0o755, parents=True, exist_ok=True)
    elif kind == "FileOrCreate":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o644, exist_ok=True)
    elif kind == "Directory" and not path.is_dir():
        raise environment.ConfigError(f"hostPath type check failed: {path} is not a directory")
    elif kind == "File" and not path.is_file():
        raise environment.ConfigError(f"hostPath type check failed: {path} is not a file")


def _no_token(pod: Obj, source: Obj) -> str:
    return ""


class PodVolumes:
    """One pod's volume directories (`<root>/<volume name>`), kept in step with the store."""

    def __init__(self, root: Path, *, configmaps: environment.Lookup, secrets: environment.Lookup,
                 token: TokenSource) -> None:
        self.root = root
        self.configmaps = configmaps
        self.secrets = secrets
        self.token = token
        self._written: dict[str, dict[str, File]] = {}

    def directory(self, name: str) -> Path:
        return self.root / name

    def sync(self, pod: Obj, *, write: bool = True) -> bool:
        """Write what changed; True when some volume's files did. Raises environment.ConfigError
        (with the volume's name) when a volume's source is missing. `write=False` only checks
        the sources (a pod without processes has nobody to read the files)."""
        changed = False
        token = self.token if write else _no_token
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            name = str(volume.get("name", ""))
            kind = volume_kind(volume)
            try:
                if kind == "hostPath":
                    if write:
                        _check_host_path(volume)
                    continue
                if kind not in ATOMIC_KINDS:  # emptyDir, and claims local clusters do not provision
                    if write:
                        self.directory(name).mkdir(parents=True, exist_ok=True)
                    continue
                files = payload(pod, volume, configmaps=self.configmaps, secrets=self.secrets, token=token)
            except environment.ConfigError as exc:
                raise environment.ConfigError(f'for volume "{name}" : {exc}') from None
            if write and self._written.get(name) != files:
                write_atomic(self.directory(name), files)
                self._written[name] = files
                changed = True
        return changed


# where a container sees them (pure) -----------------------------------------------------------


@dataclass(frozen=True)
class Bind:
    source: str  # the real file or directory
    target: str  # the container's mountPath
    read_only: bool


class MountError(Exception):
    """A mount that cannot be made (bad subPath, missing hostPath): the kubelet's CreateContainerConfigError."""


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def binds(pod: Obj, container: Obj, volume_dir: Callable[[str], Path], env: Mapping[str, str]) -> list[Bind]:
    """Each of the container's volumeMounts as a bind of a real path at its mountPath, parents
    before children. `subPath` is resolved now, and must stay inside its volume."""
    volumes = {str(v.get("name", "")): v for v in (pod.get("spec") or {}).get("volumes") or []}
    found: list[Bind] = []
    for mount in container.get("volumeMounts") or []:
        name, target = str(mount.get("name", "")), str(mount.get("mountPath", ""))
        volume = volumes.get(name)
        if volume is None or not target.startswith("/"):
            raise MountError(f'volumeMount "{name}" at "{target}" has no volume or a relative path')
        kind = volume_kind(volume)
        root = Path(str((volume.get("hostPath") or {}).get("path", ""))) if kind == "hostPath" else volume_dir(name)
        source = root
        sub = str(mount.get("subPath") or "")
        if not sub and mount.get("subPathExpr"):
            sub = environment.expand(str(mount["subPathExpr"]), env)
        if sub:
            if sub.startswith("/") or ".." in Path(sub).parts:
                raise MountError(f'subPath "{sub}" of volume "{name}" must be a relative path without ".."')
            source = Path(os.path.realpath(root / sub))
            if not _inside(source, Path(os.path.realpath(root))):
                raise MountError(f'subPath "{sub}" of volume "{name}" points outside the volume')
        read_only = bool(mount.get("readOnly")) or kind in ATOMIC_KINDS
        found.append(Bind(str(source), os.path.normpath(target), read_only))
    return sorted(found, key=lambda b: len(Path(b.target).parts))


def mount_env(bound: Sequence[Bind], *, mounted: bool = False) -> dict[str, str]:
    """`TETHER_MOUNT_<PATH>` for each mount: where its files really are; `mounted` (root,
    mount namespaces), at the mount path itself, since a volume at /tmp may hide the source."""
    return {mount_env_name(b.target): b.target if mounted else b.source for b in bound}


def prepare_sources(bound: Sequence[Bind]) -> None:
    """A subPath that does not exist yet becomes an empty directory, as the kubelet makes it."""
    for bind in bound:
        source = Path(bind.source)
        if not source.exists():
            source.mkdir(parents=True, exist_ok=True)


# the mount namespace ------------------------------------------------------------------------------

# argv: spec (JSON: binds, workingDir), then the command. No command: only check that it works.
MOUNT_SHIM = r"""
import ctypes, json, os, sys
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p)
def fail(what, code=128):
    sys.stderr.write("tether: " + what + "\n")
    sys.stderr.flush()
    os._exit(code)
def mount(source, target, flags, shown=None):
    if libc.mount(source.encode(), target.encode(), None, flags, None) != 0:
        fail("mount %s at %s: %s" % (shown or source, target, os.strerror(ctypes.get_errno())))
spec = json.loads(sys.argv[1])
if libc.unshare(0x00020000) != 0:
    fail("unshare(CLONE_NEWNS): " + os.strerror(ctypes.get_errno()))
mount("none", "/", MS_REC | MS_PRIVATE)
# Every source is opened before anything is mounted: a volume at /tmp (an emptyDir) must not
# hide the sources of the next binds when the cluster's data directory is under /tmp.
sources = []
for bind in spec.get("binds", []):
    try:
        sources.append((os.open(bind["source"], os.O_PATH), os.path.isdir(bind["source"])))
    except OSError as exc:
        fail("volume source %s: %s" % (bind["source"], exc.strerror))
# This install of tether (its interpreter, venv and sources) stays visible where a volume is
# mounted over it (an emptyDir at /tmp while the install lives under /tmp): pods of tether's
# image run it.
kept = []
for path in spec.get("keep", []):
    try:
        kept.append((path, os.open(path, os.O_PATH)))
    except OSError:
        pass
def make_mount_point(target, is_dir):
    try:
        if not os.path.lexists(target):
            if is_dir:
                os.makedirs(target, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                open(target, "a").close()
    except OSError as exc:
        fail("creating mount point %s: %s" % (target, exc.strerror))
for bind, (fd, is_dir) in zip(spec.get("binds", []), sources):
    source, target = bind["source"], bind["target"]
    make_mount_point(target, is_dir)
    mount("/proc/self/fd/%d" % fd, target, MS_BIND | MS_REC, source)
    os.close(fd)
for path, fd in kept:
    make_mount_point(path, True)
    mount("/proc/self/fd/%d" % fd, path, MS_BIND | MS_REC, path)
    mount("none", path, MS_BIND | MS_REMOUNT | MS_RDONLY)
    os.close(fd)
for bind in spec.get("binds", []):
    if bind.get("ro"):
        mount("none", bind["target"], MS_BIND | MS_REMOUNT | MS_RDONLY)
argv = sys.argv[2:]
if not argv:
    os._exit(0)
if spec.get("workingDir"):
    try:
        os.chdir(spec["workingDir"])
    except OSError as exc:
        fail("chdir to %s: %s" % (spec["workingDir"], exc.strerror))
try:
    os.execvp(argv[0], argv)
except OSError as exc:
    code = 127 if isinstance(exc, FileNotFoundError) else 126
    fail('exec: "%s": %s' % (argv[0], "executable file not found in $PATH" if code == 127 else exc.strerror), code)
"""


# argv: the container's process id, the working directory, then the command.
ENTER_SHIM = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def fail(what, code=126):
    sys.stderr.write("tether: " + what + "\n")
    sys.stderr.flush()
    os._exit(code)
try:
    fd = os.open("/proc/%s/ns/mnt" % sys.argv[1], os.O_RDONLY)
except OSError as exc:
    fail("the container is not running: " + exc.strerror)
if libc.setns(fd, 0x00020000) != 0:
    fail("setns: " + os.strerror(ctypes.get_errno()))
os.close(fd)
try:
    os.chdir(sys.argv[2])
except OSError:
    os.chdir("/")
argv = sys.argv[3:]
try:
    os.execvp(argv[0], argv)
except OSError as exc:
    code = 127 if isinstance(exc, FileNotFoundError) else 126
    fail('exec: "%s": %s' % (argv[0], "executable file not found in $PATH" if code == 127 else exc.strerror), code)
"""


def enter_argv(pid: int, working_dir: str) -> list[str]:
    """What goes before a command to run it in a running container's mount namespace (exec,
    exec probes): it sees what the container sees, subPath files as they were at its start."""
    return [sys.executable, "-I", "-S", "-c", ENTER_SHIM, str(pid), working_dir]


def install_paths() -> list[str]:
    """Where this install of tether lives: the interpreter's prefixes (a venv and its base) and
    the directory the `tether` package is imported from (an editable install's sources)."""
    package_root = Path(__file__).resolve().parents[3]  # .../tether/local/kubelet/volumes.py
    found = [os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, str(package_root))]
    return sorted(set(found), key=len)


def hidden_install_paths(bound: Sequence[Bind], paths: Sequence[str] | None = None) -> list[str]:
    """The install paths a mount would hide (they lie under a mount's target): bound back."""
    return [p for p in (install_paths() if paths is None else paths)
            if any(_inside(Path(p), Path(b.target)) for b in bound)]


def shim_argv(bound: Sequence[Bind], working_dir: str = "") -> list[str]:
    """What goes before a container's command to run it with its volumes at their mount paths."""
    spec: dict[str, Any] = {"binds": [{"source": b.source, "target": b.target, "ro": b.read_only} for b in bound]}
    keep = hidden_install_paths(bound)
    if keep:
        spec["keep"] = keep
    if working_dir:
        spec["workingDir"] = working_dir
    return [sys.executable, "-I", "-S", "-c", MOUNT_SHIM, json.dumps(spec, separators=(",", ":"))]


async def mount_namespaces_work(prefix: Sequence[str] = ()) -> bool:
    """Whether this process may make mount namespaces (root with CAP_SYS_ADMIN, no seccomp ban)."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return False
    try:
        process = await asyncio.create_subprocess_exec(
            *prefix, *shim_argv([]), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        return await asyncio.wait_for(process.wait(), PROBE_TIMEOUT_S) == 0
    except (OSError, TimeoutError):
        return False
