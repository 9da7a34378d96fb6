"""API server limits (issue 10, findings 5, 6 and part of 9), probed as an attacker would.

Each test sends what once froze or broke a local cluster (a ReDoS pattern, a JSON patch copy
bomb, a YAML alias bomb, deep nesting, huge objects, CRDs named after built-in types, unknown
fields under fieldValidation=Strict, bad labels, negative lengths) and checks the clean 4xx that
kube-apiserver gives (or that docs/security.md documents where it has none), and that the
clusters of the daemon keep answering. kubectl is used where a user would send the request;
raw HTTPS where kubectl cannot send it (YAML bodies, malformed framing, duplicate keys).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]


def unique(prefix: str) -> str:
    return f"{prefix}-{os.getpid() % 10000}-{uuid.uuid4().hex[:6]}"


class Api:
    """Raw HTTPS to one cluster with the kubeconfig's admin credentials."""

    def __init__(self, kubeconfig: Path, context: str, workdir: Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        ctx = next(c["context"] for c in config["contexts"] if c["name"] == context)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == ctx["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == ctx["user"])
        self.server = str(cluster["server"])
        ca = workdir / f"{context}-ca.crt"
        cert = workdir / f"{context}.crt"
        key = workdir / f"{context}.key"
        ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
        cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        key.chmod(0o600)
        self.tls = ssl.create_default_context(cafile=str(ca))
        self.tls.load_cert_chain(str(cert), str(key))
        self.http = httpx.Client(base_url=self.server, verify=self.tls, timeout=120)

    def request(self, method: str, path: str, body: Any = None, *, content: bytes | None = None,
                content_type: str = "application/json", params: dict[str, str] | None = None) -> httpx.Response:
        data = content if content is not None else (json.dumps(body).encode() if body is not None else None)
        headers = {"Content-Type": content_type} if data is not None else {}
        return self.http.request(method, path, content=data, headers=headers, params=params)

    def raw(self, data: bytes) -> bytes:
        """Send bytes as they are on a fresh TLS connection; return what comes back until the
        server closes (it must: every malformed request ends its connection)."""
        host, port = self.server.removeprefix("https://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=60) as plain, \
                self.tls.wrap_socket(plain, server_hostname=host) as conn:
            conn.sendall(data)
            received = b""
            while chunk := conn.recv(65536):
                received += chunk
            return received


@pytest.fixture(scope="module")
def apis(clusters: Any) -> Iterator[dict[str, Api]]:
    with tempfile.TemporaryDirectory() as tmp:
        made = {name: Api(clusters.kubeconfig, name, Path(tmp)) for name in clusters.names}
        yield made
        for api in made.values():
            api.http.close()


@pytest.fixture
def ns(clusters: Any) -> Iterator[str]:
    name = unique("limits")
    clusters.kubectl("create", "namespace", name)
    yield name
    clusters.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


def kubectl_in(clusters: Any, manifest: Obj, *args: str, check: bool = False) -> Any:
    return clusters.kubectl(*args, "-f", "-", input=json.dumps(manifest), check=check,
                            timeout=120)


def other_cluster_answers(clusters: Any) -> None:
    """The second cluster of the same daemon still serves reads (a stalled loop would not)."""
    answer = clusters.kubectl("get", "--raw", "/api/v1/namespaces/default", context=clusters.names[1])
    assert json.loads(answer.stdout)["metadata"]["name"] == "default"


def crd(group: str, plural: str, kind: str, properties: Obj | None = None, *,
        annotations: Obj | None = None, preserve: bool = False) -> Obj:
    spec_schema: Obj = {"type": "object", "properties": properties or {}}
    if preserve:
        spec_schema["x-kubernetes-preserve-unknown-fields"] = True
    meta: Obj = {"name": f"{plural}.{group}"}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": meta,
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                "type": "object", "properties": {"spec": spec_schema}}}}],
        },
    }


def configmap(name: str, namespace: str, **fields: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, **fields}


def deployment(name: str, namespace: str, **container: Any) -> Obj:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "web", "image": "nginx", **container}]}}},
    }


def patch_file(tmp_path: Path, patch: Any) -> str:
    """A patch in a file: one command-line argument holds at most 128 KiB on Linux."""
    path = tmp_path / f"patch-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps(patch))
    return str(path)


def daemon_log(clusters: Any) -> Path:
    return Path(clusters.data_dir) / "daemon.log"


# ---------------------------------------------------------------------------------------------
# Finding 6: single small requests that froze every cluster in the daemon


def test_redos_pattern_matches_in_linear_time_and_other_clusters_answer(clusters: Any, ns: str) -> None:
    group = f"{unique('redos')}.tether-test.io"
    schema = {"word": {"type": "string", "pattern": "^(a+)+$"}}
    kubectl_in(clusters, crd(group, "words", "Word", schema), "create", check=True)
    clusters.kubectl("wait", "--for=condition=established", f"crd/words.{group}", "--timeout=60s")
    try:
        # A backtracking engine needs 2^30 steps here (minutes of a frozen daemon); RE2 is linear.
        evil = {"apiVersion": f"{group}/v1", "kind": "Word", "metadata": {"name": "evil", "namespace": ns},
                "spec": {"word": "a" * 30 + "!"}}
        refused = kubectl_in(clusters, evil, "create", "--request-timeout=30s")
        assert refused.returncode != 0
        assert "spec.word in body should match '^(a+)+$'" in refused.stderr, refused.stderr
        good = dict(evil, metadata={"name": "good", "namespace": ns}, spec={"word": "a" * 40})
        kubectl_in(clusters, good, "create", check=True)
        other_cluster_answers(clusters)
    finally:
        clusters.kubectl("delete", "crd", f"words.{group}", "--wait=false", check=False)


def test_invalid_regex_in_crd_schema_is_refused_at_creation(clusters: Any) -> None:
    group = f"{unique('regex')}.tether-test.io"
    lookahead = crd(group, "gadgets", "Gadget", {"name": {"type": "string", "pattern": "^(?=a)b$"}})
    refused = kubectl_in(clusters, lookahead, "create")
    assert refused.returncode != 0
    assert "The CustomResourceDefinition" in refused.stderr and "is invalid" in refused.stderr
    assert "must be a valid regular expression, but isn't: error parsing regexp" in refused.stderr
    assert clusters.kubectl("get", "crd", f"gadgets.{group}", check=False).returncode != 0


def test_json_patch_copy_bomb_is_refused_before_it_grows(clusters: Any, ns: str, tmp_path: Path) -> None:
    kubectl_in(clusters, configmap("bomb", ns, data={"a": "1"}), "create", check=True)
    # 1.2 KB of patch: every copy doubles /x (2^22 elements, ~8 MB, once 9.6 s of frozen server).
    ops = [{"op": "add", "path": "/x", "value": ["lol"]}]
    ops += [{"op": "copy", "from": "/x", "path": "/x/-"} for _ in range(22)]
    patch = json.dumps(ops)
    assert len(patch) < 1300
    refused = clusters.kubectl("patch", "configmap", "bomb", "-n", ns, "--type=json", "-p", patch,
                               "--request-timeout=60s", check=False)
    assert refused.returncode != 0
    assert "RequestEntityTooLarge" in refused.stderr, refused.stderr
    assert "accumulated copy size limit" in refused.stderr
    stored = clusters.kubectl_json("get", "configmap", "bomb", "-n", ns)
    assert "x" not in stored and stored["data"] == {"a": "1"}
    too_many = [{"op": "test", "path": "/data/a", "value": "1"}] * 10_001
    answer = clusters.kubectl("patch", "configmap", "bomb", "-n", ns, "--type=json",
                              "--patch-file", patch_file(tmp_path, too_many), check=False)
    assert "The allowed maximum operations in a JSON patch is 10000, got 10001" in answer.stderr
    other_cluster_answers(clusters)


def test_yaml_alias_bomb_is_refused(apis: dict[str, Api], clusters: Any, ns: str) -> None:
    lines = ["apiVersion: v1", "kind: ConfigMap", "metadata: {name: yaml-bomb}",
             'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for name, previous in zip("bcdefg", "abcdef", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    bomb = "\n".join(lines).encode()
    assert len(bomb) < 400  # 9^7 "lol"s: 33 MB once expanded
    answer = apis[clusters.names[0]].request("POST", f"/api/v1/namespaces/{ns}/configmaps", content=bomb,
                                             content_type="application/yaml")
    assert answer.status_code == 400, answer.text
    assert answer.json()["reason"] == "BadRequest"
    assert "aliases expand to more than 3145728 bytes" in answer.json()["message"]
    assert clusters.kubectl("get", "configmap", "yaml-bomb", "-n", ns, check=False).returncode != 0
    # Aliases within the bound still work, expanded into separate copies.
    small = b"metadata: {name: aliased}\ndata: &d {a: x}\nbinaryData: {}\n"
    assert apis[clusters.names[0]].request("POST", f"/api/v1/namespaces/{ns}/configmaps", content=small,
                                           content_type="application/yaml").status_code == 201
    other_cluster_answers(clusters)


def _pb_field(number: int, payload: bytes) -> bytes:
    def varint(value: int) -> bytes:
        out = bytearray()
        while True:
            out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
            value >>= 7
            if not value:
                return bytes(out)

    return varint(number << 3 | 2) + varint(len(payload)) + payload


def protobuf_configmap(name: str, data: dict[str, str]) -> bytes:
    """A ConfigMap as kubectl's protobuf encoding: the k8s envelope, ObjectMeta{1: name},
    data as map entries {1: key, 2: value} in field 2."""
    raw = _pb_field(1, _pb_field(1, name.encode()))
    raw += b"".join(_pb_field(2, _pb_field(1, k.encode()) + _pb_field(2, v.encode())) for k, v in data.items())
    return b"k8s\x00" + _pb_field(1, _pb_field(1, b"v1") + _pb_field(2, b"ConfigMap")) + _pb_field(2, raw)


def test_large_yaml_and_protobuf_bodies_decode_in_a_worker_with_the_same_limits(apis: dict[str, Api], clusters: Any,
                                                                  ns: str) -> None:
    api = apis[clusters.names[0]]
    data = {f"key{i}": f"value {i}" for i in range(20_000)}
    big = yaml.safe_dump({"metadata": {"name": "big-yaml"}, "data": data}).encode()
    assert len(big) > 256 * 1024  # past the size decoded in-process
    made = api.request("POST", f"/api/v1/namespaces/{ns}/configmaps", content=big, content_type="application/yaml")
    assert made.status_code == 201, made.text[:300]
    assert made.json()["data"]["key19999"] == "value 19999"
    padded_bomb = b"\n".join([b"metadata: {name: padded}", b'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol"]']
                             + [b"%s: &%s [%s]" % (c.encode(), c.encode(), b",".join([b"*" + p.encode()] * 9))
                                for c, p in zip("bcdefg", "abcdef", strict=True)]) + b"\n#" + b" " * 300_000
    refused = api.request("POST", f"/api/v1/namespaces/{ns}/configmaps", content=padded_bomb,
                          content_type="application/yaml")
    assert refused.status_code == 400 and "aliases expand" in refused.json()["message"]
    big_protobuf = protobuf_configmap("big-protobuf", data)
    assert len(big_protobuf) > 256 * 1024
    made = api.request("POST", f"/api/v1/namespaces/{ns}/configmaps", content=big_protobuf,
                       content_type="application/vnd.kubernetes.protobuf")
    assert made.status_code == 201, made.text[:300]
    assert len(made.json()["data"]) == 20_000
    other_cluster_answers(clusters)


def test_request_body_over_3_mib_gets_413(clusters: Any, ns: str) -> None:
    big = configmap("huge-body", ns, data={"a": "x" * (3 * 1024 * 1024 + 10)})
    refused = kubectl_in(clusters, big, "create")
    assert refused.returncode != 0
    assert "Request entity too large: limit is 3145728" in refused.stderr, refused.stderr[-500:]


def test_stored_object_over_1_5_mib_gets_413(clusters: Any, ns: str, tmp_path: Path) -> None:
    # A custom resource: built-in ConfigMaps and Secrets are refused at 1 MiB by validation first.
    group = f"{unique('blobs')}.tether-test.io"
    kubectl_in(clusters, crd(group, "blobs", "Blob", preserve=True), "create", check=True)
    clusters.kubectl("wait", "--for=condition=established", f"crd/blobs.{group}", "--timeout=60s")

    def blob(name: str, **data: str) -> Obj:
        return {"apiVersion": f"{group}/v1", "kind": "Blob", "metadata": {"name": name, "namespace": ns},
                "spec": data}

    try:
        refused = kubectl_in(clusters, blob("huge-object", a="x" * (2 * 1024 * 1024)), "create")  # 2 MiB body
        assert refused.returncode != 0
        assert "RequestEntityTooLarge" in refused.stderr
        assert "too large to store" in refused.stderr and "the limit is 1572864 bytes" in refused.stderr
        # Grown past the limit by patches: refused, the stored object unchanged.
        kubectl_in(clusters, blob("grows", a="x" * 1_000_000), "create", check=True)
        patch = patch_file(tmp_path, {"spec": {"b": "y" * 1_000_000}})
        grown = clusters.kubectl("patch", f"blobs.{group}", "grows", "-n", ns, "--type=merge",
                                 "--patch-file", patch, check=False)
        assert grown.returncode != 0 and "too large to store" in grown.stderr
        assert set(clusters.kubectl_json("get", f"blobs.{group}", "grows", "-n", ns)["spec"]) == {"a"}
    finally:
        clusters.kubectl("delete", "crd", f"blobs.{group}", "--wait=false", check=False)


def test_deep_nesting_gets_400_not_500(apis: dict[str, Api], clusters: Any, ns: str) -> None:
    api = apis[clusters.names[0]]
    deep = '{"metadata":{"name":"deep"},"x":' + "[" * 600 + "]" * 600 + "}"
    answer = api.request("POST", f"/api/v1/namespaces/{ns}/configmaps", content=deep.encode())
    assert answer.status_code == 400, answer.text
    assert "deeper than 200 levels" in answer.json()["message"]
    very_deep = '{"x":' + "[" * 100_000 + "]" * 100_000 + "}"
    assert api.request("POST", f"/api/v1/namespaces/{ns}/configmaps",
                       content=very_deep.encode()).status_code == 400
    deep_yaml = "metadata: {name: deep}\nx: " + "[" * 600 + "]" * 600
    answer = api.request("POST", f"/api/v1/namespaces/{ns}/configmaps", content=deep_yaml.encode(),
                         content_type="application/yaml")
    assert answer.status_code == 400, answer.text


def test_nesting_up_to_the_limit_works_through_every_write_path(clusters: Any, ns: str, tmp_path: Path) -> None:
    """The bound is usable: an object nested close to it goes through create, server-side apply,
    merge, strategic-merge-free JSON patch and reads, with nothing answering 500."""
    group = f"{unique('deep')}.tether-test.io"
    kubectl_in(clusters, crd(group, "trees", "Tree", preserve=True), "create", check=True)
    clusters.kubectl("wait", "--for=condition=established", f"crd/trees.{group}", "--timeout=60s")
    try:
        value: Any = "leaf"
        for _ in range(190):
            value = {"n": value}
        tree = {"apiVersion": f"{group}/v1", "kind": "Tree", "metadata": {"name": "t", "namespace": ns},
                "spec": {"root": value}}
        kubectl_in(clusters, tree, "apply", "--server-side", check=True)
        resource = f"trees.{group}"
        clusters.kubectl("patch", resource, "t", "-n", ns, "--type=json", "-p",
                         json.dumps([{"op": "copy", "from": "/spec/root", "path": "/spec/copy"}]))
        deeper = [{"op": "add", "path": "/spec/copy" + "/n" * 12, "value": value}]
        too_deep = clusters.kubectl("patch", resource, "t", "-n", ns, "--type=json", "--patch-file",
                                    patch_file(tmp_path, deeper), check=False)
        assert too_deep.returncode != 0 and "more than 200 levels deep" in too_deep.stderr, too_deep.stderr
        clusters.kubectl("patch", resource, "t", "-n", ns, "--type=merge", "-p",
                         json.dumps({"spec": {"root": {"n": {"n": "changed"}}}}))
        stored = clusters.kubectl_json("get", resource, "t", "-n", ns)
        assert stored["spec"]["root"] == {"n": {"n": "changed"}}
        assert stored["spec"]["copy"] == value
    finally:
        clusters.kubectl("delete", "crd", f"trees.{group}", "--wait=false", check=False)


# ---------------------------------------------------------------------------------------------
# Finding 5: a CRD named after a built-in type destroyed it


@pytest.mark.parametrize("name", ["deployments.apps", "jobs.batch", "ingresses.networking.k8s.io"])
def test_crd_for_a_builtin_resource_is_refused_and_builtin_data_stays(clusters: Any, ns: str, name: str) -> None:
    kubectl_in(clusters, deployment("keep", ns), "create", check=True)
    plural, group = name.split(".", 1)
    shadow = crd(group, plural, plural.capitalize()[:-1],
                 annotations={"api-approved.kubernetes.io": "https://github.com/kubernetes/kubernetes/pull/1"})
    refused = kubectl_in(clusters, shadow, "create")
    assert refused.returncode != 0
    assert f"{name} is built into the API server; a CustomResourceDefinition cannot define it" in refused.stderr
    assert clusters.kubectl("get", "crd", name, check=False).returncode != 0
    assert clusters.kubectl("delete", "crd", name, check=False).returncode != 0
    assert clusters.kubectl_json("get", "deployment", "keep", "-n", ns)["metadata"]["name"] == "keep"
    assert clusters.kubectl("get", "jobs,ingresses", "-n", ns).returncode == 0


def test_crd_group_without_a_dot_is_refused(clusters: Any) -> None:
    refused = kubectl_in(clusters, crd("example", "widgets", "Widget"), "create")
    assert refused.returncode != 0
    assert 'spec.group: Invalid value: "example": should be a domain with at least one dot' in refused.stderr


def test_k8s_io_group_needs_the_api_approval_annotation(clusters: Any) -> None:
    group = f"{unique('approved')}.k8s.io"
    refused = kubectl_in(clusters, crd(group, "widgets", "Widget"), "create")
    assert refused.returncode != 0
    assert ("metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have "
            'approval annotation "api-approved.kubernetes.io"') in refused.stderr
    other = f"{unique('approved')}.kubernetes.io"
    assert kubectl_in(clusters, crd(other, "widgets", "Widget"), "create").returncode != 0
    approved = crd(group, "widgets", "Widget", annotations={"api-approved.kubernetes.io": "unapproved, testing only"})
    kubectl_in(clusters, approved, "create", check=True)
    clusters.kubectl("delete", "crd", f"widgets.{group}", "--wait=false")


# ---------------------------------------------------------------------------------------------
# Finding 9: fieldValidation, labels, lengths


def test_kubectl_apply_of_a_deployment_with_a_typo_fails_as_on_a_real_cluster(clusters: Any, ns: str) -> None:
    typo = deployment("typo", ns, imagePullPolicyy="Always")
    refused = kubectl_in(clusters, typo, "apply")  # kubectl's default: --validate=strict
    assert refused.returncode != 0
    assert ('strict decoding error: unknown field "spec.template.spec.containers[0].imagePullPolicyy"'
            in refused.stderr), refused.stderr
    assert clusters.kubectl("get", "deployment", "typo", "-n", ns, check=False).returncode != 0
    warned = kubectl_in(clusters, typo, "apply", "--validate=warn", check=True)
    assert 'Warning: unknown field "spec.template.spec.containers[0].imagePullPolicyy"' in warned.stderr
    stored = clusters.kubectl_json("get", "deployment", "typo", "-n", ns)
    assert "imagePullPolicyy" not in stored["spec"]["template"]["spec"]["containers"][0]
    ignored = kubectl_in(clusters, dict(typo, metadata={"name": "typo2", "namespace": ns}), "create",
                         "--validate=false", check=True)
    assert "Warning" not in ignored.stderr
    stored = clusters.kubectl_json("get", "deployment", "typo2", "-n", ns)
    assert "imagePullPolicyy" not in stored["spec"]["template"]["spec"]["containers"][0]


def test_field_validation_on_raw_requests(apis: dict[str, Api], clusters: Any, ns: str) -> None:
    api = apis[clusters.names[0]]
    url = f"/apis/apps/v1/namespaces/{ns}/deployments"
    body = json.dumps(deployment("raw", ns)).replace('"replicas": 1', '"replicas": 1, "replicas": 2')
    body = body.replace('"spec": {"replicas"', '"spec": {"foo": true, "replicas"')
    strict = api.request("POST", url, content=body.encode(), params={"fieldValidation": "Strict"})
    assert strict.status_code == 400 and strict.json()["reason"] == "BadRequest"
    assert strict.json()["message"] == ('strict decoding error: unknown field "spec.foo", '
                                        'duplicate field "spec.replicas"')
    warn = api.request("POST", url, content=body.encode())  # no fieldValidation: Warn
    assert warn.status_code == 201
    assert warn.headers.get_list("warning") == ['299 - "unknown field \\"spec.foo\\""',
                                                '299 - "duplicate field \\"spec.replicas\\""']
    assert "foo" not in warn.json()["spec"] and warn.json()["spec"]["replicas"] == 2
    bogus = api.request("POST", url, deployment("bogus", ns), params={"fieldValidation": "Bogus"})
    assert bogus.status_code == 422, bogus.text  # kube-apiserver: CreateOptions is Invalid
    assert bogus.json()["message"] == ('CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported '
                                       'value: "Bogus": supported values: "", "Ignore", "Strict", "Warn"')
    patched = api.request("PATCH", f"{url}/raw", {"spec": {"bar": 1}}, params={"fieldValidation": "Bogus"},
                          content_type="application/merge-patch+json")
    assert patched.status_code == 422 and "PatchOptions" in patched.json()["message"]


def test_bad_label_keys_and_values_and_huge_annotations_get_422(clusters: Any, ns: str) -> None:
    bad_key = configmap("labels1", ns)
    bad_key["metadata"]["labels"] = {"bad key!": "v"}
    refused = kubectl_in(clusters, bad_key, "create")
    assert refused.returncode != 0
    assert ('metadata.labels: Invalid value: "bad key!": name part must consist of alphanumeric characters'
            in refused.stderr), refused.stderr
    long_value = configmap("labels2", ns)
    long_value["metadata"]["labels"] = {"app": "x" * 100}
    refused = kubectl_in(clusters, long_value, "create")
    assert refused.returncode != 0 and "must be no more than 63 characters" in refused.stderr
    annotated = configmap("labels3", ns)
    annotated["metadata"]["annotations"] = {"a": "x" * (256 * 1024)}
    refused = kubectl_in(clusters, annotated, "create")
    assert refused.returncode != 0
    assert "metadata.annotations: Too long: may not be more than 262144 bytes" in refused.stderr
    fine = configmap("labels4", ns)
    fine["metadata"]["labels"] = {"example.com/app": "web", "tier": ""}
    kubectl_in(clusters, fine, "create", check=True)


@pytest.mark.parametrize(
    ("framing", "expected"),
    [
        (b"Content-Length: -5\r\n\r\n", b"HTTP/1.1 400"),
        (b"Content-Length: 1_0\r\n\r\n0123456789", b"HTTP/1.1 400"),
        (b"Transfer-Encoding: chunked\r\n\r\n-5\r\nabc\r\n0\r\n\r\n", b"HTTP/1.1 400"),
        (b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", b"HTTP/1.1 400"),
        (b"Transfer-Encoding: gzip\r\n\r\n", b"HTTP/1.1 501"),
    ],
)
def test_malformed_lengths_get_an_answer_and_no_traceback(apis: dict[str, Api], clusters: Any, ns: str,
                                                          framing: bytes, expected: bytes) -> None:
    log = daemon_log(clusters)
    offset = log.stat().st_size
    api = apis[clusters.names[0]]
    head = f"POST /api/v1/namespaces/{ns}/configmaps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    answer = api.raw(head.encode() + framing)
    assert answer.startswith(expected), answer[:200]
    assert b"connection: close" in answer.lower()
    assert api.request("GET", "/api/v1/namespaces/default").status_code == 200
    with log.open("rb") as handle:
        handle.seek(offset)
        assert b"Traceback" not in handle.read()
