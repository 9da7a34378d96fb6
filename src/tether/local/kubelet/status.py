"""Pod status from container states (pure): phase, conditions, containerStatuses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from tether.objects import Obj

State = Literal["waiting", "running", "terminated"]


@dataclass(frozen=True)
class ContainerState:
    name: str
    image: str
    state: State = "waiting"
    reason: str = "ContainerCreating"
    message: str = ""
    started_at: str = ""
    finished_at: str = ""
    exit_code: int = 0
    restart_count: int = 0
    ready: bool = False
    last_terminated: Mapping[str, Any] | None = None
    init: bool = False

    def running(self, at: str) -> ContainerState:
        return replace(self, state="running", reason="", message="", started_at=at, ready=False)

    def terminated(self, code: int, at: str, message: str = "") -> ContainerState:
        reason = "Completed" if code == 0 else "Error"
        return replace(self, state="terminated", reason=reason, exit_code=code, finished_at=at, ready=False,
                       message=message)

    def waiting(self, reason: str, message: str = "") -> ContainerState:
        last = self._as_terminated() if self.state == "terminated" else self.last_terminated
        return replace(self, state="waiting", reason=reason, message=message, ready=False, last_terminated=last)

    def restarted(self) -> ContainerState:
        return replace(self, restart_count=self.restart_count + 1, last_terminated=self._as_terminated())

    def _as_terminated(self) -> Mapping[str, Any]:
        return {"terminated": {"exitCode": self.exit_code, "reason": self.reason,
                               "startedAt": self.started_at or None, "finishedAt": self.finished_at or None,
                               **({"message": self.message} if self.message else {})}}

    def to_status(self) -> Obj:
        if self.state == "running":
            state: Obj = {"running": {"startedAt": self.started_at}}
        elif self.state == "terminated":
            state = {"terminated": {"exitCode": self.exit_code, "reason": self.reason,
                                    "startedAt": self.started_at or None, "finishedAt": self.finished_at,
                                    **({"message": self.message} if self.message else {})}}
        else:
            state = {"waiting": {"reason": self.reason, **({"message": self.message} if self.message else {})}}
        out: Obj = {
            "name": self.name,
            "image": self.image,
            "imageID": f"tether.local/{self.image}",
            "containerID": f"tether://{self.name}-{self.restart_count}",
            "ready": self.ready,
            "restartCount": self.restart_count,
            "started": self.state == "running",
            "state": state,
            "lastState": dict(self.last_terminated) if self.last_terminated else {},
        }
        return out


@dataclass(frozen=True)
class PodRuntimeState:
    pod_ip: str = ""
    host_ip: str = ""
    start_time: str = ""
    init: Sequence[ContainerState] = ()
    containers: Sequence[ContainerState] = ()
    failure_reason: str = ""  # e.g. FailedCreatePodSandBox: the pod never starts
    failure_message: str = ""
    since: Mapping[str, str] = field(default_factory=dict)  # condition type -> transition time


def phase(restart_policy: str, state: PodRuntimeState) -> str:
    if any(c.state != "terminated" or c.exit_code != 0 for c in state.init):
        failed_init = any(c.state == "terminated" and c.exit_code != 0 for c in state.init)
        return "Failed" if failed_init and restart_policy == "Never" else "Pending"
    containers = state.containers
    if not containers or any(c.state == "waiting" and c.restart_count == 0 and not c.last_terminated
                             for c in containers):
        return "Pending"
    if all(c.state == "terminated" for c in containers):
        if all(c.exit_code == 0 for c in containers):
            return "Succeeded" if restart_policy != "Always" else "Running"
        return "Failed" if restart_policy == "Never" else "Running"
    return "Running"


def pod_status(pod: Mapping[str, Any], state: PodRuntimeState, now: str) -> Obj:
    spec = pod.get("spec") or {}
    restart_policy = str(spec.get("restartPolicy", "Always"))
    pod_phase = phase(restart_policy, state)
    initialized = all(c.state == "terminated" and c.exit_code == 0 for c in state.init)
    containers_ready = bool(state.containers) and all(c.ready for c in state.containers)
    sandbox = bool(state.pod_ip) or not state.failure_reason
    previous = {c.get("type"): c for c in (pod.get("status") or {}).get("conditions") or []}

    def condition(kind: str, ok: bool, reason: str = "") -> Obj:
        value = "True" if ok else "False"
        old = previous.get(kind)
        since = old.get("lastTransitionTime") if old and old.get("status") == value else now
        out: Obj = {"type": kind, "status": value, "lastProbeTime": None, "lastTransitionTime": since}
        if reason and not ok:
            out["reason"] = reason
        return out

    not_ready = "PodCompleted" if pod_phase in ("Succeeded", "Failed") else "ContainersNotReady"
    conditions = [
        condition("PodReadyToStartContainers", sandbox and bool(state.pod_ip)),
        condition("Initialized", initialized, "ContainersNotInitialized"),
        condition("Ready", containers_ready, not_ready),
        condition("ContainersReady", containers_ready, not_ready),
        condition("PodScheduled", True),
    ]
    status: Obj = dict(pod.get("status") or {})
    status.update(
        phase=pod_phase,
        conditions=conditions,
        qosClass=status.get("qosClass", "BestEffort"),
        containerStatuses=[c.to_status() for c in state.containers],
    )
    if state.init:
        status["initContainerStatuses"] = [c.to_status() for c in state.init]
    if state.host_ip:
        status["hostIP"] = state.host_ip
        status["hostIPs"] = [{"ip": state.host_ip}]
    if state.pod_ip:
        status["podIP"] = state.pod_ip
        status["podIPs"] = [{"ip": state.pod_ip}]
    if state.start_time:
        status["startTime"] = state.start_time
    if state.failure_reason:
        status["reason"] = state.failure_reason
        status["message"] = state.failure_message
    else:
        status.pop("reason", None)
        status.pop("message", None)
    return status
