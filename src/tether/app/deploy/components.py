"""One renderer per component: hub, agent, mesh, mirror, dns, bridge (see `deploy/`).

Each takes a frozen values dataclass (defaults: what `deploy/` holds) and returns the objects in
apply order. RBAC is what the component's code touches, named in the comments of each rule set.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tether.app.deploy import common
from tether.app.deploy.common import NAMESPACE
from tether.federation import crds
from tether.federation.registry import controller_rules
from tether.objects import Obj
from tether.version import IMAGE

CONTROLLER = ["get", "list", "watch", "create", "update", "patch", "delete"]
READ = ["get", "list", "watch"]

# --- hub ---------------------------------------------------------------------------------------

HUB = "tether-hub"
HUB_TUNNEL_CERTS = "tether-hub-tunnel-certs"
HUB_GROUPS = (crds.CLUSTER_GROUP, crds.WORK_GROUP, crds.KARMADA_POLICY_GROUP,
              crds.KARMADA_APPS_GROUP, crds.KARMADA_WORK_GROUP, crds.KUBEFED_CORE_GROUP,
              crds.KUBEFED_SCHEDULING_GROUP, crds.KUBEFED_TYPES_GROUP, "connect.tether.io",
              "multicluster.x-k8s.io", "externaldns.k8s.io")


@dataclass(frozen=True)
class HubPorts:
    metrics: int = 8080  # /healthz, /readyz, /metrics
    proxy: int = 6443  # the cluster proxy (clusters/NAME/proxy), HTTPS
    tunnel: int = 8091  # where pull agents dial (ANP's agent port)
    dashboard: int = 8090


@dataclass(frozen=True)
class HubValues:
    image: str = IMAGE
    namespace: str = NAMESPACE
    replicas: int = 2
    ports: HubPorts = field(default_factory=HubPorts)
    # HOST[:PORT] pull agents dial; members outside this cluster need a LoadBalancer/NodePort
    tunnel_advertise: str = f"{HUB}.{NAMESPACE}.svc"
    service_type: str = "ClusterIP"


def hub_rules() -> list[Obj]:
    return [
        # templates of any type (Karmada propagates any resource) and discovery: read; their
        # status and tether.io/propagation-status annotation: update/patch
        {"apiGroups": ["*"], "resources": ["*"], "verbs": [*READ, "update", "patch"]},
        # the federation's own APIs: Clusters, Works, policies, bindings, federated types
        {"apiGroups": list(HUB_GROUPS), "resources": ["*"], "verbs": CONTROLLER},
        # execution namespaces, member credentials, registration ServiceAccounts and tokens,
        # bootstrap-token Secrets in kube-system, cluster-info in kube-public
        {"apiGroups": [""], "resources": ["namespaces", "secrets", "configmaps", "serviceaccounts",
                                          "events"], "verbs": CONTROLLER},
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        # leader election and the pull members' heartbeats
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": CONTROLLER},
        # a registration's approval grants the agent what it needs on the hub (never more than
        # the hub holds itself: no escalate, no bind)
        {"apiGroups": ["rbac.authorization.k8s.io"],
         "resources": ["roles", "rolebindings", "clusterroles", "clusterrolebindings"],
         "verbs": CONTROLLER},
        # KubeFed's enabled types: their Federated* CRDs
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "verbs": CONTROLLER},
        # the cluster proxy authenticates and authorizes its callers against this API
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
        {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"],
         "verbs": ["create"]},
    ]


def hub_args(v: HubValues) -> list[str]:
    p = v.ports
    return ["hub", "run", "--in-cluster", "--bind-address", "0.0.0.0",
            "--port", str(p.metrics), "--proxy-port", str(p.proxy),
            "--tunnel-agent-port", str(p.tunnel), "--tunnel-bind-address", "0.0.0.0",
            "--tunnel-advertise-address", v.tunnel_advertise,
            "--tunnel-certs", "/etc/tether/tunnel-certs",
            "--tunnel-server-count", str(v.replicas),  # agents hold a stream to every replica
            "--dashboard-port", str(p.dashboard),
            "--leader-elect", "--leader-elect-resource-namespace", v.namespace]


def render_hub(v: HubValues = HubValues()) -> list[Obj]:
    """Namespace, ServiceAccount, ClusterRole(+Binding), Deployment, Service, PDB."""
    ns, p = v.namespace, v.ports
    ports = [{"name": "metrics", "containerPort": p.metrics},
             {"name": "proxy", "containerPort": p.proxy},
             {"name": "tunnel", "containerPort": p.tunnel},
             {"name": "dashboard", "containerPort": p.dashboard}]
    env = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    hub = common.container(
        "hub", v.image, hub_args(v), ports=ports, env=env,
        # liveness: the process serves; readiness: this replica can serve the proxy and tunnel
        # (a follower is ready too: only the controllers wait for the lease)
        liveness=common.http_probe("/healthz", "metrics", period_s=20, failures=3,
                                   initial_delay_s=5),
        readiness=common.http_probe("/readyz", "metrics", period_s=10),
        mounts=[{"name": "tunnel-certs", "mountPath": "/etc/tether/tunnel-certs",
                 "readOnly": True}],
        res=common.resources("100m", "256Mi", "1Gi"))
    # every replica presents the same tunnel certificate: agents dial all of them. The Secret
    # holds `tether certs`' agent-side files: ca.crt, proxy-frontend.crt, proxy-frontend.key
    volumes = [{"name": "tunnel-certs",
                "secret": {"secretName": HUB_TUNNEL_CERTS, "defaultMode": 0o400}}]
    selector = {"app.kubernetes.io/name": HUB, **common.PART_OF}
    affinity = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": selector},
                                            "topologyKey": "kubernetes.io/hostname"}}]}}
    spec = common.pod_spec(HUB, [hub], volumes, affinity=affinity,
                           terminationGracePeriodSeconds=30)
    return [
        common.namespace(ns),
        common.service_account(HUB, "hub", ns),
        *common.cluster_role(HUB, "hub", ns, hub_rules()),
        common.deployment(HUB, "hub", ns, spec, replicas=v.replicas),
        {"apiVersion": "v1", "kind": "Service", "metadata": common.meta(HUB, "hub", ns),
         "spec": {"type": v.service_type, "selector": selector,
                  "ports": [{"name": q["name"], "port": q["containerPort"],
                             "targetPort": q["name"], "protocol": "TCP"} for q in ports]}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
         "metadata": common.meta(HUB, "hub", ns),
         "spec": {"minAvailable": 1, "selector": {"matchLabels": selector}}},
    ]


# --- pull agent (in the member) ---------------------------------------------------------------

AGENT_DIR = "/etc/tether-agent"


@dataclass(frozen=True)
class AgentValues:
    cluster: str = "member"
    # the files `tether register --no-start` wrote: agent.json, token, hub-ca.crt[, tunnel-ca.crt]
    files: Mapping[str, str] = field(default_factory=lambda: {
        "agent.json": json.dumps({"cluster": "member", "hub": "https://hub.example:6443",
                                  "member_in_cluster": True}),
        "token": "REPLACE-with-the-agent-token", "hub-ca.crt": "REPLACE-with-the-hub-CA"})
    image: str = IMAGE
    namespace: str = NAMESPACE


def agent_name(cluster: str) -> str:
    return f"tether-agent-{cluster}"


def render_agent(v: AgentValues = AgentValues()) -> list[Obj]:
    """Namespace, ServiceAccount, ClusterRole(+Binding): what the Work executor and status
    reports need in the member, no impersonation, no RBAC escalation; the token Secret and the
    Deployment."""
    name, ns = agent_name(v.cluster), v.namespace
    extra = {"cluster.tether.io/agent-for": v.cluster}
    agent = common.container(
        "agent", v.image, ["agent", "run", "--cluster-name", v.cluster, "--agent-dir", AGENT_DIR],
        # the agent is useless if its ServiceAccount cannot reach the member's API
        liveness=common.exec_probe(["tether", "whoami", "--in-cluster"], period_s=60, failures=5),
        readiness=common.exec_probe(["tether", "whoami", "--in-cluster"], period_s=30),
        mounts=[{"name": "config", "mountPath": AGENT_DIR, "readOnly": True}])
    volumes = [{"name": "config", "secret": {"secretName": name, "defaultMode": 0o400}}]
    return [
        common.namespace(ns),
        {**common.service_account(name, "agent", ns)},
        *common.cluster_role(name, "agent", ns, controller_rules(impersonate=False)),
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": common.meta(name, "agent", ns, extra),
         "data": {k: base64.b64encode(val.encode()).decode() for k, val in v.files.items()}},
        common.deployment(name, "agent", ns, common.pod_spec(name, [agent], volumes),
                          extra_labels=extra),
    ]


# --- mesh (DaemonSet, every node) -------------------------------------------------------------

MESH = "tether-mesh"
MESH_CONFIG_DIR = "/etc/semaphore-wireguard"
MESH_KEYS = "/var/lib/semaphore-wireguard"
WHY_ROOT = ("creates WireGuard devices and routes in the node's network namespace: NET_ADMIN "
            "only takes effect for uid 0 (a non-root process loses its capabilities at exec), "
            "and its keys live in a root-owned hostPath")
EXAMPLE_MESH_CONFIG = {
    "local": {"name": "c1"},
    "remotes": [{"name": "c2", "remoteAPIURL": "https://lb.c2.example:6443",
                 "remoteCAURL": "https://kube-ca-cert.c2.example",
                 "remoteSATokenPath": f"{MESH_CONFIG_DIR}/tokens/c2/token",
                 "podSubnet": "10.4.0.0/16", "wgDeviceMTU": 1380, "wgListenPort": 51821}],
}


@dataclass(frozen=True)
class MeshValues:
    image: str = IMAGE
    namespace: str = "kube-system"
    clusters_json: str = json.dumps(EXAMPLE_MESH_CONFIG, indent=2) + "\n"
    metrics_port: int = 7773


def _mesh_remotes(clusters_json: str) -> list[str]:
    try:
        doc = json.loads(clusters_json)
    except ValueError as exc:
        raise ValueError(f"the clusters config is not JSON: {exc}") from None
    remotes = doc.get("remotes") if isinstance(doc, dict) else None
    if not isinstance(remotes, list):
        raise ValueError("the clusters config has no `remotes` list")
    return [str(r.get("name")) for r in remotes if isinstance(r, dict) and r.get("name")]


def render_mesh(v: MeshValues = MeshValues()) -> list[Obj]:
    """The per-node manager (hostNetwork, NET_ADMIN), semaphore-wireguard's config, annotations
    and key directory; a ServiceAccount the other clusters' managers use to read Nodes."""
    ns = v.namespace
    remotes = _mesh_remotes(v.clusters_json)
    remote_sa = "semaphore-wireguard-remote"
    mesh = common.container(
        "mesh", v.image,
        ["mesh", "run", "--clusters-config", f"{MESH_CONFIG_DIR}/clusters.json"],
        ports=[{"name": "metrics", "containerPort": v.metrics_port}],
        env=[{"name": "SWG_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
             {"name": "SWG_WG_KEY_PATH", "value": MESH_KEYS},
             {"name": "SWG_LISTEN_ADDRESS", "value": f":{v.metrics_port}"}],
        liveness=common.http_probe("/metrics", "metrics", period_s=20, initial_delay_s=5),
        readiness=common.http_probe("/metrics", "metrics"),
        mounts=[{"name": "config", "mountPath": f"{MESH_CONFIG_DIR}/clusters.json",
                 "subPath": "clusters.json", "readOnly": True},
                {"name": "tokens", "mountPath": f"{MESH_CONFIG_DIR}/tokens", "readOnly": True},
                {"name": "keys", "mountPath": MESH_KEYS},
                {"name": "wireguard-run", "mountPath": "/var/run/wireguard"},
                {"name": "dev-net-tun", "mountPath": "/dev/net/tun"}],
        security=common.security_context(root=True, add=["NET_ADMIN"]))
    volumes = [
        {"name": "config", "configMap": {"name": MESH}},
        {"name": "tokens", "secret": {"secretName": "tether-mesh-remote-tokens",
                                      "items": [{"key": f"{r}-token", "path": f"{r}/token"}
                                                for r in remotes]}},
        {"name": "keys", "hostPath": {"path": MESH_KEYS, "type": "DirectoryOrCreate"}},
        {"name": "wireguard-run", "hostPath": {"path": "/var/run/wireguard",
                                               "type": "DirectoryOrCreate"}},
        {"name": "dev-net-tun", "hostPath": {"path": "/dev/net/tun", "type": "CharDevice"}},
    ]
    spec = common.pod_spec(MESH, [mesh], volumes, hostNetwork=True,
                           priorityClassName="system-node-critical",
                           tolerations=[{"operator": "Exists"}],
                           securityContext={"runAsNonRoot": False,
                                            "seccompProfile": {"type": "RuntimeDefault"}})
    selector = {"app.kubernetes.io/name": MESH, **common.PART_OF}
    node_rules = [{"apiGroups": [""], "resources": ["nodes"], "verbs": [*READ, "patch"]}]
    return [
        common.service_account(MESH, "mesh", ns),
        *common.cluster_role(MESH, "mesh", ns, node_rules),
        # what the other clusters' managers use to read this cluster's Nodes (read-only)
        common.service_account(remote_sa, "mesh", ns),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": common.meta("tether-mesh-remote", "mesh"),
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": READ}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": common.meta("tether-mesh-remote", "mesh"),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "tether-mesh-remote"},
         "subjects": [{"kind": "ServiceAccount", "name": remote_sa, "namespace": ns}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": common.meta(MESH, "mesh", ns),
         "data": {"clusters.json": v.clusters_json}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet",
         "metadata": common.meta(MESH, "mesh", ns),
         "spec": {"selector": {"matchLabels": selector},
                  "updateStrategy": {"type": "RollingUpdate",
                                     "rollingUpdate": {"maxUnavailable": 1}},
                  "template": {"metadata": {"labels": common.labels(MESH, "mesh"),
                                            "annotations": {"tether.io/runs-as-root": WHY_ROOT}},
                               "spec": spec}}},
    ]


# --- mirror (semaphore-service-mirror) --------------------------------------------------------

MIRROR = "tether-mirror"
MIRROR_CONFIG_DIR = "/etc/semaphore-service-mirror"
EXAMPLE_MIRROR_CONFIG = {
    "global": {"globalSvcLabelSelector": "mirror.semaphore.uw.io/global-service=true",
               "globalSvcRoutingStrategyLabel":
                   "mirror.semaphore.uw.io/global-service-routing-strategy=local-first",
               "mirrorSvcLabelSelector": "mirror.semaphore.uw.io/mirror-service=true",
               "mirrorNamespace": "sys-semaphore", "serviceSync": True,
               "endpointSliceSync": True},
    "localCluster": {"name": "local"},
    "remoteClusters": [{"name": "remote", "remoteAPIURL": "https://lb.remote.example:6443",
                        "remoteCAURL": "https://kube-ca-cert.remote.example",
                        "remoteSATokenPath": f"{MIRROR_CONFIG_DIR}/tokens/remote/token",
                        "resyncPeriod": "0", "servicePrefix": "remote"}],
}


@dataclass(frozen=True)
class MirrorValues:
    image: str = IMAGE
    namespace: str = NAMESPACE
    config_json: str = json.dumps(EXAMPLE_MIRROR_CONFIG, indent=2) + "\n"
    port: int = 8080


def render_mirror(v: MirrorValues = MirrorValues()) -> list[Obj]:
    """The service mirror: Deployment, its config as a ConfigMap, the remote tokens' Secret
    mount; RBAC: Services and EndpointSlices it writes, Namespaces it reads."""
    ns = v.namespace
    try:
        config = json.loads(v.config_json)
        mirror_ns = str(config.get("global", {}).get("mirrorNamespace") or "")
        remotes = [str(r["name"]) for r in config.get("remoteClusters") or [] if r.get("name")]
    except (ValueError, AttributeError, TypeError) as exc:
        raise ValueError(f"the mirror config is not semaphore-service-mirror's JSON: {exc}") from None
    mirror = common.container(
        "mirror", v.image,
        ["mirror", "-config", f"{MIRROR_CONFIG_DIR}/config.json",
         "-listen-address", f":{v.port}"],
        ports=[{"name": "metrics", "containerPort": v.port}],
        liveness=common.http_probe("/livez", "metrics", period_s=20, initial_delay_s=5),
        readiness=common.http_probe("/healthz", "metrics"),
        mounts=[{"name": "config", "mountPath": MIRROR_CONFIG_DIR + "/config.json",
                 "subPath": "config.json", "readOnly": True},
                {"name": "tokens", "mountPath": f"{MIRROR_CONFIG_DIR}/tokens", "readOnly": True}])
    volumes = [
        {"name": "config", "configMap": {"name": MIRROR}},
        {"name": "tokens", "secret": {"secretName": "tether-mirror-remote-tokens",
                                      "items": [{"key": f"{r}-token", "path": f"{r}/token"}
                                                for r in remotes]}},
    ]
    rules = [
        # mirrors and global services: written in the mirror namespace, read everywhere
        {"apiGroups": [""], "resources": ["services"], "verbs": CONTROLLER},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": CONTROLLER},
        {"apiGroups": [""], "resources": ["endpoints"], "verbs": CONTROLLER},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": [*READ, "create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": CONTROLLER},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    ]
    objects = [
        common.namespace(ns),
        common.service_account(MIRROR, "mirror", ns),
        *common.cluster_role(MIRROR, "mirror", ns, rules),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": common.meta(MIRROR, "mirror", ns),
         "data": {"config.json": v.config_json}},
        common.deployment(MIRROR, "mirror", ns, common.pod_spec(MIRROR, [mirror], volumes)),
    ]
    if mirror_ns and mirror_ns != ns:
        objects.insert(1, common.namespace(mirror_ns))
    return objects


# --- dns -------------------------------------------------------------------------------------

DNS = "tether-dns"
DNS_PORT = 5353  # a non-root process cannot bind 53: the Service maps 53 to it


@dataclass(frozen=True)
class DnsValues:
    image: str = IMAGE
    namespace: str = NAMESPACE
    prefixes: tuple[str, ...] = ()
    metrics_port: int = 9153
    upstream: str = ""  # [default: the pod's resolv.conf, i.e. the cluster DNS]


def corefile_stanza(v: DnsValues, server: str = "TETHER_DNS_CLUSTER_IP") -> str:
    """What to add to CoreDNS's Corefile: the zones tether dns answers, forwarded to it."""
    zones = ["clusterset.local", *(f"cluster.{p}" for p in v.prefixes), "cluster.global"]
    return "".join(f"{zone}:53 {{\n    errors\n    cache 5\n    forward . {server}:53\n}}\n"
                   for zone in zones)


def render_dns(v: DnsValues = DnsValues()) -> list[Obj]:
    """Deployment + Service of `tether dns`, read-only RBAC on what it answers from, and the
    CoreDNS stanza to add as a ConfigMap snippet (CoreDNS itself is left alone)."""
    ns = v.namespace
    args = ["dns", "--in-cluster", "--listen", f"0.0.0.0:{DNS_PORT}",
            "--metrics-address", f"0.0.0.0:{v.metrics_port}"]
    for prefix in v.prefixes:
        args += ["--prefix", prefix]
    if v.upstream:
        args += ["--upstream", v.upstream]
    dns = common.container(
        "dns", v.image, args,
        ports=[{"name": "dns", "containerPort": DNS_PORT, "protocol": "UDP"},
               {"name": "dns-tcp", "containerPort": DNS_PORT, "protocol": "TCP"},
               {"name": "metrics", "containerPort": v.metrics_port, "protocol": "TCP"}],
        liveness=common.http_probe("/healthz", "metrics", period_s=20, initial_delay_s=5),
        readiness=common.http_probe("/ready", "metrics"))
    rules = [
        {"apiGroups": [""], "resources": ["services", "namespaces"], "verbs": READ},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": READ},
        {"apiGroups": ["multicluster.x-k8s.io"], "resources": ["serviceimports"], "verbs": READ},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "verbs": READ},
    ]
    selector = {"app.kubernetes.io/name": DNS, **common.PART_OF}
    return [
        common.namespace(ns),
        common.service_account(DNS, "dns", ns),
        *common.cluster_role(DNS, "dns", ns, rules),
        common.deployment(DNS, "dns", ns, common.pod_spec(DNS, [dns]), replicas=2),
        {"apiVersion": "v1", "kind": "Service", "metadata": common.meta(DNS, "dns", ns),
         "spec": {"selector": selector, "ports": [
             {"name": "dns", "port": 53, "targetPort": "dns", "protocol": "UDP"},
             {"name": "dns-tcp", "port": 53, "targetPort": "dns-tcp", "protocol": "TCP"},
             {"name": "metrics", "port": v.metrics_port, "targetPort": "metrics",
              "protocol": "TCP"}]}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {**common.meta("tether-dns-coredns-stanza", "dns", ns),
                      "annotations": {"tether.io/usage": (
                          "add Corefile.snippet to kube-system/coredns's Corefile, with "
                          "TETHER_DNS_CLUSTER_IP replaced by the tether-dns Service's "
                          "clusterIP; CoreDNS reloads it")}},
         "data": {"Corefile.snippet": corefile_stanza(v)}},
    ]


# --- bridge (connect / intercept) -------------------------------------------------------------

BRIDGE = "tether-bridge"


@dataclass(frozen=True)
class BridgeValues:
    namespace: str = "tether-bridge"


def render_bridge(v: BridgeValues = BridgeValues()) -> list[Obj]:
    """Where `tether connect`/`intercept` run their agent and router pods: a namespace, their
    ServiceAccount and a Role that those commands extend with what they need."""
    ns = v.namespace
    rules = [{"apiGroups": [""], "resources": ["pods", "services", "endpoints"], "verbs": READ}]
    return [common.namespace(ns), common.service_account(BRIDGE, "bridge", ns),
            *common.role(BRIDGE, "bridge", ns, rules)]


Renderer = Callable[[], list[Obj]]
COMPONENTS: Mapping[str, Renderer] = {
    "hub": render_hub, "agent": render_agent, "mesh": render_mesh, "mirror": render_mirror,
    "dns": render_dns, "bridge": render_bridge,
}


