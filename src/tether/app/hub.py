"""`tether hub run`: every hub controller in one process, under one TaskGroup.

Parts: the shared host informers (Clusters, Works), the cluster health controller, the KubeFed
and Karmada sync controllers, the push-mode Work executor, and a small HTTP server on 127.0.0.1
with `/healthz` (the process is alive), `/readyz` (every informer has synced) and `/metrics`
(Prometheus text). SIGTERM/SIGINT stop it within `shutdown_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tether.federation.execution import WorkExecutor
from tether.federation.health import HealthTimers, build_health_controller
from tether.federation.metrics import HubMetrics
from tether.federation.propagation import (
    HubInformers,
    KarmadaController,
    KubeFedController,
    cluster_info,
)
from tether.kube import KubeClient
from tether.local.http import HttpServer, Request, Response

log = logging.getLogger(__name__)

SHUTDOWN_S = 5.0


@dataclass(frozen=True)
class HubConfig:
    kubeconfig: Path | None = None
    context: str | None = None
    port: int = 8443
    health_port: int | None = None
    health: HealthTimers = field(default_factory=HealthTimers)
    resync_s: float = 60.0
    shutdown_s: float = SHUTDOWN_S


class Hub:
    """The wired parts; `run()` until cancelled."""

    def __init__(self, host: KubeClient, config: HubConfig) -> None:
        self.host = host
        self.config = config
        self.metrics = HubMetrics()
        self.shared = HubInformers(host)
        self.health = build_health_controller(host, timers=config.health)
        self.kubefed = KubeFedController(host, self.shared, self.metrics, resync_s=config.resync_s)
        self.karmada = KarmadaController(host, self.shared, self.metrics, resync_s=config.resync_s)
        self.executor = WorkExecutor(host, self.shared, self.metrics, resync_s=config.resync_s)
        self.metrics.gauges["tether_clusters_ready"] = self._clusters_ready
        self.metrics.gauges["tether_clusters"] = lambda: float(len(self.shared.clusters.keys()))
        self.metrics.gauges["tether_works"] = lambda: float(len(self.shared.works.keys()))
        self.servers: list[HttpServer] = []

    def _clusters_ready(self) -> float:
        infos = [cluster_info(c) for c in self.shared.clusters.list()]
        return float(sum(1 for i in infos if i is not None and i.ready))

    @property
    def ready(self) -> bool:
        return self.shared.synced and self.kubefed.synced and self.karmada.synced

    async def handle(self, request: Request) -> Response:
        if request.method != "GET":
            return Response(405, b"method not allowed\n", content_type="text/plain")
        if request.path == "/healthz":
            return Response(200, b"ok\n", content_type="text/plain")
        if request.path == "/readyz":
            if self.ready:
                return Response(200, b"ok\n", content_type="text/plain")
            return Response(503, b"informers not synced\n", content_type="text/plain")
        if request.path == "/metrics":
            return Response(200, self.metrics.render().encode(),
                            content_type="text/plain; version=0.0.4")
        if request.path == "/":
            body = json.dumps({"ready": self.ready, "paths": ["/healthz", "/readyz", "/metrics"]})
            return Response(200, body.encode())
        return Response(404, b"not found\n", content_type="text/plain")

    async def start_servers(self) -> list[int]:
        ports = [self.config.port]
        if self.config.health_port is not None:
            ports.append(self.config.health_port)
        for port in ports:
            server = HttpServer(self.handle, host="127.0.0.1", port=port,
                                server_header="tether-hub")
            await server.start()
            self.servers.append(server)
        return [s.port for s in self.servers]

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.shared.run())
                group.create_task(self.health.run())
                group.create_task(self.kubefed.run())
                group.create_task(self.karmada.run())
                group.create_task(self.executor.run())
        finally:
            for server in self.servers:
                await server.close(grace_s=1.0)


async def serve(config: HubConfig, *, announce: Callable[[str], None] = print) -> int:
    """Run the hub until SIGTERM/SIGINT (or cancellation); shutdown bounded by `shutdown_s`."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    async with KubeClient.from_kubeconfig(config.kubeconfig, config.context) as host:
        hub = Hub(host, config)
        ports = await hub.start_servers()
        announce(f"hub running against {host.server}; serving /healthz /readyz /metrics on "
                 + ", ".join(f"http://127.0.0.1:{p}" for p in ports))
        runner = asyncio.create_task(hub.run())
        stopper = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if not runner.done():
                runner.cancel()
            try:
                async with asyncio.timeout(config.shutdown_s):
                    with contextlib.suppress(asyncio.CancelledError):
                        await runner
            except TimeoutError:
                log.warning("hub did not stop within %.1fs", config.shutdown_s)
        if runner.done() and not runner.cancelled() and runner.exception() is not None:
            raise runner.exception()  # type: ignore[misc]
    return 0
