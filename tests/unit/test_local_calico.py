"""Calico's CRDs in a local cluster: one store through two groups, and Calico's write checks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.local import calico
from tether.local.errors import ApiError
from tether.local.operations import Operations, WriteOptions
from tether.local.resources import Registry
from tether.local.store import Store

OPTS = WriteOptions(manager="test", user="test")
ALLOW_TO_FLUENTD: dict[str, Any] = {
    "apiVersion": "crd.projectcalico.org/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "allow-to-fluentd", "namespace": "default"},
    "spec": {
        "selector": "app.kubernetes.io/name == 'fluentd'",
        "types": ["Ingress"],
        "ingress": [{
            "action": "Allow",
            "protocol": "TCP",
            "source": {
                "selector": "policy.semaphore.uw.io/name == 'forwarder' && policy.semaphore.uw.io/namespace == "
                            "'sys-log' && policy.semaphore.uw.io/cluster == 'gcp'",
                "namespaceSelector": "global()",
            },
            "destination": {"ports": [8889]},
        }],
    },
}
SET_LABELS = {"managed-by": "semaphore-policy", "policy.semaphore.uw.io/cluster": "gcp",
              "policy.semaphore.uw.io/name": "forwarder", "policy.semaphore.uw.io/namespace": "sys-log"}


@pytest.fixture
def ops(tmp_path: Path) -> Iterator[Operations]:
    store = Store(tmp_path / "state.db")
    operations = Operations(store, Registry.with_builtins())
    namespaces = operations.registry.lookup("", "v1", "namespaces")
    assert namespaces is not None
    operations.create(namespaces, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}},
                      OPTS)
    calico.ensure_crds(operations)
    operations.admission.append(calico.admission)
    yield operations
    store.close()


def _rt(ops: Operations, group: str, plural: str) -> Any:
    version = "v1" if group == calico.V1_GROUP else "v3"
    rt = ops.registry.lookup(group, version, plural)
    assert rt is not None, (group, plural)
    return rt


@pytest.mark.parametrize(("write", "read"), [(calico.V3_GROUP, calico.V1_GROUP), (calico.V1_GROUP, calico.V3_GROUP)])
def test_a_set_written_through_one_group_is_read_through_the_other(ops: Operations, write: str, read: str) -> None:
    version = "v1" if write == calico.V1_GROUP else "v3"
    body = {"apiVersion": f"{write}/{version}", "kind": "GlobalNetworkSet",
            "metadata": {"name": "gcp-sys-log-forwarder", "labels": SET_LABELS},
            "spec": {"nets": ["10.4.5.2/32", "fd00::5/128"]}}
    ops.create(_rt(ops, write, "globalnetworksets"), "", body, OPTS)
    read_rt = _rt(ops, read, "globalnetworksets")
    got = ops.get(read_rt, "", "gcp-sys-log-forwarder")
    assert got["apiVersion"] == read_rt.group_version
    assert got["metadata"]["labels"] == SET_LABELS
    assert got["spec"]["nets"] == ["10.4.5.2/32", "fd00::5/128"]
    assert [o["apiVersion"] for o in ops.list_objects(read_rt, None)] == [read_rt.group_version]
    # an update through the other group is the same object
    got["spec"]["nets"] = ["10.4.5.2/32"]
    ops.update(read_rt, "", "gcp-sys-log-forwarder", got, OPTS)
    again = ops.get(_rt(ops, write, "globalnetworksets"), "", "gcp-sys-log-forwarder")
    assert again["spec"]["nets"] == ["10.4.5.2/32"]


def test_the_allow_to_fluentd_policy_is_accepted_as_written(ops: Operations) -> None:
    created = ops.create(_rt(ops, calico.V1_GROUP, "networkpolicies"), "default", ALLOW_TO_FLUENTD, OPTS)
    assert created["spec"] == ALLOW_TO_FLUENTD["spec"]
    v3 = ops.get(_rt(ops, calico.V3_GROUP, "networkpolicies"), "default", "allow-to-fluentd")
    assert v3["spec"]["ingress"][0]["source"]["namespaceSelector"] == "global()"


@pytest.mark.parametrize(("change", "field"), [
    (lambda s: s.update(selector="app ==="), "spec.selector"),
    (lambda s: s["ingress"][0].update(action="Accept"), "spec.ingress[0].action"),
    (lambda s: s["ingress"][0]["source"].update(namespaceSelector="global("), "spec.ingress[0].source.namespaceSelector"),
    (lambda s: s["ingress"][0]["destination"].update(ports=[70000]), "spec.ingress[0].destination.ports[0]"),
    (lambda s: s["ingress"][0].update(protocol="GRE"), "spec.ingress[0].protocol"),
    (lambda s: s["ingress"][0].pop("protocol"), "spec.ingress[0].destination.ports"),
    (lambda s: s.update(types=["Sideways"]), "spec.types[0]"),
])
def test_policies_calico_would_refuse_are_refused(ops: Operations, change: Any, field: str) -> None:
    import copy

    body = copy.deepcopy(ALLOW_TO_FLUENTD)
    change(body["spec"])
    with pytest.raises(ApiError) as caught:
        ops.create(_rt(ops, calico.V1_GROUP, "networkpolicies"), "default", body, OPTS)
    assert caught.value.code == 422
    assert field in str(caught.value.status())


def test_nets_must_be_cidrs(ops: Operations) -> None:
    body = {"apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet", "metadata": {"name": "bad"},
            "spec": {"nets": ["10.0.0.0/33"]}}
    with pytest.raises(ApiError) as caught:
        ops.create(_rt(ops, calico.V3_GROUP, "globalnetworksets"), "", body, OPTS)
    assert caught.value.code == 422 and "spec.nets[0]" in str(caught.value.status())


@pytest.mark.parametrize(("ports", "ok"), [([80, "443", "8000:8080", "http"], True), (["9000:8000"], False),
                                           (["Http_Port"], False), ([True], False)])
def test_port_forms(ports: list[Any], ok: bool) -> None:
    spec = {"ingress": [{"action": "Allow", "protocol": "TCP", "destination": {"ports": ports}}]}
    assert (calico.policy_causes(spec) == []) == ok


def test_every_kind_in_both_groups() -> None:
    names = {c["metadata"]["name"] for c in calico.calico_crds()}
    for plural in ("globalnetworksets", "networksets", "networkpolicies", "globalnetworkpolicies"):
        assert {f"{plural}.crd.projectcalico.org", f"{plural}.projectcalico.org"} <= names
    assert "ippools.crd.projectcalico.org" in names  # v3 IPPools come from nodes.ippool_crd
