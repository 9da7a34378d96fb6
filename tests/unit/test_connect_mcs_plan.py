"""The MCS merge (pure): validity, oldest-export-wins on type, ports and session affinity, and
what each member gets (ServiceImport, derived Service, imported EndpointSlices)."""

from __future__ import annotations

from typing import Any

import pytest

from tether.connect.mcs import plan as P
from tether.connect.mcs.crds import member_crds


def export(cluster: str, created: str, *, ports: tuple[tuple[str, int], ...] = (("http", 80),),
           headless: bool = False, type_: str = "ClusterIP", affinity: str = "None", service: bool = True,
           slices: tuple[dict[str, Any], ...] = ()) -> P.Export:
    svc = {"metadata": {"name": "web", "namespace": "shop"},
           "spec": {"type": type_, "clusterIP": "None" if headless else "10.0.0.1", "sessionAffinity": affinity,
                    "ports": [{"name": n, "port": p, "protocol": "TCP"} for n, p in ports]}}
    return P.Export(cluster, {"metadata": {"name": "web", "namespace": "shop", "creationTimestamp": created,
                                           "generation": 1}},
                    svc if service else None, slices)


def conditions(merged: P.Merged, cluster: str) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in merged.conditions[cluster]}


def test_one_export() -> None:
    merged = P.merge("shop", "web", [export("east", "2026-01-01T00:00:00Z")])
    assert merged.clusters == ("east",) and merged.type == "ClusterSetIP"
    assert merged.ports == ({"name": "http", "protocol": "TCP", "port": 80},)
    assert conditions(merged, "east") == {"Valid": ("True", "Valid"), "Ready": ("True", "Exported"),
                                          "Conflict": ("False", "NoConflicts")}


@pytest.mark.parametrize(("kwargs", "reason"), [
    ({"service": False}, "NoService"),
    ({"type_": "ExternalName"}, "InvalidServiceType"),
])
def test_invalid_exports(kwargs: dict[str, Any], reason: str) -> None:
    merged = P.merge("shop", "web", [export("east", "2026-01-01T00:00:00Z", **kwargs)])
    assert merged.clusters == ()
    assert conditions(merged, "east") == {"Valid": ("False", reason)}


def test_ports_union_and_the_newer_export_conflicts() -> None:
    old = export("west", "2026-01-01T00:00:00Z", ports=(("http", 80), ("metrics", 9090)))
    new = export("east", "2026-02-01T00:00:00Z", ports=(("http", 8080), ("grpc", 9000)))
    merged = P.merge("shop", "web", [new, old])
    assert merged.clusters == ("west", "east")  # oldest first, whatever the input order
    assert [(p["name"], p["port"]) for p in merged.ports] == [("http", 80), ("metrics", 9090), ("grpc", 9000)]
    assert conditions(merged, "west")["Conflict"] == ("False", "NoConflicts")
    assert conditions(merged, "east")["Conflict"] == ("True", "PortConflict")
    message = next(c.message for c in merged.conditions["east"] if c.type == "Conflict")
    assert "http 8080/TCP" in message


def test_same_number_under_another_name_conflicts() -> None:
    merged = P.merge("shop", "web", [export("west", "2026-01-01T00:00:00Z", ports=(("http", 80),)),
                                     export("east", "2026-01-02T00:00:00Z", ports=(("web", 80),))])
    assert [p["name"] for p in merged.ports] == ["http"]
    assert conditions(merged, "east")["Conflict"] == ("True", "PortConflict")


def test_type_and_affinity_come_from_the_oldest() -> None:
    merged = P.merge("shop", "web", [export("east", "2026-03-01T00:00:00Z", affinity="ClientIP"),
                                     export("west", "2026-01-01T00:00:00Z", headless=True)])
    assert merged.headless and merged.session_affinity == "None"
    assert conditions(merged, "east")["Conflict"] == ("True", "TypeConflict,SessionAffinityConflict")
    assert merged.clusters == ("west", "east")  # a conflicting export still contributes endpoints


def test_tie_on_timestamp_goes_to_the_cluster_id() -> None:
    merged = P.merge("shop", "web", [export("b", "2026-01-01T00:00:00Z", ports=(("http", 81),)),
                                     export("a", "2026-01-01T00:00:00Z", ports=(("http", 80),))])
    assert merged.ports[0]["port"] == 80 and conditions(merged, "b")["Conflict"][0] == "True"


def source_slice(name: str, *ips: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True},
                           "targetRef": {"kind": "Pod", "name": f"web-{i}", "namespace": "shop"}}
                          for i, ip in enumerate(ips)]}


def test_what_a_member_gets() -> None:
    merged = P.merge("shop", "web", [
        export("west", "2026-01-01T00:00:00Z", slices=(source_slice("web-abc", "10.1.0.5"),)),
        export("east", "2026-01-02T00:00:00Z", slices=(source_slice("web-xyz", "10.2.0.7", "10.2.0.8"),))])
    imp = P.import_object("multicluster.x-k8s.io/v1beta1", merged, ["10.96.0.50"])
    imp["metadata"]["uid"] = "u-1"
    assert imp["spec"] == {"type": "ClusterSetIP", "ports": [{"name": "http", "protocol": "TCP", "port": 80}],
                           "ips": ["10.96.0.50"]}
    derived = P.derived_service(merged, imp)
    assert derived["metadata"]["name"] == P.derived_name("shop", "web") and "selector" not in derived["spec"]
    assert derived["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    slices = P.imported_slices(merged, imp)
    assert len(slices) == 2
    by_cluster = {s["metadata"]["labels"][P.MCS_SOURCE_CLUSTER]: s for s in slices}
    assert set(by_cluster) == {"west", "east"}
    east = by_cluster["east"]
    assert east["metadata"]["labels"][P.MCS_SERVICE_NAME] == "web"
    assert east["metadata"]["labels"][P.SERVICE_NAME] == derived["metadata"]["name"]
    assert east["metadata"]["labels"][P.SLICE_MANAGED_BY] == P.MANAGER
    assert [e["hostname"] for e in east["endpoints"]] == ["web-0", "web-1"]
    assert "targetRef" not in east["endpoints"][0]  # a Pod of another cluster
    status = P.import_status("multicluster.x-k8s.io/v1beta1", merged)
    assert status["status"]["clusters"] == [{"cluster": "west"}, {"cluster": "east"}]


def test_conditions_changed() -> None:
    wanted = (P.Condition("Valid", "True", "Valid", "ok"),)
    assert P.conditions_changed(None, wanted)
    current = {"status": {"conditions": [{"type": "Valid", "status": "True", "reason": "Valid", "message": "ok",
                                          "lastTransitionTime": "x"}]}}
    assert not P.conditions_changed(current, wanted)


def test_crds_serve_both_versions() -> None:
    crds = {c["metadata"]["name"]: c for c in member_crds()}
    assert set(crds) == {"serviceexports.multicluster.x-k8s.io", "serviceimports.multicluster.x-k8s.io",
                         "clusterproperties.about.k8s.io"}
    for crd in crds.values():
        versions = {v["name"]: v for v in crd["spec"]["versions"]}
        assert set(versions) == {"v1alpha1", "v1beta1"} and versions["v1beta1"]["storage"]
    assert crds["clusterproperties.about.k8s.io"]["spec"]["scope"] == "Cluster"
    assert crds["serviceexports.multicluster.x-k8s.io"]["spec"]["names"]["shortNames"] == ["svcex", "svcexport"]


def shaped(cluster: str, created: str, *, export_spec: dict[str, Any] | None = None,
           service_spec: dict[str, Any] | None = None) -> P.Export:
    base = export(cluster, created)
    assert base.service is not None
    return P.Export(cluster, {**base.export, "spec": export_spec or {}},
                    {**base.service, "spec": {**base.service["spec"], **(service_spec or {})}})


OLDEST_LABELS = {"exportedLabels": {"tier": "web"}, "exportedAnnotations": {"owner": "shop-team"}}


@pytest.mark.parametrize(("newer_export", "newer_service", "reasons"), [
    (OLDEST_LABELS, {}, "NoConflicts"),
    ({**OLDEST_LABELS, "exportedLabels": {"tier": "api"}}, {}, "LabelsConflict"),
    ({**OLDEST_LABELS, "exportedLabels": {"tier": "web", "extra": "x"}}, {}, "LabelsConflict"),
    ({"exportedLabels": {"tier": "web"}}, {}, "AnnotationsConflict"),
    ({}, {}, "LabelsConflict,AnnotationsConflict"),  # a v1alpha1 export says nothing: that differs
    (OLDEST_LABELS, {"internalTrafficPolicy": "Local"}, "InternalTrafficPolicyConflict"),
    (OLDEST_LABELS, {"trafficDistribution": "PreferClose"}, "TrafficDistributionConflict"),
    (OLDEST_LABELS, {"ipFamilies": ["IPv6"]}, "IPFamilyConflict"),
    (OLDEST_LABELS, {"ipFamilies": ["IPv6", "IPv4"]}, "IPFamilyConflict"),
    (OLDEST_LABELS, {"ipFamilies": []}, "NoConflicts"),  # a Service that does not say is not compared
    ({**OLDEST_LABELS, "exportedLabels": {}}, {"sessionAffinity": "ClientIP", "ports": [
        {"name": "http", "port": 81, "protocol": "TCP"}]},
     "PortConflict,SessionAffinityConflict,LabelsConflict"),
])
def test_the_newer_export_loses_on_every_global_property(newer_export: dict[str, Any],
                                                         newer_service: dict[str, Any], reasons: str) -> None:
    old = shaped("west", "2026-01-01T00:00:00Z", export_spec=OLDEST_LABELS,
                 service_spec={"ipFamilies": ["IPv4"]})
    new = shaped("east", "2026-02-01T00:00:00Z", export_spec=newer_export, service_spec=newer_service)
    merged = P.merge("shop", "web", [new, old])
    assert conditions(merged, "west")["Conflict"] == ("False", "NoConflicts")
    assert conditions(merged, "east")["Conflict"] == ("True" if reasons != "NoConflicts" else "False", reasons)
    # the oldest export decides what the ServiceImport carries
    body = P.import_object("multicluster.x-k8s.io/v1beta1", merged, ["10.9.0.1"])
    assert body["metadata"]["labels"] == {"tier": "web", P.MANAGED_BY: P.MANAGED_BY_VALUE}
    assert body["metadata"]["annotations"] == {"owner": "shop-team"}
    assert body["spec"]["ipFamilies"] == ["IPv4"]
    assert "internalTrafficPolicy" not in body["spec"] and "trafficDistribution" not in body["spec"]


def test_exported_labels_cannot_take_the_managed_by_label() -> None:
    merged = P.merge("shop", "web", [shaped("west", "2026-01-01T00:00:00Z", export_spec={
        "exportedLabels": {P.MANAGED_BY: "someone-else"}}, service_spec={"internalTrafficPolicy": "Local",
                                                                         "trafficDistribution": "PreferClose"})])
    body = P.import_object("multicluster.x-k8s.io/v1beta1", merged, [])
    assert body["metadata"]["labels"] == {P.MANAGED_BY: P.MANAGED_BY_VALUE}
    assert body["spec"]["internalTrafficPolicy"] == "Local" and body["spec"]["trafficDistribution"] == "PreferClose"
