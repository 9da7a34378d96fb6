"""The scheduler's pure plan: filters (cordon, taints, selector/affinity, pod count) and spreading."""

from __future__ import annotations

from typing import Any

import pytest

from tether.local.nodes.scheduling import Decision, choose_node, quantity, tolerates

Obj = dict[str, Any]


def node(name: str, labels: dict[str, str] | None = None, *, taints: list[Obj] | None = None,
         unschedulable: bool = False, pods: str | None = None) -> Obj:
    spec: Obj = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    status: Obj = {"allocatable": {"pods": pods}} if pods is not None else {}
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec, "status": status}


def pod(**spec: Any) -> Obj:
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}


def req(*terms: Obj) -> Obj:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def expr(key: str, op: str, *values: str) -> Obj:
    return {"key": key, "operator": op, "values": list(values)} if values else {"key": key, "operator": op}


GPU = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
SOFT = {"key": "slow", "value": "yes", "effect": "PreferNoSchedule"}
EVICT = {"key": "maint", "effect": "NoExecute"}
NODES = [node("a", {"rack": "0", "size": "4"}), node("b", {"rack": "0", "size": "8"}),
         node("c", {"rack": "1", "size": "16"})]


@pytest.mark.parametrize(
    ("the_pod", "nodes", "counts", "expected"),
    [
        # spreading: fewest pods first, then the name
        (pod(), NODES, {}, "a"),
        (pod(), NODES, {"a": 2, "b": 1, "c": 1}, "b"),
        (pod(), NODES, {"a": 1, "b": 1}, "c"),
        # nodeSelector
        (pod(nodeSelector={"rack": "1"}), NODES, {"c": 5}, "c"),
        (pod(nodeSelector={"rack": "0", "size": "8"}), NODES, {}, "b"),
        # required node affinity: terms are ORed, expressions ANDed
        (pod(affinity=req({"matchExpressions": [expr("rack", "In", "1", "2")]})), NODES, {}, "c"),
        (pod(affinity=req({"matchExpressions": [expr("rack", "NotIn", "0")]})), NODES, {}, "c"),
        (pod(affinity=req({"matchExpressions": [expr("size", "Gt", "4"), expr("size", "Lt", "16")]})), NODES, {}, "b"),
        (pod(affinity=req({"matchExpressions": [expr("rack", "Exists")]})), NODES, {"a": 1}, "b"),
        (pod(affinity=req({"matchExpressions": [expr("rack", "DoesNotExist")]})),
         [*NODES, node("d")], {}, "d"),
        (pod(affinity=req({"matchFields": [expr("metadata.name", "In", "c")]})), NODES, {}, "c"),
        (pod(affinity=req({"matchExpressions": [expr("rack", "In", "9")]},
                          {"matchFields": [expr("metadata.name", "NotIn", "a", "b")]})), NODES, {}, "c"),
        # preferred affinity outweighs spreading
        (pod(affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": [expr("rack", "In", "1")]}}]}}),
         NODES, {"c": 9}, "c"),
        # taints: NoSchedule and NoExecute filter, PreferNoSchedule only scores
        (pod(), [node("a", taints=[GPU]), node("b")], {"b": 5}, "b"),
        (pod(tolerations=[{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]),
         [node("a", taints=[GPU]), node("b")], {"b": 5}, "a"),
        (pod(tolerations=[{"key": "gpu", "operator": "Exists"}]), [node("a", taints=[GPU]), node("b")], {"b": 1}, "a"),
        (pod(tolerations=[{"operator": "Exists"}]), [node("a", taints=[GPU, EVICT])], {}, "a"),
        (pod(), [node("a", taints=[EVICT]), node("b")], {"b": 3}, "b"),
        (pod(), [node("a", taints=[SOFT]), node("b")], {"b": 3}, "b"),
        (pod(), [node("a", taints=[SOFT])], {}, "a"),
        # cordon, and what tolerates it
        (pod(), [node("a", unschedulable=True), node("b")], {"b": 7}, "b"),
        (pod(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]),
         [node("a", unschedulable=True), node("b")], {"b": 7}, "a"),
        # pod capacity
        (pod(), [node("a", pods="2"), node("b", pods="110")], {"a": 0, "b": 1}, "a"),
        (pod(), [node("a", pods="2"), node("b", pods="110")], {"a": 2, "b": 50}, "b"),
    ],
)
def test_choose_node(the_pod: Obj, nodes: list[Obj], counts: dict[str, int], expected: str) -> None:
    assert choose_node(the_pod, nodes, counts) == Decision(node=expected)


@pytest.mark.parametrize(
    ("the_pod", "nodes", "counts", "message"),
    [
        (pod(nodeSelector={"rack": "9"}), NODES, {},
         "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."),
        (pod(nodeSelector={"rack": "1"}), [node("a", {"rack": "1"}, taints=[GPU]), *NODES[:2]], {},
         "0/3 nodes are available: 1 node(s) had untolerated taint {gpu: true}, "
         "2 node(s) didn't match Pod's node affinity/selector."),
        (pod(), [node("a", unschedulable=True), node("b", pods="1"), node("c", taints=[EVICT])], {"b": 1},
         "0/3 nodes are available: 1 Too many pods, 1 node(s) had untolerated taint {maint: }, "
         "1 node(s) were unschedulable."),
        # cordon is checked before taints: one reason per node
        (pod(), [node("a", unschedulable=True, taints=[GPU])], {},
         "0/1 nodes are available: 1 node(s) were unschedulable."),
        (pod(affinity=req({})), NODES, {},  # an empty term matches nothing
         "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."),
        (pod(), [], {}, "no nodes available to schedule pods"),
    ],
)
def test_unschedulable_messages(the_pod: Obj, nodes: list[Obj], counts: dict[str, int], message: str) -> None:
    decision = choose_node(the_pod, nodes, counts)
    assert decision.node is None
    assert decision.message == message


def test_reasons_histogram() -> None:
    decision = choose_node(pod(nodeSelector={"rack": "1"}), [node("a", taints=[GPU]), *NODES], {})
    assert decision.node == "c"
    decision = choose_node(pod(nodeSelector={"rack": "7"}), [node("a", taints=[GPU]), *NODES], {})
    assert decision.reasons == (("node(s) didn't match Pod's node affinity/selector", 3),
                                ("node(s) had untolerated taint {gpu: true}", 1))


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"key": "k", "value": "v", "effect": "NoSchedule"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
        ({"key": "k", "value": "v"}, {"key": "k", "value": "v", "effect": "NoExecute"}, True),  # any effect
        ({"key": "k", "value": "w"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, False),
        ({"key": "k", "operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
        ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, {"key": "k", "effect": "NoSchedule"}, False),
        ({"operator": "Exists"}, {"key": "anything", "effect": "NoSchedule"}, True),
        ({"key": "", "operator": "Equal"}, {"key": "", "effect": "NoSchedule"}, False),
        ({"key": "k"}, {"key": "k", "effect": "NoSchedule"}, True),  # empty value equals empty value
    ],
)
def test_tolerates(toleration: Obj, taint: Obj, expected: bool) -> None:
    assert tolerates(toleration, taint) is expected


@pytest.mark.parametrize(("text", "value"), [("110", 110), ("1M", 1_000_000), ("2k", 2000), ("1Ki", 1024),
                                             ("1.5k", 1500), ("junk", 0), ("", 0)])
def test_quantity(text: str, value: int) -> None:
    assert quantity(text) == value
