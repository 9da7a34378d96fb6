"""Server-side apply to `/status` of a custom resource honours its CRD's
`x-kubernetes-list-type: map` keyed by `type`: two managers' conditions live side by side, and
an apply drops only the conditions its own manager stopped applying.

The hub writes such statuses: the mirror's `ServiceMirrorEndpointsFresh` condition on a Cluster
whose `Ready` the health controller (another manager) writes, and a MirrorPolicy's `Ready`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tether.app.hub_mirror import condition_reporter
from tether.connect.mirror.policy import API_VERSION as POLICY_API
from tether.connect.mirror.policy import KIND as POLICY_KIND
from tether.connect.mirror.policy import mirror_policy_crd
from tether.federation.crds import CLUSTER_API_VERSION, cluster_crd
from tether.kube import ClusterCredentials, KubeClient, KubeError
from tether.objects import Obj

DEADLINE_S = 60.0


@pytest.fixture
async def client(in_process_cluster: Any) -> AsyncIterator[KubeClient]:
    credentials = ClusterCredentials.from_token(server=in_process_cluster.url, token=in_process_cluster.pki.token(),
                                                ca_bundle=in_process_cluster.pki.ca_cert.read_bytes())
    async with KubeClient(credentials) as c:
        yield c


async def served(client: KubeClient, crd: Obj, obj: Obj) -> None:
    """Create the CRD and then `obj`, once the new type is served."""
    await client.create(crd, field_manager="test")
    async with asyncio.timeout(DEADLINE_S):
        while True:
            try:
                await client.create(obj, field_manager="test")
                return
            except KubeError as exc:
                if exc.code != 404:
                    raise
            await asyncio.sleep(0.1)


def condition(type_: str, status: str = "True") -> Obj:
    return {"type": type_, "status": status, "reason": type_, "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}


def types(obj: Obj) -> list[str]:
    return [str(c["type"]) for c in (obj.get("status") or {}).get("conditions") or []]


async def test_two_managers_conditions_on_a_mirror_policy(client: KubeClient) -> None:
    policy = {"apiVersion": POLICY_API, "kind": POLICY_KIND, "metadata": {"name": "p"},
              "spec": {"mirrorNamespace": "mirrors"}}
    await served(client, mirror_policy_crd(), policy)

    def status(*conditions: Obj) -> Obj:
        return {"apiVersion": POLICY_API, "kind": POLICY_KIND, "metadata": {"name": "p"},
                "status": {"conditions": list(conditions)}}

    await client.apply_status(status(condition("Ready")), field_manager="tether-connect-mirror")
    written = await client.apply_status(status(condition("Audited")), field_manager="an-auditor")
    assert sorted(types(written)) == ["Audited", "Ready"]
    # the mirror's next write changes its own condition and leaves the auditor's
    written = await client.apply_status(status(condition("Ready", "False")), field_manager="tether-connect-mirror")
    assert sorted(types(written)) == ["Audited", "Ready"]
    assert [c["status"] for c in written["status"]["conditions"] if c["type"] == "Ready"] == ["False"]
    # a condition its manager no longer applies goes; the other manager's stays
    written = await client.apply_status(status(condition("Degraded")), field_manager="tether-connect-mirror")
    assert sorted(types(written)) == ["Audited", "Degraded"]
    managers = {(e["manager"], e["operation"], e.get("subresource")) for e in written["metadata"]["managedFields"]}
    assert {("tether-connect-mirror", "Apply", "status"), ("an-auditor", "Apply", "status")} <= managers


async def test_the_mirrors_cluster_condition_leaves_the_health_controllers_ready(client: KubeClient) -> None:
    cluster = {"apiVersion": CLUSTER_API_VERSION, "kind": "Cluster", "metadata": {"name": "gcp"},
               "spec": {"syncMode": "Pull"}}
    await served(client, cluster_crd(), cluster)
    await client.apply_status({"apiVersion": CLUSTER_API_VERSION, "kind": "Cluster", "metadata": {"name": "gcp"},
                               "status": {"conditions": [condition("Ready")]}}, field_manager="tether-health")
    await condition_reporter(client)("gcp", {"status": "True", "reason": "Fresh", "message": "ok"})
    written = await client.get(CLUSTER_API_VERSION, "Cluster", "gcp")
    assert sorted(types(written)) == ["Ready", "ServiceMirrorEndpointsFresh"]


WIDGETS: Obj = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {"group": "example.com", "scope": "Cluster",
             "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "properties": {"spec": {"type": "object", "properties": {
                     "parts": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                               "items": {"type": "object", "required": ["name"],
                                         "properties": {"name": {"type": "string"}, "size": {"type": "integer"}}}},
                     "tags": {"type": "array", "items": {"type": "string"}}}}}}}}]},
}


async def test_an_apply_merges_a_custom_resources_list_map_by_its_keys(client: KubeClient) -> None:
    def widget(*parts: str) -> Obj:
        return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
                "spec": {"parts": [{"name": p, "size": 1} for p in parts]}}

    await served(client, WIDGETS, widget("base"))
    await client.apply(widget("wheel"), field_manager="a")
    written = await client.apply(widget("bell"), field_manager="b")
    assert sorted(p["name"] for p in written["spec"]["parts"]) == ["base", "bell", "wheel"]
    written = await client.apply(widget(), field_manager="a")  # a no longer applies its wheel
    assert sorted(p["name"] for p in written["spec"]["parts"]) == ["base", "bell"]
