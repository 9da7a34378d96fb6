"""Prometheus text for the tunnel, with konnectivity's metric names
(`konnectivity_network_proxy_{server,agent,client}_*`). No I/O."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tether.net import metrics
from tether.net.metrics import Histogram, Labels

PREFIX = "konnectivity_network_proxy"
SERVER_DIAL_BUCKETS = (1e-6, 1e-5, 1e-4, 0.005, 0.025, 0.1, 0.5, 2.5, 12.5)
AGENT_DIAL_BUCKETS = (0.005, 0.025, 0.1, 0.5, 2.5, 10.0, 30.0)



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
        base = f"{PREFIX}_{self.subsystem}_"
        families = [metrics.counter(base + name, _help(name), series)
                    for name, series in sorted(self.counters.items())]
        families += [metrics.gauge(base + name, _help(name), read())
                     for name, read in sorted(self.gauges.items())]
        families += [metrics.histogram(base + name, _help(name), {(): h})
                     for name, h in sorted(self.histograms.items())]
        return metrics.render(families)


HELP = {
    "stream_packets_total": "Count of packets processed, by segment and packet type.",
    "data_bytes_total": "Tunnelled payload bytes (DATA packets), to and from agents (tether's own).",
    "endpoint_dial_failure_total": "Number of failures dialing the remote endpoint, by reason.",
    "server_connection_failure_count": "Count of failures connecting to the proxy server, by direction.",
    "dial_duration_seconds": "Latency of dial to the remote endpoint in seconds.",
    "full_receive_channels_total": "Count of times a receive channel was full.",
    "open_server_connections": "Current number of open server connections.",
    "open_endpoint_connections": "Current number of open endpoint connections.",
    "ready_backend_connections": "Number of konnectivity agent connected to the proxy server.",
    "pending_backend_dials": "Current number of pending backend dial requests.",
    "established_connections": "Current number of established end-to-end connections.",
    "known_server_count": "Number of proxy servers the agent knows of (the serverCount header).",
    "ready_backends": "Number of ready backends, by proxy strategy.",
    "grpc_connections": "Number of current gRPC connections, by service method.",
    "http_connections": "Number of current HTTP CONNECT connections.",
    "dial_failure_count": "Number of dial failures observed, by reason.",
}


def _help(name: str) -> str:
    return HELP.get(name, name.replace("_", " ").capitalize() + ".")
