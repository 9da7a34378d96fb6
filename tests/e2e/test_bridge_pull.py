"""The bridge transport to a pull member, through the hub's cluster proxy and the tunnel.

The fixture is test_cluster_proxy's `hub` (a host and member1, `tether proxy serve`); this module
registers member1 a second time as the Pull cluster `pulled`, which the proxy reaches only through
a `tether tunnel server`/`agent` pair, and issues `tether kubeconfig pulled`. A `KubeClient` from
that kubeconfig creates the bridge agent and port-forwards to it through the proxy; a
`MuxChannel` over that reaches an echo pod by its pod IP.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_util import poll
from test_cluster_proxy import Hub, Proc, _dials, _health_ok, echo, free_port, hub, ok, tether

from tether.bridge.agentpods import ensure_agent, portforward_connector, remove_agent
from tether.bridge.muxchannel import MuxChannel
from tether.kube import KubeClient

pytestmark = pytest.mark.e2e

__all__ = ["echo", "hub"]  # fixtures shared with test_cluster_proxy
TIMEOUT_S = 90.0


@pytest.fixture(scope="module")
def pulled(hub: Hub) -> Iterator[Path]:
    """A kubeconfig for the Pull cluster `pulled` (member1 again) through the proxy and the tunnel."""
    agent_port, admin, agent_health, agent_admin = (free_port() for _ in range(4))
    server = Proc([sys.executable, "-m", "tether", "tunnel", "server", "--allow-insecure",
                   "--server-bind-address", "127.0.0.1", "--server-port", str(hub.tunnel_frontend),
                   "--agent-bind-address", "127.0.0.1", "--agent-port", str(agent_port),
                   "--health-bind-address", "127.0.0.1", "--health-port", str(hub.tunnel_health),
                   "--admin-port", str(admin)])
    endpoint = hub.host("get", "cluster.cluster.tether.io", "member1",
                        "-o", "jsonpath={.spec.apiEndpoint}").stdout.strip()
    with server:
        poll(lambda: _health_ok(hub.tunnel_health), timeout=20, what="tunnel server health")
        cluster = {"apiVersion": "cluster.tether.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "pulled"},
                   "spec": {"syncMode": "Pull", "apiEndpoint": endpoint,
                            "secretRef": {"namespace": "tether-system", "name": "member1"}}}
        hub.host("apply", "-f", "-", input=json.dumps(cluster))
        config = hub.data_dir / "bridge-pulled.yaml"
        ok(tether("kubeconfig", "pulled", "--host-kubeconfig", str(hub.kubeconfig),
                  "--host-context", "host", "--out", str(config)))
        agent = Proc([sys.executable, "-m", "tether", "tunnel", "agent", "--allow-insecure",
                      "--proxy-server-host", "127.0.0.1", "--proxy-server-port", str(agent_port),
                      "--health-server-host", "127.0.0.1", "--health-server-port", str(agent_health),
                      "--admin-server-port", str(agent_admin), "--agent-identifiers", "host=127.0.0.1",
                      "--drain-timeout", "0"])  # draining: tests/security/test_tunnel_security.py
        with agent:
            poll(lambda: hub.kubectl("get", "--raw", "/version", config=config, check=False).returncode == 0,
                 timeout=30, interval=0.5, what="the pull member through the tunnel")
            yield config
    hub.host("delete", "cluster.cluster.tether.io", "pulled", "--ignore-not-found")


async def test_mux_channel_through_the_hub_proxy_to_a_pull_member(hub: Hub, echo: str, pulled: Path) -> None:
    pod_ip = hub.kubectl("get", "pod", echo, "-o", "jsonpath={.status.podIP}").stdout.strip()
    async with KubeClient.from_kubeconfig(pulled) as client:
        assert "/clusters/pulled/proxy" in client.server
        agent = await ensure_agent(client, session="pulled", timeout_s=TIMEOUT_S)
        try:
            async with MuxChannel("pulled", portforward_connector(client, agent)) as channel:
                stream = await channel.open_tcp(pod_ip, 8080)
                await stream.send(b"GET /through-the-hub HTTP/1.1\r\nHost: echo\r\nConnection: close\r\n\r\n")
                received = b""
                async with asyncio.timeout(TIMEOUT_S):
                    while chunk := await stream.receive():
                        received += chunk
                await stream.aclose()
            assert received.startswith(b"HTTP/1.") and b'"pod": "echo"' in received, received[:300]
            assert b'"path": "/through-the-hub"' in received
            # a Pull cluster is reachable only through the tunnel (the upgrade may reuse a connection
            # the proxy already had through it, so the count need not grow)
            assert _dials(hub.tunnel_health) >= 1
        finally:
            await remove_agent(client, agent)
