"""Where a local cluster's network lives: the host's loopback (rootless) or network namespaces.

Every part that binds or dials a cluster address (service proxy, DNS, kubelet, probes, port-forward)
goes through the cluster's *fabric* (`LocalCluster.fabric`), so the two modes differ only here:

- `HostFabric` (rootless, the default): plain sockets in the caller's namespace; pod processes
  run as they are. Cluster addresses are 127.0.0.0/8 ranges (see `tether.local.network`).
- `NetnsFabric` (`tether local up --netns`, root): cluster index i gets

      tether-<i>          the router namespace: bridge `br0` with the fabric's .1, an AnyIP route
                          (`local <service cidr> dev lo`) so every ClusterIP is bindable there,
                          a route to each node's pod /24 via that node, `to-host` (the host
                          link, below) and, once joined (underlay), `to-<j>` to cluster j
      tether-<i>-n<k>     node k: `eth0` (veth to `n<k>` on the bridge) with its InternalIP, the
                          first address of its pod /24 on `lo` (its source toward joined peers,
                          and its pods' gateway), a route to every other node's pod /24 via that
                          node (host-gw style), the service range via the router, a /32 route
                          to each of its pods through the pod's veth, and `unreachable` for the
                          rest of its own pod /24
      tether-<i>-p<hex>   a pod (not host-network): `eth0`, veth to `p<hex>` in its node, with
                          the pod IP as /32 and a default route via the node's pod-range
                          address; made before the containers start, removed when the pod
                          stops (`pod_commands`, CNI ptp style)

  Pods run in their own namespace (host-network pods in their node's) through `ip netns exec`,
  which also bind-mounts `/etc/netns/<ns>/resolv.conf`: the cluster DNS, search
  `<pod namespace>.svc.cluster.local svc.cluster.local cluster.local`. The service proxy and the DNS server listen once, inside the
  router namespace, on the service addresses (one socket per Service port, whatever the node
  count); nodes reach them through their route to the service range. Dials from the cluster's
  own components go out of the router namespace (which routes to every pod), except to loopback
  addresses: those are the host's (the API server behind the `kubernetes` Service).

  How the namespaces meet the host (the host side, `HostPlan`; tagged `proto 116` on every route
  tether adds, so no other route is ever changed):

      tether-<i>-sink     a device that drops what it is given (a bridge with no ports and ARP
                          off): the host routes the cluster's pod, Service and fabric ranges, the
                          underlay and its IP pools' ranges there (metric 4000+i, so a route
                          someone else made for the same range wins). A packet for an unused
                          cluster address ends there, counted, after nftables' output and
                          postrouting hooks saw it (unlike `unreachable`/`blackhole` routes);
                          it never takes the default route
      tether-<i>-link     veth to `to-host` in the router: each ClusterIP (and the DNS address)
                          is a /32 through it, so `curl http://<ClusterIP>/` on the host reaches
                          the service proxy (`HostRoutes` keeps the /32s in step with Services)

  Devices are named by the cluster index and carry the data directory's `owner_tag` as alias;
  `setup` first removes what an earlier run of the index left (a `kill -9`), `teardown` removes
  the namespaces and devices (their routes go with them).

  Clusters meet each other, and their pods meet the host, only through the underlay
  (`tether.local.underlay`: `join`/`leave`); until then a pod of one cluster gets ENETUNREACH for
  another cluster's addresses and for the host's. Namespace names carry the cluster index, which
  `network.claim_index` holds machine-wide, so two data directories never clash.

  Pods of a Calico IPPool outside the node's pod /24 get a /32 route to their node in the router
  and in every other node (`pool_addresses`).

Python 3.11 has no `os.setns`: `in_namespace` calls setns(2) through ctypes in a short-lived
thread and runs its work there: `socket_in` creates a socket (it belongs to the namespace it was
created in, whatever thread uses it later) for asyncio to use with `sock=`; `enable_forwarding`
writes /proc/sys/net, which belongs to the namespace of whoever opens it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import ipaddress
import json
import logging
import os
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any, TypeVar

from tether.local.network import (
    NETNS,
    ROOTLESS,
    UNDERLAY_CIDR,
    UNDERLAY_HOST_IP,
    ClusterNetwork,
    is_local_range,
)

log = logging.getLogger(__name__)

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
T = TypeVar("T")

NETNS_DIR = Path("/run/netns")
ETC_NETNS_DIR = Path("/etc/netns")
CLONE_NEWNET = 0x40000000
IP_TIMEOUT_S = 10.0
SETNS_TIMEOUT_S = 5.0
STREAM_LIMIT = 2**16
BRIDGE = "br0"
NODE_LINK = "eth0"
DNS_DOMAIN = "cluster.local"
HOST_LINK = "to-host"  # the router namespace's end of the host link
RTPROTO = "116"  # every route tether adds carries this tag; no other route is ever changed
SINK_METRIC = 4000  # + the cluster index: a route someone else adds for the same range wins
UNDERLAY_METRIC = 10  # a join's routes in a router (a kernel route to the same place stays)


class NetnsError(Exception):
    """A netns-mode failure, with what to do about it in the message."""


def unavailable_reason() -> str | None:
    """Why netns mode cannot run here (None when it can)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return ("--netns creates network namespaces and needs root: run `sudo tether local up "
                "--netns ...`, or leave out --netns for the rootless 127.0.0.0/8 address plan")
    if shutil.which("ip") is None:
        return "--netns needs the `ip` command: install iproute2 (e.g. `apt-get install iproute2`)"
    if not Path("/proc/self/ns/net").exists():
        return "--netns needs a kernel with network namespaces (/proc/self/ns/net is missing)"
    return None


def router_namespace(index: int) -> str:
    return f"tether-{index}"


def node_namespace(index: int, node: int) -> str:
    return f"tether-{index}-n{node}"


def sink_device(index: int) -> str:
    return f"tether-{index}-sink"


def link_device(index: int) -> str:
    return f"tether-{index}-link"


def peer_link(index: int) -> str:
    """The device in a router namespace that leads to cluster `index`'s router (a join)."""
    return f"to-{index}"


def pod_namespace(index: int, uid: str) -> str:
    """A pod's own network namespace (netns mode): named by a digest of its uid, so a name is
    short, fixed for the pod's life and found again after a crash (`owned_namespace`)."""
    return f"tether-{index}-p{_pod_key(uid)}"


def pod_link(uid: str) -> str:
    """The node's end of a pod's veth (at most 15 characters, as Linux wants)."""
    return f"p{_pod_key(uid)}"


def _pod_key(uid: str) -> str:
    return hashlib.sha256(uid.encode()).hexdigest()[:12]


def owned_namespace(index: int, name: str) -> bool:
    """Whether `name` is one of the namespaces cluster index `index` creates (exact forms only)."""
    return re.fullmatch(rf"tether-{index}(-n\d+|-p[0-9a-f]{{12}})?", name) is not None


# the plan (pure) ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FabricPlan:
    """The namespaces, links, addresses and routes of one netns-mode cluster, as `ip` argv lists."""

    network: ClusterNetwork

    def __post_init__(self) -> None:
        if self.network.fabric_cidr is None:
            raise NetnsError(f"cluster index {self.network.index} is not in netns mode")

    @property
    def router(self) -> str:
        return router_namespace(self.network.index)

    def node(self, slot: int) -> str:
        return node_namespace(self.network.index, slot)

    def slot_of(self, node_ip: str) -> int | None:
        """The node slot whose InternalIP is `node_ip` (None when it is not a fabric address)."""
        fabric = self.network.fabric_cidr
        assert fabric is not None
        try:
            address = ipaddress.IPv4Address(node_ip)
        except ValueError:
            return None
        slot = int(address) - int(fabric.network_address) - 2
        return slot if address in fabric and slot >= 0 else None

    def router_commands(self) -> list[list[str]]:
        fabric = self.network.fabric_cidr
        assert fabric is not None
        r = self.router
        return [
            ["netns", "add", r],
            ["-n", r, "link", "set", "lo", "up"],
            ["-n", r, "link", "add", BRIDGE, "type", "bridge"],
            ["-n", r, "addr", "add", f"{self.network.router_ip}/{fabric.prefixlen}", "dev", BRIDGE],
            ["-n", r, "link", "set", BRIDGE, "up"],
            # AnyIP: every service address is local here, so the proxy and DNS bind any of them.
            ["-n", r, "route", "add", "local", str(self.network.service_cidr), "dev", "lo"],
        ]

    def node_commands(self, slot: int, peers: Sequence[int]) -> list[list[str]]:
        """Create node `slot` and route between it and the existing nodes `peers`."""
        fabric = self.network.fabric_cidr
        assert fabric is not None
        r, n = self.router, self.node(slot)
        ip, cidr = self.network.node_ip(slot), str(self.network.node_pod_cidr(slot))
        link = f"n{slot}"
        commands = [
            ["netns", "add", n],
            ["-n", n, "link", "set", "lo", "up"],
            ["-n", r, "link", "add", link, "type", "veth", "peer", "name", NODE_LINK, "netns", n],
            ["-n", r, "link", "set", link, "master", BRIDGE],
            ["-n", r, "link", "set", link, "up"],
            ["-n", n, "addr", "add", f"{ip}/{fabric.prefixlen}", "dev", NODE_LINK],
            ["-n", n, "addr", "add", f"{self.network.node_pod_gateway(slot)}/32", "dev", "lo"],
            ["-n", n, "link", "set", NODE_LINK, "up"],
            ["-n", n, "route", "add", str(self.network.service_cidr), "via", self.network.router_ip],
            ["-n", n, "route", "add", "unreachable", cidr],
            ["-n", r, "route", "add", cidr, "via", ip],
        ]
        for peer in peers:
            if peer == slot:
                continue
            peer_ip, peer_cidr = self.network.node_ip(peer), str(self.network.node_pod_cidr(peer))
            commands.append(["-n", n, "route", "add", peer_cidr, "via", peer_ip])
            commands.append(["-n", self.node(peer), "route", "add", cidr, "via", ip])
        return commands

    def pod_commands(self, slot: int, uid: str, pod_ip: str) -> list[list[str]]:
        """Give a pod its own namespace joined to node `slot` by a veth, as a CNI ptp plugin
        does: the pod's address on its `eth0` (a /32), its default route via the node's
        pod-range address (on the node's `lo`; the node answers ARP for it on any link), and on
        the node a /32 route to the pod through the veth (more specific than the node's
        `unreachable` for the rest of its /24)."""
        n, p, link = self.node(slot), pod_namespace(self.network.index, uid), pod_link(uid)
        gateway = self.network.node_pod_gateway(slot)
        return [
            ["netns", "add", p],
            ["-n", p, "link", "set", "lo", "up"],
            ["-n", n, "link", "add", link, "type", "veth", "peer", "name", NODE_LINK, "netns", p],
            ["-n", n, "link", "set", "dev", link, "addrgenmode", "none"],
            ["-n", n, "link", "set", link, "up"],
            ["-n", p, "addr", "add", f"{pod_ip}/32", "dev", NODE_LINK],
            ["-n", p, "link", "set", NODE_LINK, "up"],
            ["-n", p, "route", "add", f"{gateway}/32", "dev", NODE_LINK, "scope", "link"],
            ["-n", p, "route", "add", "default", "via", gateway, "dev", NODE_LINK],
            ["-n", n, "route", "replace", f"{pod_ip}/32", "dev", link, "scope", "link", "proto", RTPROTO],
        ]

    def resolv_conf(self, namespace: str = "default") -> str:
        return (f"# written by tether for cluster index {self.network.index}\n"
                f"nameserver {self.network.dns_service_ip}\n"
                f"search {namespace}.svc.{DNS_DOMAIN} svc.{DNS_DOMAIN} {DNS_DOMAIN}\n"
                "options ndots:5\n")


@dataclass(frozen=True)
class HostPlan:
    """How one netns-mode cluster meets the host namespace (pure; see the module docstring)."""

    network: ClusterNetwork
    owner: str = ""  # the devices' alias: whose they are after a crash (`owner_tag` of the data dir)

    @property
    def sink(self) -> str:
        return sink_device(self.network.index)

    @property
    def link(self) -> str:
        return link_device(self.network.index)

    @property
    def metric(self) -> str:
        return str(SINK_METRIC + self.network.index)

    def device_commands(self) -> list[list[str]]:
        """The sink and the host link. The sink is a bridge with no ports and ARP off: every
        packet routed to it is counted (`ip -s link`) and dropped, after the output and
        postrouting hooks saw it (a dummy device would do the same, but its module is not in
        every kernel)."""
        sink, link, router = self.sink, self.link, router_namespace(self.network.index)
        own = self.network.underlay_ip
        return [
            ["link", "add", sink, "type", "bridge"],
            ["link", "set", "dev", sink, "addrgenmode", "none"],  # no IPv6 link-local chatter
            ["link", "set", "dev", sink, "arp", "off", "multicast", "off"],
            *([["link", "set", "dev", sink, "alias", self.owner]] if self.owner else []),
            ["link", "set", sink, "up"],
            ["link", "add", link, "type", "veth", "peer", "name", HOST_LINK, "netns", router],
            ["link", "set", "dev", link, "addrgenmode", "none"],
            *([["link", "set", "dev", link, "alias", self.owner]] if self.owner else []),
            ["addr", "add", UNDERLAY_HOST_IP, "peer", f"{own}/32", "dev", link],
            ["link", "set", link, "up"],
            ["-n", router, "addr", "add", own, "peer", f"{UNDERLAY_HOST_IP}/32", "dev", HOST_LINK],
            ["-n", router, "link", "set", HOST_LINK, "up"],
        ]

    def sink_routes(self, pools: Iterable[IPv4Network] = ()) -> frozenset[IPv4Network]:
        """Everything of this cluster the host must never send out: its pod, Service and fabric
        ranges, the underlay, and the IP pools its pods may take addresses from."""
        own = self.network.own_ranges
        extra = {p for p in pools if not is_local_range(p) and not any(p.subnet_of(o) for o in own)}
        return frozenset({*own, UNDERLAY_CIDR, *extra})

    def link_routes(self, service_ips: Iterable[str]) -> frozenset[IPv4Network]:
        """The addresses the host reaches through the link: each ClusterIP and the cluster DNS."""
        wanted: set[IPv4Network] = {IPv4Network(f"{self.network.dns_service_ip}/32")}
        for text in service_ips:
            try:
                address = IPv4Address(text)
            except ValueError:
                continue  # "None" (headless), IPv6
            if address in self.network.service_cidr:
                wanted.add(IPv4Network(f"{address}/32"))
        return frozenset(wanted)

    def sink_route(self, verb: str, dst: IPv4Network) -> list[str]:
        return ["route", verb, str(dst), "dev", self.sink, "proto", RTPROTO, "metric", self.metric]

    def link_route(self, verb: str, dst: IPv4Network) -> list[str]:
        if verb == "del":
            return ["route", "del", str(dst), "dev", self.link, "proto", RTPROTO]
        return ["route", verb, str(dst), "via", self.network.underlay_ip, "dev", self.link, "onlink",
                "proto", RTPROTO]


def shadowed(routes_json: str, sunk: Iterable[IPv4Network]) -> list[str]:
    """Routes tether did not make that win over a sink route (as specific or more, and any
    metric beats the sink's): what they cover goes their way from the host, not to the sink."""
    found: list[str] = []
    try:
        entries = json.loads(routes_json or "[]")
    except ValueError:
        return found
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or str(entry.get("protocol")) == RTPROTO:
            continue
        device = str(entry.get("dev", ""))
        try:
            dst = IPv4Network(str(entry.get("dst")), strict=False)
        except ValueError:
            continue  # default: every sink route is more specific
        for mine in sorted(sunk, key=_route_key):
            if dst.overlaps(mine) and dst.prefixlen >= mine.prefixlen and not device.startswith("tether-"):
                found.append(f"the host's route {dst} dev {device or '?'} covers part of {mine}: from the host, "
                             "those addresses go there, not to this cluster; use a range this machine does not")
    return found


def route_changes(current: Iterable[IPv4Network], desired: Iterable[IPv4Network],
                  command: Callable[[str, IPv4Network], list[str]]) -> list[list[str]]:
    """The `ip route` commands that turn `current` into `desired` (removals first)."""
    have, want = set(current), set(desired)
    ordered = sorted(have - want, key=_route_key) + sorted(want - have, key=_route_key)
    return [command("del" if dst in have else "replace", dst) for dst in ordered]


def _route_key(dst: IPv4Network) -> tuple[int, int]:
    return (int(dst.network_address), dst.prefixlen)


# running `ip` ------------------------------------------------------------------------------------


def _ip_binary() -> str:
    found = shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin:/usr/bin:/bin")
    if found is None:
        raise NetnsError("the `ip` command is missing: install iproute2 (e.g. `apt-get install iproute2`)")
    return found


async def run_ip(args: Sequence[str], *, timeout_s: float = IP_TIMEOUT_S, check: bool = True) -> str:
    """Run `ip <args>`; its stdout. Raises NetnsError (with the command and its stderr)."""
    argv = [_ip_binary(), *args]
    log.debug("netns: %s", " ".join(argv))
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise NetnsError(f"`{' '.join(argv)}` did not finish within {timeout_s:.0f}s") from None
    if check and process.returncode != 0:
        raise NetnsError(f"`{' '.join(argv)}` failed (exit {process.returncode}): "
                         f"{err.decode(errors='replace').strip()}")
    return out.decode(errors="replace")


def run_ip_sync(args: Sequence[str], *, timeout_s: float = IP_TIMEOUT_S) -> bool:
    """`ip <args>` from synchronous code (teardown after a stop); whether it succeeded."""
    argv = [_ip_binary(), *args]
    log.debug("netns: %s", " ".join(argv))
    try:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s,
                                check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("netns: `%s` failed: %s", " ".join(argv), exc)
        return False
    if result.returncode != 0:
        log.debug("netns: `%s` exit %d: %s", " ".join(argv), result.returncode,
                  result.stderr.decode(errors="replace").strip())
    return result.returncode == 0


def list_namespaces() -> list[str]:
    """The named network namespaces (`ip netns list`, read from /run/netns)."""
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir())
    except OSError:
        return []


def delete_namespaces(names: Sequence[str]) -> list[str]:
    """Delete these namespaces (exact names) and their /etc/netns files; the ones still there."""
    for name in names:
        if (NETNS_DIR / name).exists():
            run_ip_sync(["netns", "del", name])
        shutil.rmtree(ETC_NETNS_DIR / name, ignore_errors=True)
    return [name for name in names if (NETNS_DIR / name).exists()]


def ip_output_sync(args: Sequence[str], *, timeout_s: float = IP_TIMEOUT_S) -> str | None:
    """`ip <args>`'s stdout from synchronous code (None when it failed)."""
    argv = [_ip_binary(), *args]
    try:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s,
                                check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("netns: `%s` failed: %s", " ".join(argv), exc)
        return None
    return result.stdout.decode(errors="replace") if result.returncode == 0 else None


def parse_routes(text: str | None, *, device_prefix: str = "") -> set[IPv4Network]:
    """The IPv4 destinations in `ip -j route show` output (`default` and IPv6 left out), of
    routes whose device starts with `device_prefix` when one is given."""
    found: set[IPv4Network] = set()
    try:
        entries = json.loads(text or "[]")
    except ValueError:
        return found
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or not str(entry.get("dev", "")).startswith(device_prefix):
            continue
        with contextlib.suppress(ValueError, TypeError):
            found.add(IPv4Network(str(entry.get("dst")), strict=False))
    return found


def _tagged_args(namespace: str | None, device: str | None) -> list[str]:
    return [*(["-n", namespace] if namespace else []), "-j", "-4", "route", "show",
            *(["dev", device] if device else []), "proto", RTPROTO]


async def tagged_routes(namespace: str | None = None, device: str | None = None) -> set[IPv4Network]:
    """The routes tether added in `namespace` (None: the host's), on `device` if given."""
    return parse_routes(await run_ip(_tagged_args(namespace, device)))


def device_exists(name: str, namespace: str | None = None) -> bool:
    return ip_output_sync([*(["-n", namespace] if namespace else []), "link", "show", "dev", name]) is not None


def forget_routes_to(index: int) -> None:
    """Remove the routes other clusters' namespaces hold toward cluster `index` (left by a join):
    a cluster that went away, or comes back unjoined, leaves no path to its addresses behind.
    The routes in their routers went with the link; their nodes' routes are removed here."""
    network = ClusterNetwork.netns(index)
    ranges = (*network.own_ranges, IPv4Network(f"{network.underlay_ip}/32"))
    for name in list_namespaces():
        found = re.fullmatch(r"tether-(\d+)(-n\d+)?", name)
        if found is None or int(found.group(1)) == index:
            continue
        for dst in parse_routes(ip_output_sync(_tagged_args(name, None))):
            if any(dst.subnet_of(r) for r in ranges):
                run_ip_sync(["-n", name, "route", "del", str(dst), "proto", RTPROTO])


def owner_tag(data_dir: Path) -> str:
    """What marks a cluster's host devices as its own (an alias is at most 255 bytes; a path
    may be longer)."""
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
    return f"tether cluster {digest}"


def remove_devices_of(index: int, owner: str) -> list[str]:
    """Remove cluster index `index`'s host devices if `owner` made them (their alias says so),
    even while another cluster holds the index: a rootless holder has no such devices, and a
    netns holder's carry its own data directory. The devices left."""
    removed: list[str] = []
    for device in (link_device(index), sink_device(index)):
        shown = ip_output_sync(["-j", "link", "show", "dev", device])
        with contextlib.suppress(ValueError, IndexError, AttributeError, TypeError):
            if owner and json.loads(shown or "[]")[0].get("ifalias") == owner:
                run_ip_sync(["link", "del", device])
                removed.append(device)
    return [d for d in removed if device_exists(d)]


def teardown_index(index: int) -> list[str]:
    """Remove every namespace and host device cluster index `index` created (nodes first), and
    the routes other clusters hold toward it; the namespaces and devices left."""
    try:
        configured = [p.name for p in ETC_NETNS_DIR.iterdir()]
    except OSError:
        configured = []
    owned = sorted({n for n in [*list_namespaces(), *configured] if owned_namespace(index, n)})
    owned.sort(key=lambda n: n == router_namespace(index))  # the router last
    forget_routes_to(index)
    devices = [link_device(index), sink_device(index)]  # their routes go with them
    for device in devices:
        if device_exists(device):
            run_ip_sync(["link", "del", device])
    left = delete_namespaces(owned)
    return left + [d for d in devices if device_exists(d)]


# sockets inside a namespace ----------------------------------------------------------------------


_libc: ctypes.CDLL | None = None


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"setns: {os.strerror(code)}")


def in_namespace(namespace: str, work: Callable[[], T], what: str) -> T:
    """`work()`'s result, run in network namespace `namespace` (a name under /run/netns).

    setns(2) runs in a throwaway thread, so no other thread ever changes namespace.
    """
    result: list[T | BaseException] = []

    def run() -> None:
        try:
            fd = os.open(NETNS_DIR / namespace, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            result.append(work())
        except BaseException as exc:
            result.append(exc)

    thread = threading.Thread(target=run, name=f"setns-{namespace}", daemon=True)
    thread.start()
    thread.join(SETNS_TIMEOUT_S)
    if not result:
        raise NetnsError(f"{what} in namespace {namespace} took over {SETNS_TIMEOUT_S:.0f}s")
    found = result[0]
    if isinstance(found, BaseException):
        raise NetnsError(f"{what} in network namespace {namespace} failed: {found}; "
                         f"does /run/netns/{namespace} exist (is the cluster up in --netns mode)?")
    return found


def socket_in(namespace: str, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
    """A new socket that belongs to network namespace `namespace` (it stays there, whatever
    thread uses it later)."""
    return in_namespace(namespace, lambda: socket.socket(family, kind), "creating a socket")


def enable_forwarding(namespace: str) -> None:
    """Let `namespace` route between its links (a router joined to the host or a cluster).
    /proc/sys/net belongs to the namespace of whoever opens it, hence the setns thread."""

    def write() -> None:
        Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")

    in_namespace(namespace, write, "enabling forwarding")


async def connect_in(namespace: str | None, host: str, port: int, *, timeout_s: float) -> socket.socket:
    """A TCP socket connected to host:port from `namespace` (None: this process's namespace)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket_in(namespace, family) if namespace else socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, (host, port)), timeout_s)
    except BaseException:
        sock.close()
        raise
    return sock


async def open_connection_in(namespace: str | None, host: str, port: int, *, timeout_s: float,
                             limit: int = STREAM_LIMIT, ssl_context: ssl.SSLContext | None = None,
                             server_hostname: str | None = None) -> Streams:
    """asyncio streams to host:port, connected from `namespace` within `timeout_s`."""
    if namespace is None:
        return await asyncio.wait_for(
            asyncio.open_connection(host, port, limit=limit, ssl=ssl_context, server_hostname=server_hostname),
            timeout_s)
    sock = await connect_in(namespace, host, port, timeout_s=timeout_s)
    try:
        return await asyncio.wait_for(
            asyncio.open_connection(sock=sock, limit=limit, ssl=ssl_context,
                                    server_hostname=(server_hostname or host) if ssl_context else None),
            timeout_s)
    except BaseException:
        sock.close()
        raise


def exec_prefix(namespace: str) -> list[str]:
    """The argv prefix that runs a command in `namespace` with its /etc/netns files."""
    return [_ip_binary(), "netns", "exec", namespace]


# the fabrics -------------------------------------------------------------------------------------


class HostFabric:
    """Rootless: cluster addresses are the host's loopback; everything runs where it is."""

    mode = ROOTLESS

    def __init__(self, network: ClusterNetwork) -> None:
        self.network = network

    @property
    def namespaces(self) -> list[str]:
        return []

    @property
    def node_port_host(self) -> str:
        return "127.0.0.1"

    async def setup(self) -> None:
        return None

    async def teardown(self) -> None:
        return None

    def socket(self, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
        """A socket for a listener on a cluster address (service proxy, DNS)."""
        return socket.socket(family, kind)

    async def open_connection(self, host: str, port: int, *, timeout_s: float, limit: int = STREAM_LIMIT,
                              ssl_context: ssl.SSLContext | None = None,
                              server_hostname: str | None = None) -> Streams:
        """Streams to a cluster address (pod, service, node) as the cluster's own parts reach it."""
        return await open_connection_in(None, host, port, timeout_s=timeout_s, limit=limit,
                                        ssl_context=ssl_context, server_hostname=server_hostname)

    def namespace_of(self, pod: Mapping[str, Any]) -> str | None:
        """The network namespace the pod's processes run in (None: the host's)."""
        return None

    def command_prefix(self, pod: Mapping[str, Any]) -> list[str]:
        """What to put before a pod's command so it runs in the pod's network."""
        return []

    async def attach_pod(self, uid: str, node_ip: str, pod_ip: str, namespace: str = "default") -> None:
        """Give the pod its address (netns: its own network namespace) before its containers
        start; `namespace` is its Kubernetes namespace (its resolv.conf search path)."""
        return None

    async def sync_host_routes(self, service_ips: Iterable[str], pools: Iterable[IPv4Network]) -> None:
        """Route this cluster's addresses on the host: ClusterIPs through the host link, the
        rest (pods, Services, IP pools) to the sink. Rootless: loopback needs no route."""
        return None

    def detach_pod(self, uid: str) -> None:
        """Take the pod's address away (it has stopped)."""
        return None

    def node_namespaces(self) -> dict[str, str]:
        """Node InternalIP -> its network namespace (netns mode; rootless: none)."""
        return {}


class NetnsFabric(HostFabric):
    """Root: each node a network namespace on a per-cluster bridge (see the module docstring)."""

    mode = NETNS

    def __init__(self, network: ClusterNetwork, nodes: int, owner: str = "") -> None:
        super().__init__(network)
        self.plan = FabricPlan(network)
        self.host = HostPlan(network, owner)
        self.configured = nodes
        self.nodes: list[int] = []  # slots whose namespace exists, in creation order
        self.pods: dict[str, tuple[str, str]] = {}  # pod uid -> (node namespace, pod IP)
        # pod uid -> (pod IP, node IP) for addresses outside the node's pod /24 (IP pools):
        # the router and the other nodes route each one to its node
        self.pool_addresses: dict[str, tuple[str, str]] = {}
        self.pod_start_s: deque[float] = deque(maxlen=1000)  # how long each pod namespace took
        self._lock = asyncio.Lock()
        self._up = False

    @property
    def namespaces(self) -> list[str]:
        return [self.plan.node(s) for s in self.nodes] + ([self.plan.router] if self._up else [])

    @property
    def node_port_host(self) -> str:
        return self.network.router_ip

    async def setup(self) -> None:
        """Create the router and the configured nodes, after removing leftovers of a crash."""
        reason = unavailable_reason()
        if reason is not None:
            raise NetnsError(reason)
        left = await asyncio.to_thread(teardown_index, self.network.index)
        if left:
            raise NetnsError(f"namespaces {', '.join(left)} of an earlier run could not be removed: "
                             f"delete them with `ip netns del <name>` and start again")
        try:
            for command in self.plan.router_commands():
                await run_ip(command)
            self._up = True
            for command in self.host.device_commands():
                await run_ip(command)
            await self.sync_host_routes((), ())
            for slot in range(self.configured):
                await self.ensure_node(slot)
        except BaseException:
            await self.teardown()
            raise
        log.info("cluster network index %d: namespaces %s; host devices %s, %s", self.network.index,
                 ", ".join(self.namespaces), self.host.sink, self.host.link)

    async def sync_host_routes(self, service_ips: Iterable[str], pools: Iterable[IPv4Network]) -> None:
        async with self._lock:
            if not self._up:
                return
            host = self.host
            sink = route_changes(await tagged_routes(None, host.sink), host.sink_routes(pools), host.sink_route)
            # the host link also carries a join's routes (tether.local.underlay): only the
            # ClusterIPs are this method's
            current = {r for r in await tagged_routes(None, host.link) if r.subnet_of(self.network.service_cidr)}
            link = route_changes(current, host.link_routes(service_ips), host.link_route)
            for command in [*sink, *link]:
                await run_ip(command)
            if sink:
                for problem in shadowed(await run_ip(["-j", "-4", "route", "show"]), host.sink_routes(pools)):
                    log.warning("cluster network index %d: %s", self.network.index, problem)

    async def ensure_node(self, slot: int) -> str:
        """The namespace of node `slot`, created (and routed to the others) when missing."""
        name = self.plan.node(slot)
        async with self._lock:
            if slot in self.nodes:
                return name
            if not self._up:
                raise NetnsError(f"the network of cluster index {self.network.index} is not set up")
            etc = ETC_NETNS_DIR / name
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "resolv.conf").write_text(self.plan.resolv_conf())
            self.nodes.append(slot)  # before the commands: teardown must find a half-made node
            for command in self.plan.node_commands(slot, self.nodes):
                await run_ip(command)
            await asyncio.to_thread(enable_forwarding, name)  # the node routes for its pods
            # what the cluster already routes beyond its nodes: joins (their routes in the
            # router) and pool addresses on the other nodes
            for dst in parse_routes(await run_ip(_tagged_args(self.plan.router, None)), device_prefix="to-"):
                await run_ip(["-n", name, *underlay_node_route("replace", self.network, slot, dst)])
            for pod_ip, node_ip in self.pool_addresses.values():
                if node_ip != self.network.node_ip(slot):
                    await run_ip(["-n", name, *_pool_route("replace", pod_ip, node_ip)])
        return name

    async def teardown(self) -> None:
        self._up = False
        self.nodes.clear()
        self.pods.clear()
        self.pool_addresses.clear()
        left = await asyncio.to_thread(teardown_index, self.network.index)
        if left:
            log.warning("netns: could not remove %s; remove them with `ip netns del <name>`", ", ".join(left))

    def socket(self, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
        return socket_in(self.plan.router, family, kind)

    def node_namespaces(self) -> dict[str, str]:
        return {self.network.node_ip(s): self.plan.node(s) for s in self.nodes
                if (NETNS_DIR / self.plan.node(s)).exists()}

    def pod_namespaces(self) -> dict[str, tuple[str, str]]:
        """Pod uid -> (its network namespace, its pod IP; "" for host-network pods)."""
        return dict(self.pods)

    def _dial_namespace(self, host: str) -> str | None:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return None  # a name: resolved and dialled from the host
        return None if address.is_loopback else self.plan.router

    async def open_connection(self, host: str, port: int, *, timeout_s: float, limit: int = STREAM_LIMIT,
                              ssl_context: ssl.SSLContext | None = None,
                              server_hostname: str | None = None) -> Streams:
        return await open_connection_in(self._dial_namespace(host), host, port, timeout_s=timeout_s,
                                        limit=limit, ssl_context=ssl_context, server_hostname=server_hostname)

    def namespace_of(self, pod: Mapping[str, Any]) -> str | None:
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        if uid in self.pods:
            return self.pods[uid][0]
        own = pod_namespace(self.network.index, uid)
        if uid and (NETNS_DIR / own).exists():
            return own
        slot = self.plan.slot_of(str((pod.get("status") or {}).get("hostIP") or ""))
        return self.plan.node(slot) if slot is not None else None

    def command_prefix(self, pod: Mapping[str, Any]) -> list[str]:
        namespace = self.namespace_of(pod)
        if namespace is None:
            meta = pod.get("metadata") or {}
            raise NetnsError(f"pod {meta.get('namespace')}/{meta.get('name')} has no node namespace yet "
                             "(it is not running on a node of this cluster); retry once it runs")
        return exec_prefix(namespace)

    async def attach_pod(self, uid: str, node_ip: str, pod_ip: str, namespace: str = "default") -> None:
        slot = self.plan.slot_of(node_ip)
        if slot is None:
            raise NetnsError(f"node address {node_ip or '(none)'} is not on the fabric "
                             f"{self.network.fabric_cidr}; the node needs its InternalIP from tether")
        node = await self.ensure_node(slot)
        if pod_ip == node_ip:  # host-network pods use the node's own namespace and address
            self.pods[uid] = (node, "")
            return
        started = time.monotonic()
        own = pod_namespace(self.network.index, uid)
        if (NETNS_DIR / own).exists():  # a restarted pod (same uid): start from a clean namespace
            await asyncio.to_thread(delete_namespaces, [own])
        etc = ETC_NETNS_DIR / own
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "resolv.conf").write_text(self.plan.resolv_conf(namespace))
        self.pods[uid] = (own, pod_ip)  # before the commands: detach must find a half-made pod
        for command in self.plan.pod_commands(slot, uid, pod_ip):
            await run_ip(command)
        if not _inside(pod_ip, self.network.node_pod_cidr(slot)):
            # an IP pool's address: the node /24 routes do not cover it
            async with self._lock:
                self.pool_addresses[uid] = (pod_ip, node_ip)
                for other in [self.plan.router, *(self.plan.node(s) for s in self.nodes if s != slot)]:
                    await run_ip(["-n", other, *_pool_route("replace", pod_ip, node_ip)])
        self.pod_start_s.append(time.monotonic() - started)
        log.debug("pod %s: namespace %s (%s) in %.3fs", uid, own, pod_ip, self.pod_start_s[-1])

    def detach_pod(self, uid: str) -> None:
        found = self.pods.pop(uid, None)
        routed = self.pool_addresses.pop(uid, None)
        if found is None or not found[1]:
            return  # unknown or host network
        # the pod's namespace goes with its veth and the node's route through it
        delete_namespaces([found[0]])
        if routed is not None and routed[0] not in {ip for _, ip in self.pods.values()}:
            for other in [self.plan.router, *(self.plan.node(s) for s in self.nodes)]:
                if (NETNS_DIR / other).exists():
                    run_ip_sync(["-n", other, *_pool_route("del", *routed)], timeout_s=2.0)


def underlay_node_route(verb: str, network: ClusterNetwork, slot: int, dst: IPv4Network) -> list[str]:
    """A node's route to a joined peer: via its router, from the node's pod-range address (a
    peer routes this cluster's pod range back, never its fabric)."""
    return ["route", verb, str(dst), "via", network.router_ip, "src", network.node_pod_gateway(slot),
            "proto", RTPROTO]


def node_slot(network: ClusterNetwork, namespace: str) -> int | None:
    """The node slot of `namespace` when it is one of `network`'s node namespaces."""
    found = re.fullmatch(rf"tether-{network.index}-n(\d+)", namespace)
    return int(found.group(1)) if found else None


def _inside(address: str, cidr: IPv4Network) -> bool:
    try:
        return IPv4Address(address) in cidr
    except ValueError:
        return False


def _pool_route(verb: str, pod_ip: str, node_ip: str) -> list[str]:
    return ["route", verb, f"{pod_ip}/32", "via", node_ip, "proto", RTPROTO]


def fabric_for(network: ClusterNetwork, nodes: int, owner: str = "") -> HostFabric:
    """The cluster's fabric; `owner` (its data directory) marks the host devices it makes."""
    return NetnsFabric(network, nodes, owner) if network.mode == NETNS else HostFabric(network)
