"""Benchmark of the bridge transport: MuxChannel vs `kubectl port-forward` vs direct, in one run.

    python bench/bridge.py               # run, print, rewrite the "Bridge" section of docs/benchmarks.md
    python bench/bridge.py --no-write    # run and print only
    python bench/bridge.py --requests 600 --bulk-mib 64

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


def _wait_line(proc: subprocess.Popen[str], pattern: re.Pattern[str], timeout_s: float = 60.0) -> re.Match[str]:
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{proc.args!r} ended before printing {pattern.pattern}")
        found = pattern.search(line)
        if found:
            return found
    raise RuntimeError(f"no {pattern.pattern} within {timeout_s}s")


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


async def measure_all(paths: list[tuple[str, str, int]], args: argparse.Namespace) -> dict[str, PathResult]:
    results: dict[str, PathResult] = {}
    for name, host, port in paths:
        results[name] = await measure(host, port, args.requests, args.newconn, args.bulk_mib * 1024 * 1024)
        print(f"{name}: {results[name]}", flush=True)
    return results


def _stop(proc: subprocess.Popen[str] | None) -> None:
    if proc is None:
        return
    if proc.stdin is not None:  # the forwarder ends when its stdin closes
        with contextlib.suppress(OSError):
            proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    if proc.poll() is None:
        proc.kill()


def run(args: argparse.Namespace, data_dir: Path) -> tuple[dict[str, PathResult], dict[str, str]]:
    kubeconfig = data_dir / "kubeconfig"
    up = tether("local", "up", "--data-dir", str(data_dir), "--name", CLUSTER)
    if up.returncode != 0:
        raise RuntimeError(up.stdout + up.stderr)
    pod, ip = server_pod(kubeconfig)
    agent = asyncio.run(_agent(kubeconfig))
    assert agent is not None
    forwarder = port_forward = None
    try:
        forwarder = subprocess.Popen(
            [sys.executable, __file__, "--role", "forward", "--kubeconfig", str(kubeconfig), "--context", CLUSTER,
             "--agent-namespace", agent.namespace, "--agent-name", agent.name, "--session", agent.session,
             "--target", f"{ip}:{SERVER_PORT}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        mux_port = int(_wait_line(forwarder, re.compile(r"listening (\d+)")).group(1))
        port_forward = subprocess.Popen(
            [kubectl_binary(), "--kubeconfig", str(kubeconfig), "--context", CLUSTER, "port-forward", "-n",
             NAMESPACE, f"pod/{pod}", f":{SERVER_PORT}"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True)
        kubectl_port = int(_wait_line(port_forward, FORWARDING).group(1))
        paths = [("direct", ip, SERVER_PORT), ("kubectl", "127.0.0.1", kubectl_port), ("mux", "127.0.0.1", mux_port)]
        results = asyncio.run(measure_all(paths, args))
    finally:
        _stop(forwarder)
        _stop(port_forward)
        asyncio.run(_agent(kubeconfig, remove=agent))
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
  server, the agent): on a 2-CPU machine the numbers are the machine's, not the protocol's ceiling.
- The mux path has the hops of kubectl's (client -> local listener -> API server -> kubelet ->
  pod) plus the agent and the splice in the forwarder; it gains by opening one SPDY stream pair
  once, so a new TCP connection is one mux frame instead of two SPDY streams and a kubelet dial."""


def write_doc(info: dict[str, str], results: dict[str, PathResult], args: argparse.Namespace) -> None:
    section = f"""{SECTION}

Measured by `bench/bridge.py` on {info['date']}: {info['nproc']} CPUs ({info['cpu']}), {info['os']},
CPython {info['python']}; 1-minute load average {info['load']} when it ended. One local cluster
(rootless: pod IPs on loopback); an asyncio HTTP server in a pod; {args.requests} requests per
keep-alive connection (8 connections), {args.newconn} new-connection requests (8 workers), bulk
{args.bulk_mib} MiB.

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
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument("--requests", type=int, default=500, help="requests per keep-alive connection")
    parser.add_argument("--newconn", type=int, default=1000, help="new-connection requests in all")
    parser.add_argument("--bulk-mib", type=int, default=64)
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
    print(report(results))
    if not args.no_write:
        write_doc(info, results, args)
        print(f"updated {DOC}")


if __name__ == "__main__":
    main()
