"""Benchmark of workloads on one embedded local cluster: pod start-up, memory per pod, service proxy.

    python bench/workloads.py                 # run, print a table, update docs/benchmarks.md
    python bench/workloads.py --no-write      # run and print only
    python bench/workloads.py --profile DIR   # also run the server under cProfile, stats in DIR

One local cluster with 3 nodes is started through the real CLI (`tether local up`) in a temporary
data dir; the API is reached only on 127.0.0.1 with the admin client certificate (aiohttp), pods
and Services only on their 127.0.0.0/8 addresses. Every phase is bounded in count and time.
Phases, in this order (nothing is deleted between them, so each memory delta is clean growth):

1. deploy: a Deployment of DEPLOY_REPLICAS virtual pods (image example.com/virtual:1); wall time
   from POST to `status.readyReplicas == DEPLOY_REPLICAS` (polled every POLL_S).
2. process pods: a Deployment of WEB_REPLICAS `nginx` pods (real processes, the built-in stand-in);
   time until every pod IP answers HTTP, the container processes' RSS and PSS (descendants of the
   daemon found by a /proc ppid walk) and the daemon's RSS growth, per pod.
3. service proxy: a ClusterIP Service over those pods; PROXY_REQUESTS GETs per case, sequential
   (1 connection) and concurrent (PROXY_CONNS connections), keep-alive off and on, to ClusterIP:80
   and directly to the pod IPs (round-robin per connection, as the proxy does). Raw asyncio sockets
   as the client, so the client adds as little as possible.
4. many virtual pods: a Deployment of MANY_REPLICAS virtual pods on the 3 nodes; time to
   readyReplicas, then a list confirms every pod Running with Ready=True; the daemon's RSS growth
   per pod. The defaults (110 pods per node, one /24 podCIDR per node) cannot hold that many, so
   the nodes' `pods` capacity is raised (PATCH nodes/status) and a Calico IPPool (a /17 inside
   the cluster's own 127.x.0.0/16 pod range) gives the addresses, both through the API.

The server's CPU time per phase (from /proc/<pid>/stat) is reported next to each result.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import ipaddress
import json
import os
import platform
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from benchcluster import Cluster, percentile, start_cluster, status_kb, stop_cluster

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "## Workloads"

NODES = 3
NAMESPACE = "bench"
VIRTUAL_IMAGE = "example.com/virtual:1"
DEPLOY_REPLICAS = 100
WEB_REPLICAS = 20
MANY_REPLICAS = 1_000
NODE_PODS = 1_000  # the nodes' raised `pods` capacity for phase 4
KEEPALIVE_REPLICAS = 4
PROXY_REQUESTS = 2_000
PROXY_CONNS = 8
POLL_S = 0.1
PHASE_TIMEOUT_S = 90.0
REQUEST_TIMEOUT_S = 10.0

Obj = dict[str, Any]

# The nginx stand-in speaks HTTP/1.0 and closes every connection, so keep-alive through the proxy
# is measured against these pods too: image `python` runs its command as a real process.
KEEPALIVE_SERVER = """
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    disable_nagle_algorithm = True  # headers and body go out in two writes
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = b"ok\\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer((os.environ["POD_IP"], 80), H).serve_forever()
"""


# the cluster -------------------------------------------------------------------------------


def pss_kb(pid: int) -> int:
    """Proportional set size: shared pages (the interpreter, libraries) split among their users."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def descendants(root: int) -> list[int]:
    """Every live process below `root`, by a walk of /proc/*/stat parent ids."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


# the API -----------------------------------------------------------------------------------


class Api:
    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def call(self, method: str, path: str, body: Obj | None = None, *, expect: tuple[int, ...] = (200,),
                   content_type: str = "application/json", params: dict[str, str] | None = None) -> Obj:
        data = json.dumps(body).encode() if body is not None else None
        async with self.session.request(method, self.base + path, data=data, params=params,
                                        headers={"Content-Type": content_type}) as response:
            raw = await response.read()
            if response.status not in expect:
                raise RuntimeError(f"{method} {path}: {response.status} {raw[:400]!r}")
            result: Obj = json.loads(raw) if raw else {}
            return result


def deployment(name: str, replicas: int, image: str, port: int | None = None,
               command: list[str] | None = None) -> Obj:
    container: Obj = {"name": "main", "image": image}
    if command:
        container["command"] = command
    if port is not None:
        container["ports"] = [{"containerPort": port}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}},
        },
    }


def pod_ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


async def wait_for(what: str, check: Callable[[], Awaitable[bool]], timeout_s: float = PHASE_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not done within {timeout_s:.0f} s")
        await asyncio.sleep(POLL_S)


@dataclass
class Rollout:
    name: str
    replicas: int
    seconds: float
    server_cpu_s: float
    rss_before_kb: int
    rss_after_kb: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.replicas / self.seconds if self.seconds else 0.0

    @property
    def rss_per_pod_kb(self) -> float:
        return (self.rss_after_kb - self.rss_before_kb) / self.replicas


async def probe_api(api: Api, latencies: list[float]) -> None:
    """GET /healthz back to back (POLL_S apart) until cancelled: how long the API makes a caller
    wait while a rollout runs (the event loop is shared by the API and every controller)."""
    while True:
        t0 = time.perf_counter()
        async with api.session.get(api.base + "/healthz") as response:
            await response.read()
        latencies.append((time.perf_counter() - t0) * 1000)
        await asyncio.sleep(POLL_S)


async def rollout(api: Api, cluster: Cluster, name: str, replicas: int, image: str,
                  port: int | None = None, command: list[str] | None = None) -> Rollout:
    """Create a Deployment and wait for readyReplicas == replicas; the daemon's RSS around it."""
    path = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments"
    rss0 = cluster.rss_kb()
    cpu0 = cluster.cpu_s()
    t0 = time.perf_counter()
    healthz_ms: list[float] = []
    prober = asyncio.create_task(probe_api(api, healthz_ms))
    await api.call("POST", path, deployment(name, replicas, image, port, command), expect=(201,))
    seen: dict[str, float] = {}  # first time readyReplicas reached 1, a quarter, half, ...
    polls_ms: list[float] = []  # how long each status GET took: the API's latency under this load
    timeline: list[tuple[float, int]] = []  # (seconds, readyReplicas) at every change

    async def ready() -> bool:
        p0 = time.perf_counter()
        status = (await api.call("GET", f"{path}/{name}")).get("status") or {}
        now = time.perf_counter()
        polls_ms.append((now - p0) * 1000)
        count = int(status.get("readyReplicas") or 0)
        if not timeline or timeline[-1][1] != count:
            timeline.append((now - t0, count))
        for mark in (1, replicas // 4, replicas // 2, 3 * replicas // 4):
            if count >= mark and str(mark) not in seen:
                seen[str(mark)] = now - t0
        return count == replicas

    try:
        await wait_for(f"deployment {name} ready", ready)
    finally:
        prober.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await prober
    elapsed = time.perf_counter() - t0
    cpu = cluster.cpu_s() - cpu0
    await asyncio.sleep(1.0)  # let the status writes that trail readiness settle
    return Rollout(name, replicas, elapsed, cpu, rss0, cluster.rss_kb(),
                   {"marks": seen, "polls_ms": polls_ms, "timeline": timeline, "healthz_ms": healthz_ms})


async def pods_of(api: Api, app: str) -> list[Obj]:
    listing = await api.call("GET", f"/api/v1/namespaces/{NAMESPACE}/pods", params={"labelSelector": f"app={app}"})
    items: list[Obj] = listing.get("items") or []
    return items


# phases ------------------------------------------------------------------------------------


async def phase_deploy(api: Api, cluster: Cluster) -> Rollout:
    return await rollout(api, cluster, "virtual-100", DEPLOY_REPLICAS, VIRTUAL_IMAGE)


async def http_ok(ip: str, port: int = 80) -> bool:
    try:
        async with asyncio.timeout(2.0):
            reader, writer = await asyncio.open_connection(ip, port)
            try:
                writer.write(b"GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
                line = await reader.readline()
                await reader.read()
            finally:
                writer.close()
    except (OSError, TimeoutError):
        return False
    return line.startswith(b"HTTP/1.") and b" 200 " in line


async def phase_web(api: Api, cluster: Cluster, name: str, replicas: int, image: str,
                    command: list[str] | None = None) -> tuple[Rollout, list[str]]:
    before = set(descendants(cluster.pid))
    result = await rollout(api, cluster, name, replicas, image, 80, command)
    pods = await pods_of(api, name)
    ips = sorted({str((p.get("status") or {}).get("podIP", "")) for p in pods} - {""},
                 key=ipaddress.IPv4Address)
    if len(ips) != replicas or not all(ipaddress.IPv4Address(ip) in ipaddress.IPv4Network("127.0.0.0/8")
                                       for ip in ips):
        raise RuntimeError(f"expected {replicas} loopback pod IPs, got {ips}")
    t0 = time.perf_counter()

    async def all_serving() -> bool:
        answers = await asyncio.gather(*(http_ok(ip) for ip in ips))
        return all(answers)

    await wait_for(f"{name} pods serving on their pod IPs", all_serving)
    result.extra["serving_s"] = result.seconds + time.perf_counter() - t0
    procs = [p for p in descendants(cluster.pid) if p not in before]
    result.extra["processes"] = len(procs)
    result.extra["proc_rss_kb"] = sum(status_kb(p, "VmRSS") for p in procs)
    result.extra["proc_pss_kb"] = sum(pss_kb(p) for p in procs)
    result.extra["threads"] = sum(status_kb(p, "Threads") for p in procs)
    return result, ips


@dataclass
class Load:
    backend: str
    target: str
    keepalive: bool
    conns: int
    count: int
    seconds: float
    server_cpu_s: float
    latencies_ms: list[float]
    connections: int  # TCP connections opened: == count when the server closes every one

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0

    def pct(self, p: float) -> float:
        return percentile(self.latencies_ms, p)


async def read_response(reader: asyncio.StreamReader) -> bool:
    """Read one HTTP/1.x response; True when the server keeps the connection open."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if " 200 " not in lines[0] + " ":
        raise RuntimeError(f"unexpected answer {lines[0]!r}")
    headers = {k.strip().lower(): v.strip().lower() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
    http10 = lines[0].startswith("HTTP/1.0")
    keep = headers.get("connection") == "keep-alive" if http10 else headers.get("connection") != "close"
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
        return keep
    await reader.read()  # delimited by close
    return False


async def load(backend: str, target: str, addresses: list[tuple[str, int]], *, keepalive: bool, conns: int,
               count: int, cluster: Cluster) -> Load:
    """`count` GETs from `conns` workers; a worker opens a connection to the next address in
    turn whenever it has none (every request without keep-alive, or when the server closed)."""
    request = (b"GET / HTTP/1.1\r\nHost: bench\r\n"
               + (b"Connection: keep-alive\r\n" if keepalive else b"Connection: close\r\n") + b"\r\n")
    latencies: list[float] = []
    issued = 0
    opened = 0

    async def worker() -> None:
        nonlocal issued, opened
        stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while issued < count:
                issued += 1
                t0 = time.perf_counter()
                if stream is None:
                    address = addresses[opened % len(addresses)]
                    opened += 1
                    stream = await asyncio.open_connection(*address)
                reader, writer = stream
                writer.write(request)
                async with asyncio.timeout(REQUEST_TIMEOUT_S):
                    keep = await read_response(reader)
                latencies.append((time.perf_counter() - t0) * 1000)
                if not (keep and keepalive):
                    writer.close()
                    stream = None
        finally:
            if stream is not None:
                stream[1].close()

    cpu0 = cluster.cpu_s()
    t0 = time.perf_counter()
    async with asyncio.timeout(PHASE_TIMEOUT_S):
        await asyncio.gather(*(worker() for _ in range(conns)))
    elapsed = time.perf_counter() - t0
    return Load(backend, target, keepalive, conns, count, elapsed, cluster.cpu_s() - cpu0, latencies, opened)


async def phase_proxy(api: Api, cluster: Cluster, name: str, ips: list[str],
                      keepalive_cases: tuple[bool, ...]) -> list[Load]:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 80, "protocol": "TCP"}]},
    }
    created = await api.call("POST", f"/api/v1/namespaces/{NAMESPACE}/services", service, expect=(201,))
    cluster_ip = str(created["spec"]["clusterIP"])
    if ipaddress.IPv4Address(cluster_ip) not in ipaddress.IPv4Network("127.0.0.0/8"):
        raise RuntimeError(f"ClusterIP {cluster_ip} is not a loopback address")

    async def endpoints_ready() -> bool:
        slices = await api.call("GET", f"/apis/discovery.k8s.io/v1/namespaces/{NAMESPACE}/endpointslices",
                                params={"labelSelector": f"kubernetes.io/service-name={name}"})
        ready = {a for s in slices.get("items") or [] for e in s.get("endpoints") or []
                 if (e.get("conditions") or {}).get("ready", True) for a in e.get("addresses") or []}
        return len(ready) == len(ips) and await http_ok(cluster_ip)

    await wait_for(f"service {name} routing to every pod", endpoints_ready)
    direct = [(ip, 80) for ip in ips]
    proxied = [(cluster_ip, 80)]
    results: list[Load] = []
    # warm-up (imports, first connections, the pods' thread pools)
    await load(name, "direct", direct, keepalive=False, conns=PROXY_CONNS, count=200, cluster=cluster)
    await load(name, "proxy", proxied, keepalive=False, conns=PROXY_CONNS, count=200, cluster=cluster)
    for keepalive in keepalive_cases:
        for conns in (1, PROXY_CONNS):
            for target, addresses in (("direct", direct), ("proxy", proxied)):
                results.append(await load(name, target, addresses, keepalive=keepalive, conns=conns,
                                          count=PROXY_REQUESTS, cluster=cluster))
    return results


async def phase_many(api: Api, cluster: Cluster) -> Rollout:
    nodes = (await api.call("GET", "/api/v1/nodes")).get("items") or []
    if len(nodes) != NODES:
        raise RuntimeError(f"expected {NODES} nodes, found {len(nodes)}")
    # The cluster's pod range is the /16 holding the nodes' /24 podCIDRs; the pool takes its top half.
    pod_range = ipaddress.IPv4Network(nodes[0]["spec"]["podCIDR"]).supernet(new_prefix=16)
    pool_cidr = list(pod_range.subnets(new_prefix=17))[1]
    if not pool_cidr.subnet_of(ipaddress.IPv4Network("127.0.0.0/8")):
        raise RuntimeError(f"pod range {pod_range} is not loopback")
    await api.call("POST", "/apis/projectcalico.org/v3/ippools", {
        "apiVersion": "projectcalico.org/v3", "kind": "IPPool", "metadata": {"name": "bench-pool"},
        "spec": {"cidr": str(pool_cidr), "blockSize": 24, "nodeSelector": "all()"},
    }, expect=(201,))
    for node in nodes:
        name = node["metadata"]["name"]
        capacity = str(NODE_PODS)
        await api.call("PATCH", f"/api/v1/nodes/{name}/status",
                       {"status": {"capacity": {"pods": capacity}, "allocatable": {"pods": capacity}}},
                       content_type="application/merge-patch+json")
    result = await rollout(api, cluster, "virtual-1000", MANY_REPLICAS, VIRTUAL_IMAGE)
    t0 = time.perf_counter()
    pods = await pods_of(api, "virtual-1000")
    result.extra["list_s"] = time.perf_counter() - t0
    ready = [p for p in pods if pod_ready(p)]
    per_node: dict[str, int] = {}
    for pod in ready:
        node_name = str(pod["spec"].get("nodeName"))
        per_node[node_name] = per_node.get(node_name, 0) + 1
    if len(pods) != MANY_REPLICAS or len(ready) != MANY_REPLICAS:
        raise RuntimeError(f"{len(pods)} pods, {len(ready)} Running and Ready; expected {MANY_REPLICAS}")
    result.extra["per_node"] = per_node
    result.extra["pool"] = str(pool_cidr)
    return result


@dataclass
class Results:
    deploy: Rollout
    web: Rollout
    loads: list[Load]
    many: Rollout
    rss_start_kb: int


async def main_async(cluster: Cluster) -> Results:
    connector = aiohttp.TCPConnector(ssl=cluster.ssl_context(), limit=4)
    headers = {"Accept": "application/json"}
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
        api = Api(session, cluster.server)
        rss_start = cluster.rss_kb()
        await api.call("POST", "/api/v1/namespaces",
                       {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}, expect=(201,))
        print("phase 1: Deployment of 100 virtual pods", flush=True)
        deploy = await phase_deploy(api, cluster)
        print(f"  {deploy.seconds:.2f} s; phase 2: {WEB_REPLICAS} nginx pods", flush=True)
        web, ips = await phase_web(api, cluster, "web", WEB_REPLICAS, "nginx")
        print(f"  {web.seconds:.2f} s; phase 3: service proxy", flush=True)
        loads = await phase_proxy(api, cluster, "web", ips, (False, True))
        _, ka_ips = await phase_web(api, cluster, "keepalive", KEEPALIVE_REPLICAS, "python:3.11",
                                    ["python3", "-c", KEEPALIVE_SERVER])
        loads += await phase_proxy(api, cluster, "keepalive", ka_ips, (True,))
        print(f"  done; phase 4: {MANY_REPLICAS} virtual pods", flush=True)
        many = await phase_many(api, cluster)
        print(f"  {many.seconds:.2f} s", flush=True)
    return Results(deploy, web, loads, many, rss_start)


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


def mb(kb: float) -> str:
    return f"{kb / 1024:,.1f} MB"


def marks(r: Rollout) -> str:
    return ", ".join(f"{k} at {v:.1f} s" for k, v in sorted(r.extra["marks"].items(), key=lambda kv: kv[1]))


def api_wait(r: Rollout) -> str:
    h = r.extra["healthz_ms"]
    return f"/healthz during it: p50 {percentile(h, 50):.0f} ms, max {max(h):.0f} ms ({len(h)} probes)"


def rollout_rows(res: Results) -> list[tuple[str, str, str]]:
    """(metric, result, server CPU)."""
    d, w, m = res.deploy, res.web, res.many
    web_procs = w.extra["processes"]
    return [
        (f"Deployment of {d.replicas} virtual pods -> readyReplicas {d.replicas}",
         f"{d.seconds:.2f} s = {d.rate:,.0f} pods/s ({marks(d)}); {api_wait(d)}", f"{d.server_cpu_s:.2f} s"),
        (f"{m.replicas:,} virtual pods on {NODES} nodes -> all Running+Ready",
         f"{m.seconds:.2f} s = {m.rate:,.0f} pods/s ({marks(m)}); pods per node "
         f"{'/'.join(str(v) for _, v in sorted(m.extra['per_node'].items()))}; {api_wait(m)}", f"{m.server_cpu_s:.2f} s"),
        ("daemon memory per virtual pod",
         f"{m.rss_per_pod_kb:,.1f} kB (RSS {mb(m.rss_before_kb)} -> {mb(m.rss_after_kb)}); "
         f"first 100: {d.rss_per_pod_kb:,.1f} kB", "-"),
        (f"{w.replicas} nginx (process) pods -> ready / serving",
         f"{w.seconds:.2f} s ready, {w.extra['serving_s']:.2f} s all answering HTTP; {api_wait(w)}", f"{w.server_cpu_s:.2f} s"),
        ("memory per process pod",
         f"{(w.extra['proc_rss_kb'] / w.replicas) + w.rss_per_pod_kb:,.0f} kB = container RSS "
         f"{w.extra['proc_rss_kb'] / w.replicas:,.0f} kB (PSS {w.extra['proc_pss_kb'] / w.replicas:,.0f} kB) + "
         f"daemon {w.rss_per_pod_kb:,.0f} kB; {web_procs} processes, {w.extra['threads']} threads", "-"),
        ("daemon RSS: start -> end", f"{mb(res.rss_start_kb)} -> {mb(m.rss_after_kb)}", "-"),
    ]


def load_cell(x: Load) -> str:
    return (f"{x.rate:,.0f}/s, p50 {x.pct(50):.2f} ms, p99 {x.pct(99):.2f} ms"
            f" ({x.connections:,} conns, server {1000 * x.server_cpu_s / x.count:.2f} ms/req)")


def load_rows(res: Results) -> list[tuple[str, str, str, str, str, str]]:
    """(case, direct, proxy, ratio req/s, ratio p50, ratio p99)."""
    rows: list[tuple[str, str, str, str, str, str]] = []
    by = {(x.backend, x.target, x.keepalive, x.conns): x for x in res.loads}
    cases = sorted({(x.backend != "web", x.backend, x.keepalive, x.conns) for x in res.loads})
    for _, backend, keepalive, conns in cases:
        d, p = by[(backend, "direct", keepalive, conns)], by[(backend, "proxy", keepalive, conns)]
        pods = f"{WEB_REPLICAS} nginx" if backend == "web" else f"{KEEPALIVE_REPLICAS} HTTP/1.1"
        case = f"{pods}, keep-alive {'on' if keepalive else 'off'}, {conns} conn{'s' if conns > 1 else ''}"
        rows.append((case, load_cell(d), load_cell(p), f"{p.rate / d.rate:.2f}",
                     f"{p.pct(50) / d.pct(50):.2f}", f"{p.pct(99) / d.pct(99):.2f}"))
    return rows


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


ROLL_HEADER = ("metric", "result", "server CPU")
LOAD_HEADER = ("case", "direct to pod IPs", "via ClusterIP", "proxy/direct req/s", "p50 ratio", "p99 ratio")


def print_report(info: dict[str, str], res: Results) -> None:
    print(f"\nWorkloads benchmark  {info['date']}  nproc={info['nproc']}  python={info['python']}  "
          f"{info['cpu']}  load={info['load']}")
    for header, rows in ((ROLL_HEADER, rollout_rows(res)), (LOAD_HEADER, load_rows(res))):
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        print()
        for row in [header, *rows]:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))


def write_doc(info: dict[str, str], res: Results, notes: str) -> None:
    section = f"""{SECTION}

Measured by `bench/workloads.py` on {info['date']}: {info['nproc']} CPUs ({info['cpu']}), {info['os']},
{info['implementation']} {info['python']}; 1-minute load average {info['load']} when it ended. One local
cluster with {NODES} nodes (`tether local up --nodes {NODES}`), API over HTTPS on 127.0.0.1 with the admin
client certificate; the client runs on the same machine (it shares the CPUs with the server and the pods).

### Pods

{table(ROLL_HEADER, rollout_rows(res))}

### Service proxy

{PROXY_REQUESTS:,} GETs of `/` per cell against the {WEB_REPLICAS} nginx stand-in pods, directly (pod IP:80,
a new connection goes to the next pod in turn) and through the Service's ClusterIP:80 (the userspace
proxy, which also picks the next pod per connection). Latency is per request, including the connect
when there is no connection to reuse. "conns" is how many TCP connections the client opened. The
last rows use {KEEPALIVE_REPLICAS} pods running a small HTTP/1.1 server (image `python`), because the nginx
stand-in closes every connection (see Notes).

{table(LOAD_HEADER, load_rows(res))}

### How to re-run

    python bench/workloads.py              # prints the tables and rewrites this section
    python bench/workloads.py --no-write   # prints only
    python bench/workloads.py --profile /tmp/prof   # server under cProfile: /tmp/prof/server.prof

It takes about two minutes and needs nothing but this checkout (a temporary data dir is used and
removed; the cluster is stopped with `tether local down` even when a phase fails). Phases run in this
order and nothing is deleted in between: a Deployment of {DEPLOY_REPLICAS} virtual pods
(`{VIRTUAL_IMAGE}`), a Deployment of {WEB_REPLICAS} `nginx` pods, the Service and the proxy load, then a
Deployment of {MANY_REPLICAS:,} virtual pods. Readiness is polled (GET of the Deployment every
{POLL_S:.1f} s). Every wait is bounded ({PHASE_TIMEOUT_S:.0f} s).

### What the numbers mean

- "pods/s" is replicas / wall time from the Deployment's POST to `status.readyReplicas == replicas`:
  the whole chain (deployment controller -> ReplicaSet controller -> pod creates -> scheduler binds ->
  kubelet runs and writes status -> ReplicaSet and Deployment status), all in the one daemon process.
  The quarter marks show whether the rate holds as the pod count grows.
- Memory per virtual pod is the growth of the daemon's VmRSS across the {MANY_REPLICAS:,}-pod
  Deployment divided by {MANY_REPLICAS:,}: the stored object, its indexes and watch history, the
  kubelet's worker and tasks. Python rarely returns freed memory, so this is an upper bound of what a
  pod keeps and a fair estimate of what a cluster of N pods costs.
- Memory per process pod is the RSS of the container processes (descendants of the daemon, found by
  walking /proc ppids) plus the daemon's own RSS growth, per pod. RSS counts shared pages (the Python
  interpreter and libraries) in every process; PSS divides them among their users and is the better
  measure of what one more pod costs the machine.
- Proxy ratios are proxy / direct: below 1 for req/s means the proxy is slower; above 1 for p50/p99
  means it adds latency. Both sides use the same pods and client; the difference is the extra hop
  through the daemon's event loop (accept, connect to a pod, two relay tasks).

### Notes

{notes}
"""
    header = "# Benchmarks\n\nNumbers from this repository's benchmark scripts, with the machine they ran on.\n\n"
    old = DOC.read_text() if DOC.exists() else header
    start = old.find(SECTION + "\n")
    if start < 0:
        text = old.rstrip("\n") + "\n\n" + section
    else:
        end = old.find("\n## ", start + 1)
        text = old[:start] + section + (old[end + 1:] if end >= 0 else "")
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text)
    print(f"\nwrote {DOC}")


NOTES = """
- The API stops answering while a large rollout runs: during the 1,000-pod Deployment a
  `GET /healthz` waits 2-4 s and the Deployment's `readyReplicas` goes from 0 to 1,000 between two
  polls (also 0 -> 100 for the 100-pod one, where /healthz waits ~0.2 s). Everything shares one
  event loop, and three things hold it without yielding (measured by timing each reconcile and with
  `PYTHONASYNCIODEBUG=1`, which logs `Engine._worker ... took 0.5-0.95 seconds`):
  - `workloads/replicaset.py:ReplicaSetController.reconcile` creates all missing pods in one
    synchronous loop (`runtime.py:ControllerWriter.create` -> `operations.create`, plus one Event
    each): one reconcile took 0.58 s for 1,000 pods.
  - `nodes/scheduler.py:Scheduler._reconcile` lists every pod and builds a `Counter` of pods per
    node for every pod it schedules: O(pods) per pod, O(N^2) per rollout (1,000 binds: 1.0 s,
    the last ones ~7 ms each); it grows quadratically with the cluster's pod count.
  - `engine/queue.py:Engine._worker` takes the next key with `await asyncio.Queue.get()`, which
    does not suspend when the queue is not empty, and the reconcilers above never await, so a
    worker drains its whole backlog (1,000 keys) in one step of the loop.
  Then each pod gets two status writes from `kubelet.py:PodWorker._report` -> `Kubelet.write_status`,
  where most of the cost is `operations._manage` -> `patching/managedfields.py:record_update`
  (deep copies of the object and a field-set walk). Server CPU is about 5 ms per virtual pod.
  Not changed here (other owners); a yield per created pod / per key (`await asyncio.sleep(0)`)
  and per-node pod counts kept up to date from the pod watch would remove the stalls.
- The `nginx` stand-in (`kubelet/programs/web.py`) speaks HTTP/1.0: it closes the connection after
  every response even when the client asks for keep-alive, so "keep-alive on" against nginx pods
  opens one connection per request (see "conns"). Keep-alive through the proxy is therefore
  measured with a few pods running a small HTTP/1.1 server (image `python`, its own command).
- Through the proxy, a keep-alive connection whose responses arrive in two segments (headers,
  then body: what Python's `http.server` does) waits ~40 ms on a good share of requests
  (p99 ~44 ms vs 0.2 ms direct, and ~65 req/s on one connection vs ~6,000 direct). Cause, most
  likely: `services/proxy.py:ServiceProxy._bind` creates the listener with
  `socket.socket(AF_INET, SOCK_STREAM)`, i.e. proto 0; accepted sockets inherit proto 0, and
  asyncio's `base_events._set_nodelay` only sets TCP_NODELAY when `sock.proto == IPPROTO_TCP`, so
  the client-facing side of every proxied connection keeps Nagle on: the second small write waits
  for the client's delayed ACK (40 ms on Linux). Checked: an accepted socket from such a listener
  has proto 0 and TCP_NODELAY 0. Not changed here (other owners): creating the listener with
  `proto=socket.IPPROTO_TCP` or setting TCP_NODELAY on `conn` in `_accept` should fix it.
- Per new connection the proxy costs its event loop about 0.4-0.7 ms of CPU (accept, a task,
  `asyncio.wait_for(open_connection)` to the pod, a TaskGroup with two relay tasks, closing both
  sides), which is why connection-per-request traffic through a ClusterIP reaches only ~40-60 % of
  the direct rate on 2 CPUs. On a reused connection it only relays bytes and adds little.
- A process pod costs about 21 MB RSS (11-12 MB PSS) for the Python stand-in process, next to
  which the daemon's share (~0.1 MB) is negligible; a virtual pod costs the daemon ~65 kB.
- The default node shape (110 pods per node, one /24 podCIDR per node) admits 330 pods on
  3 nodes, as on real clusters; the 1,000-pod phase raises both through the API (see above).
- Numbers vary by 20-50 % with other load on the machine (the load average is recorded above);
  the proxy p99 especially. Repeat a run before reading much into one number.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument("--profile", type=Path, help="run the server under cProfile; stats go to this dir")
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
        cluster = start_cluster(Path(tmp), args.profile, nodes=NODES)
        try:
            results = asyncio.run(main_async(cluster))
        finally:
            stop_cluster(cluster)
    info = machine()
    print_report(info, results)
    for r in (results.deploy, results.web, results.many):
        polls = r.extra["polls_ms"]
        print(f"{r.name}: {len(polls)} status GETs, p50 {percentile(polls, 50):.1f} ms, max {max(polls):.1f} ms; "
              "readyReplicas over time: " + ", ".join(f"{c}@{t:.2f}s" for t, c in r.extra["timeline"]))
    print(f"\ntotal {time.monotonic() - started:.0f} s")
    if args.profile:
        import pstats

        stats = pstats.Stats(str(args.profile / "server.prof"))
        stats.sort_stats("cumulative").print_stats(50)
        stats.sort_stats("tottime").print_stats(40)
    if not args.no_write and not args.profile:
        write_doc(info, results, NOTES.strip())


if __name__ == "__main__":
    main()
