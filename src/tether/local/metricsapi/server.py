"""`metrics.k8s.io/v1beta1` as metrics-server serves it: NodeMetrics and PodMetrics, list and get,
computed on each read from what the kubelet runs (no storage, no watch).

A process pod's containers report their processes' real CPU (the rate of their cumulative CPU
time between two samples) and resident memory; virtual containers report zero. A node reports
the sum of its pods plus a small constant for its own daemons. Samples are taken when asked: a
read uses the previous sample if it is between MIN_WINDOW_S and MAX_WINDOW_S old, else it
samples, waits MIN_WINDOW_S and samples again, so the first `kubectl top` answers in about a
second and later ones average over the time since the previous one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from tether.local import encoding, tables
from tether.local.errors import bad_request, method_not_allowed, not_found
from tether.local.metricsapi import procfs
from tether.local.metricsapi.usage import (
    Sample,
    Usage,
    metrics_list,
    node_metrics,
    node_usage,
    pod_metrics,
    rate,
)
from tether.local.resources import ResourceType
from tether.local.store import Store
from tether.net.httpserver import Reply, Request, Response
from tether.objects import Obj, selectors, times

PodKey = tuple[str, str]
MIN_WINDOW_S = 1.0
MAX_WINDOW_S = 60.0
PODS = "/pods"
NODES = "/nodes"


class ContainerProcesses(Protocol):
    """What the kubelet tells the metrics API: the main process of each running container."""

    def container_pids(self) -> Mapping[PodKey, Mapping[str, int]]: ...


Measure = Callable[[int], tuple[float, int]]


class Sampler:
    """Container usage from cumulative samples (see the module docstring)."""

    def __init__(self, source: ContainerProcesses | None, *, measure: Measure = procfs.measure,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.source = source
        self.measure = measure
        self.clock = clock
        self.sleep = sleep
        self._previous: dict[tuple[PodKey, str, int], Sample] = {}
        self._window_s = MIN_WINDOW_S

    def _sample(self) -> dict[tuple[PodKey, str, int], Sample]:
        now = self.clock()
        pids = self.source.container_pids() if self.source is not None else {}
        samples = {}
        for pod, containers in pids.items():
            for container, pid in containers.items():
                cpu, memory = self.measure(pid)
                samples[(pod, container, pid)] = Sample(now, cpu, memory)
        return samples

    async def usage(self) -> tuple[dict[PodKey, dict[str, Usage]], float]:
        """(pod -> container -> usage of its processes, the window in seconds)."""
        current = self._sample()
        now = self.clock()
        usable = [s for key, s in self._previous.items() if key in current]
        fresh = bool(usable) and all(MIN_WINDOW_S <= now - s.at <= MAX_WINDOW_S for s in usable)
        if current and (not fresh or any(key not in self._previous for key in current)):
            self._previous = current
            await self.sleep(MIN_WINDOW_S)
            current = self._sample()
        out: dict[PodKey, dict[str, Usage]] = {}
        windows = []
        for key, sample in current.items():
            before = self._previous.get(key)
            pod, container, _ = key
            if before is None:
                out.setdefault(pod, {})[container] = Usage(0, sample.memory_bytes)
                continue
            out.setdefault(pod, {})[container] = rate(before, sample)
            windows.append(sample.at - before.at)
        if current:
            self._previous = current
            self._window_s = max(windows) if windows else MIN_WINDOW_S
        return out, self._window_s


def _running_containers(pod: Obj) -> list[str]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    running = {s.get("name") for s in statuses if isinstance(s, dict) and "running" in (s.get("state") or {})}
    return [c["name"] for c in (pod.get("spec") or {}).get("containers") or []
            if isinstance(c, dict) and c.get("name") in running]


class MetricsApi:
    """The handler for the metrics.k8s.io group (api.group_handlers)."""

    def __init__(self, store: Store, sampler: Sampler) -> None:
        self.store = store
        self.sampler = sampler

    async def __call__(self, request: Request, rt: ResourceType, namespace: str, name: str) -> Reply:
        if request.method != "GET":
            raise method_not_allowed()
        if request.param("watch") in ("1", "t", "T", "true", "True", "TRUE"):
            raise method_not_allowed(f"{rt.qualified} does not support watch")
        matches = self._matcher(request, rt)
        usage, window = await self.sampler.usage()
        stamp = now = times.now_rfc3339()
        if rt.kind == "PodMetrics":
            items = self._pods(namespace, name, usage, window, stamp, now)
        else:
            items = self._nodes(name, usage, window, stamp, now)
        items = [i for i in items if matches(i)]
        if name:
            if not items:
                shown = f"{namespace}/{name}" if namespace else name
                raise not_found(rt.kind.lower(), shown, rt.group)
            return self._answer(request, rt, items, single=True)
        return self._answer(request, rt, items, single=False)

    def _matcher(self, request: Request, rt: ResourceType) -> Callable[[Obj], bool]:
        try:
            labels = selectors.parse_label_selector(request.param("labelSelector"))
            allowed = selectors.selectable_fields("metrics.k8s.io", rt.kind, rt.namespaced, ())
            fields = selectors.parse_field_selector(request.param("fieldSelector"), allowed)
        except selectors.SelectorError as exc:
            raise bad_request(str(exc)) from None
        return lambda obj: labels.matches(obj["metadata"].get("labels") or {}) and fields.matches(obj)

    def _pod_usage(self, pod: Obj, usage: dict[PodKey, dict[str, Usage]]) -> dict[str, Usage]:
        key = (pod["metadata"].get("namespace", ""), pod["metadata"]["name"])
        measured = usage.get(key, {})
        return {c: measured.get(c, Usage()) for c in _running_containers(pod)}

    def _pods(self, namespace: str, name: str, usage: dict[PodKey, dict[str, Usage]], window: float, stamp: str,
              now: str) -> list[Obj]:
        pods = self.store.list_objects(PODS, namespace or None)
        out = []
        for pod in pods:
            if name and pod["metadata"]["name"] != name:
                continue
            if (pod.get("status") or {}).get("phase") != "Running":
                continue  # metrics-server has no figures for it
            containers = self._pod_usage(pod, usage)
            if containers:
                out.append(pod_metrics(pod, containers, timestamp=stamp, window_s=window, now=now))
        return out

    def _nodes(self, name: str, usage: dict[PodKey, dict[str, Usage]], window: float, stamp: str,
               now: str) -> list[Obj]:
        by_node: dict[str, list[dict[str, Usage]]] = {}
        for pod in self.store.list_objects(PODS):
            node = (pod.get("spec") or {}).get("nodeName")
            if node and (pod.get("status") or {}).get("phase") == "Running":
                by_node.setdefault(node, []).append(self._pod_usage(pod, usage))
        return [node_metrics(node, node_usage(by_node.get(node["metadata"]["name"], [])), timestamp=stamp,
                             window_s=window, now=now)
                for node in self.store.list_objects(NODES) if not name or node["metadata"]["name"] == name]

    def _answer(self, request: Request, rt: ResourceType, items: list[Obj], *, single: bool) -> Response:
        if "as=Table" in request.header("accept"):
            table = tables.make_table(group=rt.group, kind=rt.kind, objects=items, printer_columns=(),
                                      include_object=request.param("includeObject", "Metadata"))
            return Response(200, encoding.body(table))
        if single:
            return Response(200, encoding.body(items[0]))
        return Response(200, encoding.body(metrics_list(rt.kind, items)))
