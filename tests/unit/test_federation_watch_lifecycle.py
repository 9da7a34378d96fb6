"""When the sync controllers start and stop watching a kind, with the events ordered by hand:
a policy (or an enabled FederatedTypeConfig) arriving while the record of finalized kinds is
written, an add of a kind racing its discard, a template of a kind nothing needs, and a watch
asked for while the controller stops."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, cast

import pytest

from tether.federation._util import start_in
from tether.federation.finalizing import KindRecord, decode
from tether.federation.metrics import HubMetrics
from tether.federation.propagation import (
    HubInformers,
    KarmadaController,
    KubeFedController,
    _FedType,
)
from tether.kube import Informer, KubeClient, ObjectKey, WatchEvent

DEPLOY = ("apps/v1", "Deployment")


class GatedHost:
    """The record's writes wait for `gate`; nothing else of the host is used."""

    server = "https://127.0.0.1:1"

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.writing = asyncio.Event()
        self.written: list[dict[str, Any]] = []

    async def apply(self, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        self.writing.set()
        await self.gate.wait()
        self.written.append(body)
        return body


def _controller(host: GatedHost) -> KarmadaController:
    client = cast(KubeClient, host)
    ctrl = KarmadaController(host=client, shared=HubInformers(client), metrics=HubMetrics())
    ctrl.record.loaded = True
    ctrl.shared.works._synced.set()
    return ctrl


def _listed(informer: Informer, *objs: dict[str, Any]) -> Informer:
    for obj in objs:
        meta = obj["metadata"]
        informer._cache[ObjectKey(meta.get("namespace", ""), meta["name"])] = obj
    informer._synced.set()
    return informer


POLICY = {"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
          "metadata": {"name": "web", "namespace": "default"},
          "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                          "name": "web"}],
                   "placement": {"clusterAffinity": {"clusterNames": ["m1"]}}}}


async def test_a_policy_arriving_while_the_record_is_written_keeps_the_watch() -> None:
    host = GatedHost()
    ctrl = _controller(host)
    ctrl.record.kinds = {DEPLOY}
    informer = _listed(Informer(cast(KubeClient, host), *DEPLOY))
    watch = asyncio.create_task(asyncio.sleep(3600))
    ctrl.templates[DEPLOY] = (informer, watch)
    try:
        releasing = asyncio.create_task(ctrl._reconcile_kind(DEPLOY))
        await asyncio.wait_for(host.writing.wait(), 10)  # the kind's record entry is going
        _listed(ctrl.policies["PropagationPolicy"], POLICY)
        ctrl._on_policy(WatchEvent("ADDED", POLICY))
        host.gate.set()
        await asyncio.wait_for(releasing, 10)
        assert DEPLOY in ctrl.templates, "the kind a policy now selects is no longer watched"
        assert not watch.cancelled()
    finally:
        watch.cancel()


async def test_an_add_waits_for_a_discard_of_the_same_kind_in_flight() -> None:
    host = GatedHost()
    record = KindRecord(cast(KubeClient, host), "karmada", kinds={DEPLOY}, loaded=True)
    discarding = asyncio.create_task(record.discard(DEPLOY))
    await asyncio.wait_for(host.writing.wait(), 10)
    adding = asyncio.create_task(record.add(DEPLOY))
    await asyncio.sleep(0)
    host.gate.set()
    await asyncio.wait_for(asyncio.gather(discarding, adding), 10)
    assert record.kinds == {DEPLOY}
    assert decode(host.written[-1]["data"]["karmada"]) == {DEPLOY}


async def test_a_template_of_a_kind_nothing_needs_does_not_restart_its_watch() -> None:
    ctrl = _controller(GatedHost())
    # e.g. a late Work event of a template whose kind was just let go
    await ctrl.reconcile(("apps/v1", "Deployment", "default", "web"))
    assert DEPLOY not in ctrl.templates


async def test_a_watch_asked_for_while_the_group_stops_is_a_cancellation() -> None:
    seen: list[BaseException] = []
    late: list[Any] = []

    async def fail() -> None:
        raise ValueError("a sibling fails: the group shuts down")

    async def idle() -> None:
        await asyncio.sleep(3600)

    async def asks_late(group: asyncio.TaskGroup) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            coro = idle()
            late.append(coro)
            try:
                start_in(group, coro)
            except BaseException as exc:  # what start_in raised is the point
                seen.append(exc)
            raise

    with pytest.raises(ExceptionGroup):
        async with asyncio.TaskGroup() as group:
            group.create_task(asks_late(group))
            await asyncio.sleep(0)
            group.create_task(fail())
    assert len(seen) == 1 and isinstance(seen[0], asyncio.CancelledError)
    assert inspect.getcoroutinestate(late[0]) == inspect.CORO_CLOSED


FED = ("types.kubefed.io/v1beta1", "FederatedConfigMap")
FTC = {"apiVersion": "core.kubefed.io/v1beta1", "kind": "FederatedTypeConfig",
       "metadata": {"name": "configmaps", "namespace": "kube-federation-system"},
       "spec": {"propagation": "Enabled",
                "federatedType": {"group": "types.kubefed.io", "version": "v1beta1",
                                  "kind": "FederatedConfigMap"},
                "targetType": {"version": "v1", "kind": "ConfigMap", "scope": "Namespaced"}}}


async def test_a_type_enabled_again_while_the_record_is_written_stays_watched() -> None:
    host = GatedHost()
    client = cast(KubeClient, host)
    ctrl = KubeFedController(host=client, shared=HubInformers(client), metrics=HubMetrics())
    ctrl.record.loaded = True
    ctrl.record.kinds = {FED}
    ctrl._group = cast(Any, object())  # running; re-enabling a draining type starts no task
    watch = asyncio.create_task(asyncio.sleep(3600))
    informer = _listed(Informer(client, *FED))
    ctrl.types[FED[1]] = _FedType("", FED[0], "", "", "", informer, watch, draining=True)
    try:
        releasing = asyncio.create_task(ctrl._reconcile_kind(FED[1]))
        await asyncio.wait_for(host.writing.wait(), 10)
        _listed(ctrl.ftcs, FTC)
        ctrl._sync_types()
        host.gate.set()
        await asyncio.wait_for(releasing, 10)
        assert FED[1] in ctrl.types and not ctrl.types[FED[1]].draining
        assert not watch.cancelled()
    finally:
        ctrl._group = None
        watch.cancel()
