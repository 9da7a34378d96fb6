"""KubeFed's `KubeFedCluster` (core.kubefed.io/v1beta1) as a view of tether's `Cluster`.

One KubeFedCluster per Cluster, same name, in the hub namespace (`tether-system`), so KubeFed's
user guide works against the hub: `kubectl -n tether-system get kubefedclusters` lists the
members with their Ready condition, and `kubectl -n tether-system label kubefedclusters X k=v`
changes placement as labelling the Cluster does.

The `Cluster` is the source of truth. Its spec and status are copied to the view
(`spec.apiEndpoint`, `secretRef`, `proxyURL`, `disabledTLSValidations: ["*"]` for
`insecureSkipTLSVerification`; `status.conditions` Ready — and Offline while the cluster is not
reachable —, `kubernetesVersion`, `region`, `zones`), and edits of those in the view are put
back. Labels are the one thing both sides may edit: a label added, changed or removed on the
view since the two last agreed (the annotation `cluster.tether.io/synced-labels` keeps what they
agreed on) is written to the Cluster, then the Cluster's labels are copied to the view; when
both changed one key, the view's edit wins. The view of a Cluster that goes is deleted (views
carry the annotation `cluster.tether.io/view-of`; a KubeFedCluster someone else made for a name
with no Cluster is left alone).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.engine import Engine
from tether.kube import Informer, KubeClient, NotFound, WatchEvent
from tether.objects import Obj

from ._util import items, mapping, nested, string_map
from .crds import CLUSTER_API_VERSION, KUBEFED_CORE_GROUP
from .health import HUB_NAMESPACE, REASON_NOT_REACHABLE

log = logging.getLogger(__name__)
KFC_API_VERSION = f"{KUBEFED_CORE_GROUP}/v1beta1"
VIEW_OF_ANNOTATION = "cluster.tether.io/view-of"
SYNCED_LABELS_ANNOTATION = "cluster.tether.io/synced-labels"
FIELD_MANAGER = "tether-kubefedcluster-view"


# pure ------------------------------------------------------------------------------------------


def merge_labels(cluster: Mapping[str, str], view: Mapping[str, str],
                 synced: Mapping[str, str]) -> dict[str, str]:
    """The labels both sides should carry: the Cluster's, with every key the view changed since
    `synced` (added, changed or removed) taken from the view."""
    merged = dict(cluster)
    for key in set(view) | set(synced):
        if view.get(key) != synced.get(key):
            if key in view:
                merged[key] = view[key]
            else:
                merged.pop(key, None)
    return merged


def synced_labels(view: Obj | None) -> dict[str, str] | None:
    """What the two sides last agreed on, None for a view tether never synced."""
    raw = nested(view, "metadata", "annotations", SYNCED_LABELS_ANNOTATION)
    if raw is None:
        return None
    try:
        found = json.loads(str(raw))
    except ValueError:
        return None
    return string_map(found)


def view_spec(cluster: Obj) -> Obj:
    spec = mapping(cluster.get("spec"))
    name = str(nested(cluster, "metadata", "name") or "")
    out: dict[str, Any] = {
        "apiEndpoint": str(spec.get("apiEndpoint") or ""),
        "secretRef": {"name": str(mapping(spec.get("secretRef")).get("name") or name)},
    }
    if spec.get("proxyURL"):
        out["proxyURL"] = str(spec["proxyURL"])
    if spec.get("insecureSkipTLSVerification"):
        out["disabledTLSValidations"] = ["*"]
    return out


def view_status(cluster: Obj) -> Obj:
    """KubeFed's cluster status from the Cluster's: the Ready condition (with its reason and
    message, which KubeFed and Karmada share), Offline while unreachable. `lastProbeTime` is
    the condition's last transition: probes that change nothing do not rewrite the view."""
    ready = next((mapping(c) for c in items(nested(cluster, "status", "conditions"))
                  if mapping(c).get("type") == "Ready"), None)
    conditions: list[Obj] = []
    if ready is not None:
        since = str(ready.get("lastTransitionTime")
                    or nested(cluster, "metadata", "creationTimestamp") or "")
        base = {"lastProbeTime": since, "lastTransitionTime": since}
        conditions.append({"type": "Ready", "status": str(ready.get("status") or "Unknown"),
                           "reason": str(ready.get("reason") or ""),
                           "message": str(ready.get("message") or ""), **base})
        if ready.get("reason") == REASON_NOT_REACHABLE:
            conditions.append({"type": "Offline", "status": "True",
                               "reason": REASON_NOT_REACHABLE,
                               "message": str(ready.get("message") or ""), **base})
    spec = mapping(cluster.get("spec"))
    status: dict[str, Any] = {"conditions": conditions}
    version = nested(cluster, "status", "kubernetesVersion")
    if version:
        status["kubernetesVersion"] = str(version)
    if spec.get("region"):
        status["region"] = str(spec["region"])
    if items(spec.get("zones")):
        status["zones"] = [str(z) for z in items(spec.get("zones"))]
    return status


def label_patch(current: Mapping[str, str], wanted: Mapping[str, str]) -> dict[str, Any]:
    """A merge patch of `metadata.labels` turning `current` into `wanted` (None removes)."""
    patch: dict[str, Any] = {k: v for k, v in wanted.items() if current.get(k) != v}
    patch.update({k: None for k in current if k not in wanted})
    return patch


# controller ------------------------------------------------------------------------------------


@dataclass
class KubeFedClusterViews:
    """Keeps one KubeFedCluster per Cluster (see module docstring); call `on_cluster` from the
    hub's Cluster events."""

    host: KubeClient
    namespace: str = HUB_NAMESPACE
    views: Informer = field(init=False)
    engine: Engine[str] = field(init=False)
    _told: bool = False

    def __post_init__(self) -> None:
        self.views = Informer(self.host, KFC_API_VERSION, "KubeFedCluster", self.namespace,
                              on_event=self._on_view)
        self.engine = Engine("kubefedcluster-views", self.reconcile)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.views.run())
            group.create_task(self.engine.run())

    def on_cluster(self, event: WatchEvent) -> None:
        self.engine.enqueue(event.key.name)

    def _on_view(self, event: WatchEvent) -> None:
        self.engine.enqueue(event.key.name)

    async def reconcile(self, name: str) -> None:
        # Both read fresh, not from the informers: a label this pass writes to one side must
        # not look, to the next pass, as if the other side had removed it.
        cluster = await self.host.get_or_none(CLUSTER_API_VERSION, "Cluster", name)
        view = await self.host.get_or_none(KFC_API_VERSION, "KubeFedCluster", name,
                                           self.namespace)
        if cluster is None or nested(cluster, "metadata", "deletionTimestamp"):
            if view is not None and nested(view, "metadata", "annotations", VIEW_OF_ANNOTATION):
                try:
                    await self.host.delete(KFC_API_VERSION, "KubeFedCluster", name,
                                           self.namespace)
                except NotFound:
                    pass
            return
        cluster_labels = string_map(nested(cluster, "metadata", "labels"))
        view_labels = string_map(nested(view, "metadata", "labels"))
        synced = synced_labels(view)
        merged = (cluster_labels if view is None or synced is None
                  else merge_labels(cluster_labels, view_labels, synced))
        if merged != cluster_labels:
            await self.host.patch(CLUSTER_API_VERSION, "Cluster", name,
                                  {"metadata": {"labels": label_patch(cluster_labels, merged)}},
                                  field_manager=FIELD_MANAGER)
        spec = view_spec(cluster)
        synced_text = json.dumps(merged, sort_keys=True, separators=(",", ":"))
        if view is None:
            try:
                view = await self.host.create(
                    {"apiVersion": KFC_API_VERSION, "kind": "KubeFedCluster",
                     "metadata": {"name": name, "namespace": self.namespace, "labels": merged,
                                  "annotations": {VIEW_OF_ANNOTATION: name,
                                                  SYNCED_LABELS_ANNOTATION: synced_text}},
                     "spec": spec}, field_manager=FIELD_MANAGER)
            except NotFound as exc:  # a hub installed before the type: no views
                if not self._told:
                    self._told = True
                    log.warning("no KubeFedCluster views (%s); run `tether hub install` to add "
                                "the type", exc.message)
                return
        else:
            annotations = string_map(nested(view, "metadata", "annotations"))
            patch: dict[str, Any] = {}
            if view_labels != merged:
                patch.setdefault("metadata", {})["labels"] = label_patch(view_labels, merged)
            if (annotations.get(SYNCED_LABELS_ANNOTATION) != synced_text
                    or annotations.get(VIEW_OF_ANNOTATION) != name):
                patch.setdefault("metadata", {})["annotations"] = {
                    VIEW_OF_ANNOTATION: name, SYNCED_LABELS_ANNOTATION: synced_text}
            if mapping(view.get("spec")) != spec:
                patch["spec"] = {**{k: None for k in mapping(view.get("spec")) if k not in spec},
                                 **spec}
            if patch:
                view = await self.host.patch(KFC_API_VERSION, "KubeFedCluster", name, patch,
                                             namespace=self.namespace,
                                             field_manager=FIELD_MANAGER)
        status = view_status(cluster)
        if mapping(view.get("status")) != status:
            current = mapping(view.get("status"))
            body = {**{k: None for k in current if k not in status}, **status}
            await self.host.patch(KFC_API_VERSION, "KubeFedCluster", name, {"status": body},
                                  namespace=self.namespace, subresource="status",
                                  field_manager=FIELD_MANAGER)


__all__ = [
    "KFC_API_VERSION",
    "KubeFedClusterViews",
    "label_patch",
    "merge_labels",
    "view_spec",
    "view_status",
]
