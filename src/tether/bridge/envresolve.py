"""A container's declared environment resolved the way the kubelet resolves it, without I/O.

The kubelet's rules (docs/bridge.md has them in full):

- Service links come first and lose to everything the container declares: `<SVC>_SERVICE_HOST`,
  `<SVC>_SERVICE_PORT[_<PORTNAME>]` and the docker-link `<SVC>_PORT[_<n>_<PROTO>[_PROTO|_PORT|
  _ADDR]]` for each Service with a cluster IP in the pod's namespace (when `enableServiceLinks`
  is not false), and always for `kubernetes` in `default` (a Service of that name in the pod's
  own namespace wins).
- `envFrom` sources in order, later ones overriding earlier ones; keys that are not valid
  variable names (after the prefix) are skipped, as the kubelet does (it records an event).
- `env` in order, overriding the above. A `value` has `$(VAR)` expanded against what is
  resolved so far, then the Service links; `$$` is a literal `$`; a reference to an unknown
  variable stays as written.

Secrets are looked up by name in mappings the caller fetched (`references` says which). A
missing source that is not optional is the kubelet's CreateContainerConfigError: `ResolveError`.
Values the client cannot know (the pod IP of a workload without a running pod, node allocatable
when no limit is set) are `Unresolved`, named with the reason, not guessed.

`ServiceAddress` is the hook for `connect`: a Service's link variables then carry a local
address and port instead of the cluster IP and Service port.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from tether.bridge import quantity
from tether.objects import ObjView as Obj

# Kubernetes 1.30+ (RelaxedEnvironmentVariableValidation, GA in 1.34): any printable ASCII but '='.
_ENV_NAME = re.compile(r"[\x20-\x3c\x3e-\x7e]+")
_NODE_ONLY_FIELDS = ("spec.nodeName", "status.hostIP", "status.hostIPs")
_POD_STATUS_FIELDS = ("status.podIP", "status.podIPs")
_RESOURCES = ("cpu", "memory", "ephemeral-storage")


class ResolveError(Exception):
    """The container could not start with this environment (the kubelet's CreateContainerConfigError)."""


@dataclass(frozen=True)
class Source:
    """Where a variable's value came from, for `--explain`."""

    kind: str  # value | configMapKeyRef | secretKeyRef | envFrom.configMap | envFrom.secret |
    #            fieldRef | resourceFieldRef | serviceLink | config
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.detail}".strip()


@dataclass(frozen=True)
class Variable:
    name: str
    value: str
    source: Source
    secret: bool = False  # the value came (in part) from a Secret: redact when printed


@dataclass(frozen=True)
class Unresolved:
    name: str
    reason: str


@dataclass(frozen=True)
class Environment:
    """The resolved variables in the kubelet's order (declared first, then remaining links)."""

    variables: tuple[Variable, ...]
    unresolved: tuple[Unresolved, ...] = ()
    warnings: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, str]:
        return {v.name: v.value for v in self.variables}

    def get(self, name: str) -> Variable | None:
        for variable in self.variables:
            if variable.name == name:
                return variable
        return None

    def with_variables(self, extra: Iterable[Variable]) -> Environment:
        """This environment with `extra` added or replacing same-named variables, in place."""
        merged = {v.name: v for v in self.variables}
        for variable in extra:
            merged[variable.name] = variable
        return Environment(tuple(merged.values()), self.unresolved, self.warnings)


@dataclass(frozen=True)
class ServiceAddress:
    """Where `connect` made a Service reachable locally: `ports` maps Service port -> local port."""

    namespace: str
    name: str
    host: str
    ports: Mapping[int, int] = field(default_factory=dict)

    def port(self, port: int) -> int:
        return self.ports.get(port, port)


@dataclass(frozen=True)
class PodFacts:
    """The pod (or, without a running pod, the workload's template) the container belongs to.

    `pod` has `metadata`, `spec` and, for a real pod, `status`; `running` says which it is.
    """

    pod: Obj
    running: bool
    node_allocatable: Mapping[str, str] | None = None


@dataclass(frozen=True)
class References:
    """The ConfigMaps and Secrets (by name, in the pod's namespace) a container's env needs."""

    configmaps: frozenset[str]
    secrets: frozenset[str]


# expansion ------------------------------------------------------------------------------------


def expand(value: str, *contexts: Mapping[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: the name is everything up to the first `)`; `$$` is `$`;
    `$(` without a `)` and `$x` stay as written; unknown names stay as `$(NAME)`."""
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(value):
        if value[cursor] == "$" and cursor + 1 < len(value):
            out.append(value[checkpoint:cursor])
            following = value[cursor + 1]
            advance = 1
            if following == "$":
                out.append("$")
            elif following == "(":
                closer = value.find(")", cursor + 2)
                if closer < 0:
                    out.append("$(")
                else:
                    name = value[cursor + 2:closer]
                    out.append(_lookup(name, contexts))
                    advance = closer - cursor
            else:
                out.append("$" + following)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out.append(value[checkpoint:])
    return "".join(out)


def _lookup(name: str, contexts: Sequence[Mapping[str, str]]) -> str:
    for context in contexts:
        if name in context:
            return context[name]
    return f"$({name})"


def _referenced(value: str, contexts: Sequence[Mapping[str, Any]]) -> set[str]:
    """Names `value` references that one of `contexts` defines (to carry secrecy along)."""
    found: set[str] = set()
    for match in re.finditer(r"\$\$|\$\(([^)]*)\)", value):
        name = match.group(1)
        if name is not None and any(name in c for c in contexts):
            found.add(name)
    return found


def is_env_name(name: str) -> bool:
    return bool(_ENV_NAME.fullmatch(name))


# service links --------------------------------------------------------------------------------


def _env_name(name: str) -> str:
    return name.upper().replace("-", "_")


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _has_cluster_ip(svc: Obj) -> bool:
    ip = (svc.get("spec") or {}).get("clusterIP")
    return bool(ip) and ip != "None"


def linked_services(services: Iterable[Obj], namespace: str, enable: bool) -> list[Obj]:
    """The Services whose link variables a pod in `namespace` gets, as the kubelet picks them."""
    chosen: dict[str, Obj] = {}
    for svc in services:
        if not _has_cluster_ip(svc):
            continue
        meta = svc.get("metadata") or {}
        name = str(meta.get("name", ""))
        if meta.get("namespace") == "default" and name == "kubernetes":
            chosen.setdefault(name, svc)
        elif meta.get("namespace") == namespace and enable:
            chosen[name] = svc
    return sorted(chosen.values(), key=lambda s: str(s["metadata"]["name"]))


def service_link_variables(svc: Obj, address: ServiceAddress | None = None) -> list[Variable]:
    """One Service's link variables; with `address`, pointing at the local mapping instead."""
    meta, spec = svc.get("metadata") or {}, svc.get("spec") or {}
    name = str(meta.get("name", ""))
    ports: list[Obj] = list(spec.get("ports") or [])
    if not ports:
        return []
    host = address.host if address else str(spec.get("clusterIP"))

    def port_of(port: Obj) -> int:
        number = int(port.get("port", 0))
        return address.port(number) if address else number

    where = f"{meta.get('namespace', '')}/{name}"
    detail = f"Service {where}" + (f" (local {address.host})" if address else "")
    source = Source("serviceLink", detail)
    prefix = _env_name(name)
    out: list[tuple[str, str]] = [(f"{prefix}_SERVICE_HOST", host),
                                  (f"{prefix}_SERVICE_PORT", str(port_of(ports[0])))]
    for port in ports:
        if port.get("name"):
            out.append((f"{prefix}_SERVICE_PORT_{_env_name(str(port['name']))}", str(port_of(port))))
    for index, port in enumerate(ports):
        protocol = str(port.get("protocol") or "TCP")
        url = f"{protocol.lower()}://{_host_port(host, port_of(port))}"
        if index == 0:
            out.append((f"{prefix}_PORT", url))
        # The name keeps the Service's port: that is what the program looks up.
        base = f"{prefix}_PORT_{int(port.get('port', 0))}_{protocol.upper()}"
        out += [(base, url), (f"{base}_PROTO", protocol.lower()), (f"{base}_PORT", str(port_of(port))),
                (f"{base}_ADDR", host)]
    return [Variable(n, v, source) for n, v in out]


def service_environment(services: Iterable[Obj], namespace: str, *, enable: bool,
                        addresses: Mapping[tuple[str, str], ServiceAddress] | None = None
                        ) -> dict[str, Variable]:
    found: dict[str, Variable] = {}
    for svc in linked_services(services, namespace, enable):
        meta = svc.get("metadata") or {}
        address = (addresses or {}).get((str(meta.get("namespace", "")), str(meta.get("name", ""))))
        for variable in service_link_variables(svc, address):
            found[variable.name] = variable
    return found


# downward API ---------------------------------------------------------------------------------


def go_quote(text: str) -> str:
    """Go's `%q` for the strings labels and annotations hold (json's escapes match for them)."""
    return json.dumps(text, ensure_ascii=False)


def format_map(values: Mapping[str, Any]) -> str:
    """The downward API's rendering of all labels or annotations: `key="value"` lines, sorted."""
    return "\n".join(f"{k}={go_quote(str(values[k]))}" for k in sorted(values))


class Unknowable(Exception):
    """A value only the running pod (or its node) has."""


def field_ref(facts: PodFacts, path: str, *, whole_maps: bool = False) -> str:
    """A `fieldRef` value. Env accepts `metadata.labels['k']`-style subscripts; downwardAPI
    volumes also the whole `metadata.labels` / `metadata.annotations`."""
    meta = facts.pod.get("metadata") or {}
    spec = facts.pod.get("spec") or {}
    status = facts.pod.get("status") or {}
    subscript = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
    if subscript:
        return str((meta.get(subscript.group(1)) or {}).get(subscript.group(2), ""))
    if whole_maps and path in ("metadata.labels", "metadata.annotations"):
        return format_map(meta.get(path.split(".", 1)[1]) or {})
    if path in ("metadata.name", "metadata.namespace", "metadata.uid"):
        if not facts.running and path != "metadata.namespace":
            raise Unknowable(f"{path} is the pod's: no pod is running")
        return str(meta.get(path.split(".", 1)[1]) or "")
    if path == "spec.serviceAccountName":
        return str(spec.get("serviceAccountName") or "default")
    if path in _NODE_ONLY_FIELDS or path in _POD_STATUS_FIELDS:
        if not facts.running:
            raise Unknowable(f"{path} is known only for a running pod")
        if path == "spec.nodeName":
            return str(spec.get("nodeName") or "")
        if path == "status.hostIP":
            return str(status.get("hostIP") or "")
        if path == "status.hostIPs":
            return ",".join(str(p.get("ip", "")) for p in status.get("hostIPs") or [])
        if path == "status.podIP":
            return str(status.get("podIP") or "")
        return ",".join(str(p.get("ip", "")) for p in status.get("podIPs") or [])
    raise ResolveError(f"unsupported fieldPath: {path}")


def _container_resources(container: Obj, running: bool) -> tuple[dict[str, str], dict[str, str]]:
    resources = container.get("resources") or {}
    limits = {str(k): str(v) for k, v in (resources.get("limits") or {}).items()}
    requests = {str(k): str(v) for k, v in (resources.get("requests") or {}).items()}
    if not running:  # the API server defaults a pod's requests from its limits, not a template's
        for name, value in limits.items():
            requests.setdefault(name, value)
    return limits, requests


def resource_field_ref(facts: PodFacts, container: Obj, ref: Obj) -> str:
    """A `resourceFieldRef` value: the container's request or limit over `divisor`, rounded up.
    A limit not set is the node's allocatable, as the kubelet defaults it."""
    resource = str(ref.get("resource", ""))
    kind, _, name = resource.partition(".")
    if kind not in ("limits", "requests") or not (name in _RESOURCES or name.startswith("hugepages-")):
        raise ResolveError(f"unsupported container resource : {resource}")
    limits, requests = _container_resources(container, facts.running)
    chosen = (limits if kind == "limits" else requests).get(name)
    if chosen is None and kind == "limits" and name in _RESOURCES:
        allocatable = (facts.node_allocatable or {}).get(name)
        if allocatable is None:
            raise Unknowable(f"{resource} is not set; it defaults to the node's allocatable "
                           f"{name}, which is not known here")
        chosen = allocatable
    value = quantity.parse(chosen) if chosen is not None else Fraction(0)
    divisor_text = str(ref.get("divisor") or "")
    divisor = quantity.parse(divisor_text) if divisor_text else Fraction(0)
    if divisor == 0:
        divisor = Fraction(1)
    # Both sides are first rounded up to whole units (millicores for CPU), as Quantity's
    # MilliValue()/Value() do, then divided and rounded up again.
    unit = Fraction(1, 1000) if name == "cpu" else Fraction(1)
    numerator = quantity.scaled_ceiling(value, unit)
    denominator = max(1, quantity.scaled_ceiling(divisor, unit))
    return str(quantity.scaled_ceiling(Fraction(numerator), Fraction(denominator)))


# references and resolution --------------------------------------------------------------------


def references(container: Obj) -> References:
    configmaps: set[str] = set()
    secrets: set[str] = set()
    for source in container.get("envFrom") or []:
        if "configMapRef" in source:
            configmaps.add(str((source["configMapRef"] or {}).get("name", "")))
        if "secretRef" in source:
            secrets.add(str((source["secretRef"] or {}).get("name", "")))
    for var in container.get("env") or []:
        value_from = var.get("valueFrom") or {}
        if "configMapKeyRef" in value_from:
            configmaps.add(str((value_from["configMapKeyRef"] or {}).get("name", "")))
        if "secretKeyRef" in value_from:
            secrets.add(str((value_from["secretKeyRef"] or {}).get("name", "")))
    return References(frozenset(configmaps), frozenset(secrets))


def object_data(obj: Obj, *, secret: bool) -> dict[str, str]:
    """A ConfigMap's `data` or a Secret's decoded `data` (envFrom ignores `binaryData`)."""
    data = obj.get("data") or {}
    if not secret:
        return {str(k): str(v) for k, v in data.items()}
    return {str(k): base64.b64decode(str(v)).decode("utf-8", "replace") for k, v in data.items()}


def find_container(pod_spec: Obj, name: str | None) -> Obj:
    """The named container (init containers too), or the default one as kubectl picks it:
    the `kubectl.kubernetes.io/default-container` annotation is the caller's; else the first."""
    containers = list(pod_spec.get("containers") or [])
    if name is None:
        if not containers:
            raise ResolveError("the pod has no containers")
        first: Obj = containers[0]
        return first
    for container in [*containers, *(pod_spec.get("initContainers") or [])]:
        if container.get("name") == name:
            found: Obj = container
            return found
    names = ", ".join(str(c.get("name")) for c in containers)
    raise ResolveError(f'container "{name}" not found; the pod has: {names}')


def resolve(facts: PodFacts, container: Obj, *,
            configmaps: Mapping[str, Obj], secrets: Mapping[str, Obj],
            services: Iterable[Obj],
            addresses: Mapping[tuple[str, str], ServiceAddress] | None = None) -> Environment:
    """The container's environment. `configmaps`/`secrets` hold the referenced objects that
    exist (by name); `services` what the client could list (pod namespace plus default)."""
    meta, spec = facts.pod.get("metadata") or {}, facts.pod.get("spec") or {}
    namespace = str(meta.get("namespace") or "default")
    links = service_environment(services, namespace, enable=spec.get("enableServiceLinks") is not False,
                                addresses=addresses)
    link_values = {name: v.value for name, v in links.items()}
    declared: dict[str, Variable] = {}
    unresolved: list[Unresolved] = []
    warnings: list[str] = []

    for source in container.get("envFrom") or []:
        is_secret = "secretRef" in source
        ref = (source.get("secretRef") if is_secret else source.get("configMapRef")) or {}
        kind = "Secret" if is_secret else "ConfigMap"
        name = str(ref.get("name", ""))
        obj = (secrets if is_secret else configmaps).get(name)
        if obj is None:
            if ref.get("optional"):
                continue
            raise ResolveError(f'{kind.lower()} "{name}" not found')
        prefix = str(source.get("prefix") or "")
        invalid: list[str] = []
        for key, value in object_data(obj, secret=is_secret).items():
            full = prefix + key
            if not is_env_name(full):
                invalid.append(full)
                continue
            detail = f"{kind} {name} key {key}" + (f" (prefix {prefix})" if prefix else "")
            declared.pop(full, None)  # keep the order of the last writer, as the map does
            declared[full] = Variable(full, value, Source(f"envFrom.{kind[0].lower()}{kind[1:]}", detail),
                                      secret=is_secret)
        if invalid:
            word = "secret" if is_secret else "configMap"
            warnings.append(f"Keys [{', '.join(sorted(invalid))}] from the EnvFrom {word} "
                            f"{namespace}/{name} were skipped since they are considered invalid "
                            f"environment variable names.")

    for var in container.get("env") or []:
        name = str(var.get("name", ""))
        raw = var.get("value")
        value_from = var.get("valueFrom") or {}
        variable: Variable | None
        if raw:  # the kubelet expands only non-empty values; an empty one with valueFrom resolves it
            current = {n: v.value for n, v in declared.items()}
            used = _referenced(str(raw), (current, link_values))
            secret = any(declared[u].secret for u in used if u in declared)
            variable = Variable(name, expand(str(raw), current, link_values), Source("value"), secret)
        elif value_from:
            try:
                variable = _value_from(facts, container, name, value_from, configmaps, secrets)
            except Unknowable as exc:
                unresolved.append(Unresolved(name, str(exc)))
                declared.pop(name, None)
                continue
        else:
            variable = Variable(name, "", Source("value"))
        if variable is None:  # an optional reference that is absent: the variable is not set
            continue
        declared.pop(name, None)
        declared[name] = variable

    ordered = list(declared.values()) + [v for n, v in links.items() if n not in declared]
    return Environment(tuple(ordered), tuple(unresolved), tuple(warnings))


def _value_from(facts: PodFacts, container: Obj, name: str, value_from: Obj,
                configmaps: Mapping[str, Obj], secrets: Mapping[str, Obj]) -> Variable | None:
    if "fieldRef" in value_from:
        path = str((value_from["fieldRef"] or {}).get("fieldPath", ""))
        return Variable(name, field_ref(facts, path), Source("fieldRef", path))
    if "resourceFieldRef" in value_from:
        ref = value_from["resourceFieldRef"] or {}
        detail = str(ref.get("resource", "")) + (f" (divisor {ref['divisor']})" if ref.get("divisor") else "")
        return Variable(name, resource_field_ref(facts, container, ref), Source("resourceFieldRef", detail))
    for field_name, kind, lookup in (("configMapKeyRef", "ConfigMap", configmaps),
                                     ("secretKeyRef", "Secret", secrets)):
        if field_name not in value_from:
            continue
        ref = value_from[field_name] or {}
        obj_name, key = str(ref.get("name", "")), str(ref.get("key", ""))
        optional = bool(ref.get("optional"))
        is_secret = kind == "Secret"
        obj = lookup.get(obj_name)
        if obj is None:
            if optional:
                return None
            raise ResolveError(f'{kind.lower()} "{obj_name}" not found')
        data = object_data(obj, secret=is_secret)
        if key not in data:
            if optional:
                return None
            namespace = str((facts.pod.get("metadata") or {}).get("namespace") or "default")
            raise ResolveError(f"couldn't find key {key} in {kind} {namespace}/{obj_name}")
        return Variable(name, data[key], Source(field_name, f"{kind} {obj_name} key {key}"), is_secret)
    raise ResolveError(f"variable {name}: valueFrom has no source tether knows "
                       f"({', '.join(sorted(value_from))})")
