"""Small helpers around `tether.kube.Informer` shared by the connect controllers."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tether.kube import Informer

SYNC_WAIT_S = 3600.0


async def wait_listed(informers: Iterable[Informer]) -> None:
    """Return once every informer has filled its cache, however long that takes."""
    for informer in informers:
        while True:
            try:
                await informer.wait_synced(SYNC_WAIT_S)
                break
            except TimeoutError:
                continue


def size_of(informer: Informer) -> Callable[[], float]:
    """A gauge reader: how many objects the informer holds."""
    return lambda: float(len(informer.keys()))
