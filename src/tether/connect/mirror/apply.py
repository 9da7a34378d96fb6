"""Carrying out a plan's steps against the local cluster.

Writes are conditional: an update carries the resourceVersion it was planned from, a delete the
uid. When the cluster moved on (`Conflict`, `AlreadyExists`, an update of something gone), the
plan was made from an old view: the key is looked at again shortly (`RequeueAfter`), not failed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from urllib.parse import urlsplit

from tether.connect.mirror.localview import LocalView
from tether.connect.mirror.metrics import MirrorMetrics
from tether.connect.mirror.plan import Step
from tether.engine import RequeueAfter
from tether.kube import AlreadyExists, Conflict, KubeClient, KubeError, NotFound, Preconditions

FIELD_MANAGER = "semaphore-service-mirror"
STALE_VIEW_RETRY_S = 0.05
_METHODS = {"create": "POST", "update": "PUT", "delete": "DELETE"}


class MirrorNamespaceMissing(Exception):
    """A create failed because the mirror namespace does not exist (retried with backoff)."""


async def apply_steps(client: KubeClient, view: LocalView, steps: Iterable[Step], metrics: MirrorMetrics) -> int:
    """Apply `steps` in order; returns how many were written."""
    host = urlsplit(client.server).netloc
    done = 0
    for step in steps:
        started = time.monotonic()
        code = 200
        meta = step.obj.get("metadata") or {}
        try:
            if step.action == "create":
                result = await client.create(step.obj, field_manager=FIELD_MANAGER)
                code = 201
                view.wrote(step.kind, step.name, result)
            elif step.action == "update":
                result = await client.replace(step.obj, field_manager=FIELD_MANAGER)
                view.wrote(step.kind, step.name, result)
            else:
                uid = str(meta.get("uid") or "")
                try:
                    await client.delete(str(step.obj["apiVersion"]), step.kind, step.name, str(meta.get("namespace")),
                                        preconditions=Preconditions(uid=uid) if uid else None)
                    view.wrote(step.kind, step.name, None)
                except NotFound:
                    code = 404  # gone already: its DELETED event has come or is coming
                    view.forget(step.kind, step.name)
            done += 1
        except NotFound as exc:
            code = exc.code
            view.forget(step.kind, step.name)
            if step.action == "create":  # only the namespace can be missing: not a stale view
                raise MirrorNamespaceMissing(
                    f"cannot create {step.kind} {step.name} on {client.server}: {exc.message}; create the mirror "
                    "namespace") from None
            raise RequeueAfter(STALE_VIEW_RETRY_S) from exc
        except (AlreadyExists, Conflict) as exc:
            code = exc.code
            view.forget(step.kind, step.name)
            raise RequeueAfter(STALE_VIEW_RETRY_S) from exc
        except KubeError as exc:
            code = exc.code
            raise
        finally:
            metrics.request(host, _METHODS[step.action], code, time.monotonic() - started)
    return done
