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
import functools
import json
import logging
import random
import ssl
import time
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypeVar

from tether.kube import jsoncodec
from tether.kube.config import ClusterCredentials, load_kubeconfig
from tether.kube.errors import (
    KubeError,
    NotFound,
    ServerError,
    TooManyRequests,
    Unreachable,
    error_from_status,
)
from tether.kube.transport import ConnectOptions, open_pool
from tether.kube.watch import WatchEvent, watch
from tether.net.http1 import Answer, Headers
from tether.net.httpclient import RawConnection, StreamedAnswer, TransportError
from tether.objects import Obj

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
_FRAMING_HEADERS = frozenset(("host", "content-length", "transfer-encoding"))


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
    """A response being read as it arrives; transport failures surface as `Unreachable`.
    `idle_timeout_s` is the default for `chunks` and `lines`."""

    def __init__(self, client: KubeClient, status_code: int, headers: Headers,
                 body: AsyncIterator[bytes], *, idle_timeout_s: float | None = None) -> None:
        self._client = client
        self._body = body
        self._idle_timeout_s = idle_timeout_s
        self.status_code = status_code
        self.headers = headers

    def header_items(self) -> list[tuple[str, str]]:
        """Every header as received, repeated names included."""
        return self.headers.multi_items()

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
        if idle_timeout_s is None:
            idle_timeout_s = self._idle_timeout_s
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
                except TransportError as exc:
                    raise self._client._unreachable(exc) from exc
                yield item
        finally:
            with contextlib.suppress(TransportError, RuntimeError):
                await source.aclose()  # type: ignore[attr-defined]


class UpgradedStream:
    """The raw connection after a `101 Switching Protocols`; failures surface as `Unreachable`.
    There is no half-close: TLS and tunnels cannot shut down one direction alone."""

    def __init__(self, client: KubeClient, connection: RawConnection) -> None:
        self._client = client
        self._connection = connection

    async def read(self, max_bytes: int = 256 * 1024, *, idle_timeout_s: float | None = None) -> bytes:
        """Up to `max_bytes`; b"" at EOF."""
        try:
            async with asyncio.timeout(idle_timeout_s):
                return await self._connection.read(max_bytes)
        except TimeoutError:
            raise Unreachable(self._client.server, f"no data for {idle_timeout_s:.1f}s") from None
        except TransportError as exc:
            raise self._client._unreachable(exc) from exc

    async def write(self, data: bytes, *, timeout_s: float | None = None) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                await self._connection.write(data)
        except TimeoutError:
            raise Unreachable(self._client.server, f"write not taken within {timeout_s:.1f}s") from None
        except TransportError as exc:
            raise self._client._unreachable(exc) from exc

    async def aclose(self) -> None:
        await self._connection.aclose()


@dataclass(frozen=True)
class Upgraded:
    """The answer to an upgrade request: `stream` after a 101, else the error `body`."""

    status_code: int
    headers: list[tuple[str, str]]
    body: bytes
    stream: UpgradedStream | None


def _log_warnings(method: str, path: str, answer: Answer) -> None:
    """Log the server's `Warning` headers, as client-go's default handler prints them: a field
    the server dropped (an unknown field under fieldValidation=Warn) must not go unnoticed."""
    for name, value in answer.fields:
        if name.lower() == "warning":
            code, _, rest = value.partition(" ")
            _, _, text = rest.partition(" ")
            if code == "299" and len(text) >= 2 and text[0] == text[-1] == '"':
                with contextlib.suppress(ValueError):
                    text = json.loads(text)
            log.warning("%s %s: server warning: %s", method, path, text or value)


@functools.lru_cache(maxsize=512)
def _query(params: tuple[tuple[str, str], ...]) -> str:
    """The query string of request parameters: a client sends the same few sets (field
    manager, force) with most writes, so each is encoded once."""
    return urllib.parse.urlencode(params)


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
        # one pool for everything: requests, watches, streams, pass-through, upgrades
        self._base_path, self._pool = open_pool(credentials, self.connect, ssl_context)
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

    @property
    def closed(self) -> bool:
        """True once `close()` ran: every later call fails as `Unreachable`."""
        return self._pool.closed

    async def close(self) -> None:
        await self._pool.close()

    # transport ---------------------------------------------------------------------------

    def _unreachable(self, exc: TransportError) -> Unreachable:
        """The one translation of a transport failure into the client's errors."""
        detail = str(exc)
        if self.credentials.proxy_url:
            detail += f" (via proxy {self.credentials.proxy_display})"
        return Unreachable(self.server, detail, request_sent=exc.sent)

    def _error(self, answer: Answer) -> KubeError:
        try:
            payload = jsoncodec.decode(answer.body)
        except ValueError:
            payload = None
        if not isinstance(payload, dict) or payload.get("kind") != "Status":
            text = answer.body.decode(errors="replace").strip()[:300]
            payload = {"code": answer.status, "message": text or answer.reason}
        return error_from_status(payload, http_code=answer.status,
                                 retry_after_s=_retry_after_s(answer.header("Retry-After")))

    async def _once(self, method: str, path: str, *, content: bytes | None, headers: dict[str, str],
                    params: Mapping[str, str] | None, budget_s: float) -> Answer:
        try:
            async with asyncio.timeout(budget_s):
                answer = await self._pool.request(
                    method, self._request_target(path, params), list({**self._headers, **headers}.items()),
                    content)
        except TimeoutError:
            raise Unreachable(self.server, f"no answer within {budget_s:.1f}s") from None
        except TransportError as exc:
            raise self._unreachable(exc) from exc
        log.debug("%s %s -> %d", method, path, answer.status)
        if "warning" in answer.headers:
            _log_warnings(method, path, answer)
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
        content = None if body is None else jsoncodec.encode(body)
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
                    payload = jsoncodec.decode(answer.body)
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
        `RawStream` methods (`idle_timeout_s` their default). An error status is read in full
        and raised as a `KubeError`.
        """
        budget_s = self.timeout_s if timeout_s is None else timeout_s
        content = None if body is None else jsoncodec.encode(body)
        headers = {"Accept": accept}
        if content is not None:
            headers["Content-Type"] = content_type
        answer = await self._open(method, self._request_target(path, params),
                                  list({**self._headers, **headers}.items()), content, budget_s)
        try:
            if answer.status >= 400:
                try:
                    async with asyncio.timeout(budget_s):
                        raw = await answer.read()
                except (TimeoutError, TransportError):
                    raw = b""
                raise self._error(Answer(answer.status, answer.reason, answer.headers, raw, False))
            yield RawStream(self, answer.status, Headers(answer.headers, answer.fields),
                            answer.chunks(), idle_timeout_s=idle_timeout_s)
        finally:
            answer.close()

    def _request_target(self, path: str, params: Mapping[str, str] | None) -> str:
        target = self._base_path + path
        if params:
            target += ("&" if "?" in target else "?") + _query(tuple(params.items()))
        return target

    async def _open(self, method: str, target: str, headers: Sequence[tuple[str, str]],
                    content: bytes | AsyncIterable[bytes] | None, budget_s: float) -> StreamedAnswer:
        """The answer's head within `budget_s`; transport failures become `Unreachable`."""
        try:
            async with asyncio.timeout(budget_s):
                return await self._pool.open(method, target, headers, content)
        except TimeoutError:
            raise Unreachable(self.server, f"no answer within {budget_s:.1f}s") from None
        except TransportError as exc:
            raise self._unreachable(exc) from exc

    # raw pass-through (the hub's cluster proxy) ------------------------------------------

    def _raw_headers(self, headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """`headers` over the client's defaults (a name given replaces the default); framing
        is the client's own business."""
        given = {name.lower() for name, _ in headers}
        out = [(name, value) for name, value in self._headers.items() if name.lower() not in given]
        out += [(name, value) for name, value in headers if name.lower() not in _FRAMING_HEADERS]
        return out

    @contextlib.asynccontextmanager
    async def send_raw(self, method: str, target: str, *, headers: Sequence[tuple[str, str]] = (),
                       content: bytes | AsyncIterable[bytes] | None = None,
                       timeout_s: float | None = None,
                       idle_timeout_s: float | None = None) -> AsyncIterator[RawStream]:
        """Send one request as given (raw path and query, below the server URL's own path;
        `headers` over the client's defaults, so the client's own credentials apply unless
        replaced) and stream the answer whatever its status: a proxy forwards errors, it does
        not raise them. `content` may be an async iterable (sent chunked as it comes). No
        retries. `timeout_s` bounds getting the response headers, `idle_timeout_s` each read
        of the body."""
        budget_s = self.timeout_s if timeout_s is None else timeout_s
        answer = await self._open(method, self._base_path + (target or "/"),
                                  self._raw_headers(headers), content, budget_s)
        try:
            yield RawStream(self, answer.status, Headers(answer.headers, answer.fields),
                            answer.chunks(), idle_timeout_s=idle_timeout_s)
        finally:
            answer.close()

    @contextlib.asynccontextmanager
    async def upgrade(self, method: str, target: str, *, headers: Sequence[tuple[str, str]],
                      timeout_s: float | None = None,
                      body_limit: int = 1 << 20) -> AsyncIterator[Upgraded]:
        """Send an `Upgrade` request (exec, attach, port-forward) as given. After a `101` the
        connection is `Upgraded.stream` until the block ends; any other status comes with its
        body (at most `body_limit` bytes) and no stream."""
        budget_s = self.timeout_s if timeout_s is None else timeout_s
        answer = await self._open(method, self._base_path + (target or "/"),
                                  self._raw_headers(headers), None, budget_s)
        try:
            if answer.status == 101:
                stream = UpgradedStream(self, answer.take_connection())
                try:
                    yield Upgraded(101, list(answer.fields), b"", stream)
                finally:
                    await stream.aclose()
                return
            body = bytearray()
            with contextlib.suppress(TimeoutError, TransportError):
                async with asyncio.timeout(budget_s):
                    async for chunk in answer.chunks():
                        body += chunk
                        if len(body) >= body_limit:
                            break
            yield Upgraded(answer.status, list(answer.fields), bytes(body[:body_limit]), None)
        finally:
            answer.close()

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
