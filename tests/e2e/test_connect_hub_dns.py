"""The hub's connect controllers end to end: `tether hub run --clusterset` runs the MCS API for
its members, a push one and a pull one (reached through its agent's tunnel), and KubeFed's ServiceDNSRecord/IngressDNSRecord on the hub become DNSEndpoints
with KubeFed's names (zones and region from the Cluster objects), also for a member without them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2e_util import poll, root_conftest

pytestmark = pytest.mark.e2e

NS = "test-namespace"
IMAGE = "registry.example/shop/app:1"
API = "multiclusterdns.kubefed.io/v1alpha1"


def tether(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@dataclass
class Hub:
    clusters: Any
    log: Path

    def kubectl(self, context: str, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.clusters.kubectl(*args, context=context, **kw)  # type: ignore[no-any-return]

    def get(self, context: str, *args: str) -> Any:
        found = self.kubectl(context, "get", *args, "-o", "json", check=False)
        return json.loads(found.stdout) if found.returncode == 0 else None

    def apply(self, context: str, *objs: dict[str, Any]) -> None:
        self.kubectl(context, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                     "items": list(objs)}))


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """`east` joined in push mode; `west` registered in pull mode (the hub reaches it only through
    its agent's tunnel)."""
    conftest = root_conftest()
    data_dir = tmp_path_factory.mktemp("hubdns")
    member_dir = tmp_path_factory.mktemp("hubdns-pull")
    agents_dir = tmp_path_factory.mktemp("hubdns-agents")
    cache = tmp_path_factory.mktemp("kubecache")
    clusters = conftest.start_clusters(data_dir, ["host", "east"], cache)
    log = data_dir / "hub.log"
    proc = None
    try:
        pull = conftest.start_clusters(member_dir, ["west"], cache)
        merged = tmp_path_factory.mktemp("kubeconfig") / "kubeconfig"
        merged.write_text(subprocess.run(
            [conftest.kubectl_binary(), "config", "view", "--flatten"], capture_output=True, text=True, check=True,
            env={**os.environ, "KUBECONFIG": f"{clusters.kubeconfig}:{pull.kubeconfig}"}).stdout)
        clusters.kubeconfig = merged
        clusters.names = ["host", "east", "west"]
        kubeconfig = str(merged)
        tether("hub", "install", "--kubeconfig", kubeconfig, "--context", "host")
        tether("join", "east", "--cluster-context", "east", "--cluster-kubeconfig", kubeconfig,
               "--host-kubeconfig", kubeconfig, "--host-context", "host")
        with log.open("wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "tether", "hub", "run", "--kubeconfig", kubeconfig,
                                     "--context", "host", "--port", "0", "--data-dir", str(data_dir / "hub-state"),
                                     "--health-period", "0.5", "--health-threshold", "1",
                                     "--tunnel-agent-port", "0", "--tunnel-frontend-port", "0",
                                     "--tunnel-bind-address", "127.0.0.1", "--clusterset", "shopping", "--verbose"],
                                    stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        deadline = time.monotonic() + 60
        while "tunnel server: agents at" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        command = tether("token", "create", "--ttl", "1h", "--print-register-command", "--kubeconfig", kubeconfig,
                         "--host-context", "host", "--cluster-name", "west").strip().splitlines()[-1]
        words = command.split()
        assert words[:2] == ["tether", "register"]
        tether(*words[1:], "--kubeconfig", kubeconfig, "--context", "west", "--data-dir", str(agents_dir),
               "--period", "0.5")
        for context in ("east", "west"):
            clusters.kubectl("create", "namespace", NS, context=context)
        clusters.kubectl("create", "namespace", NS, context="host")
        yield Hub(clusters, log)
    finally:
        subprocess.run([sys.executable, "-m", "tether", "agent", "stop", "--cluster-name", "west", "--data-dir",
                        str(agents_dir)], capture_output=True, timeout=60)
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        conftest.tether("local", "down", "--data-dir", str(member_dir))
        conftest.tether("local", "down", "--data-dir", str(data_dir))


def service(name: str, lb_type: bool = False) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS},
            "spec": {"type": "LoadBalancer" if lb_type else "ClusterIP", "selector": {"app": name},
                     "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}


def deployment(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "app", "image": IMAGE}]}}}}


def test_hub_runs_mcs_for_its_members(hub: Hub) -> None:
    west = hub.get("host", "clusters.cluster.tether.io", "west")
    assert west["spec"]["syncMode"] == "Pull" and west["spec"].get("proxyURL")  # reached through the tunnel
    for context in ("east", "west"):
        poll(lambda c=context: hub.get(c, "crd", "serviceexports.multicluster.x-k8s.io"), timeout=120, interval=0.5,
             what=f"the MCS CRDs in {context}")
        hub.apply(context, service("web"), deployment("web"))
        hub.apply(context, {"apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
                            "metadata": {"name": "web", "namespace": NS}})

    def imported() -> Any:
        found = hub.get("east", "serviceimports.multicluster.x-k8s.io", "web", "-n", NS)
        clusters = sorted(c["cluster"] for c in ((found or {}).get("status") or {}).get("clusters") or [])
        return found if clusters == ["east", "west"] else None

    poll(imported, timeout=90, interval=0.5, what="a ServiceImport from both members, made by the hub")
    cluster_id = hub.get("west", "clusterproperties.about.k8s.io", "cluster.clusterset.k8s.io")
    assert cluster_id["spec"]["value"] == "west"  # the registered name is the cluster id


def set_load_balancer(hub: Hub, context: str, kind: str, name: str, ip: str) -> None:
    hub.kubectl(context, "patch", kind, name, "-n", NS, "--subresource=status", "--type=merge", "-p",
                json.dumps({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}}))


def test_service_dns_record_makes_kubefed_s_dns_endpoint(hub: Hub) -> None:
    east = hub.get("host", "clusters.cluster.tether.io", "east")
    region, zones = east["spec"]["region"], east["spec"]["zones"]
    assert region and zones  # from the local cluster's node labels
    # west has no region or zones (a kind-like cluster): KubeFed made no records at all then
    hub.kubectl("host", "patch", "clusters.cluster.tether.io", "west", "--type=merge", "-p",
                json.dumps({"spec": {"region": None, "zones": None}}))
    for context, ip in (("east", "127.1.0.10"), ("west", "127.2.0.10")):
        hub.apply(context, service("shop", lb_type=True), deployment("shop"))
        set_load_balancer(hub, context, "service", "shop", ip)
    if hub.get("host", "namespace", "kube-federation-system") is None:
        hub.kubectl("host", "create", "namespace", "kube-federation-system")
    hub.apply("host", {"apiVersion": API, "kind": "Domain",
                       "metadata": {"name": "test-domain", "namespace": "kube-federation-system"},
                       "domain": "example.com"})
    hub.apply("host", {"apiVersion": API, "kind": "ServiceDNSRecord", "metadata": {"name": "shop", "namespace": NS},
                       "spec": {"domainRef": "test-domain", "recordTTL": 300}})
    prefix = "shop.test-namespace.test-domain.svc"

    def endpoints() -> dict[str, Any] | None:
        found = hub.get("host", "dnsendpoints.multiclusterdns.kubefed.io", "service-shop", "-n", NS)
        got = {e["dnsName"]: e for e in ((found or {}).get("spec") or {}).get("endpoints") or []}
        wanted = f"{prefix}.example.com"
        return got if got.get(wanted, {}).get("targets") == ["127.1.0.10", "127.2.0.10"] else None

    got = poll(endpoints, timeout=90, interval=0.5, what="the DNSEndpoint with both clusters' addresses")
    assert got[f"{prefix}.{region}.example.com"]["targets"] == ["127.1.0.10"]
    for zone in zones:
        assert got[f"{prefix}.{zone}.{region}.example.com"] == {
            "dnsName": f"{prefix}.{zone}.{region}.example.com", "recordTTL": 300, "recordType": "A",
            "targets": ["127.1.0.10"]}
    assert all(e["recordTTL"] == 300 for e in got.values())
    record = hub.get("host", "servicednsrecords.multiclusterdns.kubefed.io", "shop", "-n", NS)
    assert record["status"]["domain"] == "example.com"
    assert [e["cluster"] for e in record["status"]["dns"]] == ["east", "west"]
    owner = hub.get("host", "dnsendpoints.multiclusterdns.kubefed.io", "service-shop", "-n", NS)
    assert owner["metadata"]["ownerReferences"][0]["kind"] == "ServiceDNSRecord"


def test_ingress_dns_record(hub: Hub) -> None:
    hub.apply("east", {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                       "metadata": {"name": "front", "namespace": NS},
                       "spec": {"rules": [{"host": "shop.example.com", "http": {"paths": [
                           {"path": "/", "pathType": "Prefix",
                            "backend": {"service": {"name": "shop", "port": {"number": 80}}}}]}}]}})
    set_load_balancer(hub, "east", "ingress", "front", "127.1.0.20")
    hub.apply("host", {"apiVersion": API, "kind": "IngressDNSRecord", "metadata": {"name": "front", "namespace": NS},
                       "spec": {"hosts": ["shop.example.com"], "recordTTL": 120}})

    def endpoint() -> Any:
        found = hub.get("host", "dnsendpoints.multiclusterdns.kubefed.io", "ingress-front", "-n", NS)
        return ((found or {}).get("spec") or {}).get("endpoints")

    assert poll(endpoint, timeout=90, interval=0.5, what="the ingress DNSEndpoint") == [
        {"dnsName": "shop.example.com", "recordTTL": 120, "recordType": "A", "targets": ["127.1.0.20"]}]
