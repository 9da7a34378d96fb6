"""How bytes reach a cluster: direct TCP, an HTTP CONNECT proxy, or a pluggable dialer.

Request/response calls go through the lean pool in `http1.py` whenever the connection is
direct or comes from a dialer; streams (watch, logs, raw pass-through, upgrades) and every call
through a proxy or a foreign network backend go through httpcore's pool built here. What varies
is how a connection is made, so a tunnel can carry a cluster's traffic without any change above
this module:

- `ConnectOptions()` dials TCP directly (httpcore's default backend).
- `ClusterCredentials.proxy_url` sends `CONNECT host:port` to an HTTP proxy first, with
  `proxy_headers` on the CONNECT (Karmada `spec.proxyURL`/`proxyHeader`, apiserver-network-proxy
  in http-connect mode), then TLS to the apiserver inside that tunnel.
- `ConnectOptions(dialer=fn)`: `fn(host, port)` returns an `(asyncio.StreamReader,
  asyncio.StreamWriter)` pair already connected to `host:port`, however it likes (a tunnel, a
  Unix socket, an SSH channel). TLS is started on top by the client. With a proxy configured,
  the dialer is asked for the *proxy's* address.
- `ConnectOptions(network_backend=b)`: any `httpcore.AsyncNetworkBackend`, for a tunnel whose
  streams are not asyncio streams (implement `connect_tcp` returning an `AsyncNetworkStream`
  with `read`, `write`, `aclose`, `start_tls`, `get_extra_info`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from tether.kube.config import ClusterCredentials

Dialer = Callable[[str, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
CLOSE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class ConnectOptions:
    """Runtime connection choices that are not part of a cluster's stored credentials."""

    dialer: Dialer | None = None
    network_backend: httpcore.AsyncNetworkBackend | None = None
    connect_timeout_s: float = 10.0
    max_connections: int = 256  # every open watch holds one
    max_keepalive_connections: int = 32
    keepalive_expiry_s: float = 30.0


class _AsyncioStream(httpcore.AsyncNetworkStream):
    """An httpcore network stream over an asyncio reader/writer pair returned by a dialer."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109 (httpcore's interface)
        try:
            async with asyncio.timeout(timeout):
                return await self._reader.read(max_bytes)
        except TimeoutError:
            raise httpcore.ReadTimeout("read timed out") from None
        except (OSError, ssl.SSLError) as exc:
            raise httpcore.ReadError(str(exc) or type(exc).__name__) from exc

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109 (httpcore's interface)
        if not buffer:
            return
        try:
            self._writer.write(buffer)
            async with asyncio.timeout(timeout):
                await self._writer.drain()
        except TimeoutError:
            raise httpcore.WriteTimeout("write timed out") from None
        except (OSError, ssl.SSLError, RuntimeError) as exc:
            raise httpcore.WriteError(str(exc) or type(exc).__name__) from exc

    async def aclose(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await self._writer.wait_closed()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
    ) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                await self._writer.start_tls(ssl_context, server_hostname=server_hostname)
        except TimeoutError:
            raise httpcore.ConnectTimeout("TLS handshake timed out") from None
        except (OSError, ssl.SSLError) as exc:
            raise httpcore.ConnectError(f"TLS: {exc}") from exc
        return self

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return self._reader.at_eof() or self._writer.is_closing()
        if info == "ssl_object":
            return self._writer.get_extra_info("ssl_object")
        if info in ("client_addr", "server_addr"):
            return self._writer.get_extra_info("sockname" if info == "client_addr" else "peername")
        return None


class DialerBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend whose every TCP connection comes from `dialer(host, port)`."""

    def __init__(self, dialer: Dialer) -> None:
        self._dialer = dialer

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await self._dialer(host, port)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"dialing {host}:{port} timed out") from None
        except Exception as exc:  # a tunnel's own dial errors mean "not connected", like OSError
            raise httpcore.ConnectError(f"dialing {host}:{port}: {exc}") from exc
        return _AsyncioStream(reader, writer)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
                                  socket_options: Iterable[Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("a dialer backend does not open Unix sockets")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for part in self._stream:
            yield part

    async def aclose(self) -> None:
        if hasattr(self._stream, "aclose"):
            await self._stream.aclose()


class CoreTransport(httpx.AsyncBaseTransport):
    """httpx on an httpcore pool we build ourselves, so the network backend is ours to choose.

    httpcore exceptions pass through unchanged; the client classifies them (see `client.py`).
    """

    def __init__(self, pool: httpcore.AsyncConnectionPool) -> None:
        self._pool = pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=request.url.raw_scheme, host=request.url.raw_host,
                             port=request.url.port, target=request.url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        response = await self._pool.handle_async_request(core_request)
        return httpx.Response(status_code=response.status, headers=response.headers,
                              stream=_ResponseStream(response.stream), extensions=response.extensions)

    async def aclose(self) -> None:
        await self._pool.aclose()


def build_transport(credentials: ClusterCredentials, options: ConnectOptions,
                    ssl_context: ssl.SSLContext | None = None) -> CoreTransport:
    """httpcore's pool for `credentials`; `ssl_context` when the caller has built it already."""
    if ssl_context is None:
        context = credentials.ssl_context()
        ssl_context = context if isinstance(context, ssl.SSLContext) else None
    backend = options.network_backend
    if backend is None and options.dialer is not None:
        backend = DialerBackend(options.dialer)
    limits: dict[str, Any] = {
        "max_connections": options.max_connections,
        "max_keepalive_connections": options.max_keepalive_connections,
        "keepalive_expiry": options.keepalive_expiry_s,
        "network_backend": backend,
    }
    if not credentials.proxy_url:
        return CoreTransport(httpcore.AsyncConnectionPool(ssl_context=ssl_context, **limits))
    proxy = httpx.URL(credentials.proxy_url)
    if proxy.scheme not in ("http", "https"):
        raise ValueError(f"unsupported proxy scheme {proxy.scheme!r} in {credentials.proxy_display}"
                         " (http and https CONNECT proxies are supported)")
    auth = (proxy.username, proxy.password) if proxy.username else None
    bare = proxy.copy_with(username=None, password=None)
    return CoreTransport(httpcore.AsyncHTTPProxy(
        proxy_url=str(bare),
        proxy_auth=auth,
        proxy_headers=list(credentials.proxy_headers),
        ssl_context=ssl_context,
        proxy_ssl_context=ssl.create_default_context() if proxy.scheme == "https" else None,
        **limits,
    ))
