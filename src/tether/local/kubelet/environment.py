"""A container's environment, as the kubelet builds it: env, envFrom, downward API, service links."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tether.objects import ObjView as Obj

Lookup = Callable[[str, str], Obj | None]  # (namespace, name) -> object or None


class ConfigError(Exception):
    """The container cannot start: the real kubelet's CreateContainerConfigError."""


def _service_env_name(name: str) -> str:
    return name.upper().replace("-", "_")


def service_links(services: Sequence[Obj], namespace: str, *, enable: bool) -> dict[str, str]:
    """`<SVC>_SERVICE_HOST/PORT` and the docker-link variables, for Services with a clusterIP."""
    env: dict[str, str] = {}
    for svc in services:
        meta, spec = svc.get("metadata", {}), svc.get("spec", {})
        is_master = meta.get("namespace") == "default" and meta.get("name") == "kubernetes"
        if not is_master and (not enable or meta.get("namespace") != namespace):
            continue
        ip = spec.get("clusterIP")
        ports = spec.get("ports") or []
        if not ip or ip == "None" or not ports:
            continue
        prefix = _service_env_name(str(meta.get("name", "")))
        env[f"{prefix}_SERVICE_HOST"] = str(ip)
        env[f"{prefix}_SERVICE_PORT"] = str(ports[0].get("port"))
        for port in ports:
            if port.get("name"):
                env[f"{prefix}_SERVICE_PORT_{_service_env_name(str(port['name']))}"] = str(port.get("port"))
        first = ports[0]
        proto = str(first.get("protocol", "TCP"))
        env[f"{prefix}_PORT"] = f"{proto.lower()}://{ip}:{first.get('port')}"
        for port in ports:
            proto = str(port.get("protocol", "TCP"))
            base = f"{prefix}_PORT_{port.get('port')}_{proto}"
            env[base] = f"{proto.lower()}://{ip}:{port.get('port')}"
            env[f"{base}_PROTO"] = proto.lower()
            env[f"{base}_PORT"] = str(port.get("port"))
            env[f"{base}_ADDR"] = str(ip)
    return env


def _field_ref(pod: Obj, path: str) -> str:
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.hostIP": status.get("hostIP"),
        "status.podIP": status.get("podIP"),
        "status.podIPs": ",".join(p.get("ip", "") for p in status.get("podIPs") or []),
    }
    if path in simple:
        return str(simple[path] or "")
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ConfigError(f'unsupported fieldRef fieldPath "{path}"')


def field_value(pod: Obj, path: str) -> str:
    """A downward API `fieldRef` (env or volume file); raises ConfigError for unsupported paths."""
    return _field_ref(pod, path)


def _key_ref(ref: Obj, kind: str, namespace: str, lookup: Lookup) -> str | None:
    name, key = str(ref.get("name", "")), str(ref.get("key", ""))
    obj = lookup(namespace, name)
    optional = bool(ref.get("optional"))
    if obj is None:
        if optional:
            return None
        raise ConfigError(f'{kind} "{name}" not found')
    if kind == "secret":
        raw = (obj.get("data") or {}).get(key)
        value = base64.b64decode(raw).decode("utf-8", "replace") if raw is not None else None
    else:
        value = (obj.get("data") or {}).get(key)
    if value is None and not optional:
        raise ConfigError(f"couldn't find key {key} in {kind.capitalize()} {namespace}/{name}")
    return None if value is None else str(value)


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' dependent-variable expansion (env values, command, args, subPathExpr).

    `$(NAME)` is NAME's value when `env` has it and stays as written when not; `$$` is a literal
    `$` (so `$$(NAME)` gives `$(NAME)`); a `$` before anything else, at the end, or an unclosed
    `$(` stays as it is. NAME is whatever stands between the parentheses, as upstream reads it.
    """
    out: list[str] = []
    at = 0
    while True:
        dollar = value.find("$", at)
        if dollar < 0 or dollar + 1 >= len(value):
            out.append(value[at:])
            return "".join(out)
        out.append(value[at:dollar])
        after = value[dollar + 1]
        if after == "$":
            out.append("$")
            at = dollar + 2
        elif after == "(" and (close := value.find(")", dollar + 2)) >= 0:
            name = value[dollar + 2:close]
            out.append(env.get(name, f"$({name})"))
            at = close + 1
        else:  # `$x`, or `$(` never closed: kept; scanning goes on after the `$`'s next character
            out.append(value[dollar:dollar + 2])
            at = dollar + 2


def expand_command(container: Obj, env: Mapping[str, str]) -> dict[str, Any]:
    """The container with `$(VAR)` expanded in its command and args, as the kubelet starts it.

    `env` is the container's own environment (env, envFrom, service links, downward API):
    upstream expands with exactly those, so a name the container does not declare stays as written.
    """
    expanded = dict(container)
    for field in ("command", "args"):
        if container.get(field):
            expanded[field] = [expand(str(part), env) for part in container[field]]
    return expanded


def container_env(
    pod: Obj,
    container: Obj,
    *,
    services: Sequence[Obj],
    configmaps: Lookup,
    secrets: Lookup,
) -> dict[str, str]:
    meta, spec = pod.get("metadata", {}), pod.get("spec", {})
    namespace = str(meta.get("namespace", "default"))
    env: dict[str, str] = {"HOSTNAME": str(spec.get("hostname") or meta.get("name", ""))}
    env.update(service_links(services, namespace, enable=spec.get("enableServiceLinks", True) is not False))
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix", ""))
        if "configMapRef" in source or "secretRef" in source:
            is_secret = "secretRef" in source
            ref = source["secretRef" if is_secret else "configMapRef"]
            obj = (secrets if is_secret else configmaps)(namespace, str(ref.get("name", "")))
            if obj is None:
                if ref.get("optional"):
                    continue
                raise ConfigError(f'{"secret" if is_secret else "configmap"} "{ref.get("name")}" not found')
            for key, raw in (obj.get("data") or {}).items():
                value = base64.b64decode(raw).decode("utf-8", "replace") if is_secret else str(raw)
                env[prefix + key] = value
    for var in container.get("env") or []:
        name = str(var.get("name", ""))
        if "value" in var:
            env[name] = expand(str(var["value"]), env)
            continue
        source = var.get("valueFrom") or {}
        resolved: str | None = ""
        if "fieldRef" in source:
            resolved = _field_ref(pod, str(source["fieldRef"].get("fieldPath", "")))
        elif "configMapKeyRef" in source:
            resolved = _key_ref(source["configMapKeyRef"], "configmap", namespace, configmaps)
        elif "secretKeyRef" in source:
            resolved = _key_ref(source["secretKeyRef"], "secret", namespace, secrets)
        elif "resourceFieldRef" in source:
            resolved = "0"
        if resolved is not None:
            env[name] = resolved
    return env
