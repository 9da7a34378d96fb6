"""Bridge to Kubernetes' VS Code task (`.vscode/tasks.json`) read as `tether intercept` options.

The B2K extension stores one task per debug target:

    {"label": "bridge-to-kubernetes.resource", "type": "bridge-to-kubernetes.resource",
     "resource": "stats-api", "resourceType": "service", "ports": [3001],
     "targetCluster": "dev", "targetNamespace": "todo-app",
     "useKubernetesServiceEnvironmentVariables": false, "isolateAs": "naison-e4be"}

`resource`/`resourceType` become TARGET, the first of `ports` the local port, `targetCluster`
the kubeconfig context, `targetNamespace` the namespace, `isolateAs` the route-as name (absent:
`--all`, as B2K then takes all traffic; the command line can still say `--route-as`).
tasks.json is JSON with comments and trailing commas (VS Code's dialect); both are accepted.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TASK_TYPE = "bridge-to-kubernetes.resource"
_TOKENS = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/', re.S)
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


class TaskError(ValueError):
    pass


@dataclass(frozen=True)
class Task:
    target: str
    port: str
    namespace: str | None
    context: str | None
    isolate_as: str | None
    use_service_env: bool


def strip_jsonc(text: str) -> str:
    """Comments removed (strings kept whole), then trailing commas."""
    without = _TOKENS.sub(lambda m: m.group(0) if m.group(0).startswith('"') else "", text)
    parts = re.split(r'("(?:\\.|[^"\\])*")', without)
    return "".join(part if i % 2 else _TRAILING_COMMA.sub(r"\1", part) for i, part in enumerate(parts))


def parse(text: str, label: str | None, *, source: str = "tasks.json") -> Task:
    try:
        document = json.loads(strip_jsonc(text))
    except json.JSONDecodeError as exc:
        raise TaskError(f"{source}: not JSON: {exc}") from None
    tasks = [t for t in (document.get("tasks") if isinstance(document, dict) else None) or []
             if isinstance(t, dict) and t.get("type") == TASK_TYPE]
    if label is not None:
        tasks = [t for t in tasks if t.get("label") == label]
    if not tasks:
        raise TaskError(f"{source}: no task of type {TASK_TYPE}" + (f" labelled {label!r}" if label else ""))
    if len(tasks) > 1:
        labels = ", ".join(repr(t.get("label")) for t in tasks)
        raise TaskError(f"{source}: several Bridge to Kubernetes tasks ({labels}): pick one with FILE:LABEL")
    return _task(tasks[0], source)


def _task(task: dict[str, Any], source: str) -> Task:
    resource = task.get("resource")
    if not isinstance(resource, str) or not resource:
        raise TaskError(f"{source}: the task has no 'resource'")
    kind = str(task.get("resourceType", "service")).lower()
    prefixes = {"service": "svc/", "deployment": "deploy/", "statefulset": "sts/"}
    if kind not in prefixes:
        raise TaskError(f"{source}: resourceType {kind!r} cannot be intercepted: use service, deployment "
                        "or statefulset")
    ports = task.get("ports") or []
    if not isinstance(ports, list) or not ports or not all(isinstance(p, int) for p in ports):
        raise TaskError(f"{source}: 'ports' must list the local port(s), as in [3001]")
    isolate = task.get("isolateAs")
    return Task(prefixes[kind] + resource, str(ports[0]),
                str(task["targetNamespace"]) if task.get("targetNamespace") else None,
                str(task["targetCluster"]) if task.get("targetCluster") else None,
                str(isolate) if isolate else None,
                bool(task.get("useKubernetesServiceEnvironmentVariables", False)))


def load(spec: str) -> Task:
    """`FILE` or `FILE:LABEL`."""
    path_text, label = spec, None
    if not Path(spec).exists() and ":" in spec:
        path_text, _, label = spec.rpartition(":")
    try:
        text = Path(path_text).read_text()
    except OSError as exc:
        raise TaskError(f"cannot read {path_text}: {exc.strerror}") from None
    return parse(text, label, source=path_text)
