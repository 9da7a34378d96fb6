"""Prometheus histogram bookkeeping shared by every long-running part (hub, tunnel). No I/O."""

from __future__ import annotations

from dataclasses import dataclass, field


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
