"""`tether mirror`: the service mirror as one process, and the pieces the hub reuses.

`ServiceMirror` wires one local cluster to its remotes: a `LocalView` of the mirror namespace,
a `MirrorRunner` per remote, the `GlobalMirror` over every cluster, and an HTTP server with
`/healthz` (200 only while every remote has been listed and answers; otherwise 503 saying which
does not), `/livez` (the process is alive) and `/metrics` (Prometheus text).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tether.connect.informers import wait_listed
from tether.connect.mirror import labels as L
from tether.connect.mirror import stale
from tether.connect.mirror.apply import FIELD_MANAGER
from tether.connect.mirror.config import GlobalSettings, RemoteClusterSettings
from tether.connect.mirror.globals import GlobalMirror, is_global
from tether.connect.mirror.localview import LocalView
from tether.connect.mirror.metrics import MirrorMetrics
from tether.connect.mirror.plan import Freshness
from tether.connect.mirror.runner import MirrorRunner
from tether.kube import AlreadyExists, KubeClient, KubeError, WatchEvent
from tether.net.httpserver import HttpServer, Request, Response

log = logging.getLogger(__name__)
TEXT = "text/plain; charset=utf-8"
FreshnessHandler = Callable[[str, Freshness, stale.Condition], None]


@dataclass(frozen=True)
class Remote:
    settings: RemoteClusterSettings
    client: KubeClient


class ServiceMirror:
    """Mirrors into one local cluster from `remotes`; `run()` until cancelled."""

    def __init__(self, local_name: str, local_client: KubeClient, settings: GlobalSettings, remotes: Sequence[Remote],
                 *, zones: Sequence[str] = ("local",), metrics: MirrorMetrics | None = None,
                 on_freshness: FreshnessHandler | None = None) -> None:
        self.local_name = local_name
        self.local_client = local_client
        self.settings = settings
        self.metrics = metrics or MirrorMetrics()
        self.view = LocalView(local_client, settings.mirror_namespace, self._local_event)
        self.runners: dict[str, MirrorRunner] = {}
        self.globals = GlobalMirror(settings, zones, local_client, self.view, self.metrics)
        self.globals.add_source(local_name, local_client, local=True)
        self._on_freshness = on_freshness
        self._by_prefix: dict[str, MirrorRunner] = {}
        for remote in remotes:
            runner = MirrorRunner(remote.settings, settings, remote.client, local_client, self.view, self.metrics,
                                  on_freshness=self._freshness_changed)
            self.runners[remote.settings.name] = runner
            self._by_prefix[remote.settings.service_prefix] = runner
            self.globals.add_source(remote.settings.name, remote.client, freshness=_freshness_of(runner))
        self.servers: list[HttpServer] = []

    def _freshness_changed(self, cluster: str, state: Freshness, condition: stale.Condition) -> None:
        self.globals.refresh()
        if self._on_freshness is not None:
            self._on_freshness(cluster, state, condition)

    def _local_event(self, kind: str, event: WatchEvent) -> None:
        found = (event.object.get("metadata") or {}).get("labels") or {}
        if found.get(L.MIRRORED_SVC) == L.TRUE:
            runner = self._by_prefix.get(str(found.get(L.PREFIX_SYNC, "")))
            if runner is not None:
                runner.local_event(kind, event)
        elif is_global(event.object):
            self.globals.local_event(kind, event)

    # health ------------------------------------------------------------------------------

    @property
    def healthy(self) -> bool:
        return self.view.synced and all(r.healthy for r in self.runners.values())

    def health_report(self) -> str:
        lines = [f"local {self.local_name}: {'ok' if self.view.synced else 'not listed yet'}"]
        lines += [r.health_detail() for r in self.runners.values()]
        return "\n".join(lines) + "\n"

    async def handle(self, request: Request) -> Response:
        if request.method != "GET":
            return Response(405, b"method not allowed\n", content_type=TEXT)
        if request.path == "/healthz":
            return Response(200 if self.healthy else 503, self.health_report().encode(), content_type=TEXT)
        if request.path == "/livez":
            return Response(200, b"ok\n", content_type=TEXT)
        if request.path == "/metrics":
            return Response(200, self.metrics.render().encode(), content_type="text/plain; version=0.0.4")
        return Response(404, b"not found\n", content_type=TEXT)

    async def serve(self, host: str, port: int) -> int:
        server = HttpServer(self.handle, host=host, port=port, server_header="tether-mirror")
        await server.start()
        self.servers.append(server)
        return server.port

    # running -----------------------------------------------------------------------------

    async def ensure_namespace(self) -> None:
        """Create the mirror namespace when it is missing (upstream expects it; a mirror
        without the right to create namespaces says so and carries on)."""
        namespace = self.settings.mirror_namespace
        try:
            if await self.local_client.get_or_none("v1", "Namespace", namespace) is None:
                await self.local_client.create({"apiVersion": "v1", "kind": "Namespace",
                                                "metadata": {"name": namespace}}, field_manager=FIELD_MANAGER)
                log.info("created the mirror namespace %s in %s", namespace, self.local_name)
        except AlreadyExists:
            pass
        except KubeError as exc:
            log.error("the mirror namespace %s in %s: %s (create it, or grant the right to)", namespace,
                      self.local_name, exc.message)

    async def run(self) -> None:
        await self.ensure_namespace()
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.view.run())
                group.create_task(self._run_when_listed())
        finally:
            for server in self.servers:
                await server.close(grace_s=1.0)

    async def _run_when_listed(self) -> None:
        """Nothing is planned before the mirror namespace is listed: plans compare with it."""
        await wait_listed(self.view.informers.values())
        log.info("mirror namespace %s listed on %s", self.settings.mirror_namespace, self.local_name)
        async with asyncio.TaskGroup() as group:
            for runner in self.runners.values():
                group.create_task(runner.run())
            group.create_task(self.globals.run())


def _freshness_of(runner: MirrorRunner) -> Callable[[], Freshness]:
    return lambda: runner.freshness
