"""The local cluster's built-in components, shown as pods in `kube-system` as a kubeadm cluster shows them.

A local cluster runs its API server, controllers, scheduler, service proxy and DNS inside one
process. Tools (and client test suites) look for them as pods, so they appear as a real
cluster's would:

| component | pods | owned by |
|---|---|---|
| cluster DNS | `coredns-<hash>-<suffix>`, `k8s-app=kube-dns` | Deployment `coredns` (1 replica, as minikube runs it) |
| service proxy | `kube-proxy-<suffix>` on every node, `k8s-app=kube-proxy` | DaemonSet `kube-proxy` |
| API server, controller manager, scheduler | `kube-apiserver-<node>`, `kube-controller-manager-<node>`, `kube-scheduler-<node>`, `component=<name>`, `tier=control-plane` | mirror pods of static pods on the first node (annotation `kubernetes.io/config.mirror`, owner: the Node) |

The Deployment and DaemonSet (and their ServiceAccounts) are created when missing at start, as
kubeadm installs its add-ons; their pods are made, scheduled and replaced by the ordinary
controllers. Mirror pods are kept by `SystemPods`: one deleted comes back, as the kubelet
recreates the mirror of a static pod.

The kubelet never runs a process for these pods (`component_of` tells it which they are): it
reports the container Running, Ready while the component is healthy, and serves the
component's own log (`tether.local.componentlog`) as the container's log.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether import __version__
from tether.local.componentlog import ComponentLog, klog
from tether.local.errors import ApiError
from tether.local.nodes.shape import KUBELET_VERSION, node_name
from tether.local.operations import Operations, WriteOptions
from tether.local.tokens import ISSUER, MIRROR_ANNOTATION
from tether.objects import Obj, times

if TYPE_CHECKING:
    from tether.local.cluster import Component, LocalCluster

log = logging.getLogger(__name__)

NAMESPACE = "kube-system"
MANAGER = "kubeadm"
MIRROR_SYNC_S = 5.0
NODE_WAIT_S = 0.25  # at start the first node may not be registered yet
COREDNS_IMAGE = "registry.k8s.io/coredns/coredns:v1.12.1"
DNS_DOMAIN = "cluster.local"
STATIC = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
NODE_CRITICAL, CLUSTER_CRITICAL = "system-node-critical", "system-cluster-critical"

# (namespace kube-system and) label -> component
LABELS: tuple[tuple[str, str, str], ...] = (
    ("k8s-app", "kube-dns", "coredns"),
    ("k8s-app", "kube-proxy", "kube-proxy"),
    *(("component", name, name) for name in STATIC),
)


@dataclass(frozen=True)
class SystemComponent:
    """A built-in component as its pod shows it: its log, and whether it is healthy now."""

    name: str
    log: ComponentLog
    healthy: Callable[[], bool]


def component_of(pod: Mapping[str, Any]) -> str | None:
    """Which built-in component a pod stands for, if any."""
    meta = pod.get("metadata") or {}
    if meta.get("namespace") != NAMESPACE:
        return None
    labels = meta.get("labels") or {}
    for key, value, component in LABELS:
        if labels.get(key) == value:
            return component
    return None


# the objects (pure) -------------------------------------------------------------------------


def service_account(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": NAMESPACE}}


def coredns_deployment() -> Obj:
    labels = {"k8s-app": "kube-dns"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "coredns", "namespace": NAMESPACE, "labels": dict(labels)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": dict(labels)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": "25%"}},
            "template": {"metadata": {"labels": dict(labels)}, "spec": {
                "priorityClassName": CLUSTER_CRITICAL,
                "serviceAccountName": "coredns",
                "dnsPolicy": "Default",
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                                {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
                "containers": [{
                    "name": "coredns", "image": COREDNS_IMAGE, "imagePullPolicy": "IfNotPresent",
                    "args": ["-conf", "/etc/coredns/Corefile"],
                    "resources": {"limits": {"memory": "170Mi"}, "requests": {"cpu": "100m", "memory": "70Mi"}},
                    "ports": [{"name": "dns", "containerPort": 53, "protocol": "UDP"},
                              {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                              {"name": "metrics", "containerPort": 9153, "protocol": "TCP"}],
                }],
            }},
        },
    }


def kube_dns_service(cluster_ip: str) -> Obj:
    """kubeadm's `kube-dns` Service: pods' resolv.conf names its ClusterIP (the cluster DNS
    answers on that address itself)."""
    return {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kube-dns", "namespace": NAMESPACE,
                     "labels": {"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true",
                                "kubernetes.io/name": "CoreDNS"},
                     "annotations": {"prometheus.io/port": "9153", "prometheus.io/scrape": "true"}},
        "spec": {"clusterIP": cluster_ip, "clusterIPs": [cluster_ip], "selector": {"k8s-app": "kube-dns"},
                 "ports": [{"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                           {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                           {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153}]},
    }


def coredns_configmap(domain: str) -> Obj:
    """kubeadm's `coredns` ConfigMap; the cluster DNS follows edits of its Corefile."""
    from tether.local.services.corefile import default_corefile

    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", "namespace": NAMESPACE},
            "data": {"Corefile": default_corefile(domain)}}


def kube_proxy_daemonset() -> Obj:
    labels = {"k8s-app": "kube-proxy"}
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "kube-proxy", "namespace": NAMESPACE, "labels": dict(labels)},
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
            "template": {"metadata": {"labels": dict(labels)}, "spec": {
                "hostNetwork": True,
                "priorityClassName": NODE_CRITICAL,
                "serviceAccountName": "kube-proxy",
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "tolerations": [{"operator": "Exists"}],
                "containers": [{
                    "name": "kube-proxy", "image": f"registry.k8s.io/kube-proxy:{KUBELET_VERSION}",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["/usr/local/bin/kube-proxy", "--proxy-mode=userspace",
                                "--hostname-override=$(NODE_NAME)"],
                    "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                                              "fieldPath": "spec.nodeName"}}}],
                    "securityContext": {"privileged": True},
                }],
            }},
        },
    }


@dataclass(frozen=True)
class ControlPlane:
    """What the static pods' command lines say about the cluster."""

    api_host: str
    api_port: int
    service_cidr: str
    pod_cidr: str


def _commands(plane: ControlPlane) -> dict[str, list[str]]:
    return {
        "kube-apiserver": ["kube-apiserver", f"--advertise-address={plane.api_host}",
                           f"--secure-port={plane.api_port}", f"--service-cluster-ip-range={plane.service_cidr}",
                           f"--service-account-issuer={ISSUER}", "--authorization-mode=AlwaysAllow",
                           "--storage-backend=sqlite"],
        "kube-controller-manager": ["kube-controller-manager", f"--cluster-cidr={plane.pod_cidr}",
                                    f"--service-cluster-ip-range={plane.service_cidr}", "--controllers=*",
                                    "--leader-elect=false"],
        "kube-scheduler": ["kube-scheduler", "--leader-elect=false"],
    }


def static_pod(component: str, node: Obj, plane: ControlPlane, seen: str) -> Obj:
    """The mirror pod of a control-plane component's static pod on `node`."""
    node_meta = node["metadata"]
    spec: Obj = {
        "nodeName": node_meta["name"],
        "hostNetwork": True,
        "priorityClassName": NODE_CRITICAL,
        "priority": 2000001000,
        "tolerations": [{"operator": "Exists", "effect": "NoExecute"}],
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": component, "image": f"registry.k8s.io/{component}:{KUBELET_VERSION}",
                        "imagePullPolicy": "IfNotPresent", "command": _commands(plane)[component],
                        "resources": {"requests": {"cpu": "250m" if component == "kube-apiserver" else "100m"}}}],
    }
    config_hash = hashlib.md5(json.dumps(spec, sort_keys=True).encode(), usedforsecurity=False).hexdigest()
    annotations = {"kubernetes.io/config.hash": config_hash, MIRROR_ANNOTATION: config_hash,
                   "kubernetes.io/config.seen": seen, "kubernetes.io/config.source": "file"}
    if component == "kube-apiserver":
        annotations["kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint"] = \
            f"{plane.api_host}:{plane.api_port}"
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": f"{component}-{node_meta['name']}", "namespace": NAMESPACE,
            "labels": {"component": component, "tier": "control-plane"},
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node_meta["name"],
                                 "uid": node_meta.get("uid", ""), "controller": True}],
        },
        "spec": spec,
    }


# the component ------------------------------------------------------------------------------


class SystemPods:
    """Installs the add-ons once and keeps the control plane's mirror pods."""

    def __init__(self, cluster: LocalCluster, components: Mapping[str, SystemComponent]) -> None:
        self.cluster = cluster
        self.ops: Operations = cluster.ops
        self.components = components
        self._opts = WriteOptions(manager=MANAGER, user="kubernetes-admin")

    async def run(self) -> None:
        await self.cluster.started.wait()
        self._announce()
        self._install_addons()
        while True:
            placed = self._ensure_mirror_pods()
            await asyncio.sleep(MIRROR_SYNC_S if placed else NODE_WAIT_S)

    def _create(self, plural: str, group: str, body: Obj) -> None:
        rt = self.ops.registry.lookup(group, "v1", plural)
        assert rt is not None, plural
        if self.ops.store.get(rt.storage_key, NAMESPACE, body["metadata"]["name"]) is not None:
            return
        try:
            self.ops.create(rt, NAMESPACE, body, self._opts)
        except ApiError as exc:
            if exc.code not in (403, 409):  # raced with another writer, or kube-system is going
                log.warning("could not create %s %s/%s: %s", plural, NAMESPACE, body["metadata"]["name"], exc)

    def _install_addons(self) -> None:
        for name in ("coredns", "kube-proxy"):
            self._create("serviceaccounts", "", service_account(name))
        self._create("configmaps", "", coredns_configmap(DNS_DOMAIN))
        self._create("services", "", kube_dns_service(self.cluster.network.dns_service_ip))
        self._create("deployments", "apps", coredns_deployment())
        self._create("daemonsets", "apps", kube_proxy_daemonset())

    def _plane(self) -> ControlPlane:
        network = self.cluster.network
        return ControlPlane(self.cluster.api_host, self.cluster.port, str(network.service_cidr),
                            str(network.pod_cidr))

    def _ensure_mirror_pods(self) -> bool:
        """Create the mirror pods that are missing; False while their node is not there yet."""
        node = self.ops.store.get("/nodes", "", node_name(self.cluster.config.name, 0))
        if node is None:
            return False
        if node["metadata"].get("deletionTimestamp"):
            return True
        for component in STATIC:
            if self.ops.store.get("/pods", NAMESPACE, f"{component}-{node['metadata']['name']}") is None:
                self._create("pods", "", static_pod(component, node, self._plane(), times.now_rfc3339()))
        return True

    def _announce(self) -> None:
        """What each component says when it starts (their runs are this process's)."""
        plane = self._plane()
        lines = {
            "kube-apiserver": [
                ("I", f"Version: {KUBELET_VERSION} (tether {__version__} local cluster "
                      f"{self.cluster.config.name})", "server.go:158"),
                ("I", f"Serving securely on {plane.api_host}:{plane.api_port}", "secure_serving.go:213"),
            ],
            "kube-controller-manager": [
                ("I", f"Version: {KUBELET_VERSION}", "controllermanager.go:193"),
                *(("I", f'"Started controller" controller="{name}"', "controllermanager.go:797")
                  for name in ("namespace-controller", "garbage-collector-controller", "deployment-controller",
                               "replicaset-controller", "statefulset-controller", "daemonset-controller",
                               "job-controller", "endpoints-controller", "endpointslice-controller",
                               "serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
                               "node-ipam-controller")),
            ],
            "kube-scheduler": [
                ("I", f"Version: {KUBELET_VERSION}", "server.go:167"),
                ("I", "Serving scheduling decisions for every pod without a nodeName",
                 "scheduling_queue.go:346"),
            ],
            "kube-proxy": [
                ("I", "Using userspace proxier: one listener per Service ClusterIP:port and NodePort "
                      f"(service range {plane.service_cidr})", "server_linux.go:66"),
            ],
        }
        for name, entries in lines.items():
            component = self.components.get(name)
            if component is not None:
                component.log.write("\n".join(klog(level, text, source) for level, text, source in entries))


def build(cluster: LocalCluster, parts: list[Component]) -> SystemPods:
    """Register every built-in component with the kubelet (health and log) and return the
    component that installs their objects."""
    from tether.local.services.dns import DnsServer

    data_dir = cluster.config.data_dir

    def started() -> bool:  # `started` is made after the components
        return cluster.started.is_set()

    def logged(name: str) -> ComponentLog:
        return ComponentLog.in_dir(data_dir, name)

    dns = next((p for p in parts if isinstance(p, DnsServer)), None)
    registry: dict[str, SystemComponent] = {
        name: SystemComponent(name, logged(name), started)
        for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
    }
    if dns is not None:
        registry["coredns"] = SystemComponent(
            "coredns", dns.component_log or logged("coredns"),
            lambda: dns.ready.is_set() and dns.address is not None)
    if cluster.kubelet is not None:
        cluster.kubelet.system = registry
    return SystemPods(cluster, registry)
