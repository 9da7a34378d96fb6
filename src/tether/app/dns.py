"""`tether dns`: the multi-cluster DNS server as a process.

One cluster's client (kubeconfig and context, or in-cluster) feeds `ClusterRecords`, whose tables
the `DnsServer` answers from; a small HTTP server serves `/metrics` (Prometheus), `/healthz`
and `/ready` (200 once every watch has listed, as CoreDNS's `ready` plugin) until SIGTERM/SIGINT.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from tether.app.signals import run_until_signal
from tether.connect.dns.server import DnsServer, ServerConfig
from tether.connect.dns.sources import ClusterRecords, SourceConfig
from tether.kube import KubeClient, in_cluster, load_kubeconfig
from tether.net import metrics as m
from tether.net.httpserver import HttpServer, Request, Response

log = logging.getLogger(__name__)
SHUTDOWN_S = 5.0


@dataclass(frozen=True)
class DnsOptions:
    server: ServerConfig = field(default_factory=ServerConfig)
    sources: SourceConfig = field(default_factory=SourceConfig)
    kubeconfig: Path | None = None
    context: str | None = None
    in_cluster: bool = False
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = 9153  # None: no HTTP endpoints


def handler(server: DnsServer, records: ClusterRecords) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        if request.method != "GET":
            return Response(405, b"method not allowed\n", content_type="text/plain")
        if request.path == "/metrics":
            return Response(200, m.render(server.metric_families()).encode(), content_type=m.CONTENT_TYPE)
        if request.path == "/healthz":
            return Response(200, b"OK", content_type="text/plain")
        if request.path in ("/ready", "/readyz"):
            if records.synced:
                return Response(200, b"OK", content_type="text/plain")
            return Response(503, b"watches have not listed yet\n", content_type="text/plain")
        return Response(404, b"not found\n", content_type="text/plain")

    return handle


async def serve(options: DnsOptions, *, announce: Callable[[str], None] = print) -> int:
    credentials = in_cluster() if options.in_cluster else load_kubeconfig(options.kubeconfig, options.context)
    async with KubeClient(credentials) as client:
        server = DnsServer(options.server)
        records = ClusterRecords(client, server.set_table, options.sources)
        host, port = await server.start()
        http: HttpServer | None = None
        where = ""
        if options.metrics_port is not None:
            http = HttpServer(handler(server, records), host=options.metrics_host,
                              port=options.metrics_port, server_header="tether-dns")
            await http.start()
            where = f"; /metrics /healthz /ready on http://{options.metrics_host}:{http.port}"
        upstreams = ", ".join(f"{h}:{p}" for h, p in options.server.upstreams) or "none (other names REFUSED)"
        announce(f"tether dns on {host}:{port} (UDP and TCP) for {client.server}; clusterset.local, "
                 f"cluster.global, cluster.<prefix>; upstreams: {upstreams}{where}")
        try:
            await run_until_signal(records.run(), shutdown_s=SHUTDOWN_S)
        finally:
            await server.close()
            if http is not None:
                await http.close(grace_s=1.0)
    return 0


__all__ = ["DnsOptions", "serve"]
