"""The policy plan (pure): Kubernetes and Calico policies -> nft scripts per node, and Problems."""

from __future__ import annotations

from typing import Any

import pytest

from tether.local.netpolicy.plan import Endpoint, plan

NGINX = Endpoint("u1", "default", "nginx", "10.16.1.5", "n0", {"app": "nginx"}, {"http": ("tcp", 80)}, False, "paaa")
CLIENT = Endpoint("u2", "default", "client", "10.16.2.5", "n1", {"access": "true"}, {}, False, "pbbb")
OTHER = Endpoint("u5", "default", "other", "10.16.2.6", "n1", {}, {}, False, "peee")
MEMCACHED = Endpoint("u3", "default", "mc", "10.128.0.2", "n0", {"app": "memcached"}, {}, True, "")
FLUENTD = Endpoint("u4", "sys-log", "fluentd", "10.16.1.9", "n0", {"app": "fluentd"}, {}, False, "pccc")
ENDPOINTS = [NGINX, CLIENT, OTHER, MEMCACHED, FLUENTD]
NAMESPACES = [{"metadata": {"name": "default"}}, {"metadata": {"name": "sys-log", "labels": {"team": "log"}}}]
SETS = [{"metadata": {"name": "fwd", "labels": {"role": "forwarder"}}, "spec": {"nets": ["10.17.0.0/16"]}}]


def k8s(name: str, spec: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"namespace": namespace, "name": name}, "spec": spec}


def calico(name: str, spec: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
    kind = "NetworkPolicy" if namespace else "GlobalNetworkPolicy"
    meta = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": "projectcalico.org/v3", "kind": kind, "metadata": meta, "spec": spec}


DENY_ALL = k8s("deny", {"podSelector": {}})
ACCESS = k8s("access", {"podSelector": {"matchLabels": {"app": "nginx"}},
                        "ingress": [{"from": [{"podSelector": {"matchLabels": {"access": "true"}}}],
                                     "ports": [{"port": "http"}]}]})

CASES = [
    # (what, k8s policies, calico policies, node, lines that must be there, lines that must not)
    ("no policy: no chain, everything flows", [], [], "n0", ['map ingress { type ifname : verdict; }'], ["pod-", "hep-"]),
    ("default deny: an empty podSelector selects every pod", [DENY_ALL], [], "n1",
     ['"pbbb" : jump pod-0-ingress', '"peee" : jump pod-1-ingress', "        drop"], []),
    ("only access=true pods reach nginx on its named port", [DENY_ALL, ACCESS], [], "n0",
     ["ip saddr 10.16.2.5/32 ip daddr 10.16.1.5 tcp dport 80 accept"], ["10.16.2.6"]),
    ("ipBlock with except, UDP port range (endPort)",
     [k8s("blk", {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}],
                                                  "ports": [{"protocol": "UDP", "port": 8000, "endPort": 8080}]}]})],
     [], "n0", ["ip saddr 10.0.0.0/8 ip saddr != 10.1.0.0/16 udp dport 8000-8080 accept"], []),
    ("egress with namespaceSelector", [k8s("eg", {"podSelector": {}, "policyTypes": ["Egress"],
                                                  "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"team": "log"}}}]}]})],
     [], "n0", ['"paaa" : jump pod-0-egress', "ip daddr 10.16.1.9/32 accept"], ["pod-0-ingress"]),
    ("calico global() selects GlobalNetworkSets", [],
     [calico("allow-to-fluentd", {"selector": "app == 'fluentd'", "ingress": [
         {"action": "Allow", "protocol": "TCP", "source": {"selector": "role == 'forwarder'", "namespaceSelector": "global()"},
          "destination": {"ports": [8889]}}]}, "sys-log")],
     "n0", ["ip saddr 10.17.0.0/16 meta l4proto tcp tcp dport 8889 accept"], ["8888"]),
    ("calico order: lower first, Deny before a Kubernetes allow", [ACCESS],
     [calico("first", {"order": 10, "selector": "has(app) && app in {'nginx'}", "ingress": [
         {"action": "Deny", "source": {"nets": ["10.16.2.0/24"]}}, {"action": "Pass", "protocol": "UDP"}]})],
     "n0", ["# GlobalNetworkPolicy first\n        ip saddr 10.16.2.0/24 drop\n        meta l4proto udp accept\n"
            "        # NetworkPolicy default/access"], []),
    ("doNotTrack on a host endpoint: notrack both ways, no match falls through", [],
     [calico("dnt", {"doNotTrack": True, "applyOnForward": True, "selector": "app == 'memcached'",
                     "ingress": [{"action": "Allow", "protocol": "TCP", "destination": {"ports": [11211]}}],
                     "egress": [{"action": "Allow", "protocol": "TCP", "source": {"ports": [11211]}}]})],
     "n0", ["ip daddr 10.128.0.2 jump hep-1-ingress", "tcp dport 11211 notrack accept",
            "tcp sport 11211 notrack accept", "        return"], ["pod-"]),
]


@pytest.mark.parametrize(("what", "k8s_policies", "calico_policies", "node", "present", "absent"), CASES,
                         ids=[c[0] for c in CASES])
def test_plan(what: str, k8s_policies: list[Any], calico_policies: list[Any], node: str, present: list[str],
              absent: list[str]) -> None:
    result = plan(k8s_policies=k8s_policies, calico_policies=calico_policies, endpoints=ENDPOINTS,
                  namespaces=NAMESPACES, network_sets=SETS, nodes=["n0", "n1"])
    script = result.scripts[node]
    for line in present:
        assert line in script, (what, script)
    for line in absent:
        assert line not in script, (what, script)
    assert not result.problems, result.problems


def test_what_cannot_be_expressed_is_reported_and_never_allows() -> None:
    result = plan(k8s_policies=[], calico_policies=[calico("odd", {"selector": "all()", "ingress": [
        {"action": "Allow", "protocol": "TCP", "http": {"methods": ["GET"]}},
        {"action": "Deny", "source": {"serviceAccounts": {"names": ["x"]}}}]})],
        endpoints=ENDPOINTS, namespaces=[{"metadata": {"name": "default", "annotations": {
            "net.beta.kubernetes.io/network-policy": '{"ingress": {"isolation": "DefaultDeny"}}'}}}],
        network_sets=[], nodes=["n0"])
    chain = result.scripts["n0"].split("chain pod-0-ingress {")[1].split("}")[0]
    assert "accept" not in chain and [line.strip() for line in chain.strip().splitlines()][-2:] == ["drop", "drop"], chain
    messages = sorted((p.kind, p.name, p.message.split(";")[0]) for p in result.problems)
    assert messages == [("GlobalNetworkPolicy", "odd", "ingress[0]: http is not supported"),
                        ("GlobalNetworkPolicy", "odd", "ingress[1]: serviceAccounts is not supported"),
                        ("Namespace", "default", "the annotation net.beta.kubernetes.io/network-policy (pre-1.7 "
                                                 "DefaultDeny) is not supported: nothing is denied by it")]
