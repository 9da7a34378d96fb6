"""Where a Karmada template's summed status goes, and what is kept per member cluster."""

from __future__ import annotations

from typing import Any

import pytest

from tether.federation.aggregation import reflect_status
from tether.federation.template_status import (
    ANNOTATION,
    AUTO,
    STATUS,
    TemplateStatusTarget,
    decide,
    foreign_status_owner,
)
from tether.kube import KubeError


@pytest.mark.parametrize(("mode", "has_nodes", "foreign", "expected"), [
    (AUTO, False, False, STATUS),  # an API-only hub: .status, as Karmada
    (AUTO, True, False, ANNOTATION),  # a full cluster: its Deployment controller owns .status
    (AUTO, None, False, ANNOTATION),  # cannot list Nodes: never risk fighting a controller
    (AUTO, False, True, ANNOTATION),  # a controller writes this template's status anyway
    (STATUS, True, True, STATUS),
    (ANNOTATION, False, False, ANNOTATION),
])
def test_decide(mode: str, has_nodes: bool | None, foreign: bool, expected: str) -> None:
    assert decide(mode, has_nodes, foreign) == expected


def _managed(*entries: tuple[str, str]) -> dict[str, Any]:
    return {"metadata": {"managedFields": [
        {"manager": m, "subresource": sub} if sub else {"manager": m} for m, sub in entries]}}


def test_foreign_status_owner_reads_the_status_subresource_managers() -> None:
    assert not foreign_status_owner(_managed(("kubectl", ""), ("tether-propagation", "status")),
                                    "tether-propagation")
    assert foreign_status_owner(_managed(("deployment-controller", "status")), "tether-propagation")
    assert not foreign_status_owner({"metadata": {}}, "tether-propagation")


class FakeHost:
    """Answers the Node list; counts the calls."""

    def __init__(self, nodes: list[dict[str, Any]] | None) -> None:
        self.nodes = nodes  # None: forbidden
        self.calls = 0

    async def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        assert (method, path, kwargs.get("params")) == ("GET", "/api/v1/nodes", {"limit": "1"})
        if self.nodes is None:
            raise KubeError(403, "Forbidden", "nodes is forbidden")
        return {"items": self.nodes}


async def test_the_node_check_is_cached_then_asked_again() -> None:
    now = [0.0]
    host = FakeHost([])
    target = TemplateStatusTarget(host, recheck_s=30.0, clock=lambda: now[0])  # type: ignore[arg-type]
    template: dict[str, Any] = {"metadata": {}}
    assert await target.for_template(template, "me") == STATUS
    host.nodes = [{"metadata": {"name": "n"}}]  # a node registers
    now[0] = 10.0
    assert await target.for_template(template, "me") == STATUS and host.calls == 1
    now[0] = 31.0
    assert await target.for_template(template, "me") == ANNOTATION and host.calls == 2


async def test_forbidden_node_list_means_annotation_and_fixed_modes_ask_nothing() -> None:
    host = FakeHost(None)
    assert await TemplateStatusTarget(host).for_template({}, "me") == ANNOTATION  # type: ignore[arg-type]
    fixed = FakeHost([])
    assert await TemplateStatusTarget(fixed, STATUS).for_template({}, "me") == STATUS  # type: ignore[arg-type]
    assert await TemplateStatusTarget(fixed, ANNOTATION).for_template({}, "me") == ANNOTATION  # type: ignore[arg-type]
    assert fixed.calls == 0


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="'sometimes' is not one of auto, status, annotation"):
        TemplateStatusTarget(FakeHost([]), "sometimes")  # type: ignore[arg-type]


@pytest.mark.parametrize(("kind", "status", "expected"), [
    ("Deployment", {"replicas": 4, "readyReplicas": 4, "observedGeneration": 2, "generation": 2,
                    "resourceTemplateGeneration": 1,
                    "conditions": [{"type": "Available", "status": "True"}]},
     {"replicas": 4, "readyReplicas": 4, "observedGeneration": 2, "generation": 2,
      "resourceTemplateGeneration": 1}),
    ("Job", {"active": 1, "ready": 1, "startTime": "t"}, {"active": 1, "startTime": "t"}),
    ("Service", {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}, "conditions": []},
     {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}),
    ("ConfigMap", {"anything": {"kept": True}}, {"anything": {"kept": True}}),
    ("Deployment", None, None),  # not collected yet
])
def test_reflect_status(kind: str, status: dict[str, Any] | None,
                        expected: dict[str, Any] | None) -> None:
    assert reflect_status({"kind": kind}, status) == expected
