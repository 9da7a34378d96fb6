"""The hub's tunnel server for pull members (`tether hub run --tunnel-agent-port`).

- Agent port (`tunnel_agent_port`, TLS with the agent PKI's server certificate, no client
  certificates): an agent must present `authorization: Bearer <its hub ServiceAccount token>`;
  tokens map to the cluster name and its API host (`bootstrap.agent_tokens_of`, kept current
  from informers on Clusters and the hub namespace's Secrets: recomputed when a Cluster's spec
  or a Secret changes, never polled), and identity binding refuses an agent claiming another
  cluster's name or host.
- Plain-HTTP CONNECT on 127.0.0.1:`tunnel_frontend_port` for the hub's own clients, routed with
  `destHost` (the member API host the agent announced); this is the pull Clusters' `proxyURL`.
  Every CONNECT needs `Proxy-Authorization` with a cluster's proxy token (407 without), and may
  reach only that cluster's `spec.apiEndpoint` host:port or a `tunnel_allowed_destinations`
  pattern (403 otherwise), checked before any DIAL_REQ goes to an agent. The token is
  HMAC-SHA256(hub key, cluster name): the hub key (32 random bytes, `<data-dir>/tunnel/
  proxy-token.key`, mode 0600) never leaves the hub process; each pull Cluster whose `proxyURL`
  is this listener gets its token in its credentials Secret as `proxyHeader.Proxy-Authorization`
  (`Bearer <token>`), which every hub client already reads with the member's credentials
  (`health.proxy_headers`). So exactly who may read a member's credentials may use the listener,
  and only towards that member's API.
- The hub's own controllers (`client_credentials`, used by `hub_mcs.registered`) do not wait for
  that Secret: a Cluster through this listener gets its token from the hub key at once, and no
  credentials at all until this listener grants it, so a just-registered member is never dialled
  with a CONNECT the listener would refuse (407 before the token reached the Secret, 403 before
  this replica saw the Cluster), nor before its agent's first report (its Ready condition; no
  tunnel before that); `grant_handlers` run when grants change, Cluster events otherwise.
- Publishes `tether-system/tether-cluster-info` (hub CA, tunnel address, tunnel CA, proxy URL)
  for `tether register`.
- Several replicas (`tunnel_server_count` > 1 or leader election, see docs/hub-ha.md): each
  tells agents its server id (the leader election identity) and the server count, so an agent
  behind one address (a Service) keeps dialling until it holds a stream to every replica, and a
  CONNECT reaches the member through whichever replica it lands on. The replicas then share one
  proxy-token key, kept in the Secret `tether-system/tether-hub-tunnel-key` (created by the
  first replica; all others read it), so the tokens they write agree.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import hmac
import logging
import os
import secrets
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tether.app.hubconfig import HubConfig
from tether.federation import bootstrap
from tether.federation.crds import CLUSTER_API_VERSION
from tether.federation.health import HUB_NAMESPACE, PROXY_HEADER_PREFIX
from tether.kube import (
    AlreadyExists,
    ClusterCredentials,
    Informer,
    KubeClient,
    KubeError,
    WatchEvent,
)
from tether.net import daemon
from tether.objects import Obj
from tether.tunnel import pki
from tether.tunnel.connect import ConnectPolicy, token_key
from tether.tunnel.destinations import (
    Destination,
    DestinationError,
    parse_destination,
    parse_patterns,
)
from tether.tunnel.server import ServerConfig, TunnelServer
from tether.tunnel.tls import ServerTLS

log = logging.getLogger(__name__)

RETRY_S = 2.0  # after a failed update of credentials or grants
FIELD_MANAGER = "tether-hub-tunnel"
PROXY_AUTH_KEY = PROXY_HEADER_PREFIX + "Proxy-Authorization"
KEY_FILE = "proxy-token.key"
SHARED_KEY_SECRET = "tether-hub-tunnel-key"
SHARED_KEY_FIELD = "proxy-token.key"

def load_or_create_key(path: Path) -> bytes:
    """The hub's proxy-token key: read, or made once (mode 0600 from the start)."""
    try:
        key = bytes.fromhex(path.read_text().strip())
        if len(key) >= 32:
            return key
    except (FileNotFoundError, ValueError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(32)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key.hex() + "\n")
    tmp.replace(path)
    return key


async def load_or_create_shared_key(host: KubeClient) -> bytes:
    """The proxy-token key every hub replica uses: a Secret on the hub, made once by whichever
    replica comes first (the create either wins or meets the one another replica made)."""
    for _ in range(3):
        secret = await host.get_or_none("v1", "Secret", SHARED_KEY_SECRET, HUB_NAMESPACE)
        if secret is not None:
            value = str((secret.get("data") or {}).get(SHARED_KEY_FIELD, ""))
            key = base64.b64decode(value) if value else b""
            if len(key) >= 32:
                return key
            raise KubeError(500, "InvalidKey", f"Secret {HUB_NAMESPACE}/{SHARED_KEY_SECRET} has no "
                            f"32-byte {SHARED_KEY_FIELD}: delete it and a hub replica makes a new one")
        key = secrets.token_bytes(32)
        try:
            await host.create({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                               "metadata": {"name": SHARED_KEY_SECRET, "namespace": HUB_NAMESPACE},
                               "data": {SHARED_KEY_FIELD: base64.b64encode(key).decode()}},
                              field_manager=FIELD_MANAGER)
            return key
        except AlreadyExists:
            continue  # another replica made it first: read theirs
    raise KubeError(500, "InvalidKey", f"Secret {HUB_NAMESPACE}/{SHARED_KEY_SECRET} could not be read")


def proxy_token(key: bytes, cluster: str) -> str:
    return hmac.new(key, b"tether-tunnel-proxy\0" + cluster.encode(), hashlib.sha256).hexdigest()


def api_destination(endpoint: str) -> Destination | None:
    """host:port of a Cluster's `spec.apiEndpoint` (https default 443, http 80)."""
    try:
        url = urlsplit(endpoint)
        port = url.port or {"https": 443, "http": 80}.get(url.scheme)
        host = url.hostname
    except ValueError:
        return None
    if not host or port is None:
        return None
    try:
        return parse_destination(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    except DestinationError:
        return None


def uses_listener(cluster: Mapping[str, Any], port: int) -> bool:
    """Whether a Cluster reaches its member through this hub's CONNECT listener."""
    spec = cluster.get("spec") or {}
    try:
        url = urlsplit(str(spec.get("proxyURL") or ""))
        return url.scheme == "http" and url.hostname == "127.0.0.1" and url.port == port
    except ValueError:
        return False


def client_credentials(cluster: Obj, credentials: ClusterCredentials, *, frontend_port: int,
                       key: bytes, grants: Mapping[str, frozenset[Destination]]) -> ClusterCredentials | None:
    """What the hub's own clients use for `cluster`: unchanged unless it is reached through the
    listener on `frontend_port`; then with its proxy token from the hub key (its Secret gets the
    same token a moment after the Cluster appears), or None while the listener does not grant the
    Cluster yet (a CONNECT would be refused) or its agent has never reported (a Cluster just
    registered: a dial would find no tunnel)."""
    if not frontend_port or not uses_listener(cluster, frontend_port):
        return credentials
    status = cluster.get("status") or {}
    # "has reported" is read from what only the agent's report sets, not from a Ready condition:
    # the hub's health controller itself writes Ready=Unknown for a member whose agent never
    # came, which has no tunnel to dial through
    if not (status.get("lastHeartbeatTime") or status.get("kubernetesVersion")):
        return None
    name = str((cluster.get("metadata") or {}).get("name", ""))
    dest = api_destination(str((cluster.get("spec") or {}).get("apiEndpoint", "")))
    token = proxy_token(key, name)
    if dest is None or dest not in grants.get(token_key(token), frozenset()):
        return None
    headers = [(k, v) for k, v in credentials.proxy_headers if k.lower() != "proxy-authorization"]
    return dataclasses.replace(credentials,
                               proxy_headers=(*headers, ("Proxy-Authorization", f"Bearer {token}")))


@dataclass(frozen=True)
class AgentCerts:
    """The agent port's serving certificate and key, and the CA agents check it with."""

    cert: Path
    key: Path
    ca: Path


def agent_certs(directory: Path) -> AgentCerts:
    """A `tether certs` output directory (`agent/issued/...`), or the same three files side by
    side, as a Secret mounted in a pod has them (`ca.crt`, `proxy-frontend.crt`,
    `proxy-frontend.key`)."""
    flat = AgentCerts(directory / "proxy-frontend.crt", directory / "proxy-frontend.key",
                      directory / "ca.crt")
    if flat.cert.exists() and not (directory / "agent").exists():
        return flat
    agent = directory / "agent"
    return AgentCerts(agent / "issued" / "proxy-frontend.crt",
                      agent / "private" / "proxy-frontend.key", agent / "issued" / "ca.crt")


def _split(advertise: str, default_port: int) -> tuple[str, int]:
    host, sep, port = advertise.rpartition(":")
    if not sep or not port.isdigit():
        return advertise, default_port
    return host, int(port)


class HubTunnel:
    def __init__(self, host: KubeClient, config: HubConfig) -> None:
        self.host = host
        self.config = config
        self.server: TunnelServer | None = None
        # never empty: an empty map would let agents in without a token
        self._tokens: dict[str, frozenset[str]] = {secrets.token_urlsafe(32): frozenset({"-"})}
        self._sentinel = dict(self._tokens)
        self.policy = ConnectPolicy(allowed=parse_patterns(config.tunnel_allowed_destinations))
        self._key = b""
        self._frontend_port = 0
        self._cluster_specs: dict[str, Any] = {}
        self._changed = asyncio.Event()
        # called (no arguments) when the clusters this listener grants changed
        self.grant_handlers: list[Callable[[], None]] = []
        self.clusters = Informer(host, CLUSTER_API_VERSION, "Cluster", on_event=self._on_cluster)
        self.secrets = Informer(host, "v1", "Secret", HUB_NAMESPACE,
                                on_event=lambda _e: self._changed.set())
        # the frontend's required listener; the hub's clients use the plain CONNECT port
        self._uds = str(Path(tempfile.mkdtemp(prefix="tether-hub-")) / "tunnel.sock")

    def _certs(self, advertise_host: str) -> Path:
        if self.config.tunnel_certs is not None:
            return self.config.tunnel_certs
        base = (self.config.data_dir or daemon.state_home() / "hub")
        out = base / "tunnel"
        marker = out / "server-ip"  # certificates are for this address; regenerate when it changes
        current = marker.read_text().strip() if marker.exists() else ""
        if current != advertise_host or not (out / "agent" / "issued" / "proxy-frontend.crt").exists():
            out.mkdir(parents=True, exist_ok=True)
            pki.write_pkis(out, advertise_host)
            marker.write_text(advertise_host + "\n")
        return out

    async def refresh_tokens(self) -> None:
        """Agent credentials and proxy grants from lists of the host (before the informers
        have synced)."""
        clusters = await self.host.list_objects(CLUSTER_API_VERSION, "Cluster")
        secrets_ = await self.host.list_objects("v1", "Secret", HUB_NAMESPACE)
        await self._refresh(clusters, secrets_)

    async def _refresh(self, clusters: list[Obj], secrets_: list[Obj]) -> None:
        if self._frontend_port:
            await self.refresh_grants(clusters, secrets_)
        self._set_tokens(bootstrap.agent_tokens_of(secrets_, clusters))

    def _set_tokens(self, found: dict[str, frozenset[str]]) -> None:
        fresh = {**self._sentinel, **found}
        if fresh != self._tokens:
            self._tokens.clear()
            self._tokens.update(fresh)
            log.info("tunnel: %d agent credential(s)", len(found))

    def _on_cluster(self, event: WatchEvent) -> None:
        # only the spec matters here (endpoint, proxyURL, secretRef): status writes change nothing
        name = event.key.name
        spec = None if event.type == "DELETED" else event.object.get("spec")
        if self._cluster_specs.get(name) != spec or event.type == "DELETED":
            self._cluster_specs.pop(name, None)
            if spec is not None:
                self._cluster_specs[name] = spec
            self._changed.set()

    async def refresh_grants(self, clusters: list[Obj], secrets_: list[Obj]) -> None:
        """Proxy tokens for the pull Clusters behind this listener: granted to their API
        endpoints, and written to their credentials Secrets where missing or stale."""
        grants: dict[str, set[Destination]] = {}
        wanted: dict[tuple[str, str], str] = {}  # (namespace, Secret) → token
        for cluster in clusters:
            name = str((cluster.get("metadata") or {}).get("name", ""))
            spec = cluster.get("spec") or {}
            dest = api_destination(str(spec.get("apiEndpoint", "")))
            if not name or dest is None or not uses_listener(cluster, self._frontend_port):
                continue
            token = proxy_token(self._key, name)
            grants.setdefault(token_key(token), set()).add(dest)
            ref = spec.get("secretRef") or {}
            wanted[(str(ref.get("namespace") or HUB_NAMESPACE), str(ref.get("name") or name))] = token
        before = dict(self.policy.grants)
        self.policy.replace_grants(grants)
        if self.policy.grants != before:
            for handler in self.grant_handlers:
                handler()
        if not wanted:
            return
        # the usual namespace's Secrets are at hand; a Secret elsewhere is read on its own
        found = {(HUB_NAMESPACE, str(s["metadata"]["name"])): s for s in secrets_}
        for (namespace, secret), token in wanted.items():
            await self._write_token(namespace, secret, token, found.get((namespace, secret)))

    async def _write_token(self, namespace: str, secret: str, token: str, found: Obj | None) -> None:
        value = base64.b64encode(f"Bearer {token}".encode()).decode()
        if found is None and namespace != HUB_NAMESPACE:
            try:
                found = await self.host.get_or_none("v1", "Secret", secret, namespace)
            except KubeError as exc:
                log.warning("tunnel: reading Secret %s/%s failed: %s", namespace, secret, exc)
        if found is None:
            return  # registration writes it; the next refresh adds the token
        if (found.get("data") or {}).get(PROXY_AUTH_KEY) == value:
            return
        try:
            await self.host.patch("v1", "Secret", secret, {"data": {PROXY_AUTH_KEY: value}},
                                  namespace=namespace, field_manager=FIELD_MANAGER)
        except KubeError as exc:  # the next refresh tries again; the other Clusters go on
            log.warning("tunnel: writing the proxy token to Secret %s/%s failed: %s", namespace,
                        secret, exc)
            return
        log.info("tunnel: proxy token written to Secret %s/%s", namespace, secret)

    def client_credentials(self, cluster: Obj, credentials: ClusterCredentials) -> ClusterCredentials | None:
        """`client_credentials` for this listener: its port, the hub key, its current grants."""
        return client_credentials(cluster, credentials, frontend_port=self._frontend_port,
                                  key=self._key, grants=self.policy.grants)

    async def start(self) -> str:
        c = self.config
        assert c.tunnel_agent_port is not None
        host, _ = _split(c.tunnel_advertise or "127.0.0.1", c.tunnel_agent_port)
        certs = agent_certs(self._certs(host))
        base = (self.config.data_dir or daemon.state_home() / "hub")
        if c.tunnel_server_count > 1 or c.leader_election is not None:
            self._key = await load_or_create_shared_key(self.host)
        else:
            self._key = load_or_create_key(base / "tunnel" / KEY_FILE)
        identity = (c.tunnel_server_id
                    or (c.leader_election.identity if c.leader_election is not None else ""))
        config = ServerConfig(
            server_count=max(1, c.tunnel_server_count),
            mode="http-connect", uds_name=self._uds, server_port=0,
            agent_bind_address=c.tunnel_bind_address, agent_port=c.tunnel_agent_port,
            health_port=-1, admin_port=-1,
            plain_connect_port=c.tunnel_frontend_port, plain_connect_bind_address="127.0.0.1",
            agent_tls=ServerTLS(str(certs.cert), str(certs.key)),
            proxy_strategies=("destHost",), agent_identity_binding="auto",
            agent_tokens=self._tokens, connect_policy=self.policy)
        if identity:
            config = dataclasses.replace(config, server_id=identity)
        try:
            await self.refresh_tokens()
        except KubeError as exc:
            log.warning("tunnel: reading agent credentials failed: %s", exc)
        self.server = TunnelServer(config)
        await self.server.start()
        agent_port = self.server.ports.get("agent", c.tunnel_agent_port)
        frontend_port = self.server.ports.get("plain-connect", c.tunnel_frontend_port)
        self._frontend_port = frontend_port
        try:
            await self.refresh_tokens()
        except KubeError as exc:
            log.warning("tunnel: reading pull Clusters failed: %s", exc)
        _, advertised_port = _split(c.tunnel_advertise or "127.0.0.1", agent_port)
        address = f"{host}:{advertised_port}"
        proxy_url = f"http://127.0.0.1:{frontend_port}"
        await bootstrap.publish_cluster_info(self.host, {
            bootstrap.TUNNEL_AGENT_ADDRESS_KEY: address,
            bootstrap.TUNNEL_PROXY_URL_KEY: proxy_url,
            bootstrap.TUNNEL_CA_KEY: certs.ca.read_text(),
        }, field_manager="tether-hub-tunnel")
        return (f"tunnel server: agents at {address} (port {agent_port}), hub clients via "
                f"CONNECT {proxy_url}")

    async def run(self) -> None:
        """Follow Clusters and the hub namespace's Secrets; recompute credentials and grants
        from the caches when a Cluster's spec or a Secret changed (no request at rest)."""
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.clusters.run())
                group.create_task(self.secrets.run())
                for informer in (self.clusters, self.secrets):  # a partial view drops tokens
                    while not informer.synced:
                        with contextlib.suppress(TimeoutError):
                            await informer.wait_synced(60)
                while True:
                    await self._changed.wait()
                    self._changed.clear()
                    try:
                        await self._refresh(self.clusters.list(), self.secrets.list())
                    except KubeError as exc:
                        log.warning("tunnel: updating agent credentials failed: %s", exc)
                        await asyncio.sleep(RETRY_S)
                        self._changed.set()
        finally:
            if self.server is not None:
                with contextlib.suppress(Exception):
                    await self.server.close()
