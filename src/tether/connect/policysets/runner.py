"""`tether policy-sets`: the remote's labelled pods as GlobalNetworkSets in the local cluster.

Level-based on the one engine, keyed by set (namespace, label value). Pod events update an index
pod -> set (so a pod whose label changes, completes or goes is taken out of its old set) and
enqueue the sets concerned; the reconcile computes the set's nets from the index, plans against
the local GlobalNetworkSet and writes it (create, replace or delete when empty).

Sets are written through `projectcalico.org/v3` (what semaphore-policy writes), or through
`crd.projectcalico.org/v1` when the cluster serves only Calico's CRDs. Nothing is deleted before
both the remote pods and the local sets have been listed; after that every set this cluster
owns (`managed-by=semaphore-policy`, `policy.semaphore.uw.io/cluster=<cluster>`) is looked at,
which collects the sets of pods that went away while nothing ran.

With `network_policies`, every Kubernetes NetworkPolicy annotated
`policy.semaphore.uw.io/ingress-from: <Calico selector over set labels>` gets a companion
`<name>-<cluster>` allowing the matching sets' nets (see `plan.companion_policy`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from tether.connect.informers import wait_listed
from tether.connect.policysets import plan as P
from tether.connect.written import ABSENT, Written
from tether.engine import Engine, RequeueAfter
from tether.kube import (
    AlreadyExists,
    Conflict,
    Informer,
    KubeClient,
    KubeError,
    NotFound,
    ObjectKey,
    Preconditions,
    WatchEvent,
    strip_managed_fields,
)
from tether.net.metrics import Labels, counter, gauge, render
from tether.objects import Obj, calico_selector

log = logging.getLogger(__name__)
API_VERSIONS = ("projectcalico.org/v3", "crd.projectcalico.org/v1")
FIELD_MANAGER = "semaphore-policy"
RETRY_S = 0.05


@dataclass
class PolicyMetrics:
    """semaphore-policy's metric names, and tether's set sizes."""

    calico_failures: dict[Labels, float] = field(default_factory=dict)
    watcher_failures: dict[Labels, float] = field(default_factory=dict)
    requeues: dict[Labels, float] = field(default_factory=dict)
    sizes: dict[Labels, float] = field(default_factory=dict)

    def render(self) -> str:
        return render([
            counter("kube_policy_semaphore_calico_client_failures", "Number of calico client failed requests.",
                    self.calico_failures),
            counter("kube_policy_semaphore_pod_watcher_failures",
                    "Number of failed pod watcher actions (watch|list).", self.watcher_failures),
            counter("kube_policy_semaphore_sync_requeue", "Number of attempts to requeue a sync.", self.requeues),
            gauge("tether_policy_sets_nets", "Nets in each GlobalNetworkSet this controller keeps", self.sizes),
        ])


class PolicySets:
    def __init__(self, cluster: str, remote: KubeClient, local: KubeClient, *, resync_s: float = 0.0,
                 network_policies: bool = False, workers: int = 4) -> None:
        self.cluster = cluster
        self.remote = remote
        self.local = local
        self.resync_s = resync_s
        self.network_policies = network_policies
        self.metrics = PolicyMetrics()
        self.api_version = API_VERSIONS[0]
        self.pods = Informer(remote, "v1", "Pod", label_selector=P.POD_SELECTOR, transform=strip_managed_fields,
                             on_event=self._pod_event, idle_timeout_s=60.0)
        self.sets: Informer | None = None  # made once the served API version is known
        self.policies: Informer | None = None
        self.engine: Engine[P.SetKey] = Engine("policy-sets", self._reconcile, workers=workers)
        self.policy_engine: Engine[ObjectKey] = Engine("policy-sets-netpol", self._reconcile_policy)
        self._pod_sets: dict[ObjectKey, tuple[P.SetKey, tuple[str, ...]]] = {}
        self._members: dict[P.SetKey, dict[ObjectKey, tuple[str, ...]]] = {}
        self._written: Written[str] = Written()
        self._listed = asyncio.Event()

    # health ------------------------------------------------------------------------------

    @property
    def healthy(self) -> bool:
        return self.pods.synced and self.pods.failures < 3 and self.sets is not None and self.sets.synced

    def health_report(self) -> str:
        if not self.pods.synced:
            return f"remote pods not listed yet ({self.pods.last_error.message if self.pods.last_error else ''})\n"
        if self.pods.failures:
            return f"watching remote pods fails: {self.pods.last_error.message if self.pods.last_error else ''}\n"
        if self.sets is None or not self.sets.synced:
            return "local GlobalNetworkSets not listed yet\n"
        return "ok\n"

    # index -------------------------------------------------------------------------------

    def _pod_event(self, event: WatchEvent) -> None:
        key = event.key
        old = self._pod_sets.pop(key, None)
        if old is not None:
            self._members.get(old[0], {}).pop(key, None)
            self.engine.enqueue(old[0])
        new = None if event.type == "DELETED" else P.membership(event.object)
        if new is not None:
            self._pod_sets[key] = new
            self._members.setdefault(new[0], {})[key] = new[1]
            if old is None or old != new:
                self.engine.enqueue(new[0])

    def nets(self, key: P.SetKey) -> frozenset[str]:
        return frozenset(net for nets in self._members.get(key, {}).values() for net in nets)

    def _set_event(self, event: WatchEvent) -> None:
        self._written.observed(event.key.name, event)
        key = P.key_of_set(event.object)
        if key is not None:
            self.engine.enqueue(key)
        if self.policies is not None:
            for policy in self.policies.keys():  # noqa: SIM118 (an Informer, not a dict)
                self.policy_engine.enqueue(policy)

    # sets --------------------------------------------------------------------------------

    def existing(self, name: str) -> Obj | None:
        written = self._written.lookup(name)
        if written is not ABSENT:
            return written  # type: ignore[return-value]
        return self.sets.get(None, name) if self.sets is not None else None

    async def _reconcile(self, key: P.SetKey) -> None:
        if not self._listed.is_set():
            return  # everything is looked at once both sides are listed
        name = P.set_name(self.cluster, key)
        desired = P.desired_set(self.cluster, key, self.nets(key), self.api_version)
        step = P.plan_set(desired, self.existing(name))
        nets = len(desired["spec"]["nets"]) if desired else 0
        labels = (("cluster", self.cluster), ("globalnetworkset", name))
        if nets:
            self.metrics.sizes[labels] = float(nets)
        else:
            self.metrics.sizes.pop(labels, None)
        if step is None:
            return
        try:
            if step.action == "create":
                self._written.wrote(name, await self.local.create(step.obj, field_manager=FIELD_MANAGER))
            elif step.action == "update":
                self._written.wrote(name, await self.local.replace(step.obj, field_manager=FIELD_MANAGER))
            else:
                uid = str((step.obj.get("metadata") or {}).get("uid") or "")
                await self.local.delete(self.api_version, "GlobalNetworkSet", name,
                                        preconditions=Preconditions(uid=uid) if uid else None)
                self._written.wrote(name, None)
            log.info("%s GlobalNetworkSet %s (%d nets)", step.action, name, nets)
        except (AlreadyExists, Conflict, NotFound) as exc:
            self._written.forget(name)
            if isinstance(exc, NotFound) and step.action == "delete":
                return
            self._count(self.metrics.requeues, (("globalnetworkset", name),))
            raise RequeueAfter(RETRY_S) from exc
        except KubeError:
            self._count(self.metrics.calico_failures, (("type", step.action),))
            raise

    @staticmethod
    def _count(series: dict[Labels, float], labels: Labels) -> None:
        series[labels] = series.get(labels, 0.0) + 1

    # companion NetworkPolicies -------------------------------------------------------------

    def _policy_event(self, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        notes = meta.get("annotations") or {}
        found = meta.get("labels") or {}
        if P.FROM_ANNOTATION in notes:
            self.policy_engine.enqueue(event.key)
        elif found.get(P.MANAGED_BY_LABEL) == P.MANAGER and found.get(P.CLUSTER_LABEL) == self.cluster:
            self.policy_engine.enqueue(ObjectKey(event.key.namespace, str(found.get(P.SOURCE_POLICY_LABEL, ""))))

    async def _reconcile_policy(self, key: ObjectKey) -> None:
        if self.policies is None or self.sets is None or not self._listed.is_set() or not key.name:
            return
        template = self.policies.get(key.namespace, key.name)
        if template is None or P.FROM_ANNOTATION not in ((template.get("metadata") or {}).get("annotations") or {}):
            return  # a companion goes with its template (owner reference)
        selector_text = str(template["metadata"]["annotations"][P.FROM_ANNOTATION])
        try:
            selector = calico_selector.parse(selector_text)
            nets = sorted({str(n) for s in self.sets.list() for n in (s.get("spec") or {}).get("nets") or []
                           if selector.matches((s.get("metadata") or {}).get("labels") or {})})
            wanted = P.companion_policy(template, self.cluster, nets)
        except (calico_selector.SelectorError, P.PortsError) as exc:
            log.warning("NetworkPolicy %s: %s", key, exc)
            return
        name = wanted["metadata"]["name"]
        existing = self.policies.get(key.namespace, name)
        try:
            if existing is None:
                await self.local.create(wanted, field_manager=FIELD_MANAGER)
            elif P.companion_differs(existing, wanted):
                updated = {**existing, "spec": wanted["spec"],
                           "metadata": {**existing["metadata"],
                                        "labels": {**(existing["metadata"].get("labels") or {}),
                                                   **wanted["metadata"]["labels"]}}}
                await self.local.replace(updated, field_manager=FIELD_MANAGER)
        except (AlreadyExists, Conflict) as exc:
            raise RequeueAfter(RETRY_S) from exc

    # running -----------------------------------------------------------------------------

    async def _choose_api_version(self) -> None:
        while True:
            for candidate in API_VERSIONS:
                try:
                    await self.local.resource(candidate, "GlobalNetworkSet")
                except NotFound:
                    continue
                except KubeError as exc:
                    log.warning("local cluster: %s; retrying", exc)
                    break
                self.api_version = candidate
                return
            else:
                log.error("the local cluster serves no GlobalNetworkSet (projectcalico.org/v3 or "
                          "crd.projectcalico.org/v1): is Calico installed? Retrying")
            await asyncio.sleep(5.0)

    async def run(self) -> None:
        await self._choose_api_version()
        selector = f"{P.MANAGED_BY_LABEL}={P.MANAGER},{P.CLUSTER_LABEL}={self.cluster}"
        self.sets = Informer(self.local, self.api_version, "GlobalNetworkSet", label_selector=selector,
                             transform=strip_managed_fields, on_event=self._set_event, idle_timeout_s=60.0)
        informers = [self.pods, self.sets]
        if self.network_policies:
            self.policies = Informer(self.local, "networking.k8s.io/v1", "NetworkPolicy",
                                     transform=strip_managed_fields, on_event=self._policy_event, idle_timeout_s=60.0)
            informers.append(self.policies)
        async with asyncio.TaskGroup() as group:
            for informer in informers:
                group.create_task(informer.run())
            group.create_task(self.engine.run())
            group.create_task(self.policy_engine.run())
            group.create_task(self._after_listing(informers))
            group.create_task(self._count_failures())
            if self.resync_s > 0:
                group.create_task(self._resync())

    async def _after_listing(self, informers: list[Informer]) -> None:
        await wait_listed(informers)
        self._listed.set()
        log.info("listed %d labelled pods in %s and %d sets here", len(self.pods.keys()), self.cluster,
                 len(self.sets.keys()) if self.sets else 0)
        self._enqueue_all()

    def _enqueue_all(self) -> None:
        keys = set(self._members)
        if self.sets is not None:
            keys.update(k for s in self.sets.list() if (k := P.key_of_set(s)) is not None)
        for key in keys:
            self.engine.enqueue(key)
        if self.policies is not None:
            for policy in self.policies.keys():  # noqa: SIM118 (an Informer, not a dict)
                self.policy_engine.enqueue(policy)

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.resync_s)
            self._enqueue_all()

    async def _count_failures(self) -> None:
        seen = 0
        while True:
            await asyncio.sleep(1.0)
            failures = self.pods.failures
            if failures > seen:
                self._count(self.metrics.watcher_failures, (("type", "watch" if self.pods.synced else "list"),))
            seen = failures
            if not failures:
                seen = 0

    def metrics_text(self) -> str:
        return self.metrics.render()
