"""How bytes reach a cluster: direct TCP, an HTTP CONNECT proxy, or a pluggable dialer.

Every call of `KubeClient` (requests, watches, streams, raw pass-through, upgrades) goes through
one `tether.net.httpclient.ConnectionPool` built here from a cluster's credentials. What varies
is how a connection is made, so a tunnel can carry a cluster's traffic without any change above
this module:

- `ConnectOptions()` dials TCP directly.
- `ClusterCredentials.proxy_url` sends `CONNECT host:port` to an HTTP proxy first (TLS to the
  proxy first for an `https://` proxy URL), with `proxy_headers` on the CONNECT (Karmada
  `spec.proxyURL`/`proxyHeader`, apiserver-network-proxy in http-connect mode: how the hub
  reaches Pull members through its tunnel), then TLS to the apiserver inside that tunnel.
- `ConnectOptions(dialer=fn)`: `fn(host, port)` returns an `(asyncio.StreamReader,
  asyncio.StreamWriter)` pair already connected to `host:port`, however it likes (a tunnel, a
  Unix socket, an SSH channel). TLS is started on top by the client. With a proxy configured,
  the dialer is asked for the *proxy's* address.
"""

from __future__ import annotations

import asyncio
import ssl
import urllib.parse
from dataclasses import dataclass

from tether.kube.config import ClusterCredentials
from tether.net.httpclient import ConnectionPool, Dialer, Proxy

__all__ = ["ConnectOptions", "Dialer", "open_pool"]


@dataclass(frozen=True)
class ConnectOptions:
    """Runtime connection choices that are not part of a cluster's stored credentials."""

    dialer: Dialer | None = None
    connect_timeout_s: float = 10.0
    max_connections: int = 256  # every open watch holds one
    # idle connections kept for reuse: above the writes a busy controller keeps in flight (the
    # hub's propagation alone has ~32 at once in a burst), else each burst closes the surplus and
    # the next opens it again, a TLS handshake on both sides per connection; idle ones still
    # expire after keepalive_expiry_s
    max_keepalive_connections: int = 128
    keepalive_expiry_s: float = 30.0


def open_pool(credentials: ClusterCredentials, options: ConnectOptions,
              ssl_context: ssl.SSLContext | None) -> tuple[str, ConnectionPool]:
    """The server URL's path prefix and the pool that reaches it. `ValueError` for a server or
    proxy URL this client cannot use."""
    url = urllib.parse.urlsplit(credentials.server)
    dialer = options.dialer
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        port = 0
    if url.scheme not in ("http", "https") or not url.hostname or not port:
        # every call fails as Unreachable, as for a server that is not there
        dialer = _refuse(f"unsupported server URL {credentials.server!r} (http or https with a host)")
    proxy = None
    if credentials.proxy_url:
        try:
            proxy = Proxy.from_url(credentials.proxy_url, credentials.proxy_headers)
        except ValueError as exc:
            raise ValueError(f"{exc} in {credentials.proxy_display}") from None
    pool = ConnectionPool(
        url.hostname or "localhost", port, ssl_context=ssl_context if url.scheme == "https" else None,
        dialer=dialer, proxy=proxy, max_connections=options.max_connections,
        max_idle=options.max_keepalive_connections, keepalive_expiry_s=options.keepalive_expiry_s,
        connect_timeout_s=options.connect_timeout_s)
    return url.path.rstrip("/"), pool


def _refuse(reason: str) -> Dialer:
    async def dial(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        raise ValueError(reason)

    return dial
