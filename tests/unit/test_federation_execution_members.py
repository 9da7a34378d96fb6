"""The executor's member clients when credentials rotate under concurrent workers.

No API server is involved: the host only serves the credentials Secret (a stand-in object with
`get`), and no member is contacted (clients are created, never used).
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any, cast

from tether.federation.execution import WorkExecutor, _Member
from tether.federation.metrics import HubMetrics
from tether.federation.propagation import HubInformers
from tether.kube import ClusterCredentials, KubeClient

CLUSTER = {"metadata": {"name": "member"},
           "spec": {"apiEndpoint": "https://127.0.0.1:9", "secretRef": {"name": "member"}}}


class SecretHost:
    """Answers GET of the credentials Secret, at version `rv`, after a scheduling point."""

    def __init__(self) -> None:
        self.rv = "1"

    async def get(self, api_version: str, kind: str, name: str, namespace: str | None = None,
                  **_: Any) -> dict[str, Any]:
        await asyncio.sleep(0)
        token = base64.b64encode(f"token-{self.rv}".encode()).decode()
        return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": self.rv},
                "data": {"token": token}}


async def slow_to_stop() -> None:
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        await asyncio.sleep(0.05)  # an informer closing its watch takes a moment
        raise


async def test_rotation_replaces_the_client_once_for_all_concurrent_workers() -> None:
    host = SecretHost()
    executor = WorkExecutor(host=cast(KubeClient, host), shared=HubInformers(cast(KubeClient, host)),
                            metrics=HubMetrics())
    executor.secrets = None  # read the Secret from the host each time
    first = await executor._member(CLUSTER)
    first.informers[("v1", "ConfigMap")] = (cast(Any, None), asyncio.create_task(slow_to_stop()))
    await asyncio.sleep(0)

    host.rv = "2"  # rotated
    members = await asyncio.gather(*(executor._member(CLUSTER) for _ in range(8)))

    assert len({id(m) for m in members}) == 1
    member: _Member = members[0]
    assert member is not first
    assert member.fingerprint == ("https://127.0.0.1:9", "2")
    assert executor.pool.get("member") is member.client
    assert not member.client.closed
    assert first.client.closed
    assert member.client.credentials == ClusterCredentials.from_token(
        server="https://127.0.0.1:9", token="token-2", ca_bundle=None, name="member")
    await executor.pool.aclose()
