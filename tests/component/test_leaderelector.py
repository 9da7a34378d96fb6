"""`LeaderElector` against a real (in-process) API server: one leader, release on a graceful stop,
takeover after a crash, and a leader that cannot renew or sees another holder stops leading."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tether.kube import ClusterCredentials, KubeClient
from tether.kube.leaderelection import LEASE_API_VERSION, ElectionConfig, LeaseRecord
from tether.kube.leaderelector import LeaderElector, LeadershipLost

NS = "default"
LEASE = "tether-hub"
DEADLINE_S = 60.0  # generous: the machine is shared


def config(identity: str, *, release: bool = True) -> ElectionConfig:
    return ElectionConfig(identity=identity, name=LEASE, namespace=NS, lease_duration_s=3,
                          renew_deadline_s=2, retry_period_s=1, release_on_cancel=release)


@pytest.fixture
async def client(in_process_cluster: Any) -> AsyncIterator[KubeClient]:
    async with client_for(in_process_cluster) as c:
        yield c


def client_for(cluster: Any) -> KubeClient:
    credentials = ClusterCredentials.from_token(server=cluster.url, token=cluster.pki.token(),
                                                ca_bundle=cluster.pki.ca_cert.read_bytes())
    return KubeClient(credentials)


class Candidate:
    """An elector whose `lead` records when it starts and when it is cancelled."""

    def __init__(self, client: KubeClient, identity: str, events: list[str], *,
                 release: bool = True) -> None:
        self.identity = identity
        self.elector = LeaderElector(client, config(identity, release=release))
        self.events = events
        self.leading = asyncio.Event()
        self.task: asyncio.Task[None] = asyncio.create_task(self.elector.run(self.lead))

    async def lead(self) -> None:
        self.events.append(f"{self.identity} leads")
        self.leading.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.events.append(f"{self.identity} stopped")

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def until(check: Callable[[], Any], what: str) -> Any:
    async with asyncio.timeout(DEADLINE_S):
        while not (found := check()):  # noqa: ASYNC110 - polling a test condition
            await asyncio.sleep(0.05)
    assert found, what
    return found


async def lease(client: KubeClient) -> LeaseRecord:
    return LeaseRecord.from_lease(await client.get(LEASE_API_VERSION, "Lease", LEASE, NS))


async def test_one_leader_and_release_hands_over(client: KubeClient) -> None:
    events: list[str] = []
    a = Candidate(client, "hub-a", events)
    await a.leading.wait()
    b = Candidate(client, "hub-b", events)
    # b has read the Lease and stays a follower while a renews
    await until(lambda: b.elector.leader == "hub-a", "b sees a as leader")
    first = await lease(client)
    assert (first.holder, first.transitions, first.lease_duration_s) == ("hub-a", 0, 3)
    assert not b.leading.is_set() and not b.elector.is_leader and a.elector.is_leader

    await a.stop()
    released = await lease(client)
    # a's controllers stopped before the Lease was released (or b could have overlapped)
    assert events[:2] == ["hub-a leads", "hub-a stopped"]
    assert released.holder in ("", "hub-b")
    await asyncio.wait_for(b.leading.wait(), DEADLINE_S)
    taken = await lease(client)
    assert (taken.holder, taken.transitions) == ("hub-b", 1)
    assert events == ["hub-a leads", "hub-a stopped", "hub-b leads"]
    await b.stop()


async def test_crashed_leader_is_replaced_after_the_lease_duration(client: KubeClient) -> None:
    events: list[str] = []
    a = Candidate(client, "hub-a", events, release=False)  # a crash does not release
    await a.leading.wait()
    b = Candidate(client, "hub-b", events)
    await until(lambda: b.elector.leader == "hub-a", "b sees a as leader")
    await a.stop()
    assert (await lease(client)).holder == "hub-a"  # not released: b must wait it out
    await asyncio.wait_for(b.leading.wait(), DEADLINE_S)
    taken = await lease(client)
    assert (taken.holder, taken.transitions) == ("hub-b", 1)
    await b.stop()


async def test_leader_that_sees_another_holder_stops_leading(client: KubeClient) -> None:
    events: list[str] = []
    a = Candidate(client, "hub-a", events)
    await a.leading.wait()
    current = await client.get(LEASE_API_VERSION, "Lease", LEASE, NS)
    current["spec"]["holderIdentity"] = "intruder"
    await client.replace(current)
    with pytest.raises(LeadershipLost, match="intruder"):
        await asyncio.wait_for(a.task, DEADLINE_S)
    assert events == ["hub-a leads", "hub-a stopped"]
    assert (await lease(client)).holder == "intruder"  # not released: it is not a's


async def test_leader_that_cannot_renew_stops_within_the_renew_deadline(in_process_cluster: Any) -> None:
    events: list[str] = []
    lost_client = client_for(in_process_cluster)
    a = Candidate(lost_client, "hub-a", events)
    await a.leading.wait()
    await lost_client.close()  # every later call fails: the API server is out of reach
    with pytest.raises(LeadershipLost, match="renew deadline"):
        await asyncio.wait_for(a.task, DEADLINE_S)
    assert events == ["hub-a leads", "hub-a stopped"]
    assert not a.elector.is_leader
