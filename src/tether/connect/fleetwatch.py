"""Following the hub's member fleet: one client and one task per member, for every connect controller.

The hub tells a controller who its members are through a callable (`members()`) and pokes it
when a Cluster changes (`members_changed()`). Credentials Secrets change without a Cluster event,
so the list is also looked at again every `recheck_s` (`MemberSignal`).

`FleetWatcher` keeps, per wanted member, a `KubeClient` and a task serving that member's state:
a member that leaves has its task cancelled, `left(state)` called while its client is still open
(to undo what the controller wrote there), then its client closed; a member whose credentials
changed is served anew with a new client; one whose credentials did not change may only have its
state refreshed (`refresh(state, member)` says whether anything changed). `changed()` runs
after a pass that started, refreshed or removed anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, TypeVar

from tether.kube import ClusterCredentials, KubeClient

log = logging.getLogger(__name__)

M = TypeVar("M")
S = TypeVar("S")


class MemberSignal:
    """Members may have changed: said by the hub, or assumed every `recheck_s`."""

    def __init__(self, recheck_s: float) -> None:
        self.recheck_s = recheck_s
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    async def each_change(self, action: Callable[[], Awaitable[None]], what: str) -> NoReturn:
        """Run `action` now and again after every signal or `recheck_s`; its failures are logged."""
        while True:
            try:
                await action()
            except Exception:
                log.exception("%s: syncing members failed", what)
            self._event.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.recheck_s):  # wait_for may drop a cancel (3.11)
                    await self._event.wait()


@dataclass
class _Joined(Generic[S]):
    credentials: ClusterCredentials
    client: KubeClient
    state: S
    task: asyncio.Task[None]


class FleetWatcher(Generic[M, S]):
    def __init__(self, what: str, members: Callable[[], Iterable[M]], *, name: Callable[[M], str],
                 credentials: Callable[[M], ClusterCredentials], join: Callable[[M, KubeClient], S],
                 serve: Callable[[S], Coroutine[Any, Any, None]],
                 left: Callable[[S], Awaitable[None]] | None = None,
                 refresh: Callable[[S, M], bool] | None = None,
                 changed: Callable[[], None] | None = None, recheck_s: float = 10.0) -> None:
        self.what = what
        self.members = members
        self.name = name
        self.credentials = credentials
        self.join = join
        self.serve = serve
        self.left = left
        self.refresh = refresh
        self.changed = changed
        self.signal = MemberSignal(recheck_s)
        self.states: dict[str, S] = {}  # member name -> the controller's state for it
        self._joined: dict[str, _Joined[S]] = {}
        self._group: asyncio.TaskGroup | None = None

    def members_changed(self) -> None:
        self.signal.set()

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                await self.signal.each_change(self._sync, self.what)
        finally:
            self._group = None
            for joined in self._joined.values():
                joined.task.cancel()
            await asyncio.gather(*(j.client.close() for j in self._joined.values()), return_exceptions=True)

    async def _sync(self) -> None:
        wanted = {self.name(m): m for m in self.members()}
        changed = False
        for name in [n for n in self._joined if n not in wanted]:
            gone = self._joined.pop(name)
            self.states.pop(name, None)
            gone.task.cancel()
            try:
                if self.left is not None:
                    await self.left(gone.state)
            finally:
                await gone.client.close()
            changed = True
        for name, member in wanted.items():
            credentials = self.credentials(member)
            old = self._joined.get(name)
            if old is not None and old.credentials == credentials:
                if self.refresh is not None and self.refresh(old.state, member):
                    changed = True
                continue
            if old is not None:
                old.task.cancel()
                await old.client.close()
            client = KubeClient(credentials)
            state = self.join(member, client)
            self.states[name] = state
            assert self._group is not None
            self._joined[name] = _Joined(credentials, client, state, self._group.create_task(self.serve(state)))
            changed = True
        if changed and self.changed is not None:
            self.changed()
