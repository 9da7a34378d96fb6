"""`tether status KIND/NAME`: what happened to one source object in each cluster.

Read from the hub only: the source's Works (applied, member status, latency) and the source's
own status (KubeFed `status.clusters`) or propagation annotation (Karmada) for clusters that got
no Work at all (unknown cluster, not ready, a failed override).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tether.kube import KubeClient, KubeError, NotFound
from tether.objects import Obj

from . import works as W
from ._util import items, mapping, nested
from .crds import WORK_API_VERSION
from .model import ResourceRef
from .propagation import STATUS_ANNOTATION
from .workinfo import work_info


@dataclass(frozen=True)
class ClusterRow:
    cluster: str
    applied: bool | None  # None: not reported yet
    reason: str
    message: str
    observed: str
    latency_s: float | None


@dataclass(frozen=True)
class Report:
    source: ResourceRef
    condition: Obj | None
    rows: tuple[ClusterRow, ...]


async def resolve_kind(host: KubeClient, text: str) -> tuple[str, str, bool]:
    """(apiVersion, Kind, namespaced) for a kind as kubectl accepts it: kind, plural, singular or
    short name, optionally `.group`."""
    wanted, _, group = text.lower().partition(".")
    group_versions = ["v1"]
    for entry in items((await host.request("GET", "/apis")).get("groups")):
        preferred = mapping(mapping(entry).get("preferredVersion")).get("groupVersion")
        if preferred:
            group_versions.append(str(preferred))
    for gv in group_versions:
        gv_group = gv.rpartition("/")[0]
        if group and not (gv_group == group or gv_group.startswith(group + ".")):
            continue
        path = f"/api/{gv}" if "/" not in gv else f"/apis/{gv}"
        try:
            resources = (await host.request("GET", path)).get("resources") or []
        except KubeError:
            continue
        for res in resources:
            r = mapping(res)
            if "/" in str(r.get("name")):
                continue
            names = {str(r.get("name")), str(r.get("singularName") or ""),
                     str(r.get("kind", "")).lower(), *map(str, items(r.get("shortNames")))}
            if wanted in names:
                return gv, str(r["kind"]), bool(r.get("namespaced"))
    raise NotFound(404, "NotFound", f'the server doesn\'t have a resource type "{text}"')


def observed_summary(kind: str, status: Any) -> str:
    s = mapping(status)
    if not s:
        return "-"
    if "readyReplicas" in s or "replicas" in s:
        return f"{int(s.get('readyReplicas') or 0)}/{int(s.get('replicas') or 0)} ready"
    if "numberReady" in s:
        return f"{s.get('numberReady')}/{s.get('desiredNumberScheduled')} ready"
    if "phase" in s:
        return str(s["phase"])
    if "succeeded" in s or "active" in s:
        return f"active {s.get('active', 0)}, succeeded {s.get('succeeded', 0)}"
    del kind
    return "ok"


async def propagation_report(host: KubeClient, kind_text: str, name: str,
                             namespace: str) -> Report:
    api_version, kind, namespaced = await resolve_kind(host, kind_text)
    ns = namespace if namespaced else ""
    ref = ResourceRef(api_version, kind, ns, name)
    source = await host.get(api_version, kind, name, ns or None)
    selector = f"{W.SOURCE_HASH_LABEL}={W.short_hash(W.source_key(ref), 16)}"
    work_list = await host.list_objects(WORK_API_VERSION, "Work", None, selector)
    return report_of(ref, source, work_list)


def report_of(ref: ResourceRef, source: Obj | None, work_list: Iterable[Obj]) -> Report:
    """The report from what the hub holds: the source object (None when it is gone) and its
    Works. Pure: `tether status` reads these from the API, the dashboard from the hub's caches."""
    name = ref.name
    kind = ref.kind
    rows: dict[str, ClusterRow] = {}
    target_kind = kind[len("Federated"):] if kind.startswith("Federated") else kind
    for work in map(work_info, work_list):
        cluster = work.cluster
        applied = work.applied
        fresh = work.reported
        main = work.manifest_status(ResourceRef(ref.api_version, target_kind, "", name))
        rows[cluster] = ClusterRow(
            cluster,
            (applied.status == "True") if fresh and applied is not None else None,
            applied.reason if fresh and applied is not None else "Pending",
            applied.message if applied is not None else "",
            observed_summary(target_kind, main.status if main is not None else None),
            main.latency_seconds if main is not None else None,
        )
    condition: Obj | None = None
    for entry in items(nested(source, "status", "clusters")):  # KubeFed
        e = mapping(entry)
        cname = str(e.get("name"))
        if e.get("status") and (cname not in rows or rows[cname].applied is not False):
            rows[cname] = ClusterRow(cname, False, str(e["status"]), str(e.get("message") or ""),
                                     rows[cname].observed if cname in rows else "-", None)
    for cond in items(nested(source, "status", "conditions")):
        if mapping(cond).get("type") in ("Propagation", "Propagated"):
            condition = dict(mapping(cond))
    raw = nested(source, "metadata", "annotations", STATUS_ANNOTATION)  # Karmada
    if raw:
        try:
            report = json.loads(str(raw))
        except ValueError:
            report = {}
        for entry in items(mapping(report).get("clusters")):
            e = mapping(entry)
            cname = str(e.get("name"))
            if not e.get("applied") and e.get("reason") not in (None, "Pending") and (
                    cname not in rows or rows[cname].applied is not False):
                rows[cname] = ClusterRow(cname, False, str(e.get("reason")),
                                         str(e.get("message") or ""), "-", None)
        conds = items(mapping(report).get("conditions"))
        if conds:
            condition = dict(mapping(conds[0]))
    return Report(ref, condition, tuple(rows[c] for c in sorted(rows)))
