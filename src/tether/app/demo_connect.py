"""`tether demo`, Connect step: a Service of one member mirrored into the other by the hub.

A `hello` Service (2 echo-server pods) runs in member `cluster`, labelled for mirroring as
Semaphore users label theirs; a `MirrorPolicy` on the hub makes every member mirror every other,
so `cluster1` gets `cluster-connect-demo-73736d-hello` in `tether-mirrors`, whose endpoints are
the pod addresses in `cluster`. The step then asks `cluster1`'s own DNS server (its `kube-dns`
Service) for the mirror's name, as a pod of `cluster1` would, asks the address it gets over HTTP
from this machine, and shows which pod of the other cluster answered.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from tether.app import demo_steps as steps
from tether.connect.names import mirror_name
from tether.kube import KubeClient, NotFound
from tether.objects import Obj

SOURCE, TARGET = "cluster", "cluster1"
NAMESPACE = "connect-demo"
SERVICE = "hello"
MIRROR_NAMESPACE = "tether-mirrors"
MIRROR = mirror_name(SOURCE, NAMESPACE, SERVICE)
REPLICAS = 2
PORT = 80
MIRROR_DNS_NAME = f"{MIRROR}.{MIRROR_NAMESPACE}.svc.cluster.local"
DNS_SERVICE = ("kube-system", "kube-dns")

SOURCE_OBJECTS: tuple[Obj, ...] = (
    steps.namespace(NAMESPACE),
    *steps.echo_app(SERVICE, NAMESPACE, REPLICAS, PORT,
                    service_labels={"mirror.semaphore.uw.io/mirror-service": "true"}),
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
    async with KubeClient.from_kubeconfig(kubeconfig, SOURCE) as source:
        applied = await steps.apply_all(source, SOURCE_OBJECTS, suffix=f" (in {SOURCE})")
    await steps.apply_all(host, [MIRROR_POLICY])
    applied.append("mirrorpolicy/demo (on the hub)")
    return applied


async def connect_result(kubeconfig: Path) -> ConnectResult:
    async with KubeClient.from_kubeconfig(kubeconfig, SOURCE) as source:
        source_slices = await source.list_objects("discovery.k8s.io/v1", "EndpointSlice", NAMESPACE)
    async with KubeClient.from_kubeconfig(kubeconfig, TARGET) as target:
        try:
            mirror = await target.get("v1", "Service", MIRROR, MIRROR_NAMESPACE)
        except NotFound:
            return ConnectResult(steps.ready_addresses(source_slices, SERVICE))
        slices = await target.list_objects("discovery.k8s.io/v1", "EndpointSlice", MIRROR_NAMESPACE)
        dns = await target.get_or_none("v1", "Service", DNS_SERVICE[1], DNS_SERVICE[0])
    return ConnectResult(steps.ready_addresses(source_slices, SERVICE),
                         str((mirror.get("spec") or {}).get("clusterIP") or ""),
                         steps.ready_addresses(slices, MIRROR),
                         dns_server=str(((dns or {}).get("spec") or {}).get("clusterIP") or ""))


async def check_connect(kubeconfig: Path) -> ConnectResult:
    """The mirror as cluster1 has it and, once it is there, asked by name and over HTTP."""
    result = await connect_result(kubeconfig)
    if result.mirrored and result.dns_server:
        resolved = await steps.resolve((result.dns_server, 53), MIRROR_DNS_NAME)
        answer = await steps.http_get(resolved[0], PORT) if resolved else ""
        result = dataclasses.replace(result, answer=answer, resolved=resolved)
    return result


async def wait_connect(kubeconfig: Path, timeout_s: float) -> ConnectResult:
    return await steps.poll(lambda: check_connect(kubeconfig), lambda r: r.ok, timeout_s)
