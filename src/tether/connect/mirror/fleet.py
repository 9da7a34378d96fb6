"""The service mirror inside the hub: `MirrorPolicy` objects drive a `ServiceMirror` per member.

The hub tells the fleet who its members are (`members()`: name, credentials, readiness, labels,
zones) and is told about stale endpoints (`report(cluster, condition)`, for the cluster's
status). Clients come from one `ClientPool`: a pull member's credentials carry the hub tunnel's
CONNECT proxy, so its API is reached through the tunnel like every other hub client reaches it.

The reconcile is per policy: parse it, plan which instances run (`policy.plan_members`), start
the new ones, restart those whose remotes or credentials changed (mirrors are level-based, so a
restart relists and changes nothing that is right), stop the ones no longer wanted, and remove
from the remaining members what was mirrored from a member that left (from each of them,
whether its mirror runs or not: one left alone runs none), and from a member that is still
registered but no longer selected what it mirrored. Deleting the policy removes what its
mirrors wrote from every member it took part in, running a mirror at that moment or not (one
being restarted), global Services included. The policy's status lists who mirrors whom.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tether.connect.fleetwatch import MemberSignal
from tether.connect.mirror import labels as L
from tether.connect.mirror.plan import Freshness
from tether.connect.mirror.policy import (
    API_VERSION,
    KIND,
    Instance,
    Member,
    PolicyError,
    PolicySpec,
    mirror_policy_crd,
    parse_policy,
    plan_members,
    policy_status,
    remote_settings,
)
from tether.connect.mirror.service import Remote, ServiceMirror
from tether.connect.mirror.stale import Condition
from tether.engine import Engine
from tether.kube import (
    AlreadyExists,
    ClientPool,
    Forbidden,
    Informer,
    KubeClient,
    KubeError,
    NotFound,
    WatchEvent,
    strip_managed_fields,
)
from tether.net.tasks import cancel_and_wait
from tether.objects import Obj

log = logging.getLogger(__name__)
MemberSource = Callable[[], list[Member]]
ConditionSink = Callable[[str, Obj], Awaitable[None]]
MEMBERS_RECHECK_S = 15.0  # credentials Secrets change without a Cluster event
SEVERITY: dict[Freshness, int] = {"fresh": 0, "unreachable": 1, "not-ready": 2, "withdrawn": 3}


@dataclass
class _Running:
    instance: Instance
    spec: PolicySpec
    fingerprint: tuple[object, ...]
    task: asyncio.Task[None]
    mirror: ServiceMirror


@dataclass
class _Policy:
    taking_part: set[str] = field(default_factory=set)
    namespace: str = ""
    running: dict[str, _Running] = field(default_factory=dict)
    # Every member this policy took part in while this process ran it, until its mirrors are
    # cleaned: a member whose mirror is not running at the moment (restarting, or alone once
    # the others left) can still hold what its mirror wrote.
    holders: set[str] = field(default_factory=set)


class MirrorFleet:
    def __init__(self, host: KubeClient, members: MemberSource, *, report: ConditionSink | None = None) -> None:
        self.host = host
        self.members = members
        self.report = report
        self.pool = ClientPool()
        self.policies = Informer(host, API_VERSION, KIND, transform=strip_managed_fields,
                                 on_event=self._policy_event)
        self.engine: Engine[str] = Engine("mirror-fleet", self._reconcile)
        self._state: dict[str, _Policy] = {}
        self._freshness: dict[str, dict[str, tuple[Freshness, Condition]]] = {}  # remote -> observer -> state
        self._group: asyncio.TaskGroup | None = None

    def _policy_event(self, event: WatchEvent) -> None:
        self.engine.enqueue(event.key.name)

    def members_changed(self) -> None:
        for name in set(self._state) | {k.name for k in self.policies.keys()}:  # noqa: SIM118 (an Informer)
            self.engine.enqueue(name)

    # running -----------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._ensure_crd()
            async with asyncio.TaskGroup() as group:
                self._group = group
                group.create_task(self.policies.run())
                group.create_task(self.engine.run())
                group.create_task(MemberSignal(MEMBERS_RECHECK_S).each_change(self._recheck, "mirror fleet"))
        finally:
            self._group = None
            for state in self._state.values():
                for running in state.running.values():
                    running.task.cancel()
            await self.pool.aclose()

    async def _ensure_crd(self) -> None:
        body = mirror_policy_crd()
        while True:
            try:
                if await self.host.get_or_none("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                                               body["metadata"]["name"]) is None:
                    await self.host.create(body, field_manager="tether-connect-mirror")
                return
            except AlreadyExists:
                return
            except Forbidden as exc:
                log.error("cannot create the MirrorPolicy CRD (%s); install it with cluster-admin rights", exc.message)
                return
            except KubeError as exc:
                log.warning("MirrorPolicy CRD: %s; retrying", exc)
                await asyncio.sleep(2.0)

    async def _recheck(self) -> None:
        self.members_changed()

    # reconcile ---------------------------------------------------------------------------

    async def _reconcile(self, name: str) -> None:
        obj = self.policies.get(None, name)
        state = self._state.setdefault(name, _Policy())
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            await self._stop_all(name, state, clean=True)
            self._state.pop(name, None)
            return
        try:
            spec = parse_policy(obj)
        except PolicyError as exc:
            await self._write_status(obj, policy_status(None, str(exc), [], obj["metadata"].get("generation")))
            return
        members = {m.name: m for m in self.members()}
        instances, taking_part = plan_members(name, spec, members.values(), state.taking_part)
        left = state.taking_part - taking_part
        if state.namespace and state.namespace != spec.settings.mirror_namespace:
            await self._stop_all(name, state, clean=True)
        state.namespace = spec.settings.mirror_namespace
        state.taking_part = taking_part
        state.holders |= taking_part
        wanted = {i.local: i for i in instances}
        for local in list(state.running):
            if local not in wanted:
                await self._stop(state, local)
        for local, instance in wanted.items():
            credentials = tuple(members[n].credentials for n in (local, *instance.remotes))
            fingerprint = (instance, spec, credentials)
            current = state.running.get(local)
            if current is not None and current.fingerprint == fingerprint and not current.task.done():
                continue
            if current is not None:
                await self._stop(state, local)
            state.running[local] = await self._start(instance, spec, fingerprint, members)
        for gone in sorted(left):
            # every member still taking part, whether or not its mirror runs now (a member
            # left alone runs none, yet holds what it mirrored from the one that left)
            for local in sorted(taking_part):
                await self._clean(local, spec.settings.mirror_namespace, gone)
            if gone in members:  # still registered, no longer selected: it keeps no mirrors either
                for other in sorted(state.holders):
                    await self._clean(gone, spec.settings.mirror_namespace, other)
                await self._clean_globals(gone, spec.settings.mirror_namespace)
        await self._write_status(obj, policy_status(spec, "", instances, obj["metadata"].get("generation")))

    async def _start(self, instance: Instance, spec: PolicySpec, fingerprint: tuple[object, ...],
                     members: dict[str, Member]) -> _Running:
        local = await self.pool.set(instance.local, members[instance.local].credentials)
        remotes = [Remote(remote_settings(r, spec.stale), await self.pool.set(r, members[r].credentials))
                   for r in instance.remotes]
        mirror = ServiceMirror(instance.local, local, spec.settings, remotes, zones=instance.zones,
                               on_freshness=lambda remote, state, condition: self._observed(
                                   instance.local, remote, state, condition))
        assert self._group is not None
        task = self._group.create_task(self._supervise(instance, mirror))
        log.info("mirror policy %s: %s mirrors %s", instance.policy, instance.local, ", ".join(instance.remotes))
        return _Running(instance, spec, fingerprint, task, mirror)

    async def _supervise(self, instance: Instance, mirror: ServiceMirror) -> None:
        try:
            await mirror.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("mirror policy %s: the mirror into %s failed; it starts again", instance.policy,
                          instance.local)
            await asyncio.sleep(2.0)
            self.engine.enqueue(instance.policy)

    async def _stop(self, state: _Policy, local: str) -> None:
        running = state.running.pop(local, None)
        if running is None:
            return
        await cancel_and_wait(running.task)

    async def _stop_all(self, name: str, state: _Policy, *, clean: bool) -> None:
        """Stop the policy's mirrors; with `clean`, remove what they wrote from every member
        the policy took part in, running a mirror at this moment or not."""
        holders = state.holders | state.taking_part | set(state.running)
        for local in list(state.running):
            await self._stop(state, local)
        if clean and state.namespace:
            registered = {m.name for m in self.members()}  # a deregistered cluster is not ours to reach
            for local in sorted(holders & registered):
                for gone in sorted(holders):  # its own name too: its slices behind global Services
                    await self._clean(local, state.namespace, gone)
                await self._clean_globals(local, state.namespace)
        state.taking_part = set()
        state.holders = set()

    async def _clean(self, local: str, namespace: str, gone: str) -> None:
        """Remove from `local` what was mirrored from member `gone`."""
        if local not in self.pool:
            member = next((m for m in self.members() if m.name == local), None)
            if member is None:
                return  # not a member any more: nothing to reach it with
            await self.pool.set(local, member.credentials)
        try:
            removed = await remove_mirrors_of(self.pool.get(local), namespace, gone)
        except KubeError as exc:
            log.warning("removing %s's mirrors from %s: %s", gone, local, exc)
            return
        if removed:
            log.info("removed %d objects mirrored from %s out of %s", removed, gone, local)

    async def _clean_globals(self, local: str, namespace: str) -> None:
        """Remove the global Services the policy's mirror made in `local` (every contributor's)."""
        if local not in self.pool:
            return
        client = self.pool.get(local)
        try:
            for obj in await client.list_objects("v1", "Service", namespace, f"{L.GLOBAL_SVC}={L.TRUE}"):
                try:
                    await client.delete("v1", "Service", obj["metadata"]["name"], namespace)
                except NotFound:
                    pass
        except KubeError as exc:
            log.warning("removing global Services from %s: %s", local, exc)

    async def _write_status(self, obj: Obj, status: Obj) -> None:
        if _own_status(obj.get("status") or {}, status) == status:
            return  # another writer's conditions are theirs: the apply keeps them anyway
        body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": obj["metadata"]["name"]},
                "status": status}
        try:
            await self.host.apply_status(body, field_manager="tether-connect-mirror")
        except KubeError as exc:
            log.warning("MirrorPolicy %s status: %s", obj["metadata"]["name"], exc)

    # stale endpoints -> the remote's Cluster condition ----------------------------------------

    def _observed(self, observer: str, remote: str, state: Freshness, condition: Condition) -> None:
        seen = self._freshness.setdefault(remote, {})
        seen[observer] = (state, condition)
        worst_observer, (worst, worst_condition) = max(seen.items(), key=lambda item: SEVERITY[item[1][0]])
        if self.report is None or self._group is None:
            return
        message = worst_condition.message if worst == "fresh" else f"seen from {worst_observer}: " \
                                                                   f"{worst_condition.message}"
        body = {"status": worst_condition.status, "reason": worst_condition.reason, "message": message}
        self._group.create_task(self._report(remote, body))

    async def _report(self, remote: str, condition: Obj) -> None:
        assert self.report is not None
        try:
            await self.report(remote, condition)
        except KubeError as exc:
            log.warning("reporting mirrored endpoints of %s: %s", remote, exc)


def _own_status(current: Obj, written: Obj) -> Obj:
    """The part of `current` the fleet writes: its fields and its condition types."""
    types = {c.get("type") for c in written.get("conditions") or []}
    own: Obj = {k: v for k, v in current.items() if k in written and k != "conditions"}
    own["conditions"] = [c for c in current.get("conditions") or [] if c.get("type") in types]
    return own


async def remove_mirrors_of(client: KubeClient, namespace: str, cluster: str) -> int:
    """Delete every mirror, Endpoints and slice in `namespace` that came from `cluster` (its
    per-cluster mirrors and its slices behind global Services)."""
    removed = 0
    own = f"{L.MIRRORED_SVC}={L.TRUE},{L.PREFIX_SYNC}={cluster}"
    targets = [("discovery.k8s.io/v1", "EndpointSlice", own),
               ("discovery.k8s.io/v1", "EndpointSlice", f"{L.MIRRORED_SLICE}={L.TRUE},{L.SLICE_SYNC_NAME}={cluster}"),
               ("v1", "Endpoints", own), ("v1", "Service", own)]
    for api_version, kind, selector in targets:
        for obj in await client.list_objects(api_version, kind, namespace, selector):
            try:
                await client.delete(api_version, kind, obj["metadata"]["name"], namespace)
                removed += 1
            except NotFound:
                pass
    return removed
