"""The pure parts of the metrics API: metrics-server's object shapes, its quantity and duration
formats, and CPU rates from cumulative samples."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tether.objects import Obj

GROUP_VERSION = "metrics.k8s.io/v1beta1"
NANO = 1_000_000_000
# What a node's own daemons use, added to the sum of its pods (a real node is never at zero).
NODE_OVERHEAD_CPU_NANOCORES = 25_000_000
NODE_OVERHEAD_MEMORY_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Usage:
    cpu_nanocores: int = 0
    memory_bytes: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.cpu_nanocores + other.cpu_nanocores, self.memory_bytes + other.memory_bytes)


@dataclass(frozen=True)
class Sample:
    """Cumulative CPU seconds and current memory of one container's processes, at a time."""

    at: float  # monotonic seconds
    cpu_seconds: float
    memory_bytes: int


def rate(before: Sample, after: Sample) -> Usage:
    """Usage over the window between two samples (CPU in nanocores; memory as it is now)."""
    window = after.at - before.at
    used = max(after.cpu_seconds - before.cpu_seconds, 0.0)
    cores = used / window if window > 0 else 0.0
    return Usage(int(cores * NANO), after.memory_bytes)


def cpu_quantity(nanocores: int) -> str:
    """A CPU usage as metrics-server writes it: a canonical decimal quantity (`123456n`, `5m`, `2`)."""
    if nanocores <= 0:
        return "0"
    for suffix in ("n", "u", "m"):
        if nanocores % 1000:
            return f"{nanocores}{suffix}"
        nanocores //= 1000
    return str(nanocores)


def memory_quantity(size: int) -> str:
    """A memory usage as metrics-server writes it: a canonical binary quantity (`1234Ki`, `4Mi`)."""
    if size <= 0:
        return "0"
    if size < 1024:
        return str(size)
    for suffix in ("", "Ki", "Mi", "Gi", "Ti", "Pi"):
        if size % 1024 or suffix == "Pi":
            return f"{size}{suffix}"
        size //= 1024
    return f"{size}Ei"


def go_duration(seconds: float) -> str:
    """A duration as Go's time.Duration prints it (`10.5s`, `1m0.25s`), to the millisecond."""
    millis = round(seconds * 1000)
    if millis == 0:
        return "0s"
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs = f"{millis // 1000}.{millis % 1000:03d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{secs}"
    if minutes:
        return f"{minutes}m{secs}"
    return secs


def _usage(usage: Usage) -> Obj:
    return {"cpu": cpu_quantity(usage.cpu_nanocores), "memory": memory_quantity(usage.memory_bytes)}


def pod_metrics(pod: Obj, containers: Mapping[str, Usage], *, timestamp: str, window_s: float, now: str) -> Obj:
    meta = pod.get("metadata") or {}
    out_meta: Obj = {"name": meta.get("name", ""), "namespace": meta.get("namespace", ""), "creationTimestamp": now}
    if meta.get("labels"):
        out_meta["labels"] = dict(meta["labels"])
    return {
        "kind": "PodMetrics",
        "apiVersion": GROUP_VERSION,
        "metadata": out_meta,
        "timestamp": timestamp,
        "window": go_duration(window_s),
        "containers": [{"name": name, "usage": _usage(usage)} for name, usage in containers.items()],
    }


def node_metrics(node: Obj, usage: Usage, *, timestamp: str, window_s: float, now: str) -> Obj:
    meta = node.get("metadata") or {}
    out_meta: Obj = {"name": meta.get("name", ""), "creationTimestamp": now}
    if meta.get("labels"):
        out_meta["labels"] = dict(meta["labels"])
    return {
        "kind": "NodeMetrics",
        "apiVersion": GROUP_VERSION,
        "metadata": out_meta,
        "timestamp": timestamp,
        "window": go_duration(window_s),
        "usage": _usage(usage),
    }


def node_usage(pods: Sequence[Mapping[str, Usage]]) -> Usage:
    total = Usage(NODE_OVERHEAD_CPU_NANOCORES, NODE_OVERHEAD_MEMORY_BYTES)
    for containers in pods:
        for usage in containers.values():
            total = total + usage
    return total


def metrics_list(kind: str, items: list[Obj]) -> Obj:
    return {"kind": f"{kind}List", "apiVersion": GROUP_VERSION, "metadata": {}, "items": items}
