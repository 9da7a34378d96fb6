"""Stale endpoints: what mirrors of a remote whose API cannot be reached should do.

Semaphore keeps the last known endpoints forever (fail-static). A per-remote policy chooses:

- `keep`: the same (endpoints stay; the remote is reported unreachable),
- `not-ready`: after `after_s` unreachable, every mirrored endpoint is marked not ready, so
  kube-proxy stops sending new connections there but the addresses stay visible,
- `withdraw`: after `after_s` (the TTL), the mirrored endpoints are removed; the mirror
  Service itself stays, so its ClusterIP and DNS name survive the outage.

When the remote answers again its informers list afresh and the mirrors follow it. `Tracker` is
the pure state (fed with probe results and a clock); `freshness` and `condition` read it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tether.connect.mirror.config import StaleSettings
from tether.connect.mirror.plan import Freshness

CONDITION_TYPE = "ServiceMirrorEndpointsFresh"


@dataclass(frozen=True)
class Tracker:
    """Reachability of one remote: `since` is when the current state began (monotonic s)."""

    reachable: bool = True
    since: float = 0.0
    detail: str = ""

    def observe(self, reachable: bool, now: float, detail: str = "") -> Tracker:
        if reachable == self.reachable:
            return replace(self, detail=detail) if detail != self.detail else self
        return Tracker(reachable, now, detail)


def freshness(tracker: Tracker, settings: StaleSettings, now: float) -> Freshness:
    if tracker.reachable:
        return "fresh"
    if settings.policy == "keep" or now - tracker.since < settings.after_s:
        return "unreachable"
    return "not-ready" if settings.policy == "not-ready" else "withdrawn"


def next_change_s(tracker: Tracker, settings: StaleSettings, now: float) -> float | None:
    """Seconds until `freshness` changes without any new observation (the policy's deadline)."""
    if tracker.reachable or settings.policy == "keep":
        return None
    left = tracker.since + settings.after_s - now
    return left if left > 0 else None


@dataclass(frozen=True)
class Condition:
    """A metav1.Condition about one remote's mirrored endpoints."""

    status: str
    reason: str
    message: str

    def as_dict(self, transition_time: str) -> dict[str, str]:
        return {"type": CONDITION_TYPE, "status": self.status, "reason": self.reason,
                "message": self.message, "lastTransitionTime": transition_time}


def condition(state: Freshness, settings: StaleSettings, detail: str = "") -> Condition:
    why = f": {detail}" if detail else ""
    if state == "fresh":
        return Condition("True", "RemoteReachable", "mirrored endpoints follow the remote API")
    if state == "unreachable":
        if settings.policy == "keep":
            return Condition("False", "RemoteUnreachableKept",
                             f"the remote API cannot be reached; its last known endpoints are kept{why}")
        return Condition("False", "RemoteUnreachable",
                         f"the remote API cannot be reached; endpoints are kept for up to "
                         f"{settings.after_s:g}s, then {settings.policy}{why}")
    if state == "not-ready":
        return Condition("False", "EndpointsMarkedNotReady",
                         f"the remote API has not been reached for over {settings.after_s:g}s; "
                         f"mirrored endpoints are marked not ready{why}")
    return Condition("False", "EndpointsWithdrawn",
                     f"the remote API has not been reached for over {settings.after_s:g}s; "
                     f"mirrored endpoints are withdrawn{why}")
