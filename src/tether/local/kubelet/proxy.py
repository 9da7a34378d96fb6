"""`pods/proxy` and `services/proxy`: forward an HTTP request to a pod and stream the answer back.

Paths (the name segment may carry a scheme and a port, as on real clusters):

    /api/v1/namespaces/{ns}/pods/{[scheme:]name[:port]}/proxy/{path}
    /api/v1/namespaces/{ns}/services/{[scheme:]name[:port]}/proxy/{path}

A pod's port is a number or a named container port (default: its first declared port). A
service's port is a service port number or name; the request goes to one ready endpoint, from
the Service's EndpointSlices (or its Endpoints), at that port's target. The request keeps its
method, body, query and end-to-end headers; the caller's credentials are not passed on (the API
server consumed them). Upgrades (WebSocket to a pod) are relayed as raw bytes after the 101.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import unquote, urlsplit

from tether.local.errors import ApiError, bad_request
from tether.local.kubelet.exec import CONNECTION_ERRORS
from tether.local.netns import HostFabric
from tether.local.resources import ResourceType
from tether.local.store import Store
from tether.net import http1
from tether.net.httpserver import Reply, Request, Response, StreamResponse, UpgradeResponse

DIAL_TIMEOUT_S = 5.0
RESPONSE_TIMEOUT_S = 30.0  # until the backend's status line and headers have arrived
BODY_IDLE_TIMEOUT_S = 300.0  # between two pieces of a (possibly long-polling) response body
MAX_HEAD_BYTES = 64 * 1024
READ_CHUNK = 64 * 1024
SLICES = "discovery.k8s.io/endpointslices"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
# RFC 9110 §7.6.1, plus what must not leak from the API server's own exchange.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
                        "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"})
NOT_FORWARDED = HOP_BY_HOP | {"authorization", "host", "content-length", "impersonate-user",
                              "impersonate-group"}
NOT_RETURNED = HOP_BY_HOP | {"content-length", "content-type"}


def split_scheme_name_port(raw: str) -> tuple[str, str, str]:
    """`name`, `name:port` or `scheme:name:port` (Kubernetes' `SplitSchemeNamePort`)."""
    parts = raw.split(":")
    if len(parts) == 1:
        scheme, name, port = "", parts[0], ""
    elif len(parts) == 2:
        scheme, name, port = "", parts[0], parts[1]
    elif len(parts) == 3:
        scheme, name, port = parts
    else:
        raise bad_request(f"invalid resource name {raw!r}: expected [scheme:]name[:port]")
    if not name or scheme not in ("", "http", "https"):
        raise bad_request(f"invalid resource name {raw!r}: expected [scheme:]name[:port]")
    return scheme or "http", name, port


def proxied_path(request: Request, plural: str, raw_name: str) -> str:
    """The path below `/proxy`, taken from the raw request target so escapes and a trailing slash
    survive (the router's `rest` is decoded and stripped)."""
    path = urlsplit(request.target).path
    segments = path.split("/")
    for at in range(2, len(segments)):
        if (unquote(segments[at]) == "proxy" and unquote(segments[at - 1]) == raw_name
                and unquote(segments[at - 2]) == plural):
            return "/" + "/".join(segments[at + 1:])
    return "/"


class ProxyServer:
    def __init__(self, store: Store, *, dial_timeout_s: float = DIAL_TIMEOUT_S,
                 response_timeout_s: float = RESPONSE_TIMEOUT_S, fabric: HostFabric | None = None) -> None:
        self.store = store
        self.fabric = fabric
        self.dial_timeout_s = dial_timeout_s
        self.response_timeout_s = response_timeout_s

    async def __call__(self, request: Request, rt: ResourceType, namespace: str, name: str,
                       rest: str) -> Reply:
        scheme, object_name, port_text = split_scheme_name_port(name)
        if rt.group == "" and rt.plural == "pods":
            host, port = self._pod_backend(rt, namespace, object_name, port_text, scheme)
        elif rt.group == "" and rt.plural == "services":
            host, port = self._service_backend(namespace, object_name, port_text)
        else:
            raise ApiError(405, "MethodNotAllowed", f"{rt.plural}/proxy is not served by this cluster")
        query = urlsplit(request.target).query
        target = proxied_path(request, rt.plural, name) + (f"?{query}" if query else "")
        return await self._forward(request, scheme, host, port, target)

    # where to -----------------------------------------------------------------------------

    def _pod_backend(self, rt: ResourceType, namespace: str, name: str, port_text: str,
                     scheme: str) -> tuple[str, int]:
        pod = self.store.get(rt.storage_key, namespace, name)
        if pod is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found', name=name, kind="pods")
        pod_ip = str((pod.get("status") or {}).get("podIP") or "")
        if not pod_ip:
            raise ApiError(503, "ServiceUnavailable", f"pod {name} has no IP address yet")
        declared = [p for c in (pod.get("spec") or {}).get("containers") or []
                    for p in c.get("ports") or []]
        if not port_text:
            if declared:
                return pod_ip, int(declared[0]["containerPort"])
            return pod_ip, 443 if scheme == "https" else 80
        if port_text.isdigit():
            return pod_ip, int(port_text)
        named = next((p for p in declared if p.get("name") == port_text), None)
        if named is None:
            raise bad_request(f'pod {name} has no port named "{port_text}"')
        return pod_ip, int(named["containerPort"])

    def _service_backend(self, namespace: str, name: str, port_text: str) -> tuple[str, int]:
        service = self.store.get("/services", namespace, name)
        if service is None:
            raise ApiError(404, "NotFound", f'services "{name}" not found', name=name, kind="services")
        ports = (service.get("spec") or {}).get("ports") or []
        if port_text.isdigit():
            match = next((p for p in ports if p.get("port") == int(port_text)), None)
            if match is None:
                raise ApiError(503, "ServiceUnavailable",
                               f'no service port {port_text} found for service "{name}"')
            port_name = str(match.get("name") or "")
        elif port_text:
            port_name = port_text
        else:
            # The real server matches the unnamed port only; a single named port is meant too.
            port_name = str(ports[0].get("name") or "") if len(ports) == 1 else ""
        choices = self._slice_backends(namespace, name, port_name) or \
            self._endpoints_backends(namespace, name, port_name)
        if not choices:
            raise ApiError(503, "ServiceUnavailable", f'no endpoints available for service "{name}"')
        return random.choice(choices)  # the real server also picks at random

    def _slice_backends(self, namespace: str, service: str, port_name: str) -> list[tuple[str, int]]:
        found: list[tuple[str, int]] = []
        for piece in self.store.list_objects(SLICES, namespace):
            labels = (piece.get("metadata") or {}).get("labels") or {}
            if labels.get(SERVICE_NAME_LABEL) != service:
                continue
            port = next((p.get("port") for p in piece.get("ports") or []
                         if str(p.get("name") or "") == port_name), None)
            if not isinstance(port, int):
                continue
            for endpoint in piece.get("endpoints") or []:
                if (endpoint.get("conditions") or {}).get("ready") is False:
                    continue
                found += [(str(address), port) for address in (endpoint.get("addresses") or [])[:1]]
        return found

    def _endpoints_backends(self, namespace: str, service: str, port_name: str) -> list[tuple[str, int]]:
        endpoints = self.store.get("/endpoints", namespace, service) or {}
        found: list[tuple[str, int]] = []
        for subset in endpoints.get("subsets") or []:
            port = next((p.get("port") for p in subset.get("ports") or []
                         if str(p.get("name") or "") == port_name), None)
            if isinstance(port, int):
                found += [(str(a.get("ip")), port) for a in subset.get("addresses") or [] if a.get("ip")]
        return found

    # forwarding ---------------------------------------------------------------------------

    async def _forward(self, request: Request, scheme: str, host: str, port: int,
                       target: str) -> Reply:
        context: ssl.SSLContext | None = None
        if scheme == "https":
            # Pods serve self-signed certificates; the API server does not verify them either.
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        try:
            if self.fabric is not None:  # pods may live in a network namespace
                reader, writer = await self.fabric.open_connection(
                    host, port, timeout_s=self.dial_timeout_s, limit=MAX_HEAD_BYTES, ssl_context=context)
            else:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port, ssl=context, limit=MAX_HEAD_BYTES),
                    self.dial_timeout_s)
        except (OSError, TimeoutError) as exc:
            reason = "i/o timeout" if isinstance(exc, TimeoutError) else (
                "connect: connection refused" if isinstance(exc, ConnectionRefusedError) else str(exc))
            raise ApiError(503, "ServiceUnavailable",
                           f"error trying to reach service: dial tcp {host}:{port}: {reason}") from None
        handed_over = False
        try:
            upgrading = bool(request.header("upgrade"))
            writer.write(self._request_head(request, host, port, target, upgrading) + request.body)
            await writer.drain()
            parser = http1.ResponseParser(head_request=request.method == "HEAD")
            await asyncio.wait_for(_read_head(reader, parser), self.response_timeout_s)
            answer = parser.head()
            status, headers = answer.status, list(answer.fields)
            if upgrading and status == 101:
                handed_over = True
                return UpgradeResponse(headers, _splice(reader, writer, parser.take_leftover()))
            kept = [(k, v) for k, v in headers if k.lower() not in NOT_RETURNED]
            content_type = next((v for k, v in headers if k.lower() == "content-type"), "")
            if request.method == "HEAD" or status in (204, 304):
                return Response(status, b"", headers=kept, content_type=content_type)
            handed_over = True
            body = _body(reader, writer, parser)
            return StreamResponse(status, body, headers=kept, content_type=content_type)
        except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError) as exc:
            raise ApiError(503, "ServiceUnavailable",
                           f"error trying to reach service: {exc or type(exc).__name__}") from None
        finally:
            if not handed_over:
                writer.close()

    @staticmethod
    def _request_head(request: Request, host: str, port: int, target: str, upgrading: bool) -> bytes:
        listed = {t.strip().lower() for t in request.header("connection").split(",")}
        lines = [f"{request.method} {target} HTTP/1.1", f"Host: {host}:{port}"]
        for name, value in request.headers.items():
            if name in NOT_FORWARDED or name in listed:
                continue
            lines.append(f"{name}: {value}")
        peer = request.writer.get_extra_info("peername")
        if isinstance(peer, tuple) and peer:
            lines.append(f"X-Forwarded-For: {peer[0]}")
        if request.body or request.method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(request.body)}")
        if upgrading:
            lines += ["Connection: Upgrade", f"Upgrade: {request.header('upgrade')}"]
        else:
            lines.append("Connection: close")  # one request per backend connection
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _read_head(reader: asyncio.StreamReader, parser: http1.ResponseParser) -> None:
    """Until the backend's answer head is in (1xx interim answers skipped by the parser)."""
    while not parser.head_ready:
        data = await reader.read(READ_CHUNK)
        if not data:
            parser.feed_eof()  # raises: no head
        parser.feed(data)


async def _body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                parser: http1.ResponseParser) -> AsyncIterator[bytes]:
    """The response body, de-framed (our server re-chunks it); closes the backend at the end."""
    try:
        while True:
            if piece := parser.take_body():
                yield piece
            if parser.complete:
                return
            data = await asyncio.wait_for(reader.read(READ_CHUNK), BODY_IDLE_TIMEOUT_S)
            if not data:
                with contextlib.suppress(http1.ProtocolError):
                    parser.feed_eof()
                if piece := parser.take_body():
                    yield piece
                return
            parser.feed(data)
    finally:
        writer.close()


def _splice(backend_reader: asyncio.StreamReader, backend_writer: asyncio.StreamWriter,
            early: bytes) -> Any:
    """After a 101 from the backend: bytes both ways until either side is done (`early`: what
    the backend sent right after its 101)."""

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if early:
            writer.write(early)
        async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while data := await source.read(READ_CHUNK):
                sink.write(data)
                await sink.drain()

        try:
            async with asyncio.TaskGroup() as group:
                tasks = {group.create_task(copy(reader, backend_writer)),
                         group.create_task(copy(backend_reader, writer))}
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in tasks:
                    task.cancel()
        except* CONNECTION_ERRORS:
            pass
        finally:
            backend_writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(backend_writer.wait_closed(), 1.0)

    return run
