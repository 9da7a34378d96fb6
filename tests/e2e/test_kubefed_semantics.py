"""KubeFed's semantics as its users meet them, with the manifests of `examples/kubefed/`.

A hub (`host`) with members `cluster1` and `cluster2`, the names KubeFed's samples use. The
samples' namespace `test-namespace` is shared by the tests, which run in file order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fed_fleet import EXAMPLES, Fleet, fleet_of, ok, tether, until

pytestmark = pytest.mark.e2e

KUBEFED = EXAMPLES / "kubefed"
MEMBERS = ("cluster1", "cluster2")
NS = "test-namespace"
FED = "types.kubefed.io/v1beta1"
HUB_NS = "tether-system"
DELETE_TIMEOUT = "--timeout=60s"


def example(name: str) -> str:
    return str(KUBEFED / name)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with fleet_of(tmp_path_factory.mktemp("kubefed"), tmp_path_factory.mktemp("kubefed-cache"),
                  MEMBERS) as started:
        started.kubectl("host", "apply", "-f", example("namespace-federatednamespace.yaml"))
        yield started


async def in_members(fleet: Fleet, api_version: str, kind: str, name: str,
                     members: tuple[str, ...] = MEMBERS) -> dict[str, Any]:
    return {m: await fleet.get(m, api_version, kind, name, NS) for m in members}


async def replicas(fleet: Fleet, name: str) -> dict[str, Any]:
    found = await in_members(fleet, "apps/v1", "Deployment", name)
    return {m: (o or {}).get("spec", {}).get("replicas") for m, o in found.items()}


async def propagation(fleet: Fleet, kind: str, name: str) -> dict[str, Any]:
    obj = await fleet.get("host", FED, kind, name, NS)
    return (obj or {}).get("status") or {}


def hub_args(fleet: Fleet) -> tuple[str, ...]:
    return ("--host-kubeconfig", str(fleet.kubeconfig), "--host-context", "host")


async def test_configmap_reaches_both_with_override(fleet: Fleet) -> None:
    fleet.kubectl("host", "apply", "-f", example("namespace-federatedconfigmap.yaml"))

    async def both() -> bool:
        found = await in_members(fleet, "v1", "ConfigMap", "test-configmap")
        return [(o or {}).get("data") for o in found.values()] == [
            {"greeting": "hello"}, {"greeting": "hello from cluster2"}]

    await until(both, "test-configmap in both clusters, cluster2's overridden")


async def test_rsp_replicas_beat_a_replicas_override(fleet: Fleet) -> None:
    """KubeFed's scheduling sample: 10 replicas weighted 2:3 give 4 + 6, although the
    FederatedDeployment's override asks cluster2 for 5 (the RSP rewrites that override)."""
    fleet.kubectl("host", "apply", "-f", example("rsp-federateddeployment.yaml"), "-f",
                  example("rsp-replicaschedulingpreference.yaml"))

    async def divided() -> bool:
        return await replicas(fleet, "test-deployment") == {"cluster1": 4, "cluster2": 6}

    await until(divided, "4 + 6 replicas")
    member = await fleet.get("cluster2", "apps/v1", "Deployment", "test-deployment", NS)
    assert member is not None
    assert member["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.27-alpine"

    async def propagated() -> bool:
        conds = (await propagation(fleet, "FederatedDeployment", "test-deployment")).get(
            "conditions") or [{}]
        return conds[0].get("status") == "True"

    await until(propagated, "Propagation True")


async def test_rsp_without_clusters_spreads_evenly(fleet: Fleet) -> None:
    fleet.kubectl("host", "apply", "-f", example("rsp-default-federateddeployment.yaml"), "-f",
                  example("rsp-default-replicaschedulingpreference.yaml"))

    async def even() -> bool:
        return await replicas(fleet, "spread") == {"cluster1": 2, "cluster2": 2}

    await until(even, "2 + 2 replicas from an RSP without preferences")


async def test_kubefedcluster_labels_drive_placement(fleet: Fleet) -> None:
    listed = json.loads(fleet.kubectl("host", "-n", HUB_NS, "get", "kubefedclusters", "-o",
                                      "json").stdout)["items"]
    assert sorted(i["metadata"]["name"] for i in listed) == list(MEMBERS)
    for view in listed:
        ready = [c for c in view["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", view
        assert view["spec"]["secretRef"]["name"] == view["metadata"]["name"]
    fleet.kubectl("host", "apply", "-f", example("kubefedcluster-federatedconfigmap.yaml"))

    async def eu_only(want: dict[str, bool]) -> bool:
        found = await in_members(fleet, "v1", "ConfigMap", "eu-only")
        return {m: o is not None for m, o in found.items()} == want

    # KubeFed's user guide: label the KubeFedCluster
    fleet.kubectl("host", "-n", HUB_NS, "label", "kubefedclusters", "cluster2", "region=eu")
    await until(lambda: eu_only({"cluster1": False, "cluster2": True}), "eu-only in cluster2")
    cluster2 = await fleet.get("host", "cluster.tether.io/v1alpha1", "Cluster", "cluster2")
    assert (cluster2 or {})["metadata"]["labels"].get("region") == "eu"
    # ... or tether's Cluster: the view follows
    fleet.kubectl("host", "label", "clusters.cluster.tether.io", "cluster1", "region=eu")
    await until(lambda: eu_only({"cluster1": True, "cluster2": True}), "eu-only in both")

    async def view_labelled() -> bool:
        view = await fleet.get("host", "core.kubefed.io/v1beta1", "KubeFedCluster", "cluster1",
                               HUB_NS)
        return ((view or {}).get("metadata", {}).get("labels") or {}).get("region") == "eu"

    await until(view_labelled, "cluster1's KubeFedCluster labelled region=eu")
    fleet.kubectl("host", "-n", HUB_NS, "label", "kubefedclusters", "cluster2", "region-")
    await until(lambda: eu_only({"cluster1": True, "cluster2": False}),
                "eu-only gone from cluster2 once its label went")
    fleet.kubectl("host", "label", "clusters.cluster.tether.io", "cluster1", "region-")
    fleet.kubectl("host", "delete", "-f", example("kubefedcluster-federatedconfigmap.yaml"),
                  DELETE_TIMEOUT)


async def test_namespace_placement_leaves_a_cluster_out_without_failing(fleet: Fleet) -> None:
    fleet.kubectl("host", "-n", NS, "patch", "federatednamespace", NS, "--type=merge", "-p",
                  json.dumps({"spec": {"placement": {"clusters": [{"name": "cluster1"}]}}}))

    async def left_cluster2() -> dict[str, Any] | None:
        found = await in_members(fleet, "v1", "ConfigMap", "test-configmap")
        status = await propagation(fleet, "FederatedConfigMap", "test-configmap")
        conds = status.get("conditions") or [{}]
        if found["cluster2"] is None and found["cluster1"] is not None and [
                c["name"] for c in status.get("clusters") or []] == ["cluster1"]:
            return conds[0]
        return None

    cond = await until(left_cluster2, "test-configmap only in cluster1")
    assert cond["status"] == "True", cond
    fleet.kubectl("host", "apply", "-f", example("namespace-federatednamespace.yaml"))

    async def back() -> bool:
        found = await in_members(fleet, "v1", "ConfigMap", "test-configmap")
        return all(o is not None for o in found.values())

    await until(back, "test-configmap back in cluster2 with the namespace")


async def test_deleting_an_object_of_a_disabled_type(fleet: Fleet) -> None:
    ok(tether("disable", "configmaps", *hub_args(fleet)))
    try:
        fleet.kubectl("host", "delete", "-f", example("namespace-federatedconfigmap.yaml"),
                      DELETE_TIMEOUT)

        async def gone() -> bool:
            found = await in_members(fleet, "v1", "ConfigMap", "test-configmap")
            return all(o is None for o in found.values())

        await until(gone, "test-configmap gone from the members")
    finally:
        ok(tether("enable", "configmaps", *hub_args(fleet)))


async def test_deleted_with_its_type_while_the_hub_is_down(fleet: Fleet) -> None:
    fleet.kubectl("host", "apply", "-f", example("namespace-federatedconfigmap.yaml"))

    async def both() -> bool:
        found = await in_members(fleet, "v1", "ConfigMap", "test-configmap")
        return all(o is not None for o in found.values())

    await until(both, "test-configmap in both clusters")
    try:
        with fleet.hub_stopped():
            fleet.kubectl("host", "-n", HUB_NS, "delete", "federatedtypeconfig", "configmaps")
            fleet.kubectl("host", "delete", "-f", example("namespace-federatedconfigmap.yaml"),
                          "--wait=false")

        async def gone() -> bool:
            found = await in_members(fleet, "v1", "ConfigMap", "test-configmap")
            fed = await fleet.get("host", FED, "FederatedConfigMap", "test-configmap", NS)
            return fed is None and all(o is None for o in found.values())

        await until(gone, "the FederatedConfigMap and its copies gone")
    finally:
        ok(tether("enable", "configmaps", *hub_args(fleet)))


async def test_member_unjoined_first(fleet: Fleet) -> None:
    fleet.unjoin("cluster2")
    try:
        fleet.kubectl("host", "delete", "-f", example("rsp-replicaschedulingpreference.yaml"),
                      "-f", example("rsp-federateddeployment.yaml"), DELETE_TIMEOUT)

        async def gone() -> bool:
            return (await replicas(fleet, "test-deployment"))["cluster1"] is None

        await until(gone, "test-deployment gone from cluster1")
    finally:
        fleet.join("cluster2")
    assert not fleet.tracebacks()
