"""Validation of built-in objects as kube-apiserver validates them, for create and update.

`causes(group, kind, obj, old)` is every field error for the object (`old`: the stored object on
an update, for the immutable fields), each a `Cause` whose message is worded as upstream's
`field.Error` body; `errors.invalid` turns them into the 422 `Invalid` Status. The object is
validated after defaulting, as upstream does. Kinds without a validator here get the ObjectMeta
checks only (docs/local-clusters.md lists what is not checked).
"""

from __future__ import annotations

from collections.abc import Callable

from tether.local.errors import Cause
from tether.local.validation import (
    apiregistration,
    config,
    netpol,
    networking,
    pods,
    services,
    workloads,
)
from tether.local.validation.fields import mapping
from tether.local.validation.meta import NameRule, name_rule, object_meta
from tether.objects import Obj

Check = Callable[[Obj], list[Cause]]
UpdateCheck = Callable[[Obj, Obj], list[Cause]]

__all__ = ["causes", "name_rule"]


def _pod(obj: Obj) -> list[Cause]:
    return pods.pod_spec(obj.get("spec"), "spec")


CHECKS: dict[tuple[str, str], Check] = {
    ("", "Pod"): _pod,
    ("", "Service"): services.service,
    ("", "ConfigMap"): config.config_map,
    ("", "Secret"): config.secret,
    ("apps", "Deployment"): workloads.deployment,
    ("apps", "ReplicaSet"): workloads.replica_set,
    ("apps", "StatefulSet"): workloads.stateful_set,
    ("apps", "DaemonSet"): workloads.daemon_set,
    ("batch", "Job"): workloads.job,
    ("batch", "CronJob"): workloads.cron_job,
    ("networking.k8s.io", "Ingress"): networking.ingress,
    ("networking.k8s.io", "NetworkPolicy"): netpol.network_policy,
    ("apiregistration.k8s.io", "APIService"): apiregistration.apiservice,
}


def _pod_update(new: Obj, old: Obj) -> list[Cause]:
    return pods.pod_update(new.get("spec"), old.get("spec"))


UPDATE_CHECKS: dict[tuple[str, str], UpdateCheck] = {
    ("", "Pod"): _pod_update,
    ("", "ConfigMap"): lambda new, old: config.immutable_update("ConfigMap", new, old),
    ("", "Secret"): lambda new, old: config.immutable_update("Secret", new, old),
    ("apps", "Deployment"): workloads.immutable_selector,
    ("apps", "ReplicaSet"): workloads.immutable_selector,
    ("apps", "DaemonSet"): workloads.immutable_selector,
    ("apps", "StatefulSet"): workloads.stateful_set_update,
    ("batch", "Job"): workloads.job_update,
}


def causes(group: str, kind: str, obj: Obj, old: Obj | None = None) -> list[Cause]:
    rule: NameRule | None = None
    if (group, kind) == ("apiregistration.k8s.io", "APIService"):
        spec = mapping(obj.get("spec"))

        def rule(name: str) -> list[str]:
            return apiregistration.name_errors(name, spec)

    found = object_meta(group, kind, mapping(obj.get("metadata")), rule)
    check = CHECKS.get((group, kind))
    if check is not None:
        found += check(obj)
    if old is not None:
        update = UPDATE_CHECKS.get((group, kind))
        if update is not None:
            found += update(obj, old)
    return found
