"""Works parsed once at the hub's informer: what each field reads as, malformed input read as
absent, and the parsed Work readable by every handler of its event (DELETED included)."""

from __future__ import annotations

import contextlib
from typing import Any, cast

import pytest

from tether.federation import works as W
from tether.federation.model import ResourceRef
from tether.federation.propagation import HubInformers
from tether.federation.workinfo import (
    AppliedCondition,
    WorkInfo,
    cluster_result,
    member_status_for_aggregation,
    work_info,
)
from tether.kube import KubeClient, ObjectKey, WatchEvent

SOURCE = ResourceRef("apps/v1", "Deployment", "shop", "web")


def _work(*, generation: Any = 3, observed: Any = 3, status: str = "True",
          entries: Any = None, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "work.tether.io/v1alpha1", "kind": "Work",
        "metadata": {"name": "deployment-shop-web", "namespace": "tether-es-m1",
                     "generation": generation, "resourceVersion": "42",
                     "labels": W.source_labels("karmada", SOURCE),
                     "annotations": {W.SOURCE_ANNOTATION: W.source_key(SOURCE),
                                     W.CHANGED_AT_ANNOTATION: "1700000000.5"},
                     "finalizers": [W.EXECUTION_FINALIZER], **meta},
        "spec": {"workload": {"manifests": [
            {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": "web", "namespace": "shop"}, "spec": {"replicas": 2}}]},
            "conflictResolution": "Overwrite", "preserveResourcesOnDeletion": True},
        "status": {
            "conditions": [{"type": "Applied", "status": status, "reason": "AppliedSuccessful",
                            "message": "ok", "observedGeneration": observed,
                            "lastTransitionTime": "2026-12-01T00:00:00Z"}],
            "manifestStatuses": entries if entries is not None else [
                {"identifier": {"ordinal": 0, "kind": "Deployment", "name": "web"},
                 "applied": True, "status": {"readyReplicas": 2}, "generation": 5,
                 "latencySeconds": 0.25, "appliedAt": "2026-12-01T00:00:01Z"}]},
    }


def test_every_field_of_a_well_formed_work() -> None:
    info = work_info(_work())
    assert (info.name, info.namespace, info.cluster) == ("deployment-shop-web", "tether-es-m1",
                                                         "m1")
    assert info.key == ObjectKey("tether-es-m1", "deployment-shop-web")
    assert (info.generation, info.resource_version, info.deleting) == (3, "42", False)
    assert info.finalizers == (W.EXECUTION_FINALIZER,)
    assert info.origin == ("karmada", SOURCE)
    assert info.overwrite and info.preserve_on_deletion
    assert info.applied == AppliedCondition("True", "AppliedSuccessful", "ok", 3,
                                            "2026-12-01T00:00:00Z")
    assert info.reported and info.applied_ok
    entry = info.manifest_status(SOURCE)
    assert entry is not None and (entry.ordinal, entry.applied, entry.generation,
                                  entry.latency_seconds) == (0, True, 5, 0.25)
    assert entry.raw["appliedAt"] == "2026-12-01T00:00:01Z"
    manifest = info.manifest(SOURCE)
    assert manifest is not None and manifest["spec"] == {"replicas": 2}
    assert info.manifest(ResourceRef("v1", "ConfigMap", "shop", "web")) is None


@pytest.mark.parametrize(("change", "check"), [
    # a report on an older generation is no report
    ({"observed": 2}, lambda i: not i.reported and not i.applied_ok),
    ({"status": "False"}, lambda i: i.reported and not i.applied_ok),
    # malformed generations read as absent (0 / None), never as an error
    ({"generation": "3"}, lambda i: i.generation == 0 and not i.reported),
    ({"observed": True}, lambda i: i.applied is not None and i.applied.observed_generation is None),
    ({"entries": "oops"}, lambda i: i.manifest_statuses == ()),
    ({"entries": [{"identifier": {"ordinal": "x", "kind": "Deployment", "name": "web"},
                   "latencySeconds": "slow", "status": "up"}, 7]},
     lambda i: [(e.ordinal, e.latency_seconds, e.status) for e in i.manifest_statuses]
     == [(-1, None, None)]),
    ({"namespace": "default"}, lambda i: i.cluster == ""),
    ({"labels": {}}, lambda i: i.origin is None),
    ({"deletionTimestamp": "2026-12-01T00:00:00Z"}, lambda i: i.deleting),
])
def test_each_field_reads_as_documented(change: dict[str, Any], check: Any) -> None:
    args = {k: v for k, v in change.items() if k in ("generation", "observed", "status",
                                                     "entries")}
    meta = {k: v for k, v in change.items() if k not in args}
    assert check(work_info(_work(**args, **meta)))


def test_nothing_parses_to_an_empty_work() -> None:
    info = work_info({"metadata": "nope", "spec": [], "status": None})
    assert info == WorkInfo(name="", namespace="", cluster="")
    assert cluster_result(info, SOURCE, kubefed=False) is None
    assert member_status_for_aggregation(info, SOURCE, 1) is None


def test_results_and_aggregation_read_the_current_report() -> None:
    info = work_info(_work())
    result = cluster_result(info, SOURCE, kubefed=False)
    assert result is not None and result.applied and result.latency_seconds == 0.25
    assert result.observed_status == {"readyReplicas": 2}
    assert member_status_for_aggregation(info, SOURCE, 7) == {
        "readyReplicas": 2, "generation": 5, "resourceTemplateGeneration": 7}
    stale = work_info(_work(observed=2))
    assert member_status_for_aggregation(stale, SOURCE, 7) == {"readyReplicas": 2,
                                                               "generation": 5}
    failed = work_info(_work(status="False"))
    result = cluster_result(failed, SOURCE, kubefed=True)
    assert result is not None and (result.applied, result.reason) == (False, "AppliedSuccessful")


def test_handlers_read_the_parsed_work_even_of_a_deleted_one() -> None:
    shared = HubInformers(cast(KubeClient, object()))
    seen: list[tuple[str, WorkInfo | None]] = []
    shared.work_handlers.append(lambda e: seen.append((e.type, shared.work_info(e.key))))
    body = _work()
    key = ObjectKey("tether-es-m1", "deployment-shop-web")
    shared._on_work(WatchEvent("ADDED", body))
    assert shared.works_of(SOURCE) == [work_info(body)]
    shared._on_work(WatchEvent("DELETED", body))
    assert [(t, i.name if i else None) for t, i in seen] == [
        ("ADDED", "deployment-shop-web"), ("DELETED", "deployment-shop-web")]
    assert shared.work_info(key) is None and shared.works_of(SOURCE) == []


def test_a_failing_handler_does_not_leave_a_deleted_work_cached() -> None:
    shared = HubInformers(cast(KubeClient, object()))

    def fails(event: WatchEvent) -> None:
        raise RuntimeError("a handler's bug")

    shared.work_handlers.append(fails)
    body = _work()
    key = ObjectKey("tether-es-m1", "deployment-shop-web")
    with contextlib.suppress(RuntimeError):
        shared._on_work(WatchEvent("ADDED", body))
    with contextlib.suppress(RuntimeError):  # the informer logs it and goes on
        shared._on_work(WatchEvent("DELETED", body))
    assert shared.work_info(key) is None and shared.works_of(SOURCE) == []
