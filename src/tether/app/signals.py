"""SIGTERM/SIGINT for long-running processes: a graceful stop, with a hard bound behind it.

The handlers are plain `signal.signal` handlers, not `loop.add_signal_handler`: those depend on
the process-wide wakeup fd, which anything that later installs or removes a loop signal handler
replaces, and a hub that never hears its SIGTERM hangs its supervisor (seen in tests). A Python
handler always runs in the main thread; it wakes the loop with `call_soon_threadsafe`.

After the first signal a daemon watchdog thread ends the process with `os._exit` once
`hard_exit_after_s` has passed, so a shutdown step that never returns cannot hold the process
(including what follows the block: `asyncio.run` waits for every task it cancels at exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
HARD_EXIT_CODE = 3
HARD_EXIT_MARGIN_S = 5.0  # past the graceful bound, before the watchdog ends the process
WATCHDOG_POLL_S = 1.0


@contextlib.contextmanager
def stop_on_signals(stop: asyncio.Event, *, hard_exit_after_s: float) -> Iterator[None]:
    """Set `stop` on SIGTERM/SIGINT while the block runs; previous handlers come back after."""
    loop = asyncio.get_running_loop()
    signalled = threading.Event()
    finished = threading.Event()  # the block ended without a signal: the watchdog can go

    def watchdog() -> None:
        while not signalled.wait(WATCHDOG_POLL_S):
            if finished.is_set():
                return
        time.sleep(hard_exit_after_s)
        log.error("still running %.1fs after the stop signal; exiting", hard_exit_after_s)
        logging.shutdown()
        sys.stderr.flush()
        os._exit(HARD_EXIT_CODE)

    # started now, not in the handler: starting a thread takes a lock the interrupted main
    # thread may hold
    threading.Thread(target=watchdog, name="stop-watchdog", daemon=True).start()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if signalled.is_set():
            return
        signalled.set()
        log.info("%s received: stopping", signal.Signals(signum).name)
        loop.call_soon_threadsafe(stop.set)

    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        finished.set()
        for sig, handler in previous.items():
            if handler is not None:  # None: installed outside Python, nothing to put back
                signal.signal(sig, handler)


async def run_until_signal(main: Coroutine[Any, Any, None], *, shutdown_s: float,
                           hard_exit_after_s: float | None = None) -> None:
    """Run `main` until it ends or SIGTERM/SIGINT arrives; then cancel it and give it
    `shutdown_s` to finish. Its exception, if it failed, is raised here."""
    stop = asyncio.Event()
    with stop_on_signals(stop, hard_exit_after_s=hard_exit_after_s or shutdown_s + HARD_EXIT_MARGIN_S):
        runner = asyncio.create_task(main)
        stopper = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            runner.cancel()
            try:
                async with asyncio.timeout(shutdown_s):
                    await asyncio.wait({runner})
            except TimeoutError:
                log.warning("did not stop within %.1fs", shutdown_s)
    if runner.done() and not runner.cancelled() and runner.exception() is not None:
        raise runner.exception()  # type: ignore[misc]
