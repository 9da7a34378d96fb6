"""What a workload's pod template references, for Karmada's `propagateDeps`.

Mirrors Karmada's built-in InterpretDependency (GetDependenciesFromPodTemplate) for Pod,
Deployment, ReplicaSet, StatefulSet, DaemonSet, Job and CronJob: ConfigMaps (configMap and
projected volumes, env `configMapKeyRef`, `envFrom.configMapRef`), Secrets (secret and projected
volumes, the `secretRef`s of CSI/CephFS/Cinder/FlexVolume/iSCSI/RBD/ScaleIO/StorageOS volumes,
Azure File `secretName`, env `secretKeyRef`, `envFrom.secretRef`, `imagePullSecrets`), the
ServiceAccount (except `default`, which every namespace has) and PersistentVolumeClaims. All
containers count: init, regular and ephemeral. Result order: ConfigMaps, Secrets,
ServiceAccounts, PVCs, each sorted by name; all in the template's namespace.

How they travel (Karmada's "attached bindings", reference-counted): a template's Work names
what it needs in the annotation `work.tether.io/requires` ("ConfigMap/a,Secret/b"), and each
dependency gets Works of its own (`dependency_plan`, `dependency_works`): one per cluster where
some Work still requires it, named `dependency-<kind>-<namespace>-<name>`, dialect
`karmada-dependency`. A dependency shared by two workloads therefore stays in a member while
either still runs there, and goes with the last. Its conflict resolution is Overwrite when any
requiring Work says so; its copies are preserved on deletion when any requiring Work preserves.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from tether.objects import ObjView as Obj

from . import works as W
from ._util import items, mapping, nested, thaw
from .metadata import stamp, strip_server_fields
from .model import ConflictResolution, PropagationPlan, ResourceRef, WorkItem

REQUIRES_ANNOTATION = "work.tether.io/requires"  # on a template's Works: "Kind/name,..."
DEPENDENCY_DIALECT = "karmada-dependency"
DEPENDENCY_KINDS = ("ConfigMap", "Secret", "ServiceAccount", "PersistentVolumeClaim")

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


def encode_requires(refs: Iterable[ResourceRef]) -> str:
    return ",".join(sorted({f"{r.kind}/{r.name}" for r in refs}))


def decode_requires(text: str, namespace: str) -> frozenset[ResourceRef]:
    """The dependencies a Work's annotation names (all core/v1, in the template's namespace);
    entries of other kinds are ignored."""
    out = set()
    for entry in text.split(","):
        kind, _, name = entry.strip().partition("/")
        if kind in DEPENDENCY_KINDS and name:
            out.add(ResourceRef("v1", kind, namespace, name))
    return frozenset(out)


def dependency_plan(obj: Obj, ref: ResourceRef, clusters: Iterable[str], *,
                    overwrite: bool, preserve: bool) -> PropagationPlan:
    """A dependency's copies for the clusters whose Works require it."""
    manifest = strip_server_fields(thaw(obj))
    if ref.kind == "ServiceAccount":
        manifest.pop("secrets", None)  # a member's token controller fills in its own
    stamp(manifest, "karmada", ref)
    resolution: ConflictResolution = "Overwrite" if overwrite else "Abort"
    return PropagationPlan(
        source=ref, dialect="karmada",
        works=tuple(WorkItem(c, manifest) for c in sorted(set(clusters))),
        conflict_resolution=resolution, preserve_on_deletion=preserve)


def dependency_work_name(ref: ResourceRef) -> str:
    return W.work_name(f"dependency-{ref.kind}", ref.namespace, ref.name)


def dependency_source_hash(ref: ResourceRef) -> str:
    """Its own hash: a dependency's Works are never taken for those of a template that happens
    to be the same object (propagated by a policy of its own)."""
    return W.short_hash(f"{DEPENDENCY_DIALECT}:{W.source_key(ref)}", 16)


def dependency_works(plan: PropagationPlan) -> list[W.DesiredWork]:
    """The Works of a `dependency_plan`: as a template's, with the dependency's name, dialect
    and source hash."""
    out = []
    name = dependency_work_name(plan.source)
    for desired in W.desired_works(plan, ensure_namespace=True):
        body = thaw(desired.body)
        body["metadata"]["name"] = name
        body["metadata"]["labels"][W.DIALECT_LABEL] = DEPENDENCY_DIALECT
        body["metadata"]["labels"][W.SOURCE_HASH_LABEL] = dependency_source_hash(plan.source)
        namespace = body["metadata"]["namespace"]
        for manifest in body["spec"]["workload"]["manifests"]:
            manifest["metadata"]["annotations"][W.WORK_NAME_ANNOTATION] = f"{namespace}/{name}"
        out.append(W.DesiredWork(desired.cluster, name, body))
    return out
