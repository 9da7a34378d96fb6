"""Hub high availability (issue 17, item 3): `tether hub run --leader-elect` replicas against one
API-only hub. Exactly one leads (the Lease, `/readyz` and `tether_leader_is_leader` agree); a
leader killed with SIGKILL is replaced once its Lease expires, a leader stopped with SIGTERM
releases the Lease and hands over at once; propagation goes on across both and nothing on the
members is created twice (their objects keep their uids).

The takeover times are printed (`-s`) and recorded in docs/benchmarks.md; they never decide the
test (generous deadlines only)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_util import Collected, kubectl_binary, manifest, poll, root_conftest, unique

from tether.objects.podfiles import SERVICE_ACCOUNT_DIR, mount_env_name

pytestmark = pytest.mark.e2e

WAIT_S = 120.0
LEASE_S, RENEW_S, RETRY_S = 6, 4, 1
LEASE = ("tether-system", "tether-hub")


def _tether(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def pod_environment(clusters: Any, data_dir: Path) -> dict[str, str]:
    """What a kubelet gives a pod: the API's address and the ServiceAccount directory (here the
    hub admin's token, put where a rootless kubelet says it put the volume)."""
    pki = clusters.data_dir / "clusters" / "hub" / "pki"
    account = data_dir / "serviceaccount"
    account.mkdir(exist_ok=True)
    (account / "token").write_text((pki / "admin.token").read_text())
    (account / "ca.crt").write_bytes((pki / "ca.crt").read_bytes())
    (account / "namespace").write_text("tether-system")
    server = urllib.parse.urlsplit(clusters.servers["hub"])
    return {"KUBERNETES_SERVICE_HOST": str(server.hostname),
            "KUBERNETES_SERVICE_PORT": str(server.port),
            mount_env_name(SERVICE_ACCOUNT_DIR): str(account)}


class Replica:
    """One `tether hub run --leader-elect` process."""

    def __init__(self, clusters: Any, data_dir: Path, name: str, *, in_pod: bool = False) -> None:
        self.name = name
        self.log = data_dir / f"{name}.log"
        env = dict(os.environ, PYTHONUNBUFFERED="1", POD_NAME=name)
        where = ["--kubeconfig", str(clusters.kubeconfig), "--context", "hub"]
        if in_pod:  # as in the hub Deployment: the pod's ServiceAccount files, a pod address
            env.update(pod_environment(clusters, data_dir))
            where = ["--in-cluster", "--bind-address", "127.0.0.2"]
        self.proc = Collected(
            [sys.executable, "-m", "tether", "hub", "run", *where, "--port", "0", "--health-period", "0.5", "--health-threshold", "1",
             "--data-dir", str(data_dir / name), "--leader-elect",
             "--leader-elect-lease-duration", f"{LEASE_S}s",
             "--leader-elect-renew-deadline", f"{RENEW_S}s",
             "--leader-elect-retry-period", f"{RETRY_S}s", "--tunnel-agent-port", "0",
             "--tunnel-frontend-port", "0", "--tunnel-server-count", "3", "--proxy-port", "0",
             "--tunnel-certs", str(data_dir / "tunnel-certs"), "--verbose"],
            env=env, merge_stderr=True)
        self.proc.wait_for_line(lambda x: "tunnel server: agents at" in x, timeout=60)
        proxy = self.proc.wait_for_line(lambda x: x.startswith("cluster proxy on "), timeout=60)
        self.proxy_url = proxy.split()[3].split("/apis/", 1)[0]
        line = self.proc.wait_for_line(lambda x: "serving /healthz" in x, timeout=60)
        self.url = line.rsplit(" ", 1)[-1]
        campaign = self.proc.wait_for_line(lambda x: "campaigning for Lease" in x, timeout=10)
        self.identity = campaign.split("leader election: ", 1)[1].split(" ", 1)[0]
        assert self.identity.startswith(f"{name}_")

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def leads(self) -> bool:
        status, body = self.get("/readyz")
        return status == 200 and f"leader: {self.identity} (this replica)" in body

    def follows(self, leader: str) -> bool:
        status, body = self.get("/readyz")
        return status == 200 and f"leader: {leader} (this replica {self.identity} follows)" in body

    def is_leader_metric(self) -> float:
        _, body = self.get("/metrics")
        line = next(x for x in body.splitlines() if x.startswith("tether_leader_is_leader "))
        return float(line.split()[1])

    def stop(self) -> None:
        self.proc.stop()
        self.log.write_text("\n".join(self.proc.snapshot()))


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    data_dir = tmp_path_factory.mktemp("hub-ha")
    clusters = root_conftest().start_clusters(data_dir, ["member1", "member2"],
                                              tmp_path_factory.mktemp("hub-ha-cache"), hubs=("hub",))
    try:
        kubeconfig = str(clusters.kubeconfig)
        _tether("hub", "install", "--kubeconfig", kubeconfig, "--context", "hub")
        for member in ("member1", "member2"):
            _tether("join", member, "--cluster-context", member, "--host-kubeconfig", kubeconfig,
                    "--host-context", "hub")
        # every replica serves agents with the same certificates (in a cluster: one Secret)
        _tether("certs", "--out", str(data_dir / "tunnel-certs"), "--server-ip", "127.0.0.1")
        yield clusters, data_dir
    finally:
        subprocess.run([sys.executable, "-m", "tether", "local", "down", "--data-dir", str(data_dir)],
                       capture_output=True, timeout=120)


def lease(clusters: Any) -> dict[str, Any]:
    spec: dict[str, Any] = clusters.kubectl_json("-n", LEASE[0], "get", "lease", LEASE[1],
                                                 context="hub")["spec"]
    return spec


def propagated(name: str, namespace: str, replicas: int) -> list[dict[str, Any]]:
    labels = {"app": name}
    return [{"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": name, "namespace": namespace, "labels": labels},
             "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                      "template": {"metadata": {"labels": labels},
                                   "spec": {"containers": [{"name": "web", "image": "nginx:1.17"}]}}}},
            {"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
             "metadata": {"name": name, "namespace": namespace},
             "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": name}],
                      "placement": {"clusterAffinity": {"clusterNames": ["member1", "member2"]}}}}]


def member_uids(clusters: Any, namespace: str, name: str, replicas: int) -> dict[str, str] | None:
    """The member copies' uids once each member has `replicas` in its spec."""
    uids = {}
    for member in ("member1", "member2"):
        got = clusters.kubectl("-n", namespace, "get", "deployment", "-o", "json", context=member,
                               check=False)
        if got.returncode != 0:
            return None
        items = [d for d in json.loads(got.stdout)["items"] if d["metadata"]["name"] == name]
        if len(items) != 1 or items[0]["spec"]["replicas"] != replicas:
            return None
        uids[member] = items[0]["metadata"]["uid"]
    return uids


def through_proxy(clusters: Any, data_dir: Path, replica: Replica) -> str:
    """member1's namespaces through this replica's cluster proxy (`tether kubeconfig`'s
    credentials, pointed at this replica)."""
    out = data_dir / f"member1-via-{replica.name}.yaml"
    _tether("kubeconfig", "member1", "--host-kubeconfig", str(clusters.kubeconfig),
            "--host-context", "hub", "--out", str(out))
    doc = yaml.safe_load(out.read_text())
    for entry in doc["clusters"]:
        server = entry["cluster"]["server"]
        entry["cluster"]["server"] = replica.proxy_url + server[server.index("/apis/"):]
    out.write_text(yaml.safe_dump(doc))
    got = subprocess.run([kubectl_binary(), "--kubeconfig", str(out), "get", "namespaces", "-o",
                          "name"], capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    return got.stdout


def takeover(replica: Replica, start: float) -> float:
    poll(replica.leads, timeout=WAIT_S, interval=0.1, what=f"{replica.name} leading")
    return time.monotonic() - start


def test_one_leader_failover_and_handover(federation: tuple[Any, Path]) -> None:
    clusters, data_dir = federation
    namespace = unique("ha")
    clusters.kubectl("create", "namespace", namespace, context="hub")
    a = Replica(clusters, data_dir, "hub-a")
    replicas: list[Replica] = [a]
    try:
        poll(a.leads, timeout=WAIT_S, interval=0.2, what="hub-a leading")
        b = Replica(clusters, data_dir, "hub-b")
        replicas.append(b)
        poll(lambda: b.follows(a.identity), timeout=WAIT_S, interval=0.2, what="hub-b following")
        held = lease(clusters)
        assert held["holderIdentity"] == a.identity and held["leaseDurationSeconds"] == LEASE_S
        assert (a.is_leader_metric(), b.is_leader_metric()) == (1.0, 0.0)
        # the replicas share one proxy-token key, made by the first
        key = clusters.kubectl_json("-n", "tether-system", "get", "secret", "tether-hub-tunnel-key",
                                    context="hub")
        assert len(key["data"]["proxy-token.key"]) >= 44
        # the cluster proxy serves on the follower as on the leader
        for replica in (a, b):
            assert "namespace/tether-system" in through_proxy(clusters, data_dir, replica)
        first_transitions = int(held.get("leaseTransitions", 0))

        # propagation through the leader
        clusters.kubectl("apply", "-f", "-", context="hub", input=manifest(*propagated("web", namespace, 2)))
        before = poll(lambda: member_uids(clusters, namespace, "web", 2), timeout=WAIT_S,
                      interval=0.5, what="web on both members")

        # SIGKILL: no release; hub-b waits out the Lease
        a.proc.proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        a.proc.proc.wait(timeout=30)
        assert "namespace/tether-system" in through_proxy(clusters, data_dir, b)  # before it leads
        killed = takeover(b, killed_at)
        print(f"\ntakeover after SIGKILL: {killed:.1f}s (lease {LEASE_S}s, retry {RETRY_S}s)")
        held = lease(clusters)
        assert held["holderIdentity"] == b.identity
        assert int(held["leaseTransitions"]) == first_transitions + 1
        assert b.is_leader_metric() == 1.0

        # hub-b's controllers carry on: an update and a new object propagate, and the copies
        # hub-a made are updated in place, not made again
        clusters.kubectl("apply", "-f", "-", context="hub",
                         input=manifest(*propagated("web", namespace, 3), *propagated("api", namespace, 1)))
        after = poll(lambda: member_uids(clusters, namespace, "web", 3), timeout=WAIT_S,
                     interval=0.5, what="web scaled on both members")
        assert after == before
        poll(lambda: member_uids(clusters, namespace, "api", 1), timeout=WAIT_S, interval=0.5,
             what="api on both members")

        # SIGTERM: hub-b releases the Lease as it stops; hub-c takes it at its next retry
        c = Replica(clusters, data_dir, "hub-c", in_pod=True)
        assert c.url.startswith("http://127.0.0.2:")
        replicas.append(c)
        poll(lambda: c.follows(b.identity), timeout=WAIT_S, interval=0.2, what="hub-c following")
        b.proc.proc.send_signal(signal.SIGTERM)
        handed = takeover(c, time.monotonic())
        assert b.proc.proc.wait(timeout=30) == 0
        print(f"takeover after SIGTERM: {handed:.1f}s (released Lease)")
        assert any("released Lease" in line for line in b.proc.snapshot()), b.proc.snapshot()[-20:]
        held = lease(clusters)
        assert held["holderIdentity"] == c.identity
        assert int(held["leaseTransitions"]) == first_transitions + 2

        clusters.kubectl("-n", namespace, "scale", "deployment", "api", "--replicas=2", context="hub")
        poll(lambda: member_uids(clusters, namespace, "api", 2), timeout=WAIT_S, interval=0.5,
             what="api scaled by hub-c")
        assert member_uids(clusters, namespace, "web", 3) == before
    finally:
        for replica in replicas:
            replica.stop()


def test_a_leader_that_loses_its_lease_stops_and_exits(federation: tuple[Any, Path]) -> None:
    """Another holder in the Lease (as after a partition the leader did not notice in time):
    the leader stops its controllers and exits 1, as kube-controller-manager does, so that its
    supervisor starts a fresh candidate."""
    clusters, data_dir = federation
    a = Replica(clusters, data_dir, "hub-lost")
    try:
        poll(a.leads, timeout=WAIT_S, interval=0.2, what="hub-lost leading")
        spec = json.dumps({"spec": {"holderIdentity": "intruder", "leaseDurationSeconds": 3600}})
        clusters.kubectl("-n", LEASE[0], "patch", "lease", LEASE[1], "--type=merge", "-p", spec,
                         context="hub")
        assert a.proc.proc.wait(timeout=WAIT_S) == 1
        out = "\n".join(a.proc.snapshot())
        assert "leader election lost: Lease tether-system/tether-hub is now held by intruder" in out
        assert lease(clusters)["holderIdentity"] == "intruder"  # not released: it is not ours
    finally:
        a.stop()
        clusters.kubectl("-n", LEASE[0], "delete", "lease", LEASE[1], "--ignore-not-found",
                         context="hub")
