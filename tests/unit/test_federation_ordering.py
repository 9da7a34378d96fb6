"""Apply and delete order of objects in a member (tether.federation.ordering)."""

from __future__ import annotations

import pytest

from tether.federation.model import WorkItem
from tether.federation.ordering import apply_order, delete_order, tier

KINDS_SHUFFLED = [
    "Ingress", "Deployment", "Service", "RoleBinding", "Secret", "Namespace", "Widget",
    "ConfigMap", "CustomResourceDefinition", "Role", "ServiceAccount", "Job",
    "PersistentVolumeClaim", "ValidatingWebhookConfiguration",
]
EXPECTED = [
    "Namespace", "CustomResourceDefinition",
    "ServiceAccount", "ConfigMap", "Secret", "PersistentVolumeClaim", "Role", "RoleBinding",
    "Service",
    "Deployment", "Job",
    "Ingress", "Widget", "ValidatingWebhookConfiguration",  # the rest keep input order
]


def test_apply_and_delete_order_for_manifests() -> None:
    manifests = [{"kind": k, "metadata": {"name": k.lower()}} for k in KINDS_SHUFFLED]
    assert [m["kind"] for m in apply_order(manifests)] == EXPECTED
    assert [m["kind"] for m in delete_order(manifests)] == list(reversed(EXPECTED))


def test_apply_order_for_work_items_is_stable() -> None:
    works = [WorkItem("c", {"kind": "ConfigMap", "metadata": {"name": n}}) for n in "zya"]
    works.insert(1, WorkItem("c", {"kind": "Namespace", "metadata": {"name": "ns"}}))
    ordered = apply_order(works)
    assert [w.manifest["metadata"]["name"] for w in ordered] == ["ns", "z", "y", "a"]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("Namespace", 0), ("ClusterRole", 1), ("Service", 2), ("StatefulSet", 3), ("Foo", 4)],
)
def test_tiers(kind: str, expected: int) -> None:
    assert tier(kind) == expected
