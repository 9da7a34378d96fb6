"""Fuzzing the API server's input handling: body decoders, patch engines, the write paths, and a
live server.

Arbitrary input may only ever produce the API's own errors: an ApiError with a 4xx code from
the decoders and operations, a PatchError from the patch engines, a 4xx answer from the server.
Never another exception (that would be a 500, or a dead connection), never a 5xx, and the server
keeps serving. Each test prints how many inputs it tried (visible with `pytest -rA`) and asserts
a minimum, so a silently skipped run cannot pass.
"""

from __future__ import annotations

import asyncio
import copy
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.local import bodies
from tether.local.cluster import ClusterConfig, LocalCluster
from tether.local.errors import ApiError
from tether.local.operations import RESOURCE_VERSION_ON_CREATE, Operations, WriteOptions
from tether.local.patching import (
    PatchError,
    apply_json_patch,
    apply_merge_patch,
    apply_strategic_merge_patch,
    merge_schema_for,
)
from tether.local.resources import Registry
from tether.local.store import Store

# Per run; inputs are random, so runs add up to far more (400 and 300 cost a minute of every CI run).
EXAMPLES = 200
LIVE_REQUESTS = 150
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

# JSON values, with the keys Kubernetes objects use most so that merges and paths meet.
KEYS = st.sampled_from(["metadata", "spec", "name", "containers", "image", "labels", "a", "b", "$patch",
                        "$retainKeys", "$setElementOrder/containers", "$deleteFromPrimitiveList/args",
                        "ports", "containerPort", "args", "0", "-", "~1", ""]) | st.text(max_size=6)
SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False, allow_infinity=False)
           | st.text(max_size=10) | st.sampled_from(["delete", "replace", "merge", "c1", "c2"]))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(KEYS, inner, max_size=5),
                    max_leaves=40)
YAML_TEXT = st.text(alphabet="&*[]{}:-,!|>'\"#? \n\tab01.~%@<=", max_size=300)
POINTERS = st.lists(KEYS | st.sampled_from(["0", "1", "-", "00", "99999999999999999999"]), max_size=4).map(
    lambda parts: "".join("/" + p for p in parts))
JSON_PATCH = st.lists(st.fixed_dictionaries(
    {"op": st.sampled_from(["add", "remove", "replace", "move", "copy", "test", "bogus"]),
     "path": POINTERS | SCALARS},
    optional={"from": POINTERS, "value": JSON}), max_size=8)


def _json_clean(value: Any) -> None:
    """What a decoder returns must be JSON the server can store and send back."""
    json.dumps(value, allow_nan=False)


def _expect_4xx(exc: ApiError) -> None:
    if exc.message == RESOURCE_VERSION_ON_CREATE:
        return  # kube-apiserver's own answer (its storage layer's 500), reproduced on purpose
    assert 400 <= exc.code < 500, exc


class Counter:
    def __init__(self) -> None:
        self.tried = 0
        self.refused = 0


# ---------------------------------------------------------------------------------------------
# Body decoders


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    type_meta = _field(1, api_version.encode()) + _field(2, kind.encode())
    return b"k8s\x00" + _field(1, type_meta) + _field(2, raw)


PROTOBUF = st.one_of(
    st.binary(max_size=300).map(lambda b: b"k8s\x00" + b),
    st.tuples(st.sampled_from([("v1", "ConfigMap"), ("apps/v1", "Deployment"), ("v1", "Pod"), ("v1", "Namespace"),
                               ("v1", "Nothing")]), st.binary(max_size=300))
    .map(lambda t: _envelope(t[0][0], t[0][1], t[1])),
)
BODIES = st.one_of(
    st.tuples(st.just("application/json"), st.binary(max_size=400)),
    st.tuples(st.just("application/json"), JSON.map(lambda v: json.dumps(v).encode())),
    st.tuples(st.just("application/json"), st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n)),
    st.tuples(st.just("application/yaml"), YAML_TEXT.map(str.encode)),
    st.tuples(st.just("application/yaml"), st.binary(max_size=300)),
    st.tuples(st.just("application/vnd.kubernetes.protobuf"), PROTOBUF),
    st.tuples(st.sampled_from(["text/html", "application/xml"]), st.binary(max_size=20)),
)


def test_body_decoders_raise_only_api_errors() -> None:
    count = Counter()

    @FUZZ
    @given(BODIES)
    def check(case: tuple[str, bytes]) -> None:
        content_type, body = case
        count.tried += 1
        try:
            decoded = bodies.decode(content_type, body)
        except ApiError as exc:
            count.refused += 1
            _expect_4xx(exc)
            return
        _json_clean(decoded.value)

    check()
    print(f"body decoders: {count.tried} inputs tried, {count.refused} refused with 4xx")
    assert count.tried >= EXAMPLES, f"only {count.tried} inputs tried"


def test_apply_bodies_decode_or_refuse() -> None:
    count = Counter()

    @FUZZ
    @given(YAML_TEXT.map(str.encode) | st.binary(max_size=200) | JSON.map(lambda v: json.dumps(v).encode()))
    def check(body: bytes) -> None:
        count.tried += 1
        try:
            _json_clean(bodies.decode_json_or_yaml(body).value)
        except ApiError as exc:
            count.refused += 1
            _expect_4xx(exc)

    check()
    print(f"apply body decoder: {count.tried} inputs tried, {count.refused} refused with 4xx")
    assert count.tried >= EXAMPLES


# ---------------------------------------------------------------------------------------------
# Patch engines


def test_patch_engines_raise_only_patch_errors_and_never_mutate_input() -> None:
    count = Counter()
    deployment_schema = merge_schema_for("apps", "Deployment")
    assert deployment_schema is not None

    @FUZZ
    @given(JSON, JSON, JSON_PATCH, st.sampled_from(["json", "merge", "strategic"]))
    def check(doc: Any, patch: Any, ops: list[Any], engine: str) -> None:
        count.tried += 1
        before = copy.deepcopy(doc), copy.deepcopy(patch)
        try:
            if engine == "json":
                result = apply_json_patch(doc, ops)
            elif engine == "merge":
                result = apply_merge_patch(doc, patch)
            else:
                result = apply_strategic_merge_patch(doc if isinstance(doc, dict) else {"spec": doc},
                                                     patch if isinstance(patch, dict) else {"spec": patch},
                                                     deployment_schema)
        except PatchError:
            count.refused += 1
            return
        finally:
            assert (doc, patch) == before, "a patch engine changed its input"
        _json_clean(result)

    check()
    print(f"patch engines: {count.tried} inputs tried, {count.refused} refused with PatchError")
    assert count.tried >= EXAMPLES


# ---------------------------------------------------------------------------------------------
# The write paths of the operations (validation, fieldValidation, metadata, schema, store)

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "things.fuzz.tether-test.io"},
    "spec": {"group": "fuzz.tether-test.io", "scope": "Namespaced",
             "names": {"plural": "things", "kind": "Thing"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "properties": {"spec": {
                     "type": "object", "x-kubernetes-preserve-unknown-fields": True,
                     "properties": {"word": {"type": "string", "pattern": "^(a+)+$"},
                                    "items": {"type": "array", "x-kubernetes-list-type": "set",
                                              "items": {"type": "string"}}}}}}}}]},
}
LABEL_TEXT = st.text(alphabet="abcXY09-_./ !", max_size=12)
# Mostly well-formed objects with random extras, so the checks past decoding get exercised too.
POD_SPEC = st.fixed_dictionaries(
    {"containers": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["web", "side"]),
                                                   "image": st.just("nginx")},
                                                  optional={"imagePullPolicyy": SCALARS, "ports": JSON}),
                            min_size=1, max_size=2)},
    optional={"bogus": JSON, "nodeSelector": st.dictionaries(LABEL_TEXT, LABEL_TEXT, max_size=2)})
SPECS = JSON | st.fixed_dictionaries(
    {"selector": st.just({"matchLabels": {"app": "x"}}),
     "template": st.fixed_dictionaries({"metadata": st.just({"labels": {"app": "x"}}), "spec": POD_SPEC})},
    optional={"replicas": SCALARS, "word": st.sampled_from(["aaa", "a" * 40 + "!", "b"]),
              "items": st.lists(st.sampled_from(["a", "b", "c"]), max_size=4), "typo": JSON})
OBJECT_FIELDS = st.fixed_dictionaries(
    {"metadata": st.fixed_dictionaries({"name": st.sampled_from(["x", "y", "fuzz", "Bad_Name", ""])},
                                       optional={"labels": st.dictionaries(LABEL_TEXT, LABEL_TEXT | SCALARS,
                                                                           max_size=3),
                                                 "annotations": st.dictionaries(LABEL_TEXT, st.text(max_size=8),
                                                                                max_size=3) | JSON,
                                                 "resourceVersion": st.sampled_from(["", "1", "x"])})},
    optional={"spec": SPECS, "data": st.dictionaries(st.text(max_size=5), st.text(max_size=8), max_size=3) | JSON,
              "stringData": JSON, "status": JSON, "x": JSON})
PATCH_TYPES = st.sampled_from(["application/json-patch+json", "application/merge-patch+json",
                               "application/strategic-merge-patch+json", "application/apply-patch+yaml",
                               "text/plain"])


@pytest.fixture
def ops(tmp_path: Path) -> Iterator[Operations]:
    store = Store(tmp_path / "state.db")
    registry = Registry.with_builtins()
    operations = Operations(store, registry)
    rt = registry.lookup("", "v1", "namespaces")
    assert rt is not None
    operations.create(rt, "", {"metadata": {"name": "default"}}, WriteOptions())
    crd_rt = registry.lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    assert crd_rt is not None
    operations.create(crd_rt, "", copy.deepcopy(CRD), WriteOptions())
    yield operations
    store.close()


def test_write_paths_answer_only_4xx(ops: Operations) -> None:
    count = Counter()
    types = [ops.registry.lookup(*key) for key in
             [("", "v1", "configmaps"), ("", "v1", "secrets"), ("", "v1", "services"), ("", "v1", "pods"),
              ("apps", "v1", "deployments"), ("fuzz.tether-test.io", "v1", "things")]]
    template = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}
    bases = {"ConfigMap": {"data": {"a": "1"}}, "Secret": {"stringData": {"a": "1"}},
             "Service": {"spec": {"ports": [{"port": 80}]}}, "Pod": {"spec": template["spec"]},
             "Deployment": {"spec": {"selector": {"matchLabels": {"app": "x"}}, "template": template}},
             "Thing": {"spec": {"word": "aaa", "items": ["a"]}}}

    @FUZZ
    @given(st.sampled_from(types), OBJECT_FIELDS, st.sampled_from(["create", "update", "patch"]), PATCH_TYPES,
           st.one_of(JSON.map(lambda v: json.dumps(v).encode()), JSON_PATCH.map(lambda v: json.dumps(v).encode()),
                     YAML_TEXT.map(str.encode)),
           st.sampled_from(["Strict", "Warn", "Ignore", ""]))
    def check(rt: Any, fields: Any, verb: str, patch_type: str, patch: bytes, validation: str) -> None:
        assert rt is not None
        count.tried += 1
        opts = WriteOptions(manager="fuzz", field_validation=validation,
                            duplicates=("spec.a",) if validation == "Warn" else ())
        # A valid base to patch and update, and fields over it: the checks past the first get a turn.
        base = {"apiVersion": rt.group_version, "kind": rt.kind, "metadata": {"name": "x"},
                **copy.deepcopy(bases[rt.kind])}
        obj = {**copy.deepcopy(base), **fields}
        if count.tried % 2:
            obj["metadata"] = dict(obj["metadata"], name=f"n{count.tried}")
        try:
            if ops.find(rt, "default", "x") is None:
                ops.create(rt, "default", base, WriteOptions(manager="fuzz"))
            if verb == "create":
                ops.create(rt, "default", obj, opts)
            elif verb == "update":
                ops.update(rt, "default", "x", obj, opts)
            else:
                ops.patch(rt, "default", "x", patch_type, patch, opts)
        except ApiError as exc:
            count.refused += 1
            _expect_4xx(exc)
            return
        for stored in ops.list_objects(rt, "default"):
            _json_clean(stored)

    check()
    print(f"write paths: {count.tried} inputs tried, {count.refused} refused with 4xx")
    assert count.tried >= EXAMPLES


# ---------------------------------------------------------------------------------------------
# A live server


class ServerThread:
    """A local cluster on its own event loop in a thread, so a synchronous fuzz loop can talk
    to it over real HTTPS."""

    def __init__(self, data_dir: Path) -> None:
        self.cluster = LocalCluster(ClusterConfig(name="fuzz", data_dir=data_dir))
        self.loop = asyncio.new_event_loop()
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

        async def begin() -> None:
            self._task = asyncio.ensure_future(self.cluster.run())
            await asyncio.wait_for(self.cluster.started.wait(), 30)

        asyncio.run_coroutine_threadsafe(begin(), self.loop).result(60)

    def stop(self) -> None:
        async def end() -> None:
            assert self._task is not None
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(end(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LocalCluster]:
    running = ServerThread(tmp_path / "fuzz")
    running.start()
    try:
        yield running.cluster
    finally:
        running.stop()


COHERENT = st.one_of(
    st.tuples(st.just(("POST", "/api/v1/namespaces/default/configmaps")), st.just("application/json"),
              OBJECT_FIELDS.map(lambda v: json.dumps(v).encode())),
    st.tuples(st.just(("POST", "/apis/apps/v1/namespaces/default/deployments")), st.just("application/yaml"),
              OBJECT_FIELDS.map(lambda v: json.dumps(v).encode())),
    st.tuples(st.just(("PATCH", "/api/v1/namespaces/default/configmaps/fuzz")),
              st.just("application/merge-patch+json"),
              st.fixed_dictionaries({"data": st.dictionaries(st.text(max_size=4), st.text(max_size=6) | st.none(),
                                                             max_size=3)},
                                    optional={"metadata": OBJECT_FIELDS.map(lambda o: o["metadata"])})
              .map(lambda v: json.dumps(v).encode())),
    st.tuples(st.just(("PATCH", "/api/v1/namespaces/default/configmaps/fuzz")),
              st.just("application/json-patch+json"), JSON_PATCH.map(lambda v: json.dumps(v).encode())),
    st.tuples(st.just(("PATCH", "/api/v1/namespaces/default/configmaps/fuzz?fieldManager=fuzz")),
              st.just("application/apply-patch+yaml"),
              OBJECT_FIELDS.map(lambda v: json.dumps(dict(v, apiVersion="v1", kind="ConfigMap",
                                                          metadata=dict(v["metadata"], name="fuzz"))).encode())),
)
PATHS = st.sampled_from([
    ("POST", "/api/v1/namespaces/default/configmaps"),
    ("POST", "/apis/apps/v1/namespaces/default/deployments"),
    ("PUT", "/api/v1/namespaces/default/configmaps/fuzz"),
    ("PATCH", "/api/v1/namespaces/default/configmaps/fuzz"),
    ("PATCH", "/apis/apps/v1/namespaces/default/deployments/fuzz"),
    ("PATCH", "/apis/apps/v1/namespaces/default/deployments/fuzz/scale"),
    ("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"),
    ("POST", "/api/v1/namespaces/default/services"),
    ("POST", "/api/v1/namespaces/default/secrets"),
    ("PUT", "/api/v1/namespaces/default/secrets/fuzz"),
    ("DELETE", "/api/v1/namespaces/default/configmaps/fuzz"),
])
CONTENT_TYPES = st.sampled_from(["application/json", "application/yaml", "application/vnd.kubernetes.protobuf",
                                 "application/json-patch+json", "application/merge-patch+json",
                                 "application/strategic-merge-patch+json", "application/apply-patch+yaml", ""])
QUERIES = st.sampled_from(["", "?fieldValidation=Strict", "?fieldValidation=Warn", "?fieldValidation=Bogus",
                           "?fieldManager=fuzz&force=true", "?dryRun=All"])


def test_live_server_answers_random_bodies_with_4xx_and_keeps_serving(server: LocalCluster) -> None:
    count = Counter()
    context = ssl.create_default_context(cafile=str(server.pki.ca_cert))
    context.load_cert_chain(server.pki.admin_cert, server.pki.admin_key)
    seed_body = {"metadata": {"name": "fuzz"}, "data": {"a": "1"}}
    with httpx.Client(base_url=server.url, verify=context, timeout=60) as client:
        assert client.post("/api/v1/namespaces/default/configmaps", json=seed_body).status_code == 201

        random_requests = st.tuples(PATHS, CONTENT_TYPES, BODIES.map(lambda case: case[1]) | st.one_of(
            OBJECT_FIELDS.map(lambda v: json.dumps(v).encode()), JSON_PATCH.map(lambda v: json.dumps(v).encode())))

        @settings(max_examples=LIVE_REQUESTS, deadline=None, suppress_health_check=list(HealthCheck))
        @given(COHERENT | random_requests, QUERIES)
        def check(case: tuple[tuple[str, str], str, bytes], query: str) -> None:
            (method, path), content_type, body = case
            count.tried += 1
            if "?" in path:
                query = "&" + query.lstrip("?") if query else ""
            answer = client.request(method, path + query, content=body, headers={"Content-Type": content_type})
            assert answer.status_code < 500 or RESOURCE_VERSION_ON_CREATE in answer.text, (
                method, path, content_type, body[:200], answer.text[:500])
            if answer.status_code >= 400:
                count.refused += 1
                assert answer.json()["kind"] == "Status"

        check()
        assert client.get("/api/v1/namespaces/default").status_code == 200
    print(f"live server: {count.tried} requests, {count.refused} answered 4xx, no 5xx, still serving")
    assert count.tried >= LIVE_REQUESTS
