"""The cluster proxy server against a fake host (plain HTTP) and a fake member (HTTPS with its
own CA), all on 127.0.0.1: what the member receives (credentials, impersonation, raw path),
streaming per chunk, upgrades, `spec.proxyURL` (HTTP CONNECT, with proxyHeader), bearer-token
review, the SubjectAccessReviews the hub is asked, and the errors the proxy makes itself."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tether.app import clusterproxy as app
from tether.federation import clusterproxy as cp
from tether.kube import ClusterCredentials, KubeClient
from tether.net.httpserver import (
    HttpServer,
    Reply,
    Request,
    Response,
    StreamResponse,
    UpgradeResponse,
)

HOST = "127.0.0.1"
MEMBER_TOKEN = "member-sa-token"


def _json(code: int, body: Any) -> Response:
    return Response(code, json.dumps(body).encode())


@dataclass
class FakeMember:
    seen: list[Request] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: Request) -> Reply:
        self.seen.append(request)
        if request.header("authorization") != f"Bearer {MEMBER_TOKEN}":
            return _json(401, {"kind": "Status", "code": 401, "reason": "Unauthorized"})
        if request.path == "/stream":
            return StreamResponse(200, self._chunks(), content_type="text/plain")
        if request.path == "/upgrade":
            return UpgradeResponse([("Connection", "Upgrade"), ("Upgrade", "tether-test")],
                                   self._shout)
        return _json(200, {"path": request.target, "method": request.method,
                           "body": request.body.decode(),
                           "headers": request.headers})

    async def _chunks(self) -> AsyncIterator[bytes]:
        yield b"first\n"
        await self.release.wait()  # the caller must have seen "first" for this to be set
        yield b"second\n"

    async def _shout(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            writer.write(data.upper())
            await writer.drain()
        writer.close()


class FakeHost:
    """Secrets in tether-system, SelfSubjectReview for the token `good`, and
    SubjectAccessReviews answered from `allowed`: (user, cluster, verb) triples."""

    def __init__(self, member_ca: bytes) -> None:
        self.reviews = 0
        self.member_ca = member_ca
        self.allowed: set[tuple[str, str, str]] = {("alice", "*", "*")}
        self.access_reviews: list[dict[str, Any]] = []

    async def handle(self, request: Request) -> Reply:
        if request.path == "/api/v1":
            return _json(200, {"resources": [{"name": "secrets", "kind": "Secret",
                                              "namespaced": True, "verbs": ["get"]}]})
        if request.path.startswith("/api/v1/namespaces/tether-system/secrets/"):
            name = request.path.rsplit("/", 1)[1]
            data = {"token": base64.b64encode(MEMBER_TOKEN.encode()).decode(),
                    "caBundle": base64.b64encode(self.member_ca).decode()}
            return _json(200, {"kind": "Secret", "metadata": {"name": name}, "data": data})
        if request.path == "/apis/authentication.k8s.io/v1/selfsubjectreviews":
            self.reviews += 1
            if request.header("authorization") != "Bearer good":
                return _json(401, {"kind": "Status", "code": 401, "reason": "Unauthorized"})
            return _json(201, {"status": {"userInfo": {"username": "alice",
                                                       "groups": ["devs", "system:authenticated"]}}})
        if request.path == "/apis/authorization.k8s.io/v1/subjectaccessreviews":
            if request.header("authorization") != "Bearer hub":
                return _json(403, {"kind": "Status", "code": 403, "reason": "Forbidden"})
            spec = json.loads(request.body)["spec"]
            self.access_reviews.append(spec)
            attrs = spec["resourceAttributes"]
            allowed = "system:masters" in spec["groups"] or any(
                spec["user"] == user and cluster in ("*", attrs["name"]) and verb in ("*", attrs["verb"])
                for user, cluster, verb in self.allowed)
            return _json(201, {"status": {"allowed": allowed}})
        return _json(404, {"kind": "Status", "code": 404, "reason": "NotFound"})


@dataclass
class Setup:
    url: str
    ca: ssl.SSLContext
    member: FakeMember
    host: FakeHost
    clusters: dict[str, dict[str, Any]]
    admin_token: str
    connect: ConnectProxy
    member_port: int

    async def get(self, path: str, token: str | None = "good", **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(verify=self.ca, timeout=10) as http:
            return await http.get(self.url + path, headers={**headers, **kwargs})


def _cluster(name: str, endpoint: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": {}},
            "spec": {"syncMode": "Push", "apiEndpoint": endpoint,
                     "secretRef": {"namespace": "tether-system", "name": name}, **spec}}


@contextlib.asynccontextmanager
async def setup() -> AsyncIterator[Setup]:
    member_pki = app.new_pki()  # the member's own CA and serving certificate (TLS, as real APIs)
    member, host = FakeMember(), FakeHost(member_pki.ca_cert_pem)
    member_tls = app.serving_context(member_pki, (HOST,))
    member_tls.verify_mode = ssl.CERT_NONE
    member_server = HttpServer(member.handle, host=HOST, port=0, ssl_context=member_tls)
    host_server = HttpServer(host.handle, host=HOST, port=0)
    await member_server.start()
    await host_server.start()
    endpoint = f"https://{HOST}:{member_server.port}"
    connect = ConnectProxy()
    await connect.start()
    clusters = {"m1": _cluster("m1", endpoint),
                "pull": _cluster("pull", endpoint, syncMode="Pull"),
                "via-connect": _cluster("via-connect", endpoint, syncMode="Pull",
                                        proxyURL=f"http://{HOST}:{connect.port}",
                                        proxyHeader={"X-Agent": "a1"}),
                "dead": _cluster("dead", f"https://{HOST}:1")}
    pki = app.new_pki()
    credentials = ClusterCredentials.from_token(server=f"http://{HOST}:{host_server.port}",
                                                token="hub", ca_bundle=None)
    config = app.ProxyConfig(port=0, publish=False)
    try:
        async with KubeClient(credentials) as client:
            proxy = app.ProxyServer(client, pki, config, cluster_source=clusters.get)
            await proxy.start()
            try:
                ca = ssl.create_default_context(cadata=pki.ca_cert_pem.decode())
                yield Setup(proxy.url, ca, member, host, clusters, pki.admin_token, connect,
                            member_server.port)
            finally:
                await proxy.aclose()
    finally:
        await member_server.close(grace_s=1)
        await host_server.close(grace_s=1)
        await connect.close()


class ConnectProxy:
    """A plain HTTP-CONNECT proxy on 127.0.0.1 (Karmada's proxyURL), counting tunnels."""

    def __init__(self) -> None:
        self.connects: list[tuple[str, dict[str, str]]] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, HOST, 0)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            method, target, _ = head[0].split(" ")
            headers = {k.strip().lower(): v.strip()
                       for k, _, v in (line.partition(":") for line in head[1:] if line)}
            assert method == "CONNECT"
            self.connects.append((target, headers))
            host, port = target.rsplit(":", 1)
            up_r, up_w = await asyncio.open_connection(host, int(port))
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            await writer.drain()

            async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
                with contextlib.suppress(ConnectionError):
                    while data := await src.read(65536):
                        dst.write(data)
                        await dst.drain()
                dst.close()

            async with asyncio.TaskGroup() as group:
                group.create_task(pipe(reader, up_w))
                group.create_task(pipe(up_r, writer))
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()


P = "/apis/cluster.tether.io/v1alpha1/clusters/{}/proxy"


async def test_forwarding_with_member_credentials_and_impersonation() -> None:
    async with setup() as s:
        answer = await s.get(P.format("m1") + "/api/v1/pods/a%2Fb?labelSelector=x%3Dy&watch=0",
                             **{"Impersonate-User": "root", "X-Custom": "1"})
        assert answer.status_code == 200, answer.text
        seen = answer.json()
        assert seen["path"] == "/api/v1/pods/a%2Fb?labelSelector=x%3Dy&watch=0"
        headers = seen["headers"]
        assert headers["authorization"] == f"Bearer {MEMBER_TOKEN}"
        assert headers["impersonate-user"] == "alice"  # the caller, not what the caller asked for
        assert headers["impersonate-group"] == "devs"
        assert headers["x-custom"] == "1"


async def test_every_request_is_reviewed_and_sent_as_the_caller() -> None:
    """The hub decides each (caller, cluster, verb); the member always gets the caller."""
    async with setup() as s, httpx.AsyncClient(verify=s.ca, timeout=10) as http:
        s.host.allowed = {("alice", "m1", "get")}
        assert (await s.get(P.format("m1") + "/x")).status_code == 200
        review = s.host.access_reviews[-1]
        assert review["user"] == "alice" and "devs" in review["groups"]
        assert review["resourceAttributes"] == {
            "group": "cluster.tether.io", "version": "v1alpha1", "resource": "clusters",
            "subresource": "proxy", "name": "m1", "verb": "get"}
        headers = {"Authorization": "Bearer good"}
        posted = await http.post(s.url + P.format("m1") + "/x", headers=headers, content=b"{}")
        assert posted.status_code == 403
        status = posted.json()
        assert status == {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": 'clusters.cluster.tether.io "m1" is forbidden: User "alice" cannot create '
                       'resource "clusters/proxy" in API group "cluster.tether.io" at the cluster '
                       "scope",
            "reason": "Forbidden", "details": {"name": "m1", "group": "cluster.tether.io",
                                               "kind": "clusters"},
            "code": 403}
        other = await s.get(P.format("via-connect") + "/x")
        assert other.status_code == 403  # resourceNames: only m1
        missing = await s.get(P.format("nope") + "/x")
        assert missing.status_code == 403  # not allowed to ask: no telling whether it exists
        options = await http.request("OPTIONS", s.url + P.format("m1") + "/x", headers=headers)
        assert options.status_code == 405 and options.json()["reason"] == "MethodNotAllowed"
        forwarded = [r for r in s.member.seen if r.path == "/x"]
        assert [r.method for r in forwarded] == ["GET"]
        assert forwarded[0].header("impersonate-user") == "alice"


async def test_decisions_are_cached_briefly() -> None:
    async with setup() as s:
        for _ in range(5):
            assert (await s.get(P.format("m1") + "/x")).status_code == 200
        assert len(s.host.access_reviews) == 1
        s.host.allowed = set()
        await s.get(P.format("m1") + "/x", **{"X-Other": "1"})
        assert len(s.host.access_reviews) == 1  # still within the cache's few seconds


async def test_post_body_and_karmada_group() -> None:
    async with setup() as s, httpx.AsyncClient(verify=s.ca, timeout=10) as http:
        answer = await http.post(s.url + "/apis/cluster.karmada.io/v1alpha1/clusters/m1/proxy/api/v1/x",
                                 content=b'{"a":1}', headers={"Authorization": "Bearer good",
                                                              "Content-Type": "application/json"})
        seen = answer.json()
        assert seen["method"] == "POST" and seen["body"] == '{"a":1}'
        assert seen["headers"]["content-type"] == "application/json"


async def test_streams_each_chunk_as_it_arrives() -> None:
    async with (setup() as s, httpx.AsyncClient(verify=s.ca, timeout=10) as http,
                http.stream("GET", s.url + P.format("m1") + "/stream",
                            headers={"Authorization": "Bearer good"}) as response):
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/plain"
        lines = response.aiter_lines()
        async with asyncio.timeout(5):
            assert await anext(lines) == "first"  # before the member sends "second"
        s.member.release.set()
        async with asyncio.timeout(5):
            assert await anext(lines) == "second"


async def test_proxy_url_carries_requests_and_upgrades() -> None:
    async with setup() as s:
        answer = await s.get(P.format("via-connect") + "/api/v1/pods")
        assert answer.status_code == 200 and answer.json()["path"] == "/api/v1/pods"
        assert len(s.connect.connects) == 1
        target, headers = s.connect.connects[0]
        assert target == f"{HOST}:{s.member_port}" and headers["x-agent"] == "a1"
        await _upgrade_round_trip(s, "via-connect")
        assert len(s.connect.connects) >= 1


async def test_upgrade_relays_raw_bytes() -> None:
    async with setup() as s:
        await _upgrade_round_trip(s, "m1")
        upgrade = next(r for r in s.member.seen if r.path == "/upgrade")
        assert upgrade.header("connection").lower() == "upgrade"
        assert upgrade.header("authorization") == f"Bearer {MEMBER_TOKEN}"


async def _upgrade_round_trip(s: Setup, cluster: str) -> None:
    port = int(s.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection(HOST, port, ssl=s.ca,
                                                   server_hostname="127.0.0.1")
    try:
        writer.write((f"GET {P.format(cluster)}/upgrade HTTP/1.1\r\nHost: x\r\n"
                      "Authorization: Bearer good\r\nConnection: Upgrade\r\n"
                      "Upgrade: tether-test\r\n\r\n").encode())
        await writer.drain()
        async with asyncio.timeout(5):
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 101 ")
            assert b"upgrade: tether-test" in head.lower()
            writer.write(b"hello")
            await writer.drain()
            assert await reader.readexactly(5) == b"HELLO"
            writer.write(b" again")
            await writer.drain()
            assert await reader.readexactly(6) == b" AGAIN"
    finally:
        writer.close()


async def test_errors_made_by_the_proxy() -> None:
    async with setup() as s:
        unauthenticated = await s.get(P.format("m1") + "/x", token=None)
        assert unauthenticated.status_code == 401 and unauthenticated.json()["reason"] == "Unauthorized"
        refused = await s.get(P.format("m1") + "/x", token="bad")
        assert refused.status_code == 401
        again = await s.get(P.format("m1") + "/x", token="bad")
        assert again.status_code == 401
        assert s.host.reviews == 1  # the refusal was cached
        missing = await s.get(P.format("nope") + "/x")
        assert missing.status_code == 404
        assert missing.json()["message"] == 'clusters.cluster.tether.io "nope" not found'
        pull = await s.get(P.format("pull") + "/x")
        assert pull.status_code == 503 and "Pull mode" in pull.json()["message"]
        dead = await s.get(P.format("dead") + "/x")
        assert dead.status_code == 503
        assert 'cluster "dead" is unreachable' in dead.json()["message"]
        s.host.allowed = set()
        forbidden = await s.get(P.format("via-connect") + "/x")  # not asked before: no cache
        assert forbidden.status_code == 403 and forbidden.json()["reason"] == "Forbidden"
        admin = await s.get(P.format("m1") + "/x", token=s.admin_token)
        assert admin.status_code == 200  # system:masters: the hub allows it
        sent = admin.json()["headers"]
        assert sent["impersonate-user"] == "tether:proxy-admin"
        assert sent["impersonate-group"] == "tether:hub-admins"  # never system:masters
        health = await s.get("/healthz", token=None)
        assert health.status_code == 200
        metrics = (await s.get("/metrics", token=None)).text
        assert 'tether_cluster_proxy_requests_total{outcome="unauthorized"} 3.0' in metrics


@pytest.mark.parametrize("peer", [None, {}])
def test_no_certificate_is_no_caller(peer: Any) -> None:
    assert cp.caller_from_peercert(peer) is None
