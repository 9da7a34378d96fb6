"""CustomResourceDefinitions through kubectl: establish, instances, printer columns, schema, status, cleanup."""

from __future__ import annotations

import json
from typing import Any

import pytest
from e2e_util import manifest, poll, unique

pytestmark = pytest.mark.e2e


def crd_manifest(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color", "priority": 1},
                    {"name": "Ready", "type": "string", "jsonPath": ".status.ready"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["size"],
                            "properties": {
                                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                                "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                            },
                        },
                        "status": {"type": "object", "properties": {"ready": {"type": "string"}}},
                    },
                }},
            }],
        },
    }


def widget(group: str, name: str, ns: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.fixture
def group(clusters: Any) -> str:
    """A CRD in its own API group (unique per test), established."""
    name = unique("g").replace("-", "") + ".example.com"
    out = clusters.kubectl("apply", "-f", "-", input=manifest(crd_manifest(name))).stdout
    assert out.strip() == f"customresourcedefinition.apiextensions.k8s.io/widgets.{name} created"
    waited = clusters.kubectl("wait", "--for=condition=established", f"crd/widgets.{name}", "--timeout=20s", timeout=30)
    assert waited.stdout.strip() == f"customresourcedefinition.apiextensions.k8s.io/widgets.{name} condition met"
    return name


def test_crd_conditions_and_discovery(clusters: Any, group: str) -> None:
    crd = clusters.kubectl_json("get", "crd", f"widgets.{group}")
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions["Established"] == "True"
    assert conditions["NamesAccepted"] == "True"
    assert crd["status"]["acceptedNames"]["kind"] == "Widget"
    resources = clusters.kubectl("api-resources", f"--api-group={group}").stdout
    row = lines(resources)[1].split()
    assert row == ["widgets", "wd", f"{group}/v1", "true", "Widget"]
    assert f"{group}/v1" in lines(clusters.kubectl("api-versions").stdout)


def test_custom_resources_and_printer_columns(clusters: Any, ns: str, group: str) -> None:
    out = clusters.kubectl("apply", "-f", "-", input=manifest(widget(group, "w1", ns, size=3, color="blue"))).stdout
    assert out.strip() == f"widget.{group}/w1 created"
    clusters.kubectl("apply", "-f", "-", input=manifest(widget(group, "w2", ns, size=5)))
    again = clusters.kubectl("apply", "-f", "-", input=manifest(widget(group, "w1", ns, size=3, color="blue"))).stdout
    assert again.strip() == f"widget.{group}/w1 unchanged"

    table = clusters.kubectl("get", "-n", ns, f"widgets.{group}").stdout
    assert lines(table)[0].split() == ["NAME", "SIZE", "READY", "AGE"]
    rows = {line.split()[0]: line.split() for line in lines(table)[1:]}
    assert rows["w1"][1] == "3" and rows["w2"][1] == "5"
    assert rows["w1"][2] == "<none>" or len(rows["w1"]) == 3  # empty status column

    wide = clusters.kubectl("get", "-n", ns, f"wd.{group}", "-o", "wide").stdout
    assert lines(wide)[0].split() == ["NAME", "SIZE", "COLOR", "READY", "AGE"]
    wide_rows = {line.split()[0]: line.split() for line in lines(wide)[1:]}
    assert wide_rows["w1"][2] == "blue"
    assert wide_rows["w2"][2] == "red"  # schema default

    got = clusters.kubectl_json("get", "-n", ns, f"widget.{group}", "w2")
    assert got["spec"] == {"size": 5, "color": "red"}
    assert got["metadata"]["generation"] == 1
    assert got["apiVersion"] == f"{group}/v1" and got["kind"] == "Widget"

    # Merge patch works on custom resources; strategic merge is refused.
    clusters.kubectl("patch", "-n", ns, f"widget.{group}", "w1", "--type=merge", "-p", '{"spec":{"size":4}}')
    assert clusters.kubectl_json("get", "-n", ns, f"widget.{group}", "w1")["spec"]["size"] == 4
    smp = clusters.kubectl("patch", "-n", ns, f"widget.{group}", "w1", "--type=strategic", "-p", '{"spec":{"size":6}}', check=False)
    assert smp.returncode == 1
    assert "UnsupportedMediaType" in smp.stderr or "not supported" in smp.stderr


def test_schema_violations(clusters: Any, ns: str, group: str) -> None:
    too_big = clusters.kubectl("create", "-f", "-", input=manifest(widget(group, "big", ns, size=20)), check=False)
    assert too_big.returncode == 1
    assert "Invalid" in too_big.stderr and "spec.size" in too_big.stderr
    assert "10" in too_big.stderr

    wrong_type = clusters.kubectl("create", "-f", "-", input=manifest(widget(group, "typed", ns, size="three")), check=False)
    assert wrong_type.returncode == 1 and "spec.size" in wrong_type.stderr

    bad_enum = clusters.kubectl("create", "-f", "-", input=manifest(widget(group, "enum", ns, size=1, color="green")), check=False)
    assert bad_enum.returncode == 1 and "spec.color" in bad_enum.stderr
    assert "Unsupported value" in bad_enum.stderr

    missing = clusters.kubectl("create", "-f", "-", input=manifest(widget(group, "req", ns, color="red")), check=False)
    assert missing.returncode == 1 and "spec.size" in missing.stderr and "Required value" in missing.stderr

    unknown = clusters.kubectl("create", "-f", "-", input=manifest(widget(group, "unk", ns, size=1, extra=True)), check=False)
    assert unknown.returncode == 1
    assert 'unknown field "spec.extra"' in unknown.stderr

    # With validation off the unknown field is pruned instead.
    clusters.kubectl("create", "--validate=false", "-f", "-", input=manifest(widget(group, "pruned", ns, size=1, extra=True)))
    assert clusters.kubectl_json("get", "-n", ns, f"widget.{group}", "pruned")["spec"] == {"size": 1, "color": "red"}

    listed = clusters.kubectl("get", "-n", ns, f"widgets.{group}", "-o", "name").stdout.split()
    assert listed == [f"widget.{group}/pruned"]


def test_status_subresource(clusters: Any, ns: str, group: str) -> None:
    clusters.kubectl("create", "-f", "-", input=manifest(widget(group, "st", ns, size=2)))
    before = clusters.kubectl_json("get", "-n", ns, f"widget.{group}", "st")

    out = clusters.kubectl("patch", "-n", ns, f"widget.{group}", "st", "--subresource=status", "--type=merge",
                           "-p", '{"status":{"ready":"yes"},"spec":{"size":9}}').stdout
    assert out.strip() == f"widget.{group}/st patched"
    after = clusters.kubectl_json("get", "-n", ns, f"widget.{group}", "st")
    assert after["status"] == {"ready": "yes"}
    assert after["spec"]["size"] == 2  # spec changes through /status are ignored
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
    table = clusters.kubectl("get", "-n", ns, f"widget.{group}", "st").stdout
    assert lines(table)[1].split()[:3] == ["st", "2", "yes"]

    # Writes to the main resource ignore status and bump generation.
    clusters.kubectl("patch", "-n", ns, f"widget.{group}", "st", "--type=merge", "-p", '{"spec":{"size":3},"status":{"ready":"no"}}')
    spec_changed = clusters.kubectl_json("get", "-n", ns, f"widget.{group}", "st")
    assert spec_changed["spec"]["size"] == 3
    assert spec_changed["status"] == {"ready": "yes"}
    assert spec_changed["metadata"]["generation"] == before["metadata"]["generation"] + 1

    status_only = clusters.kubectl_json("get", "-n", ns, f"widget.{group}", "st", "--subresource=status")
    assert status_only["status"] == {"ready": "yes"}


def test_deleting_crd_removes_instances(clusters: Any, ns: str, group: str) -> None:
    clusters.kubectl("create", "-f", "-", input=manifest(widget(group, "a", ns, size=1), widget(group, "b", ns, size=2)))
    assert len(clusters.kubectl_json("get", "-n", ns, f"widgets.{group}")["items"]) == 2
    out = clusters.kubectl("delete", "crd", f"widgets.{group}", "--timeout=30s", timeout=40).stdout
    assert f'customresourcedefinition.apiextensions.k8s.io "widgets.{group}" deleted' in out
    gone = clusters.kubectl("get", "crd", f"widgets.{group}", check=False)
    assert gone.returncode == 1 and "NotFound" in gone.stderr
    missing = clusters.kubectl("get", "-n", ns, f"widgets.{group}", check=False)
    assert missing.returncode == 1
    assert "the server doesn't have a resource type" in missing.stderr

    # Recreate the CRD: the old instances do not come back.
    clusters.kubectl("apply", "-f", "-", input=manifest(crd_manifest(group)))
    clusters.kubectl("wait", "--for=condition=established", f"crd/widgets.{group}", "--timeout=20s")
    items = poll(lambda: clusters.kubectl("get", "-n", ns, f"widgets.{group}", "-o", "json", check=False),
                 what="widgets to be served again")
    assert json.loads(items.stdout)["items"] == []


def test_cluster_scoped_crd(clusters: Any) -> None:
    grp = unique("c").replace("-", "") + ".example.com"
    crd = crd_manifest(grp)
    crd["spec"]["scope"] = "Cluster"
    crd["metadata"]["name"] = f"gadgets.{grp}"
    crd["spec"]["names"] = {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"}
    clusters.kubectl("create", "-f", "-", input=manifest(crd))
    clusters.kubectl("wait", "--for=condition=established", f"crd/gadgets.{grp}", "--timeout=20s")
    obj = {"apiVersion": f"{grp}/v1", "kind": "Gadget", "metadata": {"name": "g1"}, "spec": {"size": 1}}
    clusters.kubectl("create", "-f", "-", input=manifest(obj))
    got = clusters.kubectl_json("get", "gadget", "g1")
    assert "namespace" not in got["metadata"]
    rows = lines(clusters.kubectl("get", "gadgets").stdout)
    assert rows[0].split() == ["NAME", "SIZE", "READY", "AGE"] and rows[1].split()[0] == "g1"
    clusters.kubectl("delete", "crd", f"gadgets.{grp}", "--wait=false")
