"""What the server owns in an object's metadata, name rules, and the built-in defaults."""

from __future__ import annotations

import base64
import copy
import re
import secrets
import uuid
from typing import Any

from tether.local.errors import Cause
from tether.objects import Obj

GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Kinds whose names must be DNS-1123 labels rather than subdomains.
LABEL_NAMED_KINDS = frozenset({"Namespace", "Service"})
# Kinds whose names are path segments only (no DNS rule), like RBAC objects.
PATH_NAMED_KINDS = frozenset({"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding", "Event"})




def new_uid() -> str:
    return str(uuid.uuid4())


def generated_name(prefix: str) -> str:
    return prefix + "".join(secrets.choice(GENERATE_ALPHABET) for _ in range(5))


def name_causes(kind: str, name: str) -> list[Cause]:
    if kind in PATH_NAMED_KINDS:
        bad = name in (".", "..") or "/" in name or "%" in name
        return [Cause("FieldValueInvalid", f'Invalid value: "{name}": may not contain \'/\' or \'%\'', "metadata.name")] if bad else []
    if kind in LABEL_NAMED_KINDS:
        if len(name) > 63 or not DNS1123_LABEL.match(name):
            msg = (
                f'Invalid value: "{name}": a lowercase RFC 1123 label must consist of lower case alphanumeric '
                "characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  "
                "or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            )
            return [Cause("FieldValueInvalid", msg, "metadata.name")]
        return []
    if len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        msg = (
            f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
            "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
            "'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        )
        return [Cause("FieldValueInvalid", msg, "metadata.name")]
    return []


def _required(field: str) -> Cause:
    return Cause("FieldValueRequired", "Required value", field)


def _pod_spec_causes(spec: Any, prefix: str) -> list[Cause]:
    if not isinstance(spec, dict):
        return [_required(prefix)]
    containers = spec.get("containers")
    if not containers:
        return [_required(f"{prefix}.containers")]
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, container in enumerate(containers):
        where = f"{prefix}.containers[{i}]"
        if not isinstance(container, dict):
            causes.append(Cause("FieldValueTypeInvalid", "must be an object", where))
            continue
        name = container.get("name")
        if not name:
            causes.append(_required(f"{where}.name"))
        elif not isinstance(name, str) or len(name) > 63 or not DNS1123_LABEL.match(name):
            causes.append(Cause("FieldValueInvalid", f'Invalid value: "{name}": a lowercase RFC 1123 label '
                                "must consist of lower case alphanumeric characters or '-'", f"{where}.name"))
        elif name in seen:
            causes.append(Cause("FieldValueDuplicate", f'Duplicate value: "{name}"', f"{where}.name"))
        else:
            seen.add(str(name))
        if not container.get("image"):
            causes.append(_required(f"{where}.image"))
    causes += _volume_causes(spec.get("volumes"), prefix)
    return causes


def _volume_causes(volumes: Any, prefix: str) -> list[Cause]:
    """Volume names are DNS labels and projected paths stay inside the volume (no `..`, not absolute)."""
    causes: list[Cause] = []
    for i, volume in enumerate(volumes if isinstance(volumes, list) else []):
        if not isinstance(volume, dict):
            continue
        name = volume.get("name")
        if not isinstance(name, str) or len(name) > 63 or not DNS1123_LABEL.match(name):
            causes.append(Cause("FieldValueInvalid", f'Invalid value: "{name}": a lowercase RFC 1123 label '
                                "must consist of lower case alphanumeric characters or '-'",
                                f"{prefix}.volumes[{i}].name"))
        for source in ("configMap", "secret"):
            for j, item in enumerate((volume.get(source) or {}).get("items") or []):
                path = str((item or {}).get("path", ""))
                if not path or path.startswith("/") or ".." in path.split("/"):
                    causes.append(Cause("FieldValueInvalid", f'Invalid value: "{path}": must be a relative path '
                                        "without '..'", f"{prefix}.volumes[{i}].{source}.items[{j}].path"))
    return causes


def _template_spec(obj: Obj, *path: str) -> Any:
    node: Any = obj
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def kind_causes(group: str, kind: str, obj: Obj) -> list[Cause]:
    """The checks users hit most often; the real server checks far more."""
    if group == "" and kind == "Pod":
        return _pod_spec_causes(obj.get("spec"), "spec")
    if group in ("apps", "batch") and kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job"):
        causes = []
        if kind != "Job" and not _template_spec(obj, "spec", "selector"):
            causes.append(_required("spec.selector"))
        causes += _pod_spec_causes(_template_spec(obj, "spec", "template", "spec"), "spec.template.spec")
        selector = _template_spec(obj, "spec", "selector", "matchLabels") or {}
        labels = _template_spec(obj, "spec", "template", "metadata", "labels") or {}
        if kind != "Job" and isinstance(selector, dict) and isinstance(labels, dict) and any(
            labels.get(k) != v for k, v in selector.items()
        ):
            causes.append(Cause("FieldValueInvalid", "Invalid value: map[string]string{}: `selector` does not "
                                "match template `labels`", "spec.template.metadata.labels"))
        replicas = _template_spec(obj, "spec", "replicas")
        if kind in ("Deployment", "ReplicaSet", "StatefulSet") and replicas is not None:
            if not isinstance(replicas, int) or isinstance(replicas, bool):
                causes.append(Cause("FieldValueTypeInvalid", f'Invalid value: "{replicas}": spec.replicas in body '
                                    "must be of type integer", "spec.replicas"))
            elif replicas < 0:
                causes.append(Cause("FieldValueInvalid", f"Invalid value: {replicas}: must be greater than or "
                                    "equal to 0", "spec.replicas"))
        return causes
    if group == "" and kind == "Service":
        spec = obj.get("spec") or {}
        ports = spec.get("ports") or []
        causes = []
        if not ports and spec.get("type", "ClusterIP") != "ExternalName" and spec.get("clusterIP") != "None":
            causes.append(_required("spec.ports"))
        for i, port in enumerate(ports):
            if not isinstance(port, dict) or not isinstance(port.get("port"), int):
                causes.append(_required(f"spec.ports[{i}].port"))
        return causes
    if group == "" and kind in ("ConfigMap", "Secret"):
        causes = []
        for field in ("data", "binaryData", "stringData"):
            values = obj.get(field)
            if values is not None and not isinstance(values, dict):
                causes.append(Cause("FieldValueTypeInvalid", "must be a map", field))
            elif values:
                causes += [Cause("FieldValueTypeInvalid", "must be a string", f"{field}[{key}]")
                           for key, value in values.items() if not isinstance(value, str)]
        return causes
    return []


def image_pull_policy(image: str) -> str:
    tag = image.rsplit("/", 1)[-1]
    if "@" in tag:
        return "IfNotPresent"
    if ":" not in tag or tag.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def _default_container(container: Obj) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    if isinstance(container.get("image"), str):
        container.setdefault("imagePullPolicy", image_pull_policy(container["image"]))
    for port in container.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")


def default_pod_spec(spec: Obj) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                _default_container(container)


def _default_template(obj: Obj) -> None:
    template = obj.setdefault("spec", {}).setdefault("template", {})
    template.setdefault("metadata", {})
    if isinstance(template.get("spec"), dict):
        default_pod_spec(template["spec"])


def apply_defaults(group: str, kind: str, obj: Obj) -> None:
    """Defaulting the real API server does, because apply diffs and GitOps tools notice it."""
    if group == "" and kind == "Pod":
        spec = obj.setdefault("spec", {})
        default_pod_spec(spec)
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("priority", 0)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        tolerations = spec.setdefault("tolerations", [])
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
            if not any(isinstance(t, dict) and t.get("key") == key for t in tolerations):
                tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                    "tolerationSeconds": 300})
        obj.setdefault("status", {}).setdefault("phase", "Pending")
        obj["status"].setdefault("qosClass", "BestEffort")
    elif group == "apps" and kind == "Deployment":
        spec = obj.setdefault("spec", {})
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        strategy = spec.setdefault("strategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxSurge", "25%")
            rolling.setdefault("maxUnavailable", "25%")
        _default_template(obj)
    elif group == "apps" and kind in ("ReplicaSet", "StatefulSet"):
        spec = obj.setdefault("spec", {})
        spec.setdefault("replicas", 1)
        if kind == "StatefulSet":
            spec.setdefault("podManagementPolicy", "OrderedReady")
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
        _default_template(obj)
    elif group == "apps" and kind == "DaemonSet":
        spec = obj.setdefault("spec", {})
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("updateStrategy", {"type": "RollingUpdate",
                                           "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        _default_template(obj)
    elif group == "batch" and kind == "Job":
        spec = obj.setdefault("spec", {})
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completions", 1)
        spec.setdefault("parallelism", 1)
        _default_template(obj)
    elif group == "" and kind == "Service":
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec["type"] != "ExternalName":
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")
            spec.setdefault("internalTrafficPolicy", "Cluster")
        for port in spec.get("ports") or []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")
                if "port" in port:
                    port.setdefault("targetPort", port["port"])
    elif group == "" and kind == "Secret":
        obj.setdefault("type", "Opaque")
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict):
            data = obj.setdefault("data", {})
            for key, value in string_data.items():
                data[key] = base64.b64encode(str(value).encode()).decode()
    elif group == "" and kind == "Namespace":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {}).setdefault("phase", "Active")
        name = obj.get("metadata", {}).get("name")
        if name:
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name


def default_job_selector(job: Obj) -> None:
    """A Job without a selector selects its own pods by its uid, as the real API server sets it."""
    spec = job.setdefault("spec", {})
    if spec.get("selector") or spec.get("manualSelector"):
        return
    uid, name = job["metadata"]["uid"], job["metadata"]["name"]
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    labels = spec.setdefault("template", {}).setdefault("metadata", {}).setdefault("labels", {})
    labels.update({
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    })


def deep_copy(obj: Obj) -> Obj:
    return copy.deepcopy(obj)


def spec_changed(old: Obj, new: Obj) -> bool:
    """Whether anything outside metadata and status changed (the rule for bumping generation)."""
    keys = (set(old) | set(new)) - {"metadata", "status", "kind", "apiVersion"}
    return any(old.get(k) != new.get(k) for k in keys)
