"""Hub metrics: counters, gauges and a latency histogram, rendered as Prometheus text. No I/O."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tether.net import metrics
from tether.net.metrics import Histogram

LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


@dataclass
class HubMetrics:
    reconciles: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    latency: dict[str, Histogram] = field(default_factory=dict)  # per dialect
    gauges: dict[str, Callable[[], float]] = field(default_factory=dict)

    def reconciled(self, controller: str, *, failed: bool = False) -> None:
        self.reconciles[controller] = self.reconciles.get(controller, 0) + 1
        if failed:
            self.errors[controller] = self.errors.get(controller, 0) + 1

    def observe_latency(self, dialect: str, seconds: float) -> None:
        self.latency.setdefault(dialect, Histogram(LATENCY_BUCKETS_S)).observe(seconds)

    def render(self) -> str:
        controllers = set(self.reconciles) | set(self.errors)
        return metrics.render([
            metrics.counter("tether_reconcile_total", "Reconciles per controller.",
                            {(("controller", c),): self.reconciles.get(c, 0) for c in controllers}),
            metrics.counter("tether_reconcile_errors_total", "Failed reconciles per controller.",
                            {(("controller", c),): self.errors.get(c, 0) for c in controllers}),
            metrics.histogram("tether_propagation_latency_seconds",
                              "Source change seen → applied in a member.",
                              {(("dialect", d),): h for d, h in self.latency.items()}),
            *(metrics.gauge(name, GAUGE_HELP.get(name, name.replace("_", " ")), {(): read()})
              for name, read in sorted(self.gauges.items())),
        ])


GAUGE_HELP = {
    "tether_clusters": "Clusters registered with the hub.",
    "tether_clusters_ready": "Registered clusters whose Ready condition is True.",
    "tether_works": "Work objects (per-cluster plans) on the hub.",
    "tether_leader_is_leader": "1 when this hub replica runs the controllers (always without "
                               "--leader-elect), else 0.",
}
