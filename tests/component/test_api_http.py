"""The API server over real HTTPS, in-process: authentication, negotiation, bad input."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator

import httpx
import pytest

from tether.local.cluster import LocalCluster

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


@pytest.fixture
def cluster(in_process_cluster: LocalCluster) -> LocalCluster:
    return in_process_cluster


def _trust(local: LocalCluster, *, client_cert: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(local.pki.ca_cert))
    if client_cert:
        context.load_cert_chain(local.pki.admin_cert, local.pki.admin_key)
    return context


@pytest.fixture
async def admin(cluster: LocalCluster) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=cluster.url, verify=_trust(cluster, client_cert=True)) as client:
        yield client


async def test_unauthenticated_requests_get_401_but_health_is_public(cluster: LocalCluster) -> None:
    async with httpx.AsyncClient(base_url=cluster.url, verify=_trust(cluster, client_cert=False)) as anon:
        denied = await anon.get("/api/v1/namespaces")
        assert denied.status_code == 401 and denied.json()["reason"] == "Unauthorized"
        assert (await anon.get("/readyz")).text == "ok"
        wrong = await anon.get("/api/v1/namespaces", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        right = await anon.get("/api/v1/namespaces", headers={"Authorization": f"Bearer {cluster.pki.token()}"})
        assert right.status_code == 200
        names = [n["metadata"]["name"] for n in right.json()["items"]]
        assert names == ["default", "kube-node-lease", "kube-public", "kube-system"]


async def test_discovery_is_aggregated_or_legacy_by_accept(admin: httpx.AsyncClient) -> None:
    legacy = await admin.get("/apis")
    assert legacy.json()["kind"] == "APIGroupList"
    aggregated = await admin.get("/apis", headers={"Accept": AGGREGATED + ",application/json"})
    assert aggregated.headers["content-type"] == AGGREGATED
    groups = {item["metadata"]["name"] for item in aggregated.json()["items"]}
    assert {"apps", "batch", "apiextensions.k8s.io", "coordination.k8s.io"} <= groups
    core = await admin.get("/api/v1")
    pods = next(r for r in core.json()["resources"] if r["name"] == "pods")
    assert pods["shortNames"] == ["po"] and pods["categories"] == ["all"]


async def test_bad_input_is_rejected_and_loses_nothing(admin: httpx.AsyncClient) -> None:
    url = "/api/v1/namespaces/default/configmaps"
    ok = await admin.post(url, json={"metadata": {"name": "keep"}, "data": {"a": "1"}})
    assert ok.status_code == 201
    malformed = await admin.post(url, content=b"{not json", headers={"Content-Type": "application/json"})
    assert malformed.status_code == 400 and malformed.json()["reason"] == "BadRequest"
    bad_yaml = await admin.post(url, content=b"a: [", headers={"Content-Type": "application/yaml"})
    assert bad_yaml.status_code == 400
    invalid = await admin.post(url, json={"metadata": {"name": "Not_Valid"}})
    assert invalid.status_code == 422
    assert invalid.json()["details"]["causes"][0]["field"] == "metadata.name"
    huge = await admin.post(url, json={"metadata": {"name": "big"}, "data": {"a": "x" * (3 * 1024 * 1024 + 1)}})
    assert huge.status_code == 413
    unknown = await admin.get("/api/v1/namespaces/default/widgets")
    assert unknown.status_code == 404 and unknown.json()["reason"] == "NotFound"
    stale = await admin.put(f"{url}/keep", json={"metadata": {"name": "keep", "resourceVersion": "1"}, "data": {}})
    assert stale.status_code == 409 and stale.json()["reason"] == "Conflict"
    kept = await admin.get(f"{url}/keep")
    assert kept.json()["data"] == {"a": "1"}
    listed = await admin.get(url)
    names = {o["metadata"]["name"] for o in listed.json()["items"]} - {"kube-root-ca.crt"}
    assert names == {"keep"}


async def test_dry_run_does_not_persist(admin: httpx.AsyncClient) -> None:
    url = "/api/v1/namespaces/default/configmaps"
    dry = await admin.post(url, params={"dryRun": "All"}, json={"metadata": {"name": "ghost"}})
    assert dry.status_code == 201 and dry.json()["metadata"]["uid"]
    assert (await admin.get(f"{url}/ghost")).status_code == 404


async def test_watch_streams_events_in_order_over_chunked_http(admin: httpx.AsyncClient) -> None:
    url = "/api/v1/namespaces/default/configmaps"
    start = (await admin.get(url)).json()["metadata"]["resourceVersion"]
    await admin.post(url, json={"metadata": {"name": "w"}, "data": {"v": "1"}})
    await admin.patch(f"{url}/w", content=json.dumps({"data": {"v": "2"}}),
                      headers={"Content-Type": "application/merge-patch+json"})
    await admin.delete(f"{url}/w")
    seen: list[tuple[str, str]] = []
    params = {"watch": "true", "resourceVersion": start, "timeoutSeconds": "1"}
    async with admin.stream("GET", url, params=params) as response:
        assert response.headers["transfer-encoding"] == "chunked"
        async for line in response.aiter_lines():
            event = json.loads(line)
            seen.append((event["type"], event["object"].get("data", {}).get("v", "")))
    assert seen == [("ADDED", "1"), ("MODIFIED", "2"), ("DELETED", "2")]


async def test_openapi_hash_follows_crds(admin: httpx.AsyncClient) -> None:
    before = (await admin.get("/openapi/v3")).json()["paths"]
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": {"type": "object",
                                                         "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }
    created = await admin.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd)
    assert created.status_code == 201, created.text
    after = (await admin.get("/openapi/v3")).json()["paths"]
    assert "apis/example.com/v1" in after and "apis/example.com/v1" not in before
    doc = (await admin.get("/openapi/" + "v3/" + after["apis/example.com/v1"]["serverRelativeURL"].split("/v3/", 1)[1]))
    operation = next(iter(doc.json()["paths"].values()))["patch"]
    assert operation["x-kubernetes-group-version-kind"]["kind"] == "Widget"
    assert any(p["name"] == "fieldValidation" for p in operation["parameters"])
