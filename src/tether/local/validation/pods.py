"""Pod and pod template validation (core's ValidatePodSpec, in its order), and the rule that
a pod's spec is immutable but for a few fields."""

from __future__ import annotations

import copy
from typing import Any

from tether.local import objects
from tether.local.errors import Cause
from tether.local.validation import fields as f
from tether.local.validation import meta as m
from tether.objects import Obj

PROTOCOLS = ("SCTP", "TCP", "UDP")
RESTART_POLICIES = ("Always", "OnFailure", "Never")
DNS_POLICIES = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
TERMINATION_MESSAGE_POLICIES = ("File", "FallbackToLogsOnError")
VOLUME_SOURCES = frozenset({
    "hostPath", "emptyDir", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo", "secret", "nfs", "iscsi",
    "glusterfs", "persistentVolumeClaim", "rbd", "flexVolume", "cinder", "cephfs", "flocker", "downwardAPI", "fc",
    "azureFile", "configMap", "vsphereVolume", "quobyte", "azureDisk", "photonPersistentDisk", "projected",
    "portworxVolume", "scaleIO", "storageos", "csi", "ephemeral", "image",
})
UPDATABLE_POD_SPEC_FIELDS = (
    "`spec.containers[*].image`", "`spec.initContainers[*].image`", "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
)
ENV_NAME_MESSAGE = "a valid environment variable name must consist only of printable ASCII characters other than '='"


def _dicts(value: Any) -> list[tuple[int, Obj]]:
    return [(i, item) for i, item in enumerate(value) if isinstance(item, dict)] if isinstance(value, list) else []


def descending_path(value: str, path: str) -> list[Cause]:
    causes = []
    if value.startswith("/"):
        causes.append(f.invalid(path, value, "must be a relative path"))
    if ".." in value.replace("\\", "/").split("/"):
        causes.append(f.invalid(path, value, "must not contain '..'"))
    return causes


def _key_to_paths(items: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    for i, item in _dicts(items):
        where = f"{path}.items[{i}]"
        if not item.get("key"):
            causes.append(f.required(f"{where}.key"))
        item_path = str(item.get("path") or "")
        if not item_path:
            causes.append(f.required(f"{where}.path"))
        else:
            causes += descending_path(item_path, f"{where}.path")
            if item_path.startswith(".."):
                causes.append(f.invalid(f"{where}.path", item_path, "must not start with '..'"))
    return causes


def _volume_source(volume: Obj, path: str) -> list[Cause]:
    sources = [key for key in volume if key in VOLUME_SOURCES]
    if not sources:
        return [f.required(path, "must specify a volume type")]
    if len(sources) > 1:
        return [f.forbidden(f"{path}.{sources[1]}", "may not specify more than 1 volume type")]
    source = volume[sources[0]]
    where = f"{path}.{sources[0]}"
    if not isinstance(source, dict):
        return []
    if sources[0] == "configMap":
        causes = [] if source.get("name") else [f.required(f"{where}.name")]
        return causes + _key_to_paths(source.get("items"), where)
    if sources[0] == "secret":
        causes = [] if source.get("secretName") else [f.required(f"{where}.secretName")]
        return causes + _key_to_paths(source.get("items"), where)
    if sources[0] == "persistentVolumeClaim" and not source.get("claimName"):
        return [f.required(f"{where}.claimName")]
    if sources[0] == "hostPath" and not source.get("path"):
        return [f.required(f"{where}.path")]
    return []


def volumes(values: Any, path: str) -> tuple[set[str], list[Cause]]:
    names: set[str] = set()
    causes: list[Cause] = []
    for i, volume in _dicts(values):
        where = f"{path}[{i}]"
        causes += _volume_source(volume, where)
        name = volume.get("name")
        if not name:
            causes.append(f.required(f"{where}.name"))
        elif isinstance(name, str):
            causes += f.each(f"{where}.name", name, f.dns1123_label(name))
        if isinstance(name, str) and name in names:
            causes.append(f.duplicate(f"{where}.name", name))
        if isinstance(name, str):
            names.add(name)
    return names, causes


def _ports(values: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    names: set[str] = set()
    for i, port in _dicts(values):
        where = f"{path}[{i}]"
        name = port.get("name")
        if isinstance(name, str) and name:
            errors = f.port_name(name)
            if errors:
                causes += f.each(f"{where}.name", name, errors)
            elif name in names:
                causes.append(f.duplicate(f"{where}.name", name))
            else:
                names.add(name)
        container_port = port.get("containerPort")
        if not container_port:
            causes.append(f.required(f"{where}.containerPort"))
        else:
            causes += [f.invalid(f"{where}.containerPort", container_port, msg) for msg in f.port_number(container_port)]
        host_port = port.get("hostPort")
        if host_port:
            causes += [f.invalid(f"{where}.hostPort", host_port, msg) for msg in f.port_number(host_port)]
        protocol = port.get("protocol")
        if not protocol:
            causes.append(f.required(f"{where}.protocol"))
        elif protocol not in PROTOCOLS:
            causes.append(f.not_supported(f"{where}.protocol", protocol, PROTOCOLS))
    return causes


def _env(values: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    for i, var in _dicts(values):
        where = f"{path}[{i}].name"
        name = var.get("name")
        if not name:
            causes.append(f.required(where))
            causes.append(f.invalid(where, "", "environment variable name must be non-empty"))
        elif isinstance(name, str) and any(ord(c) > 126 or ord(c) < 32 or c == "=" for c in name):
            causes.append(f.invalid(where, name, ENV_NAME_MESSAGE))
    return causes


def _mounts(values: Any, volume_names: set[str], path: str) -> list[Cause]:
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, mount in _dicts(values):
        where = f"{path}[{i}]"
        name = mount.get("name") or ""
        if not name:
            causes.append(f.required(f"{where}.name"))
        if name not in volume_names:
            causes.append(f.not_found(f"{where}.name", name))
        mount_path = mount.get("mountPath") or ""
        if not mount_path:
            causes.append(f.required(f"{where}.mountPath"))
        if mount_path in seen:
            causes.append(f.invalid(f"{where}.mountPath", mount_path, "must be unique"))
        seen.add(mount_path)
        sub_path = mount.get("subPath")
        if isinstance(sub_path, str) and sub_path:
            causes += descending_path(sub_path, f"{path}.subPath")  # upstream names the list, not the item
    return causes


def _container(container: Obj, volume_names: set[str], path: str) -> list[Cause]:
    causes: list[Cause] = []
    name = container.get("name")
    if not name:
        causes.append(f.required(f"{path}.name"))
    elif isinstance(name, str):
        causes += f.each(f"{path}.name", name, f.dns1123_label(name))
    if not container.get("image"):
        causes.append(f.required(f"{path}.image"))
    policy = container.get("terminationMessagePolicy")
    if not policy:
        causes.append(f.required(f"{path}.terminationMessagePolicy"))
    elif policy not in TERMINATION_MESSAGE_POLICIES:
        causes.append(f.not_supported(f"{path}.terminationMessagePolicy", policy, TERMINATION_MESSAGE_POLICIES))
    causes += _ports(container.get("ports"), f"{path}.ports")
    causes += _env(container.get("env"), f"{path}.env")
    causes += _mounts(container.get("volumeMounts"), volume_names, f"{path}.volumeMounts")
    pull = container.get("imagePullPolicy")
    if not pull:
        causes.append(f.required(f"{path}.imagePullPolicy"))
    elif pull not in PULL_POLICIES:
        causes.append(f.not_supported(f"{path}.imagePullPolicy", pull, PULL_POLICIES))
    return causes


def _containers(values: Any, volume_names: set[str], path: str, *, required: bool,
                taken: set[str] | None = None) -> list[Cause]:
    causes: list[Cause] = []
    if required and not values:
        causes.append(f.required(path))
    names: set[str] = set(taken or ())
    for i, container in enumerate(values if isinstance(values, list) else []):
        where = f"{path}[{i}]"
        if not isinstance(container, dict):
            causes.append(f.type_invalid(where, "must be an object"))
            continue
        causes += _container(container, volume_names, where)
        name = container.get("name")
        if isinstance(name, str) and name:
            if name in names:
                causes.append(f.duplicate(f"{where}.name", name))
            names.add(name)
        restart = container.get("restartPolicy")
        if restart and required:
            causes.append(f.forbidden(f"{where}.restartPolicy", "may not be set for non-init containers"))
        elif restart and restart != "Always":  # init containers: only sidecars (Always)
            causes.append(f.not_supported(f"{where}.restartPolicy", restart, ("Always",)))
    return causes


def pod_spec(spec: Any, path: str) -> list[Cause]:
    if not isinstance(spec, dict):
        return [f.required(path)]
    volume_names, causes = volumes(spec.get("volumes"), f"{path}.volumes")
    causes += _containers(spec.get("containers"), volume_names, f"{path}.containers", required=True)
    regular = {str(c.get("name")) for _, c in _dicts(spec.get("containers"))}
    causes += _containers(spec.get("initContainers"), volume_names, f"{path}.initContainers", required=False,
                          taken=regular)
    restart = spec.get("restartPolicy")
    if not restart:
        causes.append(f.required(f"{path}.restartPolicy"))
    elif restart not in RESTART_POLICIES:
        causes.append(f.not_supported(f"{path}.restartPolicy", restart, RESTART_POLICIES))
    dns = spec.get("dnsPolicy")
    if not dns:
        causes.append(f.required(f"{path}.dnsPolicy"))
    elif dns not in DNS_POLICIES:
        causes.append(f.not_supported(f"{path}.dnsPolicy", dns, DNS_POLICIES))
    causes += f.labels(spec.get("nodeSelector"), f"{path}.nodeSelector")
    account = spec.get("serviceAccountName")
    if isinstance(account, str) and account:
        causes += f.each(f"{path}.serviceAccountName", account, f.dns1123_subdomain(account))
    for key in ("hostname", "subdomain"):
        value = spec.get(key)
        if isinstance(value, str) and value:
            causes += f.each(f"{path}.{key}", value, f.dns1123_label(value))
    deadline = spec.get("activeDeadlineSeconds")
    if isinstance(deadline, int) and not isinstance(deadline, bool) and deadline <= 0:
        causes.append(f.invalid(f"{path}.activeDeadlineSeconds", deadline, "must be between 1 and 2147483647, inclusive"))
    return causes


def pod_template(template: Any, path: str) -> list[Cause]:
    """ValidatePodTemplateSpec: the template's labels and annotations, then its pod spec."""
    if not isinstance(template, dict):
        return [f.required(path)]
    meta = template.get("metadata") or {}
    causes = f.labels(meta.get("labels"), f"{path}.metadata.labels")
    causes += [Cause(c.reason, c.message, c.field.replace("metadata.annotations", f"{path}.metadata.annotations"))
               for c in m.annotation_causes(meta.get("annotations"))]
    return causes + pod_spec(template.get("spec"), f"{path}.spec")


def pod_update(new_spec: Any, old_spec: Any) -> list[Cause]:
    """A pod's spec may change only in the fields UPDATABLE_POD_SPEC_FIELDS name."""
    if not isinstance(new_spec, dict) or not isinstance(old_spec, dict):
        return []
    old_spec = copy.deepcopy(old_spec)
    objects.default_pod_spec(old_spec)  # stored before a default existed: not a change
    munged = copy.deepcopy(new_spec)
    for key in ("containers", "initContainers"):
        new_list, old_list = munged.get(key), old_spec.get(key)
        if isinstance(new_list, list) and isinstance(old_list, list) and len(new_list) == len(old_list):
            for new_c, old_c in zip(new_list, old_list, strict=True):
                if isinstance(new_c, dict) and isinstance(old_c, dict) and "image" in old_c:
                    new_c["image"] = old_c["image"]
    for key in ("activeDeadlineSeconds", "terminationGracePeriodSeconds"):
        if key in old_spec:
            munged[key] = old_spec[key]
        else:
            munged.pop(key, None)
    old_tolerations = old_spec.get("tolerations") or []
    new_tolerations = munged.get("tolerations") or []
    if isinstance(new_tolerations, list) and all(t in new_tolerations for t in old_tolerations):
        if "tolerations" in old_spec:
            munged["tolerations"] = old_spec["tolerations"]
        else:
            munged.pop("tolerations", None)
    if munged == old_spec:
        return []
    changed = sorted(k for k in set(munged) | set(old_spec) if munged.get(k) != old_spec.get(k))
    diff = "\n".join(f"  spec.{k}: changed" for k in changed)
    return [f.forbidden("spec", "pod updates may not change fields other than "
                        + ",".join(UPDATABLE_POD_SPEC_FIELDS) + "\n" + diff)]
