"""Download a container's volumes into a local directory, and keep the API-built ones current.

ConfigMap, Secret, downwardAPI and projected volumes are written from the API (no pod needed;
a projected ServiceAccount token comes from the TokenRequest API, as the kubelet gets it).
Other volumes (emptyDir, hostPath, persistentVolumeClaim, ...) are copied from the running pod
through `exec`: `tar` streamed out of the container when the image has it; otherwise a fallback
that needs only `sh`, `find`, `ls` and `cat` (one listing, then one `cat` per file), so a
distroless-ish image with a shell still works. File modes are kept either way.

Each volume lands in `<root>/<volume name>` unless a local path is given for it; the
`TETHER_VOLUME_<NAME>` variables name those directories.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tether.bridge.api import Resolved, client_for, resolve_environment, run_sync
from tether.bridge.envresolve import ResolveError, Source, Unknowable, Variable
from tether.bridge.volumefiles import File, Mount, api_files, mounts, referenced_objects
from tether.kube import Backoff, Expired, KubeClient, KubeError, ServerError, Unreachable
from tether.kube.podexec import run as exec_run

Log = Callable[[str], None]
Method = Literal["auto", "tar", "shell"]
_NO_SUCH_COMMAND = (126, 127)
_LS_LINE = re.compile(r"([dl-])([rwxsStT-]{9})\S*\s+(.*)")


class VolumeError(ResolveError):
    pass


@dataclass(frozen=True)
class Downloaded:
    name: str
    kind: str
    path: Path
    mount_path: str
    from_api: bool


def env_name(volume: str) -> str:
    return "TETHER_VOLUME_" + re.sub(r"[^A-Za-z0-9]", "_", volume).upper()


def path_variables(downloaded: Mapping[str, Downloaded]) -> list[Variable]:
    return [Variable(env_name(d.name), str(d.path), Source("volume", f"{d.kind} {d.name} from {d.mount_path}"))
            for d in downloaded.values()]


# writing ----------------------------------------------------------------------------------------


def write_files(directory: Path, files: Mapping[str, File]) -> None:
    """Make `directory` hold exactly `files` (a fresh copy swapped in, so readers see old or new)."""
    staging = directory.with_name(f".{directory.name}.tether-new")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for relative, file in sorted(files.items()):
        target = staging / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(file.data)
        os.chmod(target, file.mode)
    old = directory.with_name(f".{directory.name}.tether-old")
    shutil.rmtree(old, ignore_errors=True)
    if directory.exists():
        directory.rename(old)
    staging.rename(directory)
    shutil.rmtree(old, ignore_errors=True)


def parse_mode(text: str) -> int:
    """`rwxr-x---`-style permission bits (with s/S/t/T) as an int (without the special bits)."""
    mode = 0
    for index, char in enumerate(text[:9]):
        if char not in "-ST":
            mode |= 1 << (8 - index)
    return mode


def parse_listing(listing: str) -> list[tuple[str, int, str]]:
    """`ls -ldn` lines (one per path; the path after the fixed columns) as (type, mode, path)."""
    entries: list[tuple[str, int, str]] = []
    for line in listing.splitlines():
        match = _LS_LINE.match(line)
        if not match:
            continue
        columns = match.group(3).split(None, 7)  # links, uid, gid, size, month, day, time|year, path
        if len(columns) < 8:
            continue
        path = columns[7]
        if not path.startswith("./") and path != ".":
            continue
        entries.append((match.group(1), parse_mode(match.group(2)), path))
    return entries


# copying out of the pod ---------------------------------------------------------------------------


async def _tar_copy(client: KubeClient, resolved: Resolved, pod: str, mount: Mount, directory: Path) -> bool:
    """True when copied; False when the container has no tar. The archive is spooled to disk."""
    with tempfile.TemporaryFile() as archive_file:
        result = await exec_run(client, resolved.namespace, pod, resolved.container_name,
                                ["tar", "cf", "-", "-C", mount.mount_path, "."], stdout_sink=archive_file.write)
        got_archive = archive_file.tell() > 0
        if result.exit_code in _NO_SUCH_COMMAND or (result.exit_code != 0 and not got_archive
                                                     and b"not found" in result.stderr + result.message.encode()):
            return False
        if result.exit_code not in (0, 1):  # GNU tar exits 1 when a file changed while it read it
            raise VolumeError(f"copying volume {mount.name} from {mount.mount_path} with tar failed "
                              f"(exit {result.exit_code}): {result.stderr.decode('utf-8', 'replace').strip()}"
                              f"{result.message}")
        archive_file.seek(0)
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        with tarfile.open(fileobj=archive_file, mode="r:") as archive:
            archive.extractall(directory, filter="tar")
    directory.chmod(0o755)
    return True


async def _shell_copy(client: KubeClient, resolved: Resolved, pod: str, mount: Mount, directory: Path) -> None:
    """Without tar: list with `find` + `ls -ldn`, then `cat` each regular file."""
    script = f"cd {shlex.quote(mount.mount_path)} && find . \\( -type d -o -type f \\) -exec ls -ldn {{}} +"
    listing = await exec_run(client, resolved.namespace, pod, resolved.container_name, ["sh", "-c", script])
    if listing.exit_code in _NO_SUCH_COMMAND or listing.exit_code < 0:
        raise VolumeError(f"cannot copy volume {mount.name}: the container has neither tar nor a shell "
                          f"with find, ls and cat ({listing.message or listing.stderr.decode('utf-8', 'replace').strip()}); "
                          f"use an image with tar, or mount the volume in a debug container")
    if listing.exit_code != 0:
        raise VolumeError(f"listing volume {mount.name} at {mount.mount_path} failed: "
                          f"{listing.stderr.decode('utf-8', 'replace').strip()}")
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    for kind, mode, path in sorted(parse_listing(listing.stdout.decode("utf-8", "replace")), key=lambda e: e[2]):
        local = directory / path[2:] if path != "." else directory
        if kind == "d":
            local.mkdir(parents=True, exist_ok=True)
            continue
        content = await exec_run(client, resolved.namespace, pod, resolved.container_name,
                                 ["cat", f"{mount.mount_path.rstrip('/')}/{path[2:]}"])
        if content.exit_code != 0:
            raise VolumeError(f"reading {path[2:]} of volume {mount.name} failed: "
                              f"{content.stderr.decode('utf-8', 'replace').strip()}")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(content.stdout)
        os.chmod(local, mode)


async def copy_from_pod(client: KubeClient, resolved: Resolved, mount: Mount, directory: Path, *,
                        method: Method = "auto", log: Log | None = None) -> None:
    if not resolved.facts.running:
        raise VolumeError(f"volume {mount.name} ({mount.kind}) lives in the pod, and no pod of the target "
                          f"is running: start one, or leave this volume out")
    pod = str((resolved.facts.pod.get("metadata") or {}).get("name"))
    if method in ("auto", "tar"):
        if await _tar_copy(client, resolved, pod, mount, directory):
            return
        if method == "tar":
            raise VolumeError(f"the container {resolved.container_name} of pod {pod} has no tar")
        if log:
            log(f"container {resolved.container_name} has no tar: copying volume {mount.name} file by file")
    await _shell_copy(client, resolved, pod, mount, directory)


# from the API -----------------------------------------------------------------------------------------


async def _token(client: KubeClient, resolved: Resolved, spec: Mapping[str, object]) -> str:
    pod_spec = resolved.facts.pod.get("spec") or {}
    account = str(pod_spec.get("serviceAccountName") or "default")
    request: dict[str, object] = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                  "spec": {"expirationSeconds": int(str(spec.get("expirationSeconds") or 3600))}}
    if spec.get("audience"):
        request["spec"] = {**request["spec"], "audiences": [str(spec["audience"])]}  # type: ignore[dict-item]
    if resolved.facts.running:
        meta = resolved.facts.pod.get("metadata") or {}
        request["spec"] = {**request["spec"], "boundObjectRef": {  # type: ignore[dict-item]
            "apiVersion": "v1", "kind": "Pod", "name": meta.get("name"), "uid": meta.get("uid")}}
    path = (f"/api/v1/namespaces/{resolved.namespace}/serviceaccounts/{account}/token")
    answer = await client.request("POST", path, body=request)
    return str((answer.get("status") or {}).get("token", ""))


async def _fetch(client: KubeClient, kind: str, names: set[str], namespace: str) -> dict[str, object]:
    found: dict[str, object] = {}
    for name in sorted(names):
        obj = await client.get_or_none("v1", kind, name, namespace)
        if obj is not None:
            found[name] = obj
    return found


async def render_api_volume(client: KubeClient, resolved: Resolved, mount: Mount) -> dict[str, File]:
    configmap_names, secret_names = referenced_objects([mount])
    configmaps = await _fetch(client, "ConfigMap", configmap_names, resolved.namespace)
    secrets = await _fetch(client, "Secret", secret_names, resolved.namespace)
    tokens: dict[str, str] = {}
    for part in (mount.volume.get("projected") or {}).get("sources") or []:
        if "serviceAccountToken" in part:
            spec = part["serviceAccountToken"] or {}
            tokens[str(spec.get("path") or "token")] = await _token(client, resolved, spec)
    try:
        return api_files(resolved.facts, mount, container=resolved.container, configmaps=configmaps,  # type: ignore[arg-type]
                         secrets=secrets, token=lambda spec: tokens[str(spec.get("path") or "token")])  # type: ignore[arg-type]
    except Unknowable as exc:
        raise VolumeError(f"volume {mount.name}: {exc}") from None


async def download(client: KubeClient, resolved: Resolved, root: Path, *,
                   local_paths: Mapping[str, Path] | None = None, method: Method = "auto",
                   log: Log | None = None) -> dict[str, Downloaded]:
    """Every volume the container mounts, into `root/<name>` or its entry in `local_paths`."""
    root = root.expanduser().resolve()
    downloaded: dict[str, Downloaded] = {}
    for mount in mounts(resolved.facts, resolved.container_name):
        directory = ((local_paths or {}).get(mount.name) or root / mount.name).expanduser().resolve()
        directory.parent.mkdir(parents=True, exist_ok=True)
        if log:
            log(f"downloading volume {mount.name} ({mount.kind}) from {mount.mount_path} to {directory}")
        if mount.from_api:
            write_files(directory, await render_api_volume(client, resolved, mount))
        else:
            try:
                await copy_from_pod(client, resolved, mount, directory, method=method, log=log)
            except KubeError as exc:
                raise VolumeError(f"copying volume {mount.name} from the pod failed: {exc}") from None
        downloaded[mount.name] = Downloaded(mount.name, mount.kind, directory, mount.mount_path, mount.from_api)
    return downloaded


async def watch(client: KubeClient, resolved: Resolved, downloaded: Mapping[str, Downloaded], *,
                log: Log | None = None, stop: asyncio.Event | None = None) -> None:
    """Rewrite the API-built volumes whenever a ConfigMap or Secret they use changes (watches,
    not polling). Runs until `stop` is set or the task is cancelled."""
    watched = [m for m in mounts(resolved.facts, resolved.container_name) if m.from_api and m.name in downloaded]
    configmap_names, secret_names = referenced_objects(watched)

    last: dict[str, dict[str, File]] = {}  # what each volume holds now, to skip no-op rewrites

    async def refresh(kind: str, name: str, why: str) -> None:
        for mount in watched:
            used_configmaps, used_secrets = referenced_objects([mount])
            if name not in (used_configmaps if kind == "ConfigMap" else used_secrets):
                continue
            try:
                files = await render_api_volume(client, resolved, mount)
                if last.get(mount.name) == files:
                    continue
                write_files(downloaded[mount.name].path, files)
                if log and mount.name in last:
                    log(f"volume {mount.name} updated ({kind} {name} {why})")
                last[mount.name] = files
            except ResolveError as exc:
                if log:
                    log(f"volume {mount.name} not updated: {exc}")

    async def follow(kind: str, names: set[str]) -> None:
        """List once, then watch from there; after a 410 list again and rewrite everything."""
        if not names:
            return
        backoff = Backoff(base_s=0.5, max_s=30.0)
        failures = 0
        resource_version = ""
        while stop is None or not stop.is_set():
            try:
                if not resource_version:
                    listed = await client.list_all("v1", kind, resolved.namespace)
                    resource_version = listed.resource_version
                    for name in sorted(names):  # changes since the download or the last watch
                        await refresh(kind, name, "relisted")
                async for event in client.watch("v1", kind, resolved.namespace, resource_version=resource_version):
                    resource_version = event.resource_version or resource_version
                    name = str((event.object.get("metadata") or {}).get("name", ""))
                    if event.type != "BOOKMARK" and name in names:
                        await refresh(kind, name, event.type.lower())
                failures = 0
            except Expired:
                resource_version, failures = "", failures + 1
            except (Unreachable, ServerError) as exc:
                failures += 1
                if log:
                    log(f"watching {kind}s: {exc}; retrying")
                await asyncio.sleep(backoff.delay_s(failures))

    tasks = [asyncio.create_task(follow("ConfigMap", configmap_names)),
             asyncio.create_task(follow("Secret", secret_names))]
    try:
        if stop is not None:
            stopper = asyncio.create_task(stop.wait())
            await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
        else:
            await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def volumes(target: str, to: Path, *, namespace: str | None = None, container: str | None = None,
            context: str | None = None, kubeconfig: Path | None = None,
            method: Method = "auto") -> dict[str, Downloaded]:
    """Download `target`'s volumes into `to` (see `download`), for scripts, tests and notebooks."""

    async def run() -> dict[str, Downloaded]:
        client, default_namespace = client_for(context, kubeconfig)
        async with client:
            resolved = await resolve_environment(client, target, namespace=namespace or default_namespace,
                                                 container=container)
            return await download(client, resolved, to, method=method)

    return run_sync(run)
