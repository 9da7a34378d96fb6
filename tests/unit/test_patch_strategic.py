"""Strategic merge patch: the directives kubectl and the Python client send, per docs/api-server-notes.md."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tether.local.patching import (
    MergeSchema,
    PatchError,
    apply_strategic_merge_patch,
    merge_schema_for,
)


def schema_for(group: str, kind: str) -> MergeSchema:
    schema = merge_schema_for(group, kind)
    assert schema is not None
    return schema


DEPLOYMENT = schema_for("apps", "Deployment")
POD = schema_for("", "Pod")


def deployment(containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d1"},
        "spec": {"replicas": 1, **spec, "template": {"spec": {"containers": containers}}},
    }


def test_kubectl_client_side_apply_removes_env_var_and_container() -> None:
    """The exact patch kubectl 1.32 sent after B and sidecar were deleted from the manifest."""
    live = deployment(
        [
            {
                "name": "c",
                "image": "nginx",
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            },
            {"name": "sidecar", "image": "busybox"},
        ]
    )
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "$setElementOrder/containers": [{"name": "c"}],
                    "containers": [
                        {
                            "$setElementOrder/env": [{"name": "A"}],
                            "env": [{"name": "A", "value": "4"}, {"$patch": "delete", "name": "B"}],
                            "name": "c",
                        },
                        {"$patch": "delete", "name": "sidecar"},
                    ],
                }
            }
        }
    }
    result = apply_strategic_merge_patch(live, patch, DEPLOYMENT)
    assert result == deployment(
        [{"name": "c", "image": "nginx", "env": [{"name": "A", "value": "4"}]}]
    )


def pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": spec}


CASES: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    (
        "maps merge and null deletes",
        {"metadata": {"labels": {"a": "1", "b": "2"}}},
        {"metadata": {"labels": {"a": None, "c": "3"}}},
        {"metadata": {"labels": {"b": "2", "c": "3"}}},
    ),
    (
        "containers merge by name; new ones append",
        pod_spec({"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}),
        {"spec": {"containers": [{"name": "b", "image": "z"}, {"name": "c", "image": "w"}]}},
        pod_spec(
            {
                "containers": [
                    {"name": "a", "image": "x"},
                    {"name": "b", "image": "z"},
                    {"name": "c", "image": "w"},
                ]
            }
        ),
    ),
    (
        "kubectl set image",
        pod_spec({"containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 80}]}]}),
        {"spec": {"containers": [{"name": "a", "image": "x:2"}]}},
        pod_spec({"containers": [{"name": "a", "image": "x:2", "ports": [{"containerPort": 80}]}]}),
    ),
    (
        "env merges by name, ports by containerPort, volumeMounts by mountPath",
        pod_spec(
            {
                "containers": [
                    {
                        "name": "a",
                        "env": [{"name": "X", "value": "1"}],
                        "ports": [{"containerPort": 80, "name": "http"}],
                        "volumeMounts": [{"mountPath": "/d", "name": "v"}],
                    }
                ]
            }
        ),
        {
            "spec": {
                "containers": [
                    {
                        "name": "a",
                        "env": [{"name": "Y", "value": "2"}],
                        "ports": [{"containerPort": 80, "name": "web"}, {"containerPort": 443}],
                        "volumeMounts": [{"mountPath": "/d", "readOnly": True}],
                    }
                ]
            }
        },
        pod_spec(
            {
                "containers": [
                    {
                        "name": "a",
                        "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}],
                        "ports": [{"containerPort": 80, "name": "web"}, {"containerPort": 443}],
                        "volumeMounts": [{"mountPath": "/d", "name": "v", "readOnly": True}],
                    }
                ]
            }
        ),
    ),
    (
        "args, command, tolerations and envFrom are replaced whole",
        pod_spec(
            {
                "containers": [
                    {"name": "a", "args": ["1", "2"], "envFrom": [{"configMapRef": {"name": "x"}}]}
                ],
                "tolerations": [{"key": "a"}],
            }
        ),
        {
            "spec": {
                "containers": [
                    {"name": "a", "args": ["3"], "envFrom": [{"secretRef": {"name": "y"}}]}
                ],
                "tolerations": [{"key": "b"}],
            }
        },
        pod_spec(
            {
                "containers": [
                    {"name": "a", "args": ["3"], "envFrom": [{"secretRef": {"name": "y"}}]}
                ],
                "tolerations": [{"key": "b"}],
            }
        ),
    ),
    (
        "initContainers, volumes, imagePullSecrets, hostAliases, topologySpreadConstraints",
        pod_spec(
            {
                "initContainers": [{"name": "i", "image": "x"}],
                "volumes": [{"name": "v", "emptyDir": {}}],
                "imagePullSecrets": [{"name": "s1"}],
                "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["a"]}],
                "topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 1}],
            }
        ),
        {
            "spec": {
                "initContainers": [{"name": "i", "image": "y"}],
                "volumes": [{"name": "w", "configMap": {"name": "c"}}],
                "imagePullSecrets": [{"name": "s2"}],
                "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["b"]}],
                "topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 2}],
            }
        },
        pod_spec(
            {
                "initContainers": [{"name": "i", "image": "y"}],
                "volumes": [
                    {"name": "v", "emptyDir": {}},
                    {"name": "w", "configMap": {"name": "c"}},
                ],
                "imagePullSecrets": [{"name": "s1"}, {"name": "s2"}],
                "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["b"]}],
                "topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 2}],
            }
        ),
    ),
    (
        "ephemeralContainers (kubectl debug)",
        pod_spec({"containers": [{"name": "a"}]}),
        {"spec": {"ephemeralContainers": [{"name": "debugger", "image": "busybox"}]}},
        pod_spec(
            {
                "containers": [{"name": "a"}],
                "ephemeralContainers": [{"name": "debugger", "image": "busybox"}],
            }
        ),
    ),
    (
        "$patch: replace on a list",
        pod_spec({"containers": [{"name": "a"}, {"name": "b"}]}),
        {"spec": {"containers": [{"name": "c"}, {"$patch": "replace"}]}},
        pod_spec({"containers": [{"name": "c"}]}),
    ),
    (
        "$patch: replace on a map",
        {"metadata": {"labels": {"a": "1", "b": "2"}}},
        {"metadata": {"labels": {"$patch": "replace", "c": "3"}}},
        {"metadata": {"labels": {"c": "3"}}},
    ),
    (
        "$patch: delete on a map removes it",
        pod_spec({"containers": [{"name": "a", "securityContext": {"runAsUser": 1}}]}),
        {"spec": {"containers": [{"name": "a", "securityContext": {"$patch": "delete"}}]}},
        pod_spec({"containers": [{"name": "a"}]}),
    ),
    (
        "$patch: delete of an element that does not exist is a no-op",
        pod_spec({"containers": [{"name": "a"}]}),
        {"spec": {"containers": [{"name": "zzz", "$patch": "delete"}]}},
        pod_spec({"containers": [{"name": "a"}]}),
    ),
    (
        "$patch: replace on one element replaces only that element",
        pod_spec({"containers": [{"name": "a", "image": "x", "args": ["1"]}, {"name": "b"}]}),
        {"spec": {"containers": [{"name": "a", "image": "y", "$patch": "replace"}]}},
        pod_spec({"containers": [{"name": "a", "image": "y"}, {"name": "b"}]}),
    ),
    (
        "finalizers are a merged primitive list",
        {"metadata": {"finalizers": ["a", "b"]}},
        {"metadata": {"finalizers": ["b", "c"]}},
        {"metadata": {"finalizers": ["a", "b", "c"]}},
    ),
    (
        "$deleteFromPrimitiveList removes finalizers",
        {"metadata": {"finalizers": ["a", "b", "c"]}},
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a", "c"]}},
        {"metadata": {"finalizers": ["b"]}},
    ),
    (
        "$deleteFromPrimitiveList of the last finalizer drops the list",
        {"metadata": {"finalizers": ["a"]}},
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}},
        {"metadata": {}},
    ),
    (
        "$deleteFromPrimitiveList combined with additions",
        {"metadata": {"finalizers": ["a", "b"]}},
        {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "finalizers": ["c"]}},
        {"metadata": {"finalizers": ["b", "c"]}},
    ),
    (
        "ownerReferences merge by uid",
        {"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]}},
        {
            "metadata": {
                "ownerReferences": [{"uid": "1", "controller": True}, {"uid": "2", "name": "b"}]
            }
        },
        {
            "metadata": {
                "ownerReferences": [
                    {"uid": "1", "name": "a", "controller": True},
                    {"uid": "2", "name": "b"},
                ]
            }
        },
    ),
    (
        "status conditions merge by type",
        {
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "Scheduled", "status": "True"},
                ]
            }
        },
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        {
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "Scheduled", "status": "True"},
                ]
            }
        },
    ),
    (
        "$setElementOrder reorders listed items, unlisted ones keep their slot",
        pod_spec({"containers": [{"name": "a"}, {"name": "injected"}, {"name": "b"}]}),
        {"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}},
        pod_spec({"containers": [{"name": "b"}, {"name": "injected"}, {"name": "a"}]}),
    ),
    (
        "$setElementOrder places a new item where the order says",
        pod_spec({"containers": [{"name": "a"}, {"name": "b"}]}),
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
                "containers": [{"name": "c"}],
            }
        },
        pod_spec({"containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}]}),
    ),
    (
        "$setElementOrder on a primitive list",
        {"metadata": {"finalizers": ["a", "b"]}},
        {"metadata": {"$setElementOrder/finalizers": ["b", "a"]}},
        {"metadata": {"finalizers": ["b", "a"]}},
    ),
    (
        "an unusable $setElementOrder is dropped",
        pod_spec({"containers": [{"name": "a"}, {"name": "b"}]}),
        {"spec": {"$setElementOrder/containers": ["b", "a"]}},
        pod_spec({"containers": [{"name": "a"}, {"name": "b"}]}),
    ),
    (
        "$retainKeys on Deployment strategy (Recreate from RollingUpdate)",
        deployment([], strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}),
        {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}},
        deployment([], strategy={"type": "Recreate"}),
    ),
    (
        "$retainKeys on a volume source switches emptyDir to configMap",
        pod_spec({"volumes": [{"name": "v", "emptyDir": {}}]}),
        {
            "spec": {
                "volumes": [
                    {"name": "v", "$retainKeys": ["configMap", "name"], "configMap": {"name": "c"}}
                ]
            }
        },
        pod_spec({"volumes": [{"name": "v", "configMap": {"name": "c"}}]}),
    ),
    (
        "new values have their directives and nulls stripped",
        {"metadata": {"name": "p"}},
        {
            "spec": {
                "containers": [
                    {"name": "a", "env": [{"name": "X", "$patch": "delete"}], "image": None}
                ],
                "$setElementOrder/containers": [{"name": "a"}],
            }
        },
        {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "env": []}]}},
    ),
    (
        "type change: list replaced by map",
        {"data": ["a"]},
        {"data": {"k": "v"}},
        {"data": {"k": "v"}},
    ),
    (
        "$patch: merge is the default",
        {"metadata": {"labels": {"a": "1"}}},
        {"metadata": {"labels": {"$patch": "merge", "b": "2"}}},
        {"metadata": {"labels": {"a": "1", "b": "2"}}},
    ),
]


@pytest.mark.parametrize(
    ("doc", "patch", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_pod_directives(
    doc: dict[str, Any], patch: dict[str, Any], expected: dict[str, Any]
) -> None:
    schema = DEPLOYMENT if doc.get("kind") == "Deployment" else POD
    assert apply_strategic_merge_patch(doc, patch, schema) == expected


TEMPLATE_PATHS = [
    ("apps", "Deployment", ["spec", "template", "spec"]),
    ("apps", "ReplicaSet", ["spec", "template", "spec"]),
    ("apps", "StatefulSet", ["spec", "template", "spec"]),
    ("apps", "DaemonSet", ["spec", "template", "spec"]),
    ("batch", "Job", ["spec", "template", "spec"]),
    ("batch", "CronJob", ["spec", "jobTemplate", "spec", "template", "spec"]),
    ("", "ReplicationController", ["spec", "template", "spec"]),
    ("", "PodTemplate", ["template", "spec"]),
    ("", "Pod", ["spec"]),
]


def nest(path: list[str], value: Any) -> Any:
    for key in reversed(path):
        value = {key: value}
    return value


@pytest.mark.parametrize(("group", "kind", "path"), TEMPLATE_PATHS)
def test_pod_template_merges_wherever_it_appears(group: str, kind: str, path: list[str]) -> None:
    schema = merge_schema_for(group, kind)
    assert schema is not None
    doc = nest(path, {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]})
    patch = nest(
        path, {"containers": [{"name": "a", "image": "x2"}, {"name": "b", "$patch": "delete"}]}
    )
    assert apply_strategic_merge_patch(doc, patch, schema) == nest(
        path, {"containers": [{"name": "a", "image": "x2"}]}
    )


@pytest.mark.parametrize(
    ("group", "kind", "doc", "patch", "expected"),
    [
        (
            "",
            "Service",
            {"spec": {"ports": [{"port": 80, "targetPort": 8080}]}},
            {"spec": {"ports": [{"port": 80, "targetPort": 9090}, {"port": 443}]}},
            {"spec": {"ports": [{"port": 80, "targetPort": 9090}, {"port": 443}]}},
        ),
        (
            "",
            "Node",
            {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}},
            {"status": {"addresses": [{"type": "Hostname", "address": "n1"}]}},
            {
                "status": {
                    "addresses": [
                        {"type": "InternalIP", "address": "10.0.0.1"},
                        {"type": "Hostname", "address": "n1"},
                    ]
                }
            },
        ),
        (
            "",
            "Node",
            {"spec": {"podCIDRs": ["10.0.0.0/24"]}},
            {"spec": {"podCIDRs": ["10.0.1.0/24"]}},
            {"spec": {"podCIDRs": ["10.0.0.0/24", "10.0.1.0/24"]}},
        ),
        (
            "",
            "ConfigMap",
            {"data": {"a": "1"}, "metadata": {"finalizers": ["x"]}},
            {"data": {"b": "2"}, "metadata": {"finalizers": ["y"]}},
            {"data": {"a": "1", "b": "2"}, "metadata": {"finalizers": ["x", "y"]}},
        ),
        (
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            {"status": {"conditions": [{"type": "Established", "status": "False"}]}},
            {"status": {"conditions": [{"type": "Established", "status": "True"}]}},
            {"status": {"conditions": [{"type": "Established", "status": "True"}]}},
        ),
        (
            "rbac.authorization.k8s.io",
            "Role",
            {"rules": [{"verbs": ["get"]}]},
            {"rules": [{"verbs": ["list"]}]},
            {"rules": [{"verbs": ["list"]}]},
        ),
    ],
)
def test_other_kinds(
    group: str, kind: str, doc: dict[str, Any], patch: dict[str, Any], expected: dict[str, Any]
) -> None:
    schema = merge_schema_for(group, kind)
    assert schema is not None
    assert apply_strategic_merge_patch(doc, patch, schema) == expected


@pytest.mark.parametrize(
    ("group", "kind", "known"),
    [
        ("", "ConfigMap", True),
        ("", "Pod", True),
        ("apps", "Deployment", True),
        ("batch", "CronJob", True),
        ("discovery.k8s.io", "EndpointSlice", True),
        ("networking.k8s.io", "Ingress", True),
        ("coordination.k8s.io", "Lease", True),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding", True),
        ("apiextensions.k8s.io", "CustomResourceDefinition", True),
        ("example.com", "Widget", False),
        ("stable.example.com", "CronTab", False),
    ],
)
def test_merge_schema_for_builtins_only(group: str, kind: str, known: bool) -> None:
    assert (merge_schema_for(group, kind) is not None) is known


def test_schema_describes_merge_keys_and_retain_keys() -> None:
    spec = DEPLOYMENT.child("spec")
    containers = spec.child("template").child("spec").child("containers")
    assert containers.merge_key == "name"
    assert containers.child("ports").keys == ("containerPort", "protocol")
    assert containers.child("volumeMounts").merge_key == "mountPath"
    assert containers.child("volumeDevices").merge_key == "devicePath"
    assert containers.child("args").list_type == "atomic"
    assert spec.child("strategy").retain_keys
    assert spec.child("template").child("spec").child("volumes").retain_keys
    assert DEPLOYMENT.child("metadata").child("finalizers").list_type == "set"


@pytest.mark.parametrize(
    ("doc", "patch", "message"),
    [
        (
            pod_spec({"containers": [{"name": "a"}]}),
            {"spec": {"containers": [{"image": "x"}]}},
            "does not contain declared merge key: name",
        ),
        (
            pod_spec({"containers": [{"name": "a"}]}),
            {"spec": {"containers": ["a"]}},
            "does not contain declared merge key",
        ),
        ({"metadata": {}}, {"metadata": {"$patch": "explode"}}, "unknown patch directive"),
        ({"metadata": {}}, {"metadata": {"$frob": 1}}, "unknown patch directive '$frob'"),
        ({"metadata": {}}, {"metadata": {"$retainKeys": "name"}}, "$retainKeys must be a list"),
        (
            {"metadata": {}},
            {"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}},
            "must be a list",
        ),
    ],
)
def test_errors(doc: dict[str, Any], patch: dict[str, Any], message: str) -> None:
    with pytest.raises(PatchError) as info:
        apply_strategic_merge_patch(doc, patch, POD)
    assert message in str(info.value)


def test_non_object_patch_is_rejected() -> None:
    with pytest.raises(PatchError):
        apply_strategic_merge_patch({}, [{"op": "add"}], POD)  # type: ignore[arg-type]


def test_top_level_delete_empties_the_object() -> None:
    assert apply_strategic_merge_patch({"a": 1}, {"$patch": "delete"}, MergeSchema()) == {}


def test_inputs_are_not_mutated() -> None:
    doc = pod_spec(
        {
            "containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]}],
            "volumes": [{"name": "v", "emptyDir": {}}],
        }
    )
    patch = {
        "spec": {
            "containers": [
                {"name": "a", "env": [{"name": "X", "$patch": "delete"}]},
                {"name": "b", "env": [{"name": "Y"}]},
            ],
            "volumes": [
                {"name": "v", "$retainKeys": ["name", "secret"], "secret": {"secretName": "s"}}
            ],
            "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
        }
    }
    before_doc, before_patch = copy.deepcopy(doc), copy.deepcopy(patch)
    result = apply_strategic_merge_patch(doc, patch, POD)
    assert result["spec"]["containers"] == [
        {"name": "b", "env": [{"name": "Y"}]},
        {"name": "a", "env": []},
    ]
    result["spec"]["containers"][0]["env"].append({"name": "Z"})
    result["spec"]["volumes"][0]["secret"]["secretName"] = "changed"
    assert (doc, patch) == (before_doc, before_patch)
