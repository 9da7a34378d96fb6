"""The pure parts of the API server limits: decoders, field tables, metadata and CRD rules,
JSON patch bounds, RE2 patterns. Table-driven; the e2e side is tests/security/."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether.local import bodies, builtin_fields, crds, schema
from tether.local.errors import ApiError
from tether.local.patching import (
    PatchError,
    PatchTooLarge,
    apply_json_patch,
    apply_strategic_merge_patch,
    merge_schema_for,
)
from tether.local.validation import fields, meta
from tether.objects.jsonpatch import json_equal, json_key

# ---------------------------------------------------------------------------------------------
# bodies


@pytest.mark.parametrize(
    ("content_type", "body", "value"),
    [
        ("application/json", b'{"a": [1, 2.5, null, true]}', {"a": [1, 2.5, None, True]}),
        ("", b"", None),
        ("application/yaml", b"a: 2001-12-14\nb: 0x10\nc: yes\n", {"a": "2001-12-14", "b": 16, "c": True}),
        ("application/yaml", b"a: !!binary aGVs\n  bG8=\n", {"a": "aGVsbG8="}),
        ("application/yaml", b"1: a\ntrue: b\nnull: c\n1.5: d\n", {"1": "a", "true": "b", "null": "c", "1.5": "d"}),
        ("application/yaml", b"x: &a {k: v}\ny: *a\n", {"x": {"k": "v"}, "y": {"k": "v"}}),
    ],
)
def test_bodies_decode_to_plain_json(content_type: str, body: bytes, value: Any) -> None:
    decoded = bodies.decode(content_type, body)
    assert decoded.value == value
    json.dumps(decoded.value, allow_nan=False)


@pytest.mark.parametrize(
    ("content_type", "body", "message"),
    [
        ("application/json", b'{"a": NaN}', "NaN is not valid JSON"),
        ("application/json", b'{"a": 1e400}', "out of range"),
        ("application/json", b"[" * 201 + b"]" * 201, "deeper than 200 levels"),
        ("application/json", b"[" * 50_000 + b"]" * 50_000, "deeper than 200 levels"),
        ("application/yaml", b"a: " + b"[" * 201 + b"]" * 201, "deeper than 200 levels"),
        ("application/yaml", b"a: &a [*a]", "deeper than 200 levels"),
        ("application/yaml", b"a: .nan", "not a JSON number"),
        ("application/yaml", b"a: !!set {x}", "has no JSON form"),
        ("application/yaml", b"a: !custom x", "has no JSON form"),
        ("application/yaml", b"? [a]\n: b", "could not be decoded as YAML"),
        ("application/vnd.kubernetes.protobuf", b"nope", "missing k8s"),
        ("text/html", b"<p>", "text/html is unsupported"),
    ],
)
def test_bodies_refuse_with_a_4xx(content_type: str, body: bytes, message: str) -> None:
    with pytest.raises(ApiError) as info:
        bodies.decode(content_type, body)
    assert 400 <= info.value.code < 500
    assert message in info.value.message


def test_yaml_alias_bomb_is_refused_by_its_expanded_size() -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"{c}: &{c} [" + ",".join([f"*{p}"] * 9) + "]" for c, p in zip("bcdefg", "abcdef", strict=True)]
    with pytest.raises(ApiError) as info:
        bodies.decode("application/yaml", "\n".join(lines).encode())
    assert "aliases expand to more than 3145728 bytes" in info.value.message


@pytest.mark.parametrize(
    ("content_type", "body", "duplicates"),
    [
        ("application/json", b'{"spec": {"a": 1, "a": 2}, "b": [{"c": 1, "c": 1}]}', ("b[0].c", "spec.a")),
        ("application/json", b'{"a": 1, "a": 2}', ("a",)),
        ("application/yaml", b"spec:\n  a: 1\n  a: 2\n", ("spec.a",)),
        ("application/yaml", b"base: &b {a: 1}\nx:\n  <<: *b\n  a: 2\n", ()),
        ("application/json", b'{"a": 1}', ()),
    ],
)
def test_bodies_report_duplicated_keys_as_field_paths(content_type: str, body: bytes,
                                                     duplicates: tuple[str, ...]) -> None:
    assert bodies.decode(content_type, body).duplicates == duplicates


def test_apply_bodies_try_json_then_yaml() -> None:
    assert bodies.decode_json_or_yaml(b'{"a": 1}').value == {"a": 1}
    assert bodies.decode_json_or_yaml(b"a: 1").value == {"a": 1}
    with pytest.raises(ApiError):
        bodies.decode_json_or_yaml(b"[" * 300 + b"]" * 300)


# ---------------------------------------------------------------------------------------------
# built-in fields


def _deployment(**container: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "labelz": {}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}}, "strategy": {"typo": 1},
                     "template": {"metadata": {"labels": {"a": "b"}},
                                  "spec": {"containers": [{"name": "c", "image": "i", **container}],
                                           "affinity": {"anything": {"goes": 1}}}}},
            "status": {"whatever": 1}}


def test_unknown_fields_of_a_deployment_are_found_and_removed() -> None:
    obj = _deployment(imagePullPolicyy="Always", env=[{"name": "A", "valueFrom": {"bogus": 1}}])
    found = builtin_fields.unknown_fields("apps", "Deployment", obj, has_status=True, remove=True)
    assert found == ["metadata.labelz", "spec.strategy.typo", "spec.template.spec.containers[0].env[0].valueFrom.bogus",
                     "spec.template.spec.containers[0].imagePullPolicyy"]
    assert builtin_fields.unknown_fields("apps", "Deployment", obj, has_status=True, remove=False) == []
    assert obj["spec"]["template"]["spec"]["affinity"] == {"anything": {"goes": 1}}  # ANY: kept


@pytest.mark.parametrize(
    ("group", "kind", "obj", "found"),
    [
        ("", "ConfigMap", {"data": {}, "spec": {}, "metadata": {"name": "x"}}, ["spec"]),
        ("", "Node", {"spec": {"anything": 1}, "extra": 1, "metadata": {"x": 1}}, ["metadata.x"]),
        ("", "Service", {"spec": {"ports": [{"port": 1, "prot": "TCP"}]}}, ["spec.ports[0].prot"]),
        ("rbac.authorization.k8s.io", "Role", {"rules": [{"verbs": [], "verb": []}]}, ["rules[0].verb"]),
    ],
)
def test_unknown_fields_by_kind(group: str, kind: str, obj: dict[str, Any], found: list[str]) -> None:
    assert builtin_fields.unknown_fields(group, kind, obj, has_status=False, remove=False) == found


@pytest.mark.parametrize(
    ("obj", "problem"),
    [
        ({"spec": "x"}, "cannot unmarshal string into Go struct field Deployment.spec of type v1.DeploymentSpec"),
        ({"spec": {"template": {"spec": {"containers": {}}}}},
         "Deployment.spec.template.spec.containers of type []v1.Container"),
        ({"metadata": {"finalizers": "a"}}, "Deployment.metadata.finalizers of type []string"),
        ({"metadata": {"finalizers": [1]}}, "of type []string"),
        ({"spec": {"template": {"spec": {"containers": [{"name": "c", "args": [1]}]}}}}, "args of type []string"),
        ({"spec": None, "metadata": {"name": "x"}}, None),
        ({"spec": {"strategy": None, "replicas": "x"}}, None),  # replicas: the validation's to report
    ],
)
def test_shape_problems_are_decoding_errors(obj: dict[str, Any], problem: str | None) -> None:
    found = builtin_fields.shape_problem("apps", "Deployment", "v1", obj, has_status=True)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found
        assert found.startswith('Deployment in version "v1" cannot be handled as a Deployment: json: ')


def test_shape_check_drops_typed_nulls_like_a_go_decoder() -> None:
    obj: dict[str, Any] = {"spec": None, "metadata": {"labels": None, "name": "x"}, "extra": None}
    assert builtin_fields.shape_problem("apps", "Deployment", "v1", obj, has_status=True) is None
    assert obj == {"metadata": {"labels": None, "name": "x"}, "extra": None}


# ---------------------------------------------------------------------------------------------
# metadata and CRDs


@pytest.mark.parametrize(
    ("key", "problems"),
    [
        ("app", []),
        ("example.com/app", []),
        ("a.b-c_d", []),
        ("bad key!", ["name part must consist of"]),
        ("x" * 64, ["name part must be no more than 63 characters"]),
        ("/a", ["prefix part must be non-empty"]),
        ("a/", ["name part must be non-empty", "name part must consist of"]),
        ("Example.com/a", ["prefix part a lowercase RFC 1123 subdomain"]),
        ("a/b/c", ["a qualified name must consist of"]),
        ("app\n", ["name part must consist of"]),
    ],
)
def test_qualified_names(key: str, problems: list[str]) -> None:
    found = fields.qualified_name(key)
    assert len(found) == len(problems)
    for text, expected in zip(found, problems, strict=True):
        assert text.startswith(expected)


@pytest.mark.parametrize(
    ("value", "ok"),
    [("", True), ("v1.2_x-y", True), ("x" * 63, True), ("x" * 64, False), ("-a", False), ("a b", False)],
)
def test_label_values(value: str, ok: bool) -> None:
    assert (not fields.label_value(value)) is ok


def test_metadata_causes_name_the_field_and_the_value() -> None:
    causes = [c for c in meta.object_meta("", "ConfigMap", {"name": "ok", "labels": {"bad key!": "v"},
                                                            "annotations": {"a": "x" * 262144}})
              if c.field != "metadata.name"]
    assert [(c.field, c.message.split(":")[0]) for c in causes] == [
        ("metadata.labels", "Invalid value"), ("metadata.annotations", "Too long")]
    assert causes[0].message.startswith('Invalid value: "bad key!": name part must consist')
    assert causes[1].message == "Too long: may not be more than 262144 bytes"
    assert meta.object_meta("", "ConfigMap", {"name": "ok", "annotations": {"A.example.com/Upper_Case": "x"}}) == []


def _crd(group: str, plural: str = "widgets", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": f"{plural}.{group}", "annotations": annotations or {}},
            "spec": {"group": group, "scope": "Namespaced", "names": {"plural": plural, "kind": "Widget"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {"type": "object"}}}]}}


@pytest.mark.parametrize(
    ("crd", "messages"),
    [
        (_crd("example.com"), []),
        (_crd("example"), ['Invalid value: "example": should be a domain with at least one dot']),
        (_crd("Example.com"), ["a lowercase RFC 1123 subdomain"]),
        (_crd("x.k8s.io"), ['Required value: protected groups must have approval annotation']),
        (_crd("kubernetes.io"), ["Required value: protected groups"]),
        (_crd("x.k8s.io", annotations={"api-approved.kubernetes.io": "unapproved, experimental"}), []),
        (_crd("x.k8s.io", annotations={"api-approved.kubernetes.io": "https://github.com/kubernetes/x/pull/1"}), []),
        (_crd("x.k8s.io", annotations={"api-approved.kubernetes.io": "yes"}), ["approval annotation with a URL"]),
        (_crd("apps", "deployments"), ["should be a domain with at least one dot",
                                       "deployments.apps is built into the API server"]),
        (_crd("networking.k8s.io", "ingresses", {"api-approved.kubernetes.io": "unapproved"}),
         ["ingresses.networking.k8s.io is built into the API server"]),
    ],
)
def test_crd_group_and_builtin_rules(crd: dict[str, Any], messages: list[str]) -> None:
    from tether.local.resources import Registry

    causes = crds.validation_causes(crd, builtin=Registry.with_builtins().is_builtin)
    assert len(causes) == len(messages), causes
    for cause, message in zip(causes, messages, strict=True):
        assert message in cause.message


def test_registry_never_lets_a_crd_replace_a_builtin() -> None:
    from tether.local.resources import Registry, ResourceType

    registry = Registry.with_builtins()
    builtin = registry.lookup("apps", "v1", "deployments")
    fake = ResourceType(group="apps", version="v1", plural="deployments", singular="deployment",
                        kind="Deployment", namespaced=True, crd=True)
    registry.set_crd_types("deployments.apps", [fake])
    registry.remove_crd_types("deployments.apps")
    assert registry.lookup("apps", "v1", "deployments") is builtin


# ---------------------------------------------------------------------------------------------
# patches


def test_json_patch_operation_count_is_bounded() -> None:
    with pytest.raises(PatchTooLarge, match="The allowed maximum operations in a JSON patch is 10000, got 10001"):
        apply_json_patch({}, [{"op": "test", "path": "", "value": {}}] * 10_001)


def test_json_patch_copy_bomb_stops_at_the_accumulated_copy_limit() -> None:
    ops = [{"op": "add", "path": "/x", "value": ["lol"]}] + [{"op": "copy", "from": "/x", "path": "/x/-"}] * 40
    with pytest.raises(PatchTooLarge, match="accumulated copy size limit"):
        apply_json_patch({}, ops)


def test_json_patch_copies_within_the_limit_work() -> None:
    ops = [{"op": "add", "path": "/x", "value": ["lol"]}] + [{"op": "copy", "from": "/x", "path": "/x/-"}] * 10
    result = apply_json_patch({}, ops)
    assert len(json.dumps(result)) > 5_000


def test_json_patch_cannot_nest_deeper_than_the_limit() -> None:
    deep: Any = 1
    for _ in range(150):
        deep = {"a": deep}
    apply_json_patch({"x": {}}, [{"op": "add", "path": "/x/y", "value": deep}])
    with pytest.raises(PatchError, match="more than 200 levels deep"):
        apply_json_patch({"x": {}}, [{"op": "add", "path": "/x/y", "value": deep},
                                     {"op": "copy", "from": "/x", "path": "/x/y/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/z"}])


@pytest.mark.parametrize("token", ["99999999999999999999999999", "٣", "-1"])
def test_json_patch_odd_array_indexes_are_patch_errors(token: str) -> None:
    with pytest.raises(PatchError):
        apply_json_patch({"a": [1]}, [{"op": "remove", "path": f"/a/{token}"}])


def test_strategic_merge_of_long_keyed_lists_matches_by_key() -> None:
    schema = merge_schema_for("apps", "Deployment")
    assert schema is not None
    containers = [{"name": f"c{i}", "image": "a"} for i in range(3000)]
    doc = {"spec": {"template": {"spec": {"containers": containers}}}}
    patch = {"spec": {"template": {"spec": {"containers": [{"name": f"c{i}", "image": "b"} for i in range(3000)]
                                            + [{"name": "c1", "$patch": "delete"}, {"name": "new", "image": "n"}]}}}}
    merged = apply_strategic_merge_patch(doc, patch, schema)["spec"]["template"]["spec"]["containers"]
    assert len(merged) == 3000 and merged[0] == {"name": "c0", "image": "b"}
    assert merged[1]["name"] == "c2" and merged[-1] == {"name": "new", "image": "n"}


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [(1, 1.0, True), (True, 1, False), ({"a": [1, "x"]}, {"a": [1.0, "x"]}, True), ([1, 2], [2, 1], False),
     (None, None, True), ("1", 1, False), ({"a": 1}, {"a": 1, "b": 2}, False)],
)
def test_json_key_agrees_with_json_equal(a: Any, b: Any, equal: bool) -> None:
    assert json_equal(a, b) is equal
    assert (json_key(a) == json_key(b)) is equal


# ---------------------------------------------------------------------------------------------
# RE2 patterns


def test_patterns_match_in_linear_time_with_go_semantics() -> None:
    sch = {"type": "object", "properties": {"w": {"type": "string", "pattern": "^(a+)+$"}}}
    violations = schema.validate({"w": "a" * 5000 + "!"}, sch)
    assert [v.field for v in violations] == ["w"]
    assert schema.validate({"w": "a" * 5000}, sch) == []
    newline = {"type": "object", "properties": {"w": {"type": "string", "pattern": "^a$"}}}
    assert [v.field for v in schema.validate({"w": "a\n"}, newline)] == ["w"]  # RE2's $: end of text


@pytest.mark.parametrize("pattern", ["(?=a)", "(a)\\1", "[", "a{1001}", "(?<!x)y"])
def test_patterns_re2_cannot_compile_are_refused_at_crd_creation(pattern: str) -> None:
    problems = schema.check_structural(
        {"type": "object", "properties": {"w": {"type": "string", "pattern": pattern}}})
    assert len(problems) == 1
    assert "properties[w].pattern: Invalid value:" in problems[0]
    assert "must be a valid regular expression, but isn't: error parsing regexp" in problems[0]
