"""Karmada's ResourceBinding / ClusterResourceBinding (work.karmada.io/v1alpha2) as views.

In Karmada a binding is where a template's scheduling result lives; tether plans without one,
but writes one per propagated template so that `kubectl get rb` (and tools reading bindings)
see what Karmada shows: named `<name>-<kind>` lower-cased (':' → '.'), in the template's
namespace (a ClusterResourceBinding for a cluster-scoped template), owned by the template (so
it goes with it), with
- spec: `resource` (apiVersion, kind, namespace, name, uid), `replicas`, the
  policy's `placement`, `propagateDeps`, `conflictResolution`, `preserveResourcesOnDeletion`
  and `clusters[]` (name and replica share of each cluster the template's Works target);
- status: conditions `Scheduled` and `FullyApplied` (Karmada's reasons and messages) and
  `aggregatedStatus[]` per cluster: `applied`, `appliedMessage`, the member's `status` and
  `health`.

The view is written after the template's Works, coalesced (`BINDING_DELAY_S`) and in the
background: it never delays propagation. A new binding's first status waits up to
`FIRST_STATUS_HOLD_S` for the members' reports while none has failed, so that in the common case
one status write carries Scheduled and FullyApplied together (until then the binding has no
status, as a Karmada binding has before its scheduler ran). Only a template some policy claims gets its binding
written; one whose policy went keeps its last binding until it is deleted, as in Karmada.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.engine import Engine
from tether.kube import Informer, KubeClient, KubeError, NotFound, strip_managed_fields
from tether.objects import Obj

from . import works as W
from ._util import as_int, items, mapping, nested, thaw
from .crds import KARMADA_WORK_GROUP
from .karmada import REPLICA_FIELDS, workload_replicas
from .model import ResourceRef
from .workinfo import WorkInfo, cluster_result

BINDING_API_VERSION = f"{KARMADA_WORK_GROUP}/v1alpha2"
FIELD_MANAGER = "tether-bindings"
BINDING_DELAY_S = 1.0
FIRST_STATUS_HOLD_S = 5.0
SCHEDULED, FULLY_APPLIED = "Scheduled", "FullyApplied"

TemplateKey = tuple[str, str, str, str]  # (apiVersion, kind, namespace, name)


# pure ------------------------------------------------------------------------------------------


def binding_name(kind: str, name: str) -> str:
    """Karmada's GenerateBindingName."""
    return f"{name.replace(':', '.')}-{kind}".lower()


def binding_kind(namespace: str) -> str:
    return "ResourceBinding" if namespace else "ClusterResourceBinding"


def _manifest_replicas(work: WorkInfo, ref: ResourceRef) -> int | None:
    field_name = REPLICA_FIELDS.get(ref.kind)
    manifest = work.manifest(ref) if field_name is not None else None
    if field_name is None or manifest is None:
        return None
    value = nested(manifest, "spec", field_name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def health(ref: ResourceRef, status: Mapping[str, Any] | None) -> str:
    """Karmada's InterpretHealth, roughly: a workload is Healthy once its member reports as many
    ready (or available) replicas as it wants; other kinds once their status is collected."""
    if status is None:
        return "Unknown"
    if ref.kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        wanted = as_int(status.get("replicas"))
        ready = as_int(status.get("readyReplicas"))
        return "Healthy" if ready >= wanted else "Unhealthy"
    if ref.kind == "DaemonSet":
        return ("Healthy" if as_int(status.get("numberReady"))
                >= as_int(status.get("desiredNumberScheduled")) else "Unhealthy")
    return "Healthy"


def _condition(kind: str, ok: bool, reason: str, message: str) -> Obj:
    return {"type": kind, "status": "True" if ok else "False", "reason": reason,
            "message": message}


def binding(template: Obj, policy: Mapping[str, Any], works: list[WorkInfo],
            report: Mapping[str, Any]) -> Obj:
    """The binding of a claimed template: its spec and status (without timestamps, which the
    writer keeps from the current binding while a condition does not change)."""
    meta = mapping(template.get("metadata"))
    ref = ResourceRef(str(template.get("apiVersion")), str(template.get("kind")),
                      str(meta.get("namespace") or ""), str(meta.get("name")))
    live = sorted((w for w in works if not w.deleting), key=lambda w: w.cluster)
    clusters: list[Obj] = []
    aggregated: list[Obj] = []
    applied_all = bool(live)
    for work in live:
        cluster = work.cluster
        target: dict[str, Any] = {"name": cluster}
        replicas = _manifest_replicas(work, ref)
        if replicas is not None:
            target["replicas"] = replicas
        clusters.append(target)
        result = cluster_result(work, ref, kubefed=False)
        item: dict[str, Any] = {"clusterName": cluster}
        if result is None:
            applied_all = False
            item["health"] = "Unknown"
        else:
            item["applied"] = result.applied
            if not result.applied:
                applied_all = False
                item["appliedMessage"] = result.message or result.reason
            if result.observed_status is not None:
                item["status"] = thaw(result.observed_status)
            item["health"] = health(ref, result.observed_status) if result.applied else (
                "Unhealthy")
        aggregated.append(item)
    spec = mapping(policy.get("spec"))
    binding_spec: dict[str, Any] = {
        # not its resourceVersion: that moves with every status the hub writes on the template
        "resource": {"apiVersion": ref.api_version, "kind": ref.kind, "name": ref.name,
                     "uid": str(meta.get("uid") or "")},
        "clusters": clusters,
        "conflictResolution": str(spec.get("conflictResolution") or "Abort"),
        "preserveResourcesOnDeletion": bool(spec.get("preserveResourcesOnDeletion")),
    }
    if ref.namespace:
        binding_spec["resource"]["namespace"] = ref.namespace
    total = workload_replicas(template)
    if total is not None:
        binding_spec["replicas"] = total
    if spec.get("propagateDeps"):
        binding_spec["propagateDeps"] = True
    if isinstance(spec.get("placement"), Mapping):
        binding_spec["placement"] = thaw(spec["placement"])
    propagated = mapping((items(report.get("conditions")) or [{}])[0])
    if live:
        scheduled = _condition(SCHEDULED, True, "Success",
                               "Binding has been scheduled successfully.")
    elif propagated.get("status") == "False":
        scheduled = _condition(SCHEDULED, False, str(propagated.get("reason") or "NoClusterFit"),
                               str(propagated.get("message") or "no cluster fits"))
    else:
        scheduled = _condition(SCHEDULED, False, "Unschedulable", "no cluster selected")
    if applied_all:
        fully = _condition(FULLY_APPLIED, True, "FullyAppliedSuccess",
                           "All works have been successfully applied")
    else:
        fully = _condition(FULLY_APPLIED, False, "FullyAppliedFailed",
                           "Failed to apply all works, see status.aggregatedStatus for details")
    return {
        "apiVersion": BINDING_API_VERSION, "kind": binding_kind(ref.namespace),
        "metadata": {"name": binding_name(ref.kind, ref.name),
                     **({"namespace": ref.namespace} if ref.namespace else {}),
                     "ownerReferences": [{"apiVersion": ref.api_version, "kind": ref.kind,
                                          "name": ref.name, "uid": str(meta.get("uid") or ""),
                                          "controller": True, "blockOwnerDeletion": False}]},
        "spec": binding_spec,
        "status": {"conditions": [scheduled, fully], "aggregatedStatus": aggregated},
    }


def awaiting_reports(status: Mapping[str, Any]) -> bool:
    """Whether a binding status is scheduled and only waits for members to report: some
    cluster has no result yet and none has failed."""
    scheduled = any(mapping(c).get("type") == SCHEDULED and mapping(c).get("status") == "True"
                    for c in items(status.get("conditions")))
    results = [mapping(a) for a in items(status.get("aggregatedStatus"))]
    return (scheduled and any("applied" not in a for a in results)
            and not any(a.get("applied") is False for a in results))


def with_times(conditions: list[Obj], current: Any, now: str) -> list[Obj]:
    """Conditions with `lastTransitionTime`: kept from `current` while the status holds."""
    before = {str(mapping(c).get("type")): mapping(c) for c in items(current)}
    out = []
    for cond in conditions:
        prev = before.get(str(cond["type"]))
        same = prev is not None and prev.get("status") == cond["status"]
        out.append({**cond, "lastTransitionTime": str(prev.get("lastTransitionTime"))
                    if same and prev is not None and prev.get("lastTransitionTime") else now})
    return out


# writer ----------------------------------------------------------------------------------------


@dataclass
class BindingViews:
    """Writes the bindings (see module docstring). `template_of`, `policy_of`, `works_of` and
    `report_of` read the Karmada controller's caches."""

    host: KubeClient
    template_of: Callable[[TemplateKey], Obj | None]
    policy_of: Callable[[Obj], Mapping[str, Any] | None]
    works_of: Callable[[ResourceRef], list[WorkInfo]]
    report_of: Callable[[Obj], Mapping[str, Any]]
    now: Callable[[], str]
    engine: Engine[TemplateKey] = field(init=False)
    informers: dict[str, Informer] = field(init=False)
    _pending: set[TemplateKey] = field(default_factory=set)
    # new bindings whose first status waits for reports: until when (monotonic)
    _held: dict[TemplateKey, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.engine = Engine("karmada-bindings", self.reconcile, workers=2)
        self.informers = {kind: Informer(self.host, BINDING_API_VERSION, kind,
                                         transform=strip_managed_fields)
                          for kind in ("ResourceBinding", "ClusterResourceBinding")}

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for informer in self.informers.values():
                group.create_task(informer.run())
            group.create_task(self.engine.run())

    def enqueue(self, key: TemplateKey) -> None:
        if key not in self._pending:
            self._pending.add(key)
            self.engine.enqueue(key, delay_s=BINDING_DELAY_S)

    async def reconcile(self, key: TemplateKey) -> None:
        self._pending.discard(key)
        api_version, kind, namespace, name = key
        informer = self.informers[binding_kind(namespace)]
        if not informer.synced:
            if not isinstance(informer.last_error, NotFound):  # else: a hub without the type
                self.enqueue(key)
            return
        current = informer.get(namespace or None, binding_name(kind, name))
        template = self.template_of(key)
        if template is None or nested(template, "metadata", "deletionTimestamp"):
            self._held.pop(key, None)
            if current is not None:  # the owner reference does it too, where a GC runs
                try:
                    await self.host.delete(BINDING_API_VERSION, binding_kind(namespace),
                                           binding_name(kind, name), namespace or None)
                except NotFound:
                    pass
            return
        policy = self.policy_of(template)
        if policy is None:
            return  # unclaimed: the last binding stays until the template goes
        ref = ResourceRef(api_version, kind, namespace, name)
        desired = binding(template, policy, self.works_of(ref), self.report_of(template))
        status = desired.pop("status")
        try:
            if current is None or not W.is_subset(desired["spec"], current.get("spec")):
                current = await self.host.apply(desired, field_manager=FIELD_MANAGER,
                                                force=True)
            if self._hold_first_status(key, current, status):
                return
            status["conditions"] = with_times(status["conditions"],
                                              nested(current, "status", "conditions"), self.now())
            if W.strip_volatile(mapping(mapping(current).get("status"))) != W.strip_volatile(
                    status):
                await self.host.apply_status(
                    {"apiVersion": desired["apiVersion"], "kind": desired["kind"],
                     "metadata": {k: v for k, v in desired["metadata"].items()
                                  if k in ("name", "namespace")},
                     "status": status}, field_manager=FIELD_MANAGER, force=True)
        except NotFound:
            pass  # the namespace (or the binding types) went away
        except KubeError as exc:
            if exc.code not in (404, 405):
                raise

    def _hold_first_status(self, key: TemplateKey, current: Obj | None, status: Obj) -> bool:
        """Put off a binding's first status while it only waits for reports (see the module
        docstring); the members' reports enqueue the binding again, the hold's end does too."""
        if nested(current, "status", "conditions") or not awaiting_reports(status):
            self._held.pop(key, None)
            return False
        now = time.monotonic()
        until = self._held.setdefault(key, now + FIRST_STATUS_HOLD_S)
        if now >= until:
            self._held.pop(key, None)
            return False
        self.engine.enqueue(key, delay_s=until - now)
        return True


__all__ = ["BINDING_API_VERSION", "BindingViews", "awaiting_reports", "binding", "binding_name", "health"]
