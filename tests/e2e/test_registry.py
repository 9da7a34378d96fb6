"""Cluster registry end to end: hub install, join/unjoin, health, on local clusters.

`host` and `cluster` run in one data dir; `cluster1` in its own, so it can be stopped alone to
make it unreachable. The health controller runs in-process with short thresholds.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from e2e_util import root_conftest

from tether.federation.health import (
    TAINT_NOT_READY,
    HealthTimers,
    build_health_controller,
)
from tether.kube import KubeClient

pytestmark = pytest.mark.e2e

TIMERS = HealthTimers(period_s=0.3, failure_threshold_s=1.5, success_threshold_s=1.5,
                      grace_period_s=3.0, startup_grace_period_s=3.0, probe_timeout_s=1.0)
WAIT_S = 90.0  # generous: on a loaded 2-core machine a member can take this long


def tether(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                          timeout=timeout)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@dataclass
class Fleet:
    main_dir: Path  # host + cluster
    member_dir: Path  # cluster1
    kubeconfig: Path
    member_kubeconfig: Path
    cache: Path

    def hub(self, *args: str) -> subprocess.CompletedProcess[str]:
        return tether(*args, "--host-kubeconfig", str(self.kubeconfig), "--host-context", "host")

    def kubectl(self, context: str, *args: str, check: bool = True,
                input: str | None = None) -> subprocess.CompletedProcess[str]:
        kubeconfig = self.member_kubeconfig if context == "cluster1" else self.kubeconfig
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "KUBECACHEDIR": str(self.cache / context)}
        result = subprocess.run([root_conftest().kubectl_binary(), "--context", context, *args],
                                input=input, capture_output=True, text=True, timeout=60, env=env)
        if check:
            assert result.returncode == 0, result.stdout + result.stderr
        return result

    def client(self, context: str) -> KubeClient:
        kubeconfig = self.member_kubeconfig if context == "cluster1" else self.kubeconfig
        return KubeClient.from_kubeconfig(kubeconfig, context)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    main_dir = tmp_path_factory.mktemp("registry-main")
    member_dir = tmp_path_factory.mktemp("registry-member")
    ok(tether("local", "up", "--data-dir", str(main_dir), "--name", "host", "--name", "cluster"))
    try:
        ok(tether("local", "up", "--data-dir", str(member_dir), "--name", "cluster1"))
        started = Fleet(main_dir, member_dir, main_dir / "kubeconfig", member_dir / "kubeconfig",
                        tmp_path_factory.mktemp("registry-kubecache"))
        yield started
    finally:
        tether("local", "down", "--data-dir", str(member_dir))
        tether("local", "down", "--data-dir", str(main_dir))


@pytest.fixture(scope="module")
def joined(fleet: Fleet) -> Fleet:
    out = ok(tether("hub", "install", "--kubeconfig", str(fleet.kubeconfig), "--context", "host"))
    assert "customresourcedefinition/clusters.cluster.tether.io created" in out
    again = ok(tether("hub", "install", "--kubeconfig", str(fleet.kubeconfig), "--context", "host"))
    assert "created" not in again and "0 changed" in again
    ok(fleet.hub("join", "cluster", "--cluster-context", "cluster", "--label", "env=dev"))
    ok(fleet.hub("join", "cluster1", "--cluster-context", "cluster1",
                 "--cluster-kubeconfig", str(fleet.member_kubeconfig), "--region", "eu-1",
                 "--zone", "a", "--zone", "b"))
    return fleet


@asynccontextmanager
async def health_controller(fleet: Fleet) -> AsyncIterator[None]:
    async with fleet.client("host") as host:
        controller = build_health_controller(host, timers=TIMERS)
        task = asyncio.create_task(controller.run())
        try:
            yield
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


async def get_cluster(fleet: Fleet, name: str) -> dict[str, Any]:
    async with fleet.client("host") as host:
        return await host.get("cluster.tether.io/v1alpha1", "Cluster", name)


def ready_of(cluster: dict[str, Any]) -> dict[str, Any]:
    for condition in (cluster.get("status") or {}).get("conditions") or []:
        if condition["type"] == "Ready":
            return dict(condition)
    return {}


async def wait_for(fleet: Fleet, name: str, check: Callable[[dict[str, Any]], bool],
                   timeout_s: float = WAIT_S) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        cluster = await get_cluster(fleet, name)
        if check(cluster):
            return cluster
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"cluster {name} did not get there: {json.dumps(cluster.get('status'))}")
        await asyncio.sleep(0.2)


def is_ready(cluster: dict[str, Any]) -> bool:
    return ready_of(cluster).get("status") == "True"


async def test_joined_clusters_become_ready(joined: Fleet) -> None:
    async with health_controller(joined):
        for name in ("cluster", "cluster1"):
            cluster = await wait_for(joined, name, is_ready)
            status = cluster["status"]
            assert status["kubernetesVersion"].startswith("v1.37.")
            assert status["nodeSummary"]["totalNum"] >= 1
            assert status["nodeSummary"]["readyNum"] >= 1
            assert set(status["resourceSummary"]["allocatable"]) >= {"cpu", "memory", "pods"}
            assert set(status["resourceSummary"]) == {"allocatable", "allocated", "allocating"}
            gvs = {e["groupVersion"] for e in status["apiEnablements"]}
            assert {"v1", "apps/v1"} <= gvs
            assert ready_of(cluster)["reason"] == "ClusterReady"
            assert not (cluster["spec"].get("taints") or [])
    out = await asyncio.to_thread(joined.hub, "clusters")
    lines = ok(out).splitlines()
    assert lines[0].split() == ["NAME", "MODE", "READY", "VERSION", "AGE"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    for name in ("cluster", "cluster1"):
        assert rows[name][1:3] == ["Push", "True"], lines
        assert rows[name][3].startswith("v1.37."), lines
    wide = ok(await asyncio.to_thread(joined.hub, "clusters", "-o", "wide"))
    assert "eu-1" in wide and "a,b" in wide
    table = joined.kubectl("host", "get", "clusters.cluster.tether.io").stdout.splitlines()
    assert table[0].split()[:5] == ["NAME", "VERSION", "MODE", "READY", "AGE"]


async def test_member_token_authenticates(joined: Fleet) -> None:
    cluster = await get_cluster(joined, "cluster")
    endpoint = cluster["spec"]["apiEndpoint"]
    async with joined.client("host") as host:
        secret = await host.get("v1", "Secret", "cluster", "tether-system")
    token = base64.b64decode(secret["data"]["token"]).decode()
    ca = base64.b64decode(secret["data"]["caBundle"]).decode()
    import ssl

    context = ssl.create_default_context(cadata=ca)
    async with httpx.AsyncClient(base_url=endpoint, verify=context) as http:
        good = await http.get("/api/v1/namespaces", headers={"Authorization": f"Bearer {token}"})
        assert good.status_code == 200
        bad = await http.get("/api/v1/namespaces", headers={"Authorization": "Bearer not-a-token"})
        assert bad.status_code == 401
        forged = token.rsplit(".", 1)[0] + ".AAAA"
        assert (await http.get("/api/v1/namespaces",
                               headers={"Authorization": f"Bearer {forged}"})).status_code == 401
    # Created in the member: the SA, its RBAC and token Secret.
    sa = joined.kubectl("cluster", "get", "serviceaccount", "tether-cluster", "-n", "tether-system", "-o", "json")
    assert json.loads(sa.stdout)["metadata"]["name"] == "tether-cluster"
    joined.kubectl("cluster", "get", "clusterrole", "tether-controller:tether-cluster")
    joined.kubectl("cluster", "get", "clusterrolebinding", "tether-controller:tether-cluster")
    # kubectl create token works too (TokenRequest).
    created = joined.kubectl("cluster", "create", "token", "tether-cluster", "-n", "tether-system",
                             "--duration", "15m").stdout.strip()
    async with httpx.AsyncClient(base_url=endpoint, verify=context) as http:
        answer = await http.get("/version", headers={"Authorization": f"Bearer {created}"})
        assert answer.status_code == 200
        whoami = await http.post(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            headers={"Authorization": f"Bearer {created}"})
        assert whoami.json()["status"]["userInfo"]["username"] == \
            "system:serviceaccount:tether-system:tether-cluster"


async def test_join_is_idempotent_and_refuses_duplicates(joined: Fleet) -> None:
    again = await asyncio.to_thread(joined.hub, "join", "cluster", "--cluster-context", "cluster")
    assert "already joined" in ok(again)
    other_name = await asyncio.to_thread(joined.hub, "join", "cluster-again", "--cluster-context", "cluster")
    assert other_name.returncode == 1
    assert "already joined as 'cluster'" in other_name.stderr
    other_endpoint = await asyncio.to_thread(
        joined.hub, "join", "cluster", "--cluster-context", "cluster1",
        "--cluster-kubeconfig", str(joined.member_kubeconfig))
    assert other_endpoint.returncode == 1
    assert "already joined with endpoint" in other_endpoint.stderr
    names = joined.kubectl("host", "get", "clusters.cluster.tether.io", "-o", "name").stdout.split()
    assert sorted(names) == ["cluster.cluster.tether.io/cluster", "cluster.cluster.tether.io/cluster1"]


async def test_unreachable_member_turns_not_ready_then_recovers(joined: Fleet) -> None:
    async with health_controller(joined):
        await wait_for(joined, "cluster1", is_ready)
        ok(await asyncio.to_thread(tether, "local", "down", "--data-dir", str(joined.member_dir)))
        down = await wait_for(joined, "cluster1", lambda c: ready_of(c).get("status") == "False")
        assert ready_of(down)["reason"] == "ClusterNotReachable"
        tainted = await wait_for(joined, "cluster1", lambda c: any(
            t["key"] == TAINT_NOT_READY for t in c["spec"].get("taints") or []))
        assert [t["effect"] for t in tainted["spec"]["taints"]] == ["NoSchedule"]
        ok(await asyncio.to_thread(tether, "local", "up", "--data-dir", str(joined.member_dir)))
        back = await wait_for(joined, "cluster1", lambda c: is_ready(c) and not c["spec"].get("taints"))
        assert ready_of(back)["reason"] == "ClusterReady"
        # the other member was never affected
        assert is_ready(await get_cluster(joined, "cluster"))


def managed_configmap(fleet: Fleet, context: str, name: str) -> None:
    manifest = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "default",
                             "labels": {"app.kubernetes.io/managed-by": "tether"}},
                "data": {"k": "v"}}
    fleet.kubectl(context, "apply", "-f", "-", input=json.dumps(manifest))


async def test_unjoin_keeps_or_removes_propagated_objects(joined: Fleet) -> None:
    managed_configmap(joined, "cluster1", "propagated-keep")
    managed_configmap(joined, "cluster", "propagated-gone")
    # --keep-resources, using the credentials stored at join (no member context given)
    out = ok(await asyncio.to_thread(joined.hub, "unjoin", "cluster1", "--keep-resources"))
    assert "propagated resources kept" in out
    joined.kubectl("cluster1", "get", "configmap", "propagated-keep")
    # With its own token, unjoin deletes the binding last; the member's garbage collector
    # removes the role and the account (RBAC ends the token's access at the first deletion).
    for kind, name in (("serviceaccount", "tether-cluster1"), ("clusterrole", "tether-controller:tether-cluster1"),
                       ("clusterrolebinding", "tether-controller:tether-cluster1"),
                       ("secret", "tether-cluster1-token")):
        await wait_gone(joined, "cluster1", kind, name)
    # default: propagated objects go too (member context given explicitly this time)
    out = ok(await asyncio.to_thread(joined.hub, "unjoin", "cluster", "--cluster-context", "cluster"))
    assert "member: deleted ConfigMap default/propagated-gone" in out
    assert joined.kubectl("cluster", "get", "configmap", "propagated-gone", check=False).returncode != 0
    for kind, name in (("serviceaccount", "tether-cluster"), ("secret", "tether-cluster-token"),
                       ("clusterrole", "tether-controller:tether-cluster"),
                       ("clusterrolebinding", "tether-controller:tether-cluster")):
        gone = joined.kubectl("cluster", "get", kind, name, "-n", "tether-system", check=False)
        assert "NotFound" in gone.stderr, (kind, gone.stdout)
    # the hub side is gone, and unjoin again is a no-op
    for name in ("cluster", "cluster1"):
        assert joined.kubectl("host", "get", "secret", name, "-n", "tether-system", check=False).returncode != 0
        assert joined.kubectl("host", "get", "clusters.cluster.tether.io", name, check=False).returncode != 0
    again = ok(await asyncio.to_thread(joined.hub, "unjoin", "cluster", "--cluster-context", "cluster"))
    assert "nothing to do" in again
    assert "No clusters joined" in ok(await asyncio.to_thread(joined.hub, "clusters"))


async def wait_gone(fleet: Fleet, context: str, kind: str, name: str) -> None:
    for _ in range(100):
        gone = fleet.kubectl(context, "get", kind, name, "-n", "tether-system", check=False)
        if gone.returncode != 0 and "NotFound" in gone.stderr:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{kind} {name} still exists in {context}")
