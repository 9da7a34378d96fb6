"""One local cluster: storage, the API server over HTTPS, and its built-in controllers.

Its role (`local/roles.py`) decides the rest: a full cluster also runs nodes, kubelets and the
workload and Service controllers; an API-only hub runs only what an API server does itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tether.local import components, roles
from tether.local import tokens as sa_tokens
from tether.local.api import ApiServer, token_checker
from tether.local.controllers import LocalControllers
from tether.local.netns import fabric_for, owner_tag
from tether.local.network import ClusterNetwork, NetworkError, choose_mode, claim_index
from tether.local.operations import Operations, WriteOptions
from tether.local.pki import ClusterPki, ensure_cluster_pki
from tether.local.rbac.component import ensure_default_policy
from tether.local.rbac.enforcer import Enforcer
from tether.local.rbac.index import RbacIndex
from tether.local.resources import Registry
from tether.local.store import Store
from tether.net.connections import ConnectionLimits
from tether.net.httpserver import HttpServer

log = logging.getLogger(__name__)

class Component(Protocol):
    async def run(self) -> None: ...


SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass(frozen=True)
class ClusterConfig:
    name: str
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 0  # 0 picks a free port; the chosen one is kept in data_dir for restarts
    compact_keep: int = 50_000
    isolate_api: bool = False  # netns mode: serve the API only inside the cluster's network
    index: int | None = None  # preferred address-range index; claimed machine-wide at start
    nodes: int = 1
    netns: bool | None = None  # network namespaces (root); None: the mode kept in data_dir
    role: str | None = None  # roles.CLUSTER or roles.HUB; None: the role kept in data_dir
    # per client address: connections without valid credentials yet (see tether.net.connections)
    max_unauthenticated_per_address: int = ConnectionLimits().max_unauthenticated_per_address


def server_ssl_context(pki: ClusterPki) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.load_verify_locations(cafile=str(pki.ca_cert))
    context.verify_mode = ssl.CERT_OPTIONAL  # bearer tokens need no client certificate
    context.set_alpn_protocols(["http/1.1"])
    return context


class LocalCluster:
    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self.role = roles.choose_role(config.data_dir, config.role)
        config.data_dir.mkdir(parents=True, exist_ok=True)
        config.data_dir.chmod(0o700)  # it holds every Secret (state.db) and the cluster's keys
        roles.remember_role(config.data_dir, self.role)
        self.pki = ensure_cluster_pki(config.data_dir / "pki", config.name)
        self.store = Store(config.data_dir / "state.db", compact_keep=config.compact_keep)
        # metrics.k8s.io comes from kubelets (metrics-server's APIService on real clusters): a hub
        # has none, so it does not serve the group, as Karmada's API server does not.
        self.registry = Registry.with_builtins(
            exclude_groups=("metrics.k8s.io",) if self.role == roles.HUB else ())
        self.ops = Operations(self.store, self.registry)
        self.ops.load_crds()
        # RBAC: decisions read an index the store keeps current; RBAC writes are checked for
        # escalation in admission (local/rbac/).
        enforcer = Enforcer(RbacIndex.following(self.store))
        self.ops.admission.append(enforcer.admission)
        self.api = ApiServer(
            operations=self.ops,
            registry=self.registry,
            # the admin token, then ServiceAccount tokens (local/tokens.py)
            tokens=sa_tokens.authenticator(self.store, config.data_dir / "pki",
                                           token_checker({self.pki.token(): "tether-admin"})),
            server_address=lambda: f"{self.api_host}:{self.port}",
            enforcer=enforcer,
        )
        self.ops.token_review = self.api.check_token
        mode = choose_mode(config.data_dir, config.netns)
        self._index = claim_index(self._preferred_index(), mode=mode)  # netns: an index < 32
        self.network = ClusterNetwork.of(self._index.index, mode)
        # Where cluster addresses live (host loopback or namespaces): every part that binds or
        # dials one goes through it.
        self.fabric = fabric_for(self.network, self.node_count, owner=owner_tag(config.data_dir))
        # An isolated API server listens only inside the cluster's network (its router
        # namespace): its own nodes and pods reach it, nothing on the host side does.
        self.api_host = config.host
        if config.isolate_api:
            if self.network.mode != "netns":
                raise NetworkError("isolating a cluster's API server needs --netns (run as root)")
            self.api_host = self.network.router_ip
        # Pods reach the API server through the `kubernetes` Service, so its ClusterIP is in the
        # serving certificate, as on real clusters (in-cluster clients dial that address).
        extra_ips = (self.network.api_service_ip, *((self.api_host,) if config.isolate_api else ()))
        self.pki = ensure_cluster_pki(config.data_dir / "pki", config.name, extra_ips=extra_ips)
        self._write_network()
        self.controllers = LocalControllers(self.ops)
        # Long-running parts beyond the core (workload controllers, nodes, kubelets, services;
        # on a hub only the API server's own): each is an object with `async def run()`,
        # supervised with the rest in run().
        self.kubelet: Any = None  # set by the kubelet component; streaming handlers use it
        self.components: list[Component] = components.build(self)
        self._http = HttpServer(self.api.handle, host=config.host, port=self._wanted_port(),
                                ssl_context=server_ssl_context(self.pki), limits=self._limits())
        self.started = asyncio.Event()

    @property
    def node_count(self) -> int:
        """Nodes this cluster runs: none on an API-only hub."""
        return 0 if self.role == roles.HUB else self.config.nodes

    def _limits(self) -> ConnectionLimits:
        return ConnectionLimits(max_unauthenticated_per_address=self.config.max_unauthenticated_per_address)

    def _isolated_socket(self) -> socket.socket:
        sock = self.fabric.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.api_host, self._wanted_port()))
        except OSError:
            sock.bind((self.api_host, 0))  # the remembered port is taken: pick another
        sock.listen(1024)
        sock.setblocking(False)
        return sock

    def _preferred_index(self) -> int | None:
        if self.config.index is not None:
            return self.config.index
        try:
            return int(json.loads((self.config.data_dir / "network.json").read_text())["index"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _write_network(self) -> None:
        (self.config.data_dir / "network.json").write_text(json.dumps(
            {"index": self.network.index, "mode": self.network.mode, "namespaces": self.fabric.namespaces}))

    def _port_file(self) -> Path:
        return self.config.data_dir / "port"

    def _wanted_port(self) -> int:
        if self.config.port:
            return self.config.port
        try:
            return int(self._port_file().read_text())
        except (OSError, ValueError):
            return 0

    @property
    def port(self) -> int:
        return self._http.port

    @property
    def url(self) -> str:
        return f"https://{self.api_host}:{self.port}"

    def bootstrap(self) -> None:
        rt = self.registry.lookup("", "v1", "namespaces")
        assert rt is not None
        for name in SYSTEM_NAMESPACES:
            if self.store.get("/namespaces", "", name) is None:
                self.ops.create(rt, "", {"metadata": {"name": name}}, WriteOptions(manager="kube-apiserver"))
        ensure_default_policy(self.ops)

    async def start(self) -> None:
        self.bootstrap()
        await self.fabric.setup()  # before any component binds or dials a cluster address
        self._write_network()
        if self.config.isolate_api:
            self._http = HttpServer(self.api.handle, host=self.api_host, port=0,
                                    ssl_context=server_ssl_context(self.pki), sock=self._isolated_socket(),
                                    limits=self._limits())
        try:
            await self._http.start()
        except OSError:
            if not self.config.port:  # the remembered port is taken: pick another
                self._http = HttpServer(self.api.handle, host=self.config.host, port=0,
                                        ssl_context=server_ssl_context(self.pki), limits=self._limits())
                await self._http.start()
            else:
                raise
        self._port_file().write_text(str(self.port))
        self.started.set()
        log.info("cluster %s serving on %s", self.config.name, self.url)

    async def run(self) -> None:
        """Serve until cancelled, then close within a bounded time."""
        if not self.started.is_set():
            await self.start()
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.controllers.run())
                for component in self.components:
                    group.create_task(component.run())
        finally:
            await self._http.close(grace_s=2.0)
            await self.close_network()
            self.store.close()
            self._index.release()

    async def close_network(self) -> None:
        """Remove the cluster's namespaces (netns mode); safe to call more than once."""
        await self.fabric.teardown()
