"""core/v1 Events, as controllers post them (`kubectl describe` and `kubectl events` read them)."""

from __future__ import annotations

import logging

from tether.local.errors import ApiError
from tether.local.operations import Operations, WriteOptions
from tether.objects import Obj, times

log = logging.getLogger(__name__)


def record(
    ops: Operations,
    involved: Obj,
    *,
    event_type: str,
    reason: str,
    message: str,
    component: str,
) -> None:
    """Post an Event about `involved`; a failure to record is logged, never raised."""
    rt = ops.registry.lookup("", "v1", "events")
    if rt is None:
        return
    meta = involved.get("metadata", {})
    namespace = meta.get("namespace") or "default"
    now = times.now_rfc3339()
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta.get('name', 'object')}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": involved.get("apiVersion", ""),
            "kind": involved.get("kind", ""),
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        },
        "type": event_type,
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        ops.create(rt, namespace, event, WriteOptions(manager=component))
    except ApiError as exc:
        log.debug("event %s for %s not recorded: %s", reason, meta.get("name"), exc)
