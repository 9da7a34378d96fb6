"""`tether get` / `tether describe` across member clusters (karmadactl's `get -C`, `describe`).

Members are the hub's `Cluster` objects; each is reached with the token its hub Secret holds
(`ClusterCredentials.from_secret_data`, at `spec.apiEndpoint`). Every member is queried in
parallel with a short deadline and no retries, so one unreachable member costs one timeout and
is reported (`ClusterResult.error`) instead of failing the command. The type is resolved in each
member's own discovery: a CRD type may exist in some members only.

Rows carry a CLUSTER column first, then NAME (NAMESPACE with all namespaces) and kind-appropriate
columns in kubectl's style. `-o yaml|json` prints a `List` whose items carry the annotation
`tether.io/cluster` naming the member they come from.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from tether.federation.crds import CLUSTER_API_VERSION
from tether.federation.health import HUB_NAMESPACE, proxy_headers
from tether.federation.typeconfig import (
    ApiType,
    FederationTypeError,
    discover_types,
    match_type,
    to_yaml,
)
from tether.kube import ClusterCredentials, KubeClient, KubeError, NotFound, RetryPolicy
from tether.objects import Obj

CLUSTER_ANNOTATION = "tether.io/cluster"
MEMBER_TIMEOUT_S = 5.0


class MultiGetError(Exception):
    """The query cannot run at all (no hub, unknown cluster names...)."""


@dataclass
class Members:
    """Clients for the selected members, and the members that could not get one."""

    clients: dict[str, KubeClient] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    stack: AsyncExitStack = field(default_factory=AsyncExitStack)

    @property
    def names(self) -> list[str]:
        return sorted({*self.clients, *self.errors})

    async def aclose(self) -> None:
        await self.stack.aclose()


def _client_for(cluster: Mapping[str, Any], secret: Mapping[str, Any], timeout_s: float) -> KubeClient:
    spec = cluster.get("spec") or {}
    data = secret.get("data") or {}
    credentials = ClusterCredentials.from_secret_data(
        data, server=str(spec.get("apiEndpoint", "")),
        name=str(cluster["metadata"]["name"]),
        insecure=bool(spec.get("insecureSkipTLSVerification")),
        proxy_url=spec.get("proxyURL") or None,
        proxy_headers=proxy_headers(spec, data))
    return KubeClient(credentials, retry=RetryPolicy(attempts=1), timeout_s=timeout_s)


async def member_clients(host: KubeClient, only: Sequence[str] = (), *,
                         timeout_s: float = MEMBER_TIMEOUT_S) -> Members:
    """Clients for the joined members (all, or those named in `only`, which must be joined)."""
    try:
        clusters = await host.list_objects(CLUSTER_API_VERSION, "Cluster")
    except NotFound:
        raise MultiGetError("the hub has no Cluster type: run `tether hub install` and "
                            "`tether join` first") from None
    by_name = {str(c["metadata"]["name"]): c for c in clusters}
    wanted = list(dict.fromkeys(only)) or sorted(by_name)
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        known = ", ".join(sorted(by_name)) or "none"
        raise MultiGetError(f"cluster(s) not joined: {', '.join(unknown)} (joined: {known}; "
                            "see `tether clusters`)")
    members = Members()
    for name in wanted:
        cluster = by_name[name]
        spec = cluster.get("spec") or {}
        if spec.get("syncMode") == "Pull":
            members.errors[name] = "pull-mode cluster: the hub has no credentials to reach it"
            continue
        ref = spec.get("secretRef") or {}
        try:
            secret = await host.get("v1", "Secret", str(ref.get("name", name)),
                                    str(ref.get("namespace", HUB_NAMESPACE)))
        except NotFound:
            members.errors[name] = (f"its credentials Secret {ref.get('namespace', HUB_NAMESPACE)}/"
                                    f"{ref.get('name', name)} is missing on the hub (join it again)")
            continue
        if not (secret.get("data") or {}).get("token"):
            members.errors[name] = "its credentials Secret has no token (join it again)"
            continue
        client = _client_for(cluster, secret, timeout_s)
        members.stack.push_async_callback(client.close)
        members.clients[name] = client
    return members


# get -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterResult:
    cluster: str
    target: ApiType | None = None
    objects: tuple[Obj, ...] = ()
    error: str = ""
    unreachable: bool = False
    not_found: bool = False


def _describe_error(exc: KubeError) -> tuple[str, bool]:
    if exc.code == 0:
        return f"unreachable: {exc.message}", True
    return exc.message or str(exc), False


async def _query(cluster: str, client: KubeClient, type_name: str,
                 run: Callable[[KubeClient, ApiType], Any], timeout_s: float) -> ClusterResult:
    try:
        async with asyncio.timeout(timeout_s):
            target = match_type(type_name, await discover_types(client))
            objects = await run(client, target)
    except TimeoutError:
        return ClusterResult(cluster, error=f"unreachable: no answer within {timeout_s:.0f}s",
                             unreachable=True)
    except FederationTypeError as exc:
        return ClusterResult(cluster, error=str(exc))
    except KubeError as exc:
        message, unreachable = _describe_error(exc)
        return ClusterResult(cluster, error=message, unreachable=unreachable,
                             not_found=exc.code == 404)
    return ClusterResult(cluster, target, tuple(objects))


async def get_across(members: Members, type_name: str, name: str = "", *, namespace: str = "default",
                     all_namespaces: bool = False, label_selector: str = "",
                     timeout_s: float = MEMBER_TIMEOUT_S) -> list[ClusterResult]:
    """One result per member: the matching objects, or why there are none."""

    async def run(client: KubeClient, target: ApiType) -> list[Obj]:
        ns = None if (all_namespaces or not target.namespaced) else namespace
        if name:
            obj = await client.get(target.api_version, target.kind, name, ns)
            obj.setdefault("apiVersion", target.api_version)
            obj.setdefault("kind", target.kind)
            return [obj]
        return await client.list_objects(target.api_version, target.kind, ns, label_selector)

    results = await asyncio.gather(*(_query(c, client, type_name, run, timeout_s)
                                     for c, client in members.clients.items()))
    failed = [ClusterResult(c, error=f"unreachable: {e}", unreachable=True) for c, e in members.errors.items()]
    return sorted([*results, *failed], key=lambda r: r.cluster)


# columns ---------------------------------------------------------------------------------------


def age(stamp: Any, now: dt.datetime) -> str:
    """kubectl's HumanDuration of now - stamp."""
    if not isinstance(stamp, str) or not stamp:
        return "<unknown>"
    try:
        then = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    seconds = int((now - then).total_seconds())
    if seconds < -1:
        return "<invalid>"
    seconds = max(seconds, 0)
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y"


def _get(obj: Mapping[str, Any], *path: str) -> Any:
    cur: Any = obj
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def _num(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _containers(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = _get(obj, "spec", "template", "spec") or _get(obj, "spec", "jobTemplate", "spec", "template", "spec")
    return [c for c in (spec or {}).get("containers") or [] if isinstance(c, Mapping)]


def _selector(obj: Mapping[str, Any]) -> str:
    labels = _get(obj, "spec", "selector", "matchLabels") or _get(obj, "spec", "selector") or {}
    if not isinstance(labels, Mapping):
        return "<none>"
    return ",".join(f"{k}={v}" for k, v in labels.items() if isinstance(v, str)) or "<none>"


def _ports(obj: Mapping[str, Any]) -> str:
    out = []
    for port in _get(obj, "spec", "ports") or []:
        text = str(port.get("port", ""))
        if port.get("nodePort"):
            text += f":{port['nodePort']}"
        out.append(f"{text}/{port.get('protocol', 'TCP')}")
    return ",".join(out) or "<none>"


def _external_ip(obj: Mapping[str, Any]) -> str:
    ingress = _get(obj, "status", "loadBalancer", "ingress") or []
    ips = [str(i.get("ip") or i.get("hostname")) for i in ingress if isinstance(i, Mapping)]
    ips += [str(i) for i in _get(obj, "spec", "externalIPs") or []]
    if ips:
        return ",".join(ips)
    return "<pending>" if _get(obj, "spec", "type") == "LoadBalancer" else "<none>"


def _pod_ready(obj: Mapping[str, Any]) -> str:
    statuses = _get(obj, "status", "containerStatuses") or []
    total = len(_get(obj, "spec", "containers") or [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pod_status(obj: Mapping[str, Any]) -> str:
    if _get(obj, "metadata", "deletionTimestamp"):
        return "Terminating"
    for status in _get(obj, "status", "containerStatuses") or []:
        waiting = _get(status, "state", "waiting", "reason")
        if waiting:
            return str(waiting)
    return str(_get(obj, "status", "reason") or _get(obj, "status", "phase") or "Unknown")


Column = tuple[str, Callable[[Mapping[str, Any]], str]]

_COLUMNS: dict[str, list[Column]] = {
    "Deployment": [
        ("READY", lambda o: f"{_num(_get(o, 'status', 'readyReplicas'))}/{_num(_get(o, 'spec', 'replicas'))}"),
        ("UP-TO-DATE", lambda o: str(_num(_get(o, "status", "updatedReplicas")))),
        ("AVAILABLE", lambda o: str(_num(_get(o, "status", "availableReplicas")))),
    ],
    "StatefulSet": [
        ("READY", lambda o: f"{_num(_get(o, 'status', 'readyReplicas'))}/{_num(_get(o, 'spec', 'replicas'))}"),
    ],
    "ReplicaSet": [
        ("DESIRED", lambda o: str(_num(_get(o, "spec", "replicas")))),
        ("CURRENT", lambda o: str(_num(_get(o, "status", "replicas")))),
        ("READY", lambda o: str(_num(_get(o, "status", "readyReplicas")))),
    ],
    "DaemonSet": [
        ("DESIRED", lambda o: str(_num(_get(o, "status", "desiredNumberScheduled")))),
        ("CURRENT", lambda o: str(_num(_get(o, "status", "currentNumberScheduled")))),
        ("READY", lambda o: str(_num(_get(o, "status", "numberReady")))),
        ("UP-TO-DATE", lambda o: str(_num(_get(o, "status", "updatedNumberScheduled")))),
        ("AVAILABLE", lambda o: str(_num(_get(o, "status", "numberAvailable")))),
    ],
    "Job": [
        ("COMPLETIONS", lambda o: f"{_num(_get(o, 'status', 'succeeded'))}/{_get(o, 'spec', 'completions') or 1}"),
    ],
    "Pod": [
        ("READY", _pod_ready),
        ("STATUS", _pod_status),
        ("RESTARTS", lambda o: str(sum(_num(s.get("restartCount"))
                                       for s in _get(o, "status", "containerStatuses") or []))),
    ],
    "Service": [
        ("TYPE", lambda o: str(_get(o, "spec", "type") or "ClusterIP")),
        ("CLUSTER-IP", lambda o: str(_get(o, "spec", "clusterIP") or "<none>")),
        ("EXTERNAL-IP", _external_ip),
        ("PORT(S)", _ports),
    ],
    "ConfigMap": [("DATA", lambda o: str(len(o.get("data") or {}) + len(o.get("binaryData") or {})))],
    "Secret": [("TYPE", lambda o: str(o.get("type") or "Opaque")),
               ("DATA", lambda o: str(len(o.get("data") or {})))],
    "Namespace": [("STATUS", lambda o: str(_get(o, "status", "phase") or "Active"))],
    "Node": [
        ("STATUS", lambda o: next((("Ready" if c.get("status") == "True" else "NotReady")
                                   for c in _get(o, "status", "conditions") or [] if c.get("type") == "Ready"),
                                  "Unknown")),
        ("VERSION", lambda o: str(_get(o, "status", "nodeInfo", "kubeletVersion") or "")),
    ],
}

_WIDE: dict[str, list[Column]] = {
    "Deployment": [
        ("CONTAINERS", lambda o: ",".join(str(c.get("name")) for c in _containers(o)) or "<none>"),
        ("IMAGES", lambda o: ",".join(str(c.get("image")) for c in _containers(o)) or "<none>"),
        ("SELECTOR", _selector),
    ],
    "Pod": [
        ("IP", lambda o: str(_get(o, "status", "podIP") or "<none>")),
        ("NODE", lambda o: str(_get(o, "spec", "nodeName") or "<none>")),
    ],
    "Service": [("SELECTOR", _selector)],
}
for _kind in ("StatefulSet", "ReplicaSet", "DaemonSet", "Job"):
    _WIDE[_kind] = _WIDE["Deployment"]


def table(results: Sequence[ClusterResult], *, all_namespaces: bool = False, wide: bool = False,
          now: dt.datetime | None = None) -> list[list[str]]:
    """Header row then one row per object: CLUSTER, [NAMESPACE,] NAME, kind columns, AGE."""
    now = now or dt.datetime.now(dt.UTC)
    kinds = {r.target.kind for r in results if r.target is not None and r.objects}
    kind = kinds.pop() if len(kinds) == 1 else ""
    columns = [*_COLUMNS.get(kind, []), ("AGE", lambda o: age(_get(o, "metadata", "creationTimestamp"), now))]
    if wide:
        columns += _WIDE.get(kind, [])
    header = ["CLUSTER"] + (["NAMESPACE"] if all_namespaces else []) + ["NAME"] + [c[0] for c in columns]
    rows = [header]
    for result in results:
        ordered = sorted(result.objects, key=lambda o: (str(_get(o, "metadata", "namespace") or ""),
                                                        str(_get(o, "metadata", "name"))))
        for obj in ordered:
            row = [result.cluster]
            if all_namespaces:
                row.append(str(_get(obj, "metadata", "namespace") or ""))
            row.append(str(_get(obj, "metadata", "name")))
            row += [fn(obj) for _, fn in columns]
            rows.append(row)
    return rows


def format_rows(rows: Sequence[Sequence[str]]) -> str:
    """kubectl's plain table: columns padded, three spaces apart."""
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in rows)


def footer(results: Sequence[ClusterResult]) -> list[str]:
    """One line per member that gave no answer or an error."""
    return [f"{r.cluster}: {r.error}" for r in results if r.error]


def as_list(results: Sequence[ClusterResult]) -> Obj:
    items = []
    for result in results:
        for obj in result.objects:
            item = json.loads(json.dumps(obj))
            item.setdefault("metadata", {}).setdefault("annotations", {})[CLUSTER_ANNOTATION] = result.cluster
            items.append(item)
    return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}


def render(results: Sequence[ClusterResult], output: str, *, all_namespaces: bool = False) -> str:
    if output == "json":
        return json.dumps(as_list(results), indent=4)
    if output == "yaml":
        return to_yaml([as_list(results)]).removeprefix("---\n")
    return format_rows(table(results, all_namespaces=all_namespaces, wide=output == "wide"))


# describe --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Described:
    cluster: str
    obj: Obj | None = None
    events: tuple[Obj, ...] = ()
    error: str = ""
    unreachable: bool = False


async def describe_across(members: Members, type_name: str, name: str, *, namespace: str = "default",
                          timeout_s: float = MEMBER_TIMEOUT_S) -> list[Described]:
    """The object and its Events (newest last) in each member."""

    async def one(cluster: str, client: KubeClient) -> Described:
        try:
            async with asyncio.timeout(timeout_s):
                target = match_type(type_name, await discover_types(client))
                ns = namespace if target.namespaced else None
                obj = await client.get(target.api_version, target.kind, name, ns)
                obj.setdefault("apiVersion", target.api_version)
                obj.setdefault("kind", target.kind)
                selector = f"involvedObject.name={name},involvedObject.kind={target.kind}"
                try:
                    events = await client.list_objects("v1", "Event", ns or "default",
                                                       field_selector=selector)
                except KubeError:
                    events = []
        except TimeoutError:
            return Described(cluster, error=f"unreachable: no answer within {timeout_s:.0f}s", unreachable=True)
        except FederationTypeError as exc:
            return Described(cluster, error=str(exc))
        except KubeError as exc:
            message, unreachable = _describe_error(exc)
            return Described(cluster, error=message, unreachable=unreachable)
        uid = _get(obj, "metadata", "uid")
        mine = [e for e in events if _get(e, "involvedObject", "uid") in (None, "", uid)]
        mine.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime")
                                    or _get(e, "metadata", "creationTimestamp") or ""))
        return Described(cluster, obj, tuple(mine[-20:]))

    results = await asyncio.gather(*(one(c, client) for c, client in members.clients.items()))
    failed = [Described(c, error=f"unreachable: {e}", unreachable=True) for c, e in members.errors.items()]
    return sorted([*results, *failed], key=lambda d: d.cluster)


def _kv(key: str, value: Any, indent: int = 0) -> str:
    return f"{' ' * indent}{key + ':':<20}{value}"


def _labels_text(value: Any) -> str:
    if not isinstance(value, Mapping) or not value:
        return "<none>"
    return ", ".join(f"{k}={v}" for k, v in sorted(value.items()))


def describe_text(described: Described, now: dt.datetime | None = None) -> str:
    """kubectl-describe-like text for one member's object."""
    now = now or dt.datetime.now(dt.UTC)
    lines = [f"Cluster:            {described.cluster}"]
    if described.obj is None:
        lines.append(f"Error:              {described.error}")
        return "\n".join(lines)
    obj = described.obj
    meta = obj.get("metadata") or {}
    lines += [
        _kv("Name", meta.get("name")),
        *([_kv("Namespace", meta.get("namespace"))] if meta.get("namespace") else []),
        _kv("Kind", f"{obj.get('kind')} ({obj.get('apiVersion')})"),
        _kv("Created", f"{meta.get('creationTimestamp')} ({age(meta.get('creationTimestamp'), now)} ago)"),
        _kv("Labels", _labels_text(meta.get("labels"))),
        _kv("Annotations", _labels_text({k: v for k, v in (meta.get("annotations") or {}).items()
                                         if k != "kubectl.kubernetes.io/last-applied-configuration"})),
    ]
    spec = obj.get("spec") or {}
    kind = str(obj.get("kind"))
    if "replicas" in spec:
        status = obj.get("status") or {}
        lines.append(_kv("Replicas", f"{spec.get('replicas')} desired | {_num(status.get('updatedReplicas'))} "
                                     f"updated | {_num(status.get('replicas'))} total | "
                                     f"{_num(status.get('readyReplicas'))} ready | "
                                     f"{_num(status.get('availableReplicas'))} available"))
    if isinstance(spec, Mapping) and spec.get("selector") is not None and kind != "Service":
        lines.append(_kv("Selector", _selector(obj)))
    containers = _containers(obj) or [c for c in spec.get("containers") or [] if isinstance(c, Mapping)]
    if containers:
        lines.append("Containers:")
        for container in containers:
            lines.append(f"  {container.get('name')}:")
            lines.append(_kv("Image", container.get("image"), 4))
            ports = ",".join(f"{p.get('containerPort')}/{p.get('protocol', 'TCP')}"
                             for p in container.get("ports") or [])
            if ports:
                lines.append(_kv("Ports", ports, 4))
    if kind == "Service":
        lines += [_kv("Type", spec.get("type", "ClusterIP")), _kv("Cluster IP", spec.get("clusterIP", "<none>")),
                  _kv("Ports", _ports(obj)), _kv("Selector", _selector(obj))]
    if kind in ("ConfigMap", "Secret"):
        lines.append(_kv("Data", ", ".join(sorted((obj.get("data") or {}).keys())) or "<none>"))
    status = obj.get("status") or {}
    conditions = status.get("conditions") or [] if isinstance(status, Mapping) else []
    if isinstance(status, Mapping) and status.get("phase"):
        lines.append(_kv("Status", status["phase"]))
    if conditions:
        lines.append("Conditions:")
        rows = [["Type", "Status", "Reason", "Message"]]
        rows += [[str(c.get("type", "")), str(c.get("status", "")), str(c.get("reason", "")),
                  str(c.get("message", ""))] for c in conditions]
        lines += ["  " + line for line in format_rows(rows).splitlines()]
    if described.events:
        lines.append("Events:")
        rows = [["Type", "Reason", "Age", "From", "Message"]]
        for event in described.events:
            stamp = event.get("lastTimestamp") or event.get("eventTime") or _get(event, "metadata", "creationTimestamp")
            count = _num(event.get("count"))
            when = age(stamp, now) + (f" (x{count})" if count > 1 else "")
            source = _get(event, "source", "component") or event.get("reportingComponent") or ""
            rows.append([str(event.get("type", "")), str(event.get("reason", "")), when, str(source),
                         str(event.get("message", "")).strip()])
        lines += ["  " + line for line in format_rows(rows).splitlines()]
    else:
        lines.append(_kv("Events", "<none>"))
    return "\n".join(lines)


__all__ = [
    "CLUSTER_ANNOTATION",
    "ClusterResult",
    "Described",
    "Members",
    "MultiGetError",
    "age",
    "describe_across",
    "describe_text",
    "footer",
    "format_rows",
    "get_across",
    "member_clients",
    "render",
    "table",
]
