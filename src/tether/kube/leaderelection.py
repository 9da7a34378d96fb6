"""Leader election on a `coordination.k8s.io/v1` Lease: the decisions, without I/O.

client-go's semantics (`tools/leaderelection`), which kube-controller-manager, Karmada and
KubeFed use, so a tether hub shares a Lease with nothing surprising:

- A candidate reads the Lease. None: it creates one naming itself (transitions 0). Held by
  someone else: it may take it only once the record has not changed for `leaseDurationSeconds`
  *as measured by the candidate's own clock from when it first saw that record* (client-go's
  `observedTime`), never from the record's `renewTime`, so clock skew between replicas does not
  matter. An empty `holderIdentity` (a released Lease) may be taken at once.
- Taking over keeps `leaseTransitions` + 1; a renewal by the holder keeps `acquireTime` and
  the count. Every write is a PUT carrying the `resourceVersion` that was read: two candidates
  that decide together cannot both win (the second gets a Conflict and stays a follower).
- The leader renews every retry period; when no renewal succeeds within the renew deadline it
  stops leading (its controllers stop) before any follower may take over, because the lease
  duration is longer than the renew deadline.
- On a graceful stop the leader releases (client-go `ReleaseOnCancel`): holder cleared,
  `leaseDurationSeconds` 1, so a follower takes over at its next retry.

`kube.leaderelector` does the I/O with these functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tether.objects.times import micro_time, parse_time

LEASE_API_VERSION = "coordination.k8s.io/v1"
JITTER_FACTOR = 1.2  # client-go's: retry periods are jittered up to this factor, deadlines checked with it


class ElectionConfigError(ValueError):
    """Settings client-go would refuse (its `NewLeaderElector` checks)."""


@dataclass(frozen=True)
class ElectionConfig:
    identity: str
    name: str
    namespace: str
    lease_duration_s: float = 15.0  # kube-controller-manager's defaults
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    release_on_cancel: bool = True

    def check(self) -> None:
        if not self.identity:
            raise ElectionConfigError("the leader election identity must not be empty")
        if not self.name or not self.namespace:
            raise ElectionConfigError("the leader election Lease needs a name and a namespace")
        if self.lease_duration_s < 1 or self.renew_deadline_s < 1 or self.retry_period_s < 1:
            raise ElectionConfigError("lease duration, renew deadline and retry period must each be "
                                      "at least 1 second")
        if self.lease_duration_s <= self.renew_deadline_s:
            raise ElectionConfigError(
                f"the lease duration ({self.lease_duration_s:g}s) must be greater than the renew "
                f"deadline ({self.renew_deadline_s:g}s): a leader must give up before a follower "
                "may take over")
        if self.renew_deadline_s <= JITTER_FACTOR * self.retry_period_s:
            raise ElectionConfigError(
                f"the renew deadline ({self.renew_deadline_s:g}s) must be greater than "
                f"{JITTER_FACTOR:g} x the retry period ({self.retry_period_s:g}s)")


@dataclass(frozen=True)
class LeaseRecord:
    """The leader election fields of a Lease's spec (times as RFC 3339 strings, as stored)."""

    holder: str = ""
    lease_duration_s: int = 0
    acquire_time: str = ""
    renew_time: str = ""
    transitions: int = 0

    @classmethod
    def from_lease(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        spec = lease.get("spec")
        spec = spec if isinstance(spec, Mapping) else {}
        return cls(holder=str(spec.get("holderIdentity") or ""),
                   lease_duration_s=_int(spec.get("leaseDurationSeconds")),
                   acquire_time=str(spec.get("acquireTime") or ""),
                   renew_time=str(spec.get("renewTime") or ""),
                   transitions=_int(spec.get("leaseTransitions")))

    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"holderIdentity": self.holder,
                                "leaseDurationSeconds": self.lease_duration_s,
                                "leaseTransitions": self.transitions}
        if self.acquire_time:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time:
            spec["renewTime"] = self.renew_time
        return spec


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


@dataclass(frozen=True)
class Observation:
    """The last record this replica read, and when (its monotonic clock) it first saw it."""

    record: LeaseRecord
    observed_at: float


def observe(previous: Observation | None, record: LeaseRecord, now: float) -> Observation:
    """A changed record restarts the clock; the same record seen again keeps it."""
    if previous is not None and previous.record == record:
        return previous
    return Observation(record, now)


@dataclass(frozen=True)
class Create:
    record: LeaseRecord


@dataclass(frozen=True)
class Update:
    record: LeaseRecord


@dataclass(frozen=True)
class Wait:
    holder: str
    why: str


Decision = Create | Update | Wait


def decide(config: ElectionConfig, current: LeaseRecord | None, observation: Observation | None,
           now: float, wall_now: float) -> Decision:
    """What a try to acquire or renew does, given the Lease just read (None: it does not exist)
    and the observation updated with it (`observe`). `now` is monotonic, `wall_now` epoch seconds
    (only written into the record)."""
    stamp = micro_time(wall_now)
    fresh = LeaseRecord(holder=config.identity, lease_duration_s=max(1, round(config.lease_duration_s)),
                        acquire_time=stamp, renew_time=stamp)
    if current is None:
        return Create(fresh)
    holding = current.holder == config.identity
    if current.holder and not holding:
        assert observation is not None and observation.record == current
        expires = observation.observed_at + current.lease_duration_s
        if expires > now:
            return Wait(current.holder, f"held by {current.holder} for another "
                                        f"{expires - now:.1f}s unless renewed")
    if holding:
        return Update(LeaseRecord(holder=config.identity, lease_duration_s=fresh.lease_duration_s,
                                  acquire_time=current.acquire_time or stamp, renew_time=stamp,
                                  transitions=current.transitions))
    return Update(LeaseRecord(holder=config.identity, lease_duration_s=fresh.lease_duration_s,
                              acquire_time=stamp, renew_time=stamp,
                              transitions=current.transitions + 1))


def released(current: LeaseRecord, identity: str, wall_now: float) -> LeaseRecord | None:
    """The record a leader writes when it stops gracefully, or None when it does not hold it."""
    if current.holder != identity:
        return None
    stamp = micro_time(wall_now)
    return LeaseRecord(holder="", lease_duration_s=1, acquire_time=stamp, renew_time=stamp,
                       transitions=current.transitions)


def lease_object(config: ElectionConfig, record: LeaseRecord,
                 resource_version: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": config.name, "namespace": config.namespace}
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {"apiVersion": LEASE_API_VERSION, "kind": "Lease", "metadata": meta,
            "spec": record.spec()}


def renewed_ago_s(record: LeaseRecord, wall_now: float) -> float | None:
    """Seconds since the record's renewTime (for display only: decisions never use it)."""
    renewed = parse_time(record.renew_time)
    return None if renewed is None else wall_now - renewed.timestamp()
