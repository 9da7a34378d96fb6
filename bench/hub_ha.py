"""Benchmark of hub leader election: how long the hub has no leader when the leader dies.

    python bench/hub_ha.py               # both timings, print a table, update docs/benchmarks.md
    python bench/hub_ha.py --no-write    # print only
    python bench/hub_ha.py --rounds 5

One API-only local cluster (`tether local up --hub hub`, `tether hub install`); two
`python -m tether hub run --leader-elect` replicas against it. Per round: wait until one leads
and the other follows; SIGKILL the leader (no release: the follower must wait out the Lease),
start a replacement, wait until it follows; SIGTERM the new leader (it releases the Lease). Each
takeover is the time from the signal to the moment the survivor's `/readyz` says it leads (its
controllers have synced: it is doing the leader's work), polled every 50 ms. Timings: client-go's
and kube-controller-manager's defaults (lease 15 s, renew deadline 10 s, retry 2 s) and the short
ones the e2e test uses (6 s, 4 s, 1 s). Everything started is stopped in `finally` blocks.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "## Hub leader election (takeover)"
WAIT_S = 120.0
TIMINGS = {"defaults": (15, 10, 2), "short": (6, 4, 1)}


def tether(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                            timeout=180, check=False)
    if result.returncode != 0:
        raise SystemExit(f"tether {' '.join(args)} failed: {result.stdout}{result.stderr}")
    return result.stdout


class Replica:
    def __init__(self, kubeconfig: Path, data_dir: Path, name: str, timing: tuple[int, int, int]) -> None:
        lease, renew, retry = timing
        self.log = (data_dir / f"{name}.log").open("w")
        env = dict(os.environ, PYTHONUNBUFFERED="1", POD_NAME=name)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tether", "hub", "run", "--kubeconfig", str(kubeconfig),
             "--context", "hub", "--port", "0", "--data-dir", str(data_dir / name), "--leader-elect",
             "--leader-elect-lease-duration", f"{lease}s", "--leader-elect-renew-deadline",
             f"{renew}s", "--leader-elect-retry-period", f"{retry}s"],
            stdout=subprocess.PIPE, stderr=self.log, text=True, env=env)
        self.url = ""
        self.identity = ""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + WAIT_S
        while not (self.url and self.identity) and time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit(f"{name} exited: see {self.log.name}")
            if "serving /healthz" in line:
                self.url = line.split()[-1]
            if "campaigning for Lease" in line:
                self.identity = line.split("leader election: ", 1)[1].split(" ", 1)[0]

    def readyz(self) -> str:
        try:
            with urllib.request.urlopen(self.url + "/readyz", timeout=5) as answer:
                return str(answer.read().decode())
        except (urllib.error.URLError, OSError):
            return ""

    def leads(self) -> bool:
        return f"leader: {self.identity} (this replica)" in self.readyz()

    def follows(self) -> bool:
        return "follows" in self.readyz()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()


def until(check: object, what: str) -> float:
    start = time.monotonic()
    while time.monotonic() - start < WAIT_S:
        if check():  # type: ignore[operator]
            return time.monotonic() - start
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


@dataclass
class Result:
    timing: tuple[int, int, int]
    killed: list[float] = field(default_factory=list)
    terminated: list[float] = field(default_factory=list)


def measure(kubeconfig: Path, data_dir: Path, timing: tuple[int, int, int], rounds: int) -> Result:
    result = Result(timing)
    count = 0

    def start() -> Replica:
        nonlocal count
        count += 1
        return Replica(kubeconfig, data_dir, f"r{timing[0]}-{count}", timing)

    live = [start()]
    try:
        until(lambda: live[0].leads(), "the first leader")
        live.append(start())
        for _ in range(rounds):
            leader, follower = (live[0], live[1]) if live[0].leads() else (live[1], live[0])
            until(follower.follows, "a follower")
            leader.proc.send_signal(signal.SIGKILL)
            result.killed.append(until(follower.leads, "takeover after SIGKILL"))
            leader.proc.wait(timeout=10)
            leader.stop()
            live = [follower, start()]
            until(live[1].follows, "the replacement following")
            follower.proc.send_signal(signal.SIGTERM)
            result.terminated.append(until(live[1].leads, "takeover after SIGTERM"))
            follower.proc.wait(timeout=30)
            follower.stop()
            live = [live[1], start()]
        return result
    finally:
        for replica in live:
            replica.stop()


def line(values: list[float]) -> str:
    return (f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f} s"
            if values else "-")


def report(results: list[Result], info: dict[str, str]) -> str:
    rows = ["| timings (lease / renew deadline / retry) | leader SIGKILLed: min / median / max | "
            "bound (lease + retry) | leader SIGTERMed (released): min / median / max |",
            "|---|---|---|---|"]
    for r in results:
        lease, renew, retry = r.timing
        rows.append(f"| {lease} s / {renew} s / {retry} s | {line(r.killed)} | {lease + retry} s | "
                    f"{line(r.terminated)} |")
    rounds = len(results[0].killed) if results else 0
    return f"""{SECTION}

Measured by `bench/hub_ha.py` on {info['date']}: {info['nproc']} CPUs, {info['os']}, CPython
{info['python']}; 1-minute load average {info['load']} when it ended. One API-only local cluster;
two `tether hub run --leader-elect` replicas; {rounds} rounds per timing. A takeover is the time
from the signal to the survivor's `/readyz` saying it leads with its controllers synced.

{chr(10).join(rows)}

A killed leader's Lease is taken once the follower has seen it unchanged for the lease
duration; the follower notices at its next retry, so the bound is lease + retry period (plus
the first sync of the new leader's controllers). A leader stopped with SIGTERM clears the
holder before it exits, and the follower takes over at its next retry.

### How to re-run

    python bench/hub_ha.py              # prints the table and rewrites this section
    python bench/hub_ha.py --no-write   # prints only
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-bench-ha-") as tmp:
        data_dir = Path(tmp)
        tether("local", "up", "--data-dir", str(data_dir), "--hub", "hub")
        try:
            kubeconfig = data_dir / "kubeconfig"
            tether("hub", "install", "--kubeconfig", str(kubeconfig), "--context", "hub")
            results = [measure(kubeconfig, data_dir, timing, args.rounds)
                       for timing in TIMINGS.values()]
        finally:
            subprocess.run([sys.executable, "-m", "tether", "local", "down", "--data-dir",
                            str(data_dir)], capture_output=True, timeout=180, check=False)
    info = {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "nproc": str(os.cpu_count()), "os": f"{platform.system()} {platform.release()}",
            "python": platform.python_version(), "load": f"{os.getloadavg()[0]:.2f}"}
    section = report(results, info)
    print(section)
    if args.no_write:
        return
    old = DOC.read_text()
    start = old.find(SECTION + "\n")
    if start < 0:
        text = old.rstrip("\n") + "\n\n" + section
    else:
        end = old.find("\n## ", start + 1)
        text = old[:start] + section + (old[end + 1:] if end >= 0 else "")
    DOC.write_text(text)
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
