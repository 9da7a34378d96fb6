"""What the server owns in an object's metadata, name rules, and the built-in defaults."""

from __future__ import annotations

import base64
import copy
import secrets
import uuid
from typing import Any

from tether.objects import Obj

GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"




def new_uid() -> str:
    return str(uuid.uuid4())


def generated_name(prefix: str) -> str:
    return prefix + "".join(secrets.choice(GENERATE_ALPHABET) for _ in range(5))


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
    resources = container.setdefault("resources", {})
    if isinstance(resources, dict) and isinstance(resources.get("limits"), dict):
        # A limit without a request is also the request (SetDefaults_Pod).
        requests = resources.setdefault("requests", {})
        if isinstance(requests, dict):
            for name, value in resources["limits"].items():
                requests.setdefault(name, value)
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
        obj["status"].setdefault("qosClass", qos_class(spec))
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
        # Both unset: one pod, once. `parallelism` alone is a work queue: completions stay unset.
        if "completions" not in spec and "parallelism" not in spec:
            spec["completions"] = 1
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault("podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed")
        template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
        if template_labels and not obj.setdefault("metadata", {}).get("labels"):
            obj["metadata"]["labels"] = dict(template_labels)
        _default_template(obj)
    elif group == "" and kind == "Service":
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec["type"] != "ExternalName":
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")
            spec.setdefault("internalTrafficPolicy", "Cluster")
        if spec["type"] in ("NodePort", "LoadBalancer"):
            spec.setdefault("externalTrafficPolicy", "Cluster")
        if spec["type"] == "LoadBalancer":
            spec.setdefault("allocateLoadBalancerNodePorts", True)
        for port in spec.get("ports") or []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")
                if "port" in port:
                    port.setdefault("targetPort", port["port"])
    elif group == "" and kind == "Secret":
        obj.setdefault("type", "Opaque")
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict):
            if obj.get("data") is None:
                obj["data"] = {}
            data = obj["data"]
            if not isinstance(data, dict):
                obj["stringData"] = string_data  # left for validation to name
                return
            for key, value in string_data.items():
                data[key] = base64.b64encode(str(value).encode()).decode()
    elif group == "" and kind == "PersistentVolumeClaim":
        obj.setdefault("spec", {}).setdefault("volumeMode", "Filesystem")
    elif group == "" and kind == "PersistentVolume":
        spec = obj.setdefault("spec", {})
        spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
        spec.setdefault("volumeMode", "Filesystem")
    elif group == "batch" and kind == "CronJob":
        spec = obj.setdefault("spec", {})
        job_template = spec.get("jobTemplate")
        template = job_template.get("spec", {}).get("template") if isinstance(job_template, dict) else None
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            template.setdefault("metadata", {})
            default_pod_spec(template["spec"])
        spec.setdefault("concurrencyPolicy", "Allow")
        spec.setdefault("suspend", False)
        spec.setdefault("successfulJobsHistoryLimit", 3)
        spec.setdefault("failedJobsHistoryLimit", 1)
    elif group == "apiregistration.k8s.io" and kind == "APIService":
        service = obj.setdefault("spec", {}).get("service")
        if isinstance(service, dict):
            service.setdefault("port", 443)
    elif group == "" and kind == "Namespace":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {}).setdefault("phase", "Active")
        name = obj.get("metadata", {}).get("name")
        if name:
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    default_status(group, kind, obj)


# The status of these kinds as kube-apiserver always shows it: their Go status structs encode
# these fields even when empty (no `omitempty`), so a fresh object reads like this.
EMPTY_STATUS: dict[tuple[str, str], Obj] = {
    ("", "Service"): {"loadBalancer": {}},
    ("networking.k8s.io", "Ingress"): {"loadBalancer": {}},
    ("", "ReplicationController"): {"replicas": 0},
    ("apps", "Deployment"): {},
    ("apps", "ReplicaSet"): {"replicas": 0},
    ("apps", "StatefulSet"): {"replicas": 0, "availableReplicas": 0},
    ("apps", "DaemonSet"): {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0,
                            "numberReady": 0},
    ("batch", "Job"): {},
    ("batch", "CronJob"): {},
    ("", "ResourceQuota"): {},
    ("autoscaling", "HorizontalPodAutoscaler"): {"desiredReplicas": 0},
    ("policy", "PodDisruptionBudget"): {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0,
                                        "expectedPods": 0},
    ("", "PersistentVolumeClaim"): {"phase": "Pending"},
    ("", "PersistentVolume"): {"phase": "Pending"},
}


def default_status(group: str, kind: str, obj: Obj) -> None:
    """Fill the status fields kube-apiserver always returns (see EMPTY_STATUS); the status dict
    is replaced, not changed, because a status write may share it with the stored object."""
    empty = EMPTY_STATUS.get((group, kind))
    if empty is None:
        return
    status = obj.get("status")
    if not isinstance(status, dict):
        obj["status"] = copy.deepcopy(empty)
    elif any(key not in status for key in empty):
        obj["status"] = {**copy.deepcopy(empty), **status}


def qos_class(spec: Obj) -> str:
    """The pod's QoS class from its containers' requests and limits (the kubelet's rule)."""
    containers = [c for key in ("containers", "initContainers") for c in spec.get(key) or [] if isinstance(c, dict)]
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        container_requests = resources.get("requests") or {}
        container_limits = resources.get("limits") or {}
        for name in ("cpu", "memory"):
            if name in container_requests:
                requests[name] = container_requests[name]
            if name in container_limits:
                limits[name] = container_limits[name]
            if name not in container_limits or container_requests.get(name, container_limits[name]) != container_limits[name]:
                guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


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
