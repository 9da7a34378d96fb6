"""The bridge agent's objects in a cluster, and the ways to reach its pod.

`ensure_agent(client, session=...)` makes, in the namespace tether owns (`tether-bridge`, with
Pod Security `restricted` enforced), a ServiceAccount and a Deployment running the tether image
as `tether bridge agent`, non-root, no privileges, with a readiness probe on the agent's health
endpoint, and waits for a Ready pod. Everything carries `app.kubernetes.io/managed-by: tether`
and `tether.io/bridge-session: SESSION`; `remove_agent` deletes what that session made, and the
namespace too once no session is left in it (only if tether made it). A deleted agent pod is
recreated by its Deployment, and a `MuxChannel` whose connector looks the pod up again recovers.

Connectors for `MuxChannel`:
- `portforward_connector`: a port-forward through the API server (or the hub's cluster proxy,
  when `client` was built from `tether kubeconfig NAME`) to the current Ready agent pod;
- `pod_ip_connector`: straight to the pod's IP, where this machine can reach it (rootless local
  clusters put pod IPs on loopback); also the benchmarks' "direct" path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tether.bridge.agent import DEFAULT_CONTROL_PORT, DEFAULT_MUX_PORT
from tether.bridge.channel import ByteStream, ChannelLost, stream_from_asyncio
from tether.bridge.muxchannel import Connector, MuxChannel
from tether.kube import Forbidden, KubeClient, KubeError, NotFound
from tether.kube.portforward import PortForward
from tether.version import IMAGE

log = logging.getLogger(__name__)

NAMESPACE = "tether-bridge"
MANAGED_BY = "app.kubernetes.io/managed-by"
SESSION_LABEL = "tether.io/bridge-session"
COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT = "bridge-agent"
FIELD_MANAGER = "tether-bridge"
READY_TIMEOUT_S = 120.0
_SESSION = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")


class AgentError(Exception):
    """The agent could not be created, or did not become Ready."""


@dataclass(frozen=True)
class AgentRef:
    """Where a session's agent lives."""

    namespace: str
    name: str
    session: str
    port: int = DEFAULT_MUX_PORT
    control_port: int = DEFAULT_CONTROL_PORT

    @property
    def selector(self) -> str:
        return f"{MANAGED_BY}=tether,{SESSION_LABEL}={self.session},{COMPONENT_LABEL}={COMPONENT}"


def new_session() -> str:
    return os.urandom(4).hex()


def agent_name(session: str) -> str:
    return f"bridge-agent-{session}"


def _labels(session: str) -> dict[str, str]:
    return {MANAGED_BY: "tether", SESSION_LABEL: session, COMPONENT_LABEL: COMPONENT}


def agent_objects(session: str, *, namespace: str = NAMESPACE, image: str = IMAGE,
                  port: int = DEFAULT_MUX_PORT, control_port: int = DEFAULT_CONTROL_PORT,
                  service_account: str | None = None, cluster_dns: str = "") -> list[dict[str, Any]]:
    """The ServiceAccount and Deployment of one session's agent (pure: for tests and --dry-run)."""
    if not _SESSION.match(session):
        raise AgentError(f"session name {session!r} must be lower-case letters, digits and '-', at most 40")
    name = agent_name(session)
    labels = _labels(session)
    account = service_account or name
    objects: list[dict[str, Any]] = []
    if service_account is None:
        objects.append({"apiVersion": "v1", "kind": "ServiceAccount",
                        "metadata": {"name": account, "namespace": namespace, "labels": labels}})
    container = {
        "name": "agent",
        "image": image,
        "args": ["bridge", "agent", "--listen", f":{port}", "--control", f":{control_port}",
                 *(["--cluster-dns", cluster_dns] if cluster_dns else [])],
        "ports": [{"name": "mux", "containerPort": port, "protocol": "TCP"},
                  {"name": "control", "containerPort": control_port, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": control_port},
                           "periodSeconds": 2, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": control_port},
                          "periodSeconds": 10, "failureThreshold": 6},
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
                            "seccompProfile": {"type": "RuntimeDefault"}},
    }
    objects.append({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": account,
                    # the agent never calls the API: no token in a pod that dials for its clients
                    # (a caller's own `service_account` is mounted, for what it was made for)
                    "automountServiceAccountToken": service_account is not None,
                    "terminationGracePeriodSeconds": 10,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container],
                },
            },
        },
    })
    return objects


def namespace_object(namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace, "labels": {
                MANAGED_BY: "tether",
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/warn": "restricted"}}}


def _ready(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def ready_pod(client: KubeClient, agent: AgentRef) -> dict[str, Any] | None:
    pods = await client.list_objects("v1", "Pod", agent.namespace, agent.selector)
    ready = [dict(p) for p in pods if _ready(p)]
    ready.sort(key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp", "")), reverse=True)
    return ready[0] if ready else None


async def wait_ready(client: KubeClient, agent: AgentRef, *, timeout_s: float = READY_TIMEOUT_S) -> dict[str, Any]:
    """The agent's Ready pod, waiting for one (`AgentError` past the deadline)."""
    last = "no pod yet"
    try:
        async with asyncio.timeout(timeout_s):
            delay = 0.2
            while True:
                pod = await ready_pod(client, agent)
                if pod is not None:
                    return pod
                pods = await client.list_objects("v1", "Pod", agent.namespace, agent.selector)
                if pods:
                    statuses = (pods[0].get("status") or {}).get("containerStatuses") or []
                    waiting = [s.get("state", {}).get("waiting", {}).get("reason") for s in statuses]
                    last = f"pod {pods[0]['metadata']['name']} is {(pods[0].get('status') or {}).get('phase')}" + \
                        (f" ({', '.join(w for w in waiting if w)})" if any(waiting) else "")
                await asyncio.sleep(delay)
                delay = min(delay * 1.5, 2.0)
    except TimeoutError:
        raise AgentError(f"the bridge agent in {agent.namespace} was not Ready within {timeout_s:g}s: {last}") from None


async def _namespace_not_terminating(client: KubeClient, namespace: str, timeout_s: float) -> None:
    """Wait while `namespace` is being deleted (a `tether quit` just before): nothing can be made in it."""

    async def terminating() -> bool:
        found = await client.get_or_none("v1", "Namespace", namespace)
        return bool(found and (found.get("metadata") or {}).get("deletionTimestamp"))

    try:
        async with asyncio.timeout(timeout_s):
            while await terminating():  # noqa: ASYNC110 - polling the API
                await asyncio.sleep(0.5)
    except TimeoutError:
        raise AgentError(f"namespace {namespace} is still being deleted after {timeout_s:g}s") from None


async def ensure_agent(client: KubeClient, *, session: str | None = None, namespace: str = NAMESPACE,
                       image: str = IMAGE, service_account: str | None = None,
                       timeout_s: float = READY_TIMEOUT_S, wait: bool = True) -> AgentRef:
    """Create (or keep) the session's agent and wait for it to be Ready."""
    session = session or new_session()
    try:
        await _namespace_not_terminating(client, namespace, timeout_s)
        if await client.get_or_none("v1", "Namespace", namespace) is None:
            with contextlib.suppress(KubeError):  # made by another session meanwhile: fine
                await client.create(namespace_object(namespace))
        dns = None
        with contextlib.suppress(Forbidden):  # only a fallback: the pod's resolver is the cluster's
            dns = await client.get_or_none("v1", "Service", "kube-dns", "kube-system")
        cluster_dns = str(((dns or {}).get("spec") or {}).get("clusterIP") or "")
        for obj in agent_objects(session, namespace=namespace, image=image, service_account=service_account,
                                 cluster_dns=cluster_dns if cluster_dns not in ("", "None") else ""):
            await client.apply(obj, field_manager=FIELD_MANAGER)
    except KubeError as exc:
        raise AgentError(f"cannot create the bridge agent in {namespace}: {exc}") from exc
    agent = AgentRef(namespace, agent_name(session), session)
    if wait:
        await wait_ready(client, agent, timeout_s=timeout_s)
    return agent


async def remove_agent(client: KubeClient, agent: AgentRef, *, timeout_s: float = 60.0) -> None:
    """Delete the session's Deployment, its pods' owner chain and ServiceAccount; and the namespace
    once no other session has an agent there (only a namespace tether labelled as its own)."""
    for api_version, kind, name in (("apps/v1", "Deployment", agent.name), ("v1", "ServiceAccount", agent.name)):
        with contextlib.suppress(NotFound):
            await client.delete(api_version, kind, name, agent.namespace, propagation_policy="Foreground")
    # The pods go with the Deployment; wait so a caller that checks finds nothing left.
    async def gone() -> bool:
        return not (await client.list_objects("v1", "Pod", agent.namespace, agent.selector)
                    or await client.get_or_none("apps/v1", "Deployment", agent.name, agent.namespace))

    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            while not await gone():  # noqa: ASYNC110 - polling the API
                await asyncio.sleep(0.3)
    others = await client.list_objects("apps/v1", "Deployment", agent.namespace, f"{MANAGED_BY}=tether")
    namespace = await client.get_or_none("v1", "Namespace", agent.namespace)
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    if namespace is not None and not others and labels.get(MANAGED_BY) == "tether":
        with contextlib.suppress(NotFound):
            await client.delete("v1", "Namespace", agent.namespace)

        async def namespace_gone() -> bool:
            return await client.get_or_none("v1", "Namespace", agent.namespace) is None

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while not await namespace_gone():  # noqa: ASYNC110 - polling the API
                    await asyncio.sleep(0.3)


def portforward_connector(client: KubeClient, agent: AgentRef, *, ready_timeout_s: float = 30.0) -> Connector:
    """One port-forward session per connection, to whichever agent pod is Ready now."""

    async def connect() -> ByteStream:
        try:
            pod = await wait_ready(client, agent, timeout_s=ready_timeout_s)
            forward = await PortForward.open(client, agent.namespace, pod["metadata"]["name"])
        except (KubeError, AgentError) as exc:
            raise ChannelLost(f"cannot reach the bridge agent: {exc}") from exc
        try:
            stream = await forward.connect(agent.port)
        except BaseException:
            await forward.aclose()
            raise
        return _ForwardedTransport(forward, stream)

    return connect


class _ForwardedTransport:
    """A forwarded stream that also ends its port-forward session when closed."""

    def __init__(self, forward: PortForward, stream: ByteStream) -> None:
        self._forward = forward
        self._stream = stream

    async def receive(self, max_bytes: int = 64 * 1024) -> bytes:
        return await self._stream.receive(max_bytes)

    async def send(self, data: bytes) -> None:
        await self._stream.send(data)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self._stream.aclose()
        await self._forward.aclose()


def pod_ip_connector(client: KubeClient, agent: AgentRef, *, ready_timeout_s: float = 30.0) -> Connector:
    """Straight to the Ready agent pod's IP (where this machine routes pod IPs)."""

    async def connect() -> ByteStream:
        try:
            pod = await wait_ready(client, agent, timeout_s=ready_timeout_s)
        except (KubeError, AgentError) as exc:
            raise ChannelLost(f"cannot reach the bridge agent: {exc}") from exc
        ip = str((pod.get("status") or {}).get("podIP") or "")
        if not ip:
            raise ChannelLost(f"agent pod {pod['metadata']['name']} has no IP yet")
        try:
            async with asyncio.timeout(10.0):
                reader, writer = await asyncio.open_connection(ip, agent.port)
        except (OSError, TimeoutError) as exc:
            raise ChannelLost(f"cannot reach the bridge agent at {ip}:{agent.port}: {exc or 'timed out'}") from None
        with contextlib.suppress(OSError):
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return stream_from_asyncio(reader, writer)

    return connect


@dataclass
class AgentChannel:
    """A session's agent and the channel to it: what `tether connect` holds per cluster."""

    client: KubeClient
    agent: AgentRef
    channel: MuxChannel

    async def aclose(self, *, remove: bool = True) -> None:
        """Close the channel; with `remove`, delete the agent's objects too (`tether quit`)."""
        await self.channel.aclose()
        if remove:
            await remove_agent(self.client, self.agent)


async def open_agent_channel(client: KubeClient, cluster: str, *, session: str | None = None,
                             namespace: str = NAMESPACE, image: str = IMAGE, via_pod_ip: bool = False,
                             timeout_s: float = READY_TIMEOUT_S) -> AgentChannel:
    """`ensure_agent`, then a connected `MuxChannel` to it through port-forward (or its pod IP)."""
    agent = await ensure_agent(client, session=session, namespace=namespace, image=image, timeout_s=timeout_s)
    connector = pod_ip_connector(client, agent) if via_pod_ip else portforward_connector(client, agent)
    channel = MuxChannel(cluster, connector)
    try:
        await channel.start()
    except BaseException:
        await channel.aclose()
        raise
    return AgentChannel(client, agent, channel)
