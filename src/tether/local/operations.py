"""The API's verbs on stored objects: create, update, patch, delete, get, list.

HTTP handlers and the built-in controllers both come through here, so validation, defaulting,
the status subresource rules, finalizers and managedFields hold for every writer.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tether.local import (
    bodies,
    builtin_fields,
    crds,
    encoding,
    objects,
    patching,
    schema,
    validation,
)
from tether.local.errors import (
    ApiError,
    Cause,
    already_exists,
    bad_request,
    conflict,
    invalid,
    method_not_allowed,
    not_found,
    too_large,
    unsupported_media_type,
)
from tether.local.resources import Registry, ResourceType
from tether.local.store import KeyExists, KeyMissing, ObjectTooLarge, RevisionMismatch, Store
from tether.objects import Obj, jsoncodec, times

log = logging.getLogger(__name__)

PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
# Types whose status is reset on create (the real registries' PrepareForCreate).
KEEP_STATUS_ON_CREATE = frozenset({("", "Node"), ("", "Namespace"), ("apiextensions.k8s.io", "CustomResourceDefinition")})
NAMESPACE_FINALIZER = "kubernetes"
ORPHAN_FINALIZER = "orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"
CRD_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
# Never stored. The API server answers all but TokenReview itself (local/rbac/reviews.py): they
# need the caller's identity and the authorizer.
REVIEW_KINDS = frozenset({"SelfSubjectAccessReview", "SubjectAccessReview", "LocalSubjectAccessReview",
                          "SelfSubjectRulesReview", "SelfSubjectReview", "TokenReview"})


FIELD_VALIDATION = ("Ignore", "Warn", "Strict")


@dataclass(frozen=True)
class WriteOptions:
    manager: str = ""
    dry_run: bool = False
    # fieldValidation: Strict refuses unknown and duplicate fields, Warn drops them with a
    # warning, Ignore drops them silently; "" is a trusted in-process writer (a controller),
    # whose objects are not checked against the built-in field table.
    field_validation: str = ""
    force: bool = False  # server-side apply
    user: str = "tether-admin"
    duplicates: tuple[str, ...] = ()  # keys the request body gave twice
    fields_checked: bool = False  # server-side apply checked (and pruned) what it merged
    warnings: list[str] = field(default_factory=list)  # for the answer's Warning headers

    @property
    def strict(self) -> bool:
        return self.field_validation == "Strict"


def api_version_of(rt: ResourceType) -> str:
    return rt.group_version


class Operations:
    def __init__(self, store: Store, registry: Registry) -> None:
        self.store = store
        self.registry = registry
        store.sort_keys = registry.is_custom  # custom resources are encoded as maps: keys sorted
        # Called after each committed write of a CRD, so the registry follows it.
        self.on_crd_change: Callable[[Obj | None, str], None] = self._sync_crd
        # Admission plugins: (type, new object, current object or None on create). They may
        # fill fields (a Service's clusterIP) or raise ApiError; they run before validation.
        self.admission: list[Callable[[ResourceType, Obj, Obj | None], None]] = []
        # token -> user name (or None); set by the cluster so TokenReview checks real tokens.
        self.token_review: Callable[[str], str | None] = lambda token: None

    # reads -------------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.store.get(rt.storage_key, namespace if rt.namespaced else "", name)
        if obj is None:
            raise not_found(rt.plural, name, rt.group)
        return self._as_version(rt, obj)

    def find(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        obj = self.store.get(rt.storage_key, namespace if rt.namespaced else "", name)
        return None if obj is None else self._as_version(rt, obj)

    def list_objects(self, rt: ResourceType, namespace: str | None) -> list[Obj]:
        items = self.store.list_objects(rt.storage_key, namespace if rt.namespaced else None)
        if rt.crd:  # another version, or another group sharing the store, may have written them
            return [self._as_version(rt, o) for o in items]
        return items

    def _as_version(self, rt: ResourceType, obj: Obj) -> Obj:
        # Conversion strategy None: another version of a CR (or its view through a group that
        # shares its store) differs only in apiVersion.
        if obj.get("apiVersion") != rt.group_version and rt.crd:
            obj = dict(obj)
            obj["apiVersion"] = rt.group_version
        return obj

    # helpers -----------------------------------------------------------------------------

    def _check_type(self, rt: ResourceType, obj: Any) -> Obj:
        if not isinstance(obj, dict):
            raise bad_request("the object provided is not a JSON or YAML object")
        api_version = obj.get("apiVersion")
        kind = obj.get("kind")
        if kind and kind != rt.kind:
            raise bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        if api_version and api_version != rt.group_version:
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rt.group_version})"
            )
        obj["apiVersion"] = rt.group_version
        obj["kind"] = rt.kind
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        return obj

    def _place(self, rt: ResourceType, obj: Obj, namespace: str) -> None:
        meta = obj["metadata"]
        if not rt.namespaced:
            meta.pop("namespace", None)
            return
        body_ns = meta.get("namespace") or ""
        if body_ns and namespace and body_ns != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        meta["namespace"] = body_ns or namespace or "default"

    def _check_fields(self, rt: ResourceType, obj: Obj, opts: WriteOptions, current: Obj | None = None,
                      *, remove: bool = True) -> None:
        """Decoding, as kube-apiserver decodes into the Go type: a field of the wrong JSON type is
        a 400. Then fieldValidation: find the fields the type does not have (and the body's
        duplicated keys); refuse them (Strict), or drop them with a warning (Warn) or silently
        (Ignore). A custom resource is pruned by its schema here, before admission and defaulting."""
        if opts.fields_checked:
            return
        problem = builtin_fields.shape_problem(rt.group, rt.kind, rt.version, obj, has_status=rt.status,
                                               custom=rt.crd, drop_nulls=remove)
        if problem is not None:
            raise bad_request(problem)
        unknown: list[str] = []
        if opts.field_validation:
            unknown = builtin_fields.unknown_fields(rt.group, rt.kind, obj, has_status=rt.status, remove=remove)
        if rt.crd and rt.schema is not None and remove:
            pruned, schema_unknown = schema.prune(obj, rt.schema)
            obj.clear()
            obj.update(pruned)
            unknown += schema_unknown
        elif rt.crd and rt.schema is not None and "status" in obj:
            # A status write keeps only the status (the rest is the stored object): prune that.
            pruned, schema_unknown = schema.prune({"status": obj["status"]}, rt.schema, copy=False)
            if "status" in pruned:
                obj["status"] = pruned["status"]
            else:
                del obj["status"]
            unknown += schema_unknown
        if unknown and current is not None:
            # Fields an older tether stored are dropped, but not blamed on this request.
            stored = set(builtin_fields.unknown_fields(rt.group, rt.kind, current, has_status=rt.status,
                                                       remove=False))
            if rt.crd and rt.schema is not None:  # stored before the CRD's schema declared less
                stored.update(schema.prune(current, rt.schema)[1])
            unknown = [p for p in unknown if p not in stored]
        problems = [f'unknown field "{p}"' for p in unknown] + [f'duplicate field "{p}"' for p in opts.duplicates]
        if not problems or opts.field_validation in ("", "Ignore"):
            return
        if opts.field_validation == "Strict":
            raise bad_request("strict decoding error: " + ", ".join(problems))
        opts.warnings.extend(problems)

    def _validate(self, rt: ResourceType, obj: Obj, *, old: Obj | None = None) -> None:
        name = obj["metadata"].get("name", "")
        causes = validation.causes(rt.group, rt.kind, obj, old)
        if rt.crd and rt.schema is not None:
            causes += self._schema_causes(rt, obj)
        if rt.group == "apiextensions.k8s.io":
            causes += crds.validation_causes(obj, builtin=self.registry.is_builtin)
        if causes:
            raise invalid(rt.kind, name, causes, rt.group)

    def _schema_causes(self, rt: ResourceType, obj: Obj) -> list[Cause]:
        assert rt.schema is not None
        schema.apply_defaults(obj, rt.schema, copy=False)  # in place: pruned, so our own copy
        return [Cause(v.reason, v.message, v.field) for v in schema.validate(obj, rt.schema)]

    def _admit(self, rt: ResourceType, obj: Obj, current: Obj | None) -> None:
        for plugin in self.admission:
            plugin(rt, obj, current)

    def _require_namespace(self, rt: ResourceType, namespace: str) -> None:
        if not rt.namespaced:
            return
        ns = self.store.get("/namespaces", "", namespace)
        if ns is None:
            raise not_found("namespaces", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                "Forbidden",
                f"{rt.plural} is forbidden: unable to create new content in namespace {namespace} "
                "because it is being terminated",
                kind=rt.plural,
                group=rt.group,
                causes=[Cause("NamespaceTerminating", f"namespace {namespace} is being terminated",
                              "metadata.namespace")],
            )

    def _manage(self, rt: ResourceType, old: Obj | None, new: Obj, opts: WriteOptions, subresource: str = "") -> Obj:
        if not opts.manager:
            return new
        return patching.record_update(
            old, new, manager=opts.manager, api_version=rt.group_version, now=times.now_rfc3339(),
            schema=self._merge_schema(rt), subresource=subresource,
        )

    @staticmethod
    def _merge_schema(rt: ResourceType) -> patching.MergeSchema | None:
        """How server-side apply and managedFields see the kind's lists: a built-in kind's table,
        a custom resource's CRD schema (`x-kubernetes-list-type`), or None (all lists atomic)."""
        if not rt.crd:
            return patching.merge_schema_for(rt.group, rt.kind)
        return patching.merge_schema_from_openapi(rt.schema) if rt.schema is not None else None

    # create ------------------------------------------------------------------------------

    def create(self, rt: ResourceType, namespace: str, body: Any, opts: WriteOptions, *,
               managed_fields: list[Any] | None = None) -> Obj:
        obj = self._check_type(rt, body)
        if rt.kind in REVIEW_KINDS:
            return self._review(rt, obj, opts)
        self._place(rt, obj, namespace)
        meta = obj["metadata"]
        version_set = set_on_create(meta.pop("resourceVersion", None))
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise invalid(rt.kind, "", [Cause("FieldValueRequired", "Required value: name or generateName is required", "metadata.name")], rt.group)
            meta["name"] = self._unique_name(rt, meta.get("namespace", ""), str(prefix))
        for key in ("uid", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "managedFields"):
            meta.pop(key, None)
        self._check_fields(rt, obj, opts)
        if rt.status and (rt.group, rt.kind) not in KEEP_STATUS_ON_CREATE:
            obj.pop("status", None)
        objects.apply_defaults(rt.group, rt.kind, obj)
        meta["uid"] = objects.new_uid()  # early, as upstream: a Job's generated selector names it
        if rt.group == "batch" and rt.kind == "Job":
            objects.default_job_selector(obj)
        self._admit(rt, obj, None)
        self._validate(rt, obj)
        meta = obj["metadata"]  # CR schema pruning rebuilds the object
        self._require_namespace(rt, meta.get("namespace", ""))
        meta["uid"] = meta.get("uid") or objects.new_uid()
        meta["creationTimestamp"] = times.now_rfc3339()
        if rt.has_generation or rt.crd:
            meta["generation"] = 1
        if rt.group == "apiextensions.k8s.io":
            crds.accept(obj)
            if CRD_FINALIZER not in meta.setdefault("finalizers", []):
                meta["finalizers"].append(CRD_FINALIZER)
        obj = self._manage(rt, None, obj, opts)
        if managed_fields is not None:
            obj["metadata"]["managedFields"] = managed_fields
        if opts.dry_run:
            if self.store.get(rt.storage_key, meta.get("namespace", ""), meta["name"]) is not None:
                raise already_exists(rt.plural, meta["name"], rt.group)
            self._check_size(obj)
            return self._ordered(rt, obj)
        if version_set:  # the storage layer's refusal: a plain error, upstream a 500 without a reason
            raise ApiError(500, "", RESOURCE_VERSION_ON_CREATE)
        return self.commit_create(rt, obj)

    def _ordered(self, rt: ResourceType, obj: Obj) -> Obj:
        if not rt.crd:
            encoding.order_builtin(rt.kind, obj)
        return obj

    def commit_create(self, rt: ResourceType, obj: Obj) -> Obj:
        obj["metadata"].setdefault("resourceVersion", "")  # its place in the order; the store fills it
        self._ordered(rt, obj)
        meta = obj["metadata"]
        try:
            stored = self.store.create(rt.storage_key, meta.get("namespace", ""), meta["name"], obj)
        except KeyExists:
            raise already_exists(rt.plural, meta["name"], rt.group) from None
        except ObjectTooLarge as exc:
            raise object_too_large(exc.size, exc.limit) from None
        if rt.group == "apiextensions.k8s.io":
            self.on_crd_change(stored, meta["name"])
        return stored

    def _check_size(self, obj: Obj) -> None:
        """What the store would refuse, for a dry run that never reaches it."""
        size = len(jsoncodec.encode(obj))
        if size > self.store.max_object_bytes:
            raise object_too_large(size, self.store.max_object_bytes)

    def _unique_name(self, rt: ResourceType, namespace: str, prefix: str) -> str:
        for _ in range(20):
            candidate = objects.generated_name(prefix)
            if self.store.get(rt.storage_key, namespace, candidate) is None:
                return candidate
        raise ApiError(500, "InternalError", "could not generate a unique name")

    def _review(self, rt: ResourceType, obj: Obj, opts: WriteOptions) -> Obj:
        if rt.kind != "TokenReview":
            raise method_not_allowed(f"{rt.kind} is answered by the API server only")
        else:  # TokenReview: about the token in the request, not about the caller
            token = str((obj.get("spec") or {}).get("token") or "")
            user = self.token_review(token) if token else None
            obj["status"] = (
                {"authenticated": True, "user": {"username": user, "groups": groups_of(user)}}
                if user else {"authenticated": False, "error": "token not recognised"}
            )
        obj["metadata"].setdefault("creationTimestamp", None)
        return self._ordered(rt, obj)

    # update ------------------------------------------------------------------------------

    def update(self, rt: ResourceType, namespace: str, name: str, body: Any, opts: WriteOptions,
               *, subresource: str = "") -> Obj:
        obj = self._check_type(rt, body)
        self._place(rt, obj, namespace)
        body_name = obj["metadata"].get("name")
        if body_name and body_name != name:
            raise bad_request(f"the name of the object ({body_name}) does not match the name on the URL ({name})")
        obj["metadata"]["name"] = name
        current = self.get(rt, namespace, name)
        expect = obj["metadata"].get("resourceVersion") or None
        if expect is not None and expect != current["metadata"]["resourceVersion"]:
            raise conflict(rt.plural, name, rt.group)
        return self._write_update(rt, current, obj, opts, subresource=subresource, expect=expect)

    def _write_update(self, rt: ResourceType, current: Obj, new: Obj, opts: WriteOptions, *,
                      subresource: str = "", expect: str | None = None,
                      managed_fields: list[Any] | None = None) -> Obj:
        # A status write keeps only the new status, and may share the rest with the stored
        # object: unknown fields outside a custom resource's status are reported, never removed.
        self._check_fields(rt, new, opts, current, remove=subresource != "status")
        new = self._merge_owned_parts(rt, current, new, subresource)
        meta, cur_meta = new["metadata"], current["metadata"]
        name = cur_meta["name"]
        for key in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
            if key in cur_meta:
                meta[key] = cur_meta[key]
            else:
                meta.pop(key, None)
        if cur_meta.get("generateName"):
            meta.setdefault("generateName", cur_meta["generateName"])
        if cur_meta.get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(cur_meta.get("finalizers") or [])
            if added:
                raise invalid(rt.kind, name, [Cause("FieldValueForbidden", "Forbidden: no new finalizers can be added if the object is being deleted", "metadata.finalizers")], rt.group)
        if subresource != "status":
            objects.apply_defaults(rt.group, rt.kind, new)
            self._admit(rt, new, current)
            self._validate(rt, new, old=current)
            meta = new["metadata"]  # CR schema pruning rebuilds the object
        elif not rt.crd:
            objects.default_status(rt.group, rt.kind, new)
        if "generation" in cur_meta:
            generation = int(cur_meta["generation"])
            meta["generation"] = generation + 1 if objects.spec_changed(current, new) else generation
        if rt.group == "apiextensions.k8s.io" and subresource != "status":
            crds.accept(new)
        new = self._manage(rt, current, new, opts, subresource)
        meta = new["metadata"]
        if managed_fields is not None:  # a status apply's, which a status write would not keep
            meta["managedFields"] = managed_fields
        meta["resourceVersion"] = cur_meta["resourceVersion"]
        if new == current:
            return current  # a no-op write changes nothing and notifies no one
        if opts.dry_run:
            self._check_size(new)
            return self._ordered(rt, new)
        return self.commit_update(rt, new, expect=expect)

    def commit_update(self, rt: ResourceType, new: Obj, *, expect: str | None = None) -> Obj:
        self._ordered(rt, new)
        meta = new["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        try:
            stored = self.store.update(rt.storage_key, namespace, name, new, expect_rv=expect)
        except KeyMissing:
            raise not_found(rt.plural, name, rt.group) from None
        except RevisionMismatch:
            raise conflict(rt.plural, name, rt.group) from None
        except ObjectTooLarge as exc:
            raise object_too_large(exc.size, exc.limit) from None
        if rt.group == "apiextensions.k8s.io":
            self.on_crd_change(stored, name)
        # Gone once nothing holds it: no finalizers, and no grace period left for a kubelet to
        # stop the pod's containers in (it deletes again with gracePeriodSeconds=0 when done).
        grace = int(stored["metadata"].get("deletionGracePeriodSeconds") or 0)
        if stored["metadata"].get("deletionTimestamp") and not self._finalizers(rt, stored) and grace == 0:
            return self._remove(rt, stored)
        return stored

    def _merge_owned_parts(self, rt: ResourceType, current: Obj, new: Obj, subresource: str) -> Obj:
        if subresource == "status":
            # Stored objects are never mutated, so the parts a status write keeps are shared with
            # `current`; only the top level and metadata (written below) are copied.
            merged = dict(current)
            merged["metadata"] = dict(current["metadata"])
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            merged["metadata"]["resourceVersion"] = new["metadata"].get("resourceVersion") or current["metadata"]["resourceVersion"]
            return merged
        if rt.status:
            if "status" in current:
                new["status"] = copy.deepcopy(current["status"])
            else:
                new.pop("status", None)
        if rt.kind == "Namespace" and rt.group == "" and subresource != "finalize":
            new["spec"] = copy.deepcopy(current.get("spec", {}))
        return new

    # patch -------------------------------------------------------------------------------

    def patch(self, rt: ResourceType, namespace: str, name: str, content_type: str, body: bytes,
              opts: WriteOptions, *, subresource: str = "", applied: bodies.Decoded | None = None,
              ) -> tuple[Obj, bool]:
        """Returns (object, created). `applied`: an apply body the caller already decoded."""
        patch_type = content_type.split(";", 1)[0].strip().lower()
        if patch_type not in PATCH_TYPES:
            raise unsupported_media_type(patch_type, list(PATCH_TYPES))
        if patch_type == "application/apply-patch+yaml":
            return self._apply(rt, namespace, name, applied or bodies.decode_json_or_yaml(body), opts,
                               subresource=subresource)
        decoded = bodies.decode_json(body, what="the patch")
        document = decoded.value
        if decoded.duplicates and patch_type != "application/json-patch+json":  # ops are not fields
            opts = replace(opts, duplicates=decoded.duplicates)
        current = self.get(rt, namespace, name)
        try:
            if patch_type == "application/json-patch+json":
                patched = patching.apply_json_patch(copy.deepcopy(current), document)
            elif patch_type == "application/merge-patch+json" and subresource == "status":
                # Only the patched status is kept (_merge_owned_parts), and nothing below
                # mutates it: share what the patch leaves alone with the stored object.
                patched = patching.merge_patch_shared(current, document)
                if isinstance(patched, dict) and isinstance(patched.get("metadata"), dict):
                    patched["metadata"] = dict(patched["metadata"])  # _check_type/_place write here
            elif patch_type == "application/merge-patch+json":
                patched = patching.apply_merge_patch(current, document)  # copies; current stays
            else:
                merge_schema = None if rt.crd else patching.merge_schema_for(rt.group, rt.kind)
                if merge_schema is None:
                    raise unsupported_media_type(patch_type, [t for t in PATCH_TYPES if "strategic" not in t])
                if not isinstance(document, dict):
                    raise bad_request("strategic merge patch must be a JSON object")
                patched = patching.apply_strategic_merge_patch(copy.deepcopy(current), document, merge_schema)
        except patching.PatchTooLarge as exc:
            raise too_large(str(exc)) from None
        except patching.PatchError as exc:
            raise invalid(rt.kind, name, [Cause("FieldValueInvalid", str(exc), "")], rt.group) from None
        if not isinstance(patched, dict):
            raise bad_request("the patch did not produce an object")
        expect = None
        if isinstance(document, dict):
            patch_meta = document.get("metadata")
            patch_rv = patch_meta.get("resourceVersion") if isinstance(patch_meta, dict) else None
            if patch_rv:
                expect = str(patch_rv)
                if expect != current["metadata"]["resourceVersion"]:
                    raise conflict(rt.plural, name, rt.group)
        patched = self._check_type(rt, patched)
        patched["metadata"]["name"] = name
        self._place(rt, patched, namespace)
        return self._write_update(rt, current, patched, opts, subresource=subresource, expect=expect), False

    def _apply(self, rt: ResourceType, namespace: str, name: str, decoded: bodies.Decoded, opts: WriteOptions, *,
               subresource: str) -> tuple[Obj, bool]:
        if not opts.manager:
            raise bad_request("PATCH, application/apply-patch+yaml requires fieldManager")
        applied = self._check_type(rt, decoded.value)
        body_name = applied["metadata"].get("name")
        if body_name and body_name != name:
            raise bad_request(f"the name of the object ({body_name}) does not match the name on the URL ({name})")
        applied["metadata"]["name"] = name
        self._place(rt, applied, namespace)
        merge_schema = self._merge_schema(rt)
        current = self.find(rt, namespace, name)
        if subresource != "status":
            # The applied configuration is what the request sent: its unknown fields are the
            # request's, and they must not reach the field managers' sets either.
            self._check_fields(rt, applied, replace(opts, duplicates=decoded.duplicates), current)
        now = times.now_rfc3339()
        if subresource == "status":
            # An apply to /status applies the status fields only, merged into the live status
            # by the schema: list-map items another manager set, such as its conditions of other
            # types, stay.
            if current is None:
                raise not_found(rt.plural, name, rt.group)
            try:
                merged = patching.server_side_apply(
                    current, applied, manager=opts.manager, force=opts.force, api_version=rt.group_version,
                    now=now, schema=merge_schema, subresource="status")
            except patching.ApplyConflictError as exc:
                raise self._apply_conflict(exc, rt, name) from None
            status_opts = replace(opts, manager="")  # the apply wrote its own managedFields entry
            return self._write_update(rt, current, merged, status_opts, subresource="status",
                                      managed_fields=merged["metadata"].get("managedFields")), False
        # What the merge keeps of the live object was checked when it was written, and the
        # applied configuration above: the result needs no second check (nor a second prune).
        try:
            result = patching.server_side_apply(
                current, applied, manager=opts.manager, force=opts.force, api_version=rt.group_version,
                now=now, schema=merge_schema,
            )
        except patching.ApplyConflictError as exc:
            raise self._apply_conflict(exc, rt, name) from None
        if current is None:
            result["metadata"].pop("resourceVersion", None)
            managed = result["metadata"].get("managedFields")
            plain = WriteOptions(dry_run=opts.dry_run, field_validation=opts.field_validation,
                                 fields_checked=True)
            return self.create(rt, namespace, result, plain, managed_fields=managed), True
        result["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        no_manager = WriteOptions(dry_run=opts.dry_run, field_validation=opts.field_validation,
                                  fields_checked=True)
        return self._write_update(rt, current, result, no_manager, subresource=subresource), False

    @staticmethod
    def _apply_conflict(exc: patching.ApplyConflictError, rt: ResourceType, name: str) -> ApiError:
        causes = [Cause("FieldManagerConflict", f'conflict with "{c.manager}" using {c.api_version}', c.field)
                  for c in exc.conflicts]
        summary = "; ".join(f'conflict with "{c.manager}" using {c.api_version}: {c.field}' for c in exc.conflicts)
        return ApiError(409, "Conflict", f"Apply failed with {len(causes)} conflict{'s' if len(causes) != 1 else ''}: {summary}",
                        name=name, kind=rt.plural, group=rt.group, causes=causes)

    # delete ------------------------------------------------------------------------------

    def _finalizers(self, rt: ResourceType, obj: Obj) -> list[str]:
        found = list(obj["metadata"].get("finalizers") or [])
        if rt.group == "" and rt.kind == "Namespace":
            found += list((obj.get("spec") or {}).get("finalizers") or [])
        return found

    def delete(self, rt: ResourceType, namespace: str, name: str, options: Obj, opts: WriteOptions) -> tuple[Obj, bool]:
        """Returns (object, gone): gone is False when finalizers keep the object for now."""
        current = self.get(rt, namespace, name)
        preconditions = options.get("preconditions") or {}
        if preconditions.get("uid") and preconditions["uid"] != current["metadata"].get("uid"):
            raise conflict(rt.plural, name, rt.group, f"Precondition failed: UID in precondition: {preconditions['uid']}, UID in object meta: {current['metadata'].get('uid')}")
        if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise conflict(rt.plural, name, rt.group, f"Precondition failed: ResourceVersion in precondition: {preconditions['resourceVersion']}, ResourceVersion in object meta: {current['metadata']['resourceVersion']}")
        policy = options.get("propagationPolicy")
        if options.get("orphanDependents") is True:
            policy = "Orphan"
        elif options.get("orphanDependents") is False and not policy:
            policy = "Foreground"
        new = copy.deepcopy(current)
        meta = new["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Orphan" and ORPHAN_FINALIZER not in finalizers:
            finalizers.append(ORPHAN_FINALIZER)
        elif policy == "Foreground" and FOREGROUND_FINALIZER not in finalizers:
            finalizers.append(FOREGROUND_FINALIZER)
        if policy in ("Orphan", "Foreground"):
            meta["finalizers"] = finalizers
        grace = self._grace_period(rt, current, options)
        if grace > 0:
            meta["deletionGracePeriodSeconds"] = grace
        if not meta.get("deletionTimestamp") and (self._finalizers(rt, new) or grace > 0):
            meta["deletionTimestamp"] = times.now_rfc3339()
            meta.setdefault("deletionGracePeriodSeconds", 0)
            if rt.group == "" and rt.kind == "Namespace":
                new.setdefault("status", {})["phase"] = "Terminating"
        elif meta.get("deletionTimestamp") and grace == 0 and "deletionGracePeriodSeconds" in meta and not self._finalizers(rt, new):
            meta["deletionGracePeriodSeconds"] = 0
        if meta.get("deletionTimestamp") and (self._finalizers(rt, new) or grace > 0):
            if opts.dry_run or new == current:
                return new, False
            return self.commit_update(rt, new), False
        if opts.dry_run:
            return current, True
        return self._remove(rt, current), True

    def _grace_period(self, rt: ResourceType, obj: Obj, options: Obj) -> int:
        # Only bound, unfinished pods wait for their kubelet; everything else goes at once.
        if not (rt.group == "" and rt.kind == "Pod"):
            return 0
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return 0
        requested = options.get("gracePeriodSeconds")
        if requested is not None:
            return max(int(requested), 0)
        current = obj["metadata"].get("deletionGracePeriodSeconds")
        if current is not None:
            return int(current)
        return int(spec.get("terminationGracePeriodSeconds", 30))

    def _remove(self, rt: ResourceType, obj: Obj) -> Obj:
        meta = obj["metadata"]
        try:
            final = self.store.delete(rt.storage_key, meta.get("namespace", ""), meta["name"])
        except KeyMissing:
            raise not_found(rt.plural, meta["name"], rt.group) from None
        if rt.group == "apiextensions.k8s.io":
            self.on_crd_change(None, meta["name"])
        return final

    # CRDs --------------------------------------------------------------------------------

    def _sync_crd(self, crd: Obj | None, name: str) -> None:
        if crd is None or not crds.is_established(crd):
            self.registry.remove_crd_types(name)
            return
        self.registry.set_crd_types(name, crds.resource_types(crd))

    def load_crds(self) -> None:
        for crd in self.store.list_objects("apiextensions.k8s.io/customresourcedefinitions"):
            self._sync_crd(crd, crd["metadata"]["name"])


RESOURCE_VERSION_ON_CREATE = "resourceVersion should not be set on objects to be created"
MAX_UINT64 = 2**64 - 1


def set_on_create(value: Any) -> bool:
    """Whether a create's resourceVersion is refused: only one that parses as a non-zero unsigned
    64-bit integer (strconv.ParseUint); any other value is dropped, as etcd3's store does."""
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        return False
    return 0 < int(value) <= MAX_UINT64


ADMIN_USER = "tether-admin"


def object_too_large(size: int, limit: int) -> ApiError:
    # kube-apiserver passes on etcd's "etcdserver: request is too large" as a 500; the cause is
    # the request, so this says so with a 413 and the numbers.
    return too_large(f"the object is too large to store: {size} bytes as JSON, the limit is {limit} bytes")


def groups_of(user: str) -> list[str]:
    """The groups of a token's user: the admin token's is `system:masters`, a ServiceAccount's
    are its fixed groups; every token user is `system:authenticated`."""
    if user == ADMIN_USER:
        return ["system:masters", "system:authenticated"]
    if user.startswith("system:serviceaccount:"):
        namespace = user.split(":")[2]
        return ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]
    if user.startswith("system:bootstrap:"):  # bootstrap tokens (their extra groups are not kept)
        return ["system:bootstrappers", "system:authenticated"]
    return ["system:authenticated"]


def decode_body(content_type: str, body: bytes) -> Any:
    """A request body as a plain object (see `bodies` for the limits and errors)."""
    return bodies.decode(content_type, body).value
