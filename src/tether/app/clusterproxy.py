"""`tether proxy serve` and `tether kubeconfig`: the cluster proxy on an HTTPS socket.

The logic (routing, authorisation, headers, forwarding) is `tether.federation.clusterproxy`;
this module adds what meets only here: the HTTP server (`tether.net.httpserver`), the tunnel dialer
for Pull clusters (`tether.tunnel.client`), and a small hub PKI.

Hub PKI and discovery, kept on the host cluster so any admin of the host can get a kubeconfig:
- Secret `tether-system/tether-cluster-proxy-pki`: `ca.crt`, `ca.key` (EC P-256, 10 years) and
  `admin-token` (the hub's admin bearer token), created by the first `tether proxy serve`.
  Whoever reads it can sign any identity, `system:masters` included, so it is an admin secret:
  tether grants no Role on Secrets in `tether-system` to anyone (see docs/security.md); only the
  host's admins and the identity the hub runs with can read it.
- ConfigMap `tether-system/tether-cluster-proxy`: `server` (the proxy's https URL) and `ca.crt`,
  written by `tether proxy serve` once it listens.
The serving certificate is issued at each start (SANs: 127.0.0.1, localhost, the advertised
address). `tether kubeconfig NAME` asks the host who the caller is (SelfSubjectReview) and issues
a client certificate for that identity (CN = user, O = groups, 24 h by default); with `--user`
(and `--group`) an admin issues one for someone else. What the certificate may do is decided
per request: the hub's RBAC on `clusters/proxy`, then the member's RBAC for that user.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import logging
import os
import secrets
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from tether.app.signals import HARD_EXIT_MARGIN_S, stop_on_signals
from tether.federation import clusterproxy as cp
from tether.federation.crds import CLUSTER_API_VERSION, CLUSTER_GROUP
from tether.federation.health import HUB_NAMESPACE
from tether.kube import ConnectOptions, Forbidden, KubeClient, KubeError, NotFound, Unreachable
from tether.net import daemon, metrics
from tether.net.httpserver import (
    HttpServer,
    Reply,
    Request,
    Response,
    StreamResponse,
    UpgradeResponse,
)
from tether.net.pki import CertificateAuthority
from tether.objects import Obj
from tether.tunnel import client as tunnel_client
from tether.tunnel.tls import ClientTLS

log = logging.getLogger(__name__)

PKI_SECRET = "tether-cluster-proxy-pki"
INFO_CONFIGMAP = "tether-cluster-proxy"
FIELD_MANAGER = "tether-cluster-proxy"
CA_VALIDITY = datetime.timedelta(days=3650)
SERVING_VALIDITY = datetime.timedelta(days=365)
CLIENT_TTL = datetime.timedelta(hours=24)
SHUTDOWN_S = 5.0
TOKEN_REVIEW_TIMEOUT_S = 10.0
TUNNEL_DIAL_TIMEOUT_S = 10.0


# PKI -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HubPki:
    ca_cert_pem: bytes
    ca_key_pem: bytes = field(repr=False)
    admin_token: str = field(repr=False)

    def issue(self, common_name: str, *, organizations: tuple[str, ...] = (), server: bool = False,
              sans: tuple[str, ...] = (), validity: datetime.timedelta = CLIENT_TTL,
              ) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) signed by the hub proxy CA."""
        ca = CertificateAuthority.from_pem(self.ca_cert_pem, self.ca_key_pem)
        issued = ca.issue(common_name, organizations=organizations, server=server, sans=sans,
                          validity=validity)
        return issued.cert_pem, issued.key_pem()


def new_pki() -> HubPki:
    ca = CertificateAuthority.create("tether-cluster-proxy-ca", validity=CA_VALIDITY, path_length=0)
    return HubPki(ca.cert_pem, ca.key_pem(), secrets.token_urlsafe(32))


def _b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _pki_from_secret(secret: Mapping[str, Any]) -> HubPki | None:
    data = secret.get("data") or {}
    if not all(data.get(k) for k in ("ca.crt", "ca.key", "admin-token")):
        return None
    return HubPki(base64.b64decode(data["ca.crt"]), base64.b64decode(data["ca.key"]),
                  base64.b64decode(data["admin-token"]).decode())


async def load_pki(host: KubeClient, *, create: bool) -> HubPki:
    """The hub proxy PKI from the host cluster, created (once) when `create`."""
    try:
        found = _pki_from_secret(await host.get("v1", "Secret", PKI_SECRET, HUB_NAMESPACE))
    except Forbidden:
        raise ProxySetupError(
            f"only the hub's admins may use the cluster proxy CA (Secret {HUB_NAMESPACE}/"
            f"{PKI_SECRET}): ask one to run `tether kubeconfig NAME --user YOU [--group G]` "
            "for you, or use a bearer token the hub accepts (docs/cluster-proxy.md)") from None
    except NotFound:
        found = None
    if found is not None:
        return found
    if not create:
        raise ProxySetupError(f"the hub has no cluster proxy PKI (Secret {HUB_NAMESPACE}/{PKI_SECRET});"
                              " start `tether proxy serve` once against this host cluster")
    pki = new_pki()
    secret: Obj = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                   "metadata": {"name": PKI_SECRET, "namespace": HUB_NAMESPACE},
                   "data": {"ca.crt": _b64(pki.ca_cert_pem), "ca.key": _b64(pki.ca_key_pem),
                            "admin-token": _b64(pki.admin_token)}}
    await host.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": HUB_NAMESPACE}},
                     field_manager=FIELD_MANAGER)
    try:
        await host.create(secret, field_manager=FIELD_MANAGER)
    except KubeError as exc:
        if exc.code != 409:  # another proxy created it first: use theirs
            raise
    again = _pki_from_secret(await host.get("v1", "Secret", PKI_SECRET, HUB_NAMESPACE))
    if again is None:
        raise ProxySetupError(f"Secret {HUB_NAMESPACE}/{PKI_SECRET} is incomplete; delete it to start over")
    return again


class ProxySetupError(Exception):
    """Something the user has to fix, with the message saying what."""


@contextlib.contextmanager
def _key_files(cert_pem: bytes, key_pem: bytes) -> Any:
    # ssl loads key pairs only from files: a private, short-lived directory.
    with tempfile.TemporaryDirectory(prefix="tether-proxy-") as tmp:
        cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        cert.write_bytes(cert_pem)
        key.touch(0o600)
        key.write_bytes(key_pem)
        yield cert, key


def serving_context(pki: HubPki, sans: tuple[str, ...]) -> ssl.SSLContext:
    """TLS for the proxy: its own certificate; client certificates optional, verified against
    the hub proxy CA when presented."""
    cert_pem, key_pem = pki.issue("tether-cluster-proxy", server=True, sans=sans,
                                  validity=SERVING_VALIDITY)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with _key_files(cert_pem, key_pem) as (cert, key):
        context.load_cert_chain(cert, key)
    context.load_verify_locations(cadata=pki.ca_cert_pem.decode())
    context.verify_mode = ssl.CERT_OPTIONAL
    context.set_alpn_protocols(["http/1.1"])  # no h2: upgrades need HTTP/1.1
    return context


# the server ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TunnelConfig:
    """The tunnel server's gRPC frontend ("host:port" or "unix:/path") for Pull clusters."""

    server: str
    tls: ClientTLS | None = None  # None: plaintext (a server started with --allow-insecure, or UDS)
    dial_timeout_s: float = TUNNEL_DIAL_TIMEOUT_S


@dataclass(frozen=True)
class ProxyConfig:
    kubeconfig: Path | None = None
    context: str | None = None
    bind_address: str = "127.0.0.1"
    port: int = 8443
    advertise_address: str = ""  # [default: the bind address]
    tunnel: TunnelConfig | None = None
    request_timeout_s: float = cp.REQUEST_TIMEOUT_S
    stream_idle_timeout_s: float = cp.STREAM_IDLE_TIMEOUT_S
    shutdown_s: float = SHUTDOWN_S
    publish: bool = True  # write the ConfigMap with the proxy's address


class TunnelRoutes:
    """`connect_for` for the proxy: Pull clusters without a proxyURL through the tunnel; one
    options object per cluster route, so pooled member clients stay."""

    def __init__(self, tunnel: TunnelConfig | None) -> None:
        self.tunnel = tunnel
        self._through_tunnel: ConnectOptions | None = None
        if tunnel is not None:
            dialer = partial(tunnel_client.dial, tunnel.server, tls=tunnel.tls,
                             timeout_s=tunnel.dial_timeout_s)
            self._through_tunnel = ConnectOptions(dialer=dialer)

    def __call__(self, name: str, cluster: Mapping[str, Any]) -> ConnectOptions | None:
        spec = cluster.get("spec") or {}
        if spec.get("syncMode") == "Pull" and not spec.get("proxyURL"):
            return self._through_tunnel
        return cp.DIRECT


class ProxyServer:
    """The cluster proxy on one HTTPS listener, plus `/healthz`, `/readyz`, `/metrics`."""

    def __init__(self, host: KubeClient, pki: HubPki, config: ProxyConfig, *,
                 cluster_source: Callable[[str], Obj | None] | None = None) -> None:
        self.host = host
        self.pki = pki
        self.config = config
        self.proxy = cp.ClusterProxy(
            host, connect_for=TunnelRoutes(config.tunnel), admin_token=pki.admin_token, request_timeout_s=config.request_timeout_s,
            stream_idle_timeout_s=config.stream_idle_timeout_s, cluster_source=cluster_source)
        advertise = config.advertise_address or config.bind_address
        sans = tuple(dict.fromkeys(("127.0.0.1", "localhost", advertise)))
        self.server = HttpServer(self.handle, host=config.bind_address, port=config.port,
                                 ssl_context=serving_context(pki, sans),
                                 server_header="tether-cluster-proxy")

    @property
    def url(self) -> str:
        advertise = self.config.advertise_address or self.config.bind_address
        host = f"[{advertise}]" if ":" in advertise else advertise
        return f"https://{host}:{self.server.port}"

    async def start(self) -> None:
        await self.server.start()

    async def aclose(self) -> None:
        await self.server.close(grace_s=1.0)
        await self.proxy.aclose()

    async def authenticate(self, request: Request) -> cp.Caller | cp.Answer | None:
        caller = cp.caller_from_peercert(request.peer_cert)
        if caller is not None:
            return caller
        token = cp.bearer_token(request.headers)
        if token is None:
            return None
        try:
            return await self.proxy.authenticate_token(token, timeout_s=TOKEN_REVIEW_TIMEOUT_S)
        except Unreachable as exc:
            return cp.failure(503, "ServiceUnavailable",
                              f"cannot verify the bearer token with the host cluster: {exc.message}")

    async def handle(self, request: Request) -> Reply:
        path = request.path
        if path in ("/healthz", "/livez", "/readyz") and request.method == "GET":
            return Response(200, b"ok", content_type="text/plain")
        if path == "/metrics" and request.method == "GET":
            return Response(200, self.metrics().encode(), content_type="text/plain; version=0.0.4")
        try:
            who = await self.authenticate(request)
            if isinstance(who, cp.Answer):
                return _reply(who)
            if who is None:
                self.proxy.counts["unauthorized"] = self.proxy.counts.get("unauthorized", 0) + 1
                return _reply(cp.failure(401, "Unauthorized", "Unauthorized"))
            request.authenticated()  # its connection is no longer limited as anonymous
            outcome = await self.proxy.open(
                cp.Request(request.method, request.target, request.headers, request.body), who)
            log.debug("%s %s by %s -> %s", request.method, request.path, cp.describe_caller(who),
                      type(outcome).__name__)
            return _reply(outcome)
        except Exception as exc:  # a bug must answer 500, never take the server down
            log.exception("internal error proxying %s %s", request.method, request.path)
            return _reply(cp.failure(500, "InternalError", f"Internal error occurred: {exc}"))

    def metrics(self) -> str:
        return metrics.render([
            metrics.counter("tether_cluster_proxy_requests_total", "Cluster proxy requests, by outcome.",
                            {(("outcome", outcome),): count for outcome, count in self.proxy.counts.items()}),
            metrics.counter("tether_cluster_proxy_access_reviews_total",
                            "SubjectAccessReviews the cluster proxy sent to the hub.",
                            {(): self.proxy.reviews}),
        ])

    async def publish(self) -> None:
        """Tell `tether kubeconfig` where this proxy is (ConfigMap on the host)."""
        await self.host.apply({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": INFO_CONFIGMAP, "namespace": HUB_NAMESPACE},
            "data": {"server": self.url, "ca.crt": self.pki.ca_cert_pem.decode()},
        }, field_manager=FIELD_MANAGER)


def _reply(outcome: cp.Outcome) -> Reply:
    if isinstance(outcome, cp.Answer):
        return Response(outcome.status, outcome.body, list(outcome.headers), outcome.content_type)
    if isinstance(outcome, cp.Streamed):
        return StreamResponse(outcome.status, outcome.chunks, list(outcome.headers),
                              outcome.content_type)
    return UpgradeResponse(outcome.headers, outcome.relay, abandon=outcome.abandon)


async def open_proxy(host: KubeClient, config: ProxyConfig, *,
                     cluster_source: Callable[[str], Obj | None] | None = None) -> ProxyServer:
    """Load (or create) the hub PKI, listen, and publish the address: a running proxy for
    `tether hub run` to own (`await server.aclose()` when done). `cluster_source` may serve
    Clusters from the hub's informer."""
    pki = await load_pki(host, create=True)
    server = ProxyServer(host, pki, config, cluster_source=cluster_source)
    await server.start()
    try:
        if config.publish:
            await server.publish()
    except BaseException:
        await server.aclose()
        raise
    return server


async def serve(config: ProxyConfig, *, announce: Callable[[str], None] = print) -> int:
    """Run the proxy until SIGTERM/SIGINT (or cancellation)."""
    stop = asyncio.Event()
    async with KubeClient.from_kubeconfig(config.kubeconfig, config.context) as host:
        server = await open_proxy(host, config)
        try:
            announce(f"cluster proxy for {host.server} serving on {server.url}"
                     f"/apis/cluster.tether.io/v1alpha1/clusters/NAME/proxy/")
            with stop_on_signals(stop, hard_exit_after_s=config.shutdown_s + HARD_EXIT_MARGIN_S):
                await stop.wait()
        finally:
            async with asyncio.timeout(config.shutdown_s):
                await server.aclose()
    return 0


# kubeconfig ------------------------------------------------------------------------------


def proxy_path(name: str) -> str:
    return f"/apis/{CLUSTER_GROUP}/{cp.PROXY_VERSION}/clusters/{name}/proxy"


async def caller_identity(host: KubeClient) -> tuple[str, tuple[str, ...]]:
    """Who the host kubeconfig's credentials are (SelfSubjectReview)."""
    answer = await host.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                body={"apiVersion": "authentication.k8s.io/v1",
                                      "kind": "SelfSubjectReview"}, idempotent=True)
    info = (answer.get("status") or {}).get("userInfo") or {}
    user = str(info.get("username") or "")
    if not user:
        raise ProxySetupError("the host cluster did not say who these credentials are "
                              "(SelfSubjectReview without a username)")
    groups = tuple(str(g) for g in info.get("groups") or () if g != cp.AUTHENTICATED)
    return user, groups


def build_kubeconfig(name: str, server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes,
                     namespace: str = "default") -> Obj:
    ctx = f"tether-proxy-{name}"
    return {
        "apiVersion": "v1", "kind": "Config", "preferences": {}, "current-context": ctx,
        "clusters": [{"name": ctx, "cluster": {"server": server.rstrip("/") + proxy_path(name),
                                               "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": ctx, "user": {"client-certificate-data": _b64(cert_pem),
                                         "client-key-data": _b64(key_pem)}}],
        "contexts": [{"name": ctx, "context": {"cluster": ctx, "user": ctx,
                                               "namespace": namespace}}],
    }


def default_kubeconfig_path(name: str, context: str, state_dir: Path | None = None) -> Path:
    """Where `tether kubeconfig NAME` writes by default: `kubeconfigs/` under tether's state root."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in context or "default")
    return (state_dir or daemon.state_home()) / "kubeconfigs" / f"{safe}--{name}.yaml"


async def write_kubeconfig(host: KubeClient, name: str, out: Path | None = None, *,
                           server: str = "", ttl: datetime.timedelta = CLIENT_TTL,
                           user: str = "", groups: tuple[str, ...] = (),
                           state_dir: Path | None = None) -> Path:
    """A kubeconfig for cluster `name` through the hub's proxy, for whoever the host
    credentials are (or for `user` in `groups`, issued by an admin); returns its path (mode
    0600)."""
    if not cp.valid_cluster_name(name):
        raise ProxySetupError(f"{name!r} is not a cluster name")
    try:
        await host.get(CLUSTER_API_VERSION, "Cluster", name)
    except NotFound:
        raise ProxySetupError(f"the hub has no cluster {name!r} (see `tether clusters`)") from None
    pki = await load_pki(host, create=False)
    if not server:
        try:
            info = await host.get("v1", "ConfigMap", INFO_CONFIGMAP, HUB_NAMESPACE)
        except NotFound:
            raise ProxySetupError("no cluster proxy has announced itself on this hub; start "
                                  "`tether proxy serve` (or pass --server)") from None
        server = str((info.get("data") or {}).get("server") or "")
    context = host.credentials.context
    if user:
        context = f"{context}-{user}"  # someone else's: not in the admin's own file
    else:
        if groups:
            raise ProxySetupError("--group needs --user (the certificate's user name)")
        user, groups = await caller_identity(host)
    cert_pem, key_pem = pki.issue(user, organizations=groups, validity=ttl)
    doc = build_kubeconfig(name, server, pki.ca_cert_pem, cert_pem, key_pem)
    path = out or default_kubeconfig_path(name, context, state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(yaml.safe_dump(doc, sort_keys=False))
    tmp.replace(path)
    return path
