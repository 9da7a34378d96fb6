"""managedFields and server-side apply: field sets, FieldsV1, pruning, conflicts and force."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tether.local.patching import (
    ApplyConflictError,
    FieldConflict,
    PatchError,
    fieldset_of,
    from_fields_v1,
    merge_schema_for,
    record_update,
    server_side_apply,
    to_fields_v1,
)

CM = merge_schema_for("", "ConfigMap")
DEPLOY = merge_schema_for("apps", "Deployment")
SERVICE = merge_schema_for("", "Service")


def configmap(data: dict[str, str] | None = None, **metadata: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm1", "namespace": "default", **metadata},
    }
    if data is not None:
        obj["data"] = data
    return obj


def deployment(containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d1"},
        "spec": {
            "selector": {"matchLabels": {"app": "d1"}},
            "template": {"metadata": {"labels": {"app": "d1"}}, "spec": {"containers": containers}},
        },
    }


def apply(
    live: dict[str, Any] | None,
    applied: dict[str, Any],
    manager: str = "kubectl",
    *,
    force: bool = False,
    schema: Any = CM,
    now: str = "t2",
) -> dict[str, Any]:
    api_version = applied.get("apiVersion", "v1")
    return server_side_apply(
        live, applied, manager=manager, force=force, api_version=api_version, now=now, schema=schema
    )


def update(
    old: dict[str, Any] | None,
    new: dict[str, Any],
    manager: str,
    *,
    schema: Any = CM,
    now: str = "t1",
    subresource: str = "",
) -> dict[str, Any]:
    return record_update(
        old,
        new,
        manager=manager,
        api_version=new.get("apiVersion", "v1"),
        now=now,
        schema=schema,
        subresource=subresource,
    )


def entries(obj: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (e["manager"], e["operation"], e["fieldsV1"])
        for e in obj["metadata"].get("managedFields", [])
    ]


def without_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"].pop("managedFields", None)
    return out


# -- field sets and FieldsV1 ---------------------------------------------------------------

FIELDSETS: list[tuple[str, dict[str, Any], Any, dict[str, Any]]] = [
    (
        "configmap: server metadata and type are not owned",
        configmap(
            {"a": "1"}, uid="u", resourceVersion="5", labels={"app": "x"}, managedFields=[{}]
        ),
        CM,
        {"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:app": {}}}},
    ),
    (
        "deployment: list-map keys, defaulted protocol, atomic selector",
        deployment(
            [
                {
                    "name": "c",
                    "image": "nginx",
                    "ports": [{"containerPort": 80}],
                    "env": [{"name": "A", "value": "1"}],
                    "args": ["x"],
                }
            ]
        ),
        DEPLOY,
        {
            "f:spec": {
                "f:selector": {},
                "f:template": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {
                        "f:containers": {
                            'k:{"name":"c"}': {
                                ".": {},
                                "f:args": {},
                                "f:env": {'k:{"name":"A"}': {".": {}, "f:name": {}, "f:value": {}}},
                                "f:image": {},
                                "f:name": {},
                                "f:ports": {
                                    'k:{"containerPort":80,"protocol":"TCP"}': {
                                        ".": {},
                                        "f:containerPort": {},
                                    }
                                },
                            }
                        }
                    },
                },
            }
        },
    ),
    (
        "sets, ownerReferences and empty maps",
        configmap(finalizers=["a/b"], ownerReferences=[{"uid": "u1", "name": "o"}], annotations={}),
        CM,
        {
            "f:metadata": {
                "f:annotations": {},
                "f:finalizers": {'v:"a/b"': {}},
                "f:ownerReferences": {'k:{"uid":"u1"}': {".": {}, "f:name": {}, "f:uid": {}}},
            }
        },
    ),
    (
        "custom resource: no schema, lists are atomic",
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": {"items": [{"name": "a"}], "size": 3},
        },
        None,
        {"f:spec": {"f:items": {}, "f:size": {}}},
    ),
]


@pytest.mark.parametrize(
    ("obj", "schema", "expected"), [c[1:] for c in FIELDSETS], ids=[c[0] for c in FIELDSETS]
)
def test_fieldset_to_fields_v1(obj: dict[str, Any], schema: Any, expected: dict[str, Any]) -> None:
    fields = fieldset_of(obj, schema)
    assert to_fields_v1(fields) == expected
    assert from_fields_v1(expected) == fields


def test_from_fields_v1_reads_real_update_entries() -> None:
    raw = {
        "f:data": {".": {}, "f:a": {}},
        "f:spec": {"f:ports": {'k:{"port":80,"protocol":"TCP"}': {".": {}, "f:port": {}}}},
    }
    assert from_fields_v1(raw) == {
        ("f:data",),
        ("f:data", "f:a"),
        ("f:spec", "f:ports", 'k:{"port":80,"protocol":"TCP"}'),
        ("f:spec", "f:ports", 'k:{"port":80,"protocol":"TCP"}', "f:port"),
    }
    assert to_fields_v1(from_fields_v1(raw)) == raw


@pytest.mark.parametrize("raw", [[], {"f:a": 1}, {"bogus": {}}, "f:a"])
def test_from_fields_v1_rejects_garbage(raw: Any) -> None:
    with pytest.raises(PatchError):
        from_fields_v1(raw)


# -- server-side apply ------------------------------------------------------------------------


def test_apply_creates_with_an_apply_entry() -> None:
    created = apply(None, configmap({"a": "1", "b": "2"}, labels={"x": "y"}), now="t0")
    assert created == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "cm1",
            "namespace": "default",
            "labels": {"x": "y"},
            "managedFields": [
                {
                    "manager": "kubectl",
                    "operation": "Apply",
                    "apiVersion": "v1",
                    "time": "t0",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:data": {"f:a": {}, "f:b": {}},
                        "f:metadata": {"f:labels": {"f:x": {}}},
                    },
                }
            ],
        },
        "data": {"a": "1", "b": "2"},
    }


REAPPLY: list[tuple[str, dict[str, Any], dict[str, Any], Any, dict[str, Any]]] = [
    (
        "removed key is removed",
        configmap({"a": "1", "b": "2"}),
        configmap({"a": "1"}),
        CM,
        configmap({"a": "1"}),
    ),
    (
        "removing the last key drops the map",
        configmap({"a": "1"}, labels={"l": "1"}),
        configmap(labels={"l": "1"}),
        CM,
        configmap(labels={"l": "1"}),
    ),
    (
        "removed label is removed",
        configmap(labels={"a": "1", "b": "2"}),
        configmap(labels={"a": "1"}),
        CM,
        configmap(labels={"a": "1"}),
    ),
    (
        "changed value is updated",
        configmap({"a": "1"}),
        configmap({"a": "2"}),
        CM,
        configmap({"a": "2"}),
    ),
    (
        "removed finalizer is removed",
        configmap(finalizers=["x", "y"]),
        configmap(finalizers=["y"]),
        CM,
        configmap(finalizers=["y"]),
    ),
    (
        "removed env var and container are removed",
        deployment(
            [
                {
                    "name": "c",
                    "image": "a",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                },
                {"name": "sidecar", "image": "b"},
            ]
        ),
        deployment([{"name": "c", "image": "a", "env": [{"name": "A", "value": "4"}]}]),
        DEPLOY,
        deployment([{"name": "c", "image": "a", "env": [{"name": "A", "value": "4"}]}]),
    ),
    (
        "an atomic list is replaced",
        deployment([{"name": "c", "args": ["1", "2"]}]),
        deployment([{"name": "c", "args": ["3"]}]),
        DEPLOY,
        deployment([{"name": "c", "args": ["3"]}]),
    ),
    (
        "custom resource lists are atomic; dropped fields go",
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": {"items": [{"n": 1}, {"n": 2}], "size": 1},
        },
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": {"items": [{"n": 3}]},
        },
        None,
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "spec": {"items": [{"n": 3}]},
        },
    ),
]


@pytest.mark.parametrize(
    ("first", "second", "schema", "expected"), [c[1:] for c in REAPPLY], ids=[c[0] for c in REAPPLY]
)
def test_reapply(
    first: dict[str, Any], second: dict[str, Any], schema: Any, expected: dict[str, Any]
) -> None:
    live = apply(None, first, schema=schema)
    result = apply(live, second, schema=schema)
    assert without_managed_fields(result) == expected
    assert entries(result) == [("kubectl", "Apply", to_fields_v1(fieldset_of(second, schema)))]


def test_fields_the_server_owns_are_not_applied() -> None:
    live = apply(None, configmap({"a": "1"}), now="t0")
    live["metadata"].update(uid="u1", resourceVersion="7", creationTimestamp="2024-01-01T00:00:00Z")
    body = configmap(
        {"a": "1"},
        uid="other",
        resourceVersion="1",
        managedFields=[{"manager": "evil", "operation": "Apply"}],
    )
    body["status"] = {"phase": "x"}
    result = apply(live, body)
    assert result["metadata"]["uid"] == "u1"
    assert result["metadata"]["resourceVersion"] == "7"
    assert "status" not in result
    assert [e["manager"] for e in result["metadata"]["managedFields"]] == ["kubectl"]


def test_apply_keeps_fields_set_by_others() -> None:
    live = update(None, configmap({"other": "x"}), "kubectl-create")
    result = apply(live, configmap({"a": "1"}))
    assert result["data"] == {"other": "x", "a": "1"}
    assert entries(result) == [
        ("kubectl-create", "Update", {"f:data": {".": {}, "f:other": {}}}),
        ("kubectl", "Apply", {"f:data": {"f:a": {}}}),
    ]


def test_conflict_with_an_update_manager() -> None:
    live = update(None, configmap({"a": "1", "b": "1"}), "kubectl-client-side-apply")
    with pytest.raises(ApplyConflictError) as info:
        apply(live, configmap({"a": "2", "b": "1"}))
    assert info.value.conflicts == [
        FieldConflict(manager="kubectl-client-side-apply", field=".data.a", api_version="v1")
    ]
    assert info.value.conflicts[0].message == 'conflict with "kubectl-client-side-apply" using v1'
    assert (
        str(info.value)
        == 'Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using v1: .data.a'
    )


def test_conflict_between_two_appliers_on_a_container_field() -> None:
    live = apply(None, deployment([{"name": "c", "image": "a"}]), "alice", schema=DEPLOY)
    with pytest.raises(ApplyConflictError) as info:
        apply(live, deployment([{"name": "c", "image": "b"}]), "bob", schema=DEPLOY)
    assert info.value.conflicts == [
        FieldConflict("alice", '.spec.template.spec.containers[name="c"].image', "apps/v1")
    ]


def test_conflict_on_an_atomic_list() -> None:
    live = apply(None, deployment([{"name": "c", "args": ["1"]}]), "alice", schema=DEPLOY)
    with pytest.raises(ApplyConflictError) as info:
        apply(live, deployment([{"name": "c", "args": ["2"]}]), "bob", schema=DEPLOY)
    assert [c.field for c in info.value.conflicts] == [
        '.spec.template.spec.containers[name="c"].args'
    ]


def test_force_transfers_ownership() -> None:
    live = update(None, configmap({"a": "1", "b": "1"}), "kubectl-edit")
    result = apply(live, configmap({"a": "2"}), force=True)
    assert result["data"] == {"a": "2", "b": "1"}
    assert entries(result) == [
        ("kubectl-edit", "Update", {"f:data": {".": {}, "f:b": {}}}),
        ("kubectl", "Apply", {"f:data": {"f:a": {}}}),
    ]
    # Having taken the field, dropping it now removes it.
    assert apply(result, configmap({}))["data"] == {"b": "1"}


def test_force_drops_an_entry_left_empty() -> None:
    live = apply(None, configmap({"a": "1"}), "alice")
    result = apply(live, configmap({"a": "2"}), "bob", force=True)
    assert entries(result) == [("bob", "Apply", {"f:data": {"f:a": {}}})]


def test_same_value_is_shared_and_kept_when_one_applier_drops_it() -> None:
    live = apply(None, configmap({"shared": "1", "mine": "1"}), "alice")
    live = apply(live, configmap({"shared": "1"}), "bob")  # same value: no conflict
    assert [m for m, _, _ in entries(live)] == ["alice", "bob"]
    live = apply(live, configmap({"mine": "1"}), "alice")
    assert live["data"] == {"shared": "1", "mine": "1"}  # bob still owns it
    live = apply(live, configmap({}), "bob")
    assert live["data"] == {"mine": "1"}  # now nobody does


def test_field_owned_by_an_updater_survives_the_appliers_drop() -> None:
    live = apply(None, configmap({"a": "1"}))
    # an Update that rewrites a to the same value does not change ownership, a new value does
    edited = update(live, configmap({"a": "1", "z": "9"}), "kubectl-edit")
    assert entries(edited)[0] == ("kubectl", "Apply", {"f:data": {"f:a": {}}})
    result = apply(edited, configmap({}))
    assert result["data"] == {"z": "9"}


def test_dropped_item_stays_while_another_manager_owns_a_field_in_it() -> None:
    live = apply(
        None, deployment([{"name": "c"}, {"name": "sidecar", "image": "a"}]), "alice", schema=DEPLOY
    )
    patched = copy.deepcopy(live)
    patched["spec"]["template"]["spec"]["containers"][1]["image"] = "b"
    live = update(live, patched, "kubectl-set", schema=DEPLOY)
    result = apply(live, deployment([{"name": "c"}]), "alice", schema=DEPLOY)
    # the item and its key survive; alice's other fields in it are released
    assert result["spec"]["template"]["spec"]["containers"] == [
        {"name": "c"},
        {"name": "sidecar", "image": "b"},
    ]


def test_service_ports_merge_by_port_and_protocol() -> None:
    def svc(ports: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "s"},
            "spec": {"ports": ports},
        }

    live = update(
        None, svc([{"port": 53, "protocol": "UDP", "name": "dns"}]), "creator", schema=SERVICE
    )
    result = apply(live, svc([{"port": 53, "name": "dns-tcp"}]), schema=SERVICE)
    assert result["spec"]["ports"] == [
        {"port": 53, "protocol": "UDP", "name": "dns"},
        {"port": 53, "name": "dns-tcp"},
    ]


@pytest.mark.parametrize(
    ("applied", "message"),
    [
        (deployment([{"image": "no-name"}]), "key fields (name)"),
        (deployment([{"name": "c"}, {"name": "c"}]), "duplicate entries"),
    ],
)
def test_apply_rejects_unkeyed_list_items(applied: dict[str, Any], message: str) -> None:
    live = apply(None, deployment([{"name": "c"}]), schema=DEPLOY)
    for base in (None, live):
        with pytest.raises(PatchError) as info:
            apply(base, applied, schema=DEPLOY)
        assert message in str(info.value)


def test_apply_does_not_mutate_inputs() -> None:
    live = update(None, configmap({"a": "1", "b": "2"}), "kubectl-edit")
    applied = configmap({"a": "1", "c": None})  # type: ignore[dict-item]
    before_live, before_applied = copy.deepcopy(live), copy.deepcopy(applied)
    result = apply(live, applied, force=True)
    assert result["data"] == {"a": "1", "b": "2"}
    assert (live, applied) == (before_live, before_applied)


# -- non-apply writes -------------------------------------------------------------------------


def test_update_on_create_records_every_field() -> None:
    created = update(None, configmap({"a": "1"}, labels={"x": "y"}), "kubectl-create", now="t0")
    assert created["metadata"]["managedFields"] == [
        {
            "manager": "kubectl-create",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "t0",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:data": {".": {}, "f:a": {}},
                "f:metadata": {"f:labels": {".": {}, "f:x": {}}},
            },
        }
    ]


def test_update_moves_changed_fields_away_from_other_managers() -> None:
    live = update(None, configmap({"a": "1", "b": "1"}), "creator", now="t0")
    edited = update(
        live,
        configmap({"a": "2", "b": "1", "c": "3"}, managedFields=live["metadata"]["managedFields"]),
        "editor",
        now="t1",
    )
    assert entries(edited) == [
        ("creator", "Update", {"f:data": {".": {}, "f:b": {}}}),
        ("editor", "Update", {"f:data": {"f:a": {}, "f:c": {}}}),
    ]


def test_update_without_managed_fields_in_the_body_keeps_the_stored_ones() -> None:
    live = update(None, configmap({"a": "1"}), "creator", now="t0")
    body = configmap({"a": "1", "b": "2"})  # a PUT body that never had managedFields
    result = update(live, body, "editor")
    assert [m for m, _, _ in entries(result)] == ["creator", "editor"]


def test_update_that_takes_every_field_drops_the_old_entry() -> None:
    live = apply(None, configmap({"a": "1"}), "alice")
    result = update(live, configmap({"a": "2"}), "editor")
    assert entries(result) == [("editor", "Update", {"f:data": {"f:a": {}}})]


def test_update_keeps_what_the_write_did_not_touch() -> None:
    live = update(None, configmap({"a": "1"}), "creator", now="t0")
    result = update(live, configmap({"a": "2"}), "editor")
    assert entries(result) == [
        ("creator", "Update", {"f:data": {}}),
        ("editor", "Update", {"f:data": {"f:a": {}}}),
    ]


def test_removed_fields_leave_the_updaters_set() -> None:
    live = update(None, configmap({"a": "1", "b": "2"}), "creator", now="t0")
    result = update(live, configmap({"a": "1"}), "creator", now="t1")
    assert entries(result) == [("creator", "Update", {"f:data": {".": {}, "f:a": {}}})]
    assert result["metadata"]["managedFields"][0]["time"] == "t1"


def test_noop_update_keeps_the_entry_and_its_time() -> None:
    live = update(None, configmap({"a": "1"}), "creator", now="t0")
    result = update(live, copy.deepcopy(live), "creator", now="t9")
    assert result["metadata"]["managedFields"] == live["metadata"]["managedFields"]


def test_status_subresource_gets_its_own_entry() -> None:
    pod_schema = merge_schema_for("", "Pod")
    live = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c"}]},
    }
    live = update(None, live, "kubectl-create", schema=pod_schema)
    new = copy.deepcopy(live)
    new["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    result = update(live, new, "kubelet", schema=pod_schema, subresource="status")
    status_entry = result["metadata"]["managedFields"][1]
    assert status_entry["subresource"] == "status"
    assert status_entry["fieldsV1"] == {
        "f:status": {
            "f:conditions": {'k:{"type":"Ready"}': {".": {}, "f:status": {}, "f:type": {}}},
            "f:phase": {},
        }
    }


@pytest.mark.parametrize("with_fields", [False, True])
def test_update_without_a_manager_leaves_the_object_alone(with_fields: bool) -> None:
    new = configmap({"a": "1"})
    if with_fields:
        new["metadata"]["managedFields"] = [
            {"manager": "x", "operation": "Update", "fieldsV1": {"f:data": {}}}
        ]
    assert update(None, new, "") == new


def test_update_does_not_mutate_inputs() -> None:
    old = update(None, configmap({"a": "1"}), "creator", now="t0")
    new = configmap({"a": "2"}, managedFields=copy.deepcopy(old["metadata"]["managedFields"]))
    before_old, before_new = copy.deepcopy(old), copy.deepcopy(new)
    update(old, new, "editor")
    assert (old, new) == (before_old, before_new)


def test_apply_after_updates_then_kubectl_apply_twice() -> None:
    """The conformance scenario: apply, drop a key, re-apply; the key is gone (item 8)."""
    live = apply(None, configmap({"a": "1", "b": "2"}), now="t0")
    live = update(
        live, {**live, "metadata": {**live["metadata"], "labels": {"team": "x"}}}, "kubectl-label"
    )
    live = apply(live, configmap({"a": "1"}))
    assert live["data"] == {"a": "1"}
    assert live["metadata"]["labels"] == {"team": "x"}
