"""`tether connect --routes` (root, Linux): the cluster's pod and Service addresses, transparently.

The technique is sshuttle's: an nftables table sends what this machine's programs address to the
cluster's ranges to a local proxy, which reads where each connection was going
(`SO_ORIGINAL_DST`, kept by conntrack) and opens it through the cluster's channel. So
`curl http://<podIP>:8080/` and `curl http://<ClusterIP>/` work with no name or address
mapping at all.

- **Ranges** (`cluster_ranges`): every Node's `podCIDR(s)`, the `cidrs` of ServiceCIDR objects
  where the API serves them (networking.k8s.io v1 or v1beta1), and each ClusterIP the session
  sees (its namespaces' Services and the cluster DNS) as a /32 when no range holds it.
- **TCP**: one rule redirects every TCP connection to those ranges to the proxy's port on
  127.0.0.1 (`redirect` in the nat output hook rewrites the destination to loopback; conntrack
  keeps the original for `SO_ORIGINAL_DST` and rewrites the replies back).
- **UDP** has no `SO_ORIGINAL_DST`, so each UDP Service port (the cluster DNS's port 53 first)
  gets a rule of its own to a relay of its own; replies leave the relay's socket and conntrack
  gives them the ClusterIP as their source. UDP to pod IPs is not carried.
- **Nothing leaks**: a filter output rule drops any other packet to those ranges (ICMP, UDP to
  ports with no relay), so no packet for a cluster address leaves the machine; the channel
  itself never dials a cluster address from here (it goes through the API server).

The table, `ip tether-bridge-<pid>`, is replaced whole in one `nft -f` transaction whenever the
ranges or the UDP ports change, and deleted when the session ends; its name is in the session's
state file so `tether quit` or the next `connect` deletes it after a `kill -9`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tether.bridge.channel import BridgeError, ClusterChannel, splice, stream_from_asyncio
from tether.bridge.forward import Counters, CountingStream
from tether.kube import KubeClient, KubeError
from tether.net.nft import NftError, NftMissing, nft_succeeds_sync, run_nft
from tether.objects import Obj

log = logging.getLogger(__name__)

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h


class RoutesError(BridgeError):
    """nft is missing or refused the table, or this is not Linux as root."""


def table_name(pid: int) -> str:
    return f"tether-bridge-{pid}"


# ranges --------------------------------------------------------------------------------------------


def cluster_ranges(nodes: Iterable[Obj], service_cidrs: Iterable[Obj], cluster_ips: Iterable[str]) -> list[str]:
    """The IPv4 networks of a cluster's pods and Services, smallest set that covers what was seen."""
    networks: list[ipaddress.IPv4Network] = []

    def add(text: str) -> None:
        with contextlib.suppress(ValueError):
            net = ipaddress.ip_network(text, strict=False)
            if isinstance(net, ipaddress.IPv4Network) and not net.is_loopback and net.prefixlen >= 8:
                networks.append(net)

    for node in nodes:
        spec = node.get("spec") or {}
        for cidr in [spec.get("podCIDR"), *(spec.get("podCIDRs") or [])]:
            if cidr:
                add(str(cidr))
    for obj in service_cidrs:
        for cidr in (obj.get("spec") or {}).get("cidrs") or []:
            add(str(cidr))
    for ip in cluster_ips:
        with contextlib.suppress(ValueError):
            address = ipaddress.ip_address(ip)
            if isinstance(address, ipaddress.IPv4Address) and not any(address in n for n in networks):
                add(f"{address}/32")
    return [str(n) for n in ipaddress.collapse_addresses(networks)]


async def learn_ranges(client: KubeClient) -> tuple[list[Obj], list[Obj]]:
    """Nodes and ServiceCIDRs, as far as the caller may read them (none is not an error)."""
    nodes: list[Obj] = []
    with contextlib.suppress(KubeError):
        nodes = await client.list_objects("v1", "Node")
    for version in ("networking.k8s.io/v1", "networking.k8s.io/v1beta1"):
        try:
            return nodes, await client.list_objects(version, "ServiceCIDR")
        except KubeError:
            continue
    return nodes, []


# the table -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UdpRedirect:
    ip: str
    port: int
    local_port: int


def render_table(name: str, ranges: Sequence[str], tcp_port: int, udp: Sequence[UdpRedirect]) -> str:
    """The whole table as one `nft -f` script (replacing any table of that name)."""
    lines = [f"table ip {name} {{}}", f"delete table ip {name}", f"table ip {name} {{"]
    if ranges:
        lines += ["  set cluster {", "    type ipv4_addr; flags interval;",
                  f"    elements = {{ {', '.join(ranges)} }}", "  }"]
    lines += ["  chain to_proxy {", "    type nat hook output priority -100; policy accept;"]
    for r in udp:
        lines.append(f"    ip daddr {r.ip} udp dport {r.port} redirect to :{r.local_port}")
    if ranges:
        lines.append(f"    ip daddr @cluster meta l4proto tcp redirect to :{tcp_port}")
    lines += ["  }", "  chain no_leak {", "    type filter hook output priority 0; policy accept;"]
    if ranges:
        lines.append("    ip daddr @cluster drop")
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


async def _nft(args: list[str], script: str = "") -> None:
    try:
        await run_nft(args, script)
    except NftMissing:
        raise RoutesError("--routes needs the `nft` command: install nftables") from None
    except NftError as exc:
        raise RoutesError(str(exc)) from None


async def load(script: str) -> None:
    await _nft(["-f", "-"], script)


async def delete_table(name: str) -> None:
    with contextlib.suppress(RoutesError):
        await _nft(["delete", "table", "ip", name])


def delete_table_sync(name: str) -> None:
    """For `tether quit` and cleanup outside an event loop."""
    nft_succeeds_sync(["delete", "table", "ip", name])


def table_exists_sync(name: str) -> bool:
    return nft_succeeds_sync(["list", "table", "ip", name])


# the transparent proxy -----------------------------------------------------------------------------


def original_destination(sock: socket.socket) -> tuple[str, int]:
    """Where a redirected TCP connection was headed (conntrack's record of it)."""
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port, packed = struct.unpack_from("!2xH4s", raw)
    return socket.inet_ntoa(packed), int(port)


class TransparentProxy:
    """Accepts the redirected connections and carries each to its original destination."""

    def __init__(self, channels: Mapping[str, ClusterChannel]) -> None:
        self._channels = dict(channels)  # cluster -> channel
        self.ranges: dict[str, list[ipaddress.IPv4Network]] = {}
        self.counters = Counters()
        self.port = 0
        self._server: asyncio.base_events.Server | None = None

    def set_ranges(self, cluster: str, ranges: Sequence[str]) -> None:
        self.ranges[cluster] = [ipaddress.IPv4Network(r) for r in ranges]

    def cluster_of(self, ip: str) -> str | None:
        address = ipaddress.IPv4Address(ip)
        return next((c for c, nets in self.ranges.items() if any(address in n for n in nets)), None)

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        try:
            host, port = original_destination(sock)
        except OSError:
            writer.transport.abort()  # not redirected: someone dialled the proxy's port itself
            return
        cluster = self.cluster_of(host)
        self.counters.connections += 1
        if cluster is None:
            self.counters.failures += 1
            writer.transport.abort()
            return
        try:
            remote = await self._channels[cluster].open_tcp(host, port)
        except BridgeError as exc:
            self.counters.failures += 1
            log.info("transparent %s:%d: %s", host, port, exc)
            writer.transport.abort()
            return
        local = stream_from_asyncio(reader, writer)
        with contextlib.suppress(Exception):
            await splice(local, CountingStream(remote, self.counters))

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
