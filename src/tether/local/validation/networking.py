"""Ingress validation (networking.k8s.io/v1's ValidateIngressSpec, in its order)."""

from __future__ import annotations

from typing import Any

from tether.local.errors import Cause
from tether.local.validation import fields as f
from tether.objects import Obj

PATH_TYPES = ("Exact", "ImplementationSpecific", "Prefix")  # sorted, as upstream lists them
INVALID_PATH_SEQUENCES = ("//", "/./", "/../", "%2f", "%2F")
INVALID_PATH_SUFFIXES = ("/..", "/.")


def backend(value: Any, path: str) -> list[Cause]:
    value = value if isinstance(value, dict) else {}
    service, resource = value.get("service"), value.get("resource")
    if service is not None and resource is not None:
        return [f.invalid(path, "", "cannot set both resource and service backends")]
    if resource is not None:
        resource = resource if isinstance(resource, dict) else {}
        causes = []
        if not resource.get("kind"):
            causes.append(f.required(f"{path}.resource.kind"))
        if not resource.get("name"):
            causes.append(f.required(f"{path}.resource.name"))
        return causes
    if service is None:
        return [f.invalid(path, "", "resource or service backend is required")]
    service = service if isinstance(service, dict) else {}
    causes = []
    name = service.get("name")
    if not name:
        causes.append(f.required(f"{path}.service.name"))
    elif isinstance(name, str):
        causes += f.each(f"{path}.service.name", name, f.dns1035_label(name))
    port = f.mapping(service.get("port"))
    port_name, number = port.get("name"), port.get("number")
    if port_name and number:
        causes.append(f.invalid(path, "", "cannot set both port name & port number"))
    elif port_name:
        causes += f.each(f"{path}.service.port.name", str(port_name), f.port_name(str(port_name)))
    elif number:
        causes += [f.invalid(f"{path}.service.port.number", number, msg) for msg in f.port_number(number)]
    else:
        causes.append(f.required(path, "port name or number is required"))
    return causes


def _http_path(item: Obj, path: str) -> list[Cause]:
    path_type = item.get("pathType")
    if path_type is None:
        return [f.required(f"{path}.pathType", "pathType must be specified")]
    value = item.get("path") or ""
    causes: list[Cause] = []
    if path_type in ("Exact", "Prefix"):
        if not value.startswith("/"):
            causes.append(f.invalid(f"{path}.path", value, "must be an absolute path"))
        if value:
            causes += [f.invalid(f"{path}.path", value, f"must not contain '{s}'")
                       for s in INVALID_PATH_SEQUENCES if s in value]
            causes += [f.invalid(f"{path}.path", value, f"cannot end with '{s}'")
                       for s in INVALID_PATH_SUFFIXES if value.endswith(s)]
    elif path_type == "ImplementationSpecific":
        if value and not value.startswith("/"):
            causes.append(f.invalid(f"{path}.path", value, "must be an absolute path"))
    else:
        causes.append(f.not_supported(f"{path}.pathType", path_type, PATH_TYPES))
    return causes + backend(item.get("backend"), f"{path}.backend")


def _rules(rules: list[Any]) -> list[Cause]:
    causes: list[Cause] = []
    for i, rule in enumerate(rules):
        rule = rule if isinstance(rule, dict) else {}
        where = f"spec.rules[{i}]"
        host = rule.get("host")
        if isinstance(host, str) and host:
            if f.is_ip(host):
                causes.append(f.invalid(f"{where}.host", host, "must be a DNS name, not an IP address"))
            if "*" in host:
                causes += f.each(f"{where}.host", host, f.wildcard_dns1123_subdomain(host))
                continue  # upstream skips the rule's paths for a wildcard host
            causes += f.each(f"{where}.host", host, f.dns1123_subdomain(host))
        http = rule.get("http")
        if isinstance(http, dict):
            paths = http.get("paths")
            if not paths:
                causes.append(f.required(f"{where}.http.paths"))
            for j, item in enumerate(paths if isinstance(paths, list) else []):
                causes += _http_path(item if isinstance(item, dict) else {}, f"{where}.http.paths[{j}]")
    return causes


def ingress(obj: Obj) -> list[Cause]:
    spec = f.mapping(obj.get("spec"))
    rules = spec.get("rules") if isinstance(spec.get("rules"), list) else []
    default = spec.get("defaultBackend")
    causes: list[Cause] = []
    if not rules and default is None:
        causes.append(f.invalid("spec", None, "either `defaultBackend` or `rules` must be specified",
                                rendered="[]networking.IngressRule(nil)" if spec.get("rules") is None
                                else "[]networking.IngressRule{}"))
    if default is not None:
        causes += backend(default, "spec.defaultBackend")
    if rules:
        causes += _rules(rules)
    for i, tls in enumerate(spec.get("tls") or []):
        for j, host in enumerate((tls or {}).get("hosts") or [] if isinstance(tls, dict) else []):
            if isinstance(host, str):
                rule = f.wildcard_dns1123_subdomain if "*" in host else f.dns1123_subdomain
                causes += f.each(f"spec.tls[{i}].hosts[{j}]", host, rule(host))
    class_name = spec.get("ingressClassName")
    if isinstance(class_name, str):
        causes += f.each("spec.ingressClassName", class_name, f.dns1123_subdomain(class_name))
    return causes
