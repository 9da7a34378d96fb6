"""What the benchmarks share: one local cluster started through the CLI (optionally under
cProfile), its credentials and CPU/memory readings, and percentiles."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT_S = 60.0


@dataclass
class Cluster:
    data_dir: Path
    server: str
    pid: int
    ca: Path
    cert: Path
    key: Path
    process: subprocess.Popen[bytes] | None = None

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(self.cert), str(self.key))
        return context

    def cpu_s(self) -> float:
        """User + system CPU seconds the server process has used so far (not its children)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_kb(self) -> int:
        return status_kb(self.pid, "VmRSS")


def status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def tether(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                          timeout=120, check=False)


def start_cluster(data_dir: Path, profile: Path | None, *, nodes: int = 1) -> Cluster:
    """One cluster named `bench`, as a daemon, or in the foreground under cProfile."""
    process = None
    common = ["--data-dir", str(data_dir), "--name", "bench", "--nodes", str(nodes)]
    if profile is None:
        result = tether("local", "up", *common)
        if result.returncode != 0:
            raise SystemExit(f"tether local up failed:\n{result.stdout}\n{result.stderr}")
    else:
        # The same server in the foreground under cProfile; `local down` (SIGTERM) ends it cleanly.
        profile.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "cProfile", "-o", str(profile / "server.prof"), "-m", "tether",
                   "local", "up", "--foreground", *common]
        log = (data_dir / "profile.log").open("wb")
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (data_dir / "daemon.json").exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the profiled server did not start; see {data_dir / 'profile.log'}")
            time.sleep(0.1)
        time.sleep(0.2)
    state = json.loads((data_dir / "daemon.json").read_text())
    entry = state["clusters"][0]
    pki = Path(entry["dataDir"]) / "pki"
    server = entry["server"]
    if not server.startswith("https://127.0.0.1:"):
        raise SystemExit(f"refusing to benchmark a non-local server {server}")
    return Cluster(data_dir, server, int(state["pid"]), pki / "ca.crt", pki / "admin.crt", pki / "admin.key",
                   process)


def stop_cluster(cluster: Cluster) -> None:
    result = tether("local", "down", "--data-dir", str(cluster.data_dir))
    if result.returncode != 0:
        print(f"tether local down failed:\n{result.stdout}\n{result.stderr}", file=sys.stderr)
    if cluster.process is not None:
        try:
            cluster.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            cluster.process.send_signal(signal.SIGKILL)
            cluster.process.wait(timeout=10)


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]
