"""Finding 8: a workload with `replicas: 1000000000` must not create pods forever.

Before: the ReplicaSet controller created all the missing pods in one loop (~800/s) and neither
scaling to 0 nor deleting the Deployment stopped it. Now ReplicaSet, Job and StatefulSet create
in slow-start batches (1, 2, 4, ...), plan again before every batch and stop at
BURST_PER_PASS pods per pass, so a scale-down or a deletion ends creation within the batch
under way.
"""

from __future__ import annotations

import asyncio
import copy
import json
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tether.local.cluster import LocalCluster
from tether.local.operations import Operations, WriteOptions
from tether.local.resources import Registry
from tether.local.store import Store
from tether.local.workloads.common import BURST_PER_PASS, slow_start_batches
from tether.local.workloads.job import JobController
from tether.local.workloads.replicaset import ReplicaSetController
from tether.local.workloads.runtime import Controller
from tether.local.workloads.statefulset import StatefulSetController

Obj = dict[str, Any]
HUGE = 1_000_000_000
NS = "bounds"
ADMIN = WriteOptions(manager="test")
LABELS = {"app": "huge"}
TEMPLATE = {"metadata": {"labels": LABELS}, "spec": {"containers": [{"name": "c", "image": "tether/echo"}]}}


@pytest.mark.parametrize(("budget", "sizes"), [
    (0, []),
    (1, [1]),
    (7, [1, 2, 4]),
    (10, [1, 2, 4, 3]),
    (BURST_PER_PASS, [1, 2, 4, 8, 16, 32, 64, 128, 245]),
])
def test_slow_start_batch_sizes(budget: int, sizes: list[int]) -> None:
    assert list(slow_start_batches(budget)) == sizes


@pytest.fixture
def ops(tmp_path: Path) -> Iterator[Operations]:
    store = Store(tmp_path / "state.db")
    operations = Operations(store, Registry.with_builtins())
    operations.create(rt(operations, "", "v1", "namespaces"), "", {"metadata": {"name": NS}}, ADMIN)
    yield operations
    store.close()


def rt(operations: Operations, group: str, version: str, plural: str) -> Any:
    found = operations.registry.lookup(group, version, plural)
    assert found is not None
    return found


OWNERS: dict[str, tuple[Callable[[Operations], Controller], tuple[str, str, str], Obj, Callable[[Obj], None]]] = {
    "ReplicaSet": (
        ReplicaSetController, ("apps", "v1", "replicasets"),
        {"apiVersion": "apps/v1", "kind": "ReplicaSet",
         "spec": {"replicas": HUGE, "selector": {"matchLabels": LABELS}, "template": TEMPLATE}},
        lambda obj: obj["spec"].update(replicas=0)),
    "Job": (
        JobController, ("batch", "v1", "jobs"),
        {"apiVersion": "batch/v1", "kind": "Job",
         "spec": {"parallelism": HUGE, "completions": HUGE,
                  "template": {**TEMPLATE, "spec": {**TEMPLATE["spec"], "restartPolicy": "Never"}}}},
        lambda obj: obj["spec"].update(parallelism=0)),
    "IndexedJob": (
        JobController, ("batch", "v1", "jobs"),
        {"apiVersion": "batch/v1", "kind": "Job",
         "spec": {"parallelism": HUGE, "completions": HUGE, "completionMode": "Indexed",
                  "template": {**TEMPLATE, "spec": {**TEMPLATE["spec"], "restartPolicy": "Never"}}}},
        lambda obj: obj["spec"].update(parallelism=0)),
    "StatefulSet": (
        StatefulSetController, ("apps", "v1", "statefulsets"),
        {"apiVersion": "apps/v1", "kind": "StatefulSet",
         "spec": {"replicas": HUGE, "podManagementPolicy": "Parallel", "serviceName": "huge",
                  "selector": {"matchLabels": LABELS}, "template": TEMPLATE}},
        lambda obj: obj["spec"].update(replicas=0)),
}


def counting(controller: Controller, on_create: Callable[[int], None]) -> list[str]:
    """Count the pods `controller` creates, calling `on_create(n)` after the n-th."""
    made: list[str] = []
    create = controller.writer.create

    def create_and_count(storage_key: str, body: Obj) -> Obj | None:
        created = create(storage_key, body)
        if storage_key == "/pods" and created is not None:
            made.append(created["metadata"]["name"])
            if len(made) > 2 * BURST_PER_PASS:
                raise AssertionError("the controller keeps creating pods")
            on_create(len(made))
        return created

    controller.writer.create = create_and_count  # type: ignore[method-assign]
    return made


def end_of_batch(n: int) -> int:
    """How many pods a pass has made when the batch holding the n-th pod ends."""
    total = 0
    for size in slow_start_batches(BURST_PER_PASS):
        total += size
        if total >= n:
            return total
    raise AssertionError(n)


@pytest.mark.parametrize("kind", sorted(OWNERS))
@pytest.mark.parametrize(("change", "after"), [
    ("scale", 1), ("scale", 2), ("scale", 3), ("scale", 4), ("scale", 9), ("scale", 40), ("delete", 5),
])
async def test_a_change_during_creation_stops_it_at_the_end_of_the_batch(
        ops: Operations, kind: str, change: str, after: int) -> None:
    make, (group, version, plural), body, scale_down = OWNERS[kind]
    owner_rt = rt(ops, group, version, plural)
    owner = ops.create(owner_rt, NS, {**copy.deepcopy(body), "metadata": {"name": "huge"}}, ADMIN)
    controller = make(ops)

    def on_create(n: int) -> None:
        if n != after:
            return
        if change == "delete":
            ops.delete(owner_rt, NS, "huge", {}, ADMIN)
            return
        current = copy.deepcopy(ops.store.get(controller.resource, NS, "huge"))
        assert current is not None
        scale_down(current)
        ops.update(owner_rt, NS, "huge", current, ADMIN)

    made = counting(controller, on_create)
    await controller.reconcile((NS, "huge"))
    assert len(made) == end_of_batch(after), f"{kind}: {len(made)} pods after a {change} at pod {after}"
    assert owner["metadata"]["uid"]


@pytest.mark.parametrize("kind", sorted(OWNERS))
async def test_one_pass_creates_at_most_a_burst_and_queues_the_rest(ops: Operations, kind: str) -> None:
    make, (group, version, plural), body, _ = OWNERS[kind]
    ops.create(rt(ops, group, version, plural), NS, {**copy.deepcopy(body), "metadata": {"name": "huge"}}, ADMIN)
    controller = make(ops)
    made = counting(controller, lambda n: None)
    await controller.reconcile((NS, "huge"))
    assert len(made) == BURST_PER_PASS
    assert not controller.engine.idle(), "the rest must be queued for another pass"


# end to end: a Deployment of 10^9 replicas in a running cluster, scaled to 0 or deleted ----------


@pytest.fixture
def cluster(in_process_cluster: LocalCluster) -> LocalCluster:
    return in_process_cluster


async def wait_for(check: Callable[[], Any], what: str, timeout_s: float = 120.0) -> Any:
    for _ in range(int(timeout_s / 0.05)):
        value = check()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("change", ["scale", "delete"])
async def test_a_deployment_of_a_billion_replicas_stops_when_scaled_to_zero_or_deleted(
        cluster: LocalCluster, change: str) -> None:
    store = cluster.store
    verify = ssl.create_default_context(cafile=str(cluster.pki.ca_cert))
    headers = {"Authorization": f"Bearer {cluster.pki.token()}"}
    created: list[int] = []  # every pod creation in the cluster, whoever makes it
    original = store.create

    def count(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if args and args[0] == "/pods":
            created.append(1)
        return result

    store.create = count  # type: ignore[method-assign]
    async with httpx.AsyncClient(base_url=cluster.url, verify=verify, headers=headers, timeout=60) as api:
        namespace = {"metadata": {"name": NS}}
        assert (await api.post("/api/v1/namespaces", json=namespace)).status_code == 201
        deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "huge"},
                      "spec": {"replicas": HUGE, "selector": {"matchLabels": LABELS}, "template": TEMPLATE}}
        url = f"/apis/apps/v1/namespaces/{NS}/deployments"
        answer = await api.post(url, json=deployment)
        assert answer.status_code == 201, answer.text
        await wait_for(lambda: len(created) >= 100, "the first pods")
        if change == "scale":
            answer = await api.patch(f"{url}/huge/scale", content=json.dumps({"spec": {"replicas": 0}}),
                                     headers={"Content-Type": "application/merge-patch+json"})
        else:
            answer = await api.delete(f"{url}/huge")
        assert answer.status_code == 200, answer.text
        at_change = len(created)

        def creation_stopped() -> bool:
            sets = store.list_objects("apps/replicasets", NS)
            if change == "delete":
                return not sets  # the garbage collector removed the ReplicaSet
            return all(s["spec"]["replicas"] == 0 and (s.get("status") or {}).get("replicas", 0) == 0
                       and (s.get("status") or {}).get("observedGeneration") == s["metadata"]["generation"]
                       for s in sets)

        await wait_for(creation_stopped, f"the ReplicaSet to observe the {change}")
        after = len(created) - at_change
        assert after <= BURST_PER_PASS, f"{after} pods created after the {change}"
        # and nothing more: every pod left goes, and no new one comes
        await wait_for(lambda: not store.list_objects("/pods", NS), "the pods to be gone")
        stopped_at = len(created)
        await wait_for(lambda: cluster.controllers is not None and all(
            c.engine.idle() for c in _workload_controllers(cluster)), "the workload controllers to be idle")
        assert len(created) == stopped_at
        assert not store.list_objects("/pods", NS)


def _workload_controllers(cluster: LocalCluster) -> list[Controller]:
    from tether.local.workloads.runtime import WorkloadControllers

    for component in cluster.components:
        if isinstance(component, WorkloadControllers):
            return component.controllers
    raise AssertionError("no workload controllers")
