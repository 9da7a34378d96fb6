"""The HTTP face of a local cluster: authentication, routing, content negotiation.

Everything that changes objects is in `operations`; this module turns requests into calls on it
and results into the bytes kubectl and the Python clients expect.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from tether.local import bodies, deletion, discovery, encoding, offload, openapi, tables, watching
from tether.local.errors import (
    ApiError,
    Cause,
    bad_request,
    expired,
    invalid,
    method_not_allowed,
    path_not_found,
)
from tether.local.operations import (
    FIELD_VALIDATION,
    Operations,
    WriteOptions,
    decode_body,
    groups_of,
)
from tether.local.rbac import reviews
from tether.local.rbac.authorizer import UserInfo
from tether.local.rbac.enforcer import (
    ANONYMOUS_USER,
    CURRENT,
    Enforcer,
    RequestContext,
    certificate_user,
)
from tether.local.resources import Registry, ResourceType
from tether.net.httpserver import Reply, Request, Response, StreamResponse
from tether.objects import Obj, jsoncodec, selectors

log = logging.getLogger(__name__)

SERVER_VERSION = {
    "major": "1",
    "minor": "37",
    "emulationMajor": "1",
    "emulationMinor": "37",
    "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "36",
    "gitVersion": "v1.37.0-tether",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-11-01T00:00:00Z",
    "goVersion": "go1.25.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}
NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
OPENAPI_V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
# Extra handlers for subresources served by other parts (logs, exec, ...), keyed by name.
SubresourceHandler = Callable[[Request, ResourceType, str, str, str], Awaitable[Reply]]
# Handlers for whole API groups whose objects are computed, not stored (metrics.k8s.io):
# (request, type, namespace, name) -> reply.
GroupHandler = Callable[[Request, ResourceType, str, str], Awaitable[Reply]]


def _json(status: int, body: Any, content_type: str = "application/json", *, sort_keys: bool = False) -> Response:
    return Response(status, encoding.body(body, sort_keys=sort_keys), content_type=content_type)


def _raw_json(status: int, body: Any) -> Response:
    """What kube-apiserver writes with WriteRawJSON (`/version`, `/`): indented, no newline."""
    return Response(status, json.dumps(body, indent=2).encode())


def status_response(error: ApiError) -> Response:
    return Response(error.code, encoding.status_body(error.status()))


@dataclass(frozen=True)
class Target:
    rt: ResourceType
    namespace: str
    name: str
    subresource: str
    rest: str  # path below a proxy subresource


class ApiServer:
    def __init__(
        self,
        *,
        operations: Operations,
        registry: Registry,
        tokens: Callable[[str], str | None],
        server_address: Callable[[], str],
        enforcer: Enforcer,
    ) -> None:
        self.ops = operations
        self.registry = registry
        self._tokens = tokens
        self.enforcer = enforcer
        self._server_address = server_address
        self.subresource_handlers: dict[str, SubresourceHandler] = {}
        self.group_handlers: dict[str, GroupHandler] = {}
        self.ready: Callable[[], bool] = lambda: True

    # entry -------------------------------------------------------------------------------

    async def handle(self, request: Request) -> Reply:
        try:
            authenticated = self._authenticate(request)
            if authenticated is not None:
                request.authenticated()  # its connection is no longer limited as anonymous
            try:
                user = self.enforcer.impersonate(authenticated or ANONYMOUS_USER, request.headers)
                info = self.enforcer.admit_request(user, request.method, request.path, request.query)
            except ApiError as exc:
                # Anonymous callers learn nothing beyond "authenticate" (the public paths RBAC
                # grants them, /version and health, pass above).
                if authenticated is None and exc.code == 403:
                    return _unauthorized()
                raise
            context = CURRENT.set(RequestContext(user, info))
            try:
                reply = await self._route(request, user)
            finally:
                CURRENT.reset(context)
            if self.ops.store.uncommitted:
                await self.ops.store.flushed()  # answer only what the log holds (store.py)
            return reply
        except ApiError as exc:
            return status_response(exc)
        except Exception as exc:  # a bug must answer 500, never take the server down
            log.exception("internal error serving %s %s", request.method, request.path)
            return status_response(ApiError(500, "InternalError", f"Internal error occurred: {exc}"))

    def check_token(self, token: str) -> str | None:
        """The user a bearer token belongs to, or None (TokenReview asks this)."""
        return self._tokens(token)

    def _authenticate(self, request: Request) -> UserInfo | None:
        if request.peer_cert:
            # A certificate without a CN authenticates no one (as Kubernetes); a token may still.
            user = certificate_user(request.peer_cert)
            if user is not None:
                return user
        auth = request.header("authorization")
        name: str | None = None
        if auth[:7].lower() == "bearer ":
            name = self._tokens(auth[7:].strip())
        elif auth[:6].lower() == "basic ":
            try:
                raw = base64.b64decode(auth[6:].strip()).decode()
            except (binascii.Error, UnicodeDecodeError):
                return None
            _, _, password = raw.partition(":")
            name = self._tokens(password)  # the token's user, never the name the client claims
        return None if name is None else UserInfo(name, tuple(groups_of(name)))

    async def _route(self, request: Request, user: UserInfo) -> Reply:
        path = request.path.rstrip("/") or "/"
        if path in ("/healthz", "/livez", "/readyz") or path.startswith(("/healthz/", "/livez/", "/readyz/")):
            ok = self.ready() or path.startswith("/livez")
            return Response(200 if ok else 500, b"ok" if ok else b"not ready", content_type="text/plain; charset=utf-8")
        if path == "/version":
            return _raw_json(200, SERVER_VERSION)
        if path == "/":
            paths = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/openapi/v3", "/readyz", "/version"]
            return _raw_json(200, {"paths": paths})
        if path.startswith("/openapi"):
            return self._openapi(request, path)
        parts = path.strip("/").split("/")
        if parts[0] == "api":
            if len(parts) == 1:
                return self._discovery_root(request, core=True)
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis":
            if len(parts) == 1:
                return self._discovery_root(request, core=False)
            if len(parts) == 2:
                doc = discovery.api_group(self.registry, parts[1])
                if doc is None:
                    raise path_not_found()
                return _json(200, doc)
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise path_not_found()
        if not rest:
            doc = discovery.api_resource_list(self.registry, group, version)
            if doc is None:
                raise path_not_found()
            return _json(200, doc)
        target = self._resolve(group, version, rest)
        return await self._dispatch(request, target, user)

    # discovery and openapi ---------------------------------------------------------------

    def _discovery_root(self, request: Request, *, core: bool) -> Response:
        aggregated = discovery.wants_aggregated(request.header("accept"))
        if aggregated:
            doc = discovery.aggregated(self.registry, core=core)
            if "v2beta1" in aggregated:
                doc["apiVersion"] = "apidiscovery.k8s.io/v2beta1"
            return _json(200, doc, content_type=aggregated)
        if core:
            return _json(200, discovery.api_versions(self._server_address()))
        return _json(200, discovery.api_group_list(self.registry))

    def _openapi(self, request: Request, path: str) -> Response:
        if path == "/openapi/v2":
            # kubectl's client-side validation (used for `kind: List` input) needs a v2 document; an
            # empty one (protobuf `swagger: "2.0"`, no definitions) means "no schema: skip".
            return Response(200, b"\n\x032.0", content_type=OPENAPI_V2_PROTOBUF)
        if path == "/openapi/v3":  # kube-openapi writes its documents without a newline
            return Response(200, encoding.dumps(openapi.root_document(self.registry)).encode())
        prefix = "/openapi/v3/"
        if path.startswith(prefix):
            parts = path[len(prefix):].split("/")
            if parts[0] == "api" and len(parts) == 2:
                doc = openapi.group_version_document(self.registry, "", parts[1])
            elif parts[0] == "apis" and len(parts) == 3:
                doc = openapi.group_version_document(self.registry, parts[1], parts[2])
            else:
                doc = None
            if doc is not None:
                headers = []
                if request.param("hash") == openapi.content_hash(doc):
                    headers.append(("Cache-Control", "public, immutable"))
                return Response(200, json.dumps(doc).encode(), headers=headers)
        raise path_not_found()

    # routing -----------------------------------------------------------------------------

    def _resolve(self, group: str, version: str, rest: list[str]) -> Target:
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in NAMESPACE_SUBRESOURCES):
            namespace, rest = rest[1], rest[2:]
        rt = self.registry.lookup(group, version, rest[0])
        if rt is None or (namespace and not rt.namespaced):
            raise path_not_found()
        name = rest[1] if len(rest) > 1 else ""
        subresource = rest[2] if len(rest) > 2 else ""
        if subresource and subresource not in rt.all_subresources():
            raise path_not_found()
        if subresource != "proxy" and len(rest) > 3:
            raise path_not_found()
        return Target(rt, namespace, name, subresource, "/".join(rest[3:]))

    async def _dispatch(self, request: Request, target: Target, user: UserInfo) -> Reply:
        rt, method = target.rt, request.method
        sub = target.subresource
        group_handler = self.group_handlers.get(rt.group)
        if group_handler is not None and not sub:
            self._require_verb(rt, "get" if target.name else "list")
            return await group_handler(request, rt, target.namespace, target.name)
        if sub and sub not in ("status", "scale", "finalize"):
            handler = self.subresource_handlers.get(sub)
            if handler is None:
                raise method_not_allowed(f"the {sub} subresource is not served by this cluster yet")
            return await handler(request, rt, target.namespace, target.name, target.rest)
        opts = self._write_options(request, user)
        if method == "GET":
            if not target.name:
                if _flag(request, "watch"):
                    return self._watch(request, rt, target.namespace)
                return self._list(request, rt, target.namespace)
            obj = self.ops.get(rt, target.namespace, target.name)
            if sub == "scale":
                return _json(200, self._scale_of(rt, obj))
            return self._object_response(request, rt, 200, obj)
        if method == "POST" and not target.name:
            self._require_verb(rt, "create")
            decoded = await offload.decode(request.header("content-type"), request.body)
            if (rt.group, rt.kind) in reviews.KINDS:
                return _json(201, self._review(rt, decoded.value, user, target.namespace))
            opts = replace(opts, duplicates=decoded.duplicates)
            obj = self.ops.create(rt, target.namespace, decoded.value, opts)
            return _warned(self._object_response(request, rt, 201, obj), opts)
        if method == "PUT" and target.name:
            self._require_verb(rt, "update")
            decoded = await offload.decode(request.header("content-type"), request.body)
            opts = replace(opts, duplicates=decoded.duplicates)
            if sub == "scale":
                return _json(200, self._write_scale(rt, target, decoded.value, opts))
            obj = self.ops.update(rt, target.namespace, target.name, decoded.value, opts, subresource=sub)
            return _warned(self._object_response(request, rt, 200, obj), opts)
        if method == "PATCH" and target.name:
            self._require_verb(rt, "patch")
            if sub == "scale":
                return _json(200, self._patch_scale(rt, target, request, opts))
            applied = None
            if request.header("content-type").split(";", 1)[0].strip().lower() == "application/apply-patch+yaml":
                applied = await offload.decode_json_or_yaml(request.body)
            obj, created = self.ops.patch(rt, target.namespace, target.name, request.header("content-type"),
                                          request.body, opts, subresource=sub, applied=applied)
            return _warned(self._object_response(request, rt, 201 if created else 200, obj), opts)
        if method == "DELETE":
            options = self._delete_options(request)
            if not target.name:
                self._require_verb(rt, "deletecollection")
                return self._delete_collection(request, rt, target.namespace, options, opts)
            self._require_verb(rt, "delete")
            obj, gone = self.ops.delete(rt, target.namespace, target.name, options, opts)
            return self._delete_response(request, rt, obj, gone, options)
        raise method_not_allowed()

    def _require_verb(self, rt: ResourceType, verb: str) -> None:
        if verb not in rt.verbs:
            raise method_not_allowed(f"{rt.qualified} does not support {verb}")

    def _review(self, rt: ResourceType, body: Any, user: UserInfo, namespace: str) -> Obj:
        if not isinstance(body, dict):
            raise bad_request("the object provided is not a JSON or YAML object")
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if (kind and kind != rt.kind) or (api_version and api_version != rt.group_version):
            raise bad_request(f"expected {rt.kind} of {rt.group_version}, got {kind} of {api_version}")
        body.update(kind=rt.kind, apiVersion=rt.group_version)
        return reviews.review(self.enforcer.policy, rt.group, rt.kind, body, user=user, namespace=namespace)

    def _write_options(self, request: Request, user: UserInfo) -> WriteOptions:
        dry_run = request.params("dryRun")
        if dry_run and any(v != "All" for v in dry_run):
            raise bad_request(f"Invalid dryRun value: {dry_run}; only All is supported")
        manager = request.param("fieldManager")
        if not manager and request.method in ("POST", "PUT", "PATCH"):
            manager = request.header("user-agent").split("/", 1)[0][:128]
        validation = ""
        if request.method in ("POST", "PUT", "PATCH"):
            validation = request.param("fieldValidation") or "Warn"  # kube-apiserver's default
            if validation not in FIELD_VALIDATION:
                kind = {"POST": "CreateOptions", "PUT": "UpdateOptions"}.get(request.method, "PatchOptions")
                supported = ", ".join(f'"{v}"' for v in ("", *sorted(FIELD_VALIDATION)))
                cause = Cause("FieldValueNotSupported",
                              f"Unsupported value: {json.dumps(validation)}: supported values: {supported}",
                              "fieldValidation")
                raise invalid(kind, "", [cause], "meta.k8s.io")
        return WriteOptions(
            manager=manager,
            dry_run=bool(dry_run),
            field_validation=validation,
            force=_flag(request, "force"),
            user=user.name,
        )

    def _delete_options(self, request: Request) -> Obj:
        options: Obj = {}
        if request.body:
            body = decode_body(request.header("content-type"), request.body)
            if isinstance(body, dict):
                options = body
        for name in ("propagationPolicy", "gracePeriodSeconds"):
            if request.param(name):
                options[name] = request.param(name)
        if request.param("orphanDependents"):
            options["orphanDependents"] = _flag(request, "orphanDependents")
        if options.get("gracePeriodSeconds") is not None:
            try:
                options["gracePeriodSeconds"] = int(options["gracePeriodSeconds"])
            except (TypeError, ValueError):
                raise bad_request("gracePeriodSeconds must be an integer") from None
        policy = options.get("propagationPolicy")
        if policy not in (None, "Background", "Foreground", "Orphan"):
            raise bad_request(f'Unsupported value: "{policy}": supported values: "Foreground", "Background", "Orphan"')
        return options

    # objects out -------------------------------------------------------------------------

    def _wants_table(self, request: Request) -> bool:
        return "as=Table" in request.header("accept")

    def _object_response(self, request: Request, rt: ResourceType, code: int, obj: Obj) -> Response:
        if self._wants_table(request) and code == 200 and request.method == "GET":
            return _json(code, self._table(request, rt, [obj], resource_version=obj["metadata"].get("resourceVersion", "")))
        text = self.ops.store.encoded(obj)  # a write's answer: the JSON the store just wrote
        if text is not None:
            return Response(code, (text + "\n").encode())
        return _json(code, obj, sort_keys=rt.crd)

    def _delete_response(self, request: Request, rt: ResourceType, obj: Obj, gone: bool, options: Obj) -> Response:
        """What kube-apiserver's registry answers a DELETE with (see `deletion.response_kind`)."""
        # 202 when the object stays for now and the client asked for cascading deletion the old
        # way (orphanDependents=false), as the real handler does.
        code = 202 if not gone and options.get("orphanDependents") is False else 200
        if deletion.returns_object(rt, gone):
            return self._object_response(request, rt, code, obj)
        return _json(code, deletion.success_status(rt, obj))

    def _table(self, request: Request, rt: ResourceType, items: list[Obj], *, resource_version: str,
               continue_token: str = "", remaining: int | None = None, with_headers: bool = True) -> Obj:
        table: Obj = tables.make_table(
            group=rt.group,
            kind=rt.kind,
            objects=items,
            printer_columns=rt.printer_columns,
            include_object=request.param("includeObject", "Metadata"),
            resource_version=resource_version,
            continue_token=continue_token,
            remaining=remaining,
            with_headers=with_headers,
        )
        return table

    # list --------------------------------------------------------------------------------

    def _matcher(self, request: Request, rt: ResourceType) -> Callable[[Obj], bool]:
        try:
            labels = selectors.parse_label_selector(request.param("labelSelector"))
            allowed = selectors.selectable_fields(rt.group, rt.kind, rt.namespaced, rt.selectable_fields)
            fields = selectors.parse_field_selector(request.param("fieldSelector"), allowed)
        except selectors.SelectorError as exc:
            raise bad_request(str(exc)) from None

        def matches(obj: Obj) -> bool:
            return labels.matches(obj.get("metadata", {}).get("labels") or {}) and fields.matches(obj)

        return matches

    def _list(self, request: Request, rt: ResourceType, namespace: str) -> Response:
        self._require_verb(rt, "list")
        matches = self._matcher(request, rt)
        revision = str(self.ops.store.revision)
        items = [o for o in self.ops.list_objects(rt, namespace or None) if matches(o)]
        limit_text = request.param("limit")
        token = request.param("continue")
        if token:
            start, token_rv = self._decode_continue(token)
            revision = token_rv
            items = [o for o in items if _sort_key(o) > start]
        continue_token, remaining = "", None
        if limit_text:
            try:
                limit = int(limit_text)
            except ValueError:
                raise bad_request(f"invalid limit {limit_text!r}") from None
            if 0 < limit < len(items):
                remaining = len(items) - limit
                items = items[:limit]
                continue_token = self._encode_continue(_sort_key(items[-1]), revision)
        if self._wants_table(request):
            return _json(200, self._table(request, rt, items, resource_version=revision,
                                          continue_token=continue_token, remaining=remaining))
        metadata: Obj = {"resourceVersion": revision}
        if continue_token:
            metadata["continue"] = continue_token
            metadata["remainingItemCount"] = remaining
        # Lists are the largest answers; join pre-encoded items rather than re-walk one big tree.
        if rt.crd:  # an unstructured list: a map, keys sorted (apiVersion, items, kind, metadata)
            joined = b",".join(jsoncodec.encode(o, sort_keys=True) for o in items)
            return Response(200, b'{"apiVersion":%s,"items":[%s],"kind":%s,"metadata":%s}\n' % (
                jsoncodec.encode(rt.group_version), joined, jsoncodec.encode(rt.list_kind),
                jsoncodec.encode(metadata, sort_keys=True)))
        head = jsoncodec.encode({"kind": rt.list_kind, "apiVersion": rt.group_version, "metadata": metadata})
        return Response(200, b"%s,\"items\":[%s]}\n" % (head[:-1], b",".join(jsoncodec.encode(o) for o in items)))

    def _encode_continue(self, key: tuple[str, str], revision: str) -> str:
        raw = json.dumps({"rv": revision, "ns": key[0], "name": key[1]}).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def _decode_continue(self, token: str) -> tuple[tuple[str, str], str]:
        try:
            raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            key = (str(raw["ns"]), str(raw["name"]))
            revision = str(raw["rv"])
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise bad_request("invalid continue token") from None
        if not revision.isdigit():
            raise bad_request("invalid continue token")
        if int(revision) < self.ops.store.compacted:
            raise expired("The provided continue parameter is too old to display a consistent list result. "
                          "You can start a new list without the continue parameter.")
        return key, revision

    def _delete_collection(self, request: Request, rt: ResourceType, namespace: str, options: Obj,
                           opts: WriteOptions) -> Response:
        matches = self._matcher(request, rt)
        deleted = []
        for obj in list(self.ops.list_objects(rt, namespace or None)):
            if not matches(obj):
                continue
            meta = obj["metadata"]
            try:
                final, _ = self.ops.delete(rt, meta.get("namespace", ""), meta["name"], options, opts)
            except ApiError as exc:
                if exc.code == 404:
                    continue
                raise
            deleted.append(final)
        return _json(200, {"kind": rt.list_kind, "apiVersion": rt.group_version,
                           "metadata": {"resourceVersion": str(self.ops.store.revision)}, "items": deleted},
                     sort_keys=rt.crd)

    # watch -------------------------------------------------------------------------------

    def _watch(self, request: Request, rt: ResourceType, namespace: str) -> StreamResponse:
        self._require_verb(rt, "watch")
        matches = self._matcher(request, rt)
        send_initial = _flag(request, "sendInitialEvents")
        bookmarks = _flag(request, "allowWatchBookmarks")
        if send_initial and (not bookmarks or request.param("resourceVersionMatch") != "NotOlderThan"):
            raise ApiError(422, "Invalid", "sendInitialEvents requires allowWatchBookmarks=true and "
                           "resourceVersionMatch=NotOlderThan")
        since = request.param("resourceVersion")
        if since not in ("", "0"):
            try:
                int(since)
            except ValueError:
                raise bad_request(f"invalid resourceVersion {since!r}") from None
        timeout_text = request.param("timeoutSeconds")
        try:
            timeout_s = float(timeout_text) if timeout_text else None
        except ValueError:
            raise bad_request(f"invalid timeoutSeconds {timeout_text!r}") from None
        as_table = self._wants_table(request)
        include = request.param("includeObject", "Metadata")

        def render(obj: Obj, first: bool) -> Obj:
            obj = self.ops._as_version(rt, obj)
            if not as_table:
                return obj
            table: Obj = tables.make_table(group=rt.group, kind=rt.kind, objects=[obj],
                                           printer_columns=rt.printer_columns, include_object=include,
                                           with_headers=first)
            return table

        def bookmark(rv: str) -> Obj:
            return {"kind": rt.kind, "apiVersion": rt.group_version, "metadata": {"resourceVersion": rv}}

        def initial() -> list[Obj]:
            return list(self.ops.list_objects(rt, namespace or None))

        watch = watching.WatchRequest(
            storage_key=rt.storage_key,
            namespace=namespace or None,
            since=since,
            matches=matches,
            timeout_s=timeout_s,
            bookmarks=bookmarks,
            send_initial_events=send_initial,
            initial=initial,
            bookmark_object=bookmark,
            render=render,
            sort_keys=rt.crd and not as_table,
        )
        return StreamResponse(200, watching.stream(self.ops.store, watch))

    # scale -------------------------------------------------------------------------------

    def _scale_of(self, rt: ResourceType, obj: Obj) -> Obj:
        assert rt.scale is not None
        meta = obj["metadata"]
        spec = _path_get(obj, rt.scale.spec_replicas)
        status: Obj = {"replicas": _path_get(obj, rt.scale.status_replicas) or 0}
        selector = _path_get(obj, rt.scale.label_selector) if rt.scale.label_selector else None
        if rt.group == "apps" or (rt.group == "" and rt.kind == "ReplicationController"):
            match = (obj.get("spec") or {}).get("selector") or {}
            labels = match.get("matchLabels", match) if isinstance(match, dict) else {}
            selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if isinstance(v, str))
        if selector:
            status["selector"] = selector
        scale_meta = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                      if k in meta}
        return {"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": scale_meta,
                "spec": {"replicas": spec or 0}, "status": status}

    def _set_replicas(self, rt: ResourceType, target: Target, replicas: Any, expect: str | None,
                      opts: WriteOptions) -> Obj:
        assert rt.scale is not None
        if not isinstance(replicas, int) or replicas < 0:
            raise ApiError(422, "Invalid", f"Scale.autoscaling \"{target.name}\" is invalid: spec.replicas: "
                           f"Invalid value: {replicas}: must be greater than or equal to 0")
        obj = jsoncodec.decode(jsoncodec.encode(self.ops.get(rt, target.namespace, target.name)))
        if expect and expect != obj["metadata"]["resourceVersion"]:
            from tether.local.errors import conflict

            raise conflict(rt.plural, target.name, rt.group)
        _path_set(obj, rt.scale.spec_replicas, replicas)
        updated = self.ops.update(rt, target.namespace, target.name, obj, opts)
        return self._scale_of(rt, updated)

    def _write_scale(self, rt: ResourceType, target: Target, body: Any, opts: WriteOptions) -> Obj:
        if not isinstance(body, dict):
            raise bad_request("expected a Scale object")
        expect = (body.get("metadata") or {}).get("resourceVersion")
        return self._set_replicas(rt, target, (body.get("spec") or {}).get("replicas"), expect, opts)

    def _patch_scale(self, rt: ResourceType, target: Target, request: Request, opts: WriteOptions) -> Obj:
        from tether.local import patching

        current = self._scale_of(rt, self.ops.get(rt, target.namespace, target.name))
        ctype = request.header("content-type").split(";")[0].strip()
        document = bodies.decode_json(request.body, what="the patch").value
        try:
            if ctype == "application/json-patch+json":
                patched = patching.apply_json_patch(current, document)
            else:
                patched = patching.apply_merge_patch(current, document)
        except (ValueError, patching.PatchError) as exc:
            raise bad_request(f"error applying patch to Scale: {exc}") from None
        return self._write_scale(rt, target, patched, opts)


def _unauthorized() -> Response:
    return _json(401, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": "Unauthorized", "reason": "Unauthorized", "code": 401})


def _warned(response: Response, opts: WriteOptions) -> Response:
    """The request's warnings (fieldValidation=Warn) as RFC 7234 Warning headers, as kubectl
    prints them ("Warning: unknown field ...")."""
    for text in opts.warnings:
        response.headers.append(("Warning", "299 - " + json.dumps(text)))
    return response


def _flag(request: Request, name: str) -> bool:
    """A boolean query parameter, spelled any way Go's strconv.ParseBool accepts."""
    return request.param(name) in ("1", "t", "T", "true", "True", "TRUE")


def _sort_key(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata", {})
    return (meta.get("namespace", ""), meta.get("name", ""))


def _path_get(obj: Obj, path: str) -> Any:
    node: Any = obj
    for part in path.strip(".").split("."):
        if not part:
            continue
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _path_set(obj: Obj, path: str, value: Any) -> None:
    parts = [p for p in path.strip(".").split(".") if p]
    node = obj
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def token_checker(tokens: dict[str, str]) -> Callable[[str], str | None]:
    """Constant-time lookup of static tokens -> user names."""

    def check(token: str) -> str | None:
        for known, user in tokens.items():
            if hmac.compare_digest(known, token):
                return user
        return None

    return check
