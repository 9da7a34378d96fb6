"""Hub metrics: counters, gauges and a latency histogram, rendered as Prometheus text. No I/O."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

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
        lines = [
            "# HELP tether_reconcile_total Reconciles per controller.",
            "# TYPE tether_reconcile_total counter",
        ]
        for name in sorted(self.reconciles):
            lines.append(f'tether_reconcile_total{{controller="{name}"}} {self.reconciles[name]}')
        lines += [
            "# HELP tether_reconcile_errors_total Failed reconciles per controller.",
            "# TYPE tether_reconcile_errors_total counter",
        ]
        for name in sorted(set(self.reconciles) | set(self.errors)):
            lines.append(
                f'tether_reconcile_errors_total{{controller="{name}"}} {self.errors.get(name, 0)}')
        lines += [
            "# HELP tether_propagation_latency_seconds Source change seen → applied in a member.",
            "# TYPE tether_propagation_latency_seconds histogram",
        ]
        for dialect in sorted(self.latency):
            hist = self.latency[dialect]
            for bound, count in zip(hist.buckets, hist.counts, strict=True):
                lines.append(f'tether_propagation_latency_seconds_bucket{{dialect="{dialect}",'
                             f'le="{bound:g}"}} {count}')
            lines.append(f'tether_propagation_latency_seconds_bucket{{dialect="{dialect}",'
                         f'le="+Inf"}} {hist.n}')
            lines.append(f'tether_propagation_latency_seconds_sum{{dialect="{dialect}"}} '
                         f'{hist.total:.6f}')
            lines.append(f'tether_propagation_latency_seconds_count{{dialect="{dialect}"}} {hist.n}')
        for name in sorted(self.gauges):
            lines += [f"# TYPE {name} gauge", f"{name} {self.gauges[name]():g}"]
        return "\n".join(lines) + "\n"
