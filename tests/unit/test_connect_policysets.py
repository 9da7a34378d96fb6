"""semaphore-policy's sets, planned: membership, names, labels, and the companion NetworkPolicy."""

from __future__ import annotations

from typing import Any

import pytest

from tether.connect.policysets import plan as P
from tether.connect.policysets.config import PolicySetsConfig, PolicySetsConfigError

V3 = "projectcalico.org/v3"


def pod(name: str = "forwarder-4jdm6", *, value: str | None = "forwarder", ip: str | None = "10.4.1.3",
        ips: list[str] | None = None, phase: str = "Running", host_network: bool = False) -> dict[str, Any]:
    labels = {P.NAME_LABEL: value} if value is not None else {}
    status: dict[str, Any] = {"phase": phase}
    if ip:
        status["podIP"] = ip
    if ips:
        status["podIPs"] = [{"ip": i} for i in ips]
    return {"metadata": {"name": name, "namespace": "sys-log", "labels": labels},
            "spec": {"hostNetwork": host_network}, "status": status}


@pytest.mark.parametrize(("obj", "expected"), [
    (pod(), (P.SetKey("sys-log", "forwarder"), ("10.4.1.3/32",))),
    (pod(ips=["10.4.1.3", "fd00::1"]), (P.SetKey("sys-log", "forwarder"), ("10.4.1.3/32", "fd00::1/128"))),
    (pod(ip="fd00::2"), (P.SetKey("sys-log", "forwarder"), ("fd00::2/128",))),
    (pod(phase="Succeeded"), None),
    (pod(phase="Failed"), None),
    (pod(host_network=True), None),
    (pod(ip=None), None),
    (pod(value=None), None),
    (pod(value=""), None),
])
def test_membership(obj: dict[str, Any], expected: Any) -> None:
    assert P.membership(obj) == expected


def test_forwarder_set_name_labels_and_sorted_nets() -> None:
    nets = {"10.4.5.2/32", "10.4.4.2/32", "10.4.1.3/32", "10.4.0.13/32", "10.4.3.3/32", "10.4.2.4/32"}
    body = P.desired_set("gcp", P.SetKey("sys-log", "forwarder"), frozenset(nets), V3)
    assert body is not None
    assert body["metadata"]["name"] == "gcp-sys-log-forwarder"
    assert body["metadata"]["labels"] == {
        "managed-by": "semaphore-policy", "policy.semaphore.uw.io/cluster": "gcp",
        "policy.semaphore.uw.io/name": "forwarder", "policy.semaphore.uw.io/namespace": "sys-log"}
    assert body["spec"]["nets"] == ["10.4.0.13/32", "10.4.1.3/32", "10.4.2.4/32", "10.4.3.3/32", "10.4.4.2/32",
                                    "10.4.5.2/32"]


def test_plans() -> None:
    key = P.SetKey("sys-log", "forwarder")
    wanted = P.desired_set("gcp", key, frozenset({"10.0.0.1/32"}), V3)
    assert P.plan_set(None, None) is None
    step = P.plan_set(wanted, None)
    assert step is not None and step.action == "create"
    existing = {**wanted, "metadata": {**wanted["metadata"], "resourceVersion": "7"}}  # type: ignore[dict-item]
    assert P.plan_set(wanted, existing) is None
    fewer = P.desired_set("gcp", key, frozenset({"10.0.0.2/32"}), V3)
    step = P.plan_set(fewer, existing)
    assert step is not None and step.action == "update" and step.obj["metadata"]["resourceVersion"] == "7"
    assert step.obj["spec"]["nets"] == ["10.0.0.2/32"]
    emptied = P.plan_set(P.desired_set("gcp", key, frozenset(), V3), existing)
    assert emptied is not None and emptied.action == "delete"


def test_companion_policy() -> None:
    template = {"metadata": {"name": "allow-forwarders", "namespace": "sys-log", "uid": "u1",
                             "annotations": {P.FROM_ANNOTATION: "policy.semaphore.uw.io/name == 'forwarder'",
                                             P.PORTS_ANNOTATION: "8889, 53/udp"}},
                "spec": {"podSelector": {"matchLabels": {"app": "fluentd"}}, "policyTypes": ["Ingress"]}}
    body = P.companion_policy(template, "gcp", ["10.4.1.3/32", "10.4.0.13/32"])
    assert body["metadata"]["name"] == "allow-forwarders-gcp"
    assert body["metadata"]["ownerReferences"][0]["uid"] == "u1"
    (rule,) = body["spec"]["ingress"]
    assert rule["from"] == [{"ipBlock": {"cidr": "10.4.0.13/32"}}, {"ipBlock": {"cidr": "10.4.1.3/32"}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8889}, {"protocol": "UDP", "port": 53}]
    # no nets: the companion allows nothing (never an empty `from`, which would allow everyone)
    assert P.companion_policy(template, "gcp", [])["spec"]["ingress"] == []


@pytest.mark.parametrize("text", ["70000", "80/ICMP", "a b"])
def test_bad_ports(text: str) -> None:
    with pytest.raises(P.PortsError):
        P.parse_ports(text)


@pytest.mark.parametrize(("values", "flag"), [
    ({}, "-target-cluster-name"),
    ({"target_cluster_name": "GCP", "target_kubeconfig": "x"}, "-target-cluster-name"),
    ({"target_cluster_name": "gcp"}, "-remote-api-url"),
    ({"target_cluster_name": "gcp", "remote_api_url": "https://a", "remote_ca_url": "https://b"},
     "-remote-sa-token-path"),
])
def test_config_errors_name_the_flag(values: dict[str, Any], flag: str) -> None:
    with pytest.raises(PolicySetsConfigError) as caught:
        PolicySetsConfig.build(**values)
    assert str(caught.value).startswith(flag)


def test_a_token_in_the_environment_is_enough() -> None:
    config = PolicySetsConfig.build(target_cluster_name="gcp", remote_api_url="https://a", remote_ca_url="https://b",
                                    remote_sa_token="t")
    assert config.remote_sa_token == "t"
