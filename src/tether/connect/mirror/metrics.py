"""The mirror's Prometheus metrics, under semaphore-service-mirror's names and labels.

Upstream's families, kept as they are (dashboards and alerts carry over):
- `semaphore_service_mirror_kube_watcher_objects{watcher,kind,runner}` (gauge) and
  `..._kube_watcher_events_total{watcher,kind,event_type,runner}` (a gauge upstream, kept so);
  watchers are named `<cluster>-<kind>Watcher`, the local ones of a runner
  `<cluster>-mirror<kind>Watcher`, runners `mirror-<cluster>` and `global`.
- `semaphore_service_mirror_queue_{depth,adds_total,work_duration_seconds,retries_total}{name}`.
- `semaphore_service_mirror_kube_http_request_total{host,code,method}` and
  `..._kube_http_request_duration_seconds{host,method}`, for the writes the mirror makes.

tether's own: `tether_mirror_remote_up{cluster}` (1 when the remote API answers),
`tether_mirror_endpoints_state{cluster,state}` (1 for the current stale-policy state: fresh,
unreachable, not-ready, withdrawn), and
`tether_mirror_sync_latency_seconds{cluster}`: from the remote change reaching the mirror
(the informer event) to the local slice written.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric

from tether.net.metrics import Histogram, Labels, counter, gauge, histogram, render

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
FRESHNESS_STATES = ("fresh", "unreachable", "not-ready", "withdrawn")


@dataclass
class MirrorMetrics:
    watcher_events: dict[Labels, float] = field(default_factory=dict)
    queue_adds: dict[Labels, float] = field(default_factory=dict)
    queue_retries: dict[Labels, float] = field(default_factory=dict)
    queue_work: dict[Labels, Histogram] = field(default_factory=dict)
    requests: dict[Labels, float] = field(default_factory=dict)
    request_duration: dict[Labels, Histogram] = field(default_factory=dict)
    sync_latency: dict[Labels, Histogram] = field(default_factory=dict)
    # read at scrape time
    watcher_objects: dict[Labels, Callable[[], float]] = field(default_factory=dict)
    queue_depth: dict[str, Callable[[], float]] = field(default_factory=dict)
    remote_up: dict[str, Callable[[], bool]] = field(default_factory=dict)
    remote_state: dict[str, Callable[[], str]] = field(default_factory=dict)

    def watcher_event(self, watcher: str, kind: str, runner: str, event_type: str) -> None:
        key = (("event_type", event_type), ("kind", kind), ("runner", runner), ("watcher", watcher))
        self.watcher_events[key] = self.watcher_events.get(key, 0.0) + 1

    def watch_objects(self, watcher: str, kind: str, runner: str, count: Callable[[], float]) -> None:
        self.watcher_objects[(("kind", kind), ("runner", runner), ("watcher", watcher))] = count

    def queue_added(self, name: str) -> None:
        key = (("name", name),)
        self.queue_adds[key] = self.queue_adds.get(key, 0.0) + 1

    def queue_worked(self, name: str, seconds: float, failed: bool) -> None:
        key = (("name", name),)
        self.queue_work.setdefault(key, Histogram(LATENCY_BUCKETS)).observe(seconds)
        if failed:
            self.queue_retries[key] = self.queue_retries.get(key, 0.0) + 1

    def request(self, host: str, method: str, code: int, seconds: float) -> None:
        key = (("code", str(code)), ("host", host), ("method", method))
        self.requests[key] = self.requests.get(key, 0.0) + 1
        self.request_duration.setdefault((("host", host), ("method", method)),
                                         Histogram(LATENCY_BUCKETS)).observe(seconds)

    def synced(self, cluster: str, since: float) -> None:
        self.sync_latency.setdefault((("cluster", cluster),), Histogram(LATENCY_BUCKETS)).observe(
            max(0.0, time.monotonic() - since))

    def families(self) -> list[Metric]:
        up: dict[Labels, float] = {(("cluster", c),): 1.0 if f() else 0.0 for c, f in self.remote_up.items()}
        depth: dict[Labels, float] = {(("name", n),): f() for n, f in self.queue_depth.items()}
        states: dict[Labels, float] = {}
        for cluster, read in self.remote_state.items():
            current = read()
            for state in FRESHNESS_STATES:
                states[(("cluster", cluster), ("state", state))] = 1.0 if state == current else 0.0
        return [
            gauge("semaphore_service_mirror_kube_watcher_objects",
                  "Number of objects watched, by watcher and kind",
                  {k: f() for k, f in self.watcher_objects.items()}),
            gauge("semaphore_service_mirror_kube_watcher_events_total",
                  "Number of events handled, by watcher, kind and event_type", self.watcher_events),
            gauge("semaphore_service_mirror_queue_depth", "Workqueue depth, by queue name", depth),
            counter("semaphore_service_mirror_queue_adds_total", "Workqueue adds, by queue name", self.queue_adds),
            histogram("semaphore_service_mirror_queue_work_duration_seconds",
                      "Workqueue work duration, by queue name", self.queue_work),
            counter("semaphore_service_mirror_queue_retries_total", "Workqueue retries, by queue name",
                    self.queue_retries),
            counter("semaphore_service_mirror_kube_http_request_total",
                    "Total number of HTTP requests to the Kubernetes API by host, code and method", self.requests),
            histogram("semaphore_service_mirror_kube_http_request_duration_seconds",
                      "Histogram of latencies for HTTP requests to the Kubernetes API by host and method",
                      self.request_duration),
            gauge("tether_mirror_remote_up", "1 when the remote cluster's API answers", up),
            gauge("tether_mirror_endpoints_state",
                  "1 for the current state of a remote's mirrored endpoints (stale-endpoint policy)", states),
            histogram("tether_mirror_sync_latency_seconds",
                      "From a remote change reaching the mirror to the local EndpointSlice written",
                      self.sync_latency),
        ]

    def render(self) -> str:
        return render(self.families())
