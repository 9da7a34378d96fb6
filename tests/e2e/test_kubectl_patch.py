"""kubectl patch (merge, json, strategic), server-side apply and diff."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from e2e_util import manifest

pytestmark = pytest.mark.e2e


def configmap(name: str, ns: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data}


def deployment(name: str, ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {"name": "main", "image": "nginx:1.27",
                         "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "C", "value": "3"}]},
                        {"name": "side", "image": "busybox:1.36"},
                    ]
                },
            },
        },
    }


def test_patch_merge(clusters: Any, ns: str) -> None:
    clusters.kubectl("create", "-f", "-", input=manifest(configmap("m", ns, a="1", b="2")))
    out = clusters.kubectl("patch", "-n", ns, "cm", "m", "--type=merge", "-p", '{"data":{"b":null,"c":"3"},"metadata":{"labels":{"x":"y"}}}').stdout
    assert out.strip() == "configmap/m patched"
    got = clusters.kubectl_json("get", "-n", ns, "cm", "m")
    assert got["data"] == {"a": "1", "c": "3"}
    assert got["metadata"]["labels"] == {"x": "y"}
    rv = got["metadata"]["resourceVersion"]
    same = clusters.kubectl("patch", "-n", ns, "cm", "m", "--type=merge", "-p", '{"data":{"a":"1"}}').stdout
    assert same.strip() == "configmap/m patched (no change)"
    assert clusters.kubectl_json("get", "-n", ns, "cm", "m")["metadata"]["resourceVersion"] == rv


def test_patch_json(clusters: Any, ns: str) -> None:
    clusters.kubectl("create", "-f", "-", input=manifest(configmap("j", ns, a="1", b="2")))
    ops = [{"op": "add", "path": "/data/c", "value": "3"}, {"op": "remove", "path": "/data/a"},
           {"op": "replace", "path": "/data/b", "value": "22"}, {"op": "add", "path": "/metadata/labels", "value": {"k": "v"}}]
    clusters.kubectl("patch", "-n", ns, "cm", "j", "--type=json", "-p", json.dumps(ops))
    got = clusters.kubectl_json("get", "-n", ns, "cm", "j")
    assert got["data"] == {"b": "22", "c": "3"}
    assert got["metadata"]["labels"] == {"k": "v"}

    failed = clusters.kubectl("patch", "-n", ns, "cm", "j", "--type=json",
                              "-p", '[{"op":"test","path":"/data/b","value":"nope"},{"op":"remove","path":"/data/b"}]', check=False)
    assert failed.returncode == 1
    assert "test" in failed.stderr
    missing = clusters.kubectl("patch", "-n", ns, "cm", "j", "--type=json", "-p", '[{"op":"remove","path":"/data/zzz"}]', check=False)
    assert missing.returncode == 1
    assert clusters.kubectl_json("get", "-n", ns, "cm", "j")["data"] == {"b": "22", "c": "3"}


def test_patch_strategic(clusters: Any, ns: str) -> None:
    clusters.kubectl("create", "-f", "-", input=manifest(deployment("s", ns)))

    # The default patch type is strategic: containers merge by name, env by name.
    clusters.kubectl("patch", "-n", ns, "deploy", "s", "-p",
                     '{"spec":{"template":{"spec":{"containers":[{"name":"main","image":"nginx:1.28",'
                     '"env":[{"name":"D","value":"4"}]}]}}}}')
    containers = clusters.kubectl_json("get", "-n", ns, "deploy", "s")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["main", "side"]
    assert containers[0]["image"] == "nginx:1.28"
    assert [e["name"] for e in containers[0]["env"]] == ["D", "A", "B", "C"] or \
        [e["name"] for e in containers[0]["env"]] == ["A", "B", "C", "D"]
    assert containers[1]["image"] == "busybox:1.36"

    # $patch: delete removes exactly one env var.
    clusters.kubectl("patch", "-n", ns, "deploy", "s", "--type=strategic", "-p",
                     '{"spec":{"template":{"spec":{"containers":[{"name":"main","env":[{"name":"B","$patch":"delete"}]}]}}}}')
    containers = clusters.kubectl_json("get", "-n", ns, "deploy", "s")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in containers[0]["env"]}
    assert env == {"A": "1", "C": "3", "D": "4"}

    # $setElementOrder plus $patch: delete of a whole container.
    clusters.kubectl("patch", "-n", ns, "deploy", "s", "--type=strategic", "-p",
                     '{"spec":{"template":{"spec":{"$setElementOrder/containers":[{"name":"main"}],'
                     '"containers":[{"name":"side","$patch":"delete"}]}}}}')
    containers = clusters.kubectl_json("get", "-n", ns, "deploy", "s")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["main"]
    assert containers[0]["image"] == "nginx:1.28"

    # A patch producing an ill-typed object is rejected and changes nothing.
    bad = clusters.kubectl("patch", "-n", ns, "deploy", "s", "--type=strategic", "-p", '{"spec":{"replicas":"two"}}', check=False)
    assert bad.returncode == 1
    assert "spec.replicas" in bad.stderr
    assert clusters.kubectl_json("get", "-n", ns, "deploy", "s")["spec"]["replicas"] == 1


def test_server_side_apply(clusters: Any, ns: str, tmp_path: Path) -> None:
    path = tmp_path / "cm.yaml"
    doc = f"""\
apiVersion: v1
kind: ConfigMap
metadata:
  name: ssa
  namespace: {ns}
  labels: {{team: a}}
data:
  a: "1"
  b: "2"
"""
    path.write_text(doc)
    out = clusters.kubectl("apply", "--server-side", "-f", str(path)).stdout
    assert out.strip() == "configmap/ssa serverside-applied"
    got = clusters.kubectl_json("get", "-n", ns, "cm", "ssa", "--show-managed-fields")
    assert got["data"] == {"a": "1", "b": "2"}
    managers = {(m["manager"], m["operation"]) for m in got["metadata"]["managedFields"]}
    assert ("kubectl", "Apply") in managers
    assert "kubectl.kubernetes.io/last-applied-configuration" not in (got["metadata"].get("annotations") or {})

    # Removing a key from the manifest removes it from the object.
    path.write_text(doc.replace('  b: "2"\n', ""))
    clusters.kubectl("apply", "--server-side", "-f", str(path))
    assert clusters.kubectl_json("get", "-n", ns, "cm", "ssa")["data"] == {"a": "1"}

    # Another manager setting the same field to another value conflicts.
    other = tmp_path / "other.yaml"
    other.write_text(doc.replace('a: "1"', 'a: "X"').replace('  b: "2"\n', ""))
    conflict = clusters.kubectl("apply", "--server-side", "--field-manager=other", "-f", str(other), check=False)
    assert conflict.returncode == 1
    assert 'Apply failed with 1 conflict: conflict with "kubectl"' in conflict.stderr
    assert ".data.a" in conflict.stderr
    assert clusters.kubectl_json("get", "-n", ns, "cm", "ssa")["data"] == {"a": "1"}

    # --force-conflicts takes the field over.
    forced = clusters.kubectl("apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", str(other))
    assert forced.stdout.strip() == "configmap/ssa serverside-applied"
    got = clusters.kubectl_json("get", "-n", ns, "cm", "ssa", "--show-managed-fields")
    assert got["data"] == {"a": "X"}
    owners = {m["manager"]: json.dumps(m.get("fieldsV1", {})) for m in got["metadata"]["managedFields"]}
    assert '"f:a"' in owners["other"]
    assert '"f:a"' not in owners["kubectl"]

    # A client-side update of a field owned by an applier is recorded as an Update manager.
    clusters.kubectl("label", "-n", ns, "cm", "ssa", "extra=1")
    got = clusters.kubectl_json("get", "-n", ns, "cm", "ssa", "--show-managed-fields")
    assert any(m["operation"] == "Update" for m in got["metadata"]["managedFields"])


def test_server_side_apply_creates_deployment(clusters: Any, ns: str) -> None:
    dep = deployment("ssadep", ns)
    out = clusters.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(dep)).stdout
    assert out.strip() == "deployment.apps/ssadep serverside-applied"
    # Drop the side container and one env var from the applied config: both go away.
    dep["spec"]["template"]["spec"]["containers"] = [
        {"name": "main", "image": "nginx:1.27", "env": [{"name": "A", "value": "1"}]}
    ]
    clusters.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(dep))
    containers = clusters.kubectl_json("get", "-n", ns, "deploy", "ssadep")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["main"]
    assert containers[0]["env"] == [{"name": "A", "value": "1"}]


def test_diff(clusters: Any, ns: str, tmp_path: Path) -> None:
    clusters.kubectl("apply", "-f", "-", input=manifest(configmap("d", ns, color="blue", size="m")))
    before = clusters.kubectl_json("get", "-n", ns, "cm", "d")

    same = clusters.kubectl("diff", "-f", "-", input=manifest(configmap("d", ns, color="blue", size="m")), check=False)
    assert same.returncode == 0, same.stderr
    assert same.stdout == ""

    changed = clusters.kubectl("diff", "-f", "-", input=manifest(configmap("d", ns, color="green", size="m")), check=False)
    assert changed.returncode == 1, changed.stderr
    assert "-  color: blue" in changed.stdout
    assert "+  color: green" in changed.stdout
    assert "size" not in "".join(line for line in changed.stdout.splitlines() if line.startswith(("+ ", "- ")))

    after = clusters.kubectl_json("get", "-n", ns, "cm", "d")
    assert after["data"] == {"color": "blue", "size": "m"}
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]

    # A new object diffs as all-added and is not created (dry run).
    new = clusters.kubectl("diff", "-f", "-", input=manifest(configmap("d-new", ns, k="v")), check=False)
    assert new.returncode == 1
    assert "+  name: d-new" in new.stdout
    missing = clusters.kubectl("get", "-n", ns, "cm", "d-new", check=False)
    assert missing.returncode == 1 and "NotFound" in missing.stderr

    # Server-side diff too (the fields belong to the client-side applier, hence --force-conflicts).
    ssd = clusters.kubectl("diff", "--server-side", "--force-conflicts", "-f", "-",
                           input=manifest(configmap("d", ns, color="red", size="m")), check=False)
    assert ssd.returncode == 1, ssd.stderr
    assert "+  color: red" in ssd.stdout
    assert clusters.kubectl_json("get", "-n", ns, "cm", "d")["data"]["color"] == "blue"
