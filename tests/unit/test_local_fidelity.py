"""Pure rules behind the API server's answers: Status field order and bytes, object field order,
what a DELETE answers with, a create's resourceVersion, and the always-present status fields."""

from __future__ import annotations

import json

import pytest

from tether.local import deletion, encoding, objects
from tether.local.errors import already_exists, invalid, not_found
from tether.local.operations import set_on_create
from tether.local.resources import BUILTIN_TYPES, ResourceType
from tether.local.validation import fields


def builtin(group: str, kind: str) -> ResourceType:
    return next(rt for rt in BUILTIN_TYPES if rt.group == group and rt.kind == kind)


def test_already_exists_status_bytes_match_kube_apiserver() -> None:
    body = encoding.status_body(already_exists("configmaps", "cm1").status())
    assert body == (b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
                    b'"message":"configmaps \\"cm1\\" already exists","reason":"AlreadyExists",'
                    b'"details":{"name":"cm1","kind":"configmaps"},"code":409}\n')


def test_status_details_order_and_go_escaping() -> None:
    error = not_found("deployments", "a<b", "apps")
    text = encoding.status_body(error.status()).decode()
    assert text.index('"details"') < text.index('"code"')
    assert '"details":{"name":"a\\u003cb","group":"apps","kind":"deployments"}' in text
    assert text.endswith("}\n")


def test_invalid_message_brackets_several_causes_once_each() -> None:
    one = fields.required("spec.a")
    two = fields.required("spec.b")
    assert invalid("Pod", "p", [one]).message == 'Pod "p" is invalid: spec.a: Required value'
    assert invalid("Pod", "p", [one, two, one]).message == \
        'Pod "p" is invalid: [spec.a: Required value, spec.b: Required value]'


def test_builtin_objects_are_put_in_struct_order() -> None:
    obj = {"status": {}, "spec": {}, "metadata": {"labels": {"b": "1", "a": "2"}, "uid": "u", "name": "n"},
           "apiVersion": "v1", "kind": "Service", "extra": 1}
    encoding.order_builtin("Service", obj)
    assert list(obj) == ["kind", "apiVersion", "metadata", "spec", "status", "extra"]
    assert list(obj["metadata"]) == ["name", "uid", "labels"]
    assert list(obj["metadata"]["labels"]) == ["a", "b"]
    secret = {"type": "Opaque", "data": {"z": "", "a": ""}, "metadata": {}, "kind": "Secret", "apiVersion": "v1"}
    encoding.order_builtin("Secret", secret)
    assert list(secret) == ["kind", "apiVersion", "metadata", "data", "type"]
    assert list(secret["data"]) == ["a", "z"]


@pytest.mark.parametrize(("group", "kind", "gone", "returns_object"), [
    ("", "Service", True, True),
    ("", "ServiceAccount", True, True),
    ("", "Pod", True, True),
    ("", "Namespace", True, True),
    ("", "PersistentVolumeClaim", True, True),
    ("storage.k8s.io", "StorageClass", True, True),
    ("", "ConfigMap", True, False),
    ("", "Secret", True, False),
    ("apps", "Deployment", True, False),
    ("apps", "Deployment", False, True),  # held by a finalizer: the object, deletionTimestamp set
])
def test_delete_answer_per_registry(group: str, kind: str, gone: bool, returns_object: bool) -> None:
    assert deletion.returns_object(builtin(group, kind), gone) is returns_object


def test_delete_success_status_names_the_resource() -> None:
    status = deletion.success_status(builtin("apps", "Deployment"), {"metadata": {"name": "d", "uid": "u"}})
    assert json.dumps(status, separators=(",", ":")) == (
        '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success",'
        '"details":{"name":"d","group":"apps","kind":"deployments","uid":"u"}}')


@pytest.mark.parametrize(("value", "refused"), [
    ("1", True), ("42", True), ("18446744073709551615", True),
    ("0", False), ("v1", False), ("", False), (None, False), ("-1", False), ("18446744073709551616", False),
])
def test_resource_version_on_create(value: str | None, refused: bool) -> None:
    assert set_on_create(value) is refused


@pytest.mark.parametrize(("group", "kind", "status"), [
    ("", "Service", {"loadBalancer": {}}),
    ("networking.k8s.io", "Ingress", {"loadBalancer": {}}),
    ("apps", "Deployment", {}),
    ("apps", "ReplicaSet", {"replicas": 0}),
    ("", "PersistentVolumeClaim", {"phase": "Pending"}),
])
def test_always_present_status(group: str, kind: str, status: dict[str, object]) -> None:
    obj: dict[str, object] = {"metadata": {"name": "x"}, "spec": {}}
    objects.default_status(group, kind, obj)
    assert obj["status"] == status


def test_pod_qos_class_follows_resources() -> None:
    assert objects.qos_class({"containers": [{"name": "c"}]}) == "BestEffort"
    limits = {"cpu": "1", "memory": "1Gi"}
    assert objects.qos_class({"containers": [{"resources": {"limits": limits, "requests": limits}}]}) == "Guaranteed"
    assert objects.qos_class({"containers": [{"resources": {"requests": {"cpu": "1"}}}]}) == "Burstable"
