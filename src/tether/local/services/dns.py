"""The per-cluster DNS server: Service and endpoint names under `cluster.local`, as CoreDNS serves them.

Names answered (TTL 5 s, authoritative):

- `<svc>.<ns>.svc.cluster.local`: A with the ClusterIP; for a headless Service, one A per ready
  endpoint; CNAME for an ExternalName Service.
- `<hostname>.<svc>.<ns>.svc.cluster.local`: A for an endpoint with a hostname (others get a
  name from their address with dashes, `127-16-1-5.<svc>...`).
- `_<port>._<proto>.<svc>.<ns>.svc.cluster.local`: SRV for each named port.
- `<a-b-c-d>.<ns>.pod.cluster.local`: A with the address the name spells.

Unknown names in `cluster.local` get NXDOMAIN (or NODATA) with the zone's SOA in the authority
section.

What else it does follows the `Corefile` key of the `kube-system/coredns` ConfigMap, read at start
and after every edit (`corefile`, `dnsplugins`): server blocks per zone, `rewrite` (Semaphore's
stanza works as written), `forward` (to loopback upstreams only unless allowed), `cache`,
`kubernetes` options (`ttl`, `fallthrough`), `log`, `errors`, `loadbalance`. A plugin it does not
run, or a Corefile it cannot read, gives a Warning Event on the ConfigMap (an unreadable one
keeps the previous configuration, as CoreDNS's `reload` does). Without the ConfigMap it acts as
kubeadm's default Corefile says.

Its own log (`component_log`, served as the log of the `coredns-...` pod in `kube-system`) says
where it serves and each error, in CoreDNS's words (`[INFO]`, `[ERROR] plugin/errors: ...`); with
`TETHER_LOCAL_DNS_LOG=queries` it also logs every query as CoreDNS's `log` plugin does
(`[INFO] <client> - <id> "A IN <name> udp <size> <do> <bufsize>" NOERROR qr,aa,rd <size> <time>s`).

Where it listens: `network.dns_service_ip` port 53 when it may bind it (root), else port 10053 on
that address, else (both taken, e.g. by another cluster with the same index) a free port there.
`address_for(cluster)` says where, and the running server writes `dns.json` into the cluster's
data directory for processes outside this one. Zone building and answering are pure; the server is
one TaskGroup (UDP is served from the datagram protocol's callbacks; TCP by bounded tasks).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import ipaddress
import json
import logging
import os
import socket
import struct
import time
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tether import __version__
from tether.local.componentlog import ComponentLog
from tether.local.netns import HostFabric
from tether.local.network import ClusterNetwork
from tether.local.services.allocation import SERVICES
from tether.local.services.corefile import Config, CorefileError, compile_corefile, default_corefile
from tether.local.services.dnsplugins import Forward, Resolver
from tether.local.services.endpoints import SERVICE_NAME_LABEL, SLICES
from tether.local.services.watch import start_signals
from tether.local.store import Store, follow
from tether.net import dnsclient
from tether.net import dnswire as w
from tether.objects import Obj

if TYPE_CHECKING:
    from tether.local.cluster import LocalCluster
    from tether.local.operations import Operations

log = logging.getLogger(__name__)

DOMAIN = "cluster.local"
TTL = 5
PRIVILEGED_PORT = 53
UNPRIVILEGED_PORT = 10053
ADDRESS_FILE = "dns.json"
LOG_ENV = "TETHER_LOCAL_DNS_LOG"  # "queries": log every query (CoreDNS's `log` plugin)
CONFIG_NAMESPACE = "kube-system"
CONFIG_NAME = "coredns"
CONFIGMAPS = "/configmaps"
FORWARD_TIMEOUT_S = 2.0
RCODE_NAMES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}
TYPE_NAMES = {1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 15: "MX", 16: "TXT", 28: "AAAA", 33: "SRV",
              255: "ANY"}


@dataclass(frozen=True)
class Zone:
    domain: str
    records: Mapping[str, tuple[w.Record, ...]]  # lower-case name -> records owned by it
    names: frozenset[str]  # every name that exists (with records, or as an ancestor of one)
    soa: w.Record


def soa_record(domain: str = DOMAIN, serial: int = 1) -> w.Record:
    return w.Record.of(domain, TTL, w.SOA(f"ns.dns.{domain}", f"hostmaster.{domain}", serial, 7200, 1800,
                                          86400, TTL))


def _dashed(ip: str) -> str:
    return ip.replace(".", "-").replace(":", "-")


def _slice_endpoints(slices: Iterable[Obj], publish_not_ready: bool) -> list[tuple[Obj, Obj]]:
    """(endpoint, slice) pairs that DNS publishes: ready ones, or all with publishNotReadyAddresses."""
    found = []
    for s in slices:
        for endpoint in s.get("endpoints") or []:
            ready = (endpoint.get("conditions") or {}).get("ready")
            if publish_not_ready or ready is None or ready:
                found.append((endpoint, s))
    return found


def build_zone(services: Iterable[Obj], slices: Iterable[Obj], *, domain: str = DOMAIN, serial: int = 1) -> Zone:
    records: dict[str, list[w.Record]] = {}

    def add(name: str, rdata: w.RData) -> None:
        bucket = records.setdefault(name.lower(), [])
        record = w.Record.of(name.lower(), TTL, rdata)
        if record not in bucket:
            bucket.append(record)

    by_service: dict[tuple[str, str], list[Obj]] = {}
    for s in slices:
        meta = s.get("metadata") or {}
        svc_name = (meta.get("labels") or {}).get(SERVICE_NAME_LABEL)
        if svc_name and s.get("addressType", "IPv4") == "IPv4":
            by_service.setdefault((str(meta.get("namespace", "")), str(svc_name)), []).append(s)
    for svc in services:
        meta, spec = svc.get("metadata") or {}, svc.get("spec") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        fqdn = f"{name}.{namespace}.svc.{domain}"
        if spec.get("type") == "ExternalName":
            if spec.get("externalName"):
                add(fqdn, w.CNAME(str(spec["externalName"]).rstrip(".")))
            continue
        cluster_ip = spec.get("clusterIP")
        headless = cluster_ip == "None" or not cluster_ip
        endpoints = _slice_endpoints(by_service.get((namespace, name), []), bool(spec.get("publishNotReadyAddresses")))
        if not headless:
            add(fqdn, w.A(str(cluster_ip)))
        for endpoint, _ in endpoints:
            for address in endpoint.get("addresses") or []:
                host = f"{endpoint.get('hostname') or _dashed(str(address))}.{fqdn}"
                add(host, w.A(str(address)))
                if headless:
                    add(fqdn, w.A(str(address)))
        for port in spec.get("ports") or []:
            if not isinstance(port, dict) or not port.get("name"):
                continue
            srv_name = f"_{port['name']}._{str(port.get('protocol', 'TCP')).lower()}.{fqdn}"
            if not headless:
                add(srv_name, w.SRV(0, 100, int(port.get("port", 0)), fqdn))
                continue
            targets = []
            for endpoint, s in endpoints:
                numbers = [p.get("port") for p in s.get("ports") or [] if p.get("name") == port["name"]]
                if not numbers or not isinstance(numbers[0], int):
                    continue
                for address in endpoint.get("addresses") or []:
                    targets.append((f"{endpoint.get('hostname') or _dashed(str(address))}.{fqdn}", numbers[0]))
            for target, number in targets:
                add(srv_name, w.SRV(0, max(1, 100 // len(targets)), number, target))
    names = {domain.lower()}
    for name in records:
        labels = name.split(".")
        for i in range(len(labels)):
            suffix = ".".join(labels[i:])
            names.add(suffix)
            if suffix == domain.lower():
                break
    for namespace_name in {str((s.get("metadata") or {}).get("namespace", "")) for s in services}:
        names.add(f"{namespace_name}.svc.{domain}".lower())
    names.add(f"svc.{domain}".lower())
    names.add(f"pod.{domain}".lower())
    return Zone(domain.lower(), {k: tuple(v) for k, v in records.items()}, frozenset(names),
                soa_record(domain.lower(), serial))


def _pod_address(name: str, domain: str) -> str | None:
    """`a-b-c-d.<ns>.pod.<domain>` -> a.b.c.d (CoreDNS's `pods insecure`)."""
    suffix = f".pod.{domain}"
    if not name.endswith(suffix):
        return None
    labels = name[: -len(suffix)].split(".")
    if len(labels) != 2:
        return None
    try:
        return str(ipaddress.IPv4Address(labels[0].replace("-", ".")))
    except ValueError:
        return None


def _in_zone(name: str, domain: str) -> bool:
    return name == domain or name.endswith("." + domain)


def answer(query: w.Message, zone: Zone) -> w.Message:
    """The response to `query` from `zone` (pure)."""
    flags = w.FLAG_QR | (query.flags & w.FLAG_RD) | (query.opcode << 11)
    additional: tuple[w.Record, ...] = (w.opt_record(),) if query.opt is not None else ()

    def reply(rcode: int, *, aa: bool = False, answers: tuple[w.Record, ...] = (),
              authority: tuple[w.Record, ...] = (), extra: tuple[w.Record, ...] = ()) -> w.Message:
        return w.Message(query.id, flags | rcode | (w.FLAG_AA if aa else 0), query.questions[:1], answers,
                         authority, extra + additional)

    if query.opcode != 0:
        return reply(w.RCODE_NOTIMP)
    if len(query.questions) != 1 or query.is_response:
        return reply(w.RCODE_FORMERR)
    question = query.questions[0]
    name = question.name.rstrip(".").lower()
    if not _in_zone(name, zone.domain) or question.qclass not in (w.CLASS_IN, w.CLASS_ANY):
        return reply(w.RCODE_REFUSED)
    owner = question.name.rstrip(".")
    qtype = question.qtype

    def renamed(records: Iterable[w.Record]) -> tuple[w.Record, ...]:
        return tuple(w.Record(owner, r.rtype, r.ttl, r.rdata, r.rclass) for r in records)

    if name == zone.domain and qtype in (w.TYPE_SOA, w.TYPE_ANY):
        return reply(w.RCODE_NOERROR, aa=True, answers=renamed([zone.soa]))
    held = list(zone.records.get(name, ()))
    pod_ip = _pod_address(name, zone.domain)
    if pod_ip is not None:
        held.append(w.Record.of(name, TTL, w.A(pod_ip)))
    cname = [r for r in held if r.rtype == w.TYPE_CNAME]
    if cname and qtype != w.TYPE_CNAME:
        return reply(w.RCODE_NOERROR, aa=True, answers=renamed(cname))
    matching = [r for r in held if qtype in (r.rtype, w.TYPE_ANY)]
    if matching:
        extra: list[w.Record] = []
        for record in matching:
            if isinstance(record.rdata, w.SRV):
                extra += [r for r in zone.records.get(record.rdata.target.lower(), ()) if r.rtype == w.TYPE_A]
        return reply(w.RCODE_NOERROR, aa=True, answers=renamed(matching), extra=tuple(extra))
    if held or name in zone.names:
        return reply(w.RCODE_NOERROR, aa=True, authority=(zone.soa,))
    return reply(w.RCODE_NXDOMAIN, aa=True, authority=(zone.soa,))


def respond(data: bytes, zone: Zone, *, limit: int | None = None) -> bytes | None:
    """Bytes in, bytes out: the response to a query, or None when it is not worth one."""
    try:
        query = w.parse_message(data)
    except (w.DnsFormatError, ValueError, struct.error):
        ident = w.query_id(data)
        if ident is None or len(data) < 12:
            return None
        return w.encode_message(w.Message(ident, w.FLAG_QR | w.RCODE_FORMERR))
    if query.is_response:
        return None
    response = answer(query, zone)
    if limit is None:
        return w.encode_message(response)
    return w.encode_for_limit(response, min(limit, query.udp_limit))


def query_log_line(data: bytes, reply: bytes | None, client: tuple[Any, ...], proto: str, took_s: float) -> str:
    """One query as CoreDNS's `log` plugin prints it."""
    try:
        query = w.parse_message(data)
    except (w.DnsFormatError, ValueError, struct.error):
        return f"[INFO] {client[0]}:{client[1]} - malformed query of {len(data)} bytes"
    question = query.questions[0] if query.questions else None
    qtype = TYPE_NAMES.get(question.qtype, f"TYPE{question.qtype}") if question else "-"
    name = (question.name.rstrip(".") + ".") if question else "."
    do = "true" if query.opt is not None and query.opt.ttl & 0x8000 else "false"
    rcode, flags = "-", "-"
    if reply is not None and len(reply) >= 4:
        rcode = RCODE_NAMES.get(reply[3] & 0xF, str(reply[3] & 0xF))
        bits = (reply[2] << 8) | reply[3]
        flags = ",".join(n for n, bit in (("qr", w.FLAG_QR), ("aa", w.FLAG_AA), ("tc", 0x0200), ("rd", w.FLAG_RD),
                                          ("ra", 0x0080)) if bits & bit)
    return (f'[INFO] {client[0]}:{client[1]} - {query.id} "{qtype} IN {name} {proto} {len(data)} {do} '
            f'{query.udp_limit}" {rcode} {flags} {len(reply or b"")} {took_s:.9f}s')


# the server --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DnsConfig:
    domain: str = DOMAIN
    ports: tuple[int, ...] = (PRIVILEGED_PORT, UNPRIVILEGED_PORT, 0)  # tried in order; 0 = any free
    max_udp_bytes: int = 4096
    max_tcp_connections: int = 64
    tcp_idle_timeout_s: float = 10.0
    close_timeout_s: float = 1.0
    log_queries: bool = False  # every query in the component log, as CoreDNS's `log` plugin


def _bind_pair(ip: str, port: int, fabric: HostFabric | None = None) -> tuple[socket.socket, socket.socket]:
    """A UDP and a TCP socket on the same ip:port (port 0: a free one both can have), made
    where the cluster's addresses live (`fabric`; default: this namespace)."""
    make = fabric.socket if fabric is not None else socket.socket
    for _ in range(5 if port == 0 else 1):
        udp = make(socket.AF_INET, socket.SOCK_DGRAM)
        tcp = make(socket.AF_INET, socket.SOCK_STREAM)
        try:
            udp.bind((ip, port))
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind((ip, udp.getsockname()[1]))
            tcp.listen(64)
        except OSError:
            udp.close()
            tcp.close()
            if port != 0:
                raise
            continue
        udp.setblocking(False)
        tcp.setblocking(False)
        return udp, tcp
    raise OSError(errno.EADDRINUSE, f"no free port on {ip} for both UDP and TCP")


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, server: DnsServer) -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        began = time.perf_counter()
        try:
            outcome = self.server.resolve(data, 1)
        except Exception as exc:  # one bad query must not stop the server
            log.exception("dns: failed to answer a UDP query from %s", addr)
            self.server.log_error(f"answering a UDP query from {addr[0]}:{addr[1]}: {exc!r}")
            return
        if isinstance(outcome, Forward):
            self.server.spawn(self._forwarded(data, outcome, addr, began))
            return
        self._reply(data, outcome, addr, began)

    def _reply(self, data: bytes, reply: bytes | None, addr: tuple[str | Any, int], began: float) -> None:
        if self.server.logs_queries:
            self.server.log_query(data, reply, addr, "udp", time.perf_counter() - began)
        if reply is not None and self.transport is not None and not self.transport.is_closing():
            self.transport.sendto(reply, addr)

    async def _forwarded(self, data: bytes, step: Forward, addr: tuple[str | Any, int], began: float) -> None:
        self._reply(data, await self.server.forward(data, step), addr, began)


class DnsServer:
    def __init__(self, store: Store, ip: str, *, config: DnsConfig | None = None,
                 address_file: Path | None = None, fabric: HostFabric | None = None,
                 component_log: ComponentLog | None = None, ops: Operations | None = None) -> None:
        self.store = store
        self.ops = ops
        self.ip = ip
        self.fabric = fabric or HostFabric(ClusterNetwork.rootless(0))
        self.config = config or DnsConfig(log_queries=os.environ.get(LOG_ENV, "") == "queries")
        self.component_log = component_log
        self.address_file = address_file
        self.address: tuple[str, int] | None = None  # where it listens, once it does
        self.ready = asyncio.Event()
        self._changed = asyncio.Event()
        self._zone: Zone | None = None
        self._serial = 0
        self._tcp_active = 0
        self._corefile: str | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.resolver = Resolver(self._compile(default_corefile(self.config.domain)), self._answer,
                                 self.config.domain, warn=self.log_line, max_udp=self.config.max_udp_bytes)

    def zone(self) -> Zone:
        if self._zone is None or self._changed.is_set():
            self._changed.clear()
            self._serial += 1
            self._zone = build_zone(self.store.list_objects(SERVICES), self.store.list_objects(SLICES),
                                    domain=self.config.domain, serial=self._serial)
            self.resolver.changed()
        return self._zone

    def _answer(self, query: w.Message) -> w.Message:
        return answer(query, self.zone())

    @property
    def logs_queries(self) -> bool:
        return self.config.log_queries or any(b.log for b in self.resolver.config.blocks)

    def resolve(self, data: bytes, transport: int) -> bytes | Forward | None:
        self.zone()  # rebuilt (and the answer cache emptied) when Services or slices changed
        return self.resolver.resolve(data, transport)

    async def forward(self, data: bytes, step: Forward) -> bytes | None:
        try:
            raw = await dnsclient.exchange(step.query, step.upstreams, tcp=step.tcp, timeout_s=FORWARD_TIMEOUT_S)
        except dnsclient.DnsClientError as exc:
            if any(b.errors for b in self.resolver.config.blocks):
                self.log_error(f"forwarding failed: {exc}")
            return dnsclient.servfail(data)
        return step.finish(raw)

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # the Corefile ----------------------------------------------------------------------------

    def _compile(self, text: str) -> Config:
        config = compile_corefile(text)
        for warning in config.warnings:
            self.log_line(f"[WARNING] {warning}")
        return config

    def _configmap_changed(self) -> None:
        found = self.store.get(CONFIGMAPS, CONFIG_NAMESPACE, CONFIG_NAME)
        text = str(((found or {}).get("data") or {}).get("Corefile") or "") or default_corefile(self.config.domain)
        if text == self._corefile:
            return
        self._corefile = text
        try:
            config = compile_corefile(text)
        except CorefileError as exc:
            self.log_error(f"Corefile: {exc}; keeping the previous configuration")
            self._event(found, "Warning", "InvalidCorefile", f"Corefile not loaded: {exc}; the previous one stays")
            return
        self.resolver.changed(config)
        self.log_line("[INFO] Reloading\n[INFO] plugin/reload: Running configuration SHA512 = "
                      + hashlib.sha512(text.encode()).hexdigest())
        for warning in config.warnings:
            self.log_line(f"[WARNING] {warning}")
            self._event(found, "Warning", "UnsupportedCorefile", warning)
        if found is not None and not config.warnings:
            self._event(found, "Normal", "Reloaded", "Corefile loaded by the cluster DNS")

    def _event(self, configmap: Obj | None, event_type: str, reason: str, message: str) -> None:
        if configmap is None or self.ops is None:
            return
        from tether.local import events

        events.record(self.ops, {"apiVersion": "v1", "kind": "ConfigMap", **configmap}, event_type=event_type,
                      reason=reason, message=message, component="coredns")

    def log_line(self, text: str) -> None:
        if self.component_log is not None:
            self.component_log.write(text)

    def log_error(self, text: str) -> None:
        self.log_line(f"[ERROR] plugin/errors: {text}")

    def log_query(self, data: bytes, reply: bytes | None, client: tuple[Any, ...], proto: str, took_s: float) -> None:
        self.log_line(query_log_line(data, reply, client, proto, took_s))

    def _bind(self) -> tuple[socket.socket, socket.socket]:
        last: OSError | None = None
        for port in self.config.ports:
            try:
                return _bind_pair(self.ip, port, self.fabric)
            except OSError as exc:
                last = exc
                log.debug("dns: cannot listen on %s:%d: %s", self.ip, port, exc)
        self.log_error(f"cannot listen on {self.ip}: {last}")
        raise last or OSError(errno.EADDRINUSE, "no port to listen on")

    async def run(self) -> None:
        udp_sock, tcp_sock = self._bind()
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: _Udp(self), sock=udp_sock)
        self.address = (self.ip, int(udp_sock.getsockname()[1]))
        self._publish()
        self.ready.set()
        log.info("cluster DNS for %s on %s:%d (UDP and TCP)", self.config.domain, *self.address)
        self.log_line(f"{self.config.domain}.:{self.address[1]}\n"
                      f"[INFO] plugin/kubernetes: answering {self.config.domain} from Services and EndpointSlices "
                      f"on {self.address[0]}:{self.address[1]} (UDP and TCP); other names as the Corefile "
                      f"of {CONFIG_NAMESPACE}/{CONFIG_NAME} says\n"
                      f"[INFO] plugin/log: queries are {'logged' if self.config.log_queries else 'not logged'} "
                      f"(set {LOG_ENV}=queries to log them)\n"
                      f"tether-dns-{__version__} (CoreDNS-compatible answers)")
        try:
            async with asyncio.TaskGroup() as group:
                start_signals(group, self.store, (SERVICES, SLICES), self._changed)
                group.create_task(follow(self.store, CONFIGMAPS, CONFIG_NAMESPACE,
                                         on_event=lambda _event: self._configmap_changed(),
                                         resync=self._configmap_changed))
                group.create_task(self._accept(group, tcp_sock))
        finally:
            self.log_line("[INFO] SIGTERM: Shutting down servers then terminating")
            for task in list(self._tasks):
                task.cancel()
            transport.close()
            tcp_sock.close()
            if self.address_file is not None:
                with contextlib.suppress(OSError):
                    self.address_file.unlink()

    def _publish(self) -> None:
        if self.address_file is None or self.address is None:
            return
        with contextlib.suppress(OSError):
            self.address_file.write_text(json.dumps({"ip": self.address[0], "port": self.address[1]}))

    async def _accept(self, group: asyncio.TaskGroup, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(sock)
            if self._tcp_active >= self.config.max_tcp_connections:
                conn.close()
                continue
            conn.setblocking(False)
            self._tcp_active += 1
            group.create_task(self._serve_tcp(conn))

    async def _serve_tcp(self, conn: socket.socket) -> None:
        writer: asyncio.StreamWriter | None = None
        try:
            reader, writer = await asyncio.open_connection(sock=conn)
            while True:
                try:
                    header = await asyncio.wait_for(reader.readexactly(2), self.config.tcp_idle_timeout_s)
                    (length,) = struct.unpack("!H", header)
                    data = await asyncio.wait_for(reader.readexactly(length), self.config.tcp_idle_timeout_s)
                except (asyncio.IncompleteReadError, TimeoutError, OSError):
                    return
                began = time.perf_counter()
                outcome = self.resolve(data, 0)
                reply = await self.forward(data, outcome) if isinstance(outcome, Forward) else outcome
                if self.logs_queries:
                    self.log_query(data, reply, writer.get_extra_info("peername") or ("-", 0), "tcp",
                                   time.perf_counter() - began)
                if reply is None:
                    return
                writer.write(struct.pack("!H", len(reply)) + reply)
                await asyncio.wait_for(writer.drain(), self.config.tcp_idle_timeout_s)
        except (OSError, TimeoutError):
            return
        finally:
            self._tcp_active -= 1
            if writer is None:
                conn.close()
            else:
                writer.close()
                with contextlib.suppress(OSError, TimeoutError):
                    await asyncio.wait_for(writer.wait_closed(), self.config.close_timeout_s)


def planned_port() -> int:
    return PRIVILEGED_PORT if hasattr(os, "geteuid") and os.geteuid() == 0 else UNPRIVILEGED_PORT


def address_for(cluster: LocalCluster) -> tuple[str, int]:
    """Where the cluster's DNS server listens (or will: port 53 as root, else 10053)."""
    for component in getattr(cluster, "components", []):
        if isinstance(component, DnsServer):
            if component.address is not None:
                return component.address
            return component.ip, planned_port()
    return cluster.network.dns_service_ip, planned_port()


def read_address(data_dir: Path) -> tuple[str, int] | None:
    """The address a running cluster's DNS server published in its data directory."""
    try:
        found = json.loads((data_dir / ADDRESS_FILE).read_text())
        return str(found["ip"]), int(found["port"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
