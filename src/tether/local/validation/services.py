"""Service validation (core's ValidateService, in its order). ClusterIP and NodePort values are
checked where they are allocated (services/allocation.py), before this runs."""

from __future__ import annotations

from typing import Any

from tether.local.errors import Cause
from tether.local.validation import fields as f
from tether.objects import Obj

PROTOCOLS = ("SCTP", "TCP", "UDP")
SERVICE_TYPES = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
SESSION_AFFINITIES = ("ClientIP", "None")
TRAFFIC_POLICIES = ("Cluster", "Local")
KUBELET_PORT = 10250


def _go_service_port(protocol: Any, port: Any) -> str:
    return (f"core.ServicePort{{Name:\"\", Protocol:{f.go_quote(str(protocol or ''))}, AppProtocol:(*string)(nil), "
            f"Port:{port if isinstance(port, int) else 0}, "
            "TargetPort:intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}, NodePort:0}")


def _port(port: Obj, require_name: bool, names: set[str], path: str) -> list[Cause]:
    causes: list[Cause] = []
    name = port.get("name") or ""
    if require_name and not name:
        causes.append(f.required(f"{path}.name"))
    elif name:
        causes += f.each(f"{path}.name", str(name), f.dns1123_label(str(name)))
        if name in names:
            causes.append(f.duplicate(f"{path}.name", name))
        names.add(str(name))
    number = port.get("port")
    causes += [f.invalid(f"{path}.port", number, msg) for msg in f.port_number(number)]
    protocol = port.get("protocol")
    if not protocol:
        causes.append(f.required(f"{path}.protocol"))
    elif protocol not in PROTOCOLS:
        causes.append(f.not_supported(f"{path}.protocol", protocol, PROTOCOLS))
    target = port.get("targetPort")
    if isinstance(target, str):
        causes += f.each(f"{path}.targetPort", target, f.port_name(target))
    elif target is not None:
        causes += [f.invalid(f"{path}.targetPort", target, msg) for msg in f.port_number(target)]
    return causes


def service(obj: Obj) -> list[Cause]:
    spec = f.mapping(obj.get("spec"))
    kind = spec.get("type")
    headless = spec.get("clusterIP") == "None"
    ports = [p if isinstance(p, dict) else {} for p in spec.get("ports") or []]
    causes: list[Cause] = []
    if not ports and not headless and kind != "ExternalName":
        causes.append(f.required("spec.ports"))
    if kind == "LoadBalancer":
        for i, port in enumerate(ports):
            if port.get("port") == KUBELET_PORT:
                causes.append(f.invalid(f"spec.ports[{i}]", KUBELET_PORT,
                                        f"may not expose port {KUBELET_PORT} externally since it is used by kubelet"))
    elif kind == "ExternalName":
        external = spec.get("externalName")
        if not external:
            causes.append(f.required("spec.externalName"))
        elif isinstance(external, str):
            causes += f.each("spec.externalName", external, f.dns1123_subdomain(external.rstrip(".")))
    names: set[str] = set()
    for i, port in enumerate(ports):
        causes += _port(port, len(ports) > 1, names, f"spec.ports[{i}]")
    causes += f.labels(spec.get("selector"), "spec.selector")
    affinity = spec.get("sessionAffinity")
    if not affinity:
        causes.append(f.required("spec.sessionAffinity"))
    elif affinity not in SESSION_AFFINITIES:
        causes.append(f.not_supported("spec.sessionAffinity", affinity, SESSION_AFFINITIES))
    for i, ip in enumerate(spec.get("externalIPs") or []):
        if not isinstance(ip, str) or not f.is_ip(ip):
            causes.append(f.invalid(f"spec.externalIPs[{i}]", ip, "must be a valid IP address, (e.g. 10.9.8.7 or "
                                    "2001:db8::ffff)"))
    if not kind:
        causes.append(f.required("spec.type"))
    elif kind not in SERVICE_TYPES:
        causes.append(f.not_supported("spec.type", kind, SERVICE_TYPES))
    seen: set[tuple[Any, Any]] = set()
    for i, port in enumerate(ports):
        key = (port.get("protocol"), port.get("port"))
        if key in seen:
            causes.append(f.duplicate(f"spec.ports[{i}]", None, rendered=_go_service_port(*key)))
        seen.add(key)
    for name in ("externalTrafficPolicy", "internalTrafficPolicy"):
        value = spec.get(name)
        if value is not None and value not in TRAFFIC_POLICIES:
            causes.append(f.not_supported(f"spec.{name}", value, TRAFFIC_POLICIES))
    return causes
