"""The dashboard's HTTP side, run inside `tether hub run` (`--dashboard-port`).

- `/`, `/static/NAME`: the page (`static/`, package data), served to anyone: it holds no data.
  Without credentials it explains how to sign in (a token kept in the tab's sessionStorage)
  or how to reach the hub with `kubectl port-forward`.
- `/api/model`: the current `model.Dashboard` as JSON; `/api/events`: server-sent events, one
  `model` event per change (and a comment every `KEEPALIVE_S`). Both need a caller the hub lets
  `get clusters` (`access`); anything else answers a Kubernetes `Status`.
- `/healthz`.

One `Feed` per hub builds the model from the hub's caches when an informer reports a change
(Clusters, Works, pull members' Leases) and at least every `TICK_S` (the tunnel's counters and
the federated sources' status change without an event here), and hands the same snapshot to
every browser: no browser causes a request to the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING

from tether.app import clusterproxy as proxy_app
from tether.app.dashboard import model as M
from tether.app.dashboard.access import DashboardAccess
from tether.federation import clusterproxy as cp
from tether.federation import works as W
from tether.federation.health import HUB_NAMESPACE
from tether.federation.model import ResourceRef
from tether.federation.propagation import STATUS_ANNOTATION
from tether.kube.watch import Informer, WatchEvent
from tether.net.httpserver import HttpServer, Reply, Request, Response, StreamResponse
from tether.objects import Obj
from tether.objects.times import seconds_of

if TYPE_CHECKING:
    from tether.app.hub import Hub
    from tether.tunnel.server import TunnelServer

log = logging.getLogger(__name__)

TICK_S = 2.0
DEBOUNCE_S = 0.1  # a burst of informer events makes one snapshot
KEEPALIVE_S = 15.0
RECHECK_S = 60.0  # how long a viewer whose right was revoked may still get updates
DEFAULT_PORT = 8090

CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml",
                 ".png": "image/png", ".ico": "image/x-icon"}
# Everything the page uses comes from here; text from the hub is only ever set as text.
SECURITY_HEADERS = [
    ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; "
     "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
     "frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
]


def load_static() -> dict[str, tuple[bytes, str]]:
    """name → (content, content type) for every asset shipped in `static/`."""
    out: dict[str, tuple[bytes, str]] = {}
    for entry in resources.files(__package__ or "tether.app.dashboard").joinpath("static").iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in CONTENT_TYPES:
            out[entry.name] = (entry.read_bytes(), CONTENT_TYPES[suffix])
    return out


class Feed:
    """The latest model and its version; waiters wake when the facts change."""

    def __init__(self, build: Callable[[], M.Dashboard], *, tick_s: float = TICK_S) -> None:
        self._build = build
        self.tick_s = tick_s
        self.version = 0
        self.latest: M.Dashboard | None = None
        self._facts = ""
        self._poked = asyncio.Event()
        self._bumped = asyncio.Event()

    def poke(self) -> None:
        self._poked.set()

    def refresh(self) -> None:
        try:
            model = self._build()
        except Exception:  # a bug in the model must not stop the feed (the page keeps the last)
            log.exception("dashboard: building the model failed")
            return
        facts = M.facts_json(model)
        self.latest = model
        if facts != self._facts:
            self._facts = facts
            self.version += 1
            bumped, self._bumped = self._bumped, asyncio.Event()
            bumped.set()

    def current(self) -> M.Dashboard:
        if self.latest is None:
            self.refresh()
        assert self.latest is not None
        return self.latest

    async def wait_beyond(self, version: int) -> None:
        while self.version <= version:
            await self._bumped.wait()

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.tick_s):
                    await self._poked.wait()
            await asyncio.sleep(DEBOUNCE_S)
            self._poked.clear()
            self.refresh()


def _answer(outcome: cp.Answer) -> Response:
    return Response(outcome.status, outcome.body, list(outcome.headers) + SECURITY_HEADERS,
                    outcome.content_type)


def tunnel_facts(server: TunnelServer) -> M.TunnelFacts:
    """What the dashboard shows of a tunnel server, from its state and counters."""
    counters = server.metrics.counters
    data = counters.get("data_bytes_total", {})

    def segment(name: str) -> int:
        return int(sum(v for labels, v in data.items() if ("segment", name) in labels))

    return M.TunnelFacts(
        agents=tuple(server.agent_ids()), established=len(server.state.established),
        pending_dials=len(server.state.pending), bytes_to_agents=segment("to_agent"),
        bytes_from_agents=segment("from_agent"),
        connects_refused=int(sum(counters.get("http_connect_refused_total", {}).values())),
        dial_failures=tuple(sorted(server.state.failures.counts.items())))


def plain_http_refusal(address: str, tls: bool) -> str | None:
    """Why the dashboard must not serve plain HTTP on `address`, or None: a bearer token typed
    into the page crosses the network in a header, so plain HTTP is for loopback only (reach a
    hub in a pod with `kubectl port-forward`, which arrives on the pod's loopback)."""
    if tls or address == "localhost":
        return None
    try:
        if ipaddress.ip_address(address.strip("[]")).is_loopback:
            return None
    except ValueError:
        pass
    shown = address or "every address"
    return (f"--dashboard-address {shown} without --dashboard-tls would send sign-in tokens in clear "
            "text: add --dashboard-tls, or keep 127.0.0.1 and reach it with kubectl port-forward")


class DashboardServer:
    def __init__(self, hub: Hub, *, address: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 tls: bool = False) -> None:
        self.hub = hub
        self.address = address
        self.port = port
        self.tls = tls
        self.access = DashboardAccess(hub.host)
        self.static = load_static()
        self.leases = Informer(hub.host, "coordination.k8s.io/v1", "Lease", HUB_NAMESPACE,
                               on_event=self._changed)
        self.feed = Feed(self.snapshot_model)
        hub.shared.cluster_handlers.append(self._changed)
        hub.shared.work_handlers.append(self._changed)
        self.http: HttpServer | None = None

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        port = self.http.port if self.http is not None else self.port
        return f"{'https' if self.tls else 'http'}://{host}:{port}/"

    def _changed(self, _event: WatchEvent) -> None:
        self.feed.poke()

    async def start(self) -> None:
        refused = plain_http_refusal(self.address, self.tls)
        if refused is not None:
            raise proxy_app.ProxySetupError(refused)
        context: ssl.SSLContext | None = None
        if self.tls:
            # the cluster proxy's CA and serving certificate: `tether kubeconfig` client
            # certificates (and the hub's admin token) work here as they do on the proxy
            pki = await proxy_app.load_pki(self.hub.host, create=True)
            wildcard = self.address in ("", "0.0.0.0", "::")
            sans = ("127.0.0.1", "localhost") + (() if wildcard else (self.address,))
            context = proxy_app.serving_context(pki, tuple(dict.fromkeys(sans)))
            await self.access.aclose()
            self.access = DashboardAccess(self.hub.host, admin_token=pki.admin_token)
        self.http = HttpServer(self.handle, host=self.address, port=self.port,
                               ssl_context=context, server_header="tether-dashboard")
        await self.http.start()

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:  # the hub closes the listener (`aclose`)
            group.create_task(self.leases.run())
            group.create_task(self.feed.run())

    async def aclose(self) -> None:
        if self.http is not None:
            await self.http.close(grace_s=1.0)
        await self.access.aclose()

    # the model from the hub's caches ------------------------------------------------------

    def snapshot(self) -> M.HubSnapshot:
        hub = self.hub
        leases: dict[str, float] = {}
        for lease in self.leases.list():
            renewed = seconds_of((lease.get("spec") or {}).get("renewTime"))
            if renewed is not None:
                leases[str(lease["metadata"]["name"])] = renewed
        probes = {name: M.ProbeSeen(at, probe.healthy, probe.detail)
                  for name, (at, probe) in hub.health.last_probe.items()}
        return M.HubSnapshot(
            now_s=time.time(), clusters=tuple(hub.shared.clusters.list()), leases=leases,
            probes=probes, sources=tuple(self._sources()), tunnel=self._tunnel(),
            mirror_policies=tuple(hub.mirror.policies.list()),
            dns_endpoints=tuple(hub.kubefed_dns.endpoints.list()))

    def snapshot_model(self) -> M.Dashboard:
        return M.build(self.snapshot())

    def _source(self, dialect: str, ref: ResourceRef) -> Obj | None:
        if dialect == "kubefed":
            fed = self.hub.kubefed.types.get(ref.kind)
            if fed is not None and fed.api_version == ref.api_version:
                return fed.informer.get(ref.namespace, ref.name)
            return None
        entry = self.hub.karmada.templates.get((ref.api_version, ref.kind))
        return entry[0].get(ref.namespace, ref.name) if entry is not None else None

    def _sources(self) -> list[M.SourceEntry]:
        works: dict[tuple[str, ResourceRef], list[Obj]] = {}
        for work in self.hub.shared.works.list():
            found = W.work_source(work)
            if found is not None:
                works.setdefault(found, []).append(work)
        # sources with no Work at all still show why (no Ready cluster, a failed override)
        for kind, fed in list(self.hub.kubefed.types.items()):
            if fed.draining:
                continue
            for obj in fed.informer.list():
                meta = obj.get("metadata") or {}
                ref = ResourceRef(fed.api_version, kind, str(meta.get("namespace") or ""),
                                  str(meta.get("name") or ""))
                works.setdefault(("kubefed", ref), [])
        for (api_version, kind), (informer, _) in list(self.hub.karmada.templates.items()):
            for obj in informer.list():
                meta = obj.get("metadata") or {}
                if STATUS_ANNOTATION in (meta.get("annotations") or {}):
                    ref = ResourceRef(api_version, kind, str(meta.get("namespace") or ""),
                                      str(meta.get("name") or ""))
                    works.setdefault(("karmada", ref), [])
        return [M.SourceEntry(dialect, ref, self._source(dialect, ref), tuple(found))
                for (dialect, ref), found in works.items()]

    def _tunnel(self) -> M.TunnelFacts | None:
        tunnel = self.hub.tunnel
        server = tunnel.server if tunnel is not None else None
        return tunnel_facts(server) if server is not None else None

    # HTTP ----------------------------------------------------------------------------------

    async def handle(self, request: Request) -> Reply:
        try:
            return await self._handle(request)
        except Exception as exc:  # a bug answers 500 and the server goes on
            log.exception("dashboard: internal error on %s %s", request.method, request.path)
            return _answer(cp.failure(500, "InternalError", f"Internal error occurred: {exc}"))

    async def _handle(self, request: Request) -> Reply:
        if request.method != "GET":
            return _answer(cp.failure(405, "MethodNotAllowed",
                                      "the dashboard is read-only: only GET is served"))
        path = request.path
        if path == "/healthz":
            return Response(200, b"ok\n", content_type="text/plain")
        if path in ("/", "/index.html"):
            return self._asset("index.html")
        if path.startswith("/static/"):
            return self._asset(path[len("/static/"):])
        if not path.startswith("/api/"):
            return _answer(cp.failure(404, "NotFound", "the server could not find the requested resource"))
        who = await self.access.caller(request.peer_cert, request.headers)
        if isinstance(who, cp.Answer):
            return _answer(who)
        request.authenticated()
        if path == "/api/model":
            return Response(200, M.to_json(self.feed.current()).encode(), list(SECURITY_HEADERS))
        if path == "/api/events":
            async def still_allowed() -> bool:
                return not isinstance(await self.access.caller(request.peer_cert, request.headers),
                                      cp.Answer)

            return StreamResponse(200, event_stream(self.feed, still_allowed),
                                  [*SECURITY_HEADERS, ("X-Accel-Buffering", "no")],
                                  content_type="text/event-stream; charset=utf-8")
        if path == "/api/whoami":
            body = {"username": who.username, "groups": list(who.groups), "via": who.via}
            return Response(200, json.dumps(body).encode(), list(SECURITY_HEADERS))
        return _answer(cp.failure(404, "NotFound", "the server could not find the requested resource"))

    def _asset(self, name: str) -> Response:
        found = self.static.get(name)
        if found is None:
            return _answer(cp.failure(404, "NotFound", f"no such asset: {name}"))
        return Response(200, found[0], list(SECURITY_HEADERS), found[1])


async def event_stream(feed: Feed, still_allowed: Callable[[], Awaitable[bool]], *,
                       keepalive_s: float = KEEPALIVE_S, recheck_s: float = RECHECK_S,
                       clock: Callable[[], float] = time.monotonic) -> AsyncIterator[bytes]:
    """Server-sent events: the model now, then again at each change. The caller's right is
    asked again every `recheck_s` (cached answers make that cheap), so a revoked viewer stops
    getting updates: the stream ends with an `unauthorized` event."""
    yield b"retry: 2000\n\n"
    sent = -1
    checked = clock()
    while True:
        if clock() - checked >= recheck_s:
            if not await still_allowed():
                yield b"event: unauthorized\ndata: {}\n\n"
                return
            checked = clock()
        if feed.version != sent or feed.latest is None:
            model = feed.current()
            sent = feed.version
            yield f"id: {sent}\nevent: model\ndata: {M.to_json(model)}\n\n".encode()
        try:
            async with asyncio.timeout(min(keepalive_s, recheck_s)):
                await feed.wait_beyond(sent)
        except TimeoutError:
            yield b": keepalive\n\n"
