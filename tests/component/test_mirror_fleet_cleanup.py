"""The hub's mirror fleet cleans up after itself in every member a MirrorPolicy took part in:
a member left alone when the other leaves, and a member whose mirror is not running at the
moment the policy is deleted (its mirror being restarted), keep nothing mirrored.

Two in-process local clusters are the members `a` and `b` (`a` is also the hub), each with a
labelled Service the other mirrors.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tether.connect.mirror import labels as L
from tether.connect.mirror.fleet import MirrorFleet
from tether.connect.mirror.policy import API_VERSION, KIND, Member
from tether.connect.names import mirror_name
from tether.kube import ClusterCredentials, KubeClient, KubeError
from tether.local.cluster import ClusterConfig, LocalCluster
from tether.objects import Obj

DEADLINE_S = 90.0  # generous: the machine is shared
MIRRORS = "mirrors"
POLICY: Obj = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "p"},
               "spec": {"mirrorNamespace": MIRRORS, "clusterSelector": {"matchLabels": {"mirror": "yes"}}}}
SOURCE: tuple[Obj, ...] = (
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}},
    {"apiVersion": "v1", "kind": "Service",
     "metadata": {"name": "web", "namespace": "shop", "labels": {"mirror.semaphore.uw.io/mirror-service": "true"}},
     "spec": {"ports": [{"name": "http", "port": 80}]}},
    {"apiVersion": "v1", "kind": "Service",
     "metadata": {"name": "api", "namespace": "shop", "labels": {"mirror.semaphore.uw.io/global-service": "true"}},
     "spec": {"ports": [{"name": "http", "port": 80}]}},
)


@dataclass
class Fleet:
    clients: dict[str, KubeClient]
    members: dict[str, Member]
    fleet: MirrorFleet


def credentials(cluster: LocalCluster) -> ClusterCredentials:
    return ClusterCredentials.from_token(server=cluster.url, token=cluster.pki.token(),
                                         ca_bundle=cluster.pki.ca_cert.read_bytes())


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[Fleet]:
    clusters = {name: LocalCluster(ClusterConfig(name=name, data_dir=tmp_path / name)) for name in ("a", "b")}
    tasks = [asyncio.create_task(c.run()) for c in clusters.values()]
    fleet_task: asyncio.Task[None] | None = None
    clients: dict[str, KubeClient] = {}
    try:
        for cluster in clusters.values():
            await asyncio.wait_for(cluster.started.wait(), DEADLINE_S)
        clients = {name: KubeClient(credentials(c)) for name, c in clusters.items()}
        for client in clients.values():
            for obj in SOURCE:
                await client.apply(obj, field_manager="test")
        members = {name: Member(name, credentials(c), ready=True, labels={"mirror": "yes"})
                   for name, c in clusters.items()}
        current = dict(members)
        fleet = MirrorFleet(clients["a"], lambda: list(current.values()))
        fleet_task = asyncio.create_task(fleet.run())
        yield Fleet(clients, current, fleet)
    finally:
        if fleet_task is not None:
            fleet_task.cancel()
            await asyncio.gather(fleet_task, return_exceptions=True)
        for client in clients.values():
            await client.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def until(check: Callable[[], Any], what: str) -> None:
    try:
        async with asyncio.timeout(DEADLINE_S):
            while not await check():  # noqa: ASYNC110 - polling a test condition
                await asyncio.sleep(0.1)
    except TimeoutError:
        pytest.fail(f"not within {DEADLINE_S:.0f}s: {what}")


async def globals_of(client: KubeClient) -> list[str]:
    return [str(s["metadata"]["name"]) for s in await client.list_objects("v1", "Service", MIRRORS,
                                                                       f"{L.GLOBAL_SVC}={L.TRUE}")]


async def mirrored(client: KubeClient, prefix: str) -> list[str]:
    """What `client`'s cluster holds in the mirror namespace from the member `prefix`."""
    selector = f"{L.MIRRORED_SVC}={L.TRUE},{L.PREFIX_SYNC}={prefix}"
    found = []
    for api_version, kind in (("v1", "Service"), ("v1", "Endpoints"), ("discovery.k8s.io/v1", "EndpointSlice")):
        found += [f"{kind}/{o['metadata']['name']}"
                  for o in await client.list_objects(api_version, kind, MIRRORS, selector)]
    return found


async def start_mirroring(world: Fleet) -> None:
    async def crd() -> bool:
        return await world.clients["a"].get_or_none(
            "apiextensions.k8s.io/v1", "CustomResourceDefinition", "mirrorpolicies.connect.tether.io") is not None

    await until(crd, "the MirrorPolicy CRD")
    await until(lambda: _applied(world.clients["a"]), "the policy applied")
    await both_mirrored(world)


async def both_mirrored(world: Fleet) -> None:
    async def both() -> bool:
        names = ([s async for s in _service_names(world.clients["a"])],
                 [s async for s in _service_names(world.clients["b"])])
        return (mirror_name("b", "shop", "web") in names[0]) and (mirror_name("a", "shop", "web") in names[1])

    await until(both, "a mirrors b's web and b mirrors a's")

    async def global_services() -> bool:
        return bool(await globals_of(world.clients["a"])) and bool(await globals_of(world.clients["b"]))

    await until(global_services, "the global Service of shop/api in both")


async def _applied(host: KubeClient) -> bool:
    try:
        await host.apply(POLICY, field_manager="test")
    except KubeError:  # the CRD just established: not served yet
        return False
    return True


async def _service_names(client: KubeClient) -> AsyncIterator[str]:
    for service in await client.list_objects("v1", "Service", MIRRORS):
        yield str(service["metadata"]["name"])


async def test_a_member_left_alone_keeps_nothing_of_the_one_that_left(world: Fleet) -> None:
    await start_mirroring(world)
    del world.members["b"]  # b's Cluster deleted from the hub: a alone runs no mirror
    world.fleet.members_changed()

    async def cleaned() -> bool:
        return not await mirrored(world.clients["a"], "b")

    await until(cleaned, "b's mirrors gone from a")
    assert await mirrored(world.clients["a"], "b") == []


async def test_deleting_the_policy_cleans_a_member_whose_mirror_is_not_running(world: Fleet) -> None:
    await start_mirroring(world)
    # a's mirror stopped as a restart stops it (the reconcile starts it again next): the policy is
    # deleted in between
    state = world.fleet._state["p"]
    await world.fleet._stop(state, "a")
    assert "a" not in state.running
    await world.clients["a"].delete(API_VERSION, KIND, "p")

    async def cleaned() -> bool:
        return not await mirrored(world.clients["a"], "b") and not await mirrored(world.clients["b"], "a")

    await until(cleaned, "every mirror gone from both members")
    assert await mirrored(world.clients["a"], "b") == [] and await mirrored(world.clients["b"], "a") == []

    async def no_globals() -> bool:
        return not await globals_of(world.clients["a"]) and not await globals_of(world.clients["b"])

    await until(no_globals, "the global Services gone from both members")
    assert await globals_of(world.clients["a"]) == [] and await globals_of(world.clients["b"]) == []


async def test_a_member_no_longer_selected_keeps_nothing_mirrored(world: Fleet) -> None:
    await start_mirroring(world)
    b = world.members["b"]
    world.members["b"] = Member(b.name, b.credentials, b.ready, labels={})  # still registered
    world.fleet.members_changed()

    async def cleaned() -> bool:
        return not await mirrored(world.clients["a"], "b") and not await mirrored(world.clients["b"], "a")

    await until(cleaned, "b's mirrors gone from a, and a's from b")

    async def no_globals() -> bool:
        return not await globals_of(world.clients["b"])

    await until(no_globals, "the global Service gone from b")
    assert await globals_of(world.clients["b"]) == []
