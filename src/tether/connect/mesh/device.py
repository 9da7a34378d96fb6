"""The I/O side of one WireGuard interface, optionally inside a network namespace.

Kernel WireGuard when the module is loaded (`ip link add type wireguard`), else `wireguard-go`
started inside the namespace (it daemonizes; its UAPI socket is /var/run/wireguard/<name>.sock,
shared by every namespace, hence unique names). Both are configured with `wg set`, which talks
netlink or the UAPI socket; the private key goes through stdin, never argv. Routes are tagged
`proto 116` like every route tether adds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from tether.connect.mesh.plan import CurrentPeer, PeerPlan

RTPROTO = "116"
UAPI_DIR = Path("/var/run/wireguard")
log = logging.getLogger(__name__)


class DeviceError(Exception):
    """An `ip`/`wg`/`wireguard-go` command failed."""


def kernel_wireguard() -> bool:
    return Path("/sys/module/wireguard").exists()


@dataclass(frozen=True)
class Device:
    name: str
    namespace: str = ""  # "" = the caller's namespace (a DaemonSet pod with hostNetwork)

    def _ns(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespace, *argv] if self.namespace else argv

    async def _run(self, argv: list[str], *, stdin: str | None = None, check: bool = True) -> str:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=dict(os.environ, WG_HIDE_KEYS="always"))
        out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
        if check and proc.returncode != 0:
            raise DeviceError(f"{' '.join(argv[:8])}: {err.decode(errors='replace').strip()}")
        return out.decode(errors="replace")

    async def _ip(self, *args: str, check: bool = True) -> str:
        head = ["ip", "-n", self.namespace] if self.namespace else ["ip"]
        return await self._run([*head, *args], check=check)

    async def exists(self) -> bool:
        out = await self._ip("-o", "link", "show", "dev", self.name, check=False)
        return bool(out.strip())

    async def ensure(self, private_key: str, port: int, mtu: int) -> None:
        if not await self.exists():
            if kernel_wireguard():
                await self._ip("link", "add", "name", self.name, "type", "wireguard")
            else:
                binary = shutil.which("wireguard-go")
                if binary is None:
                    raise DeviceError("no kernel WireGuard module and no wireguard-go: install "
                                      "wireguard-go and wireguard-tools")
                await asyncio.to_thread(_retire_stale_userspace, self.name, self.namespace)
                await self._run(self._ns([binary, self.name]))
        await self._run(["wg", "set", self.name, "private-key", "/dev/stdin", "listen-port", str(port)],
                        stdin=private_key + "\n")
        await self._ip("link", "set", "dev", self.name, "mtu", str(mtu), "up")

    async def peers(self) -> list[CurrentPeer]:
        out = await self._run(["wg", "show", self.name, "dump"])
        found = []
        for line in out.splitlines()[1:]:
            f = line.split("\t")
            if len(f) < 8:
                continue
            allowed = tuple(a for a in f[3].split(",") if a and a != "(none)")
            found.append(CurrentPeer(f[0], None if f[2] == "(none)" else f[2], allowed,
                                     None if f[7] == "off" else int(f[7])))
        return found

    async def apply_peers(self, plan: PeerPlan) -> None:
        argv = ["wg", "set", self.name]
        for key in plan.remove:
            argv += ["peer", key, "remove"]
        for peer in plan.upsert:
            argv += ["peer", peer.public_key, "endpoint", peer.endpoint, "persistent-keepalive",
                     str(peer.keepalive_s), "allowed-ips", ",".join(peer.allowed_ips)]
        if len(argv) > 3:
            await self._run(argv)

    async def ensure_routes(self, targets: tuple[str, ...], source: str = "") -> None:
        for dst in targets:
            extra = ["src", source] if source else []
            await self._ip("route", "replace", dst, "dev", self.name, "scope", "link", *extra, "proto", RTPROTO)

    async def delete(self) -> None:
        # its routes go with it; wireguard-go exits when its TUN device is removed
        await self._ip("link", "del", "dev", self.name, check=False)

    async def dump(self) -> str:
        return await self._run(["wg", "show", self.name, "dump"], check=False)


def is_mesh_device(name: str) -> bool:
    """A name `plan.interface_name` gives."""
    return name.startswith(("wireguard.", "wg."))


async def mesh_devices(namespace: str = "") -> list[Device]:
    """The mesh's interfaces in `namespace` (to clean up what no manager knows any more)."""
    out = await Device("", namespace)._ip("-o", "link", "show", check=False)
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if line.count(":") >= 2]
    return [Device(n, namespace) for n in names if is_mesh_device(n)]


def _netns_inode(namespace: str) -> int:
    return os.stat(f"/run/netns/{namespace}" if namespace else "/proc/self/ns/net").st_ino


def _retire_stale_userspace(name: str, namespace: str) -> None:
    """A wireguard-go whose interface is not where we look, yet holds `name`'s control socket,
    was left in a namespace that lost its name (its TUN keeps the namespace alive, e.g. the
    cluster went down under the mesh): stop it, or the new one cannot listen. The process is
    the socket's peer (SO_PEERCRED), never one found by name."""
    path = UAPI_DIR / f"{name}.sock"
    if not path.exists():
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(str(path))
        except OSError:
            with contextlib.suppress(OSError):
                path.unlink()  # nobody listens: a leftover file
            return
        pid, _, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    try:
        if os.stat(f"/proc/{pid}/ns/net").st_ino == _netns_inode(namespace):
            return  # it is in our namespace after all: leave it
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return
    if comm == "wireguard-go":
        log.warning("mesh: stopping a stale wireguard-go (pid %d) that held %s in another namespace", pid, name)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            if not path.exists():
                break
            time.sleep(0.05)


MSS_TABLE = "tether-mesh"
# TCP SYNs forwarded into a mesh interface get their MSS clamped to the route's MTU: pods with
# their own 1500-byte interfaces then never send segments that the tunnel would have to refuse
# (path MTU discovery alone fails where ICMP is filtered).
MSS_SCRIPT = f"""table inet {MSS_TABLE} {{}}
delete table inet {MSS_TABLE}
table inet {MSS_TABLE} {{
  chain mss {{
    type filter hook forward priority mangle; policy accept;
    oifname "wireguard.*" tcp flags syn tcp option maxseg size set rt mtu
    oifname "wg.*" tcp flags syn tcp option maxseg size set rt mtu
  }}
}}
"""


async def clamp_mss(namespace: str = "", *, remove: bool = False) -> None:
    """Install (or remove) the MSS clamp for every mesh interface of `namespace`; idempotent.
    Skipped without `nft` (the interface MTU still covers traffic the node itself sends)."""
    if shutil.which("nft") is None:
        return
    script = f"table inet {MSS_TABLE} {{}}\ndelete table inet {MSS_TABLE}\n" if remove else MSS_SCRIPT
    argv = ["nft", "-f", "-"]
    device = Device("", namespace)
    await device._run(device._ns(argv), stdin=script)
