"""The bridge transport on a local cluster: the agent made by `ensure_agent`, reached by `MuxChannel`
through the API server's port-forward (kubectl's WebSocket-tunnelled SPDY) and straight to its pod IP.

- the agent's objects: namespace with Pod Security `restricted`, ServiceAccount, Deployment running
  the tether image non-root with a readiness probe, labelled with the session;
- TCP to a Service's ClusterIP and to a pod IP (an echo server answers with its pod's name);
  UDP to kube-dns (it answers `kubernetes.default`'s ClusterIP);
- a reverse stream: a client serves a route; an in-cluster caller opens it on the agent's
  control port and talks to the developer's handler;
- the agent pod deleted: the stream in flight fails with `ChannelLost`, the Deployment brings a new
  pod, new opens and the reverse route work again without a new channel;
- the port-forward client itself: plain-SPDY fallback, `NotFound`, the error stream's message;
- `remove_agent` leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from e2e_util import manifest, poll, unique

from tether.bridge.agentpods import (
    MANAGED_BY,
    SESSION_LABEL,
    AgentRef,
    ensure_agent,
    open_agent_channel,
    pod_ip_connector,
    portforward_connector,
    ready_pod,
    remove_agent,
)
from tether.bridge.channel import ByteStream, ChannelLost, ReverseStream, stream_from_asyncio
from tether.bridge.muxchannel import MuxChannel
from tether.kube import KubeClient, NotFound
from tether.kube.portforward import PortForward, PortForwardError
from tether.net import dnswire

pytestmark = pytest.mark.e2e

TIMEOUT_S = 90.0


def _client(clusters: Any) -> KubeClient:
    return KubeClient.from_kubeconfig(Path(clusters.kubeconfig), clusters.names[0])


@pytest.fixture(scope="module")
def echo(clusters: Any) -> dict[str, str]:
    """A namespace with an echo Deployment and its Service; the pod's name and IP, the ClusterIP."""
    namespace = unique("bxport")
    labels = {"app": "echo"}
    clusters.kubectl("apply", "-f", "-", input=manifest(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "echo", "namespace": namespace},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {"containers": [
                      {"name": "echo", "image": "tether/echo", "ports": [{"containerPort": 8080}],
                       "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo", "namespace": namespace},
         "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]}},
    ))

    def ready() -> dict[str, Any] | None:
        for pod in clusters.kubectl_json("get", "pods", "-n", namespace, "-l", "app=echo")["items"]:
            conditions = (pod.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return dict(pod)
        return None

    pod = poll(ready, timeout=TIMEOUT_S, interval=0.5, what="the echo pod Ready")
    service = clusters.kubectl_json("get", "service", "echo", "-n", namespace)
    return {"namespace": namespace, "pod": pod["metadata"]["name"], "podIP": pod["status"]["podIP"],
            "clusterIP": service["spec"]["clusterIP"]}


@pytest.fixture(scope="module")
async def agent(clusters: Any) -> AsyncIterator[AgentRef]:
    async with _client(clusters) as client:
        made = await ensure_agent(client, session=unique("s").replace("_", "-")[:20].lower(), timeout_s=TIMEOUT_S)
        try:
            yield made
        finally:
            await remove_agent(client, made)


async def _http_get(stream: ByteStream, host: str = "echo") -> dict[str, Any]:
    await stream.send(f"GET /bridge HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    received = b""
    async with asyncio.timeout(TIMEOUT_S):
        while chunk := await stream.receive():
            received += chunk
    await stream.aclose()
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.") and b" 200 " in head.split(b"\r\n")[0], received[:200]
    answer: dict[str, Any] = json.loads(body)
    return answer


async def test_agent_objects_are_labelled_and_restricted(clusters: Any, agent: AgentRef) -> None:
    async with _client(clusters) as client:
        namespace = await client.get("v1", "Namespace", agent.namespace)
        assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
        deployment = await client.get("apps/v1", "Deployment", agent.name, agent.namespace)
        labels = deployment["metadata"]["labels"]
        assert (labels[MANAGED_BY], labels[SESSION_LABEL]) == ("tether", agent.session)
        spec = deployment["spec"]["template"]["spec"]
        container = spec["containers"][0]
        assert container["args"][:2] == ["bridge", "agent"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
        assert await client.get_or_none("v1", "ServiceAccount", agent.name, agent.namespace) is not None
        assert await ready_pod(client, agent) is not None


async def test_tcp_to_cluster_ip_and_pod_ip_through_portforward(clusters: Any, agent: AgentRef,
                                                               echo: dict[str, str]) -> None:
    async with _client(clusters) as client, MuxChannel("cluster1", portforward_connector(client, agent)) as channel:
        by_service = await _http_get(await channel.open_tcp(echo["clusterIP"], 80))
        assert by_service["pod"] == echo["pod"]
        by_pod = await _http_get(await channel.open_tcp(echo["podIP"], 8080))
        assert by_pod["pod"] == echo["pod"]
        by_name = await _http_get(await channel.open_tcp(f"echo.{echo['namespace']}.svc.cluster.local", 80))
        assert by_name["path"] == "/bridge"
        # many at once over the one connection
        async def one() -> dict[str, Any]:
            return await _http_get(await channel.open_tcp(echo["clusterIP"], 80))

        answers = await asyncio.gather(*(one() for _ in range(10)))
        assert {a["pod"] for a in answers} == {echo["pod"]}


async def test_udp_to_kube_dns(clusters: Any, agent: AgentRef) -> None:
    async with _client(clusters) as client, MuxChannel("cluster1", portforward_connector(client, agent)) as channel:
        kubernetes = await client.get("v1", "Service", "kubernetes", "default")
        dns = await client.get("v1", "Service", "kube-dns", "kube-system")
        datagrams = await channel.open_udp(dns["spec"]["clusterIP"], 53)
        try:
            reply = b""
            for _ in range(5):  # UDP: ask again if a datagram is lost
                await datagrams.send(dnswire.make_query(0x4242, "kubernetes.default.svc.cluster.local",
                                                        dnswire.TYPE_A))
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(5):
                        reply = await datagrams.receive()
                        break
            answer = dnswire.parse_message(reply)
            assert answer.id == 0x4242
            assert [r.rdata for r in answer.answers] == [dnswire.A(kubernetes["spec"]["clusterIP"])]
        finally:
            await datagrams.aclose()


async def test_reverse_stream_round_trip(clusters: Any, agent: AgentRef) -> None:
    seen: list[ReverseStream] = []

    async def developer(reverse: ReverseStream) -> None:
        seen.append(reverse)
        request = await reverse.stream.receive()
        await reverse.stream.send(b"from the developer: " + request)
        await reverse.stream.send_eof()

    async with _client(clusters) as client, MuxChannel("cluster1", portforward_connector(client, agent)) as channel:
        await channel.serve_reverse("naison-e4be", 3001, developer)
        pod = await ready_pod(client, agent)
        assert pod is not None
        # an in-cluster router: the agent's control port at its pod IP (on loopback here)
        reader, writer = await asyncio.open_connection(pod["status"]["podIP"], agent.control_port)
        writer.write(b"POST /v1/reverse/naison-e4be?port=3001&peer=10.9.8.7:1234 HTTP/1.1\r\nHost: agent\r\n"
                     b"Connection: Upgrade\r\nUpgrade: tether-reverse\r\nContent-Length: 0\r\n\r\n")
        async with asyncio.timeout(TIMEOUT_S):
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 101"), head
            stream = stream_from_asyncio(reader, writer)
            await stream.send(b"hello")
            received = b""
            while chunk := await stream.receive():
                received += chunk
        await stream.aclose()
        assert received == b"from the developer: hello"
        assert (seen[0].route, seen[0].port, seen[0].peer) == ("naison-e4be", 3001, "10.9.8.7:1234")


async def test_agent_pod_deleted_channel_recovers(clusters: Any, agent: AgentRef, echo: dict[str, str]) -> None:
    async def developer(reverse: ReverseStream) -> None:
        await reverse.stream.send(b"still here")
        await reverse.stream.send_eof()

    async with _client(clusters) as client, \
            MuxChannel("cluster1", portforward_connector(client, agent, ready_timeout_s=TIMEOUT_S),
                       reconnect_deadline_s=TIMEOUT_S) as channel:
        await channel.serve_reverse("recover", 3002, developer)
        in_flight = await channel.open_tcp(echo["podIP"], 8080)
        old = await ready_pod(client, agent)
        assert old is not None
        await client.delete("v1", "Pod", old["metadata"]["name"], agent.namespace)
        with pytest.raises(ChannelLost):
            async with asyncio.timeout(TIMEOUT_S):
                while True:  # the stream fails once the agent is gone
                    await in_flight.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                    await in_flight.receive()
        # a new open waits for the replacement pod
        answer = await _http_get(await channel.open_tcp(echo["clusterIP"], 80))
        assert answer["pod"] == echo["pod"]
        new = await ready_pod(client, agent)
        assert new is not None and new["metadata"]["name"] != old["metadata"]["name"]
        assert channel.connects >= 2
        # and the reverse route came back with the connection
        reader, writer = await asyncio.open_connection(new["status"]["podIP"], agent.control_port)
        writer.write(b"POST /v1/reverse/recover?port=3002 HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\n"
                     b"Upgrade: tether-reverse\r\nContent-Length: 0\r\n\r\n")
        async with asyncio.timeout(TIMEOUT_S):
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 101"), head
            assert await reader.read() == b"still here"
        writer.close()


async def test_pod_ip_connector(clusters: Any, agent: AgentRef, echo: dict[str, str]) -> None:
    async with _client(clusters) as client, MuxChannel("cluster1", pod_ip_connector(client, agent)) as channel:
        assert (await _http_get(await channel.open_tcp(echo["clusterIP"], 80)))["pod"] == echo["pod"]


async def test_portforward_client_forms_and_errors(clusters: Any, echo: dict[str, str]) -> None:
    async with _client(clusters) as client:
        for websocket_first in (True, False):
            async with await PortForward.open(client, echo["namespace"], echo["pod"],
                                              websocket_first=websocket_first) as forward:
                assert forward.transport == ("websocket" if websocket_first else "spdy")
                first, second = await forward.connect(8080), await forward.connect(8080)
                assert (await _http_get(first))["pod"] == echo["pod"]
                assert (await _http_get(second))["pod"] == echo["pod"]
                closed = await forward.connect(1)  # nothing listens: the kubelet says so on the error stream
                with pytest.raises(PortForwardError):
                    async with asyncio.timeout(TIMEOUT_S):
                        while await closed.receive():
                            pass
        with pytest.raises(NotFound):
            await PortForward.open(client, echo["namespace"], "no-such-pod")


async def test_open_agent_channel_then_remove_leaves_nothing(clusters: Any) -> None:
    async with _client(clusters) as client:
        bridge = await open_agent_channel(client, "cluster1", session="leaves-nothing", timeout_s=TIMEOUT_S)
        made = bridge.agent
        kubernetes = await client.get("v1", "Service", "kubernetes", "default")
        stream = await bridge.channel.open_tcp(kubernetes["spec"]["clusterIP"], 443)
        await stream.aclose()
        await bridge.aclose()  # closes the channel and removes the agent
        selector = f"{SESSION_LABEL}=leaves-nothing"
        for api_version, kind in (("apps/v1", "Deployment"), ("apps/v1", "ReplicaSet"), ("v1", "Pod"),
                                  ("v1", "ServiceAccount")):
            assert await client.list_objects(api_version, kind, None, selector) == [], kind
        with contextlib.suppress(NotFound):
            remaining = await client.get("apps/v1", "Deployment", made.name, made.namespace)
            raise AssertionError(f"left behind: {remaining['metadata']['name']}")


async def test_agent_in_a_namespace_being_deleted_waits_for_it(clusters: Any) -> None:
    """`tether quit` then `tether connect` at once: the new agent waits for the old namespace to go."""
    namespace = unique("tb").lower()
    async with _client(clusters) as client:
        first = await ensure_agent(client, session="first", namespace=namespace, timeout_s=TIMEOUT_S, wait=False)
        await client.delete("v1", "Namespace", namespace)  # not waiting for it to go
        second = await ensure_agent(client, session="second", namespace=namespace, timeout_s=TIMEOUT_S)
        assert await ready_pod(client, second) is not None
        assert await client.get_or_none("apps/v1", "Deployment", first.name, namespace) is None
        await remove_agent(client, second)
        assert await client.get_or_none("v1", "Namespace", namespace) is None  # the last session took it along
