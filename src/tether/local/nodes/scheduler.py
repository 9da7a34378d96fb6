"""The default scheduler: binds pods that have no node to one that fits (see `scheduling`).

An `Engine` keyed by pod, fed from the store's change stream. Pods that fit nowhere are marked
`PodScheduled=False/Unschedulable` with a `FailedScheduling` Warning and stay remembered: any
change to nodes, and any pod leaving a node, looks at them again (kube-scheduler's
"move unschedulable pods on cluster event").
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections import Counter

from tether.engine import Engine
from tether.local import encoding, events
from tether.local.api import SubresourceHandler
from tether.local.errors import ApiError, bad_request, conflict, method_not_allowed
from tether.local.nodes.ipam import NODES, PODS, TERMINAL_PHASES
from tether.local.nodes.scheduling import choose_node
from tether.local.operations import Operations, WriteOptions, decode_body
from tether.local.resources import ResourceType
from tether.local.store import Event, Watcher, WatchOverflow
from tether.net.httpserver import Reply, Request, Response
from tether.objects import Obj, times

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)
SCHEDULER = "default-scheduler"
COMPONENT = "default-scheduler"


def wants_scheduling(pod: Obj) -> bool:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    return (not spec.get("nodeName") and not pod["metadata"].get("deletionTimestamp")
            and (spec.get("schedulerName") or SCHEDULER) == SCHEDULER
            and status.get("phase") not in TERMINAL_PHASES)


def _pods_rt(ops: Operations) -> ResourceType:
    rt = ops.registry.lookup("", "v1", "pods")
    assert rt is not None
    return rt


def _with_condition(pod: Obj, condition: Obj) -> Obj:
    """A copy of `pod` whose PodScheduled condition is `condition` (transition time kept if the
    status did not change)."""
    updated = copy.deepcopy(pod)
    status = updated.setdefault("status", {})
    status.setdefault("phase", "Pending")
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    old = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
    if old is not None and old.get("status") == condition["status"] and old.get("lastTransitionTime"):
        condition = {**condition, "lastTransitionTime": old["lastTransitionTime"]}
    status["conditions"] = [*conditions, condition]
    return updated


def bind(ops: Operations, namespace: str, name: str, node: str, *, uid: str = "",
         manager: str = SCHEDULER) -> Obj:
    """Bind a pod to a node as `POST pods/<name>/binding` does: set `spec.nodeName` and
    `PodScheduled=True` in one write; 409 if the pod is already bound or being deleted."""
    rt = _pods_rt(ops)
    current = ops.get(rt, namespace, name)
    meta = current["metadata"]
    if uid and uid != meta.get("uid"):
        raise conflict(rt.plural, name, detail=f"Precondition failed: UID in precondition: {uid}, "
                                                f"UID in object meta: {meta.get('uid')}")
    if meta.get("deletionTimestamp"):
        raise conflict(rt.plural, name, detail=f"pod {name} is being deleted, cannot be assigned to a host")
    assigned = (current.get("spec") or {}).get("nodeName")
    if assigned:
        raise conflict(rt.plural, name, detail=f'pod {name} is already assigned to node "{assigned}"')
    condition = {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                 "lastTransitionTime": times.now_rfc3339()}
    updated = _with_condition(current, condition)
    updated["spec"]["nodeName"] = node
    # Binding is its own registry path upstream: no validation of the pod, one atomic write.
    return ops.commit_update(rt, updated, expect=meta["resourceVersion"])


def binding_handler(ops: Operations) -> SubresourceHandler:
    """A handler for `api.subresource_handlers["binding"]`: POST a v1 Binding to bind a pod."""

    async def handle(request: Request, rt: ResourceType, namespace: str, name: str, rest: str) -> Reply:
        if request.method != "POST" or rt.kind != "Pod":
            raise method_not_allowed()
        body = decode_body(request.header("content-type"), request.body)
        if not isinstance(body, dict) or not isinstance(body.get("target"), dict):
            raise bad_request("a Binding with a target is required")
        target = body["target"]
        if target.get("kind", "Node") != "Node" or not target.get("name"):
            raise bad_request("the binding target must be a Node with a name")
        body_name = (body.get("metadata") or {}).get("name")
        if body_name and body_name != name:
            raise bad_request(f"the name of the object ({body_name}) does not match the name on the URL ({name})")
        uid = str((body.get("metadata") or {}).get("uid") or "")
        bind(ops, namespace, name, str(target["name"]), uid=uid)
        status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        return Response(201, encoding.body(status))

    return handle


MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


class Scheduler:
    def __init__(self, ops: Operations) -> None:
        self.ops = ops
        self.engine: Engine[Key] = Engine(SCHEDULER, self._reconcile)
        self._waiting: set[Key] = set()  # unschedulable pods, to retry on cluster changes
        # Pods per node, kept from the watch: recounting every pod for every bind is quadratic.
        self._node_of: dict[Key, str] = {}
        self._counts: Counter[str] = Counter()

    def _count(self, key: Key, pod: Obj | None) -> None:
        old = self._node_of.pop(key, None)
        if old is not None:
            self._counts[old] -= 1
        node = str(((pod or {}).get("spec") or {}).get("nodeName") or "")
        # Mirror pods stand for the cluster's own control plane (one process), not for load on
        # their node: counting them would push every workload off the first node.
        mirror = MIRROR_ANNOTATION in (((pod or {}).get("metadata") or {}).get("annotations") or {})
        if node and not mirror and ((pod or {}).get("status") or {}).get("phase") not in TERMINAL_PHASES:
            self._node_of[key] = node
            self._counts[node] += 1

    async def run(self) -> None:
        store = self.ops.store
        watcher, _ = store.watch(None, None, store.revision, resources=(NODES, PODS))
        for pod in store.list_objects(PODS):
            self._count((pod["metadata"].get("namespace", ""), pod["metadata"]["name"]), pod)
            self._observe_pod(pod)
        async with asyncio.TaskGroup() as group:
            group.create_task(self.engine.run())
            group.create_task(self._feed(watcher))

    async def _feed(self, watcher: Watcher) -> None:
        store = self.ops.store
        try:
            while True:
                try:
                    event = await watcher.next(None)
                except WatchOverflow:
                    watcher.close()
                    watcher, _ = store.watch(None, None, store.revision, resources=(NODES, PODS))
                    self._node_of.clear()
                    self._counts.clear()
                    for pod in store.list_objects(PODS):
                        self._count((pod["metadata"].get("namespace", ""), pod["metadata"]["name"]), pod)
                        self._observe_pod(pod)
                    self._retry_waiting()
                    continue
                if event is not None:
                    self._observe(event)
        finally:
            watcher.close()

    def _observe(self, event: Event) -> None:
        if event.resource == NODES:
            self._retry_waiting()
        elif event.resource == PODS:
            self._count((event.namespace, event.name), None if event.type == "DELETED" else event.obj)
            if event.type == "DELETED":
                self._waiting.discard((event.namespace, event.name))
                if (event.obj.get("spec") or {}).get("nodeName"):
                    self._retry_waiting()  # a place became free
                return
            self._observe_pod(event.obj)
            prev_phase = ((event.prev or {}).get("status") or {}).get("phase")
            if (event.obj.get("status") or {}).get("phase") in TERMINAL_PHASES and prev_phase not in TERMINAL_PHASES:
                self._retry_waiting()

    def _observe_pod(self, pod: Obj) -> None:
        key = (pod["metadata"].get("namespace", ""), pod["metadata"]["name"])
        if wants_scheduling(pod):
            self.engine.enqueue(key)
        else:
            self._waiting.discard(key)

    def _retry_waiting(self) -> None:
        for key in list(self._waiting):
            self.engine.enqueue(key)

    async def _reconcile(self, key: Key) -> None:
        store = self.ops.store
        pod = store.get(PODS, *key)
        if pod is None or not wants_scheduling(pod):
            self._waiting.discard(key)
            return
        nodes = store.list_objects(NODES)
        decision = choose_node(pod, nodes, self._counts)
        if decision.node is not None:
            try:
                bound = bind(self.ops, key[0], key[1], decision.node, uid=pod["metadata"].get("uid", ""))
                self._count(key, bound)
            except ApiError as exc:
                if exc.code not in (404, 409):
                    raise
                log.debug("pod %s/%s not bound: %s", *key, exc)
            self._waiting.discard(key)
            return
        self._waiting.add(key)
        self._mark_unschedulable(pod, decision.message)

    def _mark_unschedulable(self, pod: Obj, message: str) -> None:
        old = next((c for c in (pod.get("status") or {}).get("conditions") or []
                    if c.get("type") == "PodScheduled"), None)
        if old is not None and old.get("status") == "False" and old.get("message") == message:
            return  # already said; do not repeat the write or the Event
        condition = {"type": "PodScheduled", "status": "False", "lastProbeTime": None,
                     "lastTransitionTime": times.now_rfc3339(), "reason": "Unschedulable", "message": message}
        updated = _with_condition(pod, condition)
        opts = WriteOptions(manager=SCHEDULER, user="system:kube-scheduler")
        try:
            self.ops.update(_pods_rt(self.ops), pod["metadata"].get("namespace", ""), pod["metadata"]["name"],
                            updated, opts, subresource="status")
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise
            return  # changed under us: the watch brings the pod back
        events.record(self.ops, pod, event_type="Warning", reason="FailedScheduling", message=message,
                      component=COMPONENT)
