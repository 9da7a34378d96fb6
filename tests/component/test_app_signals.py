"""SIGTERM handling of long-running processes (`tether.app.signals`), with real signals sent to
real child processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

CHILD = textwrap.dedent("""
    import asyncio, sys
    from tether.app.signals import run_until_signal

    async def polite():
        await asyncio.sleep(3600)

    async def stubborn():  # swallows every cancellation: only the watchdog can end it
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                pass

    async def failing():
        raise RuntimeError("boom")

    async def main():
        await run_until_signal({kind}(), shutdown_s=0.5, hard_exit_after_s={hard})
        print("returned", flush=True)

    # another loop signal handler coming and going must not take SIGTERM away from us
    async def unrelated():
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR2, lambda: None)
        loop.remove_signal_handler(signal.SIGUSR2)

    import signal
    async def both():
        await unrelated()
        print("ready", flush=True)
        await main()

    try:
        asyncio.run(both())
    except RuntimeError as exc:
        print("raised", exc, flush=True)
        sys.exit(7)
""")


STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _reap() -> Iterator[None]:
    """No child outlives its test, whatever the test's outcome."""
    yield
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)


def start(kind: str, hard: float = 2.0, *, ready: bool = True) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD.format(kind=kind, hard=hard)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    STARTED.append(proc)
    assert proc.stdout is not None
    if ready:
        assert proc.stdout.readline().strip() == "ready"
    return proc


def test_sigterm_stops_a_polite_main_gracefully() -> None:
    proc = start("polite")
    time.sleep(0.2)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "returned" in out
    assert time.monotonic() - sent < 5


def test_a_main_that_ignores_cancellation_is_ended_by_the_watchdog() -> None:
    proc = start("stubborn", hard=1.5)
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 3, (out, err)
    assert "did not stop within 0.5s" in err
    assert "after the stop signal; exiting" in err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_either_signal_works(sig: signal.Signals) -> None:
    proc = start("polite")
    time.sleep(0.2)
    proc.send_signal(sig)
    proc.communicate(timeout=10)
    assert proc.returncode == 0


def test_a_failing_main_raises_without_a_signal() -> None:
    proc = start("failing", ready=False)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 7, err
    assert "raised boom" in out
