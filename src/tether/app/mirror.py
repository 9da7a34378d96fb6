"""`tether mirror`: semaphore-service-mirror's process, from its configuration file.

Builds the local client (the `-kube-config` flag, else `localCluster.kubeConfigPath`, else the
in-cluster ServiceAccount) and one client per remote, then runs the `ServiceMirror` with its
HTTP endpoints until SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tether.app.signals import run_until_signal
from tether.connect.mirror.config import MirrorConfig
from tether.connect.mirror.service import Remote, ServiceMirror
from tether.connect.remote import RemoteError, kubeconfig_credentials, url_credentials
from tether.kube import ClusterCredentials, KubeClient, KubeconfigError, in_cluster, load_kubeconfig

log = logging.getLogger(__name__)
SHUTDOWN_S = 5.0


@dataclass(frozen=True)
class MirrorOptions:
    kubeconfig: str = ""  # the local cluster (flag/env); "" falls back to the file, then in-cluster
    listen: str = ":8080"  # host:port for /healthz, /livez and /metrics ("" host: every address)


def split_listen(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"listen address {address!r} is not HOST:PORT")
    host = host.strip("[]")
    return host or "0.0.0.0", int(port)


def local_credentials(config: MirrorConfig, options: MirrorOptions) -> ClusterCredentials:
    path = options.kubeconfig or config.local.kubeconfig_path
    if path:
        return load_kubeconfig(Path(path))
    return in_cluster()


async def remote_credentials(config: MirrorConfig) -> dict[str, ClusterCredentials]:
    out: dict[str, ClusterCredentials] = {}
    for remote in config.remotes:
        try:
            if remote.kubeconfig_path:
                out[remote.name] = kubeconfig_credentials(remote.kubeconfig_path)
            else:
                out[remote.name] = await url_credentials(remote.name, remote.remote_api_url, remote.remote_ca_url,
                                                         remote.remote_sa_token_path)
        except RemoteError as exc:
            raise RemoteError(f"remote {remote.name}: {exc}") from None
    return out


async def serve(config: MirrorConfig, options: MirrorOptions, *, announce: Callable[[str], None] = print) -> int:
    """Run until a stop signal; raises `KubeconfigError`/`RemoteError` when a cluster cannot
    be reached with what the configuration says."""
    for key in config.unknown_keys:
        log.warning("configuration key %s is not known; ignored", key)
    host, port = split_listen(options.listen)
    local = KubeClient(local_credentials(config, options))
    remotes = await remote_credentials(config)
    clients = {name: KubeClient(credentials) for name, credentials in remotes.items()}
    try:
        mirror = ServiceMirror(
            config.local.name, local, config.global_settings,
            [Remote(r, clients[r.name]) for r in config.remotes], zones=config.local.zones)
        bound = await mirror.serve(host, port)
        announce(f"mirroring {', '.join(r.name for r in config.remotes)} into {config.local.name} "
                 f"namespace {config.global_settings.mirror_namespace}; /healthz /metrics on "
                 f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{bound}")
        await run_until_signal(mirror.run(), shutdown_s=SHUTDOWN_S)
    finally:
        await asyncio.gather(local.close(), *(c.close() for c in clients.values()), return_exceptions=True)
    return 0


__all__ = ["KubeconfigError", "MirrorOptions", "RemoteError", "serve"]
