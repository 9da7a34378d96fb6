"""Benchmark of the bridge transport: MuxChannel vs `kubectl port-forward` vs direct, in one run.

    python bench/bridge.py               # run, print, rewrite the "Bridge" section of docs/benchmarks.md
    python bench/bridge.py --no-write    # run and print only
    python bench/bridge.py --requests 600 --bulk-mib 64
    python bench/bridge.py --intercept [--netns] # the intercept routing proxy (bridge_intercept.py)

One local cluster (`tether local up`, rootless: pod IPs are on loopback) runs a small asyncio HTTP
server in a pod (`python` image: `GET /` answers 64 bytes, `GET /bulk?n=N` streams N bytes) and
the bridge agent made by `ensure_agent`. The same HTTP client (in this process) then measures
three paths to that server, each a local TCP address:

- **mux**: a forwarder process (this script, `--role forward`), as `tether connect` would be: a
  local listener whose every connection is spliced to `MuxChannel.open_tcp(podIP, port)`, the
  channel going through the API server's port-forward (WebSocket-tunnelled SPDY) to the agent,
  which dials the pod;
- **kubectl**: `kubectl port-forward pod/NAME :PORT` (one SPDY stream pair per connection);
- **direct**: the pod IP itself.

Measured per path: (1) 8 keep-alive connections each sending `--requests` sequential GETs:
requests/s and per-request latency p50/p99; (2) new connection per request (8 workers, connect,
GET with `Connection: close`, read to EOF): requests/s; (3) bulk: one GET of `--bulk-mib` MiB,
MB/s. Goals (issue 15): mux >= 0.8x kubectl's keep-alive req/s, <= 2 ms added p50 (vs direct),
new-connection rate >= kubectl's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from tether.bridge.agentpods import AgentRef, ensure_agent, portforward_connector, remove_agent  # noqa: E402
from tether.bridge.channel import splice, stream_from_asyncio  # noqa: E402
from tether.bridge.muxchannel import MuxChannel  # noqa: E402
from tether.kube import KubeClient  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "## Bridge"
CLUSTER = "bench"
NAMESPACE = "bridge-bench"
SERVER_PORT = 8080
CONNECTIONS = 8
FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+)")

# The pod's HTTP server: asyncio, keep-alive, so the server is not what bounds the comparison.
SERVER = r'''
import asyncio, os
SMALL = b"x" * 64
CHUNK = b"b" * 262144
async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            line = head.split(b"\r\n", 1)[0].split()
            target = line[1].decode() if len(line) > 1 else "/"
            close = b"connection: close" in head.lower()
            if target.startswith("/bulk"):
                n = int(target.split("n=", 1)[1])
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % n)
                while n > 0:
                    piece = CHUNK[:min(n, len(CHUNK))]
                    writer.write(piece)
                    n -= len(piece)
                    await writer.drain()
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 64\r\n\r\n" + SMALL)
            await writer.drain()
            if close:
                break
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    writer.close()
async def main():
    server = await asyncio.start_server(handle, os.environ.get("POD_IP", "127.0.0.1"), 8080, backlog=1024)
    print("serving", flush=True)
    await server.serve_forever()
asyncio.run(main())
'''


def tether(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True, timeout=180,
                          check=False)


def kubectl_binary() -> str:
    local = Path(sys.executable).parent / "kubectl"
    return str(local) if local.exists() else "kubectl"


# ---- the HTTP client --------------------------------------------------------------------------

async def _response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    match = re.search(rb"content-length:\s*(\d+)", head, re.IGNORECASE)
    length = int(match.group(1)) if match else 0
    received = 0
    while received < length:
        chunk = await reader.read(min(1 << 20, length - received))
        if not chunk:
            raise ConnectionError("short body")
        received += len(chunk)
    return received


async def keepalive(host: str, port: int, requests: int) -> tuple[float, list[float]]:
    latencies: list[float] = []

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        request = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n"
        for _ in range(20):  # warm-up
            writer.write(request)
            await _response(reader)
        for _ in range(requests):
            started = time.perf_counter()
            writer.write(request)
            await _response(reader)
            latencies.append(time.perf_counter() - started)
        writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))
    elapsed = time.perf_counter() - started
    return len(latencies) / elapsed, latencies


async def new_connections(host: str, port: int, total: int) -> float:
    done = 0

    async def worker() -> None:
        nonlocal done
        while done < total:
            done += 1
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
            await _response(reader)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONNECTIONS)))
    return total / (time.perf_counter() - started)


async def bulk(host: str, port: int, size: int) -> float:
    reader, writer = await asyncio.open_connection(host, port)
    started = time.perf_counter()
    writer.write(f"GET /bulk?n={size} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n".encode())
    got = await _response(reader)
    elapsed = time.perf_counter() - started
    writer.close()
    assert got == size
    return size / elapsed / 1e6


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---- the forwarder role (a separate process, as `tether connect` would be) --------------------

async def role_forward(args: argparse.Namespace) -> None:
    agent = AgentRef(args.agent_namespace, args.agent_name, args.session)
    async with KubeClient.from_kubeconfig(Path(args.kubeconfig), args.context) as client, \
            MuxChannel(args.context, portforward_connector(client, agent)) as channel:
        host, port = args.target.rsplit(":", 1)

        async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                remote = await channel.open_tcp(host, int(port))
            except Exception:
                writer.close()
                return
            await splice(stream_from_asyncio(reader, writer), remote)

        server = await asyncio.start_server(forward, "127.0.0.1", 0, backlog=1024)
        print(f"listening {server.sockets[0].getsockname()[1]}", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


# ---- orchestration ----------------------------------------------------------------------------

@dataclass
class PathResult:
    rps: float
    p50_ms: float
    p99_ms: float
    newconn_rps: float
    bulk_mbs: float


async def measure(host: str, port: int, requests: int, newconn: int, bulk_bytes: int) -> PathResult:
    rps, latencies = await keepalive(host, port, requests)
    rate = await new_connections(host, port, newconn)
    mbs = await bulk(host, port, bulk_bytes)
    return PathResult(rps, pct(latencies, 0.5) * 1e3, pct(latencies, 0.99) * 1e3, rate, mbs)


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run([kubectl_binary(), "--kubeconfig", str(kubeconfig), "--context", CLUSTER, *args],
                            input=stdin, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise RuntimeError(result.stdout + result.stderr)
    return result.stdout


def server_pod(kubeconfig: Path) -> tuple[str, str]:
    import json
    manifest = {"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "http", "namespace": NAMESPACE},
         "spec": {"containers": [{"name": "http", "image": "python:3.12-slim",
                                  "command": ["python3", "-c", SERVER],
                                  "ports": [{"containerPort": SERVER_PORT}],
                                  "readinessProbe": {"tcpSocket": {"port": SERVER_PORT}, "periodSeconds": 1}}]}},
    ]}
    kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(manifest))
    kubectl(kubeconfig, "wait", "-n", NAMESPACE, "--for=condition=Ready", "pod/http", "--timeout=120s")
    ip = kubectl(kubeconfig, "get", "pod", "http", "-n", NAMESPACE, "-o", "jsonpath={.status.podIP}").strip()
    return "http", ip


async def _agent(kubeconfig: Path, remove: AgentRef | None = None) -> AgentRef | None:
    async with KubeClient.from_kubeconfig(kubeconfig, CLUSTER) as client:
        if remove is not None:
            await remove_agent(client, remove)
            return None
        return await ensure_agent(client, session="bench")


class Process:
    """A helper process whose stdout announces its local port; restartable."""

    def __init__(self, name: str, argv: list[str], announce: re.Pattern[str]) -> None:
        self.name = name
        self.argv = argv
        self.announce = announce
        self.proc: asyncio.subprocess.Process | None = None
        self.port = 0

    async def start(self) -> int:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL)
        assert self.proc.stdout is not None
        async with asyncio.timeout(60):
            while True:
                line = (await self.proc.stdout.readline()).decode()
                if not line:
                    raise RuntimeError(f"{self.name} ended before announcing its port")
                found = self.announce.search(line)
                if found:
                    self.port = int(found.group(1))
                    return self.port

    async def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.returncode is not None:
            return
        if proc.stdin is not None:  # the forwarder ends when its stdin closes (and writes its profile)
            proc.stdin.close()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    await proc.wait()
        if proc.returncode is None:
            proc.terminate()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def measure_all(ip: str, helpers: dict[str, Process], args: argparse.Namespace) -> dict[str, PathResult]:
    """Each path measured in turn, `--rounds` times; the best of each figure is kept (the machine is
    shared, and a round that another process slowed says nothing about the path). A round that
    does not finish within `--phase-timeout` is dropped and the path's helper restarted."""
    results: dict[str, PathResult] = {}
    for helper in helpers.values():
        await helper.start()
    try:
        for round_ in range(args.rounds):
            for name in ("direct", "kubectl", "mux"):
                host, port = (ip, SERVER_PORT) if name == "direct" else ("127.0.0.1", helpers[name].port)
                try:
                    async with asyncio.timeout(args.phase_timeout):
                        got = await measure(host, port, args.requests, args.newconn, args.bulk_mib * 1024 * 1024)
                except (TimeoutError, OSError, ConnectionError, asyncio.IncompleteReadError) as exc:
                    print(f"round {round_ + 1} {name}: failed ({exc!r}); restarting its helper", flush=True)
                    if name in helpers:
                        await helpers[name].stop()
                        await helpers[name].start()
                    continue
                print(f"round {round_ + 1} {name}: {got}", flush=True)
                best = results.get(name)
                results[name] = got if best is None else PathResult(
                    max(best.rps, got.rps), min(best.p50_ms, got.p50_ms), min(best.p99_ms, got.p99_ms),
                    max(best.newconn_rps, got.newconn_rps), max(best.bulk_mbs, got.bulk_mbs))
    finally:
        for helper in helpers.values():
            await helper.stop()
    return results


def run(args: argparse.Namespace, data_dir: Path) -> tuple[dict[str, PathResult], dict[str, str]]:
    kubeconfig = data_dir / "kubeconfig"
    up = tether("local", "up", "--data-dir", str(data_dir), "--name", CLUSTER)
    if up.returncode != 0:
        raise RuntimeError(up.stdout + up.stderr)
    pod, ip = server_pod(kubeconfig)
    agent = asyncio.run(_agent(kubeconfig))
    assert agent is not None
    helpers = {
        "mux": Process("forwarder", [
            sys.executable, __file__, "--role", "forward", "--kubeconfig", str(kubeconfig), "--context", CLUSTER,
            "--agent-namespace", agent.namespace, "--agent-name", agent.name, "--session", agent.session,
            "--target", f"{ip}:{SERVER_PORT}"], re.compile(r"listening (\d+)")),
        "kubectl": Process("kubectl port-forward", [
            kubectl_binary(), "--kubeconfig", str(kubeconfig), "--context", CLUSTER, "port-forward", "-n",
            NAMESPACE, f"pod/{pod}", f":{SERVER_PORT}"], FORWARDING),
    }
    try:
        results = asyncio.run(measure_all(ip, helpers, args))
    finally:
        asyncio.run(_agent(kubeconfig, remove=agent))
    missing = {"direct", "kubectl", "mux"} - set(results)
    if missing:
        raise RuntimeError(f"no round of {', '.join(sorted(missing))} finished")
    return results, machine()


def machine() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "nproc": str(os.cpu_count()),
            "cpu": cpu, "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "load": f"{os.getloadavg()[0]:.2f}"}


def report(results: dict[str, PathResult]) -> str:
    direct, kube, mux = results["direct"], results["kubectl"], results["mux"]
    rows = [
        ("keep-alive req/s (8 conns)", "rps", "{:,.0f}"),
        ("keep-alive p50 ms", "p50_ms", "{:.2f}"),
        ("keep-alive p99 ms", "p99_ms", "{:.2f}"),
        ("new connection per request, req/s", "newconn_rps", "{:,.0f}"),
        ("bulk MB/s (one connection)", "bulk_mbs", "{:,.0f}"),
    ]
    lines = ["| metric | direct | kubectl port-forward | mux (MuxChannel) |", "|---|---|---|---|"]
    for label, attr, fmt in rows:
        lines.append(f"| {label} | " + " | ".join(fmt.format(getattr(r, attr)) for r in (direct, kube, mux)) + " |")
    ratio = mux.rps / kube.rps
    added = mux.p50_ms - direct.p50_ms
    newconn = mux.newconn_rps / kube.newconn_rps
    lines += [
        "",
        "| goal | result | met |",
        "|---|---|---|",
        f"| mux keep-alive req/s >= 0.8x kubectl's | {ratio:.2f}x | {'yes' if ratio >= 0.8 else 'no'} |",
        f"| mux added p50 <= 2 ms (vs direct) | {added:.2f} ms | {'yes' if added <= 2 else 'no'} |",
        f"| mux new-connection rate >= kubectl's | {newconn:.2f}x | {'yes' if newconn >= 1 else 'no'} |",
    ]
    return "\n".join(lines)


NOTES = """- All three paths share the machine's CPUs with the local cluster (API server, kubelet, the pod's
  server, the agent) and, on this shared 2-CPU host, with other work (load average above): the
  numbers are the machine's, not the protocol's ceiling, and single rounds vary by 2x. Other runs
  the same day (load 4-9): mux/kubectl keep-alive req/s 2.77x, 0.97x, 0.90x; added p50 1.35 ms,
  5.5 ms, 3.8 ms (kubectl's own p50 was 3.3, 5.8 and 3.7 ms in those runs: under load both paths
  queue behind the same CPUs, and the 2 ms goal is then missed by kubectl too); new-connection
  rate 2.2x, 1.6x, 2.3x.
- The mux path has the hops of kubectl's (client -> local listener -> API server -> kubelet ->
  pod) plus the agent and the splice in the forwarder; it gains by opening one SPDY stream pair
  once, so a new TCP connection is one mux frame instead of two SPDY streams and a kubelet dial.
- Bulk is below kubectl's (90 vs 122 MB/s here): both Python processes on the path (forwarder
  and agent) copy and frame every byte, where kubectl's side is Go. A profile of the forwarder
  (`TETHER_BENCH_PROFILE=/tmp/fwd.prof python bench/bridge.py --no-write`) shows it mostly idle
  and its time in socket sends; the mux itself moves ~150 MB/s through an agent and a client in
  one process on loopback. Frames are queued as pieces and joined once, DATA frames reference the
  sender's bytes and the decoder parses straight from the read buffer (fewer copies per byte); a
  larger window (4 MiB) or larger frames made no measurable difference."""


def write_doc(info: dict[str, str], results: dict[str, PathResult], args: argparse.Namespace) -> None:
    section = f"""{SECTION}

Measured by `bench/bridge.py` on {info['date']}: {info['nproc']} CPUs ({info['cpu']}), {info['os']},
CPython {info['python']}; 1-minute load average {info['load']} when it ended. One local cluster
(rootless: pod IPs on loopback); an asyncio HTTP server in a pod; {args.requests} requests per
keep-alive connection (8 connections), {args.newconn} new-connection requests (8 workers), bulk
{args.bulk_mib} MiB; each path measured {args.rounds} times in turn, the best of each figure kept.

{report(results)}

### How to re-run

    python bench/bridge.py              # prints the table and rewrites this section
    python bench/bridge.py --no-write   # prints only

"mux" is a forwarder process splicing each local connection to `MuxChannel.open_tcp`, the channel
going through the API server's port-forward (WebSocket-tunnelled SPDY) to the bridge agent;
"kubectl" is `kubectl port-forward` to the server's pod; "direct" is the pod IP.

### Notes

{NOTES}
"""
    old = DOC.read_text()
    start = old.find(SECTION + "\n")
    if start < 0:
        DOC.write_text(old.rstrip("\n") + "\n\n" + section)
        return
    end = old.find("\n## ", start + len(SECTION))
    DOC.write_text(old[:start] + section + (old[end + 1:] if end >= 0 else ""))


def main() -> None:
    if "--intercept" in sys.argv[1:]:
        # part 2 of the bridge: the routing proxy with and without a matching header vs direct,
        # in one run; its own script, so each half keeps its own options and doc section
        sys.argv.remove("--intercept")
        import bridge_intercept
        bridge_intercept.main()
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument("--requests", type=int, default=500, help="requests per keep-alive connection")
    parser.add_argument("--newconn", type=int, default=1000, help="new-connection requests in all")
    parser.add_argument("--bulk-mib", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="measure every path this many times, keep the best")
    parser.add_argument("--phase-timeout", type=float, default=240.0, help="seconds for one path's round")
    parser.add_argument("--role", default="", help=argparse.SUPPRESS)
    for hidden in ("--kubeconfig", "--context", "--agent-namespace", "--agent-name", "--session", "--target"):
        parser.add_argument(hidden, default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "forward":
        profile = os.environ.get("TETHER_BENCH_PROFILE")  # a path: the forwarder runs under cProfile
        if profile:
            import cProfile
            profiler = cProfile.Profile()
            profiler.runcall(asyncio.run, role_forward(args))
            profiler.dump_stats(profile)
        else:
            asyncio.run(role_forward(args))
        return
    data_dir = Path(tempfile.mkdtemp(prefix="tether-bench-bridge-"))
    try:
        results, info = run(args, data_dir)
    finally:
        tether("local", "down", "--data-dir", str(data_dir))
        shutil.rmtree(data_dir, ignore_errors=True)
    print(report(results))
    if not args.no_write:
        write_doc(info, results, args)
        print(f"updated {DOC}")


if __name__ == "__main__":
    main()
