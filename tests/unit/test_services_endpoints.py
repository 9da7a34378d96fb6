"""Endpoints and EndpointSlice planning (pure) and the proxy's route planning."""

from __future__ import annotations

from typing import Any

from tether.local.services.endpoints import (
    MANAGED_BY_LABEL,
    SERVICE_NAME_LABEL,
    backends_for,
    desired_slices,
    plan_endpoints,
    plan_slices,
    resolve_target_port,
)
from tether.local.services.proxy import Route, order_backends, plan_routes


def service(**spec: Any) -> dict[str, Any]:
    spec.setdefault("selector", {"app": "web"})
    spec.setdefault("ports", [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "web"}])
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "default", "uid": "svc-uid", "labels": {"tier": "front"}},
            "spec": spec}


def pod(name: str, ip: str | None, *, ready: bool = True, labels: dict[str, str] | None = None,
        port: int = 8080, deleting: bool = False, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}",
                            "labels": labels if labels is not None else {"app": "web"}}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    status: dict[str, Any] = {"phase": "Running",
                              "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if ip:
        status["podIP"] = ip
    spec.setdefault("nodeName", "node-1")
    spec["containers"] = [{"name": "c", "image": "x", "ports": [{"name": "web", "containerPort": port, "protocol": "TCP"}]}]
    return {"metadata": meta, "spec": spec, "status": status}


def test_target_port_resolution() -> None:
    p = pod("a", "127.16.1.2", port=9090)
    assert resolve_target_port({"port": 80, "targetPort": "web"}, p) == 9090
    assert resolve_target_port({"port": 80, "targetPort": 81}, p) == 81
    assert resolve_target_port({"port": 80}, p) == 80
    assert resolve_target_port({"port": 80, "targetPort": "other"}, p) is None
    assert resolve_target_port({"port": 80, "targetPort": "web", "protocol": "UDP"}, p) is None


def test_backends_select_and_classify() -> None:
    pods = [
        pod("b", "127.16.1.3", ready=False),
        pod("a", "127.16.1.2"),
        pod("no-ip", None),
        pod("other", "127.16.1.9", labels={"app": "db"}),
        pod("going", "127.16.1.4", deleting=True),
        pod("named", "127.16.1.5", hostname="h0", subdomain="web"),
    ]
    found = backends_for(service(), pods, {"node-1": "zone-a"})
    assert [b.pod_name for b in found] == ["a", "b", "going", "named"]
    assert [(b.ready, b.serving, b.terminating) for b in found] == [
        (True, True, False), (False, False, False), (False, True, True), (True, True, False)]
    assert found[3].hostname == "h0" and found[0].hostname is None
    assert found[0].zone == "zone-a"
    assert backends_for(service(selector={}), pods) == []


def test_plan_endpoints_subsets() -> None:
    found = backends_for(service(), [pod("a", "127.16.1.2"), pod("b", "127.16.1.3", ready=False),
                                     pod("c", "127.16.1.4", port=9090)])
    ep = plan_endpoints(service(), found)
    assert ep["metadata"]["name"] == "web"
    assert ep["metadata"]["labels"]["tier"] == "front"
    assert ep["subsets"] == [
        {"addresses": [{"ip": "127.16.1.2", "nodeName": "node-1",
                        "targetRef": {"kind": "Pod", "namespace": "default", "name": "a", "uid": "uid-a"}}],
         "notReadyAddresses": [{"ip": "127.16.1.3", "nodeName": "node-1",
                                "targetRef": {"kind": "Pod", "namespace": "default", "name": "b", "uid": "uid-b"}}],
         "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]},
        {"addresses": [{"ip": "127.16.1.4", "nodeName": "node-1",
                        "targetRef": {"kind": "Pod", "namespace": "default", "name": "c", "uid": "uid-c"}}],
         "ports": [{"name": "http", "port": 9090, "protocol": "TCP"}]},
    ]
    assert "subsets" not in plan_endpoints(service(), [])


def test_desired_slices_shape() -> None:
    found = backends_for(service(), [pod("a", "127.16.1.2"), pod("b", "127.16.1.3", ready=False)])
    (body,) = desired_slices(service(), found)
    assert body["apiVersion"] == "discovery.k8s.io/v1"
    assert body["addressType"] == "IPv4"
    assert body["metadata"]["generateName"] == "web-"
    assert body["metadata"]["labels"][SERVICE_NAME_LABEL] == "web"
    assert body["metadata"]["labels"][MANAGED_BY_LABEL] == "endpointslice-controller.k8s.io"
    assert body["metadata"]["ownerReferences"][0]["uid"] == "svc-uid"
    assert body["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    assert body["endpoints"][1] == {
        "addresses": ["127.16.1.3"], "conditions": {"ready": False, "serving": False, "terminating": False},
        "nodeName": "node-1", "targetRef": {"kind": "Pod", "namespace": "default", "name": "b", "uid": "uid-b"}}
    # an empty Service still gets a placeholder slice; many endpoints are chunked
    (empty,) = desired_slices(service(), [])
    assert empty["endpoints"] == [] and empty["ports"] == []
    many = backends_for(service(), [pod(f"p{i}", f"127.16.2.{i}") for i in range(1, 6)])
    assert [len(s["endpoints"]) for s in desired_slices(service(), many, max_endpoints=2)] == [2, 2, 1]


def named(body: dict[str, Any], name: str) -> dict[str, Any]:
    copy = {**body, "metadata": {**body["metadata"], "name": name, "resourceVersion": "5"}}
    return copy


def test_plan_slices_reuses_updates_and_deletes() -> None:
    found = backends_for(service(), [pod("a", "127.16.1.2")])
    (wanted,) = desired_slices(service(), found)
    same = named(wanted, "web-aaaaa")
    assert plan_slices([wanted], [same]).empty
    stale = named({**wanted, "endpoints": []}, "web-bbbbb")
    plan = plan_slices([wanted], [stale, named(wanted, "web-ccccc")])
    assert plan.create == () and plan.update == () and plan.delete == ("web-bbbbb",)
    plan = plan_slices([wanted], [stale])
    assert plan.update[0]["metadata"]["name"] == "web-bbbbb"
    assert plan.update[0]["metadata"]["resourceVersion"] == "5"
    assert plan.update[0]["endpoints"] == wanted["endpoints"]
    plan = plan_slices([wanted], [])
    assert plan.create == (wanted,)


def test_plan_routes() -> None:
    svc = service(clusterIP="127.64.0.5", type="NodePort", sessionAffinity="ClientIP",
                  ports=[{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080},
                         {"name": "dns", "port": 53, "protocol": "UDP"}])
    found = backends_for(service(), [pod("a", "127.16.1.2"), pod("b", "127.16.1.3", ready=False),
                                     pod("c", "127.16.1.1")])
    slices = [{**s, "metadata": {**s["metadata"], "name": "web-x"}} for s in desired_slices(service(), found)]
    routes = plan_routes([svc, service(clusterIP="None")], slices)
    assert set(routes) == {("127.64.0.5", 80), ("127.0.0.1", 30080)}
    route = routes[("127.64.0.5", 80)]
    assert route.backends == (("127.16.1.1", 8080), ("127.16.1.2", 8080))
    assert route.affinity_timeout_s == 10800.0
    assert plan_routes([svc], [])[("127.64.0.5", 80)].backends == ()


def test_order_backends() -> None:
    route = Route(("default", "web"), "http", (("a", 1), ("b", 1), ("c", 1)))
    assert order_backends(route, 0, None) == [("a", 1), ("b", 1), ("c", 1)]
    assert order_backends(route, 4, None) == [("b", 1), ("c", 1), ("a", 1)]
    assert order_backends(route, 0, ("c", 1)) == [("c", 1), ("a", 1), ("b", 1)]
    assert order_backends(route, 0, ("gone", 1)) == [("a", 1), ("b", 1), ("c", 1)]
    assert order_backends(Route(("d", "w"), "", ()), 3, None) == []
