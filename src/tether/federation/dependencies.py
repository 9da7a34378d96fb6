"""What a workload's pod template references, for Karmada's `propagateDeps`.

Mirrors Karmada's built-in InterpretDependency (GetDependenciesFromPodTemplate) for Pod,
Deployment, ReplicaSet, StatefulSet, DaemonSet, Job and CronJob: ConfigMaps (configMap and
projected volumes, env `configMapKeyRef`, `envFrom.configMapRef`), Secrets (secret and projected
volumes, the `secretRef`s of CSI/CephFS/Cinder/FlexVolume/iSCSI/RBD/ScaleIO/StorageOS volumes,
Azure File `secretName`, env `secretKeyRef`, `envFrom.secretRef`, `imagePullSecrets`), the
ServiceAccount (except `default`, which every namespace has) and PersistentVolumeClaims. All
containers count: init, regular and ephemeral. Result order: ConfigMaps, Secrets,
ServiceAccounts, PVCs, each sorted by name; all in the template's namespace.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ._util import items, mapping, nested
from .model import Obj, ResourceRef

_POD_SPEC_PATH: Mapping[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Deployment": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
# Volume plugins whose credentials live in a `secretRef: {name}`.
_SECRET_REF_VOLUMES = (
    "cephfs", "cinder", "flexVolume", "iscsi", "rbd", "scaleIO", "storageos",
)


def pod_spec(template: Obj) -> Mapping[str, Any] | None:
    """The pod spec inside a workload template, or None for kinds without one."""
    path = _POD_SPEC_PATH.get(str(template.get("kind", "")))
    return None if path is None else mapping(nested(template, *path))


def _containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in items(spec.get(field)):
            yield mapping(container)


def _names(spec: Mapping[str, Any]) -> tuple[set[str], set[str], set[str]]:
    configmaps: set[str] = set()
    secrets: set[str] = set()
    claims: set[str] = set()
    for volume in (mapping(v) for v in items(spec.get("volumes"))):
        configmaps.add(str(mapping(volume.get("configMap")).get("name", "")))
        secrets.add(str(mapping(volume.get("secret")).get("secretName", "")))
        claims.add(str(mapping(volume.get("persistentVolumeClaim")).get("claimName", "")))
        secrets.add(str(mapping(volume.get("azureFile")).get("secretName", "")))
        csi = mapping(volume.get("csi"))
        secrets.add(str(mapping(csi.get("nodePublishSecretRef")).get("name", "")))
        for plugin in _SECRET_REF_VOLUMES:
            secrets.add(str(nested(volume, plugin, "secretRef", "name") or ""))
        for source in (mapping(s) for s in items(nested(volume, "projected", "sources"))):
            configmaps.add(str(mapping(source.get("configMap")).get("name", "")))
            secrets.add(str(mapping(source.get("secret")).get("name", "")))
    for container in _containers(spec):
        for env in (mapping(e) for e in items(container.get("env"))):
            ref = mapping(env.get("valueFrom"))
            configmaps.add(str(mapping(ref.get("configMapKeyRef")).get("name", "")))
            secrets.add(str(mapping(ref.get("secretKeyRef")).get("name", "")))
        for env_from in (mapping(e) for e in items(container.get("envFrom"))):
            configmaps.add(str(mapping(env_from.get("configMapRef")).get("name", "")))
            secrets.add(str(mapping(env_from.get("secretRef")).get("name", "")))
    for pull in items(spec.get("imagePullSecrets")):
        secrets.add(str(mapping(pull).get("name", "")))
    return configmaps - {""}, secrets - {""}, claims - {""}


def dependencies(template: Obj) -> tuple[ResourceRef, ...]:
    """Objects the template's pods need in a member before they can start."""
    spec = pod_spec(template)
    if spec is None:
        return ()
    namespace = str(nested(template, "metadata", "namespace") or "")
    configmaps, secrets, claims = _names(spec)
    account = str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "")
    accounts = {account} - {"", "default"}
    refs = [ResourceRef("v1", "ConfigMap", namespace, n) for n in sorted(configmaps)]
    refs += [ResourceRef("v1", "Secret", namespace, n) for n in sorted(secrets)]
    refs += [ResourceRef("v1", "ServiceAccount", namespace, n) for n in sorted(accounts)]
    refs += [ResourceRef("v1", "PersistentVolumeClaim", namespace, n) for n in sorted(claims)]
    return tuple(refs)
