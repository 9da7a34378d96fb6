"""Metrics: cheap bookkeeping on the hot path, Prometheus exposition by prometheus_client.

Components count into plain dicts and `Histogram`s (an increment is a dict update, no locks, no
label-child lookups), and build metric families from them only when `/metrics` is scraped;
`render` hands those families to prometheus_client's text exposition. No `_created` series are
produced (the families carry none).

Names are kept exactly as other projects publish them: a counter whose name ends in `_total` is
exposed as a counter; one that does not (apiserver-network-proxy's
`..._server_connection_failure_count`) is exposed untyped, because the Prometheus text format
would otherwise append `_total` to its name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric

Labels = tuple[tuple[str, str], ...]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class Histogram:
    """Cumulative-bucket counts as Prometheus renders them (`le` buckets, `_sum`, `_count`)."""

    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        self.n += 1
        self.total += value
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1


def counter(name: str, documentation: str, series: Mapping[Labels, float]) -> Metric:
    if name.endswith("_total"):
        family = Metric(name[: -len("_total")], documentation, "counter")
    else:
        family = Metric(name, documentation, "unknown")
    for labels, value in sorted(series.items()):
        family.add_sample(name, dict(labels), value)
    return family


def gauge(name: str, documentation: str, series: Mapping[Labels, float]) -> Metric:
    family = Metric(name, documentation, "gauge")
    for labels, value in sorted(series.items()):
        family.add_sample(name, dict(labels), value)
    return family


def histogram(name: str, documentation: str, series: Mapping[Labels, Histogram]) -> Metric:
    family = Metric(name, documentation, "histogram")
    for labels, hist in sorted(series.items(), key=lambda item: item[0]):
        base = dict(labels)
        for bound, count in zip(hist.buckets, hist.counts, strict=True):
            family.add_sample(f"{name}_bucket", {**base, "le": _bound(bound)}, count)
        family.add_sample(f"{name}_bucket", {**base, "le": "+Inf"}, hist.n)
        family.add_sample(f"{name}_sum", base, hist.total)
        family.add_sample(f"{name}_count", base, hist.n)
    return family


def _bound(value: float) -> str:
    return f"{value:g}"


class _Families:
    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> list[Metric]:
        return self._families


def render(families: Iterable[Metric]) -> str:
    """The Prometheus text exposition (format 0.0.4) of `families`."""
    return generate_latest(_Families(families)).decode()
