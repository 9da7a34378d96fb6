"""Many clusters at once: one `KubeClient` per cluster name, created and closed by the pool.

    async with ClientPool() as pool:
        await pool.set("member1", ClusterCredentials.from_token(server=..., token=..., ca_bundle=...))
        client = pool.get("member1")

`set` is idempotent for unchanged credentials and replaces (closing the old client) when they
change, e.g. after a token rotation. Stop whatever streams on a client (cancel its informers)
before removing or replacing it: a closed client fails every later call.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Callable
from types import TracebackType

from tether.kube.client import REQUEST_TIMEOUT_S, KubeClient, RetryPolicy
from tether.kube.config import ClusterCredentials
from tether.kube.transport import ConnectOptions


class ClientPool:
    def __init__(
        self,
        *,
        connect_for: Callable[[str], ConnectOptions] | None = None,
        retry: RetryPolicy | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        """`connect_for(name)` picks connection options per cluster (for instance a tunnel
        dialer for clusters that are reached through one); the default connects directly."""
        self._connect_for = connect_for
        self._retry = retry
        self._timeout_s = timeout_s
        self._clients: dict[str, KubeClient] = {}

    async def __aenter__(self) -> ClientPool:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def set(self, name: str, credentials: ClusterCredentials, *,
                  connect: ConnectOptions | None = None) -> KubeClient:
        options = connect or (self._connect_for(name) if self._connect_for else ConnectOptions())
        existing = self._clients.get(name)
        if existing is not None and existing.credentials == credentials and existing.connect == options:
            return existing
        client = KubeClient(credentials, connect=options, retry=self._retry, timeout_s=self._timeout_s)
        self._clients[name] = client
        if existing is not None:
            await existing.close()
        return client

    def get(self, name: str) -> KubeClient:
        try:
            return self._clients[name]
        except KeyError:
            raise KeyError(f"no client for cluster {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._clients

    def __len__(self) -> int:
        return len(self._clients)

    def names(self) -> builtins.list[str]:
        return sorted(self._clients)

    async def remove(self, name: str) -> None:
        client = self._clients.pop(name, None)
        if client is not None:
            await client.close()

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(client.close() for client in clients), return_exceptions=True)
