"""APIService validation (kube-aggregator's ValidateAPIService)."""

from __future__ import annotations

from tether.local.errors import Cause
from tether.local.validation import fields as f
from tether.local.validation.meta import path_segment
from tether.objects import Obj


def name_errors(name: str, spec: Obj) -> list[str]:
    """The name must be `<version>.<group>` (the check replaces ObjectMeta's name rule)."""
    required = f'{spec.get("version", "")}.{spec.get("group", "")}'
    minimal = path_segment(name)
    if minimal:
        return minimal
    return [] if name == required else [f"must be `spec.version+\".\"+spec.group`: {f.go_quote(required)}"]


def apiservice(obj: Obj) -> list[Cause]:
    spec = f.mapping(obj.get("spec"))
    causes: list[Cause] = []
    group, version = str(spec.get("group") or ""), str(spec.get("version") or "")
    if not group and version != "v1":
        causes.append(f.required("spec.group", "only v1 may have an empty group and it better be legacy kube"))
    if group:
        causes += f.each("spec.group", group, f.dns1123_subdomain(group))
    causes += f.each("spec.version", version, f.dns1035_label(version))
    minimum = spec.get("groupPriorityMinimum")
    if not isinstance(minimum, int) or not 0 < minimum <= 20000:
        causes.append(f.invalid("spec.groupPriorityMinimum", minimum if isinstance(minimum, int) else 0,
                                "must be positive and less than 20000"))
    priority = spec.get("versionPriority")
    if not isinstance(priority, int) or not 0 < priority <= 1000:
        causes.append(f.invalid("spec.versionPriority", priority if isinstance(priority, int) else 0,
                                "must be positive and less than 1000"))
    service = spec.get("service")
    if not isinstance(service, dict):
        if spec.get("caBundle"):
            causes.append(f.invalid("spec.caBundle", f"{len(str(spec['caBundle'])) * 3 // 4} bytes",
                                    "local APIServices may not have a caBundle"))
        if spec.get("insecureSkipTLSVerify"):
            causes.append(f.invalid("spec.insecureSkipTLSVerify", True,
                                    "local APIServices may not have insecureSkipTLSVerify"))
        return causes
    if not service.get("namespace"):
        causes.append(f.required("spec.service.namespace"))
    if not service.get("name"):
        causes.append(f.required("spec.service.name"))
    port = service.get("port")
    causes += [f.invalid("spec.service.port", port, msg) for msg in f.port_number(port)]
    if spec.get("insecureSkipTLSVerify") and spec.get("caBundle"):
        causes.append(f.invalid("spec.insecureSkipTLSVerify", True, "may not be true if caBundle is present"))
    return causes
