"""Mesh status from `wg show <dev> dump` (pure parsing) and the Prometheus metrics it feeds,
named like semaphore-wireguard's collector (`semaphore_wg_*`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Gauge


@dataclass(frozen=True)
class PeerStatus:
    public_key: str
    endpoint: str
    allowed_ips: str
    latest_handshake: int  # unix seconds, 0 = never
    rx_bytes: int
    tx_bytes: int


@dataclass(frozen=True)
class DeviceStatus:
    device: str
    listen_port: int
    peers: tuple[PeerStatus, ...]

    def up(self, now: float, stale_s: float = 180.0) -> bool:
        """Some peer shook hands recently (WireGuard re-handshakes every 2 minutes while
        traffic flows, and keepalives keep it flowing)."""
        return any(p.latest_handshake and now - p.latest_handshake < stale_s for p in self.peers)


def parse_dump(device: str, text: str) -> DeviceStatus | None:
    """`wg show <dev> dump`: an interface line (private key first: never kept), then peers."""
    lines = [line.split("\t") for line in text.splitlines() if line.strip()]
    if not lines or len(lines[0]) < 3:
        return None
    try:
        port = int(lines[0][2])
    except ValueError:
        port = 0
    peers = []
    for f in lines[1:]:
        if len(f) < 8:
            continue
        try:
            peers.append(PeerStatus(f[0], f[2], f[3], int(f[4]), int(f[5]), int(f[6])))
        except ValueError:
            continue
    return DeviceStatus(device, port, tuple(peers))


class MeshMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.device_info = Gauge("semaphore_wg_device_info", "A WireGuard device of the mesh",
                                 ["device", "remote", "listen_port"], registry=self.registry)
        self.peer_info = Gauge("semaphore_wg_peer_info", "A peer of a mesh device",
                               ["device", "public_key", "endpoint"], registry=self.registry)
        self.rx = Gauge("semaphore_wg_peer_receive_bytes_total", "Bytes received from the peer",
                        ["device", "public_key"], registry=self.registry)
        self.tx = Gauge("semaphore_wg_peer_transmit_bytes_total", "Bytes sent to the peer",
                        ["device", "public_key"], registry=self.registry)
        self.handshake = Gauge("semaphore_wg_peer_last_handshake_seconds", "Unix time of the latest handshake",
                               ["device", "public_key"], registry=self.registry)
        self.up = Gauge("tether_mesh_remote_up", "1 when some peer of the remote shook hands recently",
                        ["remote"], registry=self.registry)

    def observe(self, statuses: Sequence[tuple[str, DeviceStatus]], now: float) -> None:
        for gauge in (self.device_info, self.peer_info, self.rx, self.tx, self.handshake, self.up):
            gauge.clear()
        for remote, st in statuses:
            self.device_info.labels(st.device, remote, str(st.listen_port)).set(1)
            self.up.labels(remote).set(1 if st.up(now) else 0)
            for p in st.peers:
                self.peer_info.labels(st.device, p.public_key, p.endpoint).set(1)
                self.rx.labels(st.device, p.public_key).set(p.rx_bytes)
                self.tx.labels(st.device, p.public_key).set(p.tx_bytes)
                self.handshake.labels(st.device, p.public_key).set(p.latest_handshake)


MESH_READY = "MeshReady"
STALE_S = 180.0


@dataclass(frozen=True)
class MeshVerdict:
    status: str  # "True" | "False"
    reason: str
    message: str


def mesh_verdict(cluster: str, devices: Sequence[DeviceStatus], now: float) -> MeshVerdict:
    """Whether the mesh to `cluster` is up, from the interfaces the other clusters' nodes have
    toward it: every one must have shaken hands with some peer recently."""
    if not devices:
        return MeshVerdict("False", "MeshDown", f"no node has a mesh interface to {cluster}")
    down = [d.device for d in devices if not d.up(now, STALE_S)]
    if not down:
        return MeshVerdict("True", "MeshUp", f"{len(devices)} interface(s) to {cluster} have recent handshakes")
    reason = "MeshDown" if len(down) == len(devices) else "MeshDegraded"
    return MeshVerdict("False", reason, f"{len(down)} of {len(devices)} interface(s) to {cluster} have no "
                       f"handshake in the last {int(STALE_S)}s: {', '.join(sorted(down)[:5])}")
