"""Address plan of a local cluster: pod and service ranges that never overlap between clusters.

Rootless mode uses 127.0.0.0/8, which Linux routes to the loopback device in full, so processes
bind any of those addresses without privileges: cluster i gets pods in 127.(16+i).0.0/16 (one
/24 per node) and services in 127.(64+i).0.0/16.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO

MAX_CLUSTERS = 32
MAX_NODES = 250


class NetworkError(Exception):
    pass


@dataclass(frozen=True)
class ClusterNetwork:
    index: int
    pod_cidr: ipaddress.IPv4Network
    service_cidr: ipaddress.IPv4Network

    @classmethod
    def rootless(cls, index: int) -> ClusterNetwork:
        if not 0 <= index < MAX_CLUSTERS:
            raise NetworkError(f"cluster index {index} is outside 0..{MAX_CLUSTERS - 1}")
        return cls(
            index=index,
            pod_cidr=ipaddress.IPv4Network(f"127.{16 + index}.0.0/16"),
            service_cidr=ipaddress.IPv4Network(f"127.{64 + index}.0.0/16"),
        )

    def node_pod_cidr(self, node_index: int) -> ipaddress.IPv4Network:
        if not 0 <= node_index < MAX_NODES:
            raise NetworkError(f"node index {node_index} is outside 0..{MAX_NODES - 1}")
        return list(self.pod_cidr.subnets(new_prefix=24))[node_index + 1]

    def node_ip(self, node_index: int) -> str:
        """The node's InternalIP: the first address of its pod range (like a cni0 bridge)."""
        return str(self.node_pod_cidr(node_index).network_address + 1)

    @property
    def api_service_ip(self) -> str:
        """`kubernetes.default` gets the first address of the service range, as on real clusters."""
        return str(self.service_cidr.network_address + 1)

    @property
    def dns_service_ip(self) -> str:
        return str(self.service_cidr.network_address + 10)


LOCK_DIR = Path(os.environ.get("TETHER_LOCK_DIR", "/tmp/tether-local-locks"))


class IndexClaim:
    """Holds one cluster index machine-wide for as long as the process lives (an flock).

    Two local clusters with the same index would share pod and service addresses; every
    cluster on the machine, whatever its data directory, claims its own.
    """

    def __init__(self, index: int, handle: IO[bytes]) -> None:
        self.index = index
        self._handle = handle

    def release(self) -> None:
        with contextlib.suppress(OSError):
            fcntl.flock(self._handle, fcntl.LOCK_UN)
        self._handle.close()


def claim_index(preferred: int | None, lock_dir: Path = LOCK_DIR) -> IndexClaim:
    lock_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        lock_dir.chmod(0o1777)  # shared by every user's clusters on this machine
    order = ([preferred] if preferred is not None else []) + [i for i in range(MAX_CLUSTERS) if i != preferred]
    for index in order:
        handle = (lock_dir / f"cluster-{index}.lock").open("ab")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        return IndexClaim(index, handle)
    raise NetworkError(f"all {MAX_CLUSTERS} local cluster address ranges are in use on this machine")
