"""A change signal for components that rebuild a view from a few resources when any of them changes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from tether.local.store import Store, follow


async def signal_changes(store: Store, resource: str, changed: asyncio.Event) -> None:
    """Set `changed` after every change of `resource` (and after a watch overflow) until cancelled."""
    await follow(store, resource, None, on_event=lambda event: changed.set(), resync=changed.set)


def start_signals(group: asyncio.TaskGroup, store: Store, resources: Iterable[str], changed: asyncio.Event) -> None:
    for resource in resources:
        group.create_task(signal_changes(store, resource, changed))
