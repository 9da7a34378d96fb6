"""Stopping a task from another task without swallowing the stopper's own cancellation.

`task.cancel()` followed by `with suppress(CancelledError): await task` is the usual way to stop
a child task, and it has a trap: if the task doing it is cancelled while it waits (its TaskGroup
shutting down), the suppress swallows *that* cancellation too, and the caller runs on as if
nothing happened. In a controller this turned a hub's shutdown into a hang: the reconcile went
on, failed to start a task in the closing group, and its worker then waited for work forever.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(task: asyncio.Task[Any] | asyncio.Future[Any]) -> None:
    """Cancel `task` and wait until it has ended. Its result and errors are dropped; a
    cancellation of the calling task that arrives while it waits is raised again, never
    swallowed. One that arrived before (the caller is cleaning up in a `finally` of its own
    cancellation) is left to the caller, so the rest of its clean-up still runs."""
    current = asyncio.current_task()
    cancellations_before = current.cancelling() if current is not None else 0
    task.cancel()
    try:
        with contextlib.suppress(Exception):
            await task
    except asyncio.CancelledError:
        if current is not None and current.cancelling() > cancellations_before:
            raise
