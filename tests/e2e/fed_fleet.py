"""A hub and members on local clusters, for the federation end-to-end tests.

All clusters live in one data dir (one kubeconfig, one context per cluster); the hub runs as
`python -m tether hub run` with a resync far longer than any wait in these tests, so what they
see arrives through events, never through the periodic resync.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e_util import root_conftest

from tether.kube import KubeClient, NotFound

WAIT_S = 45.0
RESYNC_S = "900"  # longer than every test here: nothing may depend on it
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def tether(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True,
                          text=True, timeout=timeout)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@dataclass
class Fleet:
    data_dir: Path
    members: tuple[str, ...]
    cache: Path
    hub_proc: subprocess.Popen[bytes] | None = None
    hub_runs: int = 0
    hub_args: tuple[str, ...] = ()  # more `tether hub run` flags

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "kubeconfig"

    def kubectl(self, context: str, *args: str, check: bool = True, input: str | None = None,
                timeout: float = 90) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig),
               "KUBECACHEDIR": str(self.cache / context)}
        result = subprocess.run([root_conftest().kubectl_binary(), "--context", context, *args],
                                input=input, capture_output=True, text=True, timeout=timeout,
                                env=env)
        if check:
            assert result.returncode == 0, f"kubectl {' '.join(args)}:\n{result.stdout}{result.stderr}"
        return result

    def client(self, context: str) -> KubeClient:
        return KubeClient.from_kubeconfig(self.kubeconfig, context)

    async def get(self, context: str, api_version: str, kind: str, name: str,
                  namespace: str | None = None) -> dict[str, Any] | None:
        async with self.client(context) as client:
            try:
                return await client.get(api_version, kind, name, namespace)
            except NotFound:
                return None

    def hub_log(self, run: int) -> Path:
        return self.data_dir / f"hub-{run}.log"

    def start_hub(self) -> None:
        assert self.hub_proc is None
        self.hub_runs += 1
        log = self.hub_log(self.hub_runs)
        with log.open("wb") as out:
            self.hub_proc = subprocess.Popen(
                [sys.executable, "-m", "tether", "hub", "run", "--kubeconfig",
                 str(self.kubeconfig), "--context", "host", "--port", "0", "--health-period",
                 "0.5", "--health-threshold", "1", "--resync", RESYNC_S, "--verbose",
                 *self.hub_args],
                stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while "http://127.0.0.1:" not in log.read_text():
            assert self.hub_proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)

    def stop_hub(self) -> None:
        proc, self.hub_proc = self.hub_proc, None
        if proc is None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def wait_members_ready(self, timeout_s: float = 120.0) -> None:
        """Until the hub's health controller has seen every member Ready. A template scheduled
        before that is divided over the members ready so far, and (as in Karmada) a divided
        schedule is kept when the others turn Ready later."""
        deadline = time.monotonic() + timeout_s
        while True:
            out = self.kubectl("host", "get", "clusters.cluster.tether.io", "-o", "json").stdout
            ready = {str(c["metadata"]["name"]) for c in json.loads(out)["items"]
                     if any(cond.get("type") == "Ready" and cond.get("status") == "True"
                            for cond in (c.get("status") or {}).get("conditions") or [])}
            if ready >= set(self.members):
                return
            assert time.monotonic() < deadline, f"members not Ready: {set(self.members) - ready}"
            time.sleep(0.2)

    @contextmanager
    def hub_stopped(self) -> Iterator[None]:
        self.stop_hub()
        try:
            yield
        finally:
            self.start_hub()

    def tracebacks(self) -> list[str]:
        logs = [self.hub_log(i).read_text() for i in range(1, self.hub_runs + 1)]
        return [log for log in logs if "Traceback" in log]

    def join(self, name: str, *extra: str) -> None:
        ok(tether("join", name, "--cluster-context", name, "--host-kubeconfig",
                  str(self.kubeconfig), "--host-context", "host", *extra))

    def unjoin(self, name: str, *extra: str) -> None:
        ok(tether("unjoin", name, "--host-kubeconfig", str(self.kubeconfig), "--host-context",
                  "host", *extra))


@contextmanager
def fleet_of(data_dir: Path, cache: Path, members: tuple[str, ...]) -> Iterator[Fleet]:
    """`host` plus `members`, the hub installed, every member joined, the hub running."""
    args = ["local", "up", "--data-dir", str(data_dir), "--name", "host"]
    for name in members:
        args += ["--name", name]
    ok(tether(*args, timeout=180))
    fleet = Fleet(data_dir, members, cache)
    try:
        ok(tether("hub", "install", "--kubeconfig", str(fleet.kubeconfig), "--context", "host"))
        for name in members:
            fleet.join(name)
        fleet.start_hub()
        fleet.wait_members_ready()
        yield fleet
    finally:
        try:
            fleet.stop_hub()
        finally:
            tether("local", "down", "--data-dir", str(data_dir))


async def until(check: Callable[[], Awaitable[Any]], what: str, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = await check()
        except NotFound as exc:
            last = exc
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last: {last!r}")
        await asyncio.sleep(0.2)


def report(obj: dict[str, Any] | None) -> dict[str, Any]:
    """A Karmada template's `tether.io/propagation-status` annotation, parsed."""
    raw = ((obj or {}).get("metadata", {}).get("annotations") or {}).get(
        "tether.io/propagation-status")
    return json.loads(raw) if raw else {}
