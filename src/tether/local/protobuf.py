"""Decode Kubernetes protobuf request bodies into the JSON-shaped objects the server stores.

Since 1.32, kubectl's typed clients send `application/vnd.kubernetes.protobuf` bodies for
their generator commands (`create namespace|deployment|...`, `auth can-i`, `create token`).
This module is a pure decoder: no I/O, no generated code. It reads the protobuf wire format
with a tiny reader and walks a hand-written table of field numbers (from the public
`k8s.io/api` `generated.proto` definitions) that maps each field to its JSON name.

Envelope: the bytes `k8s\\x00`, then a `runtime.Unknown` message
`{1: typeMeta{1: apiVersion, 2: kind}, 2: raw, 3: contentEncoding, 4: contentType}`, where `raw`
is the gogo-protobuf encoding of the object.

gogo writes every non-pointer scalar, so an unset string arrives as `""` and an unset int as
`0`. Go's JSON encoder drops those (`omitempty`), so we do too, except for fields that are Go
pointers or lack `omitempty` (`keep_zero`), where a zero is a real value (`replicas: 0`).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

__all__ = ["MAGIC", "SUPPORTED_KINDS", "ProtobufError", "decode_k8s_protobuf"]

MAGIC: Final = b"k8s\x00"

# Wire types. Groups (3, 4) were never used by Kubernetes, so they are treated as corruption.
_VARINT: Final = 0
_I64: Final = 1
_LEN: Final = 2
_I32: Final = 5

_MAX_VARINT_BYTES: Final = 10
_U64: Final = 1 << 64

# Go's zero time.Time as Unix seconds; `metav1.Time` normally encodes it as an empty
# message, but a hand-built Timestamp could carry it, and JSON renders it as null.
_GO_ZERO_TIME_SECONDS: Final = -62135596800


class ProtobufError(Exception):
    """The body is not a decodable Kubernetes protobuf message.

    `kind`/`api_version` are set when the envelope was readable but the kind has no table,
    so the server can answer 415 UnsupportedMediaType naming it.
    """

    def __init__(self, message: str, *, kind: str = "", api_version: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.api_version = api_version


# ---------------------------------------------------------------------------------------
# Wire-format reader
# ---------------------------------------------------------------------------------------

WireValue = int | bytes


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Return (unsigned value, next position)."""
    value = 0
    for i in range(_MAX_VARINT_BYTES):
        if pos + i >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if byte < 0x80:
            return value % _U64, pos + i + 1
    raise ProtobufError("varint longer than 10 bytes")


def _take(data: bytes, pos: int, size: int) -> tuple[bytes, int]:
    end = pos + size
    if end > len(data):
        raise ProtobufError(f"truncated field: need {size} bytes at offset {pos}")
    return data[pos:end], end


def _iter_fields(data: bytes) -> Iterator[tuple[int, int, WireValue]]:
    """Yield (field number, wire type, value); value is an int for varints, else raw bytes."""
    pos = 0
    while pos < len(data):
        tag, pos = _read_varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ProtobufError("field number 0")
        value: WireValue
        if wire == _VARINT:
            value, pos = _read_varint(data, pos)
        elif wire == _LEN:
            size, pos = _read_varint(data, pos)
            value, pos = _take(data, pos, size)
        elif wire == _I64:
            value, pos = _take(data, pos, 8)
        elif wire == _I32:
            value, pos = _take(data, pos, 4)
        else:
            raise ProtobufError(f"unsupported wire type {wire} for field {number}")
        yield number, wire, value


def _signed(value: int) -> int:
    # int32/int64 are varints of the 64-bit two's complement (no zigzag in k8s protos).
    return value - _U64 if value >= 1 << 63 else value


# ---------------------------------------------------------------------------------------
# Schema
# ---------------------------------------------------------------------------------------

# Scalar types; anything else in `Field.type` names a message in SCHEMA or _SPECIAL.
_STRING: Final = "string"
_BYTES: Final = "bytes"
_INT: Final = "int"
_BOOL: Final = "bool"
_SCALARS: Final = frozenset({_STRING, _BYTES, _INT, _BOOL})


@dataclass(frozen=True, slots=True)
class Field:
    name: str  # JSON name
    type: str  # a scalar type or a message name
    repeated: bool = False
    map_value: bool = False  # map<string, type>: entries are messages {1: key, 2: value}
    keep_zero: bool = False  # Go pointer or no `omitempty`: 0/false is a real value
    inline: bool = False  # Go embedded struct: JSON flattens its fields into the parent


# Terse constructors so each table reads like its `generated.proto` message, one field a line:
# s/i/b scalar, m message, r* repeated, *map maps keyed by string, p* Go-pointer scalars.
def s(name: str) -> Field:
    return Field(name, _STRING)


def i(name: str, keep_zero: bool = False) -> Field:
    return Field(name, _INT, keep_zero=keep_zero)


def b(name: str, keep_zero: bool = False) -> Field:
    return Field(name, _BOOL, keep_zero=keep_zero)


def m(name: str, message: str, inline: bool = False) -> Field:
    return Field(name, message, inline=inline)


def rs(name: str) -> Field:
    return Field(name, _STRING, repeated=True)


def ri(name: str) -> Field:
    return Field(name, _INT, repeated=True)


def rm(name: str, message: str) -> Field:
    return Field(name, message, repeated=True)


def smap(name: str) -> Field:
    return Field(name, _STRING, map_value=True)


def bmap(name: str) -> Field:
    return Field(name, _BYTES, map_value=True)


def mmap(name: str, message: str) -> Field:
    return Field(name, message, map_value=True)


# Pointer scalars (`*int32`, `*bool`) in Go: zero must survive.
def pi(name: str) -> Field:
    return i(name, keep_zero=True)


def pb(name: str) -> Field:
    return b(name, keep_zero=True)


Table = dict[int, Field]

_META: Final[dict[str, Table]] = {
    "ObjectMeta": {
        1: s("name"),
        2: s("generateName"),
        3: s("namespace"),
        4: s("selfLink"),
        5: s("uid"),
        6: s("resourceVersion"),
        7: i("generation"),
        8: m("creationTimestamp", "Time"),
        9: m("deletionTimestamp", "Time"),
        10: pi("deletionGracePeriodSeconds"),
        11: smap("labels"),
        12: smap("annotations"),
        13: rm("ownerReferences", "OwnerReference"),
        14: rs("finalizers"),
        17: rm("managedFields", "ManagedFieldsEntry"),
    },
    "OwnerReference": {
        1: s("kind"),
        3: s("name"),
        4: s("uid"),
        5: s("apiVersion"),
        6: pb("controller"),
        7: pb("blockOwnerDeletion"),
    },
    "ManagedFieldsEntry": {
        1: s("manager"),
        2: s("operation"),
        3: s("apiVersion"),
        4: m("time", "Time"),
        6: s("fieldsType"),
        7: m("fieldsV1", "FieldsV1"),
        8: s("subresource"),
    },
    "LabelSelector": {
        1: smap("matchLabels"),
        2: rm("matchExpressions", "LabelSelectorRequirement"),
    },
    "LabelSelectorRequirement": {1: s("key"), 2: s("operator"), 3: rs("values")},
    "Condition": {
        1: s("type"),
        2: s("status"),
        3: i("observedGeneration"),
        4: m("lastTransitionTime", "Time"),
        5: s("reason"),
        6: s("message"),
    },
    "DeleteOptions": {
        1: pi("gracePeriodSeconds"),
        2: m("preconditions", "Preconditions"),
        3: pb("orphanDependents"),
        4: s("propagationPolicy"),
        5: rs("dryRun"),
        6: pb("ignoreStoreReadErrorWithClusterBreakingPotential"),
    },
    "Preconditions": {1: s("uid"), 2: s("resourceVersion")},
}

# Shared core/v1 building blocks.
_CORE_COMMON: Final[dict[str, Table]] = {
    "ObjectReference": {
        1: s("kind"),
        2: s("namespace"),
        3: s("name"),
        4: s("uid"),
        5: s("apiVersion"),
        6: s("resourceVersion"),
        7: s("fieldPath"),
    },
    "LocalObjectReference": {1: s("name")},
    "TypedLocalObjectReference": {1: s("apiGroup"), 2: s("kind"), 3: s("name")},
    "KeyToPath": {1: s("key"), 2: s("path"), 3: pi("mode")},
    "LoadBalancerStatus": {1: rm("ingress", "LoadBalancerIngress")},
    "LoadBalancerIngress": {
        1: s("ip"),
        2: s("hostname"),
        3: s("ipMode"),
        4: rm("ports", "PortStatus"),
    },
    "PortStatus": {1: pi("port"), 2: s("protocol"), 3: s("error")},
}

_CORE_OBJECTS: Final[dict[str, Table]] = {
    "Namespace": {
        1: m("metadata", "ObjectMeta"),
        2: m("spec", "NamespaceSpec"),
        3: m("status", "NamespaceStatus"),
    },
    "NamespaceSpec": {1: rs("finalizers")},
    "NamespaceStatus": {1: s("phase")},
    "ConfigMap": {
        1: m("metadata", "ObjectMeta"),
        2: smap("data"),
        3: bmap("binaryData"),
        4: pb("immutable"),
    },
    "Secret": {
        1: m("metadata", "ObjectMeta"),
        2: bmap("data"),
        3: s("type"),
        4: smap("stringData"),
        5: pb("immutable"),
    },
    "ServiceAccount": {
        1: m("metadata", "ObjectMeta"),
        2: rm("secrets", "ObjectReference"),
        3: pb("automountServiceAccountToken"),
        4: rm("imagePullSecrets", "LocalObjectReference"),
    },
    "Service": {
        1: m("metadata", "ObjectMeta"),
        2: m("spec", "ServiceSpec"),
        3: m("status", "ServiceStatus"),
    },
    "ServiceSpec": {
        1: rm("ports", "ServicePort"),
        2: smap("selector"),
        3: s("clusterIP"),
        4: s("type"),
        5: rs("externalIPs"),
        7: s("sessionAffinity"),
        8: s("loadBalancerIP"),
        9: rs("loadBalancerSourceRanges"),
        10: s("externalName"),
        11: s("externalTrafficPolicy"),
        12: i("healthCheckNodePort"),
        13: b("publishNotReadyAddresses"),
        14: m("sessionAffinityConfig", "SessionAffinityConfig"),
        17: s("ipFamilyPolicy"),
        18: rs("clusterIPs"),
        19: rs("ipFamilies"),
        20: pb("allocateLoadBalancerNodePorts"),
        21: s("loadBalancerClass"),
        22: s("internalTrafficPolicy"),
    },
    "SessionAffinityConfig": {1: m("clientIP", "ClientIPConfig")},
    "ClientIPConfig": {1: pi("timeoutSeconds")},
    "ServicePort": {
        1: s("name"),
        2: s("protocol"),
        3: i("port", keep_zero=True),  # `json:"port"`, no omitempty
        4: m("targetPort", "IntOrString"),
        5: i("nodePort"),
        6: s("appProtocol"),
    },
    "ServiceStatus": {
        1: m("loadBalancer", "LoadBalancerStatus"),
        2: rm("conditions", "Condition"),
    },
    "ResourceQuota": {
        1: m("metadata", "ObjectMeta"),
        2: m("spec", "ResourceQuotaSpec"),
        3: m("status", "ResourceQuotaStatus"),
    },
    "ResourceQuotaSpec": {
        1: mmap("hard", "Quantity"),
        2: rs("scopes"),
        3: m("scopeSelector", "ScopeSelector"),
    },
    "ScopeSelector": {1: rm("matchExpressions", "ScopedResourceSelectorRequirement")},
    "ScopedResourceSelectorRequirement": {1: s("scopeName"), 2: s("operator"), 3: rs("values")},
    "ResourceQuotaStatus": {1: mmap("hard", "Quantity"), 2: mmap("used", "Quantity")},
    "Pod": {
        1: m("metadata", "ObjectMeta"),
        2: m("spec", "PodSpec"),
        3: m("status", "PodStatus"),
    },
    "PodStatus": {
        1: s("phase"),
        3: s("message"),
        4: s("reason"),
        5: s("hostIP"),
        6: s("podIP"),
        7: m("startTime", "Time"),
    },
    "Binding": {1: m("metadata", "ObjectMeta"), 2: m("target", "ObjectReference")},
}

_POD: Final[dict[str, Table]] = {
    "PodTemplateSpec": {1: m("metadata", "ObjectMeta"), 2: m("spec", "PodSpec")},
    "PodSpec": {
        1: rm("volumes", "Volume"),
        2: rm("containers", "Container"),
        3: s("restartPolicy"),
        4: pi("terminationGracePeriodSeconds"),
        5: pi("activeDeadlineSeconds"),
        6: s("dnsPolicy"),
        7: smap("nodeSelector"),
        8: s("serviceAccountName"),
        9: s("serviceAccount"),
        10: s("nodeName"),
        11: b("hostNetwork"),
        12: b("hostPID"),
        13: b("hostIPC"),
        14: m("securityContext", "PodSecurityContext"),
        15: rm("imagePullSecrets", "LocalObjectReference"),
        16: s("hostname"),
        17: s("subdomain"),
        19: s("schedulerName"),
        20: rm("initContainers", "Container"),
        21: pb("automountServiceAccountToken"),
        22: rm("tolerations", "Toleration"),
        24: s("priorityClassName"),
        25: pi("priority"),
        27: pb("shareProcessNamespace"),
        29: s("runtimeClassName"),
        30: pb("enableServiceLinks"),
        31: s("preemptionPolicy"),
        35: pb("setHostnameAsFQDN"),
        37: pb("hostUsers"),
    },
    "PodSecurityContext": {
        2: pi("runAsUser"),
        3: pb("runAsNonRoot"),
        4: ri("supplementalGroups"),
        5: pi("fsGroup"),
        6: pi("runAsGroup"),
        10: m("seccompProfile", "SeccompProfile"),
    },
    "SeccompProfile": {1: s("type"), 2: s("localhostProfile")},
    "Toleration": {
        1: s("key"),
        2: s("operator"),
        3: s("value"),
        4: s("effect"),
        5: pi("tolerationSeconds"),
    },
    "Container": {
        1: s("name"),
        2: s("image"),
        3: rs("command"),
        4: rs("args"),
        5: s("workingDir"),
        6: rm("ports", "ContainerPort"),
        7: rm("env", "EnvVar"),
        8: m("resources", "ResourceRequirements"),
        9: rm("volumeMounts", "VolumeMount"),
        10: m("livenessProbe", "Probe"),
        11: m("readinessProbe", "Probe"),
        12: m("lifecycle", "Lifecycle"),
        13: s("terminationMessagePath"),
        14: s("imagePullPolicy"),
        15: m("securityContext", "SecurityContext"),
        16: b("stdin"),
        17: b("stdinOnce"),
        18: b("tty"),
        19: rm("envFrom", "EnvFromSource"),
        20: s("terminationMessagePolicy"),
        22: m("startupProbe", "Probe"),
        24: s("restartPolicy"),
    },
    "ContainerPort": {
        1: s("name"),
        2: i("hostPort"),
        3: i("containerPort", keep_zero=True),  # `json:"containerPort"`, no omitempty
        4: s("protocol"),
        5: s("hostIP"),
    },
    "EnvVar": {1: s("name"), 2: s("value"), 3: m("valueFrom", "EnvVarSource")},
    "EnvVarSource": {
        1: m("fieldRef", "ObjectFieldSelector"),
        2: m("resourceFieldRef", "ResourceFieldSelector"),
        3: m("configMapKeyRef", "KeySelector"),
        4: m("secretKeyRef", "KeySelector"),
    },
    "ObjectFieldSelector": {1: s("apiVersion"), 2: s("fieldPath")},
    "ResourceFieldSelector": {
        1: s("containerName"),
        2: s("resource"),
        3: m("divisor", "Quantity"),
    },
    # ConfigMapKeySelector and SecretKeySelector share one layout.
    "KeySelector": {
        1: m("", "LocalObjectReference", inline=True),
        2: s("key"),
        3: pb("optional"),
    },
    "EnvFromSource": {
        1: s("prefix"),
        2: m("configMapRef", "EnvSourceRef"),
        3: m("secretRef", "EnvSourceRef"),
    },
    # ConfigMapEnvSource and SecretEnvSource share one layout.
    "EnvSourceRef": {1: m("", "LocalObjectReference", inline=True), 2: pb("optional")},
    "ResourceRequirements": {
        1: mmap("limits", "Quantity"),
        2: mmap("requests", "Quantity"),
        3: rm("claims", "ResourceClaim"),
    },
    "ResourceClaim": {1: s("name"), 2: s("request")},
    "VolumeMount": {
        1: s("name"),
        2: b("readOnly"),
        3: s("mountPath"),
        4: s("subPath"),
        5: s("mountPropagation"),
        6: s("subPathExpr"),
        7: s("recursiveReadOnly"),
    },
    "Volume": {1: s("name"), 2: m("", "VolumeSource", inline=True)},
    "VolumeSource": {
        1: m("hostPath", "HostPathVolumeSource"),
        2: m("emptyDir", "EmptyDirVolumeSource"),
        6: m("secret", "SecretVolumeSource"),
        10: m("persistentVolumeClaim", "PersistentVolumeClaimVolumeSource"),
        19: m("configMap", "ConfigMapVolumeSource"),
    },
    "HostPathVolumeSource": {1: s("path"), 2: s("type")},
    "EmptyDirVolumeSource": {1: s("medium"), 2: m("sizeLimit", "Quantity")},
    "SecretVolumeSource": {
        1: s("secretName"),
        2: rm("items", "KeyToPath"),
        3: pi("defaultMode"),
        4: pb("optional"),
    },
    "PersistentVolumeClaimVolumeSource": {1: s("claimName"), 2: b("readOnly")},
    "ConfigMapVolumeSource": {
        1: m("", "LocalObjectReference", inline=True),
        2: rm("items", "KeyToPath"),
        3: pi("defaultMode"),
        4: pb("optional"),
    },
    "Probe": {
        1: m("", "ProbeHandler", inline=True),
        2: i("initialDelaySeconds"),
        3: i("timeoutSeconds"),
        4: i("periodSeconds"),
        5: i("successThreshold"),
        6: i("failureThreshold"),
        7: pi("terminationGracePeriodSeconds"),
    },
    "ProbeHandler": {
        1: m("exec", "ExecAction"),
        2: m("httpGet", "HTTPGetAction"),
        3: m("tcpSocket", "TCPSocketAction"),
        4: m("grpc", "GRPCAction"),
    },
    "ExecAction": {1: rs("command")},
    "HTTPGetAction": {
        1: s("path"),
        2: m("port", "IntOrString"),
        3: s("host"),
        4: s("scheme"),
        5: rm("httpHeaders", "HTTPHeader"),
    },
    "HTTPHeader": {1: s("name"), 2: s("value")},
    "TCPSocketAction": {1: m("port", "IntOrString"), 2: s("host")},
    "GRPCAction": {1: i("port", keep_zero=True), 2: s("service")},
    "Lifecycle": {1: m("postStart", "LifecycleHandler"), 2: m("preStop", "LifecycleHandler")},
    "LifecycleHandler": {
        1: m("exec", "ExecAction"),
        2: m("httpGet", "HTTPGetAction"),
        3: m("tcpSocket", "TCPSocketAction"),
        4: m("sleep", "SleepAction"),
    },
    "SleepAction": {1: i("seconds", keep_zero=True)},
    "SecurityContext": {
        1: m("capabilities", "Capabilities"),
        2: pb("privileged"),
        4: pi("runAsUser"),
        5: pb("runAsNonRoot"),
        6: pb("readOnlyRootFilesystem"),
        7: pb("allowPrivilegeEscalation"),
        8: pi("runAsGroup"),
        9: s("procMount"),
        11: m("seccompProfile", "SeccompProfile"),
    },
    "Capabilities": {1: rs("add"), 2: rs("drop")},
}

_WORKLOADS: Final[dict[str, Table]] = {
    "Deployment": {
        1: m("metadata", "ObjectMeta"),
        2: m("spec", "DeploymentSpec"),
        3: m("status", "DeploymentStatus"),
    },
    "DeploymentSpec": {
        1: pi("replicas"),
        2: m("selector", "LabelSelector"),
        3: m("template", "PodTemplateSpec"),
        4: m("strategy", "DeploymentStrategy"),
        5: i("minReadySeconds"),
        6: pi("revisionHistoryLimit"),
        7: b("paused"),
        9: pi("progressDeadlineSeconds"),
    },
    "DeploymentStrategy": {1: s("type"), 2: m("rollingUpdate", "RollingUpdateDeployment")},
    "RollingUpdateDeployment": {
        1: m("maxUnavailable", "IntOrString"),
        2: m("maxSurge", "IntOrString"),
    },
    "DeploymentStatus": {
        1: i("observedGeneration"),
        2: i("replicas"),
        3: i("updatedReplicas"),
        4: i("availableReplicas"),
        5: i("unavailableReplicas"),
        7: i("readyReplicas"),
        8: pi("collisionCount"),
    },
    "Job": {
        1: m("metadata", "ObjectMeta"),
        2: m("spec", "JobSpec"),
        3: m("status", "JobStatus"),
    },
    "JobSpec": {
        1: pi("parallelism"),
        2: pi("completions"),
        3: pi("activeDeadlineSeconds"),
        4: m("selector", "LabelSelector"),
        5: pb("manualSelector"),
        6: m("template", "PodTemplateSpec"),
        7: pi("backoffLimit"),
        8: pi("ttlSecondsAfterFinished"),
        9: s("completionMode"),
        10: pb("suspend"),
        12: pi("backoffLimitPerIndex"),
        13: pi("maxFailedIndexes"),
        14: s("podReplacementPolicy"),
    },
    "JobStatus": {
        2: m("startTime", "Time"),
        3: m("completionTime", "Time"),
        4: i("active"),
        5: i("succeeded"),
        6: i("failed"),
    },
    "CronJob": {
        1: m("metadata", "ObjectMeta"),
        2: m("spec", "CronJobSpec"),
        3: m("status", "CronJobStatus"),
    },
    "CronJobSpec": {
        1: s("schedule"),
        2: pi("startingDeadlineSeconds"),
        3: s("concurrencyPolicy"),
        4: pb("suspend"),
        5: m("jobTemplate", "JobTemplateSpec"),
        6: pi("successfulJobsHistoryLimit"),
        7: pi("failedJobsHistoryLimit"),
        8: s("timeZone"),
    },
    "JobTemplateSpec": {1: m("metadata", "ObjectMeta"), 2: m("spec", "JobSpec")},
    "CronJobStatus": {
        1: rm("active", "ObjectReference"),
        4: m("lastScheduleTime", "Time"),
        5: m("lastSuccessfulTime", "Time"),
    },
    "Scale": {
        1: m("metadata", "ObjectMeta"),
        2: m("spec", "ScaleSpec"),
        3: m("status", "ScaleStatus"),
    },
    "ScaleSpec": {1: i("replicas")},
    "ScaleStatus": {1: i("replicas", keep_zero=True), 2: s("selector")},
    "PodDisruptionBudget": {
        1: m("metadata", "ObjectMeta"),
        2: m("spec", "PodDisruptionBudgetSpec"),
        3: m("status", "PodDisruptionBudgetStatus"),
    },
    "PodDisruptionBudgetSpec": {
        1: m("minAvailable", "IntOrString"),
        2: m("selector", "LabelSelector"),
        3: m("maxUnavailable", "IntOrString"),
        4: s("unhealthyPodEvictionPolicy"),
    },
    # The four counters have no `omitempty`, so JSON always shows them.
    "PodDisruptionBudgetStatus": {
        1: i("observedGeneration"),
        2: mmap("disruptedPods", "Time"),
        3: i("disruptionsAllowed", keep_zero=True),
        4: i("currentHealthy", keep_zero=True),
        5: i("desiredHealthy", keep_zero=True),
        6: i("expectedPods", keep_zero=True),
        7: rm("conditions", "Condition"),
    },
    "Eviction": {1: m("metadata", "ObjectMeta"), 2: m("deleteOptions", "DeleteOptions")},
    "PriorityClass": {
        1: m("metadata", "ObjectMeta"),
        2: i("value", keep_zero=True),  # `json:"value"`, no omitempty
        3: b("globalDefault"),
        4: s("description"),
        5: s("preemptionPolicy"),
    },
}

_RBAC_AND_NETWORKING: Final[dict[str, Table]] = {
    "Role": {1: m("metadata", "ObjectMeta"), 2: rm("rules", "PolicyRule")},
    "ClusterRole": {
        1: m("metadata", "ObjectMeta"),
        2: rm("rules", "PolicyRule"),
        3: m("aggregationRule", "AggregationRule"),
    },
    "AggregationRule": {1: rm("clusterRoleSelectors", "LabelSelector")},
    "PolicyRule": {
        1: rs("verbs"),
        2: rs("apiGroups"),
        3: rs("resources"),
        4: rs("resourceNames"),
        5: rs("nonResourceURLs"),
    },
    "RoleBinding": {
        1: m("metadata", "ObjectMeta"),
        2: rm("subjects", "Subject"),
        3: m("roleRef", "RoleRef"),
    },
    "Subject": {1: s("kind"), 2: s("apiGroup"), 3: s("name"), 4: s("namespace")},
    "RoleRef": {1: s("apiGroup"), 2: s("kind"), 3: s("name")},
    "Ingress": {
        1: m("metadata", "ObjectMeta"),
        2: m("spec", "IngressSpec"),
        3: m("status", "IngressStatus"),
    },
    "IngressSpec": {
        1: m("defaultBackend", "IngressBackend"),
        2: rm("tls", "IngressTLS"),
        3: rm("rules", "IngressRule"),
        4: s("ingressClassName"),
    },
    # networking/v1 kept v1beta1's numbers: 1/2 were serviceName/servicePort.
    "IngressBackend": {
        3: m("resource", "TypedLocalObjectReference"),
        4: m("service", "IngressServiceBackend"),
    },
    "IngressServiceBackend": {1: s("name"), 2: m("port", "ServiceBackendPort")},
    "ServiceBackendPort": {1: s("name"), 2: i("number")},
    "IngressTLS": {1: rs("hosts"), 2: s("secretName")},
    "IngressRule": {1: s("host"), 2: m("", "IngressRuleValue", inline=True)},
    "IngressRuleValue": {1: m("http", "HTTPIngressRuleValue")},
    "HTTPIngressRuleValue": {1: rm("paths", "HTTPIngressPath")},
    "HTTPIngressPath": {1: s("path"), 2: m("backend", "IngressBackend"), 3: s("pathType")},
    "IngressStatus": {1: m("loadBalancer", "IngressLoadBalancerStatus")},
    "IngressLoadBalancerStatus": {1: rm("ingress", "LoadBalancerIngress")},
}

_AUTH: Final[dict[str, Table]] = {
    "TokenRequest": {
        1: m("metadata", "ObjectMeta"),
        2: m("spec", "TokenRequestSpec"),
        3: m("status", "TokenRequestStatus"),
    },
    "TokenRequestSpec": {
        1: rs("audiences"),
        3: m("boundObjectRef", "BoundObjectReference"),
        4: pi("expirationSeconds"),
    },
    "BoundObjectReference": {1: s("kind"), 2: s("apiVersion"), 3: s("name"), 4: s("uid")},
    "TokenRequestStatus": {1: s("token"), 2: m("expirationTimestamp", "Time")},
    "TokenReview": {
        1: m("metadata", "ObjectMeta"),
        2: m("spec", "TokenReviewSpec"),
        3: m("status", "TokenReviewStatus"),
    },
    "TokenReviewSpec": {1: s("token"), 2: rs("audiences")},
    "TokenReviewStatus": {
        1: b("authenticated"),
        2: m("user", "UserInfo"),
        3: s("error"),
        4: rs("audiences"),
    },
    "SelfSubjectReview": {
        1: m("metadata", "ObjectMeta"),
        2: m("status", "SelfSubjectReviewStatus"),
    },
    "SelfSubjectReviewStatus": {1: m("userInfo", "UserInfo")},
    "UserInfo": {
        1: s("username"),
        2: s("uid"),
        3: rs("groups"),
        4: mmap("extra", "ExtraValue"),
    },
    "SelfSubjectAccessReview": {
        1: m("metadata", "ObjectMeta"),
        2: m("spec", "SelfSubjectAccessReviewSpec"),
        3: m("status", "SubjectAccessReviewStatus"),
    },
    "SelfSubjectAccessReviewSpec": {
        1: m("resourceAttributes", "ResourceAttributes"),
        2: m("nonResourceAttributes", "NonResourceAttributes"),
    },
    "ResourceAttributes": {
        1: s("namespace"),
        2: s("verb"),
        3: s("group"),
        4: s("version"),
        5: s("resource"),
        6: s("subresource"),
        7: s("name"),
        8: m("fieldSelector", "FieldSelectorAttributes"),
        9: m("labelSelector", "LabelSelectorAttributes"),
    },
    "FieldSelectorAttributes": {
        1: s("rawSelector"),
        2: rm("requirements", "LabelSelectorRequirement"),  # same key/operator/values
    },
    "LabelSelectorAttributes": {
        1: s("rawSelector"),
        2: rm("requirements", "LabelSelectorRequirement"),
    },
    "NonResourceAttributes": {1: s("path"), 2: s("verb")},
    "SubjectAccessReviewStatus": {
        1: b("allowed", keep_zero=True),  # `json:"allowed"`, no omitempty
        2: s("reason"),
        3: s("evaluationError"),
        4: b("denied"),
    },
    "SelfSubjectRulesReview": {
        1: m("metadata", "ObjectMeta"),
        2: m("spec", "SelfSubjectRulesReviewSpec"),
        3: m("status", "SubjectRulesReviewStatus"),
    },
    "SelfSubjectRulesReviewSpec": {1: s("namespace")},
    "SubjectRulesReviewStatus": {
        1: rm("resourceRules", "ResourceRule"),
        2: rm("nonResourceRules", "NonResourceRule"),
        3: b("incomplete", keep_zero=True),
        4: s("evaluationError"),
    },
    "ResourceRule": {
        1: rs("verbs"),
        2: rs("apiGroups"),
        3: rs("resources"),
        4: rs("resourceNames"),
    },
    "NonResourceRule": {1: rs("verbs"), 2: rs("nonResourceURLs")},
}

SCHEMA: Final[dict[str, Table]] = {
    **_META,
    **_CORE_COMMON,
    **_CORE_OBJECTS,
    **_POD,
    **_WORKLOADS,
    **_RBAC_AND_NETWORKING,
    **_AUTH,
}

# (API group, kind) -> top-level message. Versions share layouts for these kinds.
_KINDS: Final[dict[tuple[str, str], str]] = {
    **{
        ("", k): k
        for k in (
            "Namespace",
            "ConfigMap",
            "Secret",
            "ServiceAccount",
            "Service",
            "ResourceQuota",
            "Pod",
            "Binding",
        )
    },
    ("apps", "Deployment"): "Deployment",
    ("autoscaling", "Scale"): "Scale",
    ("batch", "Job"): "Job",
    ("batch", "CronJob"): "CronJob",
    **{
        ("rbac.authorization.k8s.io", k): msg
        for k, msg in (
            ("Role", "Role"),
            ("ClusterRole", "ClusterRole"),
            ("RoleBinding", "RoleBinding"),
            ("ClusterRoleBinding", "RoleBinding"),
        )
    },
    ("networking.k8s.io", "Ingress"): "Ingress",
    ("policy", "PodDisruptionBudget"): "PodDisruptionBudget",
    ("policy", "Eviction"): "Eviction",
    ("scheduling.k8s.io", "PriorityClass"): "PriorityClass",
    ("authentication.k8s.io", "TokenRequest"): "TokenRequest",
    ("authentication.k8s.io", "TokenReview"): "TokenReview",
    ("authentication.k8s.io", "SelfSubjectReview"): "SelfSubjectReview",
    ("authorization.k8s.io", "SelfSubjectAccessReview"): "SelfSubjectAccessReview",
    ("authorization.k8s.io", "SelfSubjectRulesReview"): "SelfSubjectRulesReview",
}

# DeleteOptions is registered in every group (and as meta.k8s.io/v1), so any group matches.
_ANY_GROUP_KINDS: Final[dict[str, str]] = {"DeleteOptions": "DeleteOptions"}

SUPPORTED_KINDS: Final[frozenset[str]] = frozenset(k for _, k in _KINDS) | frozenset(
    _ANY_GROUP_KINDS
)


# ---------------------------------------------------------------------------------------
# Messages with a non-object JSON form
# ---------------------------------------------------------------------------------------


def _time(data: bytes) -> str | None:
    """metav1.Time {1: seconds, 2: nanos} -> RFC3339 with second precision, as Go's JSON.

    An empty message is Go's zero time, which JSON renders as null (we drop it)."""
    if not data:
        return None
    seconds = 0
    for number, wire, value in _iter_fields(data):
        if number == 1:
            seconds = _signed(_expect_int(wire, value, "Time.seconds"))
    if seconds == _GO_ZERO_TIME_SECONDS:
        return None
    try:
        moment = datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise ProtobufError(f"timestamp out of range: {seconds}") from exc
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _int_or_string(data: bytes) -> int | str:
    """intstr.IntOrString {1: type (0 int, 1 string), 2: intVal, 3: strVal}."""
    kind, int_val, str_val = 0, 0, ""
    for number, wire, value in _iter_fields(data):
        if number == 1:
            kind = _expect_int(wire, value, "IntOrString.type")
        elif number == 2:
            int_val = _signed(_expect_int(wire, value, "IntOrString.intVal"))
        elif number == 3:
            str_val = _text(_expect_bytes(wire, value, "IntOrString.strVal"))
    return str_val if kind == 1 else int_val


def _quantity(data: bytes) -> str:
    """resource.Quantity {1: string}: JSON carries the canonical string as is."""
    return "".join(
        _text(_expect_bytes(wire, value, "Quantity.string"))
        for number, wire, value in _iter_fields(data)
        if number == 1
    )


def _fields_v1(data: bytes) -> Any:
    """metav1.FieldsV1 {1: raw JSON}: JSON inlines the document."""
    raw = b"".join(
        _expect_bytes(wire, value, "FieldsV1.Raw")
        for number, wire, value in _iter_fields(data)
        if number == 1
    )
    try:
        return json.loads(raw) if raw else {}
    except ValueError as exc:
        raise ProtobufError("FieldsV1 is not JSON") from exc


def _extra_value(data: bytes) -> list[str]:
    """authentication ExtraValue {1: items}: JSON is a bare list of strings."""
    return [
        _text(_expect_bytes(wire, value, "ExtraValue.items"))
        for number, wire, value in _iter_fields(data)
        if number == 1
    ]


_SPECIAL: Final[dict[str, Callable[[bytes], Any]]] = {
    "Time": _time,
    "IntOrString": _int_or_string,
    "Quantity": _quantity,
    "FieldsV1": _fields_v1,
    "ExtraValue": _extra_value,
}


# ---------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------


def _expect_int(wire: int, value: WireValue, where: str) -> int:
    if wire != _VARINT or not isinstance(value, int):
        raise ProtobufError(f"{where}: expected varint, got wire type {wire}")
    return value


def _expect_bytes(wire: int, value: WireValue, where: str) -> bytes:
    if wire != _LEN or not isinstance(value, bytes):
        raise ProtobufError(f"{where}: expected length-delimited, got wire type {wire}")
    return value


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtobufError("string field is not UTF-8") from exc


def _decode_message(data: bytes, message: str) -> Any:
    special = _SPECIAL.get(message)
    if special is not None:
        return special(data)
    table = SCHEMA[message]
    out: dict[str, Any] = {}
    for number, wire, value in _iter_fields(data):
        field = table.get(number)
        if field is None:
            continue  # a newer field we do not know: skip it, like any protobuf reader
        _apply(out, field, wire, value, f"{message}.{number}")
    return out


def _apply(out: dict[str, Any], field: Field, wire: int, value: WireValue, where: str) -> None:
    if field.map_value:
        key, val = _map_entry(field, _expect_bytes(wire, value, where), where)
        out.setdefault(field.name, {})[key] = val
    elif field.repeated:
        out.setdefault(field.name, []).extend(_repeated_values(field, wire, value, where))
    elif field.inline:
        out.update(_decode_message(_expect_bytes(wire, value, where), field.type))
    else:
        decoded = _value(field, wire, value, where)
        if not _is_absent(field, decoded):
            out[field.name] = decoded


def _is_absent(field: Field, value: Any) -> bool:
    """gogo writes zero values of non-pointer fields; JSON's omitempty drops them."""
    if value is None or (isinstance(value, str) and not value):
        return True
    return field.type in (_INT, _BOOL) and not field.keep_zero and not value


def _value(field: Field, wire: int, value: WireValue, where: str) -> Any:
    if field.type == _INT:
        return _signed(_expect_int(wire, value, where))
    if field.type == _BOOL:
        return _expect_int(wire, value, where) != 0
    raw = _expect_bytes(wire, value, where)
    if field.type == _STRING:
        return _text(raw)
    if field.type == _BYTES:
        return base64.b64encode(raw).decode("ascii")  # JSON's []byte encoding
    return _decode_message(raw, field.type)


def _repeated_values(field: Field, wire: int, value: WireValue, where: str) -> list[Any]:
    # proto2 (what k8s uses) does not pack repeated scalars, but accepting packed is free.
    if field.type in (_INT, _BOOL) and wire == _LEN and isinstance(value, bytes):
        return [_value(field, _VARINT, v, where) for v in _packed_varints(value)]
    return [_value(field, wire, value, where)]


def _packed_varints(data: bytes) -> Iterator[int]:
    pos = 0
    while pos < len(data):
        value, pos = _read_varint(data, pos)
        yield value


def _map_entry(field: Field, data: bytes, where: str) -> tuple[str, Any]:
    """Map entries are messages {1: key, 2: value}; a missing part is its zero value."""
    key = ""
    raw_value: bytes | None = None
    for number, wire, value in _iter_fields(data):
        if number == 1:
            key = _text(_expect_bytes(wire, value, where))
        elif number == 2:
            raw_value = _expect_bytes(wire, value, where)
    raw = raw_value or b""
    if field.type == _STRING:
        return key, _text(raw)
    if field.type == _BYTES:
        return key, base64.b64encode(raw).decode("ascii")
    return key, _decode_message(raw, field.type)


def _unwrap(envelope: bytes) -> tuple[str, str, bytes, str]:
    """runtime.Unknown -> (apiVersion, kind, raw, contentEncoding)."""
    api_version = kind = encoding = ""
    raw = b""
    for number, wire, value in _iter_fields(envelope):
        if number == 1:
            for sub, sub_wire, sub_value in _iter_fields(_expect_bytes(wire, value, "typeMeta")):
                if sub == 1:
                    api_version = _text(_expect_bytes(sub_wire, sub_value, "apiVersion"))
                elif sub == 2:
                    kind = _text(_expect_bytes(sub_wire, sub_value, "kind"))
        elif number == 2:
            raw = _expect_bytes(wire, value, "raw")
        elif number == 3:
            encoding = _text(_expect_bytes(wire, value, "contentEncoding"))
    return api_version, kind, raw, encoding


def _message_for(api_version: str, kind: str) -> str:
    group = api_version.rpartition("/")[0]
    message = _KINDS.get((group, kind)) or _ANY_GROUP_KINDS.get(kind)
    if message is None:
        shown = f"{kind} ({api_version})" if api_version else kind or "<no kind>"
        raise ProtobufError(
            f"protobuf decoding is not supported for kind {shown}",
            kind=kind,
            api_version=api_version,
        )
    return message


def decode_k8s_protobuf(body: bytes) -> dict[str, Any]:
    """Decode a `k8s\\x00`-prefixed protobuf body into its JSON-shaped object.

    The result carries `apiVersion` and `kind` from the envelope. Raises ProtobufError on a
    bad magic, malformed or truncated data, an encoded payload, or a kind without a table.
    """
    if not body.startswith(MAGIC):
        raise ProtobufError("not a Kubernetes protobuf body (missing k8s\\x00 magic)")
    api_version, kind, raw, encoding = _unwrap(bytes(body[len(MAGIC) :]))
    if encoding:
        raise ProtobufError(f"unsupported protobuf contentEncoding {encoding!r}")
    message = _message_for(api_version, kind)
    obj = _decode_message(raw, message)
    return {"apiVersion": api_version, "kind": kind, **obj}
