"""The cluster proxy's logic: `/apis/cluster.tether.io/v1alpha1/clusters/{name}/proxy/{path}`.

Karmada's aggregated `clusters/proxy` subresource (`pkg/util/proxy/proxy.go`), without an
aggregated API server:

- **Routing** (`route`): the path shape above, also under `cluster.karmada.io` (an alias of the
  same resource); `{path}` and the raw query go to the member unchanged
  (`Cluster.spec.apiEndpoint` + path).
- **Authentication** is the caller's (the HTTP layer): a client certificate from the hub proxy's
  CA (`caller_from_peercert`: CN = user, O = groups), the hub's admin token, or a bearer token
  the *host* cluster accepts (`ClusterProxy.authenticate_token`: a `SelfSubjectReview` sent to
  the host *with that token*). Results are cached by the token's SHA-256 (positive 30 s,
  negative 5 s); tokens are never logged.
- **Authorisation** (`ClusterProxy.authorize`): every request is a `SubjectAccessReview` on the
  hub for the caller: verb from the HTTP method as kube-apiserver derives it (`proxy_verb`),
  group `cluster.tether.io`, resource `clusters`, subresource `proxy`, name = the cluster. So
  `resourceNames: [NAME]` in a hub Role limits a caller to one cluster. Decisions are cached a
  few seconds per (caller, cluster, verb), bounded in size. The hub is asked before the cluster
  is looked up, so a caller without the right cannot tell which clusters exist (403, never 404).
- **Forwarding** (`ClusterProxy.open`): with the member credential (the Cluster's Secret
  `token`, TLS trust from `caBundle`), through `spec.proxyURL` (HTTP CONNECT) when set, or
  through the tunnel for `syncMode: Pull` (the `connect_for` hook supplies a dialer), and always
  **as the caller**: `Impersonate-User` / `Impersonate-Group` (`member_identity`), so the
  member's own RBAC decides. The caller's `Authorization`, hop-by-hop and `Impersonate-*`
  headers are dropped. `system:masters` is never sent: the hub's admins reach members as the
  group `tether:hub-admins` (which `tether join` / `register` bind to `cluster-admin` in the
  member), and a caller's own `tether:hub-admins` group is dropped, so only hub admins get it.
- **Answers**: a member's answer is streamed as it arrives, one chunk per read (`logs -f`,
  `get -w`); upgrades (exec, attach, port-forward) are relayed as raw bytes after the member's
  `101`. Our own errors are Kubernetes `Status` objects: 401, 403 (kube-apiserver's message),
  404 (no such cluster, for callers allowed to ask), 405 (a method with no Kubernetes verb),
  503 (member unreachable, no route to a Pull cluster, or the hub cannot answer a review).

This module does no HTTP serving; `tether.app.clusterproxy` puts it on a socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tether.federation.crds import CLUSTER_API_VERSION, CLUSTER_GROUP
from tether.federation.health import HUB_NAMESPACE, member_credentials
from tether.kube import (
    ClientPool,
    ClusterCredentials,
    ConnectOptions,
    KubeClient,
    KubeError,
    NotFound,
    Unauthorized,
    Unreachable,
    UpgradedStream,
)
from tether.objects import Obj

log = logging.getLogger(__name__)


PROXY_GROUPS = (CLUSTER_GROUP, "cluster.karmada.io")
PROXY_VERSION = "v1alpha1"
ADMIN_GROUP = "system:masters"
HUB_ADMINS_GROUP = "tether:hub-admins"  # what the hub's admins are in a member
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

# kube-apiserver's request-info verbs for a named (sub)resource.
METHOD_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update",
                "PATCH": "patch", "DELETE": "delete"}

LOOKUP_CACHE_S = 2.0
TOKEN_CACHE_S = 30.0
TOKEN_NEGATIVE_CACHE_S = 5.0
TOKEN_CACHE_MAX = 1024
DECISION_CACHE_S = 5.0
DECISION_CACHE_MAX = 4096
REVIEW_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 30.0
STREAM_IDLE_TIMEOUT_S = 3600.0  # a quiet watch, `logs -f` or shell
LINGER_S = 2.0  # after the member closes an upgraded connection, how long the caller may finish
READ_CHUNK = 256 * 1024

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
    "te", "trailer", "transfer-encoding", "upgrade",
})
_NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length", "authorization"}
_NOT_RETURNED = HOP_BY_HOP | {"content-length", "content-type", "cache-control"}


# pure parts -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Caller:
    """Who is asking; `via` is how that was established (for logs, never the credential)."""

    username: str
    groups: tuple[str, ...] = ()
    via: str = ""
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def with_authenticated(self) -> Caller:
        return self if AUTHENTICATED in self.groups else replace(self, groups=(*self.groups, AUTHENTICATED))


@dataclass(frozen=True)
class Route:
    cluster: str
    target: str  # the member path with the raw query, e.g. "/api/v1/pods?watch=1"
    group: str


def route(raw_target: str) -> Route | None:
    """The proxied cluster and member target of a request target, or None when the path is not
    a cluster proxy path. The member path keeps its percent-encoding and the raw query."""
    path, sep, query = raw_target.partition("?")
    parts = path.split("/")
    if len(parts) < 7 or parts[0] != "" or parts[1] != "apis" or parts[2] not in PROXY_GROUPS:
        return None
    if parts[3] != PROXY_VERSION or parts[4] != "clusters" or parts[6] != "proxy":
        return None
    rest = "/" + "/".join(parts[7:])
    return Route(parts[5], rest + (sep + query if sep else ""), parts[2])


def valid_cluster_name(name: str) -> bool:
    return bool(_NAME.match(name))


def caller_from_peercert(peer_cert: Mapping[str, Any] | None) -> Caller | None:
    """A verified client certificate (`ssl.SSLSocket.getpeercert()`): CN is the user, each O a
    group, as kube-apiserver reads them."""
    if not peer_cert:
        return None
    user = ""
    groups: list[str] = []
    for rdn in peer_cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName" and not user:
                user = str(value)
            elif key == "organizationName":
                groups.append(str(value))
    if not user:
        return None
    return Caller(user, tuple(groups), "certificate").with_authenticated()


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The bearer token of an `Authorization` header (lower-cased header names)."""
    value = headers.get("authorization", "")
    if value[:7].lower() == "bearer " and value[7:].strip():
        return value[7:].strip()
    return None


def proxy_verb(method: str) -> str | None:
    """The verb a request on `clusters/{name}/proxy` is authorised as (kube-apiserver's mapping
    for a named resource: watches and upgrades included), or None for a method Kubernetes has
    no verb for."""
    return METHOD_VERBS.get(method.upper())


def member_identity(caller: Caller) -> tuple[str, tuple[str, ...]]:
    """(user, groups) the member is asked to impersonate for `caller`: the caller's own, without
    the groups every authenticated user has, with `system:masters` replaced by
    `tether:hub-admins` and a caller's own `tether:hub-admins` dropped (only the hub's admins may
    be member admins through the proxy)."""
    groups: list[str] = []
    for group in caller.groups:
        if group in (AUTHENTICATED, UNAUTHENTICATED, HUB_ADMINS_GROUP):
            continue
        mapped = HUB_ADMINS_GROUP if group == ADMIN_GROUP else group
        if mapped not in groups:
            groups.append(mapped)
    return caller.username, tuple(groups)


def access_review(caller: Caller, cluster: str, verb: str) -> Obj:
    """The SubjectAccessReview that decides whether `caller` may `verb` the cluster's proxy."""
    spec: Obj = {"user": caller.username, "groups": list(caller.groups),
                 "resourceAttributes": {"group": CLUSTER_GROUP, "version": PROXY_VERSION,
                                        "resource": "clusters", "subresource": "proxy",
                                        "name": cluster, "verb": verb}}
    if caller.uid:
        spec["uid"] = caller.uid
    if caller.extra:
        spec["extra"] = {key: list(values) for key, values in caller.extra}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


def decision_from_review(answer: Mapping[str, Any]) -> Decision:
    status = answer.get("status") or {}
    allowed = bool(status.get("allowed")) and not status.get("denied")
    reason = str(status.get("reason") or status.get("evaluationError") or "")
    return Decision(allowed, reason)


def forbidden_message(caller: Caller, cluster: str, verb: str, reason: str = "") -> str:
    """kube-apiserver's wording for a refused request on a cluster-scoped subresource."""
    message = (f'clusters.{CLUSTER_GROUP} "{cluster}" is forbidden: User "{caller.username}" '
               f'cannot {verb} resource "clusters/proxy" in API group "{CLUSTER_GROUP}" '
               "at the cluster scope")
    return f"{message}: {reason}" if reason else message


DecisionKey = tuple[str, tuple[str, ...], str, tuple[tuple[str, tuple[str, ...]], ...], str, str]


class DecisionCache:
    """Review answers for `ttl_s`, at most `max_entries` (expired ones go first, then the
    oldest), so hot paths (`get -w`, exec, many small GETs) are not one review per request."""

    def __init__(self, ttl_s: float = DECISION_CACHE_S, max_entries: int = DECISION_CACHE_MAX,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._clock = clock
        self._entries: dict[DecisionKey, tuple[Decision, float]] = {}

    @staticmethod
    def key(caller: Caller, cluster: str, verb: str) -> DecisionKey:
        return (caller.username, caller.groups, caller.uid, caller.extra, cluster, verb)

    def get(self, key: DecisionKey) -> Decision | None:
        found = self._entries.get(key)
        if found is None:
            return None
        if found[1] <= self._clock():
            del self._entries[key]
            return None
        return found[0]

    def put(self, key: DecisionKey, decision: Decision) -> None:
        now = self._clock()
        if key not in self._entries and len(self._entries) >= self.max_entries:
            self._entries = {k: v for k, v in self._entries.items() if v[1] > now}
            while len(self._entries) >= self.max_entries:
                del self._entries[next(iter(self._entries))]  # insertion order: the oldest
        self._entries.pop(key, None)
        self._entries[key] = (decision, now + self.ttl_s)

    def __len__(self) -> int:
        return len(self._entries)


def is_upgrade(headers: Mapping[str, str]) -> bool:
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    return "upgrade" in tokens and bool(headers.get("upgrade"))


def upstream_headers(headers: Mapping[str, str], caller: Caller | None, *,
                     upgrade: bool = False) -> list[tuple[str, str]]:
    """The caller's headers as the member gets them: no credentials, no hop-by-hop headers, no
    caller-chosen impersonation; `Impersonate-User`/`-Group` = `member_identity(caller)`; the
    `Connection`/`Upgrade` pair kept for an upgrade."""
    named = {t.strip().lower() for t in headers.get("connection", "").split(",")} - {"upgrade"}
    out: list[tuple[str, str]] = []
    for name, value in headers.items():
        key = name.lower()
        if key in _NOT_FORWARDED or key in named or key.startswith("impersonate-"):
            continue
        out.append((name, value))
    if "accept-encoding" not in headers:
        out.append(("Accept-Encoding", "identity"))  # bytes are relayed as they come, never decoded
    if upgrade:
        out += [("Connection", "Upgrade"), ("Upgrade", headers.get("upgrade", ""))]
    if caller is not None:
        user, groups = member_identity(caller)
        out.append(("Impersonate-User", user))
        out.extend(("Impersonate-Group", group) for group in groups)
    return out


def downstream_headers(items: Iterable[tuple[str, str]]) -> tuple[str, list[tuple[str, str]]]:
    """(content type, other headers) of a member's answer, as the caller gets them."""
    content_type = "application/octet-stream"
    out: list[tuple[str, str]] = []
    for name, value in items:
        key = name.lower()
        if key == "content-type":
            content_type = value
        if key in _NOT_RETURNED:
            continue
        out.append((name, value))
    return content_type, out


def switch_headers(items: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """A member's `101` headers for the caller: everything but lengths and keep-alive."""
    return [(n, v) for n, v in items
            if n.lower() not in ("content-length", "transfer-encoding", "keep-alive")]


def status_body(code: int, reason: str, message: str, *, kind: str = "", name: str = "") -> bytes:
    status: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": message, "reason": reason, "code": code}
    if kind or name:
        status["details"] = {"name": name, "group": CLUSTER_GROUP, "kind": kind}
    return json.dumps(status).encode()


# answers ----------------------------------------------------------------------------------


@dataclass
class Answer:
    """A complete answer made here (errors, HEAD)."""

    status: int
    body: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)
    content_type: str = "application/json"


def failure(code: int, reason: str, message: str, *, name: str = "") -> Answer:
    return Answer(code, status_body(code, reason, message, kind="clusters" if name else "",
                                    name=name))


class BodyChunks:
    """A member's body, one item per read, as an async iterator that owns the connection:
    `aclose()` (also when iteration never started) releases it."""

    def __init__(self, stack: contextlib.AsyncExitStack, source: AsyncIterator[bytes]) -> None:
        self._stack = stack
        self._source = source
        self._closed = False

    def __aiter__(self) -> BodyChunks:
        return self

    async def __anext__(self) -> bytes:
        if self._closed:
            raise StopAsyncIteration
        try:
            return await anext(self._source)
        except StopAsyncIteration:
            await self.aclose()
            raise
        except Unreachable as exc:  # the member went away mid-stream: end the caller's stream
            log.info("stream from member ended: %s", exc.message)
            await self.aclose()
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            with contextlib.suppress(Exception):
                await self._stack.aclose()


@dataclass
class Streamed:
    """A member's answer whose body is still arriving."""

    status: int
    content_type: str
    headers: list[tuple[str, str]]
    chunks: BodyChunks


class Switched:
    """A member's `101`: `relay(reader, writer)` carries the caller's connection from here on;
    `abandon()` releases the member connection when the caller never gets the 101."""

    def __init__(self, headers: list[tuple[str, str]], stream: UpgradedStream,
                 stack: contextlib.AsyncExitStack, idle_timeout_s: float) -> None:
        self.headers = headers
        self._stream = stream
        self._stack = stack
        self._idle_timeout_s = idle_timeout_s

    async def abandon(self) -> None:
        await self._stack.aclose()

    async def relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await relay(reader, writer, self._stream, idle_timeout_s=self._idle_timeout_s)
        finally:
            await self._stack.aclose()


Outcome = Answer | Streamed | Switched


async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, member: UpgradedStream,
                *, idle_timeout_s: float, linger_s: float = LINGER_S) -> None:
    """Bytes both ways. When one direction ends (EOF), its destination is half-closed where the
    transport allows it (the caller's plain TCP; never the member's TLS or tunnel stream), and
    the other direction gets `linger_s` to finish before both connections are closed.
    exec/attach/port-forward close their streams in band (SPDY, WebSocket), so a TCP EOF means
    the peer is done."""

    async def up() -> None:
        while True:
            async with asyncio.timeout(idle_timeout_s):
                data = await reader.read(READ_CHUNK)
            if not data:
                return
            await member.write(data, timeout_s=idle_timeout_s)

    async def down() -> None:
        while True:
            data = await member.read(READ_CHUNK, idle_timeout_s=idle_timeout_s)
            if not data:
                break
            writer.write(data)
            async with asyncio.timeout(idle_timeout_s):
                await writer.drain()
        if writer.can_write_eof():
            with contextlib.suppress(OSError, RuntimeError):
                writer.write_eof()

    async def guarded(part: Callable[[], Awaitable[None]]) -> None:
        with contextlib.suppress(OSError, TimeoutError, Unreachable, asyncio.IncompleteReadError):
            await part()

    try:
        async with asyncio.TaskGroup() as group:
            tasks = {group.create_task(guarded(up)), group.create_task(guarded(down))}
            _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if pending:
                await asyncio.wait(pending, timeout=linger_s)
            for task in pending:
                task.cancel()
    finally:
        await member.aclose()


# the proxy --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """What the proxy needs of an HTTP request: the raw target, lower-cased headers, the body."""

    method: str
    target: str
    headers: Mapping[str, str]
    body: bytes = b""


ConnectFor = Callable[[str, Mapping[str, Any]], ConnectOptions | None]
"""How to reach a cluster (name, Cluster object): options, or None when there is no route."""


def default_connect_for(name: str, cluster: Mapping[str, Any]) -> ConnectOptions | None:
    """Direct (or `spec.proxyURL`) for Push clusters and any cluster with a proxyURL; no route
    to a Pull cluster without one (the app supplies the tunnel)."""
    spec = cluster.get("spec") or {}
    if spec.get("syncMode") == "Pull" and not spec.get("proxyURL"):
        return None
    return DIRECT


DIRECT = ConnectOptions()


@dataclass
class _Resolved:
    cluster: Obj
    secret: Obj | None
    at: float


class ClusterProxy:
    """Authenticates bearer tokens, authorises callers, resolves clusters and forwards requests
    to members as the caller.

    `host` is the hub's client (Cluster and Secret reads, SubjectAccessReviews; the token reviews
    reuse its server and trust): its identity needs `get` on Clusters and on the Secrets they
    name, and `create` on `subjectaccessreviews`. `connect_for` picks how each cluster is
    reached; it must return the *same* options object for an unchanged cluster (member clients
    are pooled by their options). `cluster_source(name)` may serve Clusters from an informer
    (`tether hub run`); a miss there falls back to reading the host. Secrets are read from the
    host, cached `lookup_cache_s`.
    """

    def __init__(
        self,
        host: KubeClient,
        *,
        connect_for: ConnectFor = default_connect_for,
        admin_token: str | None = None,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        stream_idle_timeout_s: float = STREAM_IDLE_TIMEOUT_S,
        lookup_cache_s: float = LOOKUP_CACHE_S,
        cluster_source: Callable[[str], Obj | None] | None = None,
        decisions: DecisionCache | None = None,
    ) -> None:
        self.host = host
        self.connect_for = connect_for
        self.request_timeout_s = request_timeout_s
        self.stream_idle_timeout_s = stream_idle_timeout_s
        self.lookup_cache_s = lookup_cache_s
        self._admin_token = admin_token
        self._cluster_source = cluster_source
        self._pool = ClientPool(timeout_s=request_timeout_s)
        self._pool_lock = asyncio.Lock()
        self._lookups: dict[str, _Resolved] = {}
        self._tokens: dict[str, tuple[Caller | None, float]] = {}
        self.decisions = decisions if decisions is not None else DecisionCache()
        self.reviews = 0  # SubjectAccessReviews sent, for tests and /metrics
        self.counts: dict[str, int] = {}  # outcome -> requests, for /metrics

    async def aclose(self) -> None:
        await self._pool.aclose()

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    # authentication --------------------------------------------------------------------

    async def authenticate_token(self, token: str, *, timeout_s: float = 10.0) -> Caller | None:
        """The caller a bearer token proves: the hub's admin token, or whoever the host cluster
        says it is (a SelfSubjectReview sent with the token). None when it proves nobody;
        `Unreachable` when the host cannot say."""
        if self._admin_token and hmac.compare_digest(token.encode(), self._admin_token.encode()):
            return Caller("tether:proxy-admin", (ADMIN_GROUP, AUTHENTICATED), "admin-token")
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        cached = self._tokens.get(key)
        if cached is not None and cached[1] > now:
            return cached[0]
        caller = await self._review(token, timeout_s)
        if len(self._tokens) >= TOKEN_CACHE_MAX:
            self._tokens = {k: v for k, v in self._tokens.items() if v[1] > now}
            if len(self._tokens) >= TOKEN_CACHE_MAX:
                self._tokens.clear()
        ttl = TOKEN_CACHE_S if caller is not None else TOKEN_NEGATIVE_CACHE_S
        self._tokens[key] = (caller, now + ttl)
        return caller

    async def _review(self, token: str, timeout_s: float) -> Caller | None:
        host = self.host.credentials
        credentials = ClusterCredentials(
            context=host.context, server=host.server, namespace=host.namespace, ca_pem=host.ca_pem,
            insecure=host.insecure, client_cert_pem=None, client_key_pem=None, token=token,
            proxy_url=host.proxy_url, proxy_headers=host.proxy_headers)
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        async with KubeClient(credentials, connect=self.host.connect, timeout_s=timeout_s) as client:
            try:
                answer = await client.request(
                    "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=review,
                    idempotent=True)
            except Unauthorized:
                return None
            except Unreachable:
                raise
            except KubeError as exc:
                log.info("token review on the host failed: %s", exc.reason)
                return None
        info = (answer.get("status") or {}).get("userInfo") or {}
        username = str(info.get("username") or "")
        if not username:
            return None
        groups = tuple(str(g) for g in info.get("groups") or ())
        extra = tuple(sorted((str(k), tuple(str(v) for v in (values or ())))
                             for k, values in (info.get("extra") or {}).items()))
        return Caller(username, groups, "token", str(info.get("uid") or ""),
                      extra).with_authenticated()

    # clusters --------------------------------------------------------------------------

    async def _resolve(self, name: str) -> _Resolved | None:
        now = time.monotonic()
        known = self._lookups.get(name)
        cached = self._cluster_source(name) if self._cluster_source is not None else None
        if known is not None and now - known.at < self.lookup_cache_s:
            return known if cached is None else replace(known, cluster=cached)
        if cached is not None:
            cluster = cached
        else:
            try:
                cluster = await self.host.get(CLUSTER_API_VERSION, "Cluster", name,
                                              timeout_s=self.request_timeout_s)
            except NotFound:
                self._lookups.pop(name, None)
                return None
        ref = (cluster.get("spec") or {}).get("secretRef") or {}
        secret: Obj | None = None
        if ref.get("name"):
            try:
                secret = await self.host.get("v1", "Secret", str(ref["name"]),
                                             str(ref.get("namespace") or HUB_NAMESPACE),
                                             timeout_s=self.request_timeout_s)
            except NotFound:
                pass
        resolved = _Resolved(cluster, secret, now)
        self._lookups[name] = resolved
        return resolved

    async def _member(self, name: str, resolved: _Resolved) -> KubeClient | Answer:
        spec = resolved.cluster.get("spec") or {}
        if not spec.get("apiEndpoint"):
            return failure(503, "ServiceUnavailable",
                           f'cluster "{name}" has no spec.apiEndpoint to proxy to', name=name)
        if resolved.secret is None or not (resolved.secret.get("data") or {}).get("token"):
            return failure(503, "ServiceUnavailable",
                           f'cluster "{name}" has no credentials (spec.secretRef with a token) '
                           "for the proxy", name=name)
        options = self.connect_for(name, resolved.cluster)
        if options is None:
            return failure(503, "ServiceUnavailable",
                           f'cluster "{name}" is in Pull mode and this proxy has no tunnel to it '
                           "(start it with --tunnel-server, or set spec.proxyURL)", name=name)
        credentials = member_credentials(resolved.cluster, resolved.secret)
        async with self._pool_lock:  # one client per cluster, even for concurrent first requests
            return await self._pool.set(name, credentials, connect=options)

    # authorisation -------------------------------------------------------------------

    async def authorize(self, caller: Caller, name: str, verb: str) -> Decision:
        """The hub's answer to "may `caller` `verb` clusters/proxy `name`" (cached briefly);
        `Unreachable` or `KubeError` when the hub cannot answer."""
        key = DecisionCache.key(caller, name, verb)
        cached = self.decisions.get(key)
        if cached is not None:
            return cached
        self.reviews += 1
        answer = await self.host.request("POST", SAR_PATH, body=access_review(caller, name, verb),
                                         timeout_s=min(REVIEW_TIMEOUT_S, self.request_timeout_s),
                                         idempotent=True)
        decision = decision_from_review(answer)
        self.decisions.put(key, decision)
        return decision

    # forwarding ------------------------------------------------------------------------

    async def open(self, request: Request, caller: Caller) -> Outcome:
        """Authorise and forward an authenticated request; the answer is streamed or switched
        as it comes."""
        target = route(request.target)
        if target is None:
            self._count("not_found")
            return failure(404, "NotFound", "the server could not find the requested resource")
        name = target.cluster
        if not valid_cluster_name(name):
            self._count("not_found")
            return failure(404, "NotFound", f'clusters.{CLUSTER_GROUP} "{name}" not found', name=name)
        verb = proxy_verb(request.method)
        if verb is None:
            self._count("method_not_allowed")
            return failure(405, "MethodNotAllowed",
                           f"the server does not allow this method on the requested resource "
                           f"({request.method})", name=name)
        try:
            decision = await self.authorize(caller, name, verb)
        except KubeError as exc:
            self._count("host_error")
            log.warning("cannot review access to cluster %s for %s: %s", name,
                        describe_caller(caller), exc.message)
            return failure(503, "ServiceUnavailable",
                           f"cannot check the caller's access with the hub: {exc.message}",
                           name=name)
        if not decision.allowed:
            self._count("forbidden")
            return failure(403, "Forbidden", forbidden_message(caller, name, verb, decision.reason),
                           name=name)
        try:
            resolved = await self._resolve(name)
        except KubeError as exc:
            self._count("host_error")
            return failure(503, "ServiceUnavailable",
                           f"cannot read cluster {name!r} from the hub: {exc.message}", name=name)
        if resolved is None:
            self._count("not_found")
            return failure(404, "NotFound", f'clusters.{CLUSTER_GROUP} "{name}" not found', name=name)
        member = await self._member(name, resolved)
        if isinstance(member, Answer):
            self._count("unavailable")
            return member
        try:
            if is_upgrade(request.headers):
                return await self._upgrade(name, member, request, target, caller)
            return await self._forward(name, member, request, target, caller)
        except Unreachable as exc:
            self._count("unavailable")
            log.info("cluster %s unreachable: %s", name, exc.message)
            return failure(503, "ServiceUnavailable",
                           f'cluster "{name}" is unreachable through the proxy ({exc.message}); '
                           "check the cluster's network path and credentials", name=name)

    async def _forward(self, name: str, member: KubeClient, request: Request, target: Route,
                       caller: Caller) -> Outcome:
        headers = upstream_headers(request.headers, caller)
        stack = contextlib.AsyncExitStack()
        try:
            raw = await stack.enter_async_context(member.send_raw(
                request.method, target.target, headers=headers,
                content=request.body if request.body or request.method in ("POST", "PUT", "PATCH")
                else None,
                timeout_s=self.request_timeout_s, idle_timeout_s=self.stream_idle_timeout_s))
        except BaseException:
            await stack.aclose()
            raise
        self._count(f"{raw.status_code // 100}xx")
        content_type, out_headers = downstream_headers(raw.header_items())
        if request.method == "HEAD" or raw.status_code in (204, 304):
            await stack.aclose()
            return Answer(raw.status_code, b"", out_headers, content_type)
        return Streamed(raw.status_code, content_type, out_headers,
                        BodyChunks(stack, raw.chunks(idle_timeout_s=self.stream_idle_timeout_s)))

    async def _upgrade(self, name: str, member: KubeClient, request: Request, target: Route,
                       caller: Caller) -> Outcome:
        headers = upstream_headers(request.headers, caller, upgrade=True)
        stack = contextlib.AsyncExitStack()
        try:
            answer = await stack.enter_async_context(member.upgrade(
                request.method, target.target, headers=headers, timeout_s=self.request_timeout_s))
        except BaseException:
            await stack.aclose()
            raise
        if answer.stream is None:
            await stack.aclose()
            self._count(f"{answer.status_code // 100}xx")
            content_type, out_headers = downstream_headers(answer.headers)
            return Answer(answer.status_code, answer.body, out_headers, content_type)
        self._count("upgraded")
        return Switched(switch_headers(answer.headers), answer.stream, stack,
                        self.stream_idle_timeout_s)


def describe_caller(caller: Caller) -> str:
    """For logs: who, and how they proved it (never the credential)."""
    return f"{caller.username} ({caller.via})"

