"""The metrics API's pure parts: metrics-server's quantity and duration formats, CPU rates from
cumulative samples, and when the sampler waits for a second sample."""

from __future__ import annotations

import asyncio

import pytest

from tether.local.metricsapi.server import MIN_WINDOW_S, Sampler
from tether.local.metricsapi.usage import (
    Sample,
    Usage,
    cpu_quantity,
    go_duration,
    memory_quantity,
    node_usage,
    pod_metrics,
    rate,
)


@pytest.mark.parametrize(("nanocores", "text"), [
    (0, "0"), (123456789, "123456789n"), (1_500_000, "1500u"), (5_000_000, "5m"), (2_000_000_000, "2"),
])
def test_cpu_quantity(nanocores: int, text: str) -> None:
    assert cpu_quantity(nanocores) == text


@pytest.mark.parametrize(("size", "text"), [
    (0, "0"), (512, "512"), (8724 * 1024, "8724Ki"), (4 * 1024 * 1024, "4Mi"), (1234567, "1234567"),
])
def test_memory_quantity(size: int, text: str) -> None:
    assert memory_quantity(size) == text


@pytest.mark.parametrize(("seconds", "text"), [
    (0.0, "0s"), (1.0084, "1.008s"), (10.5, "10.5s"), (60.25, "1m0.25s"), (3725.0, "1h2m5s"),
])
def test_go_duration(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


def test_rate_is_cpu_time_over_the_window() -> None:
    assert rate(Sample(10.0, 5.0, 100), Sample(12.0, 6.0, 200)) == Usage(500_000_000, 200)
    assert rate(Sample(10.0, 5.0, 100), Sample(10.0, 5.0, 100)) == Usage(0, 100)


def test_a_node_is_its_pods_plus_a_constant() -> None:
    total = node_usage([{"a": Usage(10, 1)}, {"b": Usage(5, 2), "c": Usage(1, 0)}])
    assert total == node_usage([]) + Usage(16, 3)


def test_pod_metrics_shape() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "x"}}}
    shown = pod_metrics(pod, {"c": Usage(1_000_000, 4096)}, timestamp="T", window_s=1.5, now="N")
    assert shown == {"kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
                     "metadata": {"name": "p", "namespace": "ns", "creationTimestamp": "N", "labels": {"app": "x"}},
                     "timestamp": "T", "window": "1.5s",
                     "containers": [{"name": "c", "usage": {"cpu": "1m", "memory": "4Ki"}}]}


class FakeProcesses:
    def __init__(self) -> None:
        self.pids = {("ns", "p"): {"c": 42}}

    def container_pids(self) -> dict[tuple[str, str], dict[str, int]]:
        return self.pids


def test_the_sampler_waits_for_a_second_sample_only_when_it_has_no_recent_one() -> None:
    clock = [100.0]
    cpu = [10.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds
        cpu[0] += 0.5 * seconds  # half a core while "asleep"

    sampler = Sampler(FakeProcesses(), measure=lambda pid: (cpu[0], 4096), clock=lambda: clock[0], sleep=sleep)
    usage, window = asyncio.run(sampler.usage())
    assert slept == [MIN_WINDOW_S] and window == MIN_WINDOW_S
    assert usage == {("ns", "p"): {"c": Usage(500_000_000, 4096)}}
    clock[0] += 4.0
    cpu[0] += 4.0  # a full core since the last read
    usage, window = asyncio.run(sampler.usage())
    assert slept == [MIN_WINDOW_S] and window == 4.0  # the previous read's sample was recent enough
    assert usage == {("ns", "p"): {"c": Usage(1_000_000_000, 4096)}}
