"""APIServices: the local ones a registry implies, and the Available condition for each."""

from __future__ import annotations

from tether.local.apiservices import (
    LOCAL,
    Availability,
    availability,
    local_apiservices,
    with_condition,
)
from tether.local.resources import Registry


def test_every_served_group_version_is_a_local_apiservice() -> None:
    local = local_apiservices(Registry.with_builtins())
    assert {"v1.", "v1.apps", "v2.autoscaling", "v1.apiregistration.k8s.io", "v1beta1.metrics.k8s.io"} <= set(local)
    assert local["v1.apps"]["spec"] == {"service": None, "group": "apps", "version": "v1",
                                        "groupPriorityMinimum": 17800, "versionPriority": 15}
    assert local["v1."]["metadata"]["labels"] == {"kube-aggregator.kubernetes.io/automanaged": "onstart"}


def test_discovery_lists_groups_by_priority() -> None:
    groups = list(Registry.with_builtins().group_versions())
    assert groups[:3] == ["", "apiregistration.k8s.io", "apps"]
    assert groups[-1] == "metrics.k8s.io"


SPEC = {"group": "example.com", "version": "v1", "service": {"namespace": "ns", "name": "api", "port": 443}}
SERVICE = {"spec": {"ports": [{"name": "https", "port": 443}]}}


def test_availability_reasons() -> None:
    assert availability({"group": "apps", "version": "v1", "service": None}, None, None) == LOCAL
    assert availability(SPEC, None, None) == Availability("False", "ServiceNotFound",
                                                          'service/api in "ns" is not present')
    missing = availability(SPEC, SERVICE, {"subsets": []})
    assert (missing.reason, missing.message) == (
        "MissingEndpoints", 'endpoints for service/api in "ns" have no addresses with port name "https"')
    ready = {"subsets": [{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"name": "https", "port": 8443}]}]}
    assert availability(SPEC, SERVICE, ready).reason == "FailedDiscoveryCheck"


def test_the_transition_time_moves_only_when_the_status_does() -> None:
    first = with_condition(None, Availability("False", "ServiceNotFound", "m"), "T1")
    same = with_condition(first, Availability("False", "MissingEndpoints", "m2"), "T2")
    assert same["conditions"][0]["lastTransitionTime"] == "T1" and same["conditions"][0]["reason"] == "MissingEndpoints"
    flipped = with_condition(same, LOCAL, "T3")
    assert flipped["conditions"] == [{"type": "Available", "status": "True", "lastTransitionTime": "T3",
                                      "reason": "Local", "message": "Local APIServices are always available"}]
