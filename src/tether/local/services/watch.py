"""A change signal for components that rebuild a view from a few resources when any of them changes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from tether.local.store import Store, WatchOverflow


async def signal_changes(store: Store, resource: str, changed: asyncio.Event) -> None:
    """Set `changed` after every change of `resource` (and after a watch overflow) until cancelled."""
    watcher, _ = store.watch(resource, None, store.revision)
    try:
        while True:
            try:
                await watcher.next(None)
            except WatchOverflow:
                watcher, _ = store.watch(resource, None, store.revision)
            changed.set()
    finally:
        watcher.close()


def start_signals(group: asyncio.TaskGroup, store: Store, resources: Iterable[str], changed: asyncio.Event) -> None:
    for resource in resources:
        group.create_task(signal_changes(store, resource, changed))
