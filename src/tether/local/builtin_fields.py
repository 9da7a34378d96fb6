"""The fields of common built-in kinds, for fieldValidation (Strict, Warn, Ignore).

kube-apiserver decodes a built-in object into its Go type, so a field the type does not have is
unknown: refused under Strict, dropped with a warning under Warn, dropped silently under Ignore.
This table holds the fields of the kinds users write most (pods and workloads, Services,
ConfigMaps, Secrets, Namespaces, ServiceAccounts, RBAC, Ingress, NetworkPolicy). Where a part of
a type is marked ANY, everything below it is accepted as sent (affinity, probes' handlers, volume
sources other than the common ones, status): unknown fields there are kept, not refused. Other
kinds are checked only in `metadata`, which every kind (custom resources too) shares.

Pure: `unknown_fields` reports and, when asked, removes; nothing else is touched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["covers", "shape_problem", "unknown_fields"]

# A field's description: ANY (not checked below), "Name" (a struct in STRUCTS), "[]Name" (a
# list of them), STRINGS (a list of strings) or MAP (a map of strings).
ANY: Final = None
STRINGS: Final = "[]string"
MAP: Final = "map[string]string"
Desc = str | None


def _fields(*names: str, **typed: Desc) -> dict[str, Desc]:
    out: dict[str, Desc] = dict.fromkeys(names, ANY)
    out.update(typed)
    return out


_CONTAINER = _fields(
    "image", "imagePullPolicy", "name", "restartPolicy", "restartPolicyRules",
    "stdin", "stdinOnce", "terminationMessagePath", "terminationMessagePolicy", "tty", "workingDir",
    args=STRINGS, command=STRINGS, env="[]EnvVar", envFrom="[]EnvFromSource", lifecycle="Lifecycle", livenessProbe="Probe",
    ports="[]ContainerPort", readinessProbe="Probe", resizePolicy="[]ContainerResizePolicy",
    resources="ResourceRequirements", securityContext="SecurityContext", startupProbe="Probe",
    volumeDevices="[]VolumeDevice", volumeMounts="[]VolumeMount",
)

STRUCTS: Final[dict[str, dict[str, Desc]]] = {
    "ObjectMeta": _fields(
        "annotations", "creationTimestamp", "deletionGracePeriodSeconds", "deletionTimestamp",
        "generateName", "generation", "labels", "name", "namespace", "resourceVersion",
        "selfLink", "uid", finalizers=STRINGS, ownerReferences="[]OwnerReference",
        managedFields="[]ManagedFieldsEntry",
    ),
    "OwnerReference": _fields("apiVersion", "blockOwnerDeletion", "controller", "kind", "name", "uid"),
    "ManagedFieldsEntry": _fields("apiVersion", "fieldsType", "fieldsV1", "manager", "operation",
                                  "subresource", "time"),
    "LabelSelector": _fields(matchLabels=MAP, matchExpressions="[]LabelSelectorRequirement"),
    "LabelSelectorRequirement": _fields("key", "operator", "values"),
    "LocalObjectReference": _fields("name"),
    # pods
    "PodTemplateSpec": _fields(metadata="ObjectMeta", spec="PodSpec"),
    "PodSpec": _fields(
        "activeDeadlineSeconds", "affinity", "automountServiceAccountToken", "dnsPolicy",
        "enableServiceLinks", "hostIPC", "hostNetwork", "hostPID", "hostUsers", "hostname",
        "hostnameOverride", "nodeName", "overhead", "preemptionPolicy", "priority",
        "priorityClassName", "resourceClaims", "restartPolicy", "runtimeClassName", "schedulerName",
        "serviceAccount", "serviceAccountName", "setHostnameAsFQDN", "shareProcessNamespace",
        "subdomain", "terminationGracePeriodSeconds", "workloadRef",
        nodeSelector=MAP, containers="[]Container", dnsConfig="PodDNSConfig",
        ephemeralContainers="[]EphemeralContainer",
        hostAliases="[]HostAlias", imagePullSecrets="[]LocalObjectReference",
        initContainers="[]Container", os="PodOS", readinessGates="[]PodReadinessGate",
        resources="ResourceRequirements", schedulingGates="[]PodSchedulingGate",
        securityContext="PodSecurityContext", tolerations="[]Toleration",
        topologySpreadConstraints="[]TopologySpreadConstraint", volumes="[]Volume",
    ),
    "Container": _CONTAINER,
    "EphemeralContainer": {**_CONTAINER, "targetContainerName": ANY},
    "EnvVar": _fields("name", "value", valueFrom="EnvVarSource"),
    "EnvVarSource": _fields("fileKeyRef", configMapKeyRef="KeySelector", fieldRef="ObjectFieldSelector",
                            resourceFieldRef="ResourceFieldSelector", secretKeyRef="KeySelector"),
    "KeySelector": _fields("key", "name", "optional"),
    "ObjectFieldSelector": _fields("apiVersion", "fieldPath"),
    "ResourceFieldSelector": _fields("containerName", "divisor", "resource"),
    "EnvFromSource": _fields("prefix", configMapRef="EnvSource", secretRef="EnvSource"),
    "EnvSource": _fields("name", "optional"),
    "ContainerPort": _fields("containerPort", "hostIP", "hostPort", "name", "protocol"),
    "ContainerResizePolicy": _fields("resourceName", "restartPolicy"),
    "ResourceRequirements": _fields("claims", "limits", "requests"),
    "VolumeMount": _fields("mountPath", "mountPropagation", "name", "readOnly", "recursiveReadOnly",
                           "subPath", "subPathExpr"),
    "VolumeDevice": _fields("devicePath", "name"),
    "Probe": _fields("exec", "failureThreshold", "grpc", "initialDelaySeconds", "periodSeconds",
                     "successThreshold", "tcpSocket", "terminationGracePeriodSeconds",
                     "timeoutSeconds", httpGet="HTTPGetAction"),
    "HTTPGetAction": _fields("host", "httpHeaders", "path", "port", "scheme"),
    "Lifecycle": _fields("stopSignal", postStart="LifecycleHandler", preStop="LifecycleHandler"),
    "LifecycleHandler": _fields("exec", "sleep", "tcpSocket", httpGet="HTTPGetAction"),
    "SecurityContext": _fields(
        "allowPrivilegeEscalation", "appArmorProfile", "capabilities", "privileged", "procMount",
        "readOnlyRootFilesystem", "runAsGroup", "runAsNonRoot", "runAsUser", "seLinuxOptions",
        "seccompProfile", "windowsOptions",
    ),
    "PodSecurityContext": _fields(
        "appArmorProfile", "fsGroup", "fsGroupChangePolicy", "runAsGroup", "runAsNonRoot",
        "runAsUser", "seLinuxChangePolicy", "seLinuxOptions", "seccompProfile",
        "supplementalGroups", "supplementalGroupsPolicy", "sysctls", "windowsOptions",
    ),
    "Toleration": _fields("effect", "key", "operator", "tolerationSeconds", "value"),
    "TopologySpreadConstraint": _fields(
        "matchLabelKeys", "maxSkew", "minDomains", "nodeAffinityPolicy", "nodeTaintsPolicy",
        "topologyKey", "whenUnsatisfiable", labelSelector="LabelSelector",
    ),
    "HostAlias": _fields("hostnames", "ip"),
    "PodDNSConfig": _fields("nameservers", "options", "searches"),
    "PodOS": _fields("name"),
    "PodReadinessGate": _fields("conditionType"),
    "PodSchedulingGate": _fields("name"),
    "Volume": _fields(
        "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "csi", "downwardAPI",
        "ephemeral", "fc", "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "glusterfs",
        "image", "iscsi", "name", "nfs", "photonPersistentDisk", "portworxVolume", "projected",
        "quobyte", "rbd", "scaleIO", "storageos", "vsphereVolume",
        configMap="ConfigMapVolumeSource", emptyDir="EmptyDirVolumeSource",
        hostPath="HostPathVolumeSource", persistentVolumeClaim="PVCVolumeSource",
        secret="SecretVolumeSource",
    ),
    "ConfigMapVolumeSource": _fields("defaultMode", "name", "optional", items="[]KeyToPath"),
    "SecretVolumeSource": _fields("defaultMode", "optional", "secretName", items="[]KeyToPath"),
    "KeyToPath": _fields("key", "mode", "path"),
    "EmptyDirVolumeSource": _fields("medium", "sizeLimit"),
    "HostPathVolumeSource": _fields("path", "type"),
    "PVCVolumeSource": _fields("claimName", "readOnly"),
    # workloads
    "DeploymentSpec": _fields(
        "minReadySeconds", "paused", "progressDeadlineSeconds", "replicas", "revisionHistoryLimit",
        selector="LabelSelector", strategy="DeploymentStrategy", template="PodTemplateSpec",
    ),
    "DeploymentStrategy": _fields("type", rollingUpdate="RollingUpdate"),
    "RollingUpdate": _fields("maxSurge", "maxUnavailable"),
    "ReplicaSetSpec": _fields("minReadySeconds", "replicas", selector="LabelSelector",
                              template="PodTemplateSpec"),
    "ReplicationControllerSpec": _fields("minReadySeconds", "replicas", "selector",
                                         template="PodTemplateSpec"),
    "StatefulSetSpec": _fields(
        "minReadySeconds", "podManagementPolicy", "replicas", "revisionHistoryLimit", "serviceName",
        "volumeClaimTemplates", ordinals="StatefulSetOrdinals",
        persistentVolumeClaimRetentionPolicy="PVCRetentionPolicy", selector="LabelSelector",
        template="PodTemplateSpec", updateStrategy="StatefulSetUpdateStrategy",
    ),
    "StatefulSetOrdinals": _fields("start"),
    "PVCRetentionPolicy": _fields("whenDeleted", "whenScaled"),
    "StatefulSetUpdateStrategy": _fields("type", rollingUpdate="StatefulSetRollingUpdate"),
    "StatefulSetRollingUpdate": _fields("maxUnavailable", "partition"),
    "DaemonSetSpec": _fields("minReadySeconds", "revisionHistoryLimit", selector="LabelSelector",
                             template="PodTemplateSpec", updateStrategy="DeploymentStrategy"),
    "JobSpec": _fields(
        "activeDeadlineSeconds", "backoffLimit", "backoffLimitPerIndex", "completionMode",
        "completions", "managedBy", "manualSelector", "maxFailedIndexes", "parallelism",
        "podFailurePolicy", "podReplacementPolicy", "successPolicy", "suspend",
        "ttlSecondsAfterFinished", selector="LabelSelector", template="PodTemplateSpec",
    ),
    "CronJobSpec": _fields(
        "concurrencyPolicy", "failedJobsHistoryLimit", "schedule", "startingDeadlineSeconds",
        "successfulJobsHistoryLimit", "suspend", "timeZone", jobTemplate="JobTemplateSpec",
    ),
    "JobTemplateSpec": _fields(metadata="ObjectMeta", spec="JobSpec"),
    # services and networking
    "ServiceSpec": _fields(
        "allocateLoadBalancerNodePorts", "clusterIP", "externalName",
        "externalTrafficPolicy", "healthCheckNodePort", "internalTrafficPolicy",
        "ipFamilyPolicy", "loadBalancerClass", "loadBalancerIP",
        "publishNotReadyAddresses", "sessionAffinity", "sessionAffinityConfig",
        "trafficDistribution", "type", clusterIPs=STRINGS, externalIPs=STRINGS, ipFamilies=STRINGS,
        loadBalancerSourceRanges=STRINGS, selector=MAP, ports="[]ServicePort",
    ),
    "ServicePort": _fields("appProtocol", "name", "nodePort", "port", "protocol", "targetPort"),
    "IngressSpec": _fields("defaultBackend", "ingressClassName", rules="[]IngressRule", tls="[]IngressTLS"),
    "IngressRule": _fields("host", http="HTTPIngressRuleValue"),
    "HTTPIngressRuleValue": _fields(paths="[]HTTPIngressPath"),
    "HTTPIngressPath": _fields("backend", "path", "pathType"),
    "IngressTLS": _fields("hosts", "secretName"),
    "NetworkPolicySpec": _fields("egress", "ingress", "policyTypes", podSelector="LabelSelector"),
    "NamespaceSpec": _fields(finalizers=STRINGS),
    # rbac
    "PolicyRule": _fields("apiGroups", "nonResourceURLs", "resourceNames", "resources", "verbs"),
    "AggregationRule": _fields(clusterRoleSelectors="[]LabelSelector"),
    "RoleRef": _fields("apiGroup", "kind", "name"),
    "Subject": _fields("apiGroup", "kind", "name", "namespace"),
    "Object": {},  # spec and status of kinds not in KINDS: objects, fields unchecked
}

RBAC = "rbac.authorization.k8s.io"

# (group, kind) -> top-level fields besides apiVersion, kind, metadata (and status when the type
# has a status subresource).
KINDS: Final[dict[tuple[str, str], dict[str, Desc]]] = {
    ("", "Pod"): _fields(spec="PodSpec"),
    ("", "PodTemplate"): _fields(template="PodTemplateSpec"),
    ("", "ReplicationController"): _fields(spec="ReplicationControllerSpec"),
    ("", "Service"): _fields(spec="ServiceSpec"),
    # data: the kind's own validation names the bad key (`422 ... data[a]`).
    ("", "ConfigMap"): _fields("binaryData", "data", "immutable"),
    ("", "Secret"): _fields("data", "immutable", "stringData", "type"),
    ("", "Namespace"): _fields(spec="NamespaceSpec"),
    ("", "ServiceAccount"): _fields("automountServiceAccountToken", "secrets",
                                    imagePullSecrets="[]LocalObjectReference"),
    ("apps", "Deployment"): _fields(spec="DeploymentSpec"),
    ("apps", "ReplicaSet"): _fields(spec="ReplicaSetSpec"),
    ("apps", "StatefulSet"): _fields(spec="StatefulSetSpec"),
    ("apps", "DaemonSet"): _fields(spec="DaemonSetSpec"),
    ("batch", "Job"): _fields(spec="JobSpec"),
    ("batch", "CronJob"): _fields(spec="CronJobSpec"),
    ("networking.k8s.io", "Ingress"): _fields(spec="IngressSpec"),
    ("networking.k8s.io", "NetworkPolicy"): _fields(spec="NetworkPolicySpec"),
    (RBAC, "Role"): _fields(rules="[]PolicyRule"),
    (RBAC, "ClusterRole"): _fields(aggregationRule="AggregationRule", rules="[]PolicyRule"),
    (RBAC, "RoleBinding"): _fields(roleRef="RoleRef", subjects="[]Subject"),
    (RBAC, "ClusterRoleBinding"): _fields(roleRef="RoleRef", subjects="[]Subject"),
}

_META_ONLY: Final[dict[str, Desc]] = {"metadata": "ObjectMeta"}


def covers(group: str, kind: str) -> bool:
    """Whether every field of the kind is checked (else only metadata is)."""
    return (group, kind) in KINDS


def unknown_fields(group: str, kind: str, obj: Any, *, has_status: bool, remove: bool) -> list[str]:
    """Paths of the fields `obj` has and its kind does not (`spec.template.spec.foo`), in the
    order they appear; with `remove`, those fields are deleted from `obj` as well."""
    if not isinstance(obj, dict):
        return []
    top = KINDS.get((group, kind))
    found: list[str] = []
    if top is None:
        _walk_struct(obj, _META_ONLY, "", found, remove, lenient=True)
        return found
    fields = {"apiVersion": ANY, "kind": ANY, "metadata": "ObjectMeta", **top}
    if has_status:
        fields["status"] = ANY
    _walk_struct(obj, fields, "", found, remove, lenient=False)
    return found


def _top_fields(group: str, kind: str, has_status: bool) -> dict[str, Desc]:
    top = KINDS.get((group, kind))
    fields: dict[str, Desc] = {"metadata": "ObjectMeta", **(top or {})}
    if top is None:
        fields.update(spec="Object", status="Object")
    elif has_status:
        fields["status"] = "Object"
    return fields


def shape_problem(group: str, kind: str, version: str, obj: dict[str, Any], *, has_status: bool,
                  custom: bool = False, drop_nulls: bool = True) -> str | None:
    """Why a built-in object could not be decoded into its Go type (an object where a list
    belongs, a number where a string list belongs, ...), in the words of kube-apiserver's
    decoding error; None when it could. A null typed field is dropped, as decoding makes it
    the zero value that the server never writes out (unless `drop_nulls` is false: `obj` may
    share parts with a stored object). `custom`: a custom resource, whose schema types the rest."""
    fields: Mapping[str, Desc] = {"metadata": "ObjectMeta"} if custom else _top_fields(group, kind, has_status)
    problem = _shape(obj, fields, kind, "", drop_nulls)
    if problem is None:
        return None
    return f'{kind} in version "{version}" cannot be handled as a {kind}: json: {problem}'


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _shape(obj: dict[str, Any], fields: Mapping[str, Desc], struct: str, prefix: str,
           drop_nulls: bool) -> str | None:
    if drop_nulls and None in obj.values():
        for key in [k for k, v in obj.items() if v is None and fields.get(k) is not None]:
            del obj[key]
    for key, value in obj.items():
        desc = fields.get(key)
        if desc is None or value is None:
            continue
        if desc == STRINGS:
            if type(value) is not list or not all(type(v) is str for v in value):
                return _wrong(value, struct, prefix, key, "[]string")
        elif desc == MAP:
            if type(value) is not dict or not all(type(v) is str for v in value.values()):
                return _wrong(value, struct, prefix, key, "map[string]string")
        elif desc.startswith("[]"):
            if type(value) is not list or not all(type(v) is dict for v in value):
                return _wrong(value, struct, prefix, key, f"[]v1.{desc[2:]}")
            item_fields = STRUCTS[desc[2:]]
            for index, item in enumerate(value):
                problem = _shape(item, item_fields, struct, f"{_join(prefix, key)}[{index}]", drop_nulls)
                if problem:
                    return problem
        elif type(value) is not dict:
            return _wrong(value, struct, prefix, key, f"v1.{desc}")
        elif value:
            problem = _shape(value, STRUCTS[desc], struct, _join(prefix, key), drop_nulls)
            if problem:
                return problem
    return None


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _wrong(value: Any, struct: str, prefix: str, key: str, type_name: str) -> str:
    return (f"cannot unmarshal {_json_type(value)} into Go struct field {struct}.{_join(prefix, key)} "
            f"of type {type_name}")


def _walk_struct(obj: dict[str, Any], fields: Mapping[str, Desc], prefix: str, found: list[str],
                 remove: bool, *, lenient: bool = False) -> None:
    unknown: list[str] = []
    for key, value in obj.items():
        if key not in fields:
            if not lenient:
                unknown.append(key)
            continue
        desc = fields[key]
        if desc is None or value is None or desc in (STRINGS, MAP):
            continue
        path = f"{prefix}.{key}" if prefix else key
        if desc.startswith("[]"):
            if isinstance(value, list):
                struct = STRUCTS[desc[2:]]
                for index, item in enumerate(value):
                    if isinstance(item, dict):
                        _walk_struct(item, struct, f"{path}[{index}]", found, remove)
        elif isinstance(value, dict):
            _walk_struct(value, STRUCTS[desc], path, found, remove)
    for key in unknown:
        found.append(f"{prefix}.{key}" if prefix else key)
        if remove:
            del obj[key]
