"""An async Kubernetes client: discovery-backed resource paths, CRUD, patch, apply, watch.

One `KubeClient` per cluster, one connection pool per client. Every call takes an explicit
`timeout_s` that bounds the whole call, retries included (the client default applies when it is
None). Reads are retried with jittered backoff on `Unreachable`, 5xx and 429; writes are retried
only when the failure proves the request never reached the server (no connection, or 429).

Namespaces: single-object calls on a namespaced kind default to the credentials' namespace (as
kubectl does); list and watch with `namespace=None` span all namespaces.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import email.utils
import json
import logging
import random
import ssl
import time
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import httpcore
import httpx

from tether.kube.config import ClusterCredentials, load_kubeconfig
from tether.kube.errors import (
    KubeError,
    NotFound,
    ServerError,
    TooManyRequests,
    Unreachable,
    error_from_status,
)
from tether.kube.http1 import Answer, ConnectionPool, TransportError
from tether.kube.transport import ConnectOptions, build_transport
from tether.objects import Obj

if TYPE_CHECKING:
    from tether.kube.watch import WatchEvent

T = TypeVar("T")
PatchType = Literal["merge", "json", "strategic"]
PropagationPolicy = Literal["Background", "Foreground", "Orphan"]

REQUEST_TIMEOUT_S = 30.0
log = logging.getLogger(__name__)

PATCH_CONTENT_TYPES: Mapping[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}
APPLY_CONTENT_TYPE = "application/apply-patch+yaml"

# Failures that prove the request never left: safe to retry even for writes.
_NOT_SENT = (httpcore.ConnectError, httpcore.ConnectTimeout, httpcore.ProxyError, httpcore.PoolTimeout,
             httpx.ConnectError, httpx.ConnectTimeout, httpx.ProxyError, httpx.PoolTimeout)
_TRANSPORT_ERRORS = (TransportError, httpx.TransportError, httpcore.TimeoutException,
                     httpcore.NetworkError, httpcore.ProtocolError, httpcore.ProxyError,
                     httpcore.UnsupportedProtocol, OSError, ssl.SSLError)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded, jittered exponential backoff for requests that may be repeated."""

    attempts: int = 4
    base_backoff_s: float = 0.2
    max_backoff_s: float = 5.0

    def delay_s(self, attempt: int, error: KubeError | None = None) -> float:
        if isinstance(error, TooManyRequests) and error.retry_after_s is not None:
            return min(self.max_backoff_s, max(0.0, error.retry_after_s))
        delay = min(self.max_backoff_s, self.base_backoff_s * 2.0 ** (attempt - 1))
        return delay * random.uniform(0.5, 1.0)


@dataclass(frozen=True)
class Resource:
    group_version: str
    plural: str
    kind: str
    namespaced: bool
    verbs: frozenset[str] = frozenset()
    subresources: frozenset[str] = frozenset()

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        base = f"/api/{self.group_version}" if "/" not in self.group_version else f"/apis/{self.group_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


@dataclass(frozen=True)
class ObjectList:
    """A complete (all pages) list and the resourceVersion to watch from."""

    items: tuple[Obj, ...]
    resource_version: str


@dataclass(frozen=True)
class Preconditions:
    uid: str | None = None
    resource_version: str | None = None


@dataclass(frozen=True)
class ServerVersion:
    major: str
    minor: str
    git_version: str
    platform: str
    raw: Obj = field(default_factory=dict, compare=False, repr=False)


class RawStream:
    """A response being read as it arrives; transport failures surface as `Unreachable`."""

    def __init__(self, client: KubeClient, status_code: int, headers: httpx.Headers,
                 body: AsyncIterator[bytes]) -> None:
        self._client = client
        self._body = body
        self.status_code = status_code
        self.headers: Mapping[str, str] = headers

    @classmethod
    def of(cls, client: KubeClient, response: httpx.Response) -> RawStream:
        return cls(client, response.status_code, response.headers, response.aiter_raw())

    def header_items(self) -> list[tuple[str, str]]:
        """Every header as received, repeated names included."""
        assert isinstance(self.headers, httpx.Headers)
        return list(self.headers.multi_items())

    async def chunks(self, *, idle_timeout_s: float | None = None,
                     deadline: float | None = None) -> AsyncIterator[bytes]:
        async for chunk in self._bounded(self._body, idle_timeout_s, deadline):
            yield chunk

    async def lines(self, *, idle_timeout_s: float | None = None,
                    deadline: float | None = None) -> AsyncIterator[str]:
        """Lines of the body, split at \\n (a \\r before it is dropped), each awaited at most
        `idle_timeout_s` and not past `deadline` (a `time.monotonic()` instant). Only \\n ends
        a line: JSON from Go may carry U+0085 or U+2028 unescaped inside a value."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending: list[str] = []  # the unfinished line, in pieces (no rescans of a long line)
        async for chunk in self._bounded(self._body, idle_timeout_s, deadline):
            text = decoder.decode(chunk)
            start = 0
            while (end := text.find("\n", start)) >= 0:
                pending.append(text[start:end])
                yield "".join(pending).removesuffix("\r")
                pending.clear()
                start = end + 1
            if start < len(text):
                pending.append(text[start:])
        pending.append(decoder.decode(b"", final=True))
        if last := "".join(pending).removesuffix("\r"):
            yield last

    async def _bounded(self, source: AsyncIterator[T], idle_timeout_s: float | None,
                          deadline: float | None) -> AsyncIterator[T]:
        server = self._client.credentials.server
        try:
            while True:
                wait = idle_timeout_s
                if deadline is not None:
                    left = max(0.0, deadline - time.monotonic())
                    wait = left if wait is None else min(wait, left)
                try:
                    async with asyncio.timeout(wait):
                        item = await anext(source)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    what = ("stream outlived its deadline" if deadline is not None
                            and time.monotonic() >= deadline else f"no data for {wait:.1f}s")
                    raise Unreachable(server, what) from None
                except _TRANSPORT_ERRORS as exc:
                    raise self._client._unreachable(exc) from exc
                yield item
        finally:
            with contextlib.suppress(*_TRANSPORT_ERRORS, RuntimeError):
                await source.aclose()  # type: ignore[attr-defined]


class UpgradedStream:
    """The raw connection after a `101 Switching Protocols`; failures surface as `Unreachable`.
    There is no half-close: TLS (and httpcore's streams) cannot shut down one direction."""

    def __init__(self, client: KubeClient, network: Any) -> None:
        self._client = client
        self._network = network

    async def read(self, max_bytes: int = 256 * 1024, *, idle_timeout_s: float | None = None) -> bytes:
        """Up to `max_bytes`; b"" at EOF."""
        try:
            data: bytes = await self._network.read(max_bytes, timeout=idle_timeout_s)
        except _TRANSPORT_ERRORS as exc:
            raise self._client._unreachable(exc) from exc
        return data

    async def write(self, data: bytes, *, timeout_s: float | None = None) -> None:
        try:
            await self._network.write(data, timeout=timeout_s)
        except _TRANSPORT_ERRORS as exc:
            raise self._client._unreachable(exc) from exc

    async def aclose(self) -> None:
        with contextlib.suppress(*_TRANSPORT_ERRORS):
            await self._network.aclose()


@dataclass(frozen=True)
class Upgraded:
    """The answer to an upgrade request: `stream` after a 101, else the error `body`."""

    status_code: int
    headers: list[tuple[str, str]]
    body: bytes
    stream: UpgradedStream | None


class KubeClient:
    def __init__(
        self,
        credentials: ClusterCredentials,
        *,
        connect: ConnectOptions | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.credentials = credentials
        self.connect = connect or ConnectOptions()
        self.retry = retry or RetryPolicy()
        self.timeout_s = timeout_s
        headers = {"User-Agent": "tether", "Accept": "application/json"}
        if credentials.token:
            headers["Authorization"] = f"Bearer {credentials.token}"
        self._headers = headers
        context = credentials.ssl_context()
        ssl_context = context if isinstance(context, ssl.SSLContext) else None
        self._http = httpx.AsyncClient(
            base_url=credentials.server,
            headers=headers,
            timeout=timeout_s,
            transport=build_transport(credentials, self.connect, ssl_context),
        )
        # request/response calls go through the lean client unless a proxy or a foreign
        # network backend is configured (those stay on httpcore, which speaks both)
        self._base_path, self._direct = _direct_pool(credentials, self.connect, ssl_context)
        self._discovery: dict[str, dict[str, Resource]] = {}
        self._discovery_generation: dict[str, int] = {}
        self._discovery_locks: dict[str, asyncio.Lock] = {}

    @classmethod
    def from_kubeconfig(cls, path: Path | None = None, context: str | None = None, *,
                        connect: ConnectOptions | None = None, retry: RetryPolicy | None = None,
                        timeout_s: float = REQUEST_TIMEOUT_S) -> KubeClient:
        return cls(load_kubeconfig(path, context), connect=connect, retry=retry, timeout_s=timeout_s)

    @property
    def server(self) -> str:
        return self.credentials.server

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        if self._direct is not None:
            await self._direct.close()
        await self._http.aclose()

    # transport ---------------------------------------------------------------------------

    def _unreachable(self, exc: BaseException) -> Unreachable:
        if isinstance(exc, TransportError):  # the lean client says itself whether it sent
            return Unreachable(self.server, str(exc), request_sent=exc.sent)
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if self.credentials.proxy_url:
            detail += f" (via proxy {self.credentials.proxy_display})"
        return Unreachable(self.server, detail, request_sent=not isinstance(exc, _NOT_SENT))

    def _error(self, answer: Answer) -> KubeError:
        try:
            payload = json.loads(answer.body)
        except ValueError:
            payload = None
        if not isinstance(payload, dict) or payload.get("kind") != "Status":
            text = answer.body.decode(errors="replace").strip()[:300]
            payload = {"code": answer.status, "message": text or answer.reason}
        return error_from_status(payload, http_code=answer.status,
                                 retry_after_s=_retry_after_s(answer.header("Retry-After")))

    def _timeout(self, budget_s: float, read_s: float | None) -> httpx.Timeout:
        return httpx.Timeout(connect=min(budget_s, self.connect.connect_timeout_s), read=read_s,
                             write=budget_s, pool=budget_s)

    async def _once(self, method: str, path: str, *, content: bytes | None, headers: dict[str, str],
                    params: Mapping[str, str] | None, budget_s: float) -> Answer:
        try:
            async with asyncio.timeout(budget_s):
                if self._direct is not None:
                    answer = await self._direct.request(
                        method, self._request_target(path, params), list({**self._headers, **headers}.items()),
                        content)
                else:
                    response = await self._http.request(method, path, content=content, headers=headers,
                                                        params=params, timeout=self._timeout(budget_s, budget_s))
                    answer = _answer_of(response, response.content)
        except TimeoutError:
            raise Unreachable(self.server, f"no answer within {budget_s:.1f}s") from None
        except _TRANSPORT_ERRORS as exc:
            raise self._unreachable(exc) from exc
        log.debug("%s %s -> %d", method, path, answer.status)
        return answer

    async def request(self, method: str, path: str, *, body: Any = None,
                      content_type: str = "application/json", params: Mapping[str, str] | None = None,
                      timeout_s: float | None = None, idempotent: bool | None = None) -> Obj:
        """One API call, JSON in and out; errors become `KubeError` subclasses.

        `idempotent` (default: GET and HEAD only) allows retries after an answer may have been
        processed; everything is retried when it provably was not (no connection, 429).
        """
        budget_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + budget_s
        repeatable = idempotent if idempotent is not None else method in ("GET", "HEAD")
        content = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if content is not None else {}
        attempt = 0
        while True:
            attempt += 1
            try:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Unreachable(self.server, f"no answer within {budget_s:.1f}s")
                answer = await self._once(method, path, content=content, headers=headers,
                                          params=params, budget_s=left)
                if answer.status >= 400:
                    raise self._error(answer)
                if not answer.body:
                    return {}
                try:
                    payload = json.loads(answer.body)
                except ValueError:
                    raise ServerError(answer.status, "InvalidResponse",
                                      f"{self.server}{path}: the answer is not JSON") from None
                return payload if isinstance(payload, dict) else {"items": payload}
            except KubeError as exc:
                if not self._may_retry(exc, repeatable) or attempt >= self.retry.attempts:
                    raise
                delay = self.retry.delay_s(attempt, exc)
                if time.monotonic() + delay >= deadline:
                    raise
                log.debug("%s %s failed (%s); attempt %d, retrying in %.2fs",
                          method, path, exc.reason, attempt, delay)
                await asyncio.sleep(delay)

    @staticmethod
    def _may_retry(error: KubeError, repeatable: bool) -> bool:
        if isinstance(error, TooManyRequests):
            return True
        if isinstance(error, Unreachable):
            return repeatable or not error.request_sent
        return repeatable and isinstance(error, ServerError)

    @contextlib.asynccontextmanager
    async def stream(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                     body: Any = None, content_type: str = "application/json",
                     accept: str = "application/json", timeout_s: float | None = None,
                     idle_timeout_s: float | None = None) -> AsyncIterator[RawStream]:
        """Open a long response (watch, logs, proxy) and read it incrementally.

        `timeout_s` bounds getting the response headers; reading is bounded per item by the
        `RawStream` methods. An error status is read in full and raised as a `KubeError`.
        """
        budget_s = self.timeout_s if timeout_s is None else timeout_s
        content = None if body is None else json.dumps(body).encode()
        headers = {"Accept": accept}
        if content is not None:
            headers["Content-Type"] = content_type
        if self._direct is not None:
            async with self._direct_stream(method, path, params, content, headers, budget_s) as direct:
                yield direct
            return
        request = self._http.build_request(method, path, params=params, content=content, headers=headers,
                                           timeout=self._timeout(budget_s, idle_timeout_s))
        try:
            async with asyncio.timeout(budget_s):
                response = await self._http.send(request, stream=True)
        except TimeoutError:
            raise Unreachable(self.server, f"no answer within {budget_s:.1f}s") from None
        except _TRANSPORT_ERRORS as exc:
            raise self._unreachable(exc) from exc
        try:
            if response.status_code >= 400:
                try:
                    async with asyncio.timeout(budget_s):
                        raw = await response.aread()
                except (TimeoutError, *_TRANSPORT_ERRORS):
                    raw = b""
                raise self._error(_answer_of(response, raw))
            yield RawStream.of(self, response)
        finally:
            with contextlib.suppress(*_TRANSPORT_ERRORS):
                await response.aclose()

    def _request_target(self, path: str, params: Mapping[str, str] | None) -> str:
        target = self._base_path + path
        if params:
            target += ("&" if "?" in target else "?") + urllib.parse.urlencode(params)
        return target

    @contextlib.asynccontextmanager
    async def _direct_stream(self, method: str, path: str, params: Mapping[str, str] | None,
                             content: bytes | None, headers: dict[str, str],
                             budget_s: float) -> AsyncIterator[RawStream]:
        assert self._direct is not None
        try:
            async with asyncio.timeout(budget_s):
                answer = await self._direct.open(method, self._request_target(path, params),
                                                 list({**self._headers, **headers}.items()), content)
        except TimeoutError:
            raise Unreachable(self.server, f"no answer within {budget_s:.1f}s") from None
        except _TRANSPORT_ERRORS as exc:
            raise self._unreachable(exc) from exc
        try:
            if answer.status >= 400:
                try:
                    async with asyncio.timeout(budget_s):
                        raw = await answer.read()
                except (TimeoutError, TransportError):
                    raw = b""
                raise self._error(Answer(answer.status, answer.reason, answer.headers, raw, False))
            yield RawStream(self, answer.status, httpx.Headers(list(answer.headers.items())),
                            answer.chunks())
        finally:
            answer.close()

    # raw pass-through (the hub's cluster proxy) ------------------------------------------

    def _raw_request(self, method: str, target: str, headers: Sequence[tuple[str, str]],
                     content: bytes | None, budget_s: float, idle_timeout_s: float | None) -> httpx.Request:
        """`target` (path and raw query, as received) below the server's own path, unchanged."""
        request = self._http.build_request(method, target.split("?", 1)[0] or "/", content=content,
                                           headers=list(headers),
                                           timeout=self._timeout(budget_s, idle_timeout_s))
        base = httpx.URL(self.server).raw_path.split(b"?", 1)[0].rstrip(b"/")
        request.url = request.url.copy_with(raw_path=base + target.encode("latin-1"))
        return request

    async def _send_streaming(self, request: httpx.Request, budget_s: float) -> httpx.Response:
        """The response headers within `budget_s`; transport failures become `Unreachable`."""
        try:
            async with asyncio.timeout(budget_s):
                return await self._http.send(request, stream=True)
        except TimeoutError:
            raise Unreachable(self.server, f"no answer within {budget_s:.1f}s") from None
        except _TRANSPORT_ERRORS as exc:
            raise self._unreachable(exc) from exc

    @contextlib.asynccontextmanager
    async def send_raw(self, method: str, target: str, *, headers: Sequence[tuple[str, str]] = (),
                       content: bytes | None = None, timeout_s: float | None = None,
                       idle_timeout_s: float | None = None) -> AsyncIterator[RawStream]:
        """Send one request as given (raw path and query; `headers` over the client's defaults,
        so the client's own credentials apply unless replaced) and stream the answer whatever
        its status: a proxy forwards errors, it does not raise them. No retries. `timeout_s`
        bounds getting the response headers, `idle_timeout_s` each read of the body."""
        budget_s = self.timeout_s if timeout_s is None else timeout_s
        request = self._raw_request(method, target, headers, content, budget_s, idle_timeout_s)
        response = await self._send_streaming(request, budget_s)
        try:
            yield RawStream.of(self, response)
        finally:
            with contextlib.suppress(*_TRANSPORT_ERRORS):
                await response.aclose()

    @contextlib.asynccontextmanager
    async def upgrade(self, method: str, target: str, *, headers: Sequence[tuple[str, str]],
                      timeout_s: float | None = None,
                      body_limit: int = 1 << 20) -> AsyncIterator[Upgraded]:
        """Send an `Upgrade` request (exec, attach, port-forward) as given. After a `101` the
        connection is `Upgraded.stream` until the block ends; any other status comes with its
        body (at most `body_limit` bytes) and no stream."""
        budget_s = self.timeout_s if timeout_s is None else timeout_s
        request = self._raw_request(method, target, headers, None, budget_s, None)
        response = await self._send_streaming(request, budget_s)
        try:
            if response.status_code == 101:
                network = response.extensions.get("network_stream")
                if network is None:
                    raise Unreachable(self.server, "101 without a connection to switch to")
                yield Upgraded(101, list(response.headers.multi_items()), b"",
                               UpgradedStream(self, network))
                return
            body = bytearray()
            try:
                async with asyncio.timeout(budget_s):
                    async for chunk in response.aiter_raw():
                        body += chunk
                        if len(body) >= body_limit:
                            break
            except (TimeoutError, *_TRANSPORT_ERRORS):
                pass
            yield Upgraded(response.status_code, list(response.headers.multi_items()),
                           bytes(body[:body_limit]), None)
        finally:
            with contextlib.suppress(*_TRANSPORT_ERRORS):
                await response.aclose()

    # discovery ---------------------------------------------------------------------------

    async def resource(self, api_version: str, kind: str, *, timeout_s: float | None = None) -> Resource:
        """The resource serving `kind` in `api_version`, from cached discovery.

        A miss refreshes that group-version once (a CRD may have been created since), so a kind
        that does not exist costs one request each time it is asked for.
        """
        known = self._discovery.get(api_version, {}).get(kind)
        if known is not None:
            return known
        seen = self._discovery_generation.get(api_version, 0)
        lock = self._discovery_locks.setdefault(api_version, asyncio.Lock())
        async with lock:
            if self._discovery_generation.get(api_version, 0) == seen:
                await self._discover(api_version, timeout_s=timeout_s)
        known = self._discovery.get(api_version, {}).get(kind)
        if known is None:
            raise NotFound(404, "NotFound", f"the server has no resource for {kind} in {api_version}")
        return known

    async def _discover(self, api_version: str, *, timeout_s: float | None) -> None:
        path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        try:
            entries = (await self.request("GET", path, timeout_s=timeout_s)).get("resources", [])
        except NotFound:
            entries = []
        subresources: dict[str, set[str]] = {}
        for entry in entries:
            name = str(entry.get("name", ""))
            if "/" in name:
                parent, sub = name.split("/", 1)
                subresources.setdefault(parent, set()).add(sub)
        found: dict[str, Resource] = {}
        for entry in entries:
            name = str(entry.get("name", ""))
            if "/" in name or not entry.get("kind"):
                continue
            found[str(entry["kind"])] = Resource(
                api_version, name, str(entry["kind"]), bool(entry.get("namespaced")),
                frozenset(entry.get("verbs") or ()), frozenset(subresources.get(name, ())))
        self._discovery[api_version] = found
        self._discovery_generation[api_version] = self._discovery_generation.get(api_version, 0) + 1

    def invalidate_discovery(self, api_version: str | None = None) -> None:
        if api_version is None:
            self._discovery.clear()
        else:
            self._discovery.pop(api_version, None)

    def _namespace(self, res: Resource, namespace: str | None) -> str | None:
        if not res.namespaced:
            return None
        return namespace or self.credentials.namespace

    async def _target(self, obj: Obj, namespace: str | None, timeout_s: float | None) -> tuple[Resource, str | None]:
        res = await self.resource(obj["apiVersion"], obj["kind"], timeout_s=timeout_s)
        meta = obj.get("metadata") or {}
        return res, self._namespace(res, namespace or meta.get("namespace"))

    # reads -------------------------------------------------------------------------------

    async def get(self, api_version: str, kind: str, name: str, namespace: str | None = None, *,
                  subresource: str | None = None, timeout_s: float | None = None) -> Obj:
        res = await self.resource(api_version, kind, timeout_s=timeout_s)
        return await self.request("GET", res.path(self._namespace(res, namespace), name, subresource),
                                  timeout_s=timeout_s)

    async def get_or_none(self, api_version: str, kind: str, name: str,
                          namespace: str | None = None, *, timeout_s: float | None = None
                          ) -> Obj | None:
        """The object, or None when it does not exist (every other error is raised)."""
        try:
            return await self.get(api_version, kind, name, namespace, timeout_s=timeout_s)
        except NotFound:
            return None

    async def list_all(self, api_version: str, kind: str, namespace: str | None = None, *,
                       label_selector: str = "", field_selector: str = "", limit: int = 500,
                       timeout_s: float | None = None) -> ObjectList:
        """Every matching object, following `continue` tokens, with the list's resourceVersion.

        All pages share the first page's snapshot. An expired continue token raises `Expired`:
        list again (the informer does). `timeout_s` bounds all pages together.
        """
        budget_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + budget_s
        res = await self.resource(api_version, kind, timeout_s=budget_s)
        path = res.path(namespace if res.namespaced else None)
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if limit > 0:
            params["limit"] = str(limit)
        items: list[Obj] = []
        resource_version = ""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Unreachable(self.server, f"list of {kind} not complete within {budget_s:.1f}s")
            page = await self.request("GET", path, params=params, timeout_s=left)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            resource_version = resource_version or str(meta.get("resourceVersion", ""))
            token = meta.get("continue")
            if not token:
                break
            params["continue"] = str(token)
        for item in items:  # items in a List may omit these; the cache and handlers want them
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return ObjectList(tuple(items), resource_version)

    async def list_objects(self, api_version: str, kind: str, namespace: str | None = None,
                           label_selector: str = "", *, field_selector: str = "", limit: int = 500,
                           timeout_s: float | None = None) -> list[Obj]:
        listed = await self.list_all(api_version, kind, namespace, label_selector=label_selector,
                                     field_selector=field_selector, limit=limit, timeout_s=timeout_s)
        return list(listed.items)

    def watch(self, api_version: str, kind: str, namespace: str | None = None, *,
              resource_version: str = "", label_selector: str = "", field_selector: str = "",
              allow_bookmarks: bool = True, timeout_s: float = 300.0,
              idle_timeout_s: float | None = None) -> AsyncGenerator[WatchEvent, None]:
        """See `tether.kube.watch.watch`."""
        from tether.kube.watch import watch

        return watch(self, api_version, kind, namespace, resource_version=resource_version,
                     label_selector=label_selector, field_selector=field_selector,
                     allow_bookmarks=allow_bookmarks, timeout_s=timeout_s, idle_timeout_s=idle_timeout_s)

    # writes ------------------------------------------------------------------------------

    @staticmethod
    def _write_params(field_manager: str | None, dry_run: bool, **extra: str) -> dict[str, str]:
        params = dict(extra)
        if field_manager:
            params["fieldManager"] = field_manager
        if dry_run:
            params["dryRun"] = "All"
        return params

    async def create(self, obj: Obj, *, namespace: str | None = None, field_manager: str | None = None,
                     dry_run: bool = False, timeout_s: float | None = None) -> Obj:
        res, ns = await self._target(obj, namespace, timeout_s)
        return await self.request("POST", res.path(ns), body=obj, timeout_s=timeout_s,
                                  params=self._write_params(field_manager, dry_run))

    async def replace(self, obj: Obj, *, namespace: str | None = None, subresource: str | None = None,
                      field_manager: str | None = None, dry_run: bool = False,
                      timeout_s: float | None = None) -> Obj:
        """PUT the whole object; a `metadata.resourceVersion` in it makes this conditional
        (`Conflict` when the object changed since)."""
        res, ns = await self._target(obj, namespace, timeout_s)
        path = res.path(ns, obj["metadata"]["name"], subresource)
        return await self.request("PUT", path, body=obj, timeout_s=timeout_s,
                                  params=self._write_params(field_manager, dry_run))

    async def patch(self, api_version: str, kind: str, name: str, patch: Obj | list[Obj], *,
                    namespace: str | None = None, patch_type: PatchType = "merge",
                    subresource: str | None = None, field_manager: str | None = None,
                    dry_run: bool = False, timeout_s: float | None = None) -> Obj:
        """Merge (RFC 7386), JSON (RFC 6902, `patch` is a list of operations) or strategic
        merge patch (built-in kinds only: custom resources answer 415)."""
        res = await self.resource(api_version, kind, timeout_s=timeout_s)
        path = res.path(self._namespace(res, namespace), name, subresource)
        return await self.request("PATCH", path, body=patch, content_type=PATCH_CONTENT_TYPES[patch_type],
                                  params=self._write_params(field_manager, dry_run), timeout_s=timeout_s)

    async def apply(self, obj: Obj, *, field_manager: str = "tether", force: bool = True,
                    dry_run: bool = False, subresource: str | None = None,
                    timeout_s: float | None = None) -> Obj:
        """Server-side apply: create or update, owning the fields this manifest sets.

        With `force=False` a field owned by another manager raises `Conflict` (causes name it).
        """
        res, ns = await self._target(obj, None, timeout_s)
        params = self._write_params(field_manager, dry_run, force="true" if force else "false")
        return await self.request("PATCH", res.path(ns, obj["metadata"]["name"], subresource), body=obj,
                                  content_type=APPLY_CONTENT_TYPE, params=params, timeout_s=timeout_s)

    async def apply_status(self, obj: Obj, *, field_manager: str = "tether", force: bool = True,
                           dry_run: bool = False, timeout_s: float | None = None) -> Obj:
        """Server-side apply to the `status` subresource (the manifest's `.status` only)."""
        return await self.apply(obj, field_manager=field_manager, force=force, dry_run=dry_run,
                                subresource="status", timeout_s=timeout_s)

    async def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None, *,
                     propagation_policy: PropagationPolicy = "Background",
                     preconditions: Preconditions | None = None, grace_period_s: int | None = None,
                     dry_run: bool = False, timeout_s: float | None = None) -> Obj:
        """Delete; returns the object (when finalizers keep it) or a `Status`."""
        res = await self.resource(api_version, kind, timeout_s=timeout_s)
        options: Obj = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation_policy}
        if preconditions is not None:
            options["preconditions"] = {k: v for k, v in (("uid", preconditions.uid),
                                                          ("resourceVersion", preconditions.resource_version))
                                        if v is not None}
        if grace_period_s is not None:
            options["gracePeriodSeconds"] = grace_period_s
        if dry_run:
            options["dryRun"] = ["All"]
        return await self.request("DELETE", res.path(self._namespace(res, namespace), name), body=options,
                                  params={"dryRun": "All"} if dry_run else None, timeout_s=timeout_s)

    # server ------------------------------------------------------------------------------

    async def server_version(self, *, timeout_s: float | None = None) -> ServerVersion:
        raw = await self.request("GET", "/version", timeout_s=timeout_s)
        return ServerVersion(str(raw.get("major", "")), str(raw.get("minor", "")),
                             str(raw.get("gitVersion", "")), str(raw.get("platform", "")), raw)

    async def healthz(self, path: str = "/readyz", *, timeout_s: float = 5.0) -> tuple[int, str]:
        """A health probe: (HTTP status, body), any status; `/readyz` falls back to `/healthz` on
        404 (older servers). No retries; `Unreachable` when there is no answer."""
        deadline = time.monotonic() + timeout_s
        for candidate in (path, "/healthz") if path == "/readyz" else (path,):
            left = max(0.001, deadline - time.monotonic())
            answer = await self._once("GET", candidate, content=None, headers={"Accept": "*/*"},
                                      params=None, budget_s=left)
            if answer.status == 404 and candidate != "/healthz" and path == "/readyz":
                continue
            return answer.status, answer.body.decode(errors="replace")
        return 404, ""


def _direct_pool(credentials: ClusterCredentials, options: ConnectOptions,
                 ssl_context: ssl.SSLContext | None) -> tuple[str, ConnectionPool | None]:
    """The server URL's path prefix and a lean pool for it, or no pool when a proxy or a
    foreign network backend must carry the connection."""
    url = urllib.parse.urlsplit(credentials.server)
    base_path = url.path.rstrip("/")
    if credentials.proxy_url or options.network_backend is not None or url.scheme not in ("http", "https"):
        return base_path, None
    return base_path, ConnectionPool(
        url.hostname or "localhost", url.port or (443 if url.scheme == "https" else 80),
        ssl_context=ssl_context,
        dialer=options.dialer, max_connections=options.max_connections,
        max_idle=options.max_keepalive_connections, keepalive_expiry_s=options.keepalive_expiry_s,
        connect_timeout_s=options.connect_timeout_s)


def _answer_of(response: httpx.Response, body: bytes) -> Answer:
    headers: dict[str, str] = {}
    for name, value in response.headers.multi_items():
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return Answer(response.status_code, response.reason_phrase, headers, body, keep_alive=True)


def _retry_after_s(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
