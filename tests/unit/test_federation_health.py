"""The cluster health state machine: thresholds, hysteresis, Unknown grace, taints."""

from __future__ import annotations

from tether.federation.health import (
    FALSE,
    MESSAGE_READY,
    REASON_NOT_REACHABLE,
    REASON_NOT_READY,
    REASON_READY,
    REASON_STATUS_UNKNOWN,
    TAINT_NOT_READY,
    TAINT_UNREACHABLE,
    TRUE,
    UNKNOWN,
    Condition,
    HealthTimers,
    Memory,
    Probe,
    agent_status,
    next_ready,
    plan_taints,
    stale_ready,
    summarize_nodes,
)

TIMERS = HealthTimers(failure_threshold_s=30, success_threshold_s=20, grace_period_s=40,
                      startup_grace_period_s=60)
UP = Probe(True, True)
SICK = Probe(True, False, "500")
DOWN = Probe(False, False, "refused")


def run(probes: list[tuple[float, Probe]], current: Condition | None = None,
        memory: Memory | None = None) -> list[Condition]:
    out = []
    for now, probe in probes:
        current, memory = next_ready(current, memory, probe, now, TIMERS)
        out.append(current)
    return out


def test_first_observation_is_taken_as_is() -> None:
    assert run([(0, UP)])[0].status == TRUE
    first = run([(0, DOWN)])[0]
    assert (first.status, first.reason) == (FALSE, REASON_NOT_REACHABLE)
    assert run([(0, SICK)])[0].reason == REASON_NOT_READY


def test_failure_threshold_holds_ready_until_it_passes() -> None:
    conditions = run([(0, UP), (10, DOWN), (20, DOWN), (39, DOWN), (40, DOWN), (50, DOWN)])
    assert [c.status for c in conditions] == [TRUE, TRUE, TRUE, TRUE, FALSE, FALSE]
    assert conditions[4].last_transition_s == 40
    assert conditions[5].last_transition_s == 40  # unchanged condition keeps its time


def test_success_threshold_and_hysteresis() -> None:
    conditions = run([(0, DOWN), (5, UP), (15, UP), (24, UP), (25, UP)])
    assert [c.status for c in conditions] == [FALSE, FALSE, FALSE, FALSE, TRUE]


def test_flapping_never_flips_and_restarts_the_clock() -> None:
    conditions = run([(0, UP), (10, DOWN), (25, UP), (35, DOWN), (60, DOWN), (65, DOWN)])
    assert [c.status for c in conditions] == [TRUE, TRUE, TRUE, TRUE, TRUE, FALSE]


def test_changes_between_false_reasons_are_immediate() -> None:
    conditions = run([(0, DOWN), (1, SICK), (2, DOWN)])
    assert [c.reason for c in conditions] == [REASON_NOT_REACHABLE, REASON_NOT_READY, REASON_NOT_REACHABLE]
    assert conditions[1].last_transition_s == 0  # same status: transition time kept


def test_restart_without_memory_takes_the_observation() -> None:
    current = Condition("Ready", TRUE, REASON_READY, "", 0)
    assert run([(100, DOWN)], current=current)[0].status == FALSE


def test_unknown_after_grace_period() -> None:
    ready = Condition("Ready", TRUE, REASON_READY, "", 0)
    assert stale_ready(ready, last_heartbeat_s=100, registered_s=0, now=139, timers=TIMERS) is None
    stale = stale_ready(ready, last_heartbeat_s=100, registered_s=0, now=141, timers=TIMERS)
    assert stale is not None and (stale.status, stale.reason) == (UNKNOWN, REASON_STATUS_UNKNOWN)
    assert stale_ready(stale, 100, 0, 200, TIMERS) is None  # already Unknown: nothing to write
    # never heard from: the startup grace period counts from registration
    assert stale_ready(None, None, registered_s=0, now=59, timers=TIMERS) is None
    assert stale_ready(None, None, registered_s=0, now=61, timers=TIMERS) is not None


def test_taints_follow_ready() -> None:
    user = {"key": "dedicated", "value": "gpu", "effect": "NoExecute"}
    not_ready = plan_taints([user], FALSE, 0)
    assert [t["key"] for t in not_ready] == ["dedicated", TAINT_NOT_READY]
    assert not_ready[1]["effect"] == "NoSchedule" and "timeAdded" in not_ready[1]
    unknown = plan_taints(not_ready, UNKNOWN, 10)
    assert [t["key"] for t in unknown] == ["dedicated", TAINT_UNREACHABLE]
    assert plan_taints(unknown, TRUE, 20) == [user]
    assert plan_taints(not_ready, FALSE, 99) == not_ready  # stable: timeAdded kept


def test_node_summary() -> None:
    nodes = [
        {"status": {"conditions": [{"type": "Ready", "status": "True"}],
                    "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}}},
        {"status": {"conditions": [{"type": "Ready", "status": "False"}],
                    "allocatable": {"cpu": "500m", "memory": "1048576Ki", "pods": "10"}}},
    ]
    summary, resources = summarize_nodes(nodes)
    assert summary == {"totalNum": 2, "readyNum": 1}
    assert resources == {"allocatable": {"cpu": "2500m", "memory": "5Gi", "pods": "120"}}


# agent_status: what a pull agent writes after one probe ---------------------------------------

READY_CURRENT = {"type": "Ready", "status": "True", "reason": REASON_READY,
                 "message": MESSAGE_READY, "lastTransitionTime": "2026-01-01T00:00:00Z"}
AT_REST = {"conditions": [READY_CURRENT], "kubernetesVersion": "v1.37.1",
           "lastHeartbeatTime": "2026-01-01T00:10:00Z"}
OBSERVED_READY = Condition("Ready", TRUE, REASON_READY, MESSAGE_READY, 1_800_000_000)


def test_agent_status_is_none_when_nothing_changed() -> None:
    assert agent_status(AT_REST, {"kubernetesVersion": "v1.37.1"}, OBSERVED_READY,
                        1_800_000_000) is None
    assert agent_status(AT_REST, {}, OBSERVED_READY, 1_800_000_000) is None


def test_agent_status_writes_what_changed_with_a_new_heartbeat_time() -> None:
    new = agent_status(AT_REST, {"kubernetesVersion": "v1.38.0"}, OBSERVED_READY, 1_800_000_000)
    assert new is not None and new["kubernetesVersion"] == "v1.38.0"
    assert new["lastHeartbeatTime"] == "2027-01-15T08:00:00Z"
    # the Ready condition kept its transition time: it did not change
    assert new["conditions"] == [READY_CURRENT]


def test_agent_status_ready_flip_gets_a_new_transition_time() -> None:
    down = Condition("Ready", FALSE, REASON_NOT_READY, "sick", 1_800_000_000)
    new = agent_status(AT_REST, {}, down, 1_800_000_000)
    assert new is not None
    [cond] = new["conditions"]
    assert (cond["status"], cond["lastTransitionTime"]) == (FALSE, "2027-01-15T08:00:00Z")


def test_agent_status_forced_heartbeat_when_the_lease_is_not_renewed() -> None:
    new = agent_status(AT_REST, {}, OBSERVED_READY, 1_800_000_000, heartbeat=True)
    assert new is not None and new["lastHeartbeatTime"] == "2027-01-15T08:00:00Z"
