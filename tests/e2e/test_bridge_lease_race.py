"""The router ends a session whose Lease it saw expired only if the client has not renewed it
since (a client returning just at expiry keeps its intercept)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from tether.bridge import intercepts, routing
from tether.kube import KubeClient
from tether.kube.config import load_kubeconfig

PLAN = intercepts.Plan("", "stats-api", "late-client", False, "dev", routing.token_digest("t"),
                       {"app": "stats-api"}, ({"name": "http", "port": 80},), {}, 30)


async def _race(kubeconfig: Path, namespace: str) -> tuple[bool, bool, bool]:
    plan = dataclasses.replace(PLAN, namespace=namespace)
    async with KubeClient(load_kubeconfig(kubeconfig, "cluster1")) as client:
        session = await client.create(intercepts.session_object(plan))
        await client.create(intercepts.lease_object(plan, intercepts.owner_ref(session), "dev"))
        name = routing.session_name(plan.route)
        seen = await client.get("coordination.k8s.io/v1", "Lease", name, namespace)
        await intercepts.renew(client, namespace, plan.route)  # the client is back
        kept = not await intercepts.end_expired(client, namespace, plan.route, seen)
        still = await client.get_or_none("v1", "ConfigMap", name, namespace) is not None
        current = await client.get("coordination.k8s.io/v1", "Lease", name, namespace)
        ended = await intercepts.end_expired(client, namespace, plan.route, current)
        return kept, still, ended and await client.get_or_none("v1", "ConfigMap", name, namespace) is None


def test_a_lease_renewed_after_it_was_seen_expired_keeps_the_session(clusters: Any, ns: str) -> None:
    kept, still_there, ended_later = asyncio.run(_race(clusters.kubeconfig, ns))
    assert kept and still_there
    assert ended_later
