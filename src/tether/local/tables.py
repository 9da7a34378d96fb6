"""`meta.k8s.io/v1` Table output: what `kubectl get` asks for and prints.

Pure: no I/O (the clock is the `now` argument). Columns, cell types and cell text follow the
upstream server-side printers (`pkg/printers/internalversion`) for the kinds kubectl users
look at most, and the apiextensions table convertor for custom resources. The server always
renders the `-o wide` (priority 1) columns; kubectl hides them unless asked.

Two custom-resource details that follow the real server rather than intuition:
- `date` printer-column cells are sent already rendered as an age ("5m"), not as timestamps;
- the default `Age` column is added only when the CRD declares no printer columns at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tether.objects import ObjView as Obj
from tether.objects import jsonpath, selectors
from tether.objects.times import parse_time, rfc3339

__all__ = ["Column", "human_duration", "make_table", "parse_time"]

Cell = str | int | float | bool | None

NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated."
)
AGE_DESCRIPTION = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC."
)


@dataclass(frozen=True)
class Column:
    name: str
    type: str = "string"
    format: str = ""
    description: str = ""
    priority: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        }


NAME = Column("Name", format="name", description=NAME_DESCRIPTION)
AGE = Column("Age", description=AGE_DESCRIPTION)


def _wide(name: str, type_: str = "string") -> Column:
    return Column(name, type=type_, priority=1)


# ---------------------------------------------------------------------------------------------
# Time


def human_duration(delta: timedelta) -> str:
    """kubectl's age format (duration.HumanDuration): about two significant units."""
    seconds = int(delta.total_seconds())  # truncates toward zero, as Go's int() does
    if seconds < -1:
        return "<invalid>"  # up to 2s of clock skew still reads as "0s"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = seconds // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        years = hours // 24 // 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{hours // 24 // 365}y"


def _since(value: Any, now: datetime) -> str:
    """translateTimestampSince: the age of a timestamp, `<unknown>` when unset."""
    when = parse_time(value)
    return human_duration(now - when) if when else "<unknown>"


def _rfc3339(value: Any) -> str:
    when = parse_time(value)
    return "0001-01-01T00:00:00Z" if when is None else rfc3339(when)  # Go's zero time if unset


# ---------------------------------------------------------------------------------------------
# Small accessors


def _get(obj: Any, path: str, default: Any = None) -> Any:
    for part in path.split("."):
        if not isinstance(obj, Mapping) or part not in obj or obj[part] is None:
            return default
        obj = obj[part]
    return obj


def _name(obj: Obj) -> str:
    return str(_get(obj, "metadata.name", ""))


def _age(obj: Obj, now: datetime) -> str:
    return _since(_get(obj, "metadata.creationTimestamp"), now)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _none_if_empty(value: Any) -> str:
    return str(value) if value not in (None, "") else "<none>"


def _format_labels(labels: Any) -> str:
    """labels.FormatLabels: `k=v` pairs sorted by key, `<none>` when empty."""
    if not isinstance(labels, Mapping) or not labels:
        return "<none>"
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def _selector_text(selector: Any, *, none: str = "") -> str:
    try:
        text = selectors.label_selector_to_string(selector if isinstance(selector, Mapping) else {})
    except selectors.SelectorError:
        return "<error>"
    return text or none


def _with_more(items: Sequence[str], total: int, *, empty: str, limit: int = 3) -> str:
    """Join at most `limit` items, then ` + N more...`, as the upstream list printers do."""
    text = ",".join(items[:limit])
    if total > limit:
        return f"{text} + {total - limit} more..."
    return text or empty


def _has_condition(conditions: Any, type_: str, status: str = "True") -> bool:
    return any(
        isinstance(c, Mapping) and c.get("type") == type_ and c.get("status") == status
        for c in conditions or []
    )


def _containers(pod_spec: Any) -> tuple[str, str]:
    containers = _get(pod_spec, "containers", []) if isinstance(pod_spec, Mapping) else []
    names = ",".join(str(c.get("name", "")) for c in containers)
    images = ",".join(str(c.get("image", "")) for c in containers)
    return names, images


def _lb_ingress(status: Any) -> str:
    """Load-balancer addresses (IP, else hostname), sorted and de-duplicated."""
    found = {
        str(i.get("ip") or i.get("hostname"))
        for i in _get(status, "loadBalancer.ingress", [])
        if i.get("ip") or i.get("hostname")
    }
    return ",".join(sorted(found))


# ---------------------------------------------------------------------------------------------
# Printers

RowCells = Callable[[Obj, datetime], list[Cell]]
RowConditions = Callable[[Obj], list[dict[str, str]]]


@dataclass(frozen=True)
class _Printer:
    columns: tuple[Column, ...]
    cells: RowCells
    conditions: RowConditions | None = field(default=None)


def _restartable(container: Any) -> bool:
    return isinstance(container, Mapping) and container.get("restartPolicy") == "Always"


def _later(current: datetime | None, status: Obj) -> datetime | None:
    """The later of `current` and the container's last termination time."""
    finished = parse_time(_get(status, "lastState.terminated.finishedAt"))
    if finished is None or (current is not None and current >= finished):
        return current
    return finished


@dataclass
class _PodTally:
    """What printPod accumulates while walking the container statuses."""

    reason: str
    ready: int = 0
    restarts: int = 0
    last_restart: datetime | None = None


def _init_containers(pod: Obj, tally: _PodTally) -> tuple[bool, int, datetime | None]:
    """Walk init containers; returns (initializing, sidecar restarts, last sidecar restart)."""
    specs = {c.get("name"): c for c in _get(pod, "spec.initContainers", [])}
    sidecar_restarts, sidecar_last = 0, None
    for i, status in enumerate(_get(pod, "status.initContainerStatuses", [])):
        count = _int(status.get("restartCount"))
        tally.restarts += count
        tally.last_restart = _later(tally.last_restart, status)
        sidecar = _restartable(specs.get(status.get("name")))
        if sidecar:
            sidecar_restarts += count
            sidecar_last = _later(sidecar_last, status)
        terminated = _get(status, "state.terminated")
        waiting_reason = _get(status, "state.waiting.reason", "")
        if terminated is not None and _int(terminated.get("exitCode")) == 0:
            continue
        if sidecar and status.get("started"):
            tally.ready += 1 if status.get("ready") else 0
            continue
        if terminated is not None:
            tally.reason = "Init:" + _exit_reason(terminated)
        elif waiting_reason and waiting_reason != "PodInitializing":
            tally.reason = "Init:" + waiting_reason
        else:
            tally.reason = f"Init:{i}/{len(specs)}"
        return True, sidecar_restarts, sidecar_last
    return False, sidecar_restarts, sidecar_last


def _exit_reason(terminated: Obj) -> str:
    if terminated.get("reason"):
        return str(terminated["reason"])
    if terminated.get("signal"):
        return f"Signal:{terminated['signal']}"
    return f"ExitCode:{_int(terminated.get('exitCode'))}"


def _app_containers(pod: Obj, tally: _PodTally) -> None:
    has_running = False
    # Walked last to first so the first container's state wins the STATUS text, as upstream.
    for status in reversed(_get(pod, "status.containerStatuses", [])):
        tally.restarts += _int(status.get("restartCount"))
        tally.last_restart = _later(tally.last_restart, status)
        waiting_reason = _get(status, "state.waiting.reason", "")
        terminated = _get(status, "state.terminated")
        if waiting_reason:
            tally.reason = waiting_reason
        elif terminated is not None:
            tally.reason = _exit_reason(terminated)
        elif status.get("ready") and _get(status, "state.running") is not None:
            has_running = True
            tally.ready += 1
    if tally.reason == "Completed" and has_running:
        ready = _has_condition(_get(pod, "status.conditions"), "Ready")
        tally.reason = "Running" if ready else "NotReady"


def _pod_status(pod: Obj) -> _PodTally:
    phase = _get(pod, "status.phase", "")
    tally = _PodTally(reason=_get(pod, "status.reason", "") or phase)
    for cond in _get(pod, "status.conditions", []):
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "SchedulingGated":
            tally.reason = "SchedulingGated"
    initializing, sidecar_restarts, sidecar_last = _init_containers(pod, tally)
    initialized = _has_condition(_get(pod, "status.conditions"), "Initialized")
    if not initializing or initialized:
        # Once initialized, only restartable (sidecar) init containers count towards RESTARTS.
        tally.restarts, tally.last_restart = sidecar_restarts, sidecar_last
        _app_containers(pod, tally)
    if _get(pod, "metadata.deletionTimestamp"):
        if _get(pod, "status.reason") == "NodeLost":
            tally.reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            tally.reason = "Terminating"
    return tally


def _pod_cells(pod: Obj, now: datetime) -> list[Cell]:
    spec = _get(pod, "spec", {})
    sidecars = sum(1 for c in spec.get("initContainers") or [] if _restartable(c))
    total = len(spec.get("containers") or []) + sidecars
    tally = _pod_status(pod)
    restarts = str(tally.restarts)
    if tally.restarts and tally.last_restart is not None:
        restarts += f" ({human_duration(now - tally.last_restart)} ago)"
    ips = _get(pod, "status.podIPs", [])
    ip = (ips[0].get("ip") if ips else None) or _get(pod, "status.podIP")
    return [
        _name(pod),
        f"{tally.ready}/{total}",
        tally.reason,
        restarts,
        _age(pod, now),
        _none_if_empty(ip),
        _none_if_empty(spec.get("nodeName")),
        _none_if_empty(_get(pod, "status.nominatedNodeName")),
        _readiness_gates(pod),
    ]


def _readiness_gates(pod: Obj) -> str:
    gates = _get(pod, "spec.readinessGates", [])
    if not gates:
        return "<none>"
    conditions = {c.get("type"): c.get("status") for c in _get(pod, "status.conditions", [])}
    ready = sum(1 for g in gates if conditions.get(g.get("conditionType")) == "True")
    return f"{ready}/{len(gates)}"


def _pod_conditions(pod: Obj) -> list[dict[str, str]]:
    phase = _get(pod, "status.phase")
    messages = {"Succeeded": "The pod has completed successfully.", "Failed": "The pod failed."}
    if phase not in messages:
        return []
    return [{"type": "Completed", "status": "True", "reason": phase, "message": messages[phase]}]


def _deployment_cells(obj: Obj, now: datetime) -> list[Cell]:
    names, images = _containers(_get(obj, "spec.template.spec"))
    return [
        _name(obj),
        f"{_int(_get(obj, 'status.readyReplicas'))}/{_int(_get(obj, 'spec.replicas'))}",
        _int(_get(obj, "status.updatedReplicas")),
        _int(_get(obj, "status.availableReplicas")),
        _age(obj, now),
        names,
        images,
        _selector_text(_get(obj, "spec.selector")),
    ]


def _replicaset_cells(obj: Obj, now: datetime) -> list[Cell]:
    names, images = _containers(_get(obj, "spec.template.spec"))
    return [
        _name(obj),
        _int(_get(obj, "spec.replicas")),
        _int(_get(obj, "status.replicas")),
        _int(_get(obj, "status.readyReplicas")),
        _age(obj, now),
        names,
        images,
        _selector_text(_get(obj, "spec.selector")),
    ]


def _statefulset_cells(obj: Obj, now: datetime) -> list[Cell]:
    names, images = _containers(_get(obj, "spec.template.spec"))
    ready = f"{_int(_get(obj, 'status.readyReplicas'))}/{_int(_get(obj, 'spec.replicas'))}"
    return [_name(obj), ready, _age(obj, now), names, images]


def _daemonset_cells(obj: Obj, now: datetime) -> list[Cell]:
    names, images = _containers(_get(obj, "spec.template.spec"))
    status = _get(obj, "status", {})
    return [
        _name(obj),
        _int(status.get("desiredNumberScheduled")),
        _int(status.get("currentNumberScheduled")),
        _int(status.get("numberReady")),
        _int(status.get("updatedNumberScheduled")),
        _int(status.get("numberAvailable")),
        _format_labels(_get(obj, "spec.template.spec.nodeSelector")),
        _age(obj, now),
        names,
        images,
        _selector_text(_get(obj, "spec.selector")),
    ]


def _job_status(obj: Obj) -> str:
    conditions = _get(obj, "status.conditions", [])
    if _has_condition(conditions, "Complete"):
        return "Complete"
    if _has_condition(conditions, "Failed"):
        return "Failed"
    if _get(obj, "metadata.deletionTimestamp"):
        return "Terminating"
    for type_ in ("Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if _has_condition(conditions, type_):
            return type_
    return "Running"


def _job_completions(obj: Obj) -> str:
    succeeded = _int(_get(obj, "status.succeeded"))
    completions = _get(obj, "spec.completions")
    if completions is not None:
        return f"{succeeded}/{_int(completions)}"
    parallelism = _int(_get(obj, "spec.parallelism"))
    return f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"


def _job_duration(obj: Obj, now: datetime) -> str:
    start = parse_time(_get(obj, "status.startTime"))
    if start is None:
        return ""
    end = parse_time(_get(obj, "status.completionTime")) or now
    return human_duration(end - start)


def _job_cells(obj: Obj, now: datetime) -> list[Cell]:
    names, images = _containers(_get(obj, "spec.template.spec"))
    return [
        _name(obj),
        _job_status(obj),
        _job_completions(obj),
        _job_duration(obj, now),
        _age(obj, now),
        names,
        images,
        _selector_text(_get(obj, "spec.selector")),
    ]


def _cronjob_cells(obj: Obj, now: datetime) -> list[Cell]:
    names, images = _containers(_get(obj, "spec.jobTemplate.spec.template.spec"))
    suspend = _get(obj, "spec.suspend")
    last = _get(obj, "status.lastScheduleTime")
    return [
        _name(obj),
        str(_get(obj, "spec.schedule", "")),
        _none_if_empty(_get(obj, "spec.timeZone")),
        "<unset>" if suspend is None else ("True" if suspend else "False"),
        len(_get(obj, "status.active", [])),
        _since(last, now) if last else "<none>",
        _age(obj, now),
        names,
        images,
        _selector_text(_get(obj, "spec.jobTemplate.spec.selector"), none="<none>"),
    ]


def _service_ports(ports: Iterable[Obj]) -> str:
    pieces = []
    for port in ports:
        protocol = port.get("protocol") or "TCP"
        node_port = _int(port.get("nodePort"))
        middle = f":{node_port}" if node_port > 0 else ""
        pieces.append(f"{_int(port.get('port'))}{middle}/{protocol}")
    return ",".join(pieces) or "<none>"


def _service_external_ip(obj: Obj) -> str:
    type_ = _get(obj, "spec.type", "ClusterIP")
    external = [str(ip) for ip in _get(obj, "spec.externalIPs", [])]
    if type_ in ("ClusterIP", "NodePort"):
        return ",".join(external) or "<none>"
    if type_ == "LoadBalancer":
        lb = _lb_ingress(_get(obj, "status", {}))
        addresses = (lb.split(",") if lb else []) + external
        return ",".join(addresses) or "<pending>"
    if type_ == "ExternalName":
        return str(_get(obj, "spec.externalName", ""))
    return "<unknown>"


def _service_cells(obj: Obj, now: datetime) -> list[Cell]:
    cluster_ips = _get(obj, "spec.clusterIPs", [])
    cluster_ip = (cluster_ips[0] if cluster_ips else None) or _get(obj, "spec.clusterIP")
    return [
        _name(obj),
        str(_get(obj, "spec.type", "ClusterIP")),
        _none_if_empty(cluster_ip),
        _service_external_ip(obj),
        _service_ports(_get(obj, "spec.ports", [])),
        _age(obj, now),
        _format_labels(_get(obj, "spec.selector")),
    ]


def _host_port(ip: str, port: Any) -> str:
    host = f"[{ip}]" if ":" in ip else ip  # net.JoinHostPort brackets IPv6
    return f"{host}:{_int(port)}"


def _endpoints_text(obj: Obj) -> str:
    subsets = _get(obj, "subsets", [])
    if not subsets:
        return "<none>"
    shown: list[str] = []
    total = 0
    for subset in subsets:
        addresses = [str(a.get("ip", "")) for a in subset.get("addresses") or []]
        ports = subset.get("ports") or [None]  # headless services may have no ports
        for port in ports:
            total += len(addresses)
            for ip in addresses:
                shown.append(ip if port is None else _host_port(ip, port.get("port")))
    return _with_more(shown, total, empty="")


def _endpoints_cells(obj: Obj, now: datetime) -> list[Cell]:
    return [_name(obj), _endpoints_text(obj), _age(obj, now)]


def _endpointslice_cells(obj: Obj, now: datetime) -> list[Cell]:
    ports = _get(obj, "ports", [])
    port_text = [
        str(p["port"]) if p.get("port") is not None else str(p.get("name") or "*") for p in ports
    ]
    addresses = [str(a) for e in _get(obj, "endpoints", []) for a in e.get("addresses") or []]
    return [
        _name(obj),
        str(_get(obj, "addressType", "")),
        _with_more(port_text, len(port_text), empty="<unset>"),
        _with_more(addresses, len(addresses), empty="<unset>"),
        _age(obj, now),
    ]


def _node_roles(labels: Mapping[str, str]) -> str:
    roles = set()
    for key, value in labels.items():
        if key.startswith("node-role.kubernetes.io/") and key != "node-role.kubernetes.io/":
            roles.add(key.removeprefix("node-role.kubernetes.io/"))
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    return ",".join(sorted(roles)) or "<none>"


def _node_address(obj: Obj, type_: str) -> str:
    for address in _get(obj, "status.addresses", []):
        if address.get("type") == type_:
            return str(address.get("address", ""))
    return "<none>"


def _node_cells(obj: Obj, now: datetime) -> list[Cell]:
    status = []
    for cond in _get(obj, "status.conditions", []):
        if cond.get("type") == "Ready":
            status = ["Ready" if cond.get("status") == "True" else "NotReady"]
    status = status or ["Unknown"]
    if _get(obj, "spec.unschedulable"):
        status.append("SchedulingDisabled")
    info = _get(obj, "status.nodeInfo", {})
    return [
        _name(obj),
        ",".join(status),
        _node_roles(_get(obj, "metadata.labels", {})),
        _age(obj, now),
        str(info.get("kubeletVersion", "")),
        _node_address(obj, "InternalIP"),
        _node_address(obj, "ExternalIP"),
        str(info.get("osImage") or "<unknown>"),
        str(info.get("kernelVersion") or "<unknown>"),
        str(info.get("containerRuntimeVersion") or "<unknown>"),
    ]


def _event_source(obj: Obj) -> str:
    component = _get(obj, "source.component") or _get(obj, "reportingComponent", "")
    instance = _get(obj, "source.host") or _get(obj, "reportingInstance", "")
    return f"{component}, {instance}" if instance else str(component)


def _event_cells(obj: Obj, now: datetime) -> list[Cell]:
    first = _since(_get(obj, "firstTimestamp") or _get(obj, "eventTime"), now)
    last = _since(_get(obj, "lastTimestamp"), now) if _get(obj, "lastTimestamp") else first
    count = _int(_get(obj, "count"))
    if _get(obj, "series") is not None:
        last = _since(_get(obj, "series.lastObservedTime"), now)
        count = _int(_get(obj, "series.count"))
    elif count == 0:
        count = 1  # singleton events written through events.k8s.io have no count
    kind = str(_get(obj, "involvedObject.kind", "")).lower()
    target_name = _get(obj, "involvedObject.name", "")
    return [
        last,
        str(_get(obj, "type", "")),
        str(_get(obj, "reason", "")),
        f"{kind}/{target_name}" if target_name else kind,
        str(_get(obj, "involvedObject.fieldPath", "")),
        _event_source(obj),
        str(_get(obj, "message", "")).strip(),
        first,
        count,
        _name(obj),
    ]


def _configmap_cells(obj: Obj, now: datetime) -> list[Cell]:
    size = len(_get(obj, "data", {})) + len(_get(obj, "binaryData", {}))
    return [_name(obj), size, _age(obj, now)]


def _secret_cells(obj: Obj, now: datetime) -> list[Cell]:
    return [_name(obj), str(_get(obj, "type", "")), len(_get(obj, "data", {})), _age(obj, now)]


def _namespace_cells(obj: Obj, now: datetime) -> list[Cell]:
    return [_name(obj), str(_get(obj, "status.phase", "")), _age(obj, now)]


def _serviceaccount_cells(obj: Obj, now: datetime) -> list[Cell]:
    return [_name(obj), len(_get(obj, "secrets", [])), _age(obj, now)]


def _lease_cells(obj: Obj, now: datetime) -> list[Cell]:
    return [_name(obj), str(_get(obj, "spec.holderIdentity", "")), _age(obj, now)]


def _ingress_hosts(rules: Sequence[Obj]) -> str:
    hosts = [str(r["host"]) for r in rules[:3] if r.get("host")]
    if not hosts:
        return "*"
    return f"{','.join(hosts)} + {len(rules) - 3} more..." if len(rules) > 3 else ",".join(hosts)


def _ingress_cells(obj: Obj, now: datetime) -> list[Cell]:
    return [
        _name(obj),
        _none_if_empty(_get(obj, "spec.ingressClassName")),
        _ingress_hosts(_get(obj, "spec.rules", [])),
        _lb_ingress(_get(obj, "status", {})),
        "80, 443" if _get(obj, "spec.tls") else "80",
        _age(obj, now),
    ]


def _networkpolicy_cells(obj: Obj, now: datetime) -> list[Cell]:
    return [
        _name(obj),
        _selector_text(_get(obj, "spec.podSelector"), none="<none>"),
        _age(obj, now),
    ]


def _apiservice_cells(obj: Obj, now: datetime) -> list[Cell]:
    service = _get(obj, "spec.service")
    where = f"{service.get('namespace', '')}/{service.get('name', '')}" if isinstance(service, dict) else "Local"
    available = "Unknown"
    for condition in _get(obj, "status.conditions", []) or []:
        if isinstance(condition, dict) and condition.get("type") == "Available":
            status, reason = str(condition.get("status", "")), str(condition.get("reason") or "")
            available = status if status == "True" or not reason else f"{status} ({reason})"
    return [_name(obj), where, available, _age(obj, now)]


def _created_at_cells(obj: Obj, now: datetime) -> list[Cell]:
    return [_name(obj), _rfc3339(_get(obj, "metadata.creationTimestamp"))]


def _subjects(obj: Obj) -> tuple[str, str, str]:
    users, groups, accounts = [], [], []
    for subject in _get(obj, "subjects", []):
        kind, name = subject.get("kind"), str(subject.get("name", ""))
        if kind == "User":
            users.append(name)
        elif kind == "Group":
            groups.append(name)
        elif kind == "ServiceAccount":
            accounts.append(f"{subject.get('namespace', '')}:{name}")
    return ", ".join(users), ", ".join(groups), ", ".join(accounts)


def _binding_cells(obj: Obj, now: datetime) -> list[Cell]:
    ref = _get(obj, "roleRef", {})
    return [
        _name(obj),
        f"{ref.get('kind', '')}/{ref.get('name', '')}",
        _age(obj, now),
        *_subjects(obj),
    ]


_ACCESS_MODES = (
    ("ReadWriteOnce", "RWO"),
    ("ReadOnlyMany", "ROX"),
    ("ReadWriteMany", "RWX"),
    ("ReadWriteOncePod", "RWOP"),
)


def _pvc_cells(obj: Obj, now: datetime) -> list[Cell]:
    phase = "Terminating" if _get(obj, "metadata.deletionTimestamp") else _get(obj, "status.phase")
    volume = str(_get(obj, "spec.volumeName", ""))
    capacity, modes = "", ""
    if volume:  # capacity and access modes are only shown once bound
        capacity = str(_get(obj, "status.capacity.storage", "0"))
        have = set(_get(obj, "status.accessModes", []))
        modes = ",".join(short for mode, short in _ACCESS_MODES if mode in have)
    storage_class = _get(obj, "metadata.annotations", {}).get(
        "volume.beta.kubernetes.io/storage-class"
    ) or _get(obj, "spec.storageClassName", "")
    return [
        _name(obj),
        str(phase or ""),
        volume,
        capacity,
        modes,
        str(storage_class),
        _get(obj, "spec.volumeAttributesClassName") or "<unset>",
        _age(obj, now),
        str(_get(obj, "spec.volumeMode") or "<unset>"),
    ]


def _storageclass_cells(obj: Obj, now: datetime) -> list[Cell]:
    name = _name(obj)
    if _get(obj, "metadata.annotations", {}).get("storageclass.kubernetes.io/is-default-class") in (
        "true",
        "True",
    ):
        name += " (default)"
    return [
        name,
        str(_get(obj, "provisioner", "")),
        str(_get(obj, "reclaimPolicy") or "Delete"),
        str(_get(obj, "volumeBindingMode") or "Immediate"),
        "true" if _get(obj, "allowVolumeExpansion") else "false",
        _age(obj, now),
    ]


def _priorityclass_cells(obj: Obj, now: datetime) -> list[Cell]:
    return [
        _name(obj),
        _int(_get(obj, "value")),
        bool(_get(obj, "globalDefault")),
        _age(obj, now),
        str(_get(obj, "preemptionPolicy") or "PreemptLowerPriority"),
    ]


_WORKLOAD_WIDE = (_wide("Containers"), _wide("Images"), _wide("Selector"))
# Roles have no printer upstream: the default convertor shows the creation timestamp itself.
_CREATED_AT = _Printer(
    (NAME, Column("Created At", "date", description=AGE_DESCRIPTION)), _created_at_cells
)
_BINDING = _Printer(
    (NAME, Column("Role"), AGE, _wide("Users"), _wide("Groups"), _wide("ServiceAccounts")),
    _binding_cells,
)

_PRINTERS: dict[tuple[str, str], _Printer] = {
    ("", "Pod"): _Printer(
        (
            NAME,
            Column("Ready"),
            Column("Status"),
            Column("Restarts"),
            AGE,
            _wide("IP"),
            _wide("Node"),
            _wide("Nominated Node"),
            _wide("Readiness Gates"),
        ),
        _pod_cells,
        _pod_conditions,
    ),
    ("apps", "Deployment"): _Printer(
        (NAME, Column("Ready"), Column("Up-to-date"), Column("Available"), AGE, *_WORKLOAD_WIDE),
        _deployment_cells,
    ),
    ("apps", "ReplicaSet"): _Printer(
        (
            NAME,
            Column("Desired", "integer"),
            Column("Current", "integer"),
            Column("Ready", "integer"),
            AGE,
            *_WORKLOAD_WIDE,
        ),
        _replicaset_cells,
    ),
    ("apps", "StatefulSet"): _Printer(
        (NAME, Column("Ready"), AGE, _wide("Containers"), _wide("Images")), _statefulset_cells
    ),
    ("apps", "DaemonSet"): _Printer(
        (
            NAME,
            Column("Desired", "integer"),
            Column("Current", "integer"),
            Column("Ready", "integer"),
            Column("Up-to-date", "integer"),
            Column("Available", "integer"),
            Column("Node Selector"),
            AGE,
            *_WORKLOAD_WIDE,
        ),
        _daemonset_cells,
    ),
    ("batch", "Job"): _Printer(
        (NAME, Column("Status"), Column("Completions"), Column("Duration"), AGE, *_WORKLOAD_WIDE),
        _job_cells,
    ),
    ("batch", "CronJob"): _Printer(
        (
            NAME,
            Column("Schedule"),
            Column("Timezone"),
            Column("Suspend", "boolean"),
            Column("Active", "integer"),
            Column("Last Schedule"),
            AGE,
            *_WORKLOAD_WIDE,
        ),
        _cronjob_cells,
    ),
    ("", "Service"): _Printer(
        (
            NAME,
            Column("Type"),
            Column("Cluster-IP"),
            Column("External-IP"),
            Column("Port(s)"),
            AGE,
            _wide("Selector"),
        ),
        _service_cells,
    ),
    ("", "Endpoints"): _Printer((NAME, Column("Endpoints"), AGE), _endpoints_cells),
    ("discovery.k8s.io", "EndpointSlice"): _Printer(
        (NAME, Column("AddressType"), Column("Ports"), Column("Endpoints"), AGE),
        _endpointslice_cells,
    ),
    ("", "Node"): _Printer(
        (
            NAME,
            Column("Status"),
            Column("Roles"),
            AGE,
            Column("Version"),
            _wide("Internal-IP"),
            _wide("External-IP"),
            _wide("OS-Image"),
            _wide("Kernel-Version"),
            _wide("Container-Runtime"),
        ),
        _node_cells,
    ),
    ("", "Namespace"): _Printer((NAME, Column("Status"), AGE), _namespace_cells),
    ("", "ConfigMap"): _Printer((NAME, Column("Data"), AGE), _configmap_cells),
    ("", "Secret"): _Printer((NAME, Column("Type"), Column("Data"), AGE), _secret_cells),
    ("", "ServiceAccount"): _Printer((NAME, Column("Secrets"), AGE), _serviceaccount_cells),
    ("", "Event"): _Printer(
        (
            Column("Last Seen"),
            Column("Type"),
            Column("Reason"),
            Column("Object"),
            _wide("Subobject"),
            _wide("Source"),
            Column("Message"),
            _wide("First Seen"),
            _wide("Count"),
            Column("Name", format="name", description=NAME_DESCRIPTION, priority=1),
        ),
        _event_cells,
    ),
    ("coordination.k8s.io", "Lease"): _Printer((NAME, Column("Holder"), AGE), _lease_cells),
    ("networking.k8s.io", "Ingress"): _Printer(
        (NAME, Column("Class"), Column("Hosts"), Column("Address"), Column("Ports"), AGE),
        _ingress_cells,
    ),
    ("networking.k8s.io", "NetworkPolicy"): _Printer(
        (NAME, Column("Pod-Selector"), AGE), _networkpolicy_cells
    ),
    ("rbac.authorization.k8s.io", "Role"): _CREATED_AT,
    ("rbac.authorization.k8s.io", "ClusterRole"): _CREATED_AT,
    ("rbac.authorization.k8s.io", "RoleBinding"): _BINDING,
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): _BINDING,
    ("apiextensions.k8s.io", "CustomResourceDefinition"): _CREATED_AT,
    ("apiregistration.k8s.io", "APIService"): _Printer(
        (NAME, Column("Service", description="The reference to the service that hosts this API endpoint."),
         Column("Available", description="Whether this service is available."), AGE),
        _apiservice_cells,
    ),
    ("storage.k8s.io", "StorageClass"): _Printer(
        (
            NAME,
            Column("Provisioner"),
            Column("ReclaimPolicy"),
            Column("VolumeBindingMode"),
            Column("AllowVolumeExpansion"),
            AGE,
        ),
        _storageclass_cells,
    ),
    ("scheduling.k8s.io", "PriorityClass"): _Printer(
        (
            NAME,
            Column("Value", "integer"),
            Column("Global-Default", "boolean"),
            AGE,
            Column("PreemptionPolicy"),
        ),
        _priorityclass_cells,
    ),
    ("", "PersistentVolumeClaim"): _Printer(
        (
            NAME,
            Column("Status"),
            Column("Volume"),
            Column("Capacity"),
            Column("Access Modes"),
            Column("StorageClass"),
            Column("VolumeAttributesClass"),
            AGE,
            _wide("VolumeMode"),
        ),
        _pvc_cells,
    ),
}


# ---------------------------------------------------------------------------------------------
# Custom resources (apiextensions table convertor)

_CR_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def _json_cell(type_: str, value: Any, now: datetime) -> Cell:
    """A printer-column value converted to its declared type; None when it does not fit."""
    if value is None:
        return None
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if type_ == "integer":
        return int(value) if number else None
    if type_ == "number":
        return float(value) if number else None
    if type_ == "boolean":
        return value if isinstance(value, bool) else None
    if type_ == "string":
        return jsonpath.to_text(value)
    if type_ == "date" and isinstance(value, str):
        if not value:
            return "<unknown>"
        when = parse_time(value)
        return human_duration(now - when) if when else "<invalid>"
    return None


def _column_cell(column: Mapping[str, Any], obj: Obj, now: datetime) -> Cell:
    try:
        found = jsonpath.evaluate(str(column.get("jsonPath", "")), obj)
    except jsonpath.JsonPathError:
        return None
    # Only the first match is shown: CRD columns are meant to be simple paths.
    return _json_cell(str(column.get("type", "string")), found[0], now) if found else None


def _custom_printer(columns: Sequence[Mapping[str, Any]]) -> _Printer:
    columns = list(columns) or [_CR_AGE]
    definitions = [NAME]
    for col in columns:
        description = col.get("description") or (
            f"Custom resource definition column (in JSONPath format): {col.get('jsonPath', '')}"
        )
        if col is _CR_AGE:
            description = AGE_DESCRIPTION
        definitions.append(
            Column(
                name=str(col.get("name", "")),
                type=str(col.get("type", "string")),
                format=str(col.get("format", "")),
                description=str(description),
                priority=_int(col.get("priority")),
            )
        )

    def cells(obj: Obj, now: datetime) -> list[Cell]:
        return [_name(obj), *(_column_cell(col, obj, now) for col in columns)]

    return _Printer(tuple(definitions), cells)


_DEFAULT = _custom_printer([])


def _printer_for(group: str, kind: str, columns: Sequence[Mapping[str, Any]] | None) -> _Printer:
    if columns is not None:
        return _custom_printer(columns)
    return _PRINTERS.get((group, kind), _DEFAULT)


# ---------------------------------------------------------------------------------------------
# The Table


def _row_object(obj: Obj, include_object: str) -> dict[str, Any] | None:
    if include_object == "None":
        return None
    if include_object == "Object":
        return dict(obj)
    metadata = {k: v for k, v in _get(obj, "metadata", {}).items() if k != "managedFields"}
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata}


def make_table(
    *,
    group: str,
    kind: str,
    objects: Sequence[Mapping[str, Any]],
    printer_columns: Sequence[Mapping[str, Any]] | None = None,
    include_object: str = "Metadata",
    resource_version: str = "",
    continue_token: str = "",
    remaining: int | None = None,
    with_headers: bool = True,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Render `objects` as a Table.

    `printer_columns` (a CRD version's additionalPrinterColumns, possibly empty) selects the
    custom-resource layout; None uses the built-in printer for (group, kind), or NAME/AGE.
    `include_object` is the request's includeObject: None, Metadata (default) or Object.
    """
    include_object = include_object or "Metadata"
    if include_object not in ("None", "Metadata", "Object"):
        raise ValueError(
            f'Unsupported value: "{include_object}": supported values: "Metadata", "None", "Object"'
        )
    now = now or datetime.now(UTC)
    printer = _printer_for(group, kind, printer_columns)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": printer.cells(obj, now)}
        if printer.conditions and (conditions := printer.conditions(obj)):
            row["conditions"] = conditions
        if (shown := _row_object(obj, include_object)) is not None:
            row["object"] = shown
        rows.append(row)
    metadata: dict[str, Any] = {}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    if continue_token:
        metadata["continue"] = continue_token
    if remaining is not None:
        metadata["remainingItemCount"] = remaining
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": [c.to_dict() for c in printer.columns] if with_headers else [],
        "rows": rows,
    }
