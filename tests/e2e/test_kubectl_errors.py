"""Error answers as kubectl shows them, and the server staying healthy and consistent after bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from e2e_util import manifest

pytestmark = pytest.mark.e2e


def configmap(name: str, ns: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data}


def fails(result: Any) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    return str(result.stderr)


def test_not_found(clusters: Any, ns: str) -> None:
    err = fails(clusters.kubectl("get", "-n", ns, "cm", "nope", check=False))
    assert err.strip() == 'Error from server (NotFound): configmaps "nope" not found'
    err = fails(clusters.kubectl("get", "-n", ns, "deploy", "nope", check=False))
    assert err.strip() == 'Error from server (NotFound): deployments.apps "nope" not found'
    err = fails(clusters.kubectl("get", "namespace", "no-such-namespace-here", check=False))
    assert err.strip() == 'Error from server (NotFound): namespaces "no-such-namespace-here" not found'
    err = fails(clusters.kubectl("get", "foos", check=False))
    assert 'the server doesn\'t have a resource type "foos"' in err


def test_already_exists(clusters: Any, ns: str) -> None:
    body = manifest(configmap("dup", ns, a="1"))
    clusters.kubectl("create", "-f", "-", input=body)
    err = fails(clusters.kubectl("create", "-f", "-", input=body, check=False))
    assert err.strip() == 'Error from server (AlreadyExists): error when creating "STDIN": configmaps "dup" already exists'


def test_invalid_pod_without_containers(clusters: Any, ns: str) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "empty", "namespace": ns}, "spec": {"containers": []}}
    err = fails(clusters.kubectl("create", "-f", "-", input=json.dumps(pod), check=False))
    assert 'The Pod "empty" is invalid' in err
    assert "spec.containers: Required value" in err
    raw = clusters.kubectl("create", "--raw", f"/api/v1/namespaces/{ns}/pods", "-f", "-", "-v=6",
                           input=json.dumps(pod), check=False)
    assert "422 Unprocessable Entity" in fails(raw)

    bad_name = configmap("Bad_Name", ns)
    err = fails(clusters.kubectl("create", "-f", "-", input=manifest(bad_name), check=False))
    assert 'The ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name"' in err
    missing = clusters.kubectl("get", "-n", ns, "pods", "-o", "name").stdout
    assert missing.strip() == ""


def test_namespace_missing(clusters: Any) -> None:
    err = fails(clusters.kubectl("create", "-n", "does-not-exist", "-f", "-",
                                 input=json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}), check=False))
    assert err.strip() == 'Error from server (NotFound): error when creating "STDIN": namespaces "does-not-exist" not found'


def test_replace_with_stale_resource_version(clusters: Any, ns: str, tmp_path: Path) -> None:
    clusters.kubectl("create", "-f", "-", input=manifest(configmap("rep", ns, a="1")))
    stale = clusters.kubectl_json("get", "-n", ns, "cm", "rep")
    clusters.kubectl("label", "-n", ns, "cm", "rep", "moved=on")
    stale["data"] = {"a": "stale"}
    path = tmp_path / "stale.json"
    path.write_text(json.dumps(stale))
    err = fails(clusters.kubectl("replace", "-f", str(path), check=False))
    assert err.strip() == (
        f'Error from server (Conflict): error when replacing "{path}": Operation cannot be fulfilled on configmaps '
        '"rep": the object has been modified; please apply your changes to the latest version and try again'
    )
    current = clusters.kubectl_json("get", "-n", ns, "cm", "rep")
    assert current["data"] == {"a": "1"} and current["metadata"]["labels"] == {"moved": "on"}

    # With the current resourceVersion the replace goes through.
    current["data"] = {"a": "fresh"}
    path.write_text(json.dumps(current))
    assert clusters.kubectl("replace", "-f", str(path)).stdout.strip() == "configmap/rep replaced"
    assert clusters.kubectl_json("get", "-n", ns, "cm", "rep")["data"] == {"a": "fresh"}


def test_bad_field_selector(clusters: Any, ns: str) -> None:
    err = fails(clusters.kubectl("get", "-n", ns, "pods", "--field-selector", "spec.foo=x", check=False))
    assert "Error from server (BadRequest)" in err
    assert "field label not supported: spec.foo" in err
    ok = clusters.kubectl("get", "-n", ns, "pods", "--field-selector", "status.phase=Running,spec.nodeName=n1")
    assert ok.returncode == 0
    err = fails(clusters.kubectl("get", "--raw", f"/api/v1/namespaces/{ns}/configmaps?labelSelector=a+in+(", check=False))
    assert "Error from server (BadRequest)" in err and "unable to parse requirement" in err


def test_malformed_bodies_and_too_large(clusters: Any, ns: str, tmp_path: Path) -> None:
    clusters.kubectl("create", "-f", "-", input=manifest(configmap("keep", ns, a="1")))
    before = clusters.kubectl_json("get", "-n", ns, "cm", "keep")
    url = f"/api/v1/namespaces/{ns}/configmaps"

    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"broken"')
    err = fails(clusters.kubectl("create", "--raw", url, "-f", str(bad_json), check=False))
    assert err.startswith("Error from server (BadRequest)")

    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [broken\n")
    err = fails(clusters.kubectl("create", "--raw", url, "-f", str(bad_yaml), check=False))
    assert err.startswith("Error from server (BadRequest)")

    not_object = tmp_path / "list.json"
    not_object.write_text("[1, 2, 3]")
    err = fails(clusters.kubectl("create", "--raw", url, "-f", str(not_object), check=False))
    assert "BadRequest" in err

    wrong_kind = tmp_path / "kind.json"
    wrong_kind.write_text(json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "k"}}))
    err = fails(clusters.kubectl("create", "--raw", url, "-f", str(wrong_kind), check=False))
    assert "BadRequest" in err

    err = fails(clusters.kubectl("get", "--raw", f"{url}?limit=abc", check=False))
    assert "BadRequest" in err
    err = fails(clusters.kubectl("get", "--raw", f"{url}/keep/nosuchsub", check=False))
    assert "NotFound" in err

    big = tmp_path / "big.json"
    big.write_text(json.dumps(configmap("huge", ns, a="x" * (3 * 1024 * 1024 + 16))))
    err = fails(clusters.kubectl("create", "--raw", url, "-f", str(big), check=False))
    assert "RequestEntityTooLarge" in err

    # A large but legal object (just under 1 MiB of data) is stored and read back whole.
    large = configmap("large", ns, a="y" * (900 * 1024))
    created = clusters.kubectl("create", "--raw", url, "-f", "-", input=json.dumps(large))
    assert json.loads(created.stdout)["metadata"]["name"] == "large"
    assert len(clusters.kubectl_json("get", "-n", ns, "cm", "large")["data"]["a"]) == 900 * 1024

    # The server still serves, nothing half-written exists, and stored data is intact.
    names = clusters.kubectl("get", "-n", ns, "cm", "-o", "name").stdout.split()
    assert "configmap/keep" in names and "configmap/large" in names
    assert not {"configmap/broken", "configmap/huge", "configmap/k"} & set(names)
    after = clusters.kubectl_json("get", "-n", ns, "cm", "keep")
    assert after == before
    assert clusters.kubectl("get", "--raw", "/readyz").stdout == "ok"


def test_unsupported_and_invalid_patch(clusters: Any, ns: str) -> None:
    clusters.kubectl("create", "-f", "-", input=manifest(configmap("pt", ns, a="1")))
    err = fails(clusters.kubectl("patch", "-n", ns, "cm", "pt", "--type=merge", "-p", "{not json", check=False))
    assert "error" in err.lower()  # refused by kubectl itself; the raw server answer is checked below
    err = fails(clusters.kubectl("patch", "-n", ns, "cm", "pt", "--type=merge", "--subresource=nope", "-p", "{}", check=False))
    assert err
    err = fails(clusters.kubectl("patch", "-n", ns, "cm", "pt", "--type=merge", "-p", '{"data":{"a":5}}', check=False))
    assert 'The ConfigMap "pt" is invalid: data[a]' in err
    assert clusters.kubectl_json("get", "-n", ns, "cm", "pt")["data"] == {"a": "1"}
