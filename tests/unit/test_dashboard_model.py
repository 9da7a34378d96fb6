"""The dashboard's model: a pure function of the hub's caches."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether.app.dashboard import model as M
from tether.app.dashboard.access import dashboard_review
from tether.federation import works as W
from tether.federation.clusterproxy import Caller
from tether.federation.crds import execution_namespace
from tether.federation.model import ResourceRef
from tether.objects.times import seconds_of

NOW = 1_800_000_000.0


def cluster(name: str, *, mode: str = "Push", ready: str = "True", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": "2027-01-15T08:00:00Z",
                     "labels": {"env": "<script>alert(1)</script>"}},
        "spec": {"syncMode": mode, "apiEndpoint": f"https://{name}:6443", "region": "eu",
                 "zones": ["a", "b"],
                 "taints": [{"key": "cluster.karmada.io/not-ready", "effect": "NoSchedule"}]},
        "status": {"conditions": [
            {"type": "Ready", "status": ready, "reason": "R", "message": "m",
             "lastTransitionTime": "2027-01-15T08:00:10Z"},
            {"type": "MeshReady", "status": "True", "reason": "Handshakes", "message": "2 peers"}],
            "kubernetesVersion": "v1.31.0",
            "nodeSummary": {"totalNum": 3, "readyNum": 2},
            "resourceSummary": {"allocatable": {"cpu": "12", "memory": "24Gi", "pods": "330"}},
            **status},
    }


@pytest.mark.parametrize(("mode", "lease", "probe", "status", "heartbeat", "kind", "error"), [
    # push: the hub's last probe is the heartbeat; a failed probe says why
    ("Push", None, M.ProbeSeen(NOW - 3, True), {}, NOW - 3, "probe", ""),
    ("Push", None, M.ProbeSeen(NOW - 3, False, "connection refused"), {}, NOW - 3, "probe",
     "connection refused"),
    ("Push", None, None, {}, None, "", ""),
    # pull: the newer of the Lease's renewTime and status.lastHeartbeatTime
    ("Pull", NOW + 5, None, {"lastHeartbeatTime": "2027-01-15T08:00:00Z"}, NOW + 5, "lease", ""),
    ("Pull", NOW - 5, None, {"lastHeartbeatTime": "2027-01-15T08:00:00Z"}, NOW, "lease", ""),
    ("Pull", None, None, {"lastHeartbeatTime": "2027-01-15T08:00:00Z"},
     seconds_of("2027-01-15T08:00:00Z"), "lease", ""),
    ("Pull", None, None, {}, None, "", ""),
])
def test_cluster_heartbeat_and_probe_error(mode: str, lease: float | None, probe: M.ProbeSeen | None,
                                           status: dict[str, Any], heartbeat: float | None,
                                           kind: str, error: str) -> None:
    view = M.cluster_view(cluster("m1", mode=mode, **status), lease_s=lease, probe=probe)
    assert (view.heartbeat_s, view.heartbeat_kind, view.probe_error) == (heartbeat, kind, error)


def test_cluster_facts() -> None:
    view = M.cluster_view(cluster("m1"), lease_s=None, probe=None)
    assert view.mode == "Push" and view.ready == "True" and view.version == "v1.31.0"
    assert (view.nodes_ready, view.nodes_total) == (2, 3)
    assert view.allocatable == (("cpu", "12"), ("memory", "24Gi"), ("pods", "330"))
    assert view.taints == ("cluster.karmada.io/not-ready:NoSchedule",)
    assert view.labels == (("env", "<script>alert(1)</script>"),)  # raw: the page sets text
    assert [c.type for c in view.conditions] == ["MeshReady"]


def test_not_ready_without_probe_shows_the_condition_message() -> None:
    view = M.cluster_view(cluster("m1", ready="False"), lease_s=None, probe=None)
    assert view.ready == "False" and view.probe_error == "m"


def test_malformed_cluster_does_not_break_the_model() -> None:
    view = M.cluster_view({"metadata": {"name": "x"}, "spec": "nonsense", "status": {"conditions": [1]}},
                          lease_s=None, probe=None)
    assert (view.name, view.mode, view.ready, view.nodes_total) == ("x", "Push", "Unknown", None)


def work(cluster: str, ref: ResourceRef, *, applied: str | None, latency: float | None = None,
         status: dict[str, Any] | None = None, generation: int = 1) -> dict[str, Any]:
    conditions = [] if applied is None else [
        {"type": "Applied", "status": applied, "reason": "AppliedOK" if applied == "True" else "ApplyFailed",
         "message": "" if applied == "True" else "quota exceeded", "observedGeneration": generation}]
    entry: dict[str, Any] = {"identifier": {"kind": ref.kind.removeprefix("Federated"), "name": ref.name}}
    if latency is not None:
        entry["latencySeconds"] = latency
    if status is not None:
        entry["status"] = status
    return {"metadata": {"name": "w", "namespace": execution_namespace(cluster),
                         "generation": generation,
                         "labels": {W.DIALECT_LABEL: "kubefed"},
                         "annotations": {W.SOURCE_ANNOTATION: W.source_key(ref)}},
            "status": {"conditions": conditions, "manifestStatuses": [entry]}}


def test_propagation_rows_per_cluster() -> None:
    ref = ResourceRef("types.kubefed.io/v1beta1", "FederatedDeployment", "web", "app")
    source = {"metadata": {"name": "app", "namespace": "web"},
              "status": {"clusters": [{"name": "m3", "status": "ClusterNotReady",
                                       "message": "cluster is not ready"}]}}
    works = (work("m1", ref, applied="True", latency=1.25, status={"replicas": 3, "readyReplicas": 3}),
             work("m2", ref, applied="False"),
             work("m4", ref, applied=None))
    snap = M.HubSnapshot(NOW, sources=(M.SourceEntry("kubefed", ref, source, works),))
    [obj] = M.build(snap).objects
    rows = {p.cluster: p for p in obj.placements}
    assert (obj.kind, obj.namespace, obj.name) == ("FederatedDeployment", "web", "app")
    assert (rows["m1"].applied, rows["m1"].observed, rows["m1"].latency_s) == ("yes", "3/3 ready", 1.25)
    assert (rows["m2"].applied, rows["m2"].reason, rows["m2"].message) == ("no", "ApplyFailed",
                                                                          "quota exceeded")
    assert (rows["m3"].applied, rows["m3"].reason) == ("no", "ClusterNotReady")  # no Work at all
    assert rows["m4"].applied == "pending"


def test_tunnel_mirrors_and_mesh() -> None:
    tunnel = M.TunnelFacts(("m2", "m1"), 2, 0, 1024, 4096, 3, (("no_agent", 1),))
    policy = {"metadata": {"name": "all"},
              "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Mirroring"}],
                         "clusters": [{"name": "m2", "mirrors": ["m1"]}, {"name": "m1", "mirrors": ["m2"]}]}}
    model = M.build(M.HubSnapshot(NOW, clusters=(cluster("m2"), cluster("m1")), tunnel=tunnel,
                                  mirror_policies=(policy,)))
    assert [c.name for c in model.clusters] == ["m1", "m2"]
    assert model.tunnel is not None and model.tunnel.agents == ("m1", "m2")
    assert model.tunnel.connects_refused == 3 and model.tunnel.bytes_from_agents == 4096
    assert model.mirrors[0].clusters == (("m1", ("m2",)), ("m2", ("m1",)))
    assert [(p.cluster, p.status) for p in model.mesh] == [("m1", "True"), ("m2", "True")]


def test_facts_ignore_the_clock_only() -> None:
    one = M.build(M.HubSnapshot(NOW, clusters=(cluster("m1"),)))
    later = M.build(M.HubSnapshot(NOW + 60, clusters=(cluster("m1"),)))
    changed = M.build(M.HubSnapshot(NOW, clusters=(cluster("m1", ready="False"),)))
    assert M.facts_json(one) == M.facts_json(later)
    assert M.facts_json(one) != M.facts_json(changed)
    assert json.loads(M.to_json(one))["clusters"][0]["name"] == "m1"


def test_review_asks_for_get_clusters() -> None:
    review = dashboard_review(Caller("alice", ("dev", "system:authenticated"), "token", uid="u1"))
    attrs = review["spec"]["resourceAttributes"]
    assert (attrs["verb"], attrs["resource"], attrs["group"]) == ("get", "clusters", "cluster.tether.io")
    assert "name" not in attrs and "subresource" not in attrs
    assert review["spec"]["user"] == "alice" and review["spec"]["uid"] == "u1"


def test_dns_records_from_dnsendpoints() -> None:
    endpoint = {"metadata": {"namespace": "web", "name": "app-service"},
                "spec": {"endpoints": [
                    {"dnsName": "app.web.fed.svc.example.com", "recordType": "A",
                     "targets": ["10.0.0.2", "10.0.0.1"], "recordTTL": 300},
                    {"dnsName": "app.web.fed.svc.eu.example.com", "targets": []}]}}
    records = M.build(M.HubSnapshot(NOW, dns_endpoints=(endpoint,))).dns
    assert [(r.dns_name, r.record_type, r.targets, r.ttl) for r in records] == [
        ("app.web.fed.svc.eu.example.com", "A", (), None),
        ("app.web.fed.svc.example.com", "A", ("10.0.0.1", "10.0.0.2"), 300)]
    assert records[0].endpoint == "web/app-service"
