"""Prometheus text for the tunnel, with konnectivity's metric names
(`konnectivity_network_proxy_{server,agent,client}_*`). No I/O."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tether.net.metrics import Histogram

PREFIX = "konnectivity_network_proxy"
SERVER_DIAL_BUCKETS = (1e-6, 1e-5, 1e-4, 0.005, 0.025, 0.1, 0.5, 2.5, 12.5)
AGENT_DIAL_BUCKETS = (0.005, 0.025, 0.1, 0.5, 2.5, 10.0, 30.0)

Labels = tuple[tuple[str, str], ...]


@dataclass
class Registry:
    subsystem: str  # "server" | "agent" | "client"
    counters: dict[str, dict[Labels, float]] = field(default_factory=dict)
    gauges: dict[str, Callable[[], dict[Labels, float]]] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)

    def inc(self, name: str, labels: Labels = (), by: float = 1.0) -> None:
        series = self.counters.setdefault(name, {})
        series[labels] = series.get(labels, 0.0) + by

    def gauge(self, name: str, read: Callable[[], dict[Labels, float]]) -> None:
        self.gauges[name] = read

    def histogram(self, name: str, buckets: tuple[float, ...]) -> Histogram:
        return self.histograms.setdefault(name, Histogram(buckets))

    def packet(self, segment: str, packet_type: str) -> None:
        self.inc("stream_packets_total", (("segment", segment), ("packet_type", packet_type)))

    def render(self) -> str:
        lines: list[str] = []
        base = f"{PREFIX}_{self.subsystem}_"
        for name, series in sorted(self.counters.items()):
            lines.append(f"# TYPE {base}{name} counter")
            lines += [f"{base}{name}{_labels(k)} {_num(v)}" for k, v in sorted(series.items())]
        for name, read in sorted(self.gauges.items()):
            lines.append(f"# TYPE {base}{name} gauge")
            lines += [f"{base}{name}{_labels(k)} {_num(v)}" for k, v in sorted(read().items())]
        for name, h in sorted(self.histograms.items()):
            lines.append(f"# TYPE {base}{name} histogram")
            for bound, count in zip(h.buckets, h.counts, strict=True):
                lines.append(f'{base}{name}_bucket{{le="{bound:g}"}} {count}')
            lines += [f'{base}{name}_bucket{{le="+Inf"}} {h.n}',
                      f"{base}{name}_sum {h.total:g}", f"{base}{name}_count {h.n}"]
        return "\n".join(lines) + "\n"


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{v}"' for k, v in labels)
    return "{" + inner + "}"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
