"""kubectl delete and wait: finalizers, cascading deletion (GC) and namespace termination."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from e2e_util import Streamed, manifest, poll, unique

pytestmark = pytest.mark.e2e

HOLD = "example.com/hold"
REMOVE_FINALIZERS = '[{"op":"remove","path":"/metadata/finalizers"}]'


def configmap(name: str, ns: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data}


def exists(clusters: Any, *args: str) -> bool:
    result = clusters.kubectl("get", *args, "-o", "name", check=False)
    if result.returncode != 0:
        assert "NotFound" in result.stderr, result.stderr
    return result.returncode == 0


OWNERS = {
    "cm": configmap("owner", "", role="owner"),
    "deploy": {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "owner"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "owner"}}, "template": {
            "metadata": {"labels": {"app": "owner"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}},
    },
}


def owner_and_dependent(clusters: Any, ns: str, *, dependent_finalizer: bool = False, owner: str = "cm") -> str:
    """An owner and a ConfigMap dependent whose ownerReference points at it; returns the owner uid."""
    owner_obj = json.loads(json.dumps(OWNERS[owner]))
    owner_obj["metadata"]["namespace"] = ns
    clusters.kubectl("create", "-f", "-", input=manifest(owner_obj))
    uid = clusters.kubectl_json("get", "-n", ns, owner, "owner")["metadata"]["uid"]
    dep = configmap("dependent", ns, role="dependent")
    dep["metadata"]["ownerReferences"] = [
        {"apiVersion": owner_obj["apiVersion"], "kind": owner_obj["kind"], "name": "owner", "uid": uid,
         "blockOwnerDeletion": True}
    ]
    if dependent_finalizer:
        dep["metadata"]["finalizers"] = [HOLD]
    clusters.kubectl("create", "-f", "-", input=manifest(dep))
    return str(uid)


def test_delete_returns_once_gone(clusters: Any, ns: str) -> None:
    clusters.kubectl("create", "-f", "-", input=manifest(configmap("plain", ns, a="1")))
    out = clusters.kubectl("delete", "-n", ns, "cm", "plain", timeout=20).stdout
    assert out.startswith('configmap "plain" deleted')
    assert not exists(clusters, "-n", ns, "cm", "plain")
    again = clusters.kubectl("delete", "-n", ns, "cm", "plain", check=False)
    assert again.returncode == 1
    assert 'Error from server (NotFound): configmaps "plain" not found' in again.stderr
    assert clusters.kubectl("delete", "-n", ns, "cm", "plain", "--ignore-not-found").returncode == 0


def test_delete_blocks_on_finalizer(clusters: Any, ns: str) -> None:
    obj = configmap("held", ns, a="1")
    obj["metadata"]["finalizers"] = [HOLD]
    clusters.kubectl("create", "-f", "-", input=manifest(obj))
    with Streamed(clusters, "delete", "-n", ns, "cm", "held", "--timeout=30s") as deleting:
        held = poll(lambda: clusters.kubectl_json("get", "-n", ns, "cm", "held")["metadata"].get("deletionTimestamp")
                    and clusters.kubectl_json("get", "-n", ns, "cm", "held"), what="deletionTimestamp")
        assert held["metadata"]["finalizers"] == [HOLD]
        assert held["data"] == {"a": "1"}
        # kubectl prints "deleted" once the DELETE is accepted, then waits for the object to go.
        deleting.wait_for_line(lambda line: 'configmap "held" deleted' in line)
        time.sleep(0.5)
        assert deleting.running(), deleting.snapshot()
        assert exists(clusters, "-n", ns, "cm", "held")
        # Updates other than adding finalizers are still allowed.
        clusters.kubectl("label", "-n", ns, "cm", "held", "still=here")
        added = clusters.kubectl("patch", "-n", ns, "cm", "held", "--type=json",
                                 "-p", '[{"op":"add","path":"/metadata/finalizers/-","value":"example.com/new"}]', check=False)
        assert added.returncode == 1 and "finalizers" in added.stderr
        clusters.kubectl("patch", "-n", ns, "cm", "held", "--type=json", "-p", REMOVE_FINALIZERS)
        code, out, err = deleting.finish(timeout=20)
    assert code == 0, err
    assert 'configmap "held" deleted' in out
    assert not exists(clusters, "-n", ns, "cm", "held")


def test_wait_for_delete_and_jsonpath(clusters: Any, ns: str) -> None:
    obj = configmap("waited", ns, phase="start")
    obj["metadata"]["finalizers"] = [HOLD]
    clusters.kubectl("create", "-f", "-", input=manifest(obj))
    with Streamed(clusters, "wait", "-n", ns, "cm/waited", "--for=jsonpath={.data.phase}=done", "--timeout=20s") as waiting:
        clusters.kubectl("patch", "-n", ns, "cm", "waited", "--type=merge", "-p", '{"data":{"phase":"done"}}')
        code, out, err = waiting.finish()
    assert code == 0, err
    assert out.strip() == "configmap/waited condition met"

    timed_out = clusters.kubectl("wait", "-n", ns, "cm/waited", "--for=jsonpath={.data.phase}=never", "--timeout=1s", check=False)
    assert timed_out.returncode == 1
    assert "timed out" in timed_out.stderr

    clusters.kubectl("delete", "-n", ns, "cm", "waited", "--wait=false")
    with Streamed(clusters, "wait", "-n", ns, "cm/waited", "--for=delete", "--timeout=20s") as waiting:
        time.sleep(0.5)  # let kubectl find the object before it goes (a gone object satisfies it silently)
        assert waiting.running()
        clusters.kubectl("patch", "-n", ns, "cm", "waited", "--type=json", "-p", REMOVE_FINALIZERS)
        code, out, err = waiting.finish()
    assert code == 0, err
    assert "configmap/waited condition met" in out
    gone = clusters.kubectl("wait", "-n", ns, "cm/waited", "--for=delete", "--timeout=5s", check=False)
    assert gone.returncode == 0, gone.stderr


@pytest.mark.parametrize("owner", ["cm", "deploy"])
def test_cascade_background(clusters: Any, ns: str, owner: str) -> None:
    owner_and_dependent(clusters, ns, owner=owner)
    clusters.kubectl("delete", "-n", ns, owner, "owner", "--cascade=background")
    assert not exists(clusters, "-n", ns, owner, "owner")
    poll(lambda: not exists(clusters, "-n", ns, "cm", "dependent"), what="the garbage collector to remove the dependent")


@pytest.mark.parametrize("owner", ["cm", "deploy"])
def test_cascade_orphan(clusters: Any, ns: str, owner: str) -> None:
    owner_and_dependent(clusters, ns, owner=owner)
    clusters.kubectl("delete", "-n", ns, owner, "owner", "--cascade=orphan", timeout=30)
    assert not exists(clusters, "-n", ns, owner, "owner")
    dep = clusters.kubectl_json("get", "-n", ns, "cm", "dependent")
    assert not dep["metadata"].get("ownerReferences")
    assert not dep["metadata"].get("deletionTimestamp")
    assert dep["data"] == {"role": "dependent"}


def test_cascade_foreground(clusters: Any, ns: str) -> None:
    owner_and_dependent(clusters, ns, dependent_finalizer=True)
    clusters.kubectl("delete", "-n", ns, "cm", "owner", "--cascade=foreground", "--wait=false")
    owner = clusters.kubectl_json("get", "-n", ns, "cm", "owner")
    assert owner["metadata"]["deletionTimestamp"]
    assert "foregroundDeletion" in owner["metadata"]["finalizers"]
    # The dependent is being deleted first; the owner waits for it.
    poll(lambda: clusters.kubectl_json("get", "-n", ns, "cm", "dependent")["metadata"].get("deletionTimestamp"),
         what="the dependent to be deleted")
    assert exists(clusters, "-n", ns, "cm", "owner")
    clusters.kubectl("patch", "-n", ns, "cm", "dependent", "--type=json", "-p", REMOVE_FINALIZERS)
    poll(lambda: not exists(clusters, "-n", ns, "cm", "dependent"), what="the dependent to go")
    poll(lambda: not exists(clusters, "-n", ns, "cm", "owner"), what="the owner to go after its dependent")


def test_delete_namespace(clusters: Any) -> None:
    name = unique("term")
    clusters.kubectl("create", "-f", "-", input=manifest({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
    held = configmap("held", name, a="1")
    held["metadata"]["finalizers"] = [HOLD]
    clusters.kubectl("create", "-f", "-", input=manifest(held, configmap("free", name, b="2")))
    clusters.kubectl("create", "secret", "generic", "sec", "-n", name, "--from-literal=k=v")
    clusters.kubectl("create", "deployment", "dep", "-n", name, "--image=nginx:1.27", "--replicas=0")

    clusters.kubectl("delete", "namespace", name, "--wait=false")
    ns_obj = clusters.kubectl_json("get", "namespace", name)
    assert ns_obj["status"]["phase"] == "Terminating"
    assert ns_obj["metadata"]["deletionTimestamp"]
    row = clusters.kubectl("get", "namespace", name).stdout.splitlines()[1].split()
    assert row[:2] == [name, "Terminating"]

    forbidden = clusters.kubectl("create", "-f", "-", input=manifest(configmap("late", name, c="3")), check=False)
    assert forbidden.returncode == 1
    assert "Error from server (Forbidden)" in forbidden.stderr
    assert "because it is being terminated" in forbidden.stderr

    poll(lambda: not exists(clusters, "-n", name, "cm", "free"), what="the namespace content to be deleted")
    poll(lambda: not exists(clusters, "-n", name, "secret", "sec") and not exists(clusters, "-n", name, "deploy", "dep"),
         what="secrets and deployments to be deleted")
    assert clusters.kubectl_json("get", "-n", name, "cm", "held")["metadata"]["deletionTimestamp"]
    assert exists(clusters, "namespace", name)
    clusters.kubectl("patch", "-n", name, "cm", "held", "--type=json", "-p", REMOVE_FINALIZERS)
    clusters.kubectl("wait", "--for=delete", f"namespace/{name}", "--timeout=20s", timeout=30)
    assert not exists(clusters, "namespace", name)
    listed = clusters.kubectl_json("get", "cm", "-A", "--field-selector", f"metadata.namespace={name}")
    assert listed["items"] == []


def test_delete_namespace_waits(clusters: Any) -> None:
    name = unique("gone")
    clusters.kubectl("create", "-f", "-", input=manifest({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
    clusters.kubectl("create", "-f", "-", input=manifest(configmap("x", name, a="1")))
    out = clusters.kubectl("delete", "namespace", name, "--timeout=30s", timeout=40).stdout
    assert f'namespace "{name}" deleted' in out
    assert not exists(clusters, "namespace", name)
    recreated = clusters.kubectl("create", "-f", "-", input=manifest(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
    assert recreated.returncode == 0
    assert not exists(clusters, "-n", name, "cm", "x")
    clusters.kubectl("delete", "namespace", name, "--wait=false")


def test_delete_by_label_and_all(clusters: Any, ns: str) -> None:
    objs = [configmap(f"l{i}", ns, a="1") for i in range(3)]
    for i, obj in enumerate(objs):
        obj["metadata"]["labels"] = {"batch": "x" if i < 2 else "y"}
    clusters.kubectl("create", "-f", "-", input=manifest(*objs))
    out = clusters.kubectl("delete", "-n", ns, "cm", "-l", "batch=x").stdout
    assert sorted(line.split('"')[1] for line in out.splitlines() if "deleted" in line) == ["l0", "l1"]
    remaining = clusters.kubectl("get", "-n", ns, "cm", "-l", "batch", "-o", "name").stdout.split()
    assert remaining == ["configmap/l2"]
