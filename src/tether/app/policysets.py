"""`tether policy-sets`: semaphore-policy's process (one remote cluster per process)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from tether.app.mirror import split_listen
from tether.app.signals import run_until_signal
from tether.connect.policysets.config import PolicySetsConfig
from tether.connect.policysets.runner import PolicySets
from tether.connect.remote import RemoteError, fetch_ca, kubeconfig_credentials, read_token
from tether.kube import ClusterCredentials, KubeClient, in_cluster, load_kubeconfig
from tether.net.httpserver import HttpServer, Request, Response

SHUTDOWN_S = 5.0
TEXT = "text/plain; charset=utf-8"


async def remote_credentials(config: PolicySetsConfig) -> ClusterCredentials:
    if config.target_kubeconfig:
        return kubeconfig_credentials(config.target_kubeconfig)
    token = read_token(config.remote_sa_token_path) if config.remote_sa_token_path else config.remote_sa_token.strip()
    if not token:
        raise RemoteError("no remote token: set -remote-sa-token-path or SP_REMOTE_SERVICE_ACCOUNT_TOKEN")
    ca = await fetch_ca(config.remote_ca_url)
    return ClusterCredentials.from_token(server=config.remote_api_url, token=token, ca_bundle=ca,
                                         name=config.target_cluster_name)


async def serve(config: PolicySetsConfig, *, announce: Callable[[str], None] = print) -> int:
    host, port = split_listen(config.listen)
    local = KubeClient(load_kubeconfig(Path(config.local_kubeconfig)) if config.local_kubeconfig else in_cluster())
    remote = KubeClient(await remote_credentials(config))
    sets = PolicySets(config.target_cluster_name, remote, local, resync_s=config.resync_s,
                      network_policies=config.network_policies)

    async def handle(request: Request) -> Response:
        if request.method != "GET":
            return Response(405, b"method not allowed\n", content_type=TEXT)
        if request.path == "/healthz":
            return Response(200 if sets.healthy else 503, sets.health_report().encode(), content_type=TEXT)
        if request.path == "/metrics":
            return Response(200, sets.metrics_text().encode(), content_type="text/plain; version=0.0.4")
        return Response(404, b"not found\n", content_type=TEXT)

    server = HttpServer(handle, host=host, port=port, server_header="tether-policy-sets")
    try:
        await server.start()
        announce(f"keeping GlobalNetworkSets of {config.target_cluster_name}'s labelled pods; /healthz /metrics on "
                 f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{server.port}")
        await run_until_signal(sets.run(), shutdown_s=SHUTDOWN_S)
    finally:
        await server.close(grace_s=1.0)
        await asyncio.gather(local.close(), remote.close(), return_exceptions=True)
    return 0
