"""`tether local`: run several local clusters in one process, in the foreground or as a daemon."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import ssl
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.local import kubeconfig, netns, network, roles
from tether.local.cluster import ClusterConfig, LocalCluster
from tether.net import daemon
from tether.net.connections import ConnectionLimits

START_TIMEOUT_S = 60.0
DEFAULT_UNAUTHENTICATED = ConnectionLimits().max_unauthenticated_per_address
STOP_TIMEOUT_S = 15.0


class LocalError(Exception):
    """A `tether local` failure with a message that says what to do."""


def default_data_dir() -> Path:
    """Local clusters keep their files at the root of tether's state (`$TETHER_HOME`), next to
    the agents', the hub's and the proxy kubeconfigs. Releases before kept them in `local/`
    below it: that directory is still used while it holds clusters and the root does not."""
    root = daemon.state_home()
    legacy = root / "local"
    if not (root / "clusters").exists() and (legacy / "clusters").is_dir():
        return legacy
    return root


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def clusters(self) -> Path:
        return self.root / "clusters"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def state(self) -> Path:
        return self.root / "daemon.json"

    @property
    def log(self) -> Path:
        return self.root / "daemon.log"

    def existing_names(self) -> list[str]:
        if not self.clusters.is_dir():
            return []
        names_file = self.root / "clusters.json"
        if names_file.exists():
            names: list[str] = json.loads(names_file.read_text())
            return names
        return sorted(p.name for p in self.clusters.iterdir() if p.is_dir())

    def remember_names(self, names: list[str]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "clusters.json").write_text(json.dumps(names))


def choose_names(layout: Layout, count: int | None, names: list[str], hubs: tuple[str, ...] = (),
                 role: str | None = None) -> list[str]:
    """--name, else the kept clusters (unless --clusters), else cluster1..N; --hub names are
    added in front. A lone `--role hub` starts one hub called `hub`."""
    if not names:
        existing = layout.existing_names()
        if existing and count is None:
            names = existing
        elif count is None and role == roles.HUB and not hubs:
            names = [roles.DEFAULT_HUB_NAME]
        else:
            names = [f"cluster{i}" for i in range(1, (count or 1) + 1)]
    return roles.plan_names(names, hubs)


def read_state(layout: Layout) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(layout.state.read_text())
    except (OSError, ValueError):
        return None
    pid = int(state.get("pid", 0))
    if pid <= 0 or not daemon.alive(pid):
        return None
    return state


async def serve(layout: Layout, names: list[str], *, compact_keep: int = 50_000, nodes: int = 1,
                netns: bool | None = None, isolate_api: tuple[str, ...] = (),
                max_unauthenticated: int = DEFAULT_UNAUTHENTICATED,
                hubs: tuple[str, ...] = (), role: str | None = None) -> None:
    """Run the clusters until SIGTERM or SIGINT; state is written once all of them serve.
    `hubs` are API-only hubs; the others get `role` (None: the role kept in their data)."""
    os.umask(0o077)  # state, keys and logs are for this user only
    names = roles.plan_names(names, hubs)
    unknown = set(isolate_api) - set(names)
    if unknown:
        raise LocalError(f"--isolate-api names no cluster being started: {', '.join(sorted(unknown))}")
    try:
        wanted = roles.resolve(layout.clusters, roles.wanted_roles(names, hubs, role))
    except roles.RoleError as exc:
        raise LocalError(str(exc)) from None
    clusters = [
        LocalCluster(ClusterConfig(name=n, data_dir=layout.clusters / n, compact_keep=compact_keep,
                                   nodes=nodes, netns=netns, isolate_api=n in isolate_api,
                                   max_unauthenticated_per_address=max_unauthenticated,
                                   role=wanted[n]))
        for n in names
    ]
    try:
        for cluster in clusters:
            await cluster.start()
    except BaseException:
        for cluster in clusters:  # the ones already started own namespaces in netns mode
            await cluster.close_network()
        raise
    layout.remember_names(names)
    kubeconfig.write(layout.kubeconfig, [kubeconfig.ClusterAccess(c.config.name, c.url, c.pki) for c in clusters])
    state = {
        "pid": os.getpid(),
        "started": time.time(),
        "kubeconfig": str(layout.kubeconfig),
        "clusters": [{"name": c.config.name, "server": c.url, "dataDir": str(c.config.data_dir),
                      "role": c.role} for c in clusters],
    }
    layout.state.write_text(json.dumps(state, indent=2))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(c.run()) for c in clusters]
            await stop.wait()
            for task in tasks:
                task.cancel()
    finally:
        with contextlib.suppress(OSError):
            current = json.loads(layout.state.read_text())
            if current.get("pid") == os.getpid():
                layout.state.unlink()


def start_daemon(layout: Layout, names: list[str], *, nodes: int = 1, compact_keep: int = 50_000,
                 netns: bool | None = None, progress: Callable[[str], None] | None = None,
                 isolate_api: tuple[str, ...] = (),
                 max_unauthenticated: int = DEFAULT_UNAUTHENTICATED,
                 hubs: tuple[str, ...] = (), role: str | None = None) -> dict[str, Any]:
    """Start `names` in a background process; its state once all of them serve. `hubs` are
    API-only hubs, the others get `role` (None: the kept one); a role a cluster's kept data
    refuses is a LocalError before anything starts."""
    names = roles.plan_names(names, hubs)
    try:
        roles.resolve(layout.clusters, roles.wanted_roles(names, hubs, role))
    except roles.RoleError as exc:
        raise LocalError(str(exc)) from None
    layout.root.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        layout.state.unlink()
    command = [sys.executable, "-m", "tether", "local", "up", "--foreground", "--data-dir", str(layout.root),
               "--nodes", str(nodes), "--compact-keep", str(compact_keep)]
    for name in names:
        command += ["--name", name]
    if netns is not None:
        command.append("--netns" if netns else "--no-netns")
    for name in isolate_api:
        command += ["--isolate-api", name]
    for name in hubs:
        command += ["--hub", name]
    if role is not None:
        command += ["--role", role]
    if max_unauthenticated != DEFAULT_UNAUTHENTICATED:
        command += ["--max-unauthenticated-connections", str(max_unauthenticated)]
    log_offset = layout.log.stat().st_size if layout.log.exists() else 0
    process = daemon.spawn(command, layout.log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if progress is not None:
            log_offset = _report_progress(layout.log, log_offset, progress)
        if process.poll() is not None:
            raise LocalError(f"the local clusters failed to start (exit {process.returncode}); see {layout.log}")
        state = read_state(layout)
        if state and state.get("pid") == process.pid:
            return state
        time.sleep(0.1)
    process.terminate()
    raise LocalError(f"the local clusters did not start within {START_TIMEOUT_S:.0f}s; see {layout.log}")


def _report_progress(log: Path, offset: int, progress: Callable[[str], None]) -> int:
    """Tell `progress` about each cluster the daemon's log says is serving; returns the new offset."""
    try:
        with log.open("rb") as handle:
            handle.seek(offset)
            chunk = handle.read()
    except OSError:
        return offset
    complete = chunk.rfind(b"\n") + 1
    for line in chunk[:complete].decode("utf-8", "replace").splitlines():
        if "serving on" in line and "cluster " in line:
            progress(line.split("cluster ", 1)[1].strip())
    return offset + complete


def stop_daemon(layout: Layout) -> bool:
    state = read_state(layout)
    if state is None:
        return False
    daemon.stop(int(state["pid"]), stop_s=STOP_TIMEOUT_S)
    with contextlib.suppress(FileNotFoundError):
        layout.state.unlink()
    remove_namespaces(state)
    return True


def remove_namespaces(state: dict[str, Any]) -> list[str]:
    """Remove what netns-mode clusters left behind (a daemon that had to be killed does not
    clean up); the namespaces and host devices that could not be removed. An index another
    running cluster has claimed meanwhile is left alone (the namespaces with its number are that
    cluster's now) except for host devices whose alias names this cluster's data directory."""
    left: list[str] = []
    for entry in state.get("clusters") or []:
        try:
            found = json.loads((Path(entry["dataDir"]) / "network.json").read_text())
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if found.get("mode") != network.NETNS or not isinstance(found.get("index"), int):
            continue
        claim = network.try_claim(found["index"])
        if claim is None:
            left += netns.remove_devices_of(found["index"], owner=netns.owner_tag(Path(entry["dataDir"])))
            continue
        try:
            left += netns.teardown_index(found["index"])
        finally:
            claim.release()
    return left


def remove_leftovers(layout: Layout) -> list[str]:
    """After a crash: remove the namespaces the clusters in `layout` left (if no one runs them)."""
    return remove_namespaces({"clusters": [{"dataDir": str(layout.clusters / n)} for n in layout.existing_names()]})


def probe_ready(server: str, ca_file: Path, timeout_s: float = 2.0) -> bool:
    context = ssl.create_default_context(cafile=str(ca_file))
    try:
        with urllib.request.urlopen(f"{server}/readyz", timeout=timeout_s, context=context) as response:
            return bool(response.status == 200)
    except OSError:
        return False
