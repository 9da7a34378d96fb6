"""The hub's tunnel server for pull members (`tether hub run --tunnel-agent-port`).

- Agent port (`tunnel_agent_port`, TLS with the agent PKI's server certificate, no client
  certificates): an agent must present `authorization: Bearer <its hub ServiceAccount token>`;
  tokens map to the cluster name and its API host (`bootstrap.agent_tokens`, refreshed every
  `REFRESH_S`), and identity binding refuses an agent claiming another cluster's name or host.
- Plain-HTTP CONNECT on 127.0.0.1:`tunnel_frontend_port` for the hub's own clients, routed with
  `destHost` (the member API host the agent announced); this is the pull Clusters' `proxyURL`.
- Publishes `tether-system/tether-cluster-info` (hub CA, tunnel address, tunnel CA, proxy URL)
  for `tether register`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import tempfile
from pathlib import Path

from tether.app.hubconfig import HubConfig
from tether.federation import bootstrap
from tether.kube import KubeClient, KubeError
from tether.net import daemon
from tether.tunnel import pki
from tether.tunnel.server import ServerConfig, TunnelServer
from tether.tunnel.tls import ServerTLS

log = logging.getLogger(__name__)

REFRESH_S = 2.0


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
        found = await bootstrap.agent_tokens(self.host)
        fresh = {**self._sentinel, **found}
        if fresh != self._tokens:
            self._tokens.clear()
            self._tokens.update(fresh)
            log.info("tunnel: %d agent credential(s)", len(found))

    async def start(self) -> str:
        c = self.config
        assert c.tunnel_agent_port is not None
        host, _ = _split(c.tunnel_advertise or "127.0.0.1", c.tunnel_agent_port)
        certs = self._certs(host)
        agent_dir = certs / "agent"
        config = ServerConfig(
            mode="http-connect", uds_name=self._uds, server_port=0,
            agent_bind_address=c.tunnel_bind_address, agent_port=c.tunnel_agent_port,
            health_port=-1, admin_port=-1,
            plain_connect_port=c.tunnel_frontend_port, plain_connect_bind_address="127.0.0.1",
            agent_tls=ServerTLS(str(agent_dir / "issued" / "proxy-frontend.crt"),
                                str(agent_dir / "private" / "proxy-frontend.key")),
            proxy_strategies=("destHost",), agent_identity_binding="auto",
            agent_tokens=self._tokens)
        try:
            await self.refresh_tokens()
        except KubeError as exc:
            log.warning("tunnel: reading agent credentials failed: %s", exc)
        self.server = TunnelServer(config)
        await self.server.start()
        agent_port = self.server.ports.get("agent", c.tunnel_agent_port)
        frontend_port = self.server.ports.get("plain-connect", c.tunnel_frontend_port)
        _, advertised_port = _split(c.tunnel_advertise or "127.0.0.1", agent_port)
        address = f"{host}:{advertised_port}"
        proxy_url = f"http://127.0.0.1:{frontend_port}"
        await bootstrap.publish_cluster_info(self.host, {
            bootstrap.TUNNEL_AGENT_ADDRESS_KEY: address,
            bootstrap.TUNNEL_PROXY_URL_KEY: proxy_url,
            bootstrap.TUNNEL_CA_KEY: (agent_dir / "issued" / "ca.crt").read_text(),
        }, field_manager="tether-hub-tunnel")
        return (f"tunnel server: agents at {address} (port {agent_port}), hub clients via "
                f"CONNECT {proxy_url}")

    async def run(self) -> None:
        try:
            while True:
                await asyncio.sleep(REFRESH_S)
                try:
                    await self.refresh_tokens()
                except KubeError as exc:
                    log.warning("tunnel: reading agent credentials failed: %s", exc)
        finally:
            if self.server is not None:
                with contextlib.suppress(Exception):
                    await self.server.close()
