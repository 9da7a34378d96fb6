"""A/B of the embedded API server between two source trees, both up at once.

    python bench/apiserver_ab.py OLD_SRC NEW_SRC                # e.g. two `git worktree`s' src/
    python bench/apiserver_ab.py OLD_SRC NEW_SRC --rounds 7 --labels da0a901 HEAD

On a shared machine CPU per request moves with the load by more than the differences worth
finding, and runs one after the other see different loads. Here one local cluster per tree is
started (`python -m tether local up` with PYTHONPATH=<tree>, data dirs in a temporary directory,
reached only on 127.0.0.1 with each cluster's admin certificate) and both stay up; each round
runs the same phases against one then the other (the order flips every round), so both see the
same machine. Phases, 4 keep-alive connections (aiohttp): POST of ConfigMaps, GET /healthz, GET
of ConfigMaps. Reported per phase: each round's server CPU per request (utime+stime of the
server process from /proc, not its children) and the median, for both trees. Bounded: a fixed
number of requests per phase and PHASE_TIMEOUT_S; both clusters are stopped with
`tether local down` at the end.
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
PHASES = (("create", 1_000), ("healthz", 4_000), ("get", 4_000))
PHASE_TIMEOUT_S = 300.0
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Server:
    label: str
    src: str
    data_dir: str
    url: str
    pid: int
    context: ssl.SSLContext

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK


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


async def phase(server: Server, kind: str, count: int, first: int) -> float:
    """Server CPU ms per request of `count` requests of `kind` (creates named from `first`)."""
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
                request, want = session.get(f"{url}/cm-{PHASES[0][1] + i % PHASES[0][1]:06d}"), 200
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

        cpu0 = server.cpu_s()
        async with asyncio.timeout(PHASE_TIMEOUT_S):
            await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return 1000 * (server.cpu_s() - cpu0) / count


async def measure(servers: list[Server], rounds: int) -> dict[tuple[str, str], list[float]]:
    namespace = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bench"}})
    for server in servers:
        async with (aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=server.context)) as session,
                    session.post(f"{server.url}/api/v1/namespaces", data=namespace,
                                 headers={"Content-Type": "application/json"}) as response):
            await response.read()
    results: dict[tuple[str, str], list[float]] = {}
    for r in range(rounds):
        for kind, count in PHASES:
            for server in servers if r % 2 == 0 else servers[::-1]:
                ms = await phase(server, kind, count, PHASES[0][1] * (r + 1))
                results.setdefault((kind, server.label), []).append(ms)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old_src")
    parser.add_argument("new_src")
    parser.add_argument("--labels", nargs=2, default=("old", "new"))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-ab-") as tmp:
        servers: list[Server] = []
        try:
            for k, (label, src) in enumerate(zip(args.labels, (args.old_src, args.new_src), strict=True)):
                servers.append(start(label, src, f"{tmp}/{k}", f"ab{k}"))
            results = asyncio.run(measure(servers, args.rounds))
        finally:
            for server in servers:
                tether(server.src, "local", "down", "--data-dir", server.data_dir)
    old, new = args.labels
    print(f"server CPU ms per request, {args.rounds} rounds, load {os.getloadavg()[0]:.1f}")
    for kind, _ in PHASES:
        a, b = results[(kind, old)], results[(kind, new)]
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{kind:8} {old} {'/'.join(f'{x:.3f}' for x in a)} (median {ma:.4f})   "
              f"{new} {'/'.join(f'{x:.3f}' for x in b)} (median {mb:.4f})   {100 * (mb / ma - 1):+.1f}%")


if __name__ == "__main__":
    main()
