"""Overrides: JSON pointer ops, KubeFed clusterOverrides, Karmada overriders, image components."""

from __future__ import annotations

from typing import Any

import pytest

from tether.federation.images import ImageError, parse_image
from tether.federation.overrides import (
    OverrideError,
    apply_kubefed_overrides,
    apply_overriders,
)
from tether.objects import jsonpatch


def _deploy(*containers: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"replicas": 2, "template": {"spec": {"containers": list(containers)}}},
    }


NGINX = {"name": "nginx", "image": "nginx:1.17", "args": ["-a", "-b"]}
SIDECAR = {"name": "sidecar", "image": "reg.example.com:5000/team/proxy@sha256:" + "a" * 64}


@pytest.mark.parametrize(
    ("doc", "op", "path", "value", "expected"),
    [
        ({"a": 1}, "replace", "/a", 2, {"a": 2}),
        ({"a": 1}, "add", "/b", 2, {"a": 1, "b": 2}),
        ({"a": [1, 2]}, "add", "/a/1", 9, {"a": [1, 9, 2]}),
        ({"a": [1, 2]}, "add", "/a/-", 9, {"a": [1, 2, 9]}),
        ({"a": [1, 2]}, "remove", "/a/0", None, {"a": [2]}),
        ({"a/b": {"~c": 1}}, "replace", "/a~1b/~0c", 2, {"a/b": {"~c": 2}}),
        ({"a": 1}, "add", "", {"z": 0}, {"z": 0}),
    ],
)
def test_pointer_ops(doc: Any, op: str, path: str, value: Any, expected: Any) -> None:
    assert jsonpatch.apply_operation(doc, op, path, value) == expected


@pytest.mark.parametrize(
    ("doc", "op", "path", "message"),
    [
        ({"a": 1}, "replace", "/b", 'path "/b" does not exist'),
        ({"a": 1}, "remove", "/b", 'path "/b" does not exist'),
        ({"a": 1}, "add", "/x/y", 'path "/x/y" does not exist'),
        ({"a": [1]}, "replace", "/a/1", 'path "/a/1": index 1 is out of bounds'),
        ({"a": [1]}, "add", "/a/01", 'path "/a/01": "01" is not a valid array index'),
        ({"a": 1}, "add", "/a/b", 'path "/a/b" does not exist'),
        ({"a": 1}, "move", "/a", "unsupported operation 'move' (want add, remove or replace)"),
        ({"a": 1}, "add", "a", 'path "a" must start with "/"'),
    ],
)
def test_pointer_errors(doc: Any, op: str, path: str, message: str) -> None:
    with pytest.raises(jsonpatch.PatchError) as err:
        jsonpatch.apply_operation(doc, op, path, 1)
    assert err.value.message == message
    assert err.value.path == path


def test_kubefed_overrides_apply_in_order_to_a_copy() -> None:
    obj = _deploy(NGINX)
    out = apply_kubefed_overrides(obj, [
        {"path": "/spec/replicas", "value": 5},
        {"path": "/spec/template/spec/containers/0/image", "value": "nginx:1.14.0-alpine"},
        {"path": "/metadata/annotations", "op": "add", "value": {"foo": "bar"}},
        {"path": "/metadata/annotations/foo", "op": "remove"},
    ])
    assert out["spec"]["replicas"] == 5
    assert out["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.14.0-alpine"
    assert out["metadata"]["annotations"] == {}
    assert obj["spec"]["replicas"] == 2  # the input is not touched


@pytest.mark.parametrize(
    ("override", "path", "message"),
    [
        ({"path": "/spec/nope/x", "value": 1}, "/spec/nope/x", 'path "/spec/nope/x" does not exist'),
        ({"path": "/spec/nope", "value": 1}, "/spec/nope", 'path "/spec/nope" does not exist'),
        ({"path": "/metadata/name", "value": "x"}, "/metadata/name",
         "this path may not be overridden"),
        ({"path": "/kind", "value": "x"}, "/kind", "this path may not be overridden"),
        ({"value": 1}, "", "override path must be a non-empty JSON pointer"),
    ],
)
def test_kubefed_override_errors(override: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(OverrideError) as err:
        apply_kubefed_overrides(_deploy(NGINX), [override])
    assert (err.value.path, err.value.message) == (path, message)


@pytest.mark.parametrize(
    ("image", "parts"),
    [
        ("nginx", ("", "nginx", "", "")),
        ("nginx:1.17", ("", "nginx", "1.17", "")),
        ("library/nginx:1.17", ("library", "nginx", "1.17", "")),  # Karmada's first-slash split
        ("docker.io/library/nginx", ("docker.io", "library/nginx", "", "")),
        ("localhost:5000/app:v1", ("localhost:5000", "app", "v1", "")),
        ("r.io/a@sha256:" + "b" * 64, ("r.io", "a", "", "sha256:" + "b" * 64)),
        ("r.io/a:v1@sha256:" + "b" * 64, ("r.io", "a", "v1", "")),  # tag wins over digest
    ],
)
def test_parse_image(image: str, parts: tuple[str, str, str, str]) -> None:
    parsed = parse_image(image)
    assert (parsed.registry, parsed.repository, parsed.tag, parsed.digest) == parts


@pytest.mark.parametrize(
    ("image", "message"),
    [
        ("", "invalid reference format"),
        ("Nginx", "invalid reference format: repository name must be lowercase"),
        ("nginx:", "invalid reference format"),
        ("a b", "invalid reference format"),
    ],
)
def test_parse_image_errors(image: str, message: str) -> None:
    with pytest.raises(ImageError, match=f"^{message}$"):
        parse_image(image)


@pytest.mark.parametrize(
    ("component", "operator", "value", "expected"),
    [
        ("Registry", "replace", "mirror.io", "mirror.io/nginx:1.17"),
        ("Registry", "add", "-cn", "nginx:1.17"),  # no registry: "" + "-cn"... see below
        ("Registry", "remove", "", "nginx:1.17"),
        ("Repository", "replace", "library/nginx", "library/nginx:1.17"),
        ("Repository", "add", "-slim", "nginx-slim:1.17"),
        ("Repository", "remove", "", ":1.17"),
        ("Tag", "replace", "1.20", "nginx:1.20"),
        ("Tag", "add", "-alpine", "nginx:1.17-alpine"),
        ("Tag", "remove", "", "nginx"),
        ("Tag", "replace", "sha256:" + "c" * 64, "nginx@sha256:" + "c" * 64),
        ("Tag", "replace", "not a tag!", "nginx:1.17"),  # invalid values change nothing
    ],
)
def test_image_components(component: str, operator: str, value: str, expected: str) -> None:
    if component == "Registry" and operator == "add":
        expected = "-cn/nginx:1.17"  # Karmada appends to the (empty) hostname
    out = apply_overriders(_deploy(NGINX), {"imageOverrider": [
        {"component": component, "operator": operator, "value": value}]})
    assert out["spec"]["template"]["spec"]["containers"][0]["image"] == expected


def test_image_overrider_all_containers_and_predicate() -> None:
    out = apply_overriders(_deploy(NGINX, SIDECAR), {"imageOverrider": [
        {"component": "Registry", "operator": "replace", "value": "mirror.io"}]})
    images = [c["image"] for c in out["spec"]["template"]["spec"]["containers"]]
    assert images == ["mirror.io/nginx:1.17", "mirror.io/team/proxy@sha256:" + "a" * 64]
    out = apply_overriders(_deploy(NGINX, SIDECAR), {"imageOverrider": [
        {"predicate": {"path": "/spec/template/spec/containers/1/image"},
         "component": "Tag", "operator": "replace", "value": "v2"}]})
    images = [c["image"] for c in out["spec"]["template"]["spec"]["containers"]]
    assert images == ["nginx:1.17", "reg.example.com:5000/team/proxy:v2"]


@pytest.mark.parametrize(
    ("kind", "doc"),
    [
        ("Pod", {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
        ("CronJob", {"spec": {"jobTemplate": {"spec": {"template": {"spec": {
            "containers": [{"name": "c", "image": "busybox"}]}}}}}}),
    ],
)
def test_image_overrider_kinds(kind: str, doc: dict[str, Any]) -> None:
    obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "x"}, **doc}
    out = apply_overriders(obj, {"imageOverrider": [
        {"component": "Registry", "operator": "replace", "value": "m.io"}]})
    assert "m.io/busybox" in str(out)


def test_image_overrider_errors() -> None:
    with pytest.raises(OverrideError) as err:
        apply_overriders(_deploy({"name": "x", "image": "Bad:Image"}), {"imageOverrider": [
            {"component": "Tag", "operator": "replace", "value": "v"}]})
    assert err.value.path == "/spec/template/spec/containers/0/image"
    with pytest.raises(OverrideError) as err:
        apply_overriders(_deploy(NGINX), {"imageOverrider": [
            {"predicate": {"path": "/spec/template/spec/containers/5/image"},
             "component": "Tag", "operator": "replace", "value": "v"}]})
    assert err.value.path == "/spec/template/spec/containers/5/image"


@pytest.mark.parametrize(
    ("field", "operator", "value", "expected"),
    [
        ("args", "add", ["-c"], ["-a", "-b", "-c"]),
        ("args", "remove", ["-a", "-z"], ["-b"]),
        ("command", "add", ["/bin/app"], ["/bin/app"]),
        ("command", "remove", ["x"], []),  # Karmada creates the field even for remove
    ],
)
def test_command_args(field: str, operator: str, value: list[str], expected: list[str]) -> None:
    overrider = {"commandOverrider" if field == "command" else "argsOverrider": [
        {"containerName": "nginx", "operator": operator, "value": value}]}
    out = apply_overriders(_deploy(NGINX, SIDECAR), overrider)
    containers = out["spec"]["template"]["spec"]["containers"]
    assert containers[0][field] == expected
    assert field not in containers[1]


def test_labels_and_annotations() -> None:
    out = apply_overriders(_deploy(NGINX), {
        "labelsOverrider": [
            {"operator": "add", "value": {"app.kubernetes.io/part-of": "shop", "tier": "web"}},
            {"operator": "replace", "value": {"app": "frontend", "missing": "x"}},
            {"operator": "remove", "value": {"tier": "", "absent": ""}},
        ],
        "annotationsOverrider": [{"operator": "add", "value": {"note": "eu"}}],
    })
    assert out["metadata"]["labels"] == {"app": "frontend", "app.kubernetes.io/part-of": "shop"}
    assert out["metadata"]["annotations"] == {"note": "eu"}


def test_field_overrider_yaml_and_json() -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
          "data": {"db.yaml": "host: a\nport: 1\n", "db.json": '{"host": "a", "port": 1}'}}
    out = apply_overriders(cm, {"fieldOverrider": [
        {"fieldPath": "/data/db.yaml",
         "yaml": [{"subPath": "/host", "operator": "replace", "value": "b"},
                  {"subPath": "/pool", "operator": "add", "value": 5}]},
        {"fieldPath": "/data/db.json",
         "json": [{"subPath": "/port", "operator": "remove"}]},
    ]})
    assert out["data"]["db.yaml"] == "host: b\npool: 5\nport: 1\n"
    assert out["data"]["db.json"] == '{"host":"a"}'
    with pytest.raises(OverrideError) as err:
        apply_overriders(cm, {"fieldOverrider": [
            {"fieldPath": "/data/db.yaml",
             "yaml": [{"subPath": "/nope", "operator": "replace", "value": 1}]}]})
    assert err.value.path == "/data/db.yaml/nope"


def test_overrider_order_plaintext_last() -> None:
    # plaintext runs after the image overrider, so its replace wins
    out = apply_overriders(_deploy(NGINX), {
        "plaintext": [{"path": "/spec/template/spec/containers/0/image", "operator": "replace",
                       "value": "final:1"}],
        "imageOverrider": [{"component": "Tag", "operator": "replace", "value": "2"}],
    })
    assert out["spec"]["template"]["spec"]["containers"][0]["image"] == "final:1"
