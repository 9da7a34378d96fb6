"""`tether demo`, Connect step: a Service of one member mirrored into the other by the hub.

A `hello` Service (2 echo-server pods) runs in member `cluster`, labelled for mirroring as
Semaphore users label theirs; a `MirrorPolicy` on the hub makes every member mirror every other,
so `cluster1` gets `cluster-connect-demo-73736d-hello` in `tether-mirrors`, whose endpoints are
the pod addresses in `cluster`. The step then asks `cluster1`'s own DNS server (its `kube-dns`
Service) for the mirror's name, as a pod of `cluster1` would, asks the address it gets over HTTP
from this machine, and shows which pod of the other cluster answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tether.connect.names import mirror_name
from tether.kube import KubeClient, NotFound
from tether.net import dnsclient
from tether.net import dnswire as wire
from tether.objects import Obj

SOURCE, TARGET = "cluster", "cluster1"
NAMESPACE = "connect-demo"
SERVICE = "hello"
MIRROR_NAMESPACE = "tether-mirrors"
MIRROR = mirror_name(SOURCE, NAMESPACE, SERVICE)
REPLICAS = 2
PORT = 80
FIELD_MANAGER = "tether-demo"
ANSWER_TIMEOUT_S = 5.0
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MIRROR_DNS_NAME = f"{MIRROR}.{MIRROR_NAMESPACE}.svc.cluster.local"
DNS_SERVICE = ("kube-system", "kube-dns")

_LABELS = {"app": SERVICE}
SOURCE_OBJECTS: tuple[Obj, ...] = (
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
    {"apiVersion": "apps/v1", "kind": "Deployment",
     "metadata": {"name": SERVICE, "namespace": NAMESPACE, "labels": _LABELS},
     "spec": {"replicas": REPLICAS, "selector": {"matchLabels": _LABELS},
              "template": {"metadata": {"labels": _LABELS},
                           "spec": {"containers": [{
                               "name": "echo", "image": "tether/echo",
                               "ports": [{"name": "http", "containerPort": 8080}],
                               "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}]}}}},
    {"apiVersion": "v1", "kind": "Service",
     "metadata": {"name": SERVICE, "namespace": NAMESPACE,
                  "labels": {"mirror.semaphore.uw.io/mirror-service": "true"}},
     "spec": {"selector": _LABELS, "ports": [{"name": "http", "port": PORT, "targetPort": "http"}]}},
)
MIRROR_POLICY: Obj = {
    "apiVersion": "connect.tether.io/v1alpha1", "kind": "MirrorPolicy",
    "metadata": {"name": "demo"},
    "spec": {"mirrorNamespace": MIRROR_NAMESPACE},
}


@dataclass(frozen=True)
class ConnectResult:
    source_ips: tuple[str, ...] = ()  # ready pod addresses of `hello` in SOURCE
    cluster_ip: str = ""  # the mirror Service's, in TARGET
    endpoints: tuple[str, ...] = ()  # the mirror's EndpointSlice addresses, in TARGET
    answer: str = ""  # who answered through the mirror's ClusterIP: "pod (IP) on node"
    dns_server: str = ""  # TARGET's cluster DNS address
    resolved: tuple[str, ...] = ()  # what it answered for MIRROR_DNS_NAME

    @property
    def mirrored(self) -> bool:
        return bool(self.cluster_ip) and len(self.source_ips) == REPLICAS and (
            self.endpoints == self.source_ips)

    @property
    def ok(self) -> bool:
        return self.mirrored and bool(self.answer) and self.resolved == (self.cluster_ip,)


async def apply_connect(host: KubeClient, kubeconfig: Path) -> list[str]:
    applied = []
    async with KubeClient.from_kubeconfig(kubeconfig, SOURCE) as source:
        for obj in SOURCE_OBJECTS:
            out = await source.apply(obj, field_manager=FIELD_MANAGER)
            applied.append(f"{obj['kind'].lower()}/{out['metadata']['name']} (in {SOURCE})")
    await host.apply(MIRROR_POLICY, field_manager=FIELD_MANAGER)
    applied.append("mirrorpolicy/demo (on the hub)")
    return applied


def _ready_addresses(slices: list[Obj], service: str) -> tuple[str, ...]:
    found: set[str] = set()
    for piece in slices:
        labels: Mapping[str, str] = (piece.get("metadata") or {}).get("labels") or {}
        if labels.get(SERVICE_NAME_LABEL) != service:
            continue
        for endpoint in piece.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is not False:
                found.update(str(a) for a in endpoint.get("addresses") or [])
    return tuple(sorted(found))


async def connect_result(kubeconfig: Path) -> ConnectResult:
    async with KubeClient.from_kubeconfig(kubeconfig, SOURCE) as source:
        source_slices = await source.list_objects("discovery.k8s.io/v1", "EndpointSlice", NAMESPACE)
    async with KubeClient.from_kubeconfig(kubeconfig, TARGET) as target:
        try:
            mirror = await target.get("v1", "Service", MIRROR, MIRROR_NAMESPACE)
        except NotFound:
            return ConnectResult(_ready_addresses(source_slices, SERVICE))
        slices = await target.list_objects("discovery.k8s.io/v1", "EndpointSlice", MIRROR_NAMESPACE)
        dns = await target.get_or_none("v1", "Service", DNS_SERVICE[1], DNS_SERVICE[0])
    return ConnectResult(_ready_addresses(source_slices, SERVICE),
                         str((mirror.get("spec") or {}).get("clusterIP") or ""),
                         _ready_addresses(slices, MIRROR),
                         dns_server=str(((dns or {}).get("spec") or {}).get("clusterIP") or ""))


async def resolve(server: str, name: str, timeout_s: float = ANSWER_TIMEOUT_S) -> tuple[str, ...]:
    """The A records `server` (port 53) gives for `name`; () when it does not answer."""
    query = wire.make_query(0x7E1E, name, wire.TYPE_A)
    try:
        answer = wire.parse_message(await dnsclient.exchange(query, [(server, 53)], timeout_s=timeout_s))
    except (dnsclient.DnsClientError, wire.DnsFormatError):
        return ()
    return tuple(sorted(r.rdata.address for r in answer.answers if isinstance(r.rdata, wire.A)))


async def http_get(host: str, port: int, timeout_s: float = ANSWER_TIMEOUT_S) -> str:
    """Which pod the echo server behind `host:port` says it is, or "" (no answer in time)."""
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
                await writer.drain()
                raw = await reader.read(64 * 1024)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError):
        return ""
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.") or b" 200 " not in head.split(b"\r\n", 1)[0] + b" ":
        return ""
    try:
        echo = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(echo, dict) or not echo.get("pod"):
        return ""
    return f"{echo['pod']} ({echo.get('podIP', '?')}) on {echo.get('node', '?')}"


async def wait_connect(kubeconfig: Path, timeout_s: float) -> ConnectResult:
    deadline = time.monotonic() + timeout_s
    while True:
        result = await connect_result(kubeconfig)
        if result.mirrored and result.dns_server:
            resolved = await resolve(result.dns_server, MIRROR_DNS_NAME)
            answer = await http_get(resolved[0], PORT) if resolved else ""
            result = dataclasses.replace(result, answer=answer, resolved=resolved)
        if result.ok or time.monotonic() >= deadline:
            return result
        await asyncio.sleep(0.5)
