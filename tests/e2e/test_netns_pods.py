"""Netns mode: every pod has its own network namespace, and Services are routed in the kernel.

One cluster with two nodes (`tether local up --netns --nodes 2`; root and iproute2 needed, CI
runs as root; run under `flock /tmp/tether-netns.lock`). A server pod on node 0 answers every
connection with the peer address it sees; a client pod on node 1 dials it by pod IP and by its
Service's ClusterIP. Proves:

- the pod runs in a namespace of its own (`tether-<i>-p<key>`) whose `eth0` holds its pod IP, and
  the server sees the client's pod IP (not the node's), directly and through the ClusterIP
  (kernel DNAT in the node, no proxy in between);
- the pod's namespace goes when the pod is deleted, and `tether local down` leaves none behind;
  one left by a crashed run is removed by the next `up`.

Traffic goes only to addresses inside the namespaces this test creates.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2e_util import kubectl_binary, needs_netns, netns_names, poll

pytestmark = needs_netns()

NAME = "np"
TIMEOUT_S = 60.0

ECHO_PEER = """
    import socket
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", 8080))
    server.listen(64)
    while True:
        conn, peer = server.accept()
        conn.sendall(peer[0].encode())
        conn.close()
"""


def tether(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", "local", *args], capture_output=True, text=True,
                          timeout=120)


namespaces = netns_names


@dataclass
class Cluster:
    data_dir: Path
    cache: Path
    index: int

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, KUBECONFIG=str(self.data_dir / "kubeconfig"), KUBECACHEDIR=str(self.cache))
        result = subprocess.run([kubectl_binary(), "--context", NAME, *args], input=input, capture_output=True,
                                text=True, timeout=TIMEOUT_S, env=env)
        if check:
            assert result.returncode == 0, f"kubectl {' '.join(args)}:\n{result.stdout}{result.stderr}"
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def pod_namespaces(self) -> set[str]:
        return {n for n in namespaces() if n.startswith(f"tether-{self.index}-p")}

    def node_names(self) -> list[str]:
        return sorted(n["metadata"]["name"] for n in self.json("get", "nodes")["items"])

    def run_pod(self, name: str, script: str, node: str, labels: dict[str, str] | None = None) -> None:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {"app": name}},
               "spec": {"nodeName": node, "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "python:3.11",
                                        "command": ["python3", "-c", textwrap.dedent(script)]}]}}
        self.kubectl("create", "-f", "-", input=json.dumps(pod))

    def running_ip(self, name: str) -> str:
        def ip() -> str | None:
            status = self.json("get", "pod", name).get("status") or {}
            return status.get("podIP") if status.get("phase") == "Running" else None

        found: str = poll(ip, timeout=TIMEOUT_S, what=f"pod {name} running")
        return found

    def finished_logs(self, name: str) -> str:
        def done() -> dict[str, Any] | None:
            found: dict[str, Any] = self.json("get", "pod", name)
            return found if (found.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

        pod = poll(done, timeout=TIMEOUT_S, what=f"pod {name} to finish")
        logs = self.kubectl("logs", name).stdout
        assert pod["status"]["phase"] == "Succeeded", (pod["status"], logs)
        return logs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data_dir = tmp_path_factory.mktemp("netns-pods")
    up = tether("up", "--netns", "--data-dir", str(data_dir), "--name", NAME, "--nodes", "2")
    index = -1
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        index = json.loads((data_dir / "clusters" / NAME / "network.json").read_text())["index"]
        yield Cluster(data_dir, tmp_path_factory.mktemp("kubecache-netns-pods"), index)
    finally:
        down = tether("down", "--data-dir", str(data_dir))
        assert down.returncode == 0, down.stdout + down.stderr
        left = {n for n in namespaces() if n == f"tether-{index}" or n.startswith(f"tether-{index}-")}
        assert not left, f"namespaces left after `tether local down`: {sorted(left)}"


CLIENT = """
    import json, socket, time

    def peer_seen(host, port):
        for _ in range(100):
            try:
                with socket.create_connection((host, port), timeout=3) as conn:
                    return conn.getsockname()[0], conn.recv(100).decode()
            except OSError:
                time.sleep(0.2)
        return None, None

    source, direct = peer_seen({server!r}, 8080)
    _, service = peer_seen({service!r}, 8080)
    print(json.dumps({{"source": source, "direct": direct, "service": service}}))
"""


def test_pod_has_its_own_namespace_and_address(cluster: Cluster) -> None:
    nodes = cluster.node_names()
    cluster.run_pod("echo", ECHO_PEER, nodes[0])
    server_ip = cluster.running_ip("echo")
    cluster.kubectl("expose", "pod", "echo", "--port=8080")
    service_ip = cluster.json("get", "service", "echo")["spec"]["clusterIP"]
    uid = cluster.json("get", "pod", "echo")["metadata"]["uid"]
    own = [n for n in cluster.pod_namespaces()
           if subprocess.run(["ip", "-n", n, "-4", "-o", "addr", "show", "dev", "eth0"], capture_output=True,
                             text=True).stdout.count(f" {server_ip}/32 ") == 1]
    assert len(own) == 1, (uid, cluster.pod_namespaces())

    cluster.run_pod("client", CLIENT.format(server=server_ip, service=service_ip), nodes[1])
    seen = json.loads(cluster.finished_logs("client").strip().splitlines()[-1])
    client_ip = cluster.json("get", "pod", "client")["status"]["podIP"]
    assert seen["source"] == client_ip, seen
    assert seen["direct"] == client_ip, (seen, "the server must see the client's pod IP")
    assert seen["service"] == client_ip, (seen, "through the ClusterIP too: DNAT in the kernel, no proxy")

    cluster.kubectl("delete", "pod", "echo", "client", "--wait=true", "--timeout=60s")
    poll(lambda: not (set(own) & cluster.pod_namespaces()) or None, timeout=TIMEOUT_S,
         what="the pod's namespace removed with the pod")


SERVE = """
    import socket, threading

    def serve(port):
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("0.0.0.0", port))
        server.listen(256)
        while True:
            conn, peer = server.accept()
            conn.sendall(peer[0].encode())
            conn.close()

    for port in {ports!r}[1:]:
        threading.Thread(target=serve, args=(port,), daemon=True).start()
    serve({ports!r}[0])
"""

PROBE = """
    import socket, time
    # retried until the expected answer or a bound: the enforcer applies rules asynchronously
    for _ in range(60):
        try:
            with socket.create_connection(({host!r}, {port}), timeout=1) as conn:
                got = "ok" if conn.recv(100) else "blocked"
        except OSError:
            got = "blocked"
        if got == {expect!r}:
            break
        time.sleep(0.5)
    print(got)
"""


def server(cluster: Cluster, name: str, namespace: str, labels: dict[str, str], ports: list[int], node: str,
           host_network: bool = False) -> str:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
           "spec": {"nodeName": node, "hostNetwork": host_network,
                    "containers": [{"name": "main", "image": "python:3.11",
                                    "command": ["python3", "-c", textwrap.dedent(SERVE.format(ports=ports))],
                                    "ports": [{"name": f"p{p}", "containerPort": p} for p in ports]
                                    + [{"name": "http", "containerPort": ports[0]}]}]}}
    cluster.kubectl("create", "-f", "-", input=json.dumps(pod))

    def ip() -> str | None:
        status = cluster.json("get", "pod", name, "-n", namespace).get("status") or {}
        return status.get("podIP") if status.get("phase") == "Running" else None

    found: str = poll(ip, timeout=TIMEOUT_S, what=f"pod {namespace}/{name} running")
    return found


def probe(cluster: Cluster, name: str, namespace: str, labels: dict[str, str], host: str, port: int, expect: str,
          node: str) -> str:
    """Whether a pod with `labels` reaches host:port ("ok" or "blocked"), retried towards `expect`."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
           "spec": {"nodeName": node, "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "python:3.11", "command": [
                        "python3", "-c", textwrap.dedent(PROBE.format(host=host, port=port, expect=expect))]}]}}
    cluster.kubectl("create", "-f", "-", input=json.dumps(pod))

    def done() -> dict[str, Any] | None:
        found: dict[str, Any] = cluster.json("get", "pod", name, "-n", namespace)
        return found if (found.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

    poll(done, timeout=TIMEOUT_S * 2, what=f"probe {name}")
    out = cluster.kubectl("logs", name, "-n", namespace).stdout.strip()
    cluster.kubectl("delete", "pod", name, "-n", namespace, "--wait=false")
    return out.splitlines()[-1] if out else ""


def apply(cluster: Cluster, obj: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))


def warning_events(cluster: Cluster, namespace: str, kind: str, name: str) -> list[str]:
    items = cluster.json("get", "events", "-n", namespace)["items"]
    return [e["message"] for e in items if e.get("reason") == "PolicyNotEnforced"
            and e["involvedObject"].get("kind") == kind and e["involvedObject"].get("name") == name]


def test_kubernetes_walkthrough_default_deny_then_access_true(cluster: Cluster) -> None:
    nodes = cluster.node_names()
    cluster.kubectl("create", "namespace", "walk")
    web = server(cluster, "nginx", "walk", {"app": "nginx"}, [8080], nodes[0])
    assert probe(cluster, "before", "walk", {}, web, 8080, "ok", nodes[1]) == "ok"

    # the pre-1.7 annotation is not enforced: said so, and nothing is denied by it
    cluster.kubectl("annotate", "namespace", "walk",
                    'net.beta.kubernetes.io/network-policy={"ingress":{"isolation":"DefaultDeny"}}')
    found = poll(lambda: warning_events(cluster, "default", "Namespace", "walk")
                 or warning_events(cluster, "walk", "Namespace", "walk"), timeout=TIMEOUT_S, what="an Event")
    assert "not supported" in found[0]

    apply(cluster, {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                    "metadata": {"name": "default-deny", "namespace": "walk"}, "spec": {"podSelector": {}}})
    assert probe(cluster, "denied", "walk", {}, web, 8080, "blocked", nodes[1]) == "blocked"

    apply(cluster, {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                    "metadata": {"name": "access-nginx", "namespace": "walk"},
                    "spec": {"podSelector": {"matchLabels": {"app": "nginx"}},
                             "ingress": [{"from": [{"podSelector": {"matchLabels": {"access": "true"}}}],
                                          "ports": [{"port": "http"}]}]}})
    assert probe(cluster, "with-access", "walk", {"access": "true"}, web, 8080, "ok", nodes[1]) == "ok"
    assert probe(cluster, "without-access", "walk", {}, web, 8080, "blocked", nodes[0]) == "blocked"


def test_invalid_cidr_is_rejected_with_422(cluster: Cluster) -> None:
    bad = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
           "metadata": {"name": "bad-cidr", "namespace": "default"},
           "spec": {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.300/8"}}]}]}}
    result = cluster.kubectl("create", "-f", "-", "-v=6", input=json.dumps(bad), check=False)
    assert result.returncode != 0
    assert "422" in result.stderr and "cidr" in result.stderr.lower(), result.stderr


def test_calico_global_network_set_allows_one_port(cluster: Cluster) -> None:
    nodes = cluster.node_names()
    forwarders = cluster.json("get", "node", nodes[1])["spec"]["podCIDR"]
    cluster.kubectl("create", "namespace", "sys-log")
    fluentd = server(cluster, "fluentd", "sys-log", {"app": "fluentd"}, [8889, 8888], nodes[0])
    apply(cluster, {"apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkSet",
                    "metadata": {"name": "forwarders", "labels": {"role": "forwarder"}},
                    "spec": {"nets": [forwarders]}})
    apply(cluster, {"apiVersion": "projectcalico.org/v3", "kind": "NetworkPolicy",
                    "metadata": {"name": "allow-to-fluentd", "namespace": "sys-log"},
                    "spec": {"selector": "app == 'fluentd'", "types": ["Ingress"], "ingress": [
                        {"action": "Allow", "protocol": "TCP",
                         "source": {"selector": "role == 'forwarder'", "namespaceSelector": "global()"},
                         "destination": {"ports": [8889]}}]}})
    assert probe(cluster, "fwd-8888", "default", {}, fluentd, 8888, "blocked", nodes[1]) == "blocked"
    assert probe(cluster, "fwd-8889", "default", {}, fluentd, 8889, "ok", nodes[1]) == "ok"
    assert probe(cluster, "outsider", "default", {}, fluentd, 8889, "blocked", nodes[0]) == "blocked"


CONNECT_MANY = """
    import socket
    done = 0
    for _ in range({count}):
        try:
            with socket.create_connection(({host!r}, {port}), timeout=2) as conn:
                conn.recv(100)
                done += 1
        except OSError:
            pass
    print(done)
"""


def conntrack_count(namespace: str) -> int:
    out = subprocess.run(["ip", "netns", "exec", namespace, "cat", "/proc/sys/net/netfilter/nf_conntrack_count"],
                         capture_output=True, text=True, timeout=TIMEOUT_S)
    return int(out.stdout.strip())


def connections(cluster: Cluster, name: str, host: str, port: int, count: int, node: str) -> int:
    cluster.run_pod(name, CONNECT_MANY.format(host=host, port=port, count=count), node)
    done = int(cluster.finished_logs(name).strip().splitlines()[-1])
    cluster.kubectl("delete", "pod", name, "--wait=false")
    return done


def test_do_not_track_keeps_connections_out_of_conntrack(cluster: Cluster) -> None:
    nodes = cluster.node_names()
    node_ip = next(a["address"] for a in cluster.json("get", "node", nodes[0])["status"]["addresses"]
                   if a["type"] == "InternalIP")
    server(cluster, "memcached", "default", {"app": "memcached"}, [11211], nodes[0], host_network=True)
    node_ns = f"tether-{cluster.index}-n0"
    count = 200

    before = conntrack_count(node_ns)
    assert connections(cluster, "tracked", node_ip, 11211, count, nodes[1]) == count
    tracked = conntrack_count(node_ns) - before
    assert tracked >= count, tracked  # each connection an entry (TIME_WAIT keeps them 120 s)

    apply(cluster, {"apiVersion": "projectcalico.org/v3", "kind": "GlobalNetworkPolicy",
                    "metadata": {"name": "memcached-untracked"},
                    "spec": {"order": 10, "doNotTrack": True, "applyOnForward": True,
                             "selector": "app == 'memcached'",
                             "ingress": [{"action": "Allow", "protocol": "TCP", "destination": {"ports": [11211]}}],
                             "egress": [{"action": "Allow", "protocol": "TCP", "source": {"ports": [11211]}}]}})
    poll(lambda: "notrack" in subprocess.run(["ip", "netns", "exec", node_ns, "nft", "list", "table", "ip",
                                              "tether-notrack"], capture_output=True, text=True).stdout or None,
         timeout=TIMEOUT_S, what="the notrack rules in the node")
    before = conntrack_count(node_ns)
    assert connections(cluster, "untracked", node_ip, 11211, count, nodes[1]) == count
    untracked = conntrack_count(node_ns) - before
    assert untracked < count // 4, (untracked, tracked)


def test_a_crashed_runs_pod_namespaces_are_removed_by_the_next_up() -> None:
    from tether.local.netns import pod_namespace, teardown_index
    from tether.local.network import NETNS, NetworkError, claim_index

    try:
        claim = claim_index(None, mode=NETNS)  # an index no running cluster holds, as `up` claims it
    except NetworkError as exc:
        pytest.skip(f"every netns index is held by running clusters: {exc}")
    try:
        left = pod_namespace(claim.index, "uid-of-a-pod-whose-cluster-was-killed")
        subprocess.run(["ip", "netns", "add", left], check=True, timeout=TIMEOUT_S)
        assert left in namespaces()
        assert teardown_index(claim.index) == []  # what `up` runs first for its index
        assert left not in namespaces()
    finally:
        subprocess.run(["ip", "netns", "del", left], capture_output=True, timeout=TIMEOUT_S)
        claim.release()


def test_internal_traffic_policy_local_and_node_port(cluster: Cluster) -> None:
    nodes = cluster.node_names()
    cluster.kubectl("create", "namespace", "itp")
    server(cluster, "local-web", "itp", {"app": "local-web"}, [8080], nodes[0])
    apply(cluster, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "local-web", "namespace": "itp"},
                    "spec": {"selector": {"app": "local-web"}, "internalTrafficPolicy": "Local",
                             "ports": [{"port": 80, "targetPort": 8080}]}})
    apply(cluster, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "node-web", "namespace": "itp"},
                    "spec": {"type": "NodePort", "selector": {"app": "local-web"},
                             "ports": [{"port": 81, "targetPort": 8080}]}})
    local_ip = cluster.json("get", "service", "local-web", "-n", "itp")["spec"]["clusterIP"]
    node_port = cluster.json("get", "service", "node-web", "-n", "itp")["spec"]["ports"][0]["nodePort"]
    node1_ip = next(a["address"] for a in cluster.json("get", "node", nodes[1])["status"]["addresses"]
                    if a["type"] == "InternalIP")
    # the only endpoint is on node 0: node 1's pods get nothing, node 0's reach it
    assert probe(cluster, "itp-same-node", "itp", {}, local_ip, 80, "ok", nodes[0]) == "ok"
    assert probe(cluster, "itp-other-node", "itp", {}, local_ip, 80, "blocked", nodes[1]) == "blocked"
    # a NodePort on node 1's address reaches the endpoint on node 0 (masqueraded there and back)
    assert probe(cluster, "nodeport", "itp", {}, node1_ip, node_port, "ok", nodes[0]) == "ok"


def test_egress_default_deny_then_ip_block(cluster: Cluster) -> None:
    nodes = cluster.node_names()
    cluster.kubectl("create", "namespace", "egress")
    target = server(cluster, "target", "egress", {"app": "target"}, [8080, 8081], nodes[1])
    apply(cluster, {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                    "metadata": {"name": "locked-egress", "namespace": "egress"},
                    "spec": {"podSelector": {"matchLabels": {"egress": "locked"}}, "policyTypes": ["Egress"],
                             "egress": [{"to": [{"ipBlock": {"cidr": f"{target}/32"}}],
                                         "ports": [{"protocol": "TCP", "port": 8081}]}]}})
    assert probe(cluster, "locked-8080", "egress", {"egress": "locked"}, target, 8080, "blocked", nodes[0]) == "blocked"
    assert probe(cluster, "locked-8081", "egress", {"egress": "locked"}, target, 8081, "ok", nodes[0]) == "ok"
    assert probe(cluster, "free-8080", "egress", {}, target, 8080, "ok", nodes[0]) == "ok"


NAMED = """
    import socket
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", 8080))
    server.listen(64)
    while True:
        conn, _ = server.accept()
        conn.sendall({name!r}.encode())
        conn.close()
"""

ASK_MANY = """
    import socket, time
    seen = []
    for _ in range(100):
        try:
            with socket.create_connection(({host!r}, 80), timeout=2) as conn:
                seen.append(conn.recv(100).decode())
        except OSError:
            time.sleep(0.2)
        if len(seen) == 20:
            break
    print(",".join(seen))
"""


def test_client_ip_session_affinity_keeps_one_endpoint(cluster: Cluster) -> None:
    nodes = cluster.node_names()
    cluster.kubectl("create", "namespace", "sticky")
    for i, node in enumerate(nodes):
        name = f"backend-{i}"
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "sticky", "labels": {"app": "sticky"}},
               "spec": {"nodeName": node, "containers": [{"name": "main", "image": "python:3.11", "command": [
                   "python3", "-c", textwrap.dedent(NAMED.format(name=name))]}]}}
        cluster.kubectl("create", "-f", "-", input=json.dumps(pod))
    for service, affinity in (("spread", "None"), ("sticky", "ClientIP")):
        apply(cluster, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": service, "namespace": "sticky"},
                        "spec": {"selector": {"app": "sticky"}, "sessionAffinity": affinity,
                                 "ports": [{"port": 80, "targetPort": 8080}]}})

    def two_endpoints() -> bool | None:
        slices = cluster.json("get", "endpointslices", "-n", "sticky", "-l", "kubernetes.io/service-name=spread")
        return sum(len(s.get("endpoints") or []) for s in slices["items"]) == 2 or None

    poll(two_endpoints, timeout=TIMEOUT_S, what="both backends ready")
    answers = {}
    for service in ("spread", "sticky"):
        ip = cluster.json("get", "service", service, "-n", "sticky")["spec"]["clusterIP"]
        cluster.run_pod(f"ask-{service}", ASK_MANY.format(host=ip), nodes[0], labels={"app": f"ask-{service}"})
        answers[service] = cluster.finished_logs(f"ask-{service}").strip().splitlines()[-1].split(",")
    assert len(answers["sticky"]) == 20 and len(set(answers["sticky"])) == 1, answers
    # without affinity 20 random picks of 2 land on one backend about once in 500,000 runs
    assert len(answers["spread"]) == 20 and len(set(answers["spread"])) == 2, answers
