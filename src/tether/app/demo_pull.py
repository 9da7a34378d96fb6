"""`tether demo`, Reach step: a member that registers itself (pull mode) and is reached through its tunnel.

`edge` plays a cluster behind NAT: nothing dials into it. As its admin would, the step takes a
bootstrap token from the hub, registers `edge` with it (the CA pin is checked before the token
is sent), and runs the pull agent next to it: the agent keeps a Lease on the hub, applies the
Works the hub writes for `edge`, and holds a tunnel open to the hub. A Karmada policy then sends
a Deployment to `edge` only, and the step lists its pods through the hub's cluster proxy, whose
requests reach `edge` through that tunnel: the route `kubectl logs` and `kubectl exec` take.

The agent runs in this process for the demo's duration, like the hub's controllers; its files
are kept under the data dir, so a second run reuses the registration.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from tether.app import agent as agent_files
from tether.app import clusterproxy
from tether.app import demo_steps as steps
from tether.app.pullagent import AgentSettings, PullAgent
from tether.federation import bootstrap
from tether.federation.health import HUB_NAMESPACE
from tether.kube import ClusterCredentials, KubeClient, KubeError, NotFound
from tether.objects import Obj

MEMBER = "edge"
NAMESPACE = "edge-demo"
DEPLOYMENT = "hello-edge"
REPLICAS = 2
TOKEN_TTL_S = 600.0
AGENT_PERIOD_S = 2.0
CLUSTER_API = "cluster.tether.io/v1alpha1"

OBJECTS: tuple[Obj, ...] = (
    steps.namespace(NAMESPACE),
    steps.deployment(DEPLOYMENT, NAMESPACE, REPLICAS, {"name": "echo", "image": "tether/echo"}),
    steps.propagation_policy(DEPLOYMENT, NAMESPACE, {"clusterAffinity": {"clusterNames": [MEMBER]}}),
)


@dataclass(frozen=True)
class Registered:
    directory: Path
    files: agent_files.AgentFiles
    fresh: bool  # registered by this run (False: the files of an earlier run)


@dataclass(frozen=True)
class PullResult:
    mode: str = ""  # the Cluster's spec.syncMode
    ready: str = ""  # its Ready condition
    pods: tuple[str, ...] = ()  # `edge`'s pods of DEPLOYMENT, listed through the hub's proxy
    proxy_server: str = ""  # the proxy URL those requests went to

    @property
    def ok(self) -> bool:
        return self.mode == "Pull" and self.ready == "True" and len(self.pods) == REPLICAS


async def register(host: KubeClient, kubeconfig: Path, data_dir: Path) -> Registered:
    """`tether token create` + `tether register --no-start`, as the member's admin runs them."""
    directory = agent_files.agent_dir(data_dir, MEMBER)
    cluster = await host.get_or_none(CLUSTER_API, "Cluster", MEMBER)
    if cluster is not None and (directory / "agent.json").exists():
        return Registered(directory, agent_files.read_files(directory), fresh=False)
    token = await bootstrap.create_token(host, MEMBER, TOKEN_TTL_S)
    server = host.credentials.server
    ca_pem, info = await bootstrap.discover_hub(server, token.token,
                                                bootstrap.ca_cert_hash(host.credentials.ca_pem or b""))
    hub_creds = ClusterCredentials.from_token(server=server, token=token.token, ca_bundle=ca_pem, name="hub")
    async with KubeClient(hub_creds) as hub, KubeClient.from_kubeconfig(kubeconfig, MEMBER) as member:
        reg = await bootstrap.register(hub, member, MEMBER, bootstrap.split_token(token.token)[0], info)
    files = agent_files.AgentFiles(cluster=MEMBER, hub=server, member_kubeconfig=str(kubeconfig),
                                   member_context=MEMBER, tunnel_address=reg.tunnel_agent_address,
                                   period_s=AGENT_PERIOD_S)
    agent_files.write_files(directory, files, token=reg.agent_token, hub_ca=ca_pem,
                            tunnel_ca=reg.tunnel_ca_pem)
    return Registered(directory, files, fresh=True)


@contextlib.asynccontextmanager
async def running_agent(registered: Registered, tunnel_address: str) -> AsyncIterator[None]:
    """The pull agent for the block. The hub's tunnel port is new each run, so the address the
    hub publishes now wins over the one recorded at registration."""
    files = dataclasses.replace(registered.files, tunnel_address=tunnel_address or registered.files.tunnel_address)
    token_path = registered.directory / "token"
    tunnel_ca = registered.directory / "tunnel-ca.crt"
    hub_creds = ClusterCredentials.from_token(server=files.hub, token=token_path.read_text(),
                                              ca_bundle=(registered.directory / "hub-ca.crt").read_bytes(),
                                              name="hub")
    settings = AgentSettings(cluster=MEMBER, period_s=files.period_s, tunnel_address=files.tunnel_address,
                             tunnel_ca=str(tunnel_ca) if tunnel_ca.exists() else "",
                             token_path=str(token_path))
    async with KubeClient(hub_creds) as hub, \
            KubeClient.from_kubeconfig(Path(files.member_kubeconfig), files.member_context) as member, \
            steps.running(PullAgent(hub, member, settings).run()):
        yield


async def published_tunnel(host: KubeClient) -> tuple[str, str]:
    """(agent address, CONNECT proxy URL) the running hub's tunnel published; it listens on
    free ports, so they change from run to run."""
    info = await host.get_or_none("v1", "ConfigMap", bootstrap.CLUSTER_INFO, HUB_NAMESPACE)
    data = (info or {}).get("data") or {}
    return (str(data.get(bootstrap.TUNNEL_AGENT_ADDRESS_KEY, "")),
            str(data.get(bootstrap.TUNNEL_PROXY_URL_KEY, "")))


async def point_at_tunnel(host: KubeClient, proxy_url: str) -> None:
    """A registration kept from an earlier run names that run's tunnel; aim it at this one."""
    if proxy_url:
        await host.patch(CLUSTER_API, "Cluster", MEMBER, {"spec": {"proxyURL": proxy_url}},
                         patch_type="merge")


async def apply_objects(host: KubeClient) -> list[str]:
    return await steps.apply_all(host, OBJECTS)


async def pull_result(host: KubeClient, proxy_kubeconfig: Path | None) -> PullResult:
    try:
        cluster = await host.get(CLUSTER_API, "Cluster", MEMBER)
    except NotFound:
        return PullResult()
    conditions = (cluster.get("status") or {}).get("conditions") or []
    ready = next((str(c.get("status")) for c in conditions if c.get("type") == "Ready"), "")
    mode = str((cluster.get("spec") or {}).get("syncMode") or "")
    if proxy_kubeconfig is None:
        return PullResult(mode, ready)
    try:
        async with KubeClient.from_kubeconfig(proxy_kubeconfig) as through_hub:
            pods = await through_hub.list_objects("v1", "Pod", NAMESPACE, label_selector=f"app={DEPLOYMENT}")
            server = through_hub.credentials.server
    except KubeError:
        return PullResult(mode, ready)
    running = tuple(sorted(str(p["metadata"]["name"]) for p in pods
                           if (p.get("status") or {}).get("phase") == "Running"
                           and not p["metadata"].get("deletionTimestamp")))
    return PullResult(mode, ready, running, server)


async def wait_pull(host: KubeClient, data_dir: Path, timeout_s: float) -> PullResult:
    proxy_kubeconfig: Path | None = None

    async def check() -> PullResult:
        nonlocal proxy_kubeconfig
        if proxy_kubeconfig is None:
            with contextlib.suppress(KubeError, clusterproxy.ProxySetupError, OSError):
                proxy_kubeconfig = await clusterproxy.write_kubeconfig(host, MEMBER, state_dir=data_dir)
        return await pull_result(host, proxy_kubeconfig)

    return await steps.poll(check, lambda r: r.ok, timeout_s)
