"""Member cluster health: a pure probe → Ready-condition state machine, and its controller.

Semantics follow Karmada (cluster_status_controller.go, cluster_controller.go):

- A probe is `GET /readyz`, then `/healthz` when `/readyz` answers 404. No answer at all is
  *not reachable*; an answer other than 200 is *reachable but not healthy*.
- Observed Ready condition: True/ClusterReady, False/ClusterNotReady, False/ClusterNotReachable.
- Hysteresis: a flip between True and not-True only takes effect once the new observation has
  held for the success threshold (towards True) or the failure threshold (towards False), both
  30s by default. Changes between the two False reasons are immediate. With no Ready condition
  yet, or no memory of earlier probes (a restart), the observation is taken as is.
- Pull clusters are probed by their agent; the hub only watches freshness: without a heartbeat
  (Lease `tether-system/<cluster>` renewTime, or `status.lastHeartbeatTime`) for the grace period
  (40s; 60s after registration), Ready becomes Unknown/ClusterStatusUnknown.
- Taints (NoSchedule only, as Karmada; the rules are in `taints`): Ready=False →
  `cluster.karmada.io/not-ready`, Ready=Unknown → `cluster.karmada.io/unreachable`; both removed
  when Ready=True. Other taints are left alone.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tether.engine import Engine, RequeueAfter
from tether.federation import capacity, taints
from tether.federation.crds import CLUSTER_API_VERSION
from tether.kube import (
    ClusterCredentials,
    Conflict,
    Informer,
    KubeClient,
    KubeError,
    NotFound,
    WatchEvent,
)
from tether.objects import Obj
from tether.objects.times import rfc3339, seconds_of

log = logging.getLogger(__name__)

READY = "Ready"
TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"
REASON_READY = "ClusterReady"
REASON_NOT_READY = "ClusterNotReady"
REASON_NOT_REACHABLE = "ClusterNotReachable"
REASON_STATUS_UNKNOWN = "ClusterStatusUnknown"
MESSAGE_READY = "cluster is healthy and ready to accept workloads"
MESSAGE_NOT_READY = "cluster is reachable but health endpoint responded without ok"
MESSAGE_NOT_REACHABLE = "cluster is not reachable"
MESSAGE_STATUS_UNKNOWN = "cluster status controller stopped posting cluster status"

TAINT_NOT_READY = taints.NOT_READY
TAINT_UNREACHABLE = taints.UNREACHABLE
HEALTH_TAINTS = taints.READINESS_TAINTS

HUB_NAMESPACE = "tether-system"
FIELD_MANAGER = "tether-cluster-health"
LAST_HEARTBEAT = "lastHeartbeatTime"
LEASE_API_VERSION = "coordination.k8s.io/v1"


# pure state machine ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HealthTimers:
    """Karmada's defaults; tests shorten them."""

    period_s: float = 10.0  # --cluster-status-update-frequency
    failure_threshold_s: float = 30.0
    success_threshold_s: float = 30.0
    grace_period_s: float = 40.0  # --cluster-monitor-grace-period (pull clusters)
    startup_grace_period_s: float = 60.0
    probe_timeout_s: float = 5.0
    # a member's API discovery (apiEnablements) is redone at most this often (and with each new
    # client, and after a failed probe); the other status parts every period
    api_enablements_period_s: float = 60.0


@dataclass(frozen=True)
class Probe:
    reachable: bool
    healthy: bool
    detail: str = ""  # why not (never contains credentials)


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    last_transition_s: float

    def to_api(self) -> Obj:
        return {"type": self.type, "status": self.status, "reason": self.reason,
                "message": self.message, "lastTransitionTime": rfc3339(self.last_transition_s)}

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> Condition:
        return cls(type=str(raw.get("type", "")), status=str(raw.get("status", UNKNOWN)),
                   reason=str(raw.get("reason", "")), message=str(raw.get("message", "")),
                   last_transition_s=seconds_of(raw.get("lastTransitionTime")) or 0.0)

    def same(self, other: Condition | None) -> bool:
        return other is not None and (self.status, self.reason, self.message) == (
            other.status, other.reason, other.message)


@dataclass(frozen=True)
class Memory:
    """What the controller remembers about a cluster between probes (Karmada's condition cache)."""

    observed_status: str  # status of the last observation
    since_s: float  # when observations started having that status


def observed_condition(probe: Probe, now: float) -> Condition:
    if not probe.reachable:
        return Condition(READY, FALSE, REASON_NOT_REACHABLE, MESSAGE_NOT_REACHABLE, now)
    if not probe.healthy:
        return Condition(READY, FALSE, REASON_NOT_READY, MESSAGE_NOT_READY, now)
    return Condition(READY, TRUE, REASON_READY, MESSAGE_READY, now)


def next_ready(current: Condition | None, memory: Memory | None, probe: Probe, now: float,
               timers: HealthTimers) -> tuple[Condition, Memory]:
    """The Ready condition to write after `probe`, with thresholds applied, and the new memory."""
    observed = observed_condition(probe, now)
    first = memory is None or current is None  # Karmada: no cache entry -> take the observation
    if memory is None or memory.observed_status != observed.status:
        memory = Memory(observed.status, now)
    if current is None:
        return observed, memory
    threshold = timers.success_threshold_s if observed.status == TRUE else timers.failure_threshold_s
    flipping = (observed.status == TRUE) != (current.status == TRUE)
    if not first and flipping and now < memory.since_s + threshold:
        return current, memory  # hold the old condition until the threshold has passed
    if observed.same(current):
        return current, memory  # keep lastTransitionTime
    if observed.status == current.status:
        observed = replace(observed, last_transition_s=current.last_transition_s)
    return observed, memory


def stale_ready(current: Condition | None, last_heartbeat_s: float | None, registered_s: float,
                now: float, timers: HealthTimers) -> Condition | None:
    """For clusters reporting their own status: Ready=Unknown once the heartbeat is too old.

    Returns the condition to write, or None when the current one stands.
    """
    if last_heartbeat_s is None:
        if now < registered_s + timers.startup_grace_period_s:
            return None
    elif now < last_heartbeat_s + timers.grace_period_s:
        return None
    if current is not None and current.status == UNKNOWN:
        return None
    return Condition(READY, UNKNOWN, REASON_STATUS_UNKNOWN, MESSAGE_STATUS_UNKNOWN, now)


def plan_taints(taints_now: Sequence[Mapping[str, Any]], ready_status: str | None,
                now: float) -> list[Obj]:
    """The cluster's taints with the health taints matching `ready_status`."""
    return list(taints.plan_health_taints(taints_now, ready_status, now))


def find_condition(status: Mapping[str, Any], kind: str) -> Condition | None:
    for raw in status.get("conditions") or []:
        if isinstance(raw, Mapping) and raw.get("type") == kind:
            return Condition.from_api(raw)
    return None


def with_condition(conditions: Sequence[Mapping[str, Any]], condition: Condition) -> list[Obj]:
    out = [dict(c) for c in conditions if c.get("type") != condition.type]
    return [*out, condition.to_api()]


def agent_status(current: Mapping[str, Any], collected: Mapping[str, Any], ready: Condition,
                 now: float, *, heartbeat: bool = False) -> Obj | None:
    """What a pull agent writes to its Cluster's status after one probe, or None: the status is
    written only when something in it changed (the Lease carries the heartbeat), or when
    `heartbeat` (the Lease could not be renewed, so the status must show the agent is alive).

    `collected` replaces the parts it has (version, summaries, apiEnablements); the Ready
    condition keeps its lastTransitionTime while its status and reason stay."""
    status: Obj = dict(current)
    status.update(collected)
    old = find_condition(current, READY)
    if old is not None and (old.status, old.reason) == (ready.status, ready.reason):
        ready = replace(ready, last_transition_s=old.last_transition_s)
    status["conditions"] = with_condition(list(current.get("conditions") or []), ready)
    status.pop(LAST_HEARTBEAT, None)
    unchanged = status == {k: v for k, v in current.items() if k != LAST_HEARTBEAT}
    if unchanged and not heartbeat:
        return None
    status[LAST_HEARTBEAT] = rfc3339(now)
    return status


def summarize_nodes(nodes: Sequence[Mapping[str, Any]]) -> tuple[Obj, Obj]:
    """nodeSummary and resourceSummary.allocatable (cpu, memory, pods summed over nodes)."""
    ready = 0
    totals: dict[str, float] = {}
    for node in nodes:
        status = node.get("status") or {}
        if any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in status.get("conditions") or []):
            ready += 1
        for resource in ("cpu", "memory", "pods"):
            value = (status.get("allocatable") or {}).get(resource)
            if value is not None:
                totals[resource] = totals.get(resource, 0.0) + parse_quantity(str(value))
    allocatable: Obj = {}
    if "cpu" in totals:
        allocatable["cpu"] = format_cpu(totals["cpu"])
    if "memory" in totals:
        allocatable["memory"] = format_bytes(totals["memory"])
    if "pods" in totals:
        allocatable["pods"] = str(int(totals["pods"]))
    return {"totalNum": len(nodes), "readyNum": ready}, {"allocatable": allocatable}


_SUFFIXES = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
    "P": 1e15, "E": 1e18,
}


def parse_quantity(text: str) -> float:
    text = text.strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if suffix and text.endswith(suffix):
            try:
                return float(text[: -len(suffix)]) * _SUFFIXES[suffix]
            except ValueError:
                return 0.0
    try:
        return float(text)
    except ValueError:
        return 0.0


def format_cpu(cores: float) -> str:
    milli = round(cores * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def format_bytes(amount: float) -> str:
    value = int(amount)
    for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if value and value % size == 0:
            return f"{value // size}{suffix}"
    return str(value)


# talking to members ---------------------------------------------------------------------------


PROXY_HEADER_PREFIX = "proxyHeader."  # credentials Secret keys: headers for spec.proxyURL


def proxy_headers(spec: Mapping[str, Any], secret_data: Mapping[str, Any]) -> dict[str, str] | None:
    """Headers for the CONNECT to `spec.proxyURL`: Karmada's `spec.proxyHeader`, plus the
    credentials Secret's `proxyHeader.<Name>` keys (secret ones, such as the hub tunnel's
    `Proxy-Authorization`, which a Cluster's spec would show to every reader)."""
    headers = spec.get("proxyHeader") or {}
    out = {str(k): str(v) for k, v in headers.items()} if isinstance(headers, dict) else {}
    for key, value in secret_data.items():
        name = str(key)[len(PROXY_HEADER_PREFIX):]
        if not str(key).startswith(PROXY_HEADER_PREFIX) or not name:
            continue
        try:
            text = base64.b64decode(str(value)).decode()
        except (ValueError, UnicodeDecodeError):
            continue
        if not any(c in text for c in "\r\n\0"):
            out[name] = text
    return out or None


def member_credentials(cluster: Mapping[str, Any], secret: Mapping[str, Any]) -> ClusterCredentials:
    """Credentials for a push member from its Cluster and hub Secret (`token`, `caBundle`,
    `proxyHeader.<Name>`)."""
    spec = cluster.get("spec") or {}
    data = secret.get("data") or {}
    token = base64.b64decode(data.get("token", "")).decode()
    ca = base64.b64decode(data["caBundle"]) if data.get("caBundle") else None
    return ClusterCredentials.from_token(
        server=str(spec.get("apiEndpoint", "")),
        token=token,
        ca_bundle=ca,
        name=str(cluster.get("metadata", {}).get("name", "")),
        insecure=bool(spec.get("insecureSkipTLSVerification")),
        proxy_url=spec.get("proxyURL") or None,
        proxy_headers=proxy_headers(spec, data),
    )


async def probe(client: KubeClient, timeout_s: float) -> Probe:
    """`/readyz`, then `/healthz` on 404 (`KubeClient.healthz`); no answer = not reachable."""
    try:
        code, body = await client.healthz("/readyz", timeout_s=timeout_s)
    except KubeError as exc:  # Unreachable: refused, reset, TLS failure, timeout
        return Probe(False, False, exc.message)
    if code == 200:
        return Probe(True, True)
    return Probe(True, False, f"health endpoint answered {code}: {body.strip()[:100]}")


async def collect_status(client: KubeClient, timeout_s: float, *, apis: bool = True) -> Obj:
    """Version, node and resource summaries, API enablements (unless `apis` is False); missing
    parts are left out."""
    out: Obj = {}

    async def version() -> None:
        out["kubernetesVersion"] = str((await client.request("GET", "/version")).get("gitVersion", ""))

    async def nodes() -> None:
        listed = (await client.request("GET", "/api/v1/nodes")).get("items", [])
        out["nodeSummary"], out["resourceSummary"] = summarize_nodes(listed)
        # allocated/allocating too (Karmada's resourceSummary), for dynamic replica division
        pods = (await client.request("GET", "/api/v1/pods")).get("items", [])
        out["resourceSummary"] = capacity.resource_summary(listed, pods)

    async def apis_part() -> None:
        out["apiEnablements"] = await api_enablements(client)

    for part in (version, nodes, apis_part) if apis else (version, nodes):
        try:
            async with asyncio.timeout(timeout_s):
                await part()
        except (KubeError, TimeoutError) as exc:
            log.info("collecting %s from %s failed: %s", part.__name__, client.credentials.server, exc)
    return out


async def api_enablements(client: KubeClient) -> list[Obj]:
    group_versions = ["v1"]
    for group in (await client.request("GET", "/apis")).get("groups", []):
        group_versions += [v["groupVersion"] for v in group.get("versions", [])]

    async def resources(gv: str) -> Obj:
        path = f"/api/{gv}" if "/" not in gv else f"/apis/{gv}"
        listed = (await client.request("GET", path)).get("resources", [])
        return {"groupVersion": gv, "resources": sorted(
            ({"name": r["name"], "kind": r["kind"]} for r in listed if "/" not in r["name"]),
            key=lambda r: r["name"])}

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(resources(gv)) for gv in group_versions]
    return sorted((t.result() for t in tasks), key=lambda e: e["groupVersion"])


# the controller -------------------------------------------------------------------------------

ClientFactory = Callable[[ClusterCredentials], KubeClient]


@dataclass
class _Member:
    fingerprint: tuple[str, str]  # (apiEndpoint, secret resourceVersion)
    client: KubeClient
    memory: Memory | None = None
    apis: list[Obj] | None = None  # the last apiEnablements collected through `client`
    apis_at: float = 0.0  # monotonic


@dataclass
class ClusterHealthController:
    """Probes push members and watches pull members' heartbeats; writes Cluster status/taints.

    One Engine key per Cluster, requeued every `timers.period_s`. Clusters and the pull members'
    Leases are read from informers (a new Cluster is enqueued by its ADDED event; a key stops
    when its Cluster goes), so a pull member at rest costs no request at all: its agent renews
    the Lease, the watch brings it here, and the periodic pass only compares times.
    """

    host: KubeClient
    timers: HealthTimers = field(default_factory=HealthTimers)
    namespace: str = HUB_NAMESPACE
    client_factory: ClientFactory = KubeClient
    clock: Callable[[], float] = time.time
    workers: int = 8
    _members: dict[str, _Member] = field(default_factory=dict)
    _known: set[str] = field(default_factory=set)
    # the latest probe of each push member, with its time (the dashboard shows why one failed:
    # the Ready condition only says that it did)
    last_probe: dict[str, tuple[float, Probe]] = field(default_factory=dict)
    engine: Engine[str] = field(init=False)
    clusters: Informer = field(init=False)
    leases: Informer = field(init=False)

    def __post_init__(self) -> None:
        self.engine = Engine("cluster-health", self.reconcile, workers=self.workers)
        self.clusters = Informer(self.host, CLUSTER_API_VERSION, "Cluster",
                                 on_event=self._on_cluster)
        self.leases = Informer(self.host, LEASE_API_VERSION, "Lease", self.namespace)

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.engine.run())
                group.create_task(self.clusters.run())
                group.create_task(self.leases.run())
        finally:
            await self._close_all()

    def _on_cluster(self, event: WatchEvent) -> None:
        name = event.key.name
        if event.type == "DELETED" or name not in self._known:
            self._known.add(name)
            self.engine.enqueue(name)

    async def _close_all(self) -> None:
        members, self._members = self._members, {}
        for member in members.values():
            await member.client.close()

    async def _forget(self, name: str) -> None:
        self._known.discard(name)
        self.last_probe.pop(name, None)
        member = self._members.pop(name, None)
        if member is not None:
            await member.client.close()

    async def _cluster(self, name: str) -> Obj | None:
        if self.clusters.synced:
            return self.clusters.get(None, name)
        return await self.host.get_or_none(CLUSTER_API_VERSION, "Cluster", name)

    async def reconcile(self, name: str) -> None:
        cluster = await self._cluster(name)
        if cluster is None or cluster["metadata"].get("deletionTimestamp"):
            await self._forget(name)
            return
        spec = cluster.get("spec") or {}
        if spec.get("syncMode") == "Pull":
            await self._reconcile_pull(cluster)
        else:
            await self._reconcile_push(cluster)
        raise RequeueAfter(self.timers.period_s)

    async def _member(self, cluster: Obj) -> _Member | None:
        name = cluster["metadata"]["name"]
        spec = cluster.get("spec") or {}
        ref = spec.get("secretRef") or {}
        try:
            secret = await self.host.get("v1", "Secret", ref.get("name", name),
                                         ref.get("namespace", self.namespace))
        except NotFound:
            return None
        fingerprint = (str(spec.get("apiEndpoint", "")), str(secret["metadata"].get("resourceVersion")))
        member = self._members.get(name)
        if member is None or member.fingerprint != fingerprint:
            if member is not None:
                await member.client.close()
            memory = member.memory if member is not None else None
            member = _Member(fingerprint, self.client_factory(member_credentials(cluster, secret)), memory)
            self._members[name] = member
        return member

    async def _reconcile_push(self, cluster: Obj) -> None:
        name = cluster["metadata"]["name"]
        member = await self._member(cluster)
        status: Obj = dict(cluster.get("status") or {})
        if member is None:
            result = Probe(False, False, "credentials secret not found")
        else:
            result = await probe(member.client, self.timers.probe_timeout_s)
        now = self.clock()
        self.last_probe[name] = (now, result)
        current = find_condition(status, READY)
        memory = member.memory if member is not None else None
        ready, memory = next_ready(current, memory, result, now, self.timers)
        if member is not None:
            member.memory = memory
        if not result.healthy:
            log.info("cluster %s: probe failed: %s", name, result.detail)
        if result.healthy and member is not None:
            fresh = (member.apis is not None and time.monotonic() - member.apis_at
                     < self.timers.api_enablements_period_s)
            collected = await collect_status(member.client, self.timers.probe_timeout_s,
                                             apis=not fresh)
            if fresh:
                collected["apiEnablements"] = member.apis
            elif "apiEnablements" in collected:
                member.apis, member.apis_at = collected["apiEnablements"], time.monotonic()
            status.update(collected)
        elif member is not None:
            member.apis = None  # collect them again once it answers
        status["conditions"] = with_condition(status.get("conditions") or [], ready)
        await self._write(cluster, status, ready.status)

    async def _reconcile_pull(self, cluster: Obj) -> None:
        name = cluster["metadata"]["name"]
        status: Obj = dict(cluster.get("status") or {})
        heartbeat = seconds_of(status.get("lastHeartbeatTime"))
        lease = (self.leases.get(self.namespace, name) if self.leases.synced
                 else await self.host.get_or_none(LEASE_API_VERSION, "Lease", name,
                                                  self.namespace))
        renewed = seconds_of(((lease or {}).get("spec") or {}).get("renewTime"))
        if renewed is not None and (heartbeat is None or renewed > heartbeat):
            heartbeat = renewed
        registered = seconds_of(cluster["metadata"].get("creationTimestamp")) or self.clock()
        current = find_condition(status, READY)
        stale = stale_ready(current, heartbeat, registered, self.clock(), self.timers)
        if stale is not None:
            status["conditions"] = with_condition(status.get("conditions") or [], stale)
            current = stale
        await self._write(cluster, status, current.status if current else None)

    async def _write(self, cluster: Obj, status: Obj, ready_status: str | None) -> None:
        try:
            await self._write_once(cluster, status, ready_status)
        except Conflict:
            # someone else (a user's taint, a ClusterTaintPolicy) wrote the Cluster meanwhile
            raise RequeueAfter(0.2) from None
        except NotFound:
            pass  # unjoined meanwhile: nothing left to report on

    async def _write_once(self, cluster: Obj, status: Obj, ready_status: str | None) -> None:
        name = cluster["metadata"]["name"]
        base = f"/apis/{CLUSTER_API_VERSION}/clusters/{name}"
        if status != (cluster.get("status") or {}):
            body = {"metadata": {"resourceVersion": cluster["metadata"]["resourceVersion"]},
                    "status": status}
            cluster = await self.host.request("PATCH", f"{base}/status", body=body,
                                              content_type="application/merge-patch+json",
                                              params={"fieldManager": FIELD_MANAGER})
        taints = list((cluster.get("spec") or {}).get("taints") or [])
        wanted = plan_taints(taints, ready_status, self.clock())
        if wanted != taints:
            body = {"metadata": {"resourceVersion": cluster["metadata"]["resourceVersion"]},
                    "spec": {"taints": wanted}}
            await self.host.request("PATCH", base, body=body,
                                    content_type="application/merge-patch+json",
                                    params={"fieldManager": FIELD_MANAGER})


def build_health_controller(host: KubeClient, *, timers: HealthTimers | None = None,
                            namespace: str = HUB_NAMESPACE,
                            client_factory: ClientFactory | None = None) -> ClusterHealthController:
    """The health controller for `tether hub run`: `await controller.run()` in its task group."""
    return ClusterHealthController(host, timers=timers or HealthTimers(), namespace=namespace,
                                   client_factory=client_factory or KubeClient)

