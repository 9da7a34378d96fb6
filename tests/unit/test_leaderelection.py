"""Leader election decisions (client-go's semantics), table-driven."""

from __future__ import annotations

import pytest

from tether.kube.leaderelection import (
    Create,
    ElectionConfig,
    ElectionConfigError,
    LeaseRecord,
    Observation,
    Update,
    Wait,
    decide,
    lease_object,
    observe,
    released,
)
from tether.objects.times import micro_time

ME = "hub-a"
CONFIG = ElectionConfig(identity=ME, name="tether-hub", namespace="tether-system",
                        lease_duration_s=15, renew_deadline_s=10, retry_period_s=2)
WALL = 1_800_000_000.0
STAMP = micro_time(WALL)
OLD = micro_time(WALL - 100)


def held(holder: str, *, transitions: int = 3, duration: int = 15) -> LeaseRecord:
    return LeaseRecord(holder=holder, lease_duration_s=duration, acquire_time=OLD,
                       renew_time=OLD, transitions=transitions)


@pytest.mark.parametrize(("current", "observed_at", "now", "expected"), [
    # no Lease yet: create it, first holder, no transition
    (None, None, 100.0, Create(LeaseRecord(ME, 15, STAMP, STAMP, 0))),
    # held by another, seen 5s ago with a 15s duration: wait
    (held("hub-b"), 95.0, 100.0, Wait("hub-b", "")),
    # unchanged for exactly the duration: expired (client-go: valid while observed + duration is After now)
    (held("hub-b"), 85.0, 100.0, Update(LeaseRecord(ME, 15, STAMP, STAMP, 4))),
    (held("hub-b"), 85.1, 100.0, Wait("hub-b", "")),
    # unchanged for longer than the duration: take over, transitions + 1, new acquireTime
    (held("hub-b"), 50.0, 100.0, Update(LeaseRecord(ME, 15, STAMP, STAMP, 4))),
    # the record's own duration counts, not ours
    (held("hub-b", duration=60), 50.0, 100.0, Wait("hub-b", "")),
    # released (empty holder): take at once, even if just seen
    (LeaseRecord("", 1, OLD, OLD, 7), 100.0, 100.0, Update(LeaseRecord(ME, 15, STAMP, STAMP, 8))),
    # our own Lease: renew, keep acquireTime and the transition count
    (held(ME), 99.0, 100.0, Update(LeaseRecord(ME, 15, OLD, STAMP, 3))),
    # our own Lease without an acquireTime (written by something else): stamp one
    (LeaseRecord(ME, 15, "", OLD, 2), 99.0, 100.0, Update(LeaseRecord(ME, 15, STAMP, STAMP, 2))),
])
def test_decide(current: LeaseRecord | None, observed_at: float | None, now: float,
                expected: Create | Update | Wait) -> None:
    observation = None if current is None or observed_at is None else Observation(current, observed_at)
    decision = decide(CONFIG, current, observation, now, WALL)
    if isinstance(expected, Wait):
        assert isinstance(decision, Wait) and decision.holder == expected.holder
    else:
        assert decision == expected


def test_observe_restarts_the_clock_only_when_the_record_changes() -> None:
    first = observe(None, held("hub-b"), 10.0)
    assert first.observed_at == 10.0
    assert observe(first, held("hub-b"), 30.0) is first  # unchanged: still seen since 10.0
    renewed = LeaseRecord("hub-b", 15, OLD, STAMP, 3)
    assert observe(first, renewed, 30.0).observed_at == 30.0


def test_a_renewing_leader_is_never_taken_over() -> None:
    """Each renewal changes renewTime, so a follower's clock restarts each time it reads."""
    observation: Observation | None = None
    for step in range(20):
        now = 100.0 + step * 2
        record = LeaseRecord("hub-b", 15, OLD, micro_time(WALL + step * 2), 1)
        observation = observe(observation, record, now)
        assert isinstance(decide(CONFIG, record, observation, now, WALL), Wait)


@pytest.mark.parametrize(("current", "identity", "expected"), [
    (held(ME, transitions=5), ME, LeaseRecord("", 1, STAMP, STAMP, 5)),
    (held("hub-b"), ME, None),  # not ours: nothing to release
    (LeaseRecord(), ME, None),
])
def test_released(current: LeaseRecord, identity: str, expected: LeaseRecord | None) -> None:
    assert released(current, identity, WALL) == expected


@pytest.mark.parametrize(("changes", "message"), [
    ({"identity": ""}, "identity"),
    ({"name": ""}, "name"),
    ({"lease_duration_s": 10, "renew_deadline_s": 10}, "greater than the renew deadline"),
    ({"renew_deadline_s": 2.4, "retry_period_s": 2, "lease_duration_s": 15}, "1.2 x the retry"),
    ({"retry_period_s": 0.5}, "at least 1 second"),
])
def test_config_check_refuses_what_client_go_refuses(changes: dict[str, object], message: str) -> None:
    fields = {"identity": ME, "name": "l", "namespace": "n", "lease_duration_s": 15.0,
              "renew_deadline_s": 10.0, "retry_period_s": 2.0, **changes}
    with pytest.raises(ElectionConfigError, match=message):
        ElectionConfig(**fields).check()  # type: ignore[arg-type]


def test_defaults_pass() -> None:
    CONFIG.check()


def test_record_round_trips_through_a_lease_object() -> None:
    record = LeaseRecord(ME, 15, OLD, STAMP, 2)
    lease = lease_object(CONFIG, record, resource_version="42")
    assert lease["metadata"] == {"name": "tether-hub", "namespace": "tether-system",
                                 "resourceVersion": "42"}
    assert lease["spec"] == {"holderIdentity": ME, "leaseDurationSeconds": 15, "acquireTime": OLD,
                             "renewTime": STAMP, "leaseTransitions": 2}
    assert LeaseRecord.from_lease(lease) == record
    assert LeaseRecord.from_lease({"spec": None}) == LeaseRecord()
    assert LeaseRecord.from_lease({"spec": {"leaseDurationSeconds": "x"}}) == LeaseRecord()
