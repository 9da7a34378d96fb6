"""`tether local down` then `up` keeps every object, and resourceVersions keep increasing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_util import manifest, root_conftest

pytestmark = pytest.mark.e2e

_root = root_conftest()
Clusters = Any
start_clusters = _root.start_clusters
tether = _root.tether

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "notes.restart.example.com"},
    "spec": {
        "group": "restart.example.com",
        "scope": "Namespaced",
        "names": {"plural": "notes", "singular": "note", "kind": "Note"},
        "versions": [{"name": "v1", "served": True, "storage": True,
                      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}


@pytest.fixture
def own_clusters(tmp_path: Path) -> Iterator[Clusters]:
    data_dir = tmp_path / "data"
    started = start_clusters(data_dir, ["solo"], tmp_path / "cache")
    try:
        yield started
    finally:
        tether("local", "down", "--data-dir", str(data_dir))


def list_revision(c: Clusters) -> int:
    return int(json.loads(c.kubectl("get", "--raw", "/api/v1/configmaps").stdout)["metadata"]["resourceVersion"])


def snapshot(c: Clusters) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for kind in ("namespaces", "configmaps", "deployments.apps", "secrets", "customresourcedefinitions", "notes.restart.example.com"):
        for item in c.kubectl_json("get", kind, "-A")["items"]:
            meta = item["metadata"]
            if kind == "deployments.apps":
                # Controllers keep a Deployment's status (and so its resourceVersion and the
                # status manager's entry) moving while pods restart: what must survive is the rest.
                item.pop("status", None)
                meta.pop("resourceVersion", None)
                meta["managedFields"] = [m for m in meta.get("managedFields", []) if m.get("subresource") != "status"]
            found[f"{kind}/{meta.get('namespace', '')}/{meta['name']}"] = item
    return found


def test_down_up_keeps_everything(own_clusters: Clusters) -> None:
    c = own_clusters
    c.kubectl("create", "-f", "-", input=manifest({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "keep"}}))
    c.kubectl("create", "configmap", "cm", "-n", "keep", "--from-literal=a=1")
    c.kubectl("create", "deployment", "dep", "-n", "keep", "--image=nginx:1.27")
    c.kubectl("create", "secret", "generic", "sec", "-n", "keep", "--from-literal=k=v")
    c.kubectl("apply", "-f", "-", input=manifest(CRD))
    c.kubectl("wait", "--for=condition=established", "crd/notes.restart.example.com", "--timeout=20s")
    c.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "restart.example.com/v1", "kind": "Note", "metadata": {"name": "n1", "namespace": "keep"}, "text": "hi"}))
    c.kubectl("label", "-n", "keep", "cm", "cm", "stage=before")
    before = snapshot(c)
    assert "notes.restart.example.com/keep/n1" in before
    top_rv = max(int(o["metadata"]["resourceVersion"]) for o in before.values() if "resourceVersion" in o["metadata"])
    list_rv = list_revision(c)
    assert list_rv >= top_rv

    down = tether("local", "down", "--data-dir", str(c.data_dir))
    assert down.returncode == 0, down.stderr
    assert c.kubectl("get", "ns", check=False, timeout=20).returncode != 0

    again = start_clusters(c.data_dir, ["solo"], c.cache_root)
    assert again.servers == c.servers  # same address: kubeconfig and caches stay valid
    after = snapshot(again)
    assert after.keys() == before.keys()
    for key, obj in before.items():
        if key.startswith("deployments"):
            # The deployment controller may record status after the restart; the object is the same.
            for part in ("spec", "kind", "apiVersion"):
                assert after[key][part] == obj[part], key
            for field in ("uid", "creationTimestamp", "labels", "generation"):
                assert after[key]["metadata"].get(field) == obj["metadata"].get(field), key
        else:
            assert after[key] == obj, key

    # The CR type is served again and new writes get higher resourceVersions.
    assert again.kubectl_json("get", "-n", "keep", "note", "n1")["text"] == "hi"
    again.kubectl("label", "-n", "keep", "cm", "cm", "stage=after", "--overwrite")
    new_rv = int(again.kubectl_json("get", "-n", "keep", "cm", "cm")["metadata"]["resourceVersion"])
    assert new_rv > list_rv
    again.kubectl("create", "configmap", "fresh", "-n", "keep", "--from-literal=b=2")
    fresh_rv = int(again.kubectl_json("get", "-n", "keep", "cm", "fresh")["metadata"]["resourceVersion"])
    assert fresh_rv > new_rv
    assert list_revision(again) >= fresh_rv
