"""Kernel Service routing (pure): Services and EndpointSlices -> each node's nft table."""

from __future__ import annotations

from typing import Any

import pytest

from tether.local.services.kernel import render, service_ports


def svc(name: str, ip: str, port: int, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "default", "name": name},
            "spec": {"clusterIP": ip, "ports": [{"port": port, "protocol": spec.pop("protocol", "TCP"),
                                                 **({"nodePort": spec.pop("nodePort")} if "nodePort" in spec else {})}],
                     **spec}}


def slc(service: str, port: int, *endpoints: tuple[str, str], protocol: str = "TCP", ready: bool = True) -> dict[str, Any]:
    return {"metadata": {"namespace": "default", "name": f"{service}-x", "labels": {"kubernetes.io/service-name": service}},
            "ports": [{"port": port, "protocol": protocol, "name": ""}],
            "endpoints": [{"addresses": [ip], "nodeName": node, "conditions": {"ready": ready}} for ip, node in endpoints]}


CASES = [
    # (what, services, slices, node, present, absent)
    ("ClusterIP spread over both endpoints", [svc("web", "10.96.0.20", 80)],
     [slc("web", 8080, ("10.16.1.5", "n0"), ("10.16.2.5", "n1"))], "n0",
     ["10.96.0.20 . tcp . 80 : goto svc-0", "numgen random mod 2 vmap { 0 : goto ep-0-0, 1 : goto ep-0-1 }",
      "dnat to 10.16.1.5:8080", "dnat to 10.16.2.5:8080"], ["@aff-"]),
    ("no ready endpoint: left to the router's proxy", [svc("web", "10.96.0.20", 80)],
     [slc("web", 8080, ("10.16.1.5", "n0"), ready=False)], "n0", [], ["10.96.0.20", "dnat"]),
    ("a loopback endpoint (the kubernetes Service): left to the proxy", [svc("kubernetes", "10.96.0.1", 443)],
     [slc("kubernetes", 6443, ("127.0.0.1", ""))], "n0", [], ["10.96.0.1", "dnat"]),
    ("ClientIP affinity: a timed set per endpoint, looked up first", [svc("web", "10.96.0.20", 80, sessionAffinity="ClientIP",
                                                                          sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}})],
     [slc("web", 8080, ("10.16.1.5", "n0"))], "n1",
     ["set aff-0-0 { type ipv4_addr; flags dynamic,timeout; timeout 60s; }", "ip saddr @aff-0-0 goto ep-0-0",
      "update @aff-0-0 { ip saddr }"], []),
    ("internalTrafficPolicy Local: only this node's endpoints", [svc("web", "10.96.0.20", 80, internalTrafficPolicy="Local")],
     [slc("web", 8080, ("10.16.1.5", "n0"), ("10.16.2.5", "n1"))], "n1",
     ["numgen random mod 1 vmap { 0 : goto ep-0-1 }"], ["goto ep-0-0 }"]),
    ("internalTrafficPolicy Local without a local endpoint: dropped", [svc("web", "10.96.0.20", 53, protocol="UDP",
                                                                          internalTrafficPolicy="Local")],
     [slc("web", 5353, ("10.16.1.5", "n0"), protocol="UDP")], "n1",
     ["set no-endpoints { type ipv4_addr . inet_proto . inet_service; elements = { 10.96.0.20 . udp . 53 }; }"],
     ["goto svc-0"]),
    ("NodePort: every endpoint, masqueraded", [svc("web", "10.96.0.20", 80, type="NodePort", nodePort=30080)],
     [slc("web", 8080, ("10.16.1.5", "n0"))], "n1",
     ["tcp . 30080 : goto ext-0", "meta mark set meta mark | 0x4000\n        goto ext-pick-0", "masquerade"], []),
]


@pytest.mark.parametrize(("what", "services", "slices", "node", "present", "absent"), CASES, ids=[c[0] for c in CASES])
def test_render(what: str, services: list[Any], slices: list[Any], node: str, present: list[str], absent: list[str]) -> None:
    script = render(service_ports(services, slices), node)
    assert script.startswith("table ip tether-services {}\ndelete table ip tether-services\n")  # one transaction
    for text in present:
        assert text in script, (what, script)
    for text in absent:
        assert text not in script, (what, script)
