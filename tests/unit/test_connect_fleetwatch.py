"""The shared member-fleet watcher: joins, leaves, credential changes and refreshes.

No API is contacted: the per-member task only records that it runs, and clients are never used.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from tether.connect.fleetwatch import FleetWatcher, MemberSignal
from tether.kube import ClusterCredentials, KubeClient


def creds(server: str) -> ClusterCredentials:
    return ClusterCredentials.from_token(server=server, token="t", ca_bundle=None, insecure=True)


@dataclass(frozen=True)
class Member:
    name: str
    server: str
    zone: str = ""


@dataclass
class State:
    member: Member
    client: KubeClient
    served: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: bool = False


class Log(list[str]):
    """A list whose growth can be awaited."""

    def __init__(self) -> None:
        super().__init__()
        self.grew = asyncio.Condition()

    def add(self, line: str) -> None:
        self.append(line)
        asyncio.get_running_loop().create_task(self._tell())

    async def _tell(self) -> None:
        async with self.grew:
            self.grew.notify_all()

    async def until(self, predicate: Callable[[], bool]) -> None:
        async with self.grew:
            await self.grew.wait_for(predicate)


@dataclass
class Harness:
    members: list[Member]
    log: Log = field(default_factory=Log)

    def watcher(self) -> FleetWatcher[Member, State]:
        async def serve(state: State) -> None:
            state.served.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                state.cancelled = True
                raise

        async def left(state: State) -> None:
            self.log.add(f"left {state.member.name} client-open={not state.client.closed}")

        def refresh(state: State, member: Member) -> bool:
            if state.member == member:
                return False
            state.member = member
            return True

        return FleetWatcher("test", lambda: list(self.members), name=lambda m: m.name,
                            credentials=lambda m: creds(m.server), join=State, serve=serve, left=left,
                            refresh=refresh, changed=lambda: self.log.add("changed"), recheck_s=3600.0)


async def settle(watcher: FleetWatcher[Member, State], log: Log, changes: int) -> None:
    async with asyncio.timeout(10):
        await log.until(lambda: log.count("changed") >= changes)
        for state in watcher.states.values():
            await state.served.wait()


async def test_members_join_leave_change_credentials_and_refresh() -> None:
    h = Harness([Member("a", "https://127.0.0.1:1"), Member("b", "https://127.0.0.1:2")])
    watcher = h.watcher()
    task = asyncio.create_task(watcher.run())
    try:
        await settle(watcher, h.log, 1)
        assert sorted(watcher.states) == ["a", "b"]
        a, b = watcher.states["a"], watcher.states["b"]

        h.members = [Member("a", "https://127.0.0.1:1", zone="z1"), Member("b", "https://127.0.0.1:9")]
        watcher.members_changed()
        await settle(watcher, h.log, 2)
        assert watcher.states["a"] is a and a.member.zone == "z1"  # refreshed in place, same client
        assert watcher.states["b"] is not b and b.cancelled and b.client.closed  # new credentials: anew

        h.members = [Member("a", "https://127.0.0.1:1", zone="z1")]
        watcher.members_changed()
        await settle(watcher, h.log, 3)
        assert "left b client-open=True" in h.log  # undone while its client still worked
        assert sorted(watcher.states) == ["a"]

        before = h.log.count("changed")
        watcher.members_changed()
        await asyncio.sleep(0.05)
        assert h.log.count("changed") == before  # nothing changed: nothing said
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert a.cancelled and a.client.closed


async def test_a_failing_member_list_is_logged_and_retried() -> None:
    calls = Log()

    async def action() -> None:
        calls.add("call")
        if len(calls) == 1:
            raise RuntimeError("hub not answering")

    signal = MemberSignal(3600.0)
    task = asyncio.create_task(signal.each_change(action, "test"))
    try:
        async with asyncio.timeout(10):
            await calls.until(lambda: len(calls) >= 1)
            signal.set()
            await calls.until(lambda: len(calls) >= 2)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert len(calls) == 2
