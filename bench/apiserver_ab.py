"""A/B of the embedded API server between two source trees, both up at once.

    python bench/apiserver_ab.py OLD_SRC NEW_SRC                # e.g. two `git worktree`s' src/
    python bench/apiserver_ab.py OLD_SRC NEW_SRC --rounds 15 --scale 3 --labels 641bc6e 1b22a80

On a shared machine CPU per request moves with the load by more than the differences worth
finding, and runs one after the other see different loads. Here one local cluster per tree is
started (`python -m tether local up` with PYTHONPATH=<tree>, data dirs in a temporary directory,
reached only on 127.0.0.1 with each cluster's admin certificate) and both stay up; each round
runs the same phases against one then the other (the order flips every round), so both see the
same machine. Phases, 4 keep-alive connections (aiohttp): POST of ConfigMaps, GET /healthz, GET
of ConfigMaps; `--scale` multiplies each phase's request count (1,000 / 4,000 / 4,000 at 1).
Bounded: a fixed number of requests per phase and PHASE_TIMEOUT_S; both clusters are stopped
with `tether local down` at the end.

Server CPU is the server process's time on CPU from `/proc/<pid>/task/*/schedstat` (first field,
nanoseconds, summed over its threads; not its children), read before and after each phase. The
`utime`/`stime` of `/proc/<pid>/stat` this script used before count in 10 ms ticks, about 3 %
of a 4,000-request /healthz phase, too coarse for the few per cent worth finding. A thread that
exits during a phase takes its time with it; the server's threads (the event loop and its
executor's workers) live as long as the process.

Reported per phase and tree: each round's server CPU us per request, their median and
inter-quartile range; then the median and IQR of the per-round ratio new/old (each round's two
figures were taken back to back, so the ratio cancels most of the load's drift). Two server
processes of the same tree differ by up to ~3 % (an A/A run on 2026-12-02), so run a second
time with the trees in the other order before reading a difference that small.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import aiohttp

CONCURRENCY = 4
PHASES = (("create", 1_000), ("healthz", 4_000), ("get", 4_000))  # requests per phase at --scale 1
PHASE_TIMEOUT_S = 600.0


@dataclass
class Server:
    label: str
    src: str
    data_dir: str
    url: str
    pid: int
    context: ssl.SSLContext

    def cpu_ns(self) -> int:
        """Nanoseconds on CPU of every thread of the server process so far."""
        total = 0
        for schedstat in Path(f"/proc/{self.pid}/task").glob("*/schedstat"):
            try:
                total += int(schedstat.read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):  # a thread that just exited
                continue
        return total


def tether(src: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], env={**os.environ, "PYTHONPATH": src},
                          capture_output=True, text=True, timeout=180, check=False)


def start(label: str, src: str, data_dir: str, name: str) -> Server:
    result = tether(src, "local", "up", "--data-dir", data_dir, "--name", name, "--nodes", "1")
    if result.returncode != 0:
        raise SystemExit(f"tether local up ({label}) failed:\n{result.stdout}\n{result.stderr}")
    state = json.loads(Path(data_dir, "daemon.json").read_text())
    entry = state["clusters"][0]
    if not entry["server"].startswith("https://127.0.0.1:"):
        raise SystemExit(f"refusing to benchmark a non-local server {entry['server']}")
    pki = Path(entry["dataDir"]) / "pki"
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return Server(label, src, data_dir, entry["server"], int(state["pid"]), context)


def configmap(index: int) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": f"cm-{index:06d}", "labels": {"bench": "true"}},
                       "data": {"key": "value", "blob": "x" * 200}})


async def phase(server: Server, kind: str, count: int, first: int, stored: int) -> float:
    """Server CPU us per request of `count` requests of `kind` (creates named from `first`; GETs
    read the `stored` ConfigMaps the first round created)."""
    connector = aiohttp.TCPConnector(ssl=server.context, limit=CONCURRENCY)
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    url = f"{server.url}/api/v1/namespaces/bench/configmaps"
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:

        async def one(i: int) -> None:
            if kind == "create":
                request = session.post(url, data=configmap(first + i))
                want = 201
            elif kind == "healthz":
                request, want = session.get(f"{server.url}/healthz"), 200
            else:
                request, want = session.get(f"{url}/cm-{stored + i % stored:06d}"), 200
            async with request as response:
                body = await response.read()
                if response.status != want:
                    raise RuntimeError(f"{server.label} {kind}: {response.status} {body[:200]!r}")

        for _ in range(2 * CONCURRENCY):  # the connections are open before the clock starts
            async with session.get(f"{server.url}/healthz") as response:
                await response.read()
        todo = iter(range(count))

        async def worker() -> None:
            for i in todo:
                await one(i)

        cpu0 = server.cpu_ns()
        async with asyncio.timeout(PHASE_TIMEOUT_S):
            await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return (server.cpu_ns() - cpu0) / 1000 / count


async def measure(servers: list[Server], rounds: int,
                  phases: tuple[tuple[str, int], ...]) -> dict[tuple[str, str], list[float]]:
    namespace = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})
    for server in servers:
        async with (aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=server.context)) as session,
                    session.post(f"{server.url}/api/v1/namespaces", data=namespace,
                                 headers={"Content-Type": "application/json"}) as response):
            await response.read()
    results: dict[tuple[str, str], list[float]] = {}
    creates = phases[0][1]
    for r in range(rounds):
        for kind, count in phases:
            for server in servers if r % 2 == 0 else servers[::-1]:
                us = await phase(server, kind, count, creates * (r + 1), creates)
                results.setdefault((kind, server.label), []).append(us)
    return results


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """(Q1, median, Q3) of `values`; with fewer than two values all three are the one value."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old_src")
    parser.add_argument("new_src")
    parser.add_argument("--labels", nargs=2, default=("old", "new"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply every phase's request count (1,000 / 4,000 / 4,000 at 1)")
    args = parser.parse_args()
    phases = tuple((kind, max(1, round(count * args.scale))) for kind, count in PHASES)
    with tempfile.TemporaryDirectory(prefix="tether-ab-") as tmp:
        servers: list[Server] = []
        try:
            for k, (label, src) in enumerate(zip(args.labels, (args.old_src, args.new_src), strict=True)):
                servers.append(start(label, src, f"{tmp}/{k}", f"ab{k}"))
            results = asyncio.run(measure(servers, args.rounds, phases))
        finally:
            for server in servers:
                tether(server.src, "local", "down", "--data-dir", server.data_dir)
    old, new = args.labels
    counts = " / ".join(f"{count} {kind}" for kind, count in phases)
    print(f"server CPU us per request (schedstat), {args.rounds} rounds of {counts}, "
          f"load {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for kind, _ in phases:
        a, b = results[(kind, old)], results[(kind, new)]
        for label, values in ((old, a), (new, b)):
            q1, median, q3 = quartiles(values)
            print(f"{kind:8} {label:>10} median {median:8.2f}  IQR {q1:.2f}-{q3:.2f} "
                  f"({100 * (q3 - q1) / median:.1f} %)  rounds {' '.join(f'{x:.1f}' for x in values)}")
        ratios = [100 * (y / x - 1) for x, y in zip(a, b, strict=True)]
        q1, median, q3 = quartiles(ratios)
        worse = sum(1 for r in ratios if r > 0)
        print(f"{kind:8} {new} vs {old}: medians {100 * (statistics.median(b) / statistics.median(a) - 1):+.1f} %, "
              f"per-round ratio median {median:+.1f} % IQR {q1:+.1f} .. {q3:+.1f} %, "
              f"worse in {worse} of {len(ratios)} rounds")


if __name__ == "__main__":
    main()
