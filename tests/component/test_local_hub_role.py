"""An API-only hub (`tether local up --role hub`), in process: what an API server does itself
happens (namespace lifecycle, garbage collection, ServiceAccounts, ClusterIPs), and nothing
runs a workload."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tether.local import roles
from tether.local.cluster import ClusterConfig, LocalCluster

WAIT_S = 20.0


async def _start(data_dir: Path, role: str | None) -> tuple[LocalCluster, asyncio.Task[None]]:
    local = LocalCluster(ClusterConfig(name="hub", data_dir=data_dir, role=role))
    task = asyncio.create_task(local.run())
    await asyncio.wait_for(local.started.wait(), 10)
    return local, task


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@pytest.fixture
async def hub(tmp_path: Path) -> AsyncIterator[LocalCluster]:
    local, task = await _start(tmp_path / "hub", roles.HUB)
    try:
        yield local
    finally:
        await _stop(task)


@pytest.fixture
async def api(hub: LocalCluster) -> AsyncIterator[httpx.AsyncClient]:
    context = ssl.create_default_context(cafile=str(hub.pki.ca_cert))
    context.load_cert_chain(hub.pki.admin_cert, hub.pki.admin_key)
    async with httpx.AsyncClient(base_url=hub.url, verify=context) as client:
        yield client


async def _until(check: Any, what: str) -> Any:
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        found = await check()
        if found:
            return found
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_a_hub_runs_only_the_api_servers_parts(hub: LocalCluster) -> None:
    kinds = {type(part).__name__ for part in hub.components}
    assert kinds == {"ServiceRegistry", "TokenController", "AggregationController",
                     "APIServiceController"}
    assert hub.kubelet is None and hub.fabric.namespaces == [] and hub.node_count == 0


async def test_deployments_are_stored_but_nothing_runs_them(hub: LocalCluster,
                                                            api: httpx.AsyncClient) -> None:
    labels = {"app": "web"}
    created = await api.post("/apis/apps/v1/namespaces/default/deployments", json={
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}})
    assert created.status_code == 201, created.text
    # What the API server does itself still happens: a new namespace gets its ServiceAccount
    # and root CA from the token controller, and a Service its ClusterIP.
    assert (await api.post("/api/v1/namespaces", json={"metadata": {"name": "team"}})).status_code == 201

    async def default_sa() -> bool:
        return (await api.get("/api/v1/namespaces/team/serviceaccounts/default")).status_code == 200

    await _until(default_sa, "the default ServiceAccount in a new namespace")
    service = await api.post("/api/v1/namespaces/default/services", json={
        "metadata": {"name": "web"}, "spec": {"selector": labels, "ports": [{"port": 80}]}})
    assert service.status_code == 201 and service.json()["spec"]["clusterIP"]
    # ... and nothing a cluster's controllers or nodes would make.
    assert (await api.get("/apis/apps/v1/namespaces/default/replicasets")).json()["items"] == []
    assert (await api.get("/api/v1/pods")).json()["items"] == []
    assert (await api.get("/api/v1/nodes")).json()["items"] == []
    assert (await api.get("/apis/discovery.k8s.io/v1/namespaces/default/endpointslices")).json()[
        "items"] == [] or all(s["metadata"]["name"] == "kubernetes" for s in (await api.get(
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices")).json()["items"])
    deploy = (await api.get("/apis/apps/v1/namespaces/default/deployments/web")).json()
    assert not deploy.get("status", {}).get("replicas")
    groups = [g["name"] for g in (await api.get("/apis")).json()["groups"]]
    assert "metrics.k8s.io" not in groups and "apps" in groups


async def test_namespace_deletion_and_garbage_collection_still_work(hub: LocalCluster,
                                                                    api: httpx.AsyncClient) -> None:
    assert (await api.post("/api/v1/namespaces", json={"metadata": {"name": "gone"}})).status_code == 201
    owner = (await api.post("/api/v1/namespaces/gone/configmaps",
                            json={"metadata": {"name": "owner"}})).json()
    dependent = {"metadata": {"name": "dependent", "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}]}}
    assert (await api.post("/api/v1/namespaces/gone/configmaps", json=dependent)).status_code == 201
    assert (await api.delete("/api/v1/namespaces/gone/configmaps/owner")).status_code == 200

    async def collected() -> bool:
        return (await api.get("/api/v1/namespaces/gone/configmaps/dependent")).status_code == 404

    await _until(collected, "the garbage collector to delete the dependent")
    assert (await api.delete("/api/v1/namespaces/gone")).status_code == 200

    async def namespace_gone() -> bool:
        return (await api.get("/api/v1/namespaces/gone")).status_code == 404

    await _until(namespace_gone, "the namespace controller to finish deleting `gone`")


async def test_the_role_is_kept_with_the_data(tmp_path: Path) -> None:
    data_dir = tmp_path / "hub"
    _, task = await _start(data_dir, roles.HUB)
    await _stop(task)
    again, task = await _start(data_dir, None)  # `down` then `up` without --role
    try:
        assert again.role == roles.HUB and again.kubelet is None
    finally:
        await _stop(task)
    with pytest.raises(roles.RoleError):
        LocalCluster(ClusterConfig(name="hub", data_dir=data_dir, role=roles.CLUSTER))
