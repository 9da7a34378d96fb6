"""KubeFed's DNS records (pure): statuses from clusters, DNSEndpoints with KubeFed's names, and
records still made when a cluster has no region or zones (KubeFed issue 872)."""

from __future__ import annotations

from typing import Any

from tether.connect.kubefeddns.records import (
    ClusterView,
    dns_endpoint,
    ingress_endpoints,
    ingress_status,
    service_endpoints,
    service_status,
)

RECORD: dict[str, Any] = {"apiVersion": "multiclusterdns.kubefed.io/v1alpha1", "kind": "ServiceDNSRecord",
                          "metadata": {"name": "test-service", "namespace": "test-namespace", "uid": "u1"},
                          "spec": {"domainRef": "test-domain", "recordTTL": 300}}


def lb(*ips: str) -> dict[str, Any]:
    return {"ingress": [{"ip": ip} for ip in ips]}


def svc(*ips: str) -> dict[str, Any]:
    return {"metadata": {"name": "test-service"}, "status": {"loadBalancer": lb(*ips)}}


READY_SLICE = [{"endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": True}}]}]


def names(endpoints: list[Any]) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {e.dns_name: (e.record_type, e.targets) for e in endpoints}


def test_status_and_the_three_levels_as_kubefed_documents() -> None:
    clusters = [ClusterView("cluster1", True, "us-west1", ("us-west1-b",)),
                ClusterView("cluster2", True, "us-west1", ("us-west1-b",))]
    status = service_status(RECORD, "your.domain.name", clusters,
                            {"cluster1": svc("1.1.1.1"), "cluster2": svc("2.2.2.2")},
                            {"cluster1": READY_SLICE, "cluster2": READY_SLICE})
    assert status == {"domain": "your.domain.name", "dns": [
        {"cluster": "cluster1", "loadBalancer": lb("1.1.1.1"), "zones": ["us-west1-b"], "region": "us-west1"},
        {"cluster": "cluster2", "loadBalancer": lb("2.2.2.2"), "zones": ["us-west1-b"], "region": "us-west1"}]}
    endpoints = service_endpoints({**RECORD, "status": status})
    both = ("1.1.1.1", "2.2.2.2")
    assert names(endpoints) == {
        "test-service.test-namespace.test-domain.svc.your.domain.name": ("A", both),
        "test-service.test-namespace.test-domain.svc.us-west1.your.domain.name": ("A", both),
        "test-service.test-namespace.test-domain.svc.us-west1-b.us-west1.your.domain.name": ("A", both),
    }
    assert {e.ttl for e in endpoints} == {300}
    body = dns_endpoint("service", {**RECORD, "status": status}, endpoints)
    assert body["metadata"]["name"] == "service-test-service"
    assert body["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert body["spec"]["endpoints"][-1] == {"dnsName": "test-service.test-namespace.test-domain.svc.your.domain.name",
                                            "recordTTL": 300, "recordType": "A", "targets": list(both)}


def test_levels_without_addresses_are_cnames_one_level_up() -> None:
    clusters = [ClusterView("a", True, "eu", ("eu-1",)), ClusterView("b", True, "us", ("us-1",))]
    status = service_status(RECORD, "example.com", clusters, {"a": svc("1.1.1.1"), "b": None},
                            {"a": READY_SLICE})
    found = names(service_endpoints({**RECORD, "status": status}))
    prefix = "test-service.test-namespace.test-domain.svc"
    assert found[f"{prefix}.us.example.com"] == ("CNAME", (f"{prefix}.example.com",))
    assert found[f"{prefix}.us-1.us.example.com"] == ("CNAME", (f"{prefix}.us.example.com",))
    assert found[f"{prefix}.eu.example.com"] == ("A", ("1.1.1.1",))
    assert found[f"{prefix}.example.com"] == ("A", ("1.1.1.1",))


def test_no_endpoints_no_address_unless_allowed() -> None:
    clusters = [ClusterView("a", True, "eu", ("eu-1",))]
    status = service_status(RECORD, "example.com", clusters, {"a": svc("1.1.1.1")}, {"a": []})
    assert status["dns"][0]["loadBalancer"] == {}
    assert service_endpoints({**RECORD, "status": status}) == [] or all(
        e.record_type == "CNAME" for e in service_endpoints({**RECORD, "status": status}))
    allowed = {**RECORD, "spec": {**RECORD["spec"], "allowServiceWithoutEndpoints": True}}
    status = service_status(allowed, "example.com", clusters, {"a": svc("1.1.1.1")}, {"a": []})
    assert status["dns"][0]["loadBalancer"] == lb("1.1.1.1")


def test_clusters_without_region_or_zones_still_give_records() -> None:
    """KubeFed issue 872: one cluster without topology labels left the whole record empty."""
    clusters = [ClusterView("labelled", True, "eu", ("eu-1",)), ClusterView("kind", True),
                ClusterView("regional", True, "us")]
    status = service_status(RECORD, "example.com", clusters,
                            {"labelled": svc("1.1.1.1"), "kind": svc("2.2.2.2"), "regional": svc("3.3.3.3")},
                            {"labelled": READY_SLICE, "kind": READY_SLICE, "regional": READY_SLICE})
    assert [e.get("region") for e in status["dns"]] == [None, "eu", "us"]
    found = names(service_endpoints({**RECORD, "status": status}))
    prefix = "test-service.test-namespace.test-domain.svc"
    assert found[f"{prefix}.example.com"] == ("A", ("1.1.1.1", "2.2.2.2", "3.3.3.3"))
    assert found[f"{prefix}.eu.example.com"] == ("A", ("1.1.1.1",))
    assert found[f"{prefix}.eu-1.eu.example.com"] == ("A", ("1.1.1.1",))
    assert found[f"{prefix}.us.example.com"] == ("A", ("3.3.3.3",))
    assert len(found) == 4


def test_not_ready_clusters_are_left_out_and_prefix_and_external_name() -> None:
    record = {**RECORD, "spec": {"domainRef": "d", "dnsPrefix": "shop", "externalName": "storefront"}}
    status = service_status(record, "example.com", [ClusterView("a", True, "eu"), ClusterView("b", False, "eu")],
                            {"a": svc("1.1.1.1"), "b": svc("2.2.2.2")}, {"a": READY_SLICE, "b": READY_SLICE})
    assert [e["cluster"] for e in status["dns"]] == ["a"]
    endpoints = service_endpoints({**record, "status": status})
    found = names(endpoints)
    assert found["storefront.test-namespace.d.svc.example.com"] == ("A", ("1.1.1.1",))
    assert found["shop.example.com"] == ("CNAME", ("storefront.test-namespace.d.svc.example.com",))
    assert {e.ttl for e in endpoints} == {180}  # KubeFed's default
    labelled = [e for e in endpoints if e.dns_name.startswith("storefront")]
    assert all(e.labels == {"serviceName": "test-service"} for e in labelled)


def test_hostname_load_balancers_are_resolved() -> None:
    status = service_status(RECORD, "example.com", [ClusterView("a", True)],
                            {"a": {"status": {"loadBalancer": {"ingress": [{"hostname": "elb.example"}]}}}},
                            {"a": READY_SLICE})
    found = names(service_endpoints({**RECORD, "status": status}, lambda host: ["9.9.9.9"]))
    assert found["test-service.test-namespace.test-domain.svc.example.com"] == ("A", ("9.9.9.9",))


def test_ingress_records() -> None:
    record = {"metadata": {"name": "web", "namespace": "ns"}, "spec": {"hosts": ["a.example.com", "b.example.com"]}}
    status = ingress_status([ClusterView("a", True), ClusterView("b", True)],
                            {"a": {"status": {"loadBalancer": lb("1.1.1.1")}}, "b": None})
    assert status == {"dns": [{"cluster": "a", "loadBalancer": lb("1.1.1.1")}]}
    assert names(ingress_endpoints({**record, "status": status})) == {"a.example.com": ("A", ("1.1.1.1",)),
                                                                      "b.example.com": ("A", ("1.1.1.1",))}
