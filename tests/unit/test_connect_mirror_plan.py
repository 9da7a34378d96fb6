"""The mirror's pure plan: desired objects from a remote Service and its slices, and the steps."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tether.connect.mirror import labels as L
from tether.connect.mirror import stale
from tether.connect.mirror.config import StaleSettings
from tether.connect.mirror.plan import (
    Contribution,
    Existing,
    Source,
    desired_global,
    desired_mirror,
    endpoints_from_slices,
    plan,
)

SOURCE = Source("aws", "aws", "sys-log", "fluentd")


def service(name: str = "fluentd", *, headless: bool = False, kind: str = "ClusterIP",
            ports: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": kind, "selector": {"app": name},
                            "ports": ports if ports is not None else [
                                {"name": "forward", "port": 8888, "targetPort": 8888, "protocol": "TCP"},
                                {"name": "http", "port": 8889, "targetPort": 8889, "protocol": "TCP"}]}
    spec["clusterIP"] = "None" if headless else "10.3.88.18"
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "sys-log", "labels": {"mirror": "true"}}, "spec": spec}


def slice_(name: str, ips: list[str], *, ready: bool = True, hostname: str | None = None,
           terminating: bool = False) -> dict[str, Any]:
    endpoints = []
    for ip in ips:
        endpoint: dict[str, Any] = {"addresses": [ip], "conditions": {"ready": ready, "serving": ready,
                                                                      "terminating": terminating},
                                    "nodeName": "aws-node-0", "zone": "eu-1a",
                                    "targetRef": {"kind": "Pod", "name": f"p-{ip}", "namespace": "sys-log"}}
        if hostname:
            endpoint["hostname"] = hostname
        endpoints.append(endpoint)
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": "sys-log", "labels": {L.SERVICE_NAME: "fluentd"}},
            "addressType": "IPv4", "endpoints": endpoints,
            "ports": [{"name": "forward", "port": 8888, "protocol": "TCP"},
                      {"name": "http", "port": 8889, "protocol": "TCP"}]}


def test_the_mirror_of_fluentd() -> None:
    desired = desired_mirror(SOURCE, service(), [slice_("fluentd-abcde", ["10.2.3.19", "10.2.4.19"])],
                             "sys-semaphore")
    assert desired is not None
    svc = desired.service
    assert svc["metadata"]["name"] == "aws-sys-log-73736d-fluentd"
    assert svc["metadata"]["namespace"] == "sys-semaphore"
    assert svc["metadata"]["labels"] == {"mirrored-svc": "true", "mirror-svc-prefix-sync": "aws"}
    assert svc["metadata"]["annotations"]["connect.tether.io/source-namespace"] == "sys-log"
    assert "selector" not in svc["spec"] and "clusterIP" not in svc["spec"]
    assert [(p["name"], p["port"]) for p in svc["spec"]["ports"]] == [("forward", 8888), ("http", 8889)]
    (local_slice,) = desired.slices
    assert local_slice["metadata"]["name"] == "aws-sys-log-73736d-fluentd-abcde"
    assert local_slice["metadata"]["labels"][L.SERVICE_NAME] == "aws-sys-log-73736d-fluentd"
    assert local_slice["metadata"]["labels"][L.MANAGED_BY] == "semaphore-service-mirror"
    assert [e["addresses"] for e in local_slice["endpoints"]] == [["10.2.3.19"], ["10.2.4.19"]]
    (subset,) = desired.endpoints["subsets"]
    assert [a["ip"] for a in subset["addresses"]] == ["10.2.3.19", "10.2.4.19"]
    assert {p["port"] for p in subset["ports"]} == {8888, 8889}
    assert desired.endpoints["metadata"]["labels"][L.SKIP_MIRROR] == "true"


def test_node_ports_are_dropped_and_the_type_is_cluster_ip() -> None:
    remote = service(kind="NodePort", ports=[{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080}])
    desired = desired_mirror(SOURCE, remote, [], "m")
    assert desired is not None
    assert desired.service["spec"]["type"] == "ClusterIP"
    assert desired.service["spec"]["ports"] == [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}]


def test_headless_stays_headless_with_hostnames() -> None:
    desired = desired_mirror(SOURCE, service(headless=True), [slice_("fluentd-x", ["10.2.0.5"], hostname="fluentd-0")],
                             "m")
    assert desired is not None
    assert desired.service["spec"]["clusterIP"] == "None"
    assert desired.slices[0]["endpoints"][0]["hostname"] == "fluentd-0"
    assert desired.endpoints["subsets"][0]["addresses"][0]["hostname"] == "fluentd-0"


def test_external_name_and_gone_services_have_no_mirror() -> None:
    assert desired_mirror(SOURCE, None, [], "m") is None
    assert desired_mirror(SOURCE, service(kind="ExternalName"), [], "m") is None


@pytest.mark.parametrize(("freshness", "slices", "ready"), [
    ("fresh", 1, [True]),
    ("unreachable", 1, [True]),
    ("not-ready", 1, [False]),
    ("withdrawn", 0, []),
])
def test_freshness_changes_only_the_endpoints(freshness: Any, slices: int, ready: list[bool]) -> None:
    desired = desired_mirror(SOURCE, service(), [slice_("fluentd-a", ["10.2.3.19"])], "m", freshness)
    assert desired is not None
    assert len(desired.slices) == slices
    assert [e["conditions"]["ready"] for s in desired.slices for e in s["endpoints"]] == ready
    subsets = desired.endpoints.get("subsets") or []
    assert sum(len(s.get("addresses") or []) for s in subsets) == ready.count(True)
    assert sum(len(s.get("notReadyAddresses") or []) for s in subsets) == ready.count(False)


def test_endpoints_skip_terminating_not_ready_and_cap_at_1000() -> None:
    ips = [f"10.2.{i // 250}.{i % 250}" for i in range(1100)]
    body = endpoints_from_slices("n", "m", {}, {}, [slice_("a", ips), slice_("b", ["10.9.9.9"], ready=False,
                                                                             terminating=True)])
    (subset,) = body["subsets"]
    assert len(subset["addresses"]) == 1000
    assert body["metadata"]["annotations"][L.OVER_CAPACITY] == "truncated"
    assert "10.9.9.9" not in str(body)


def _applied(desired_obj: dict[str, Any], **server: Any) -> dict[str, Any]:
    """What the server would hand back: the object with server fields."""
    obj = copy.deepcopy(desired_obj)
    obj["metadata"].update({"uid": "u-" + obj["metadata"]["name"], "resourceVersion": "1"}, **server)
    if obj["kind"] == "Service" and "clusterIP" not in obj["spec"]:
        obj["spec"]["clusterIP"] = "10.5.184.192"
    return obj


def test_plan_creates_then_is_empty_once_applied() -> None:
    desired = desired_mirror(SOURCE, service(), [slice_("fluentd-a", ["10.2.3.19"])], "m")
    assert desired is not None
    first = plan(desired, Existing())
    assert [str(s) for s in first.steps] == [
        "create Service aws-sys-log-73736d-fluentd", "create EndpointSlice aws-sys-log-73736d-fluentd-a",
        "create Endpoints aws-sys-log-73736d-fluentd"]
    existing = Existing(_applied(desired.service), _applied(desired.endpoints),
                        tuple(_applied(s) for s in desired.slices))
    assert plan(desired, existing).empty


def test_an_endpoint_change_updates_the_slice_and_endpoints_only() -> None:
    before = desired_mirror(SOURCE, service(), [slice_("fluentd-a", ["10.2.3.19", "10.2.4.19"])], "m")
    after = desired_mirror(SOURCE, service(), [slice_("fluentd-a", ["10.2.3.19"])], "m")
    assert before is not None and after is not None
    existing = Existing(_applied(before.service), _applied(before.endpoints),
                        tuple(_applied(s) for s in before.slices))
    steps = plan(after, existing).steps
    assert [str(s) for s in steps] == ["update EndpointSlice aws-sys-log-73736d-fluentd-a",
                                       "update Endpoints aws-sys-log-73736d-fluentd"]
    assert steps[0].obj["metadata"]["resourceVersion"] == "1"  # a conditional update
    assert [e["addresses"] for e in steps[0].obj["endpoints"]] == [["10.2.3.19"]]


def test_headless_to_cluster_ip_recreates_the_service() -> None:
    before = desired_mirror(SOURCE, service(headless=True), [], "m")
    after = desired_mirror(SOURCE, service(), [], "m")
    assert before is not None and after is not None
    result = plan(after, Existing(_applied(before.service), _applied(before.endpoints)))
    assert result.recreated
    assert [str(s) for s in result.steps][:2] == ["delete Service aws-sys-log-73736d-fluentd",
                                                  "create Service aws-sys-log-73736d-fluentd"]


def test_port_change_updates_the_service_in_place_keeping_its_cluster_ip() -> None:
    before = desired_mirror(SOURCE, service(), [], "m")
    after = desired_mirror(SOURCE, service(ports=[{"name": "http", "port": 8889}]), [], "m")
    assert before is not None and after is not None
    steps = plan(after, Existing(_applied(before.service), _applied(before.endpoints))).steps
    assert [str(s) for s in steps] == ["update Service aws-sys-log-73736d-fluentd"]
    assert steps[0].obj["spec"]["clusterIP"] == "10.5.184.192"
    assert steps[0].obj["spec"]["ports"] == [{"name": "http", "protocol": "TCP", "port": 8889, "targetPort": 8889}]


def test_gone_removes_everything_slices_first() -> None:
    before = desired_mirror(SOURCE, service(), [slice_("fluentd-a", ["10.2.3.19"])], "m")
    assert before is not None
    existing = Existing(_applied(before.service), _applied(before.endpoints),
                        tuple(_applied(s) for s in before.slices))
    steps = plan(None, existing).steps
    assert [s.action for s in steps] == ["delete", "delete", "delete"]
    assert [s.kind for s in steps] == ["EndpointSlice", "Endpoints", "Service"]
    assert steps[-1].obj["metadata"]["uid"] == "u-aws-sys-log-73736d-fluentd"


def test_extra_slices_are_deleted() -> None:
    before = desired_mirror(SOURCE, service(), [slice_("fluentd-a", ["1.1.1.1"]), slice_("fluentd-b", ["1.1.1.2"])],
                            "m")
    after = desired_mirror(SOURCE, service(), [slice_("fluentd-a", ["1.1.1.1"])], "m")
    assert before is not None and after is not None
    existing = Existing(_applied(before.service), _applied(before.endpoints),
                        tuple(_applied(s) for s in before.slices))
    assert [str(s) for s in plan(after, existing).steps] == [
        "delete EndpointSlice aws-sys-log-73736d-fluentd-b", "update Endpoints aws-sys-log-73736d-fluentd"]


# global services ------------------------------------------------------------------------------


def contribution(cluster: str, *, local: bool = False, headless: bool = False,
                 ports: list[dict[str, Any]] | None = None, freshness: Any = "fresh") -> Contribution:
    return Contribution(cluster, service(headless=headless, ports=ports),
                        (slice_(f"fluentd-{cluster}", [f"10.{len(cluster)}.0.1"]),), local, freshness)


def test_global_service_merges_clusters_with_local_first_hints() -> None:
    result = desired_global("sys-log", "fluentd", [contribution("gcp", local=True), contribution("aws")],
                            "sys-semaphore", zones=["europe-west2-a", "europe-west2-b"], routed={"aws": True})
    assert result.desired is not None and result.clusters == ("gcp", "aws")
    svc = result.desired.service
    assert svc["metadata"]["name"] == "gl-sys-log-73736d-fluentd"
    assert svc["metadata"]["labels"] == {"global-svc": "true"}
    assert svc["metadata"]["annotations"]["global-svc-clusters"] == "aws,gcp"
    assert svc["metadata"]["annotations"][L.TOPOLOGY_HINTS] == "auto"
    local_slice, remote_slice = result.desired.slices
    assert local_slice["metadata"]["name"] == "gl-fluentd-gcp"
    assert local_slice["metadata"]["labels"][L.SLICE_SYNC_NAME] == "gcp"
    assert local_slice["metadata"]["labels"][L.MIRRORED_SLICE] == "true"
    assert local_slice["endpoints"][0]["hints"] == {"forZones": [{"name": "europe-west2-a"},
                                                                 {"name": "europe-west2-b"}]}
    assert remote_slice["endpoints"][0]["zone"] == "remote"
    assert remote_slice["endpoints"][0]["hints"] == {"forZones": [{"name": "remote"}]}


def test_global_without_routing_label_has_no_hints_annotation() -> None:
    result = desired_global("sys-log", "fluentd", [contribution("aws")], "m", zones=["local"])
    assert result.desired is not None
    assert L.TOPOLOGY_HINTS not in result.desired.service["metadata"]["annotations"]


def test_global_conflicts_are_resolved_by_precedence_not_by_race() -> None:
    result = desired_global("sys-log", "fluentd", [
        contribution("gcp", local=True),
        contribution("aws", headless=True),
        contribution("dc", ports=[{"name": "x", "port": 1}]),
    ], "m", zones=["local"])
    assert result.desired is not None
    assert result.clusters == ("gcp", "dc")
    assert len(result.conflicts) == 2
    assert [p["port"] for p in result.desired.service["spec"]["ports"]] == [8888, 8889]


def test_global_keeps_slices_of_clusters_not_synced_yet() -> None:
    before = desired_global("sys-log", "fluentd", [contribution("aws"), contribution("dc")], "m", zones=["local"])
    assert before.desired is not None
    existing = Existing(_applied(before.desired.service), _applied(before.desired.endpoints),
                        tuple(_applied(s) for s in before.desired.slices))
    # dc is not synced (not in contributions): its slice is kept, not collected
    now = desired_global("sys-log", "fluentd", [contribution("aws")], "m", zones=["local"])
    assert now.desired is not None
    steps = plan(now.desired, existing, keep_slices=["gl-fluentd-dc"]).steps
    assert "delete EndpointSlice gl-fluentd-dc" not in [str(s) for s in steps]
    # nobody has it and dc's state is unknown: the Service stays
    steps = plan(None, existing, keep_slices=["gl-fluentd-dc"]).steps
    assert [str(s) for s in steps] == ["delete EndpointSlice gl-fluentd-aws"]


def test_global_withdrawn_cluster_contributes_no_endpoints() -> None:
    result = desired_global("sys-log", "fluentd", [contribution("aws", freshness="withdrawn"),
                                                   contribution("dc")], "m", zones=["local"])
    assert result.desired is not None
    assert [s["metadata"]["name"] for s in result.desired.slices] == ["gl-fluentd-dc"]


# staleness ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "elapsed", "expected"), [
    ("keep", 1000.0, "unreachable"),
    ("not-ready", 5.0, "unreachable"),
    ("not-ready", 30.0, "not-ready"),
    ("withdraw", 29.9, "unreachable"),
    ("withdraw", 31.0, "withdrawn"),
])
def test_freshness_by_policy(policy: Any, elapsed: float, expected: str) -> None:
    settings = StaleSettings(policy, 30.0)
    tracker = stale.Tracker().observe(False, 100.0, "refused")
    assert stale.freshness(tracker, settings, 100.0 + elapsed) == expected
    assert stale.freshness(tracker.observe(True, 200.0), settings, 10_000.0) == "fresh"


def test_next_change_and_condition() -> None:
    settings = StaleSettings("withdraw", 30.0)
    tracker = stale.Tracker().observe(False, 100.0)
    assert stale.next_change_s(tracker, settings, 110.0) == pytest.approx(20.0)
    assert stale.next_change_s(tracker, settings, 140.0) is None
    assert stale.condition("withdrawn", settings).reason == "EndpointsWithdrawn"
    assert stale.condition("fresh", settings).status == "True"
    assert stale.condition("unreachable", StaleSettings()).reason == "RemoteUnreachableKept"
