"""A federation at rest costs nothing: pull heartbeats renew only the Lease, Cluster status is
written only when it changed, and the sync controllers reconcile on a Cluster event only the
objects whose placement could change.

One in-process local cluster is the hub (and, for the agent's probe, its own member). Writes
are counted by resourceVersion and reconciles by key; every wait is for a condition (an
informer has seen a resourceVersion, an engine is settled), never for time passing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tether.app.pullagent import AgentSettings, PullAgent
from tether.federation.crds import CLUSTER_API_VERSION, WORK_API_VERSION
from tether.federation.health import (
    HUB_NAMESPACE,
    LEASE_API_VERSION,
    TAINT_UNREACHABLE,
    HealthTimers,
    build_health_controller,
)
from tether.federation.install import install
from tether.federation.metrics import HubMetrics
from tether.federation.propagation import HubInformers, KarmadaController, KubeFedController
from tether.federation.works import EXECUTION_FINALIZER
from tether.kube import ClusterCredentials, KubeClient
from tether.local.cluster import LocalCluster
from tether.objects import Obj

NAME = "pull1"
WAIT_S = 60.0


async def wait_for(check: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture
async def hub(in_process_cluster: LocalCluster) -> AsyncIterator[KubeClient]:
    cluster = in_process_cluster
    credentials = ClusterCredentials.from_token(server=cluster.url, token=cluster.pki.token(),
                                                ca_bundle=cluster.pki.ca_cert.read_bytes())
    async with KubeClient(credentials) as client:
        await install(client)
        yield client


async def add_cluster(hub: KubeClient, name: str, *, pull: bool = False,
                      labels: dict[str, str] | None = None, ready: bool = True) -> None:
    await hub.create({"apiVersion": CLUSTER_API_VERSION, "kind": "Cluster",
                      "metadata": {"name": name, "labels": labels or {}},
                      "spec": {"syncMode": "Pull" if pull else "Push",
                               "apiEndpoint": hub.credentials.server}})
    await hub.create({"apiVersion": "v1", "kind": "Namespace",
                      "metadata": {"name": f"tether-es-{name}"}})
    if ready:
        await set_status(hub, name, {"conditions": [
            {"type": "Ready", "status": "True", "reason": "ClusterReady", "message": "ok",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]})


async def set_status(hub: KubeClient, name: str, status: Obj) -> str:
    changed = await hub.request("PATCH", f"/apis/{CLUSTER_API_VERSION}/clusters/{name}/status",
                                body={"status": status},
                                content_type="application/merge-patch+json")
    return str(changed["metadata"]["resourceVersion"])


async def rv(hub: KubeClient, api_version: str, kind: str, name: str,
             namespace: str | None = None) -> str:
    obj = await hub.get(api_version, kind, name, namespace)
    return str(obj["metadata"]["resourceVersion"])


async def pods_settled(hub: KubeClient) -> None:
    """Wait until every pod of the cluster is bound and running (or done): the agent reports
    pods in resourceSummary (allocated/allocating), so a pod still starting is a real change."""
    deadline = time.monotonic() + WAIT_S
    while True:
        pods = (await hub.request("GET", "/api/v1/pods")).get("items", [])
        deployments = (await hub.request("GET", "/apis/apps/v1/deployments")).get("items", [])
        if all((p.get("spec") or {}).get("nodeName")
               and (p.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")
               for p in pods) and all(
                (d.get("status") or {}).get("observedGeneration") == d["metadata"].get("generation")
                and (d.get("status") or {}).get("readyReplicas", 0)
                == (d.get("spec") or {}).get("replicas", 1) for d in deployments):
            return
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the cluster's pods to settle")
        await asyncio.sleep(0.1)


# the pull agent ---------------------------------------------------------------------------------


async def test_heartbeats_at_rest_renew_the_lease_and_write_no_cluster_status(
        hub: KubeClient) -> None:
    await add_cluster(hub, NAME, pull=True, ready=False)
    await hub.create({"apiVersion": LEASE_API_VERSION, "kind": "Lease",
                      "metadata": {"name": NAME, "namespace": HUB_NAMESPACE},
                      "spec": {"holderIdentity": NAME}})
    # a probe that times out on a loaded machine is a real change (Ready flips): give it room
    agent = PullAgent(hub, hub, AgentSettings(cluster=NAME, probe_timeout_s=60.0))
    await pods_settled(hub)
    await agent.heartbeat()  # the first one reports everything
    assert agent.status_writes == 1
    first = await hub.get(CLUSTER_API_VERSION, "Cluster", NAME)
    status = first["status"]
    assert status["lastHeartbeatTime"] and status["kubernetesVersion"]
    assert status["apiEnablements"] and status["nodeSummary"]["totalNum"] >= 0
    assert [c["status"] for c in status["conditions"] if c["type"] == "Ready"] == ["True"]

    # a cluster that has just started may still change (a node's summary, a pod settling):
    # such a change is written, as it should be; wait until a heartbeat finds nothing new
    for _ in range(20):
        writes = agent.status_writes
        await agent.heartbeat()
        if agent.status_writes == writes:
            break
        await asyncio.sleep(0.5)
    else:
        raise AssertionError("every heartbeat wrote Cluster status: the cluster never settled")
    settled = await hub.get(CLUSTER_API_VERSION, "Cluster", NAME)
    heartbeats, writes = agent.heartbeats, agent.status_writes

    leases = [await rv(hub, LEASE_API_VERSION, "Lease", NAME, HUB_NAMESPACE)]
    for _ in range(3):
        await agent.heartbeat()
        leases.append(await rv(hub, LEASE_API_VERSION, "Lease", NAME, HUB_NAMESPACE))
    assert agent.heartbeats == heartbeats + 3 and agent.status_writes == writes
    assert await rv(hub, CLUSTER_API_VERSION, "Cluster", NAME) == settled["metadata"][
        "resourceVersion"], "a heartbeat with nothing changed must not write Cluster status"
    assert len(set(leases)) == 4, "every heartbeat renews the Lease"

    # the hub turned it Unknown (say, after a network split): the next heartbeat says Ready again
    await set_status(hub, NAME, {"conditions": [
        {"type": "Ready", "status": "Unknown", "reason": "ClusterStatusUnknown", "message": "x",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
    await agent.heartbeat()
    assert agent.status_writes == writes + 1
    again = await hub.get(CLUSTER_API_VERSION, "Cluster", NAME)
    assert [c["status"] for c in again["status"]["conditions"]
            if c["type"] == "Ready"] == ["True"]


async def test_without_a_lease_the_heartbeat_goes_into_the_status(hub: KubeClient) -> None:
    """An agent that cannot renew its Lease (here: its namespace is gone) keeps the cluster
    alive through the status, as before the split."""
    await add_cluster(hub, NAME, pull=True, ready=False)
    await hub.delete("v1", "Namespace", HUB_NAMESPACE)
    now = [time.time()]
    agent = PullAgent(hub, hub, AgentSettings(cluster=NAME), clock=lambda: now[0])
    await agent.heartbeat()
    before = await rv(hub, CLUSTER_API_VERSION, "Cluster", NAME)
    now[0] += 10
    await agent.heartbeat()
    assert agent.status_writes == 2
    assert await rv(hub, CLUSTER_API_VERSION, "Cluster", NAME) != before


async def test_a_silent_pull_member_turns_unknown_from_its_lease(hub: KubeClient) -> None:
    """Health reads liveness from the Lease: renewals keep the cluster Ready long after its
    status was last written; once they stop, it turns Unknown and is tainted."""
    await add_cluster(hub, NAME, pull=True, ready=False)
    await hub.create({"apiVersion": LEASE_API_VERSION, "kind": "Lease",
                      "metadata": {"name": NAME, "namespace": HUB_NAMESPACE},
                      "spec": {"holderIdentity": NAME}})
    t0 = time.time()
    now = [t0]
    timers = HealthTimers(grace_period_s=40.0)
    # a probe that times out on a loaded machine is a real change (Ready flips): give it room
    agent = PullAgent(hub, hub, AgentSettings(cluster=NAME, probe_timeout_s=60.0),
                      clock=lambda: now[0])
    health = build_health_controller(hub, timers=timers)
    health.clock = lambda: now[0]
    await pods_settled(hub)
    for _ in range(20):  # a cluster that has just started may still change: let it settle
        writes = agent.status_writes
        await agent.heartbeat()
        if writes and agent.status_writes == writes:
            break
        await asyncio.sleep(0.5)
    writes = agent.status_writes

    async def health_pass() -> dict[str, Any]:
        with pytest.raises(Exception, match="requeue"):
            await health.reconcile(NAME)
        cluster = await hub.get(CLUSTER_API_VERSION, "Cluster", NAME)
        ready = [c for c in cluster["status"]["conditions"] if c["type"] == "Ready"]
        return {"ready": ready[0]["status"], "taints": cluster["spec"].get("taints") or [],
                "heartbeat": cluster["status"]["lastHeartbeatTime"]}

    for step in range(4):  # heartbeats every 30 s for 90 s: none writes status
        now[0] = t0 + 30 * step
        await agent.heartbeat()
    assert agent.status_writes == writes
    now[0] = t0 + 120  # 120 s after the last status write, 30 s after the last renewal
    seen = await health_pass()
    assert seen["ready"] == "True" and not seen["taints"]
    now[0] = t0 + 90 + 41  # the Lease is now older than the grace period
    seen = await health_pass()
    assert seen["ready"] == "Unknown"
    assert [t["key"] for t in seen["taints"]] == [TAINT_UNREACHABLE]


# the sync controllers ---------------------------------------------------------------------------


def policy(name: str, group: str, env: str) -> Obj:
    return {"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap",
                                            "labelSelector": {"matchLabels": {"group": group}}}],
                     "placement": {"clusterAffinity": {
                         "labelSelector": {"matchLabels": {"env": env}}}}}}


def configmap(name: str, group: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default", "labels": {"group": group}},
            "data": {"k": name}}


class Recorder:
    """Counts reconciles per key of a controller (wrapping its `reconcile`)."""

    def __init__(self, controller: Any) -> None:
        self.keys: list[Any] = []
        original = controller.reconcile

        async def counted(key: Any) -> None:
            self.keys.append(key)
            await original(key)

        controller.reconcile = counted


async def settled(shared: HubInformers, controller: Any, cluster: str, version: str) -> None:
    """The shared informer has seen `cluster` at `version` (so every handler ran) and the
    controller has nothing queued or scheduled."""
    def seen() -> bool:
        found = shared.clusters.get(None, cluster)
        return found is not None and int(found["metadata"]["resourceVersion"]) >= int(version)

    await wait_for(seen, f"the informer to see {cluster} at {version}")
    await wait_for(controller.engine.settled, "the controller to settle")


def work_clusters(shared: HubInformers, name: str) -> set[str]:
    """Clusters with a Work for ConfigMap `name` that is not being deleted (no executor runs
    here to release the finalizer of a deleted one)."""
    out = set()
    for key in shared.works.keys():  # noqa: SIM118 (Informer.keys, not a dict)
        work = shared.works.get(key.namespace, key.name) or {}
        if key.name == f"configmap-default-{name}" and not work["metadata"].get(
                "deletionTimestamp"):
            out.add(key.namespace.removeprefix("tether-es-"))
    return out


async def test_cluster_events_reconcile_only_what_they_could_move(hub: KubeClient) -> None:
    await add_cluster(hub, "c1", labels={"env": "a"})
    await add_cluster(hub, "c2", labels={"env": "b"})
    for obj in (policy("pa", "a", "a"), policy("pb", "b", "b"), configmap("cm-a", "a"),
                configmap("cm-b", "b")):
        await hub.create(obj)
    shared = HubInformers(hub)
    karmada = KarmadaController(hub, shared, HubMetrics(), resync_s=3600)
    kubefed = KubeFedController(hub, shared, HubMetrics(), resync_s=3600)
    recorded = Recorder(karmada)
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(t) for t in (shared.run(), karmada.run(), kubefed.run())]
        try:
            await wait_for(lambda: work_clusters(shared, "cm-a") == {"c1"}
                           and work_clusters(shared, "cm-b") == {"c2"}, "the first Works")
            version = await rv(hub, CLUSTER_API_VERSION, "Cluster", "c2")
            await settled(shared, karmada, "c2", version)

            # a status write that changes nothing placement reads: no reconcile at all
            recorded.keys.clear()
            version = await set_status(hub, "c1", {"lastHeartbeatTime": "2026-01-02T00:00:00Z",
                                                   "nodeSummary": {"totalNum": 3, "readyNum": 3}})
            await settled(shared, karmada, "c1", version)
            assert recorded.keys == []

            # a new label on c2: only the template placed there (its policy admits c2)
            changed = await hub.patch(CLUSTER_API_VERSION, "Cluster", "c2",
                                      {"metadata": {"labels": {"tier": "gold"}}})
            await settled(shared, karmada, "c2", changed["metadata"]["resourceVersion"])
            assert {k[3] for k in recorded.keys} == {"cm-b"}

            # c1 moves from env=a to env=b: cm-a leaves it, cm-b comes
            recorded.keys.clear()
            await hub.patch(CLUSTER_API_VERSION, "Cluster", "c1",
                            {"metadata": {"labels": {"env": "b"}}})
            await wait_for(lambda: not work_clusters(shared, "cm-a")
                           and work_clusters(shared, "cm-b") == {"c1", "c2"},
                           "cm-b in both clusters, cm-a in none")
            assert {k[3] for k in recorded.keys} == {"cm-a", "cm-b"}
        finally:
            for task in tasks:
                task.cancel()


async def test_a_new_work_for_a_push_member_is_written_once(hub: KubeClient) -> None:
    """The Work is created with everything it needs (the executor's finalizer included): no
    second write of the Work by the sync controller follows its create."""
    await add_cluster(hub, "c1", labels={"env": "a"})
    await hub.create(policy("pa", "a", "a"))
    shared = HubInformers(hub)
    karmada = KarmadaController(hub, shared, HubMetrics(), resync_s=3600)
    writes: list[tuple[str, str]] = []
    shared.work_handlers.append(lambda e: writes.append((e.type, e.resource_version)))
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(t) for t in (shared.run(), karmada.run())]
        try:
            await wait_for(lambda: shared.synced, "the informers")
            await hub.create(configmap("cm-a", "a"))
            await wait_for(lambda: work_clusters(shared, "cm-a") == {"c1"}, "the Work")
            await wait_for(karmada.engine.settled, "the controller to settle")
            work = await hub.get(WORK_API_VERSION, "Work", "configmap-default-cm-a",
                                 "tether-es-c1")
            assert work["metadata"]["finalizers"] == [EXECUTION_FINALIZER]
            assert [t for t, _ in writes] == ["ADDED"]
        finally:
            for task in tasks:
                task.cancel()


async def test_a_burst_of_works_is_applied_and_each_reported_once(hub: KubeClient) -> None:
    """An executor (here a pull agent's, its member the same cluster) given 30 Works at once:
    every object arrives, and every Work gets exactly one status write (counted as MODIFIED
    events with a new resourceVersion), whatever order applies and reports take."""
    from tether.federation.execution import WorkExecutor

    await add_cluster(hub, NAME, pull=True)
    await hub.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "burst"}})
    shared = HubInformers(hub)
    executor = WorkExecutor(hub, shared, HubMetrics(), pull_cluster=NAME, member_client=hub,
                            resync_s=3600)
    events: dict[str, list[str]] = {}
    shared.work_handlers.append(
        lambda e: events.setdefault(e.key.name, []).append(e.type))
    names = [f"cm-{i:02d}" for i in range(30)]
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(t) for t in (shared.run(), executor.run())]
        try:
            await wait_for(lambda: shared.synced, "the informers")
            for name in names:
                manifest = configmap(name, "a")
                manifest["metadata"]["namespace"] = "burst"
                manifest["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "tether"
                await hub.create({
                    "apiVersion": WORK_API_VERSION, "kind": "Work",
                    "metadata": {"name": name, "namespace": f"tether-es-{NAME}",
                                 "labels": {"work.tether.io/managed-by": "tether-hub"},
                                 "finalizers": [EXECUTION_FINALIZER]},
                    "spec": {"workload": {"manifests": [manifest]}}})

            def reported() -> bool:
                return all(
                    any(c.get("type") == "Applied" and c.get("status") == "True"
                        for c in ((shared.works.get(f"tether-es-{NAME}", n) or {}).get("status")
                                  or {}).get("conditions", []))
                    for n in names)

            await wait_for(reported, "every Work reported Applied")
            await wait_for(executor.engine.settled, "the executor to settle")
            present = await hub.list_objects("v1", "ConfigMap", "burst")
            assert {c["metadata"]["name"] for c in present} >= set(names)
            assert {n: events[n] for n in names} == {n: ["ADDED", "MODIFIED"] for n in names}
        finally:
            for task in tasks:
                task.cancel()


async def test_a_cluster_unjoined_mid_reconcile_is_not_an_error(hub: KubeClient) -> None:
    await add_cluster(hub, "gone1")
    cluster = await hub.get(CLUSTER_API_VERSION, "Cluster", "gone1")
    await hub.delete(CLUSTER_API_VERSION, "Cluster", "gone1")
    health = build_health_controller(hub)
    status = {"conditions": [{"type": "Ready", "status": "False", "reason": "ClusterNotReachable",
                              "message": "gone", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    await health._write(cluster, status, "False")  # raised NotFound, logged as a failure, before
    assert await hub.get_or_none(CLUSTER_API_VERSION, "Cluster", "gone1") is None
