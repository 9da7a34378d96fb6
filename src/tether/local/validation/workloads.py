"""Workload validation: Deployment, ReplicaSet, StatefulSet, DaemonSet (apps/v1), Job and CronJob
(batch/v1), in the order and words of their upstream validators; the selector (and a Job's
template) is immutable."""

from __future__ import annotations

import copy
import re
from typing import Any

from tether.local import objects
from tether.local.errors import Cause
from tether.local.validation import fields as f
from tether.local.validation.pods import pod_template
from tether.objects import Obj

SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
PERCENT = re.compile(r"^[0-9]+%$")
PERCENT_MESSAGE = f.regex_error("a valid percent string must be a numeric string followed by an ending '%'",
                                "[0-9]+%", "1%", "93%")


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


# selectors -------------------------------------------------------------------------------


def go_string_map(value: Any) -> str:
    """A map[string]string as %#v prints it (a missing map is a nil map)."""
    if value is None:
        return "map[string]string(nil)"
    return f.go_value(value if isinstance(value, dict) else {})


def go_selector(selector: Any) -> str:
    """A *metav1.LabelSelector as the validators print it (%#v of the struct)."""
    if not isinstance(selector, dict):
        return "null"
    expressions = selector.get("matchExpressions")
    if expressions is None:
        shown = "[]v1.LabelSelectorRequirement(nil)"
    else:
        parts = []
        for e in expressions if isinstance(expressions, list) else []:
            e = e if isinstance(e, dict) else {}
            values = e.get("values")
            values_text = "[]string(nil)" if values is None else f.go_value(list(values))
            parts.append(f'v1.LabelSelectorRequirement{{Key:{f.go_quote(str(e.get("key", "")))}, '
                         f'Operator:{f.go_quote(str(e.get("operator", "")))}, Values:{values_text}}}')
        shown = "[]v1.LabelSelectorRequirement{" + ", ".join(parts) + "}"
    return f"v1.LabelSelector{{MatchLabels:{go_string_map(selector.get('matchLabels'))}, MatchExpressions:{shown}}}"


def label_selector(selector: Any, path: str) -> list[Cause]:
    if not isinstance(selector, dict):
        return []
    causes = f.labels(selector.get("matchLabels"), f"{path}.matchLabels")
    expressions = selector.get("matchExpressions")
    for i, expression in enumerate(expressions if isinstance(expressions, list) else []):
        where = f"{path}.matchExpressions[{i}]"
        if not isinstance(expression, dict):
            continue
        operator = expression.get("operator")
        values = expression.get("values") or []
        if operator in ("In", "NotIn"):
            if not values:
                causes.append(f.required(f"{where}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                causes.append(f.forbidden(f"{where}.values",
                                          "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
        else:
            causes.append(f.invalid(f"{where}.operator", operator, "not a valid selector operator"))
        key = str(expression.get("key") or "")
        causes += f.each(f"{where}.key", key, f.qualified_name(key))
    return causes


def selector_empty(selector: Any) -> bool:
    return isinstance(selector, dict) and not selector.get("matchLabels") and not selector.get("matchExpressions")


def selector_matches(selector: Any, labels: Any) -> bool:
    """Whether labels match; a missing selector matches nothing, an empty one everything."""
    if not isinstance(selector, dict):
        return False
    labels = labels if isinstance(labels, dict) else {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        if not isinstance(expression, dict):
            continue
        key, values = expression.get("key"), expression.get("values") or []
        operator = expression.get("operator")
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def _required_selector(spec: Obj, kind_word: str) -> list[Cause]:
    selector = spec.get("selector")
    if selector is None:
        return [f.required("spec.selector")]
    causes = label_selector(selector, "spec.selector")
    if selector_empty(selector):
        causes.append(f.invalid("spec.selector", selector, f"empty selector is invalid for {kind_word}",
                                rendered=go_selector(selector)))
    return causes


def _template_labels_match(spec: Obj) -> list[Cause]:
    selector = spec.get("selector")
    if selector_empty(selector):
        return []
    labels = _get(spec, "template", "metadata", "labels")
    if selector_matches(selector, labels):
        return []
    return [f.invalid("spec.template.metadata.labels", labels, "`selector` does not match template `labels`",
                      rendered=go_string_map(labels))]


def _template_for_replicas(spec: Obj, kind: str) -> list[Cause]:
    """ValidatePodTemplateSpecForReplicaSet: labels match, the template, restartPolicy Always."""
    template = spec.get("template")
    if not isinstance(template, dict):
        return [f.required("spec.template")]
    causes = _template_labels_match(spec) + pod_template(template, "spec.template")
    restart = _get(template, "spec", "restartPolicy")
    if restart != "Always":
        causes.append(f.not_supported("spec.template.spec.restartPolicy", restart, ("Always",)))
    if _get(template, "spec", "activeDeadlineSeconds") is not None:
        causes.append(f.forbidden("spec.template.spec.activeDeadlineSeconds",
                                  f"activeDeadlineSeconds in {kind} is not Supported"))
    return causes


def _int_or_percent(value: Any, path: str) -> list[Cause]:
    rendered = _go_int_or_string(value)
    if isinstance(value, str):
        if not PERCENT.match(value):
            return [f.invalid(path, value, PERCENT_MESSAGE, rendered=rendered)]
        if int(value[:-1]) > 100:
            return [f.invalid(path, value, "must not be greater than 100%", rendered=rendered)]
        return []
    if isinstance(value, int) and value < 0:
        return [f.invalid(path, value, "must be greater than or equal to 0", rendered=rendered)]
    return []


def _go_int_or_string(value: Any) -> str:
    if isinstance(value, str):
        return f'intstr.IntOrString{{Type:1, IntVal:0, StrVal:{f.go_quote(value)}}}'
    return f'intstr.IntOrString{{Type:0, IntVal:{value if isinstance(value, int) else 0}, StrVal:""}}'


def _is_zero(value: Any) -> bool:
    return value in (0, None) or (isinstance(value, str) and PERCENT.match(value) is not None and int(value[:-1]) == 0)


# kinds -----------------------------------------------------------------------------------


def deployment(obj: Obj) -> list[Cause]:
    spec = f.mapping(obj.get("spec"))
    causes = f.nonnegative("spec.replicas", spec.get("replicas"))
    causes += _required_selector(spec, "deployment")
    causes += _template_for_replicas(spec, "ReplicaSet")
    strategy = f.mapping(spec.get("strategy"))
    kind, rolling = strategy.get("type"), strategy.get("rollingUpdate")
    if kind == "Recreate":
        if rolling is not None:
            causes.append(f.forbidden("spec.strategy.rollingUpdate",
                                      "may not be specified when strategy `type` is 'Recreate'"))
    elif kind == "RollingUpdate":
        if not isinstance(rolling, dict):
            causes.append(f.required("spec.strategy.rollingUpdate", "this should be defaulted and never be nil"))
        else:
            where = "spec.strategy.rollingUpdate"
            causes += _int_or_percent(rolling.get("maxUnavailable"), f"{where}.maxUnavailable")
            causes += _int_or_percent(rolling.get("maxSurge"), f"{where}.maxSurge")
            if _is_zero(rolling.get("maxUnavailable")) and _is_zero(rolling.get("maxSurge")):
                causes.append(f.invalid(f"{where}.maxUnavailable", rolling.get("maxUnavailable"),
                                        "may not be 0 when `maxSurge` is 0",
                                        rendered=_go_int_or_string(rolling.get("maxUnavailable"))))
    else:
        causes.append(f.not_supported("spec.strategy", kind, ("Recreate", "RollingUpdate")))
    causes += f.nonnegative("spec.minReadySeconds", spec.get("minReadySeconds"))
    causes += f.nonnegative("spec.revisionHistoryLimit", spec.get("revisionHistoryLimit"))
    deadline = spec.get("progressDeadlineSeconds")
    if isinstance(deadline, int):
        causes += f.nonnegative("spec.progressDeadlineSeconds", deadline)
        if deadline <= (spec.get("minReadySeconds") or 0):
            causes.append(f.invalid("spec.progressDeadlineSeconds", deadline, "must be greater than minReadySeconds"))
    return causes


def replica_set(obj: Obj) -> list[Cause]:
    spec = f.mapping(obj.get("spec"))
    causes = f.nonnegative("spec.replicas", spec.get("replicas"))
    causes += f.nonnegative("spec.minReadySeconds", spec.get("minReadySeconds"))
    causes += _required_selector(spec, "deployment")  # sic: upstream's ReplicaSet message says deployment
    return causes + _template_for_replicas(spec, "ReplicaSet")


def stateful_set(obj: Obj) -> list[Cause]:
    spec = f.mapping(obj.get("spec"))
    causes: list[Cause] = []
    policy = spec.get("podManagementPolicy")
    if not policy:
        causes.append(f.required("spec.podManagementPolicy"))
    elif policy not in ("OrderedReady", "Parallel"):
        causes.append(f.invalid("spec.podManagementPolicy", policy, "must be 'OrderedReady' or 'Parallel'"))
    strategy = f.mapping(spec.get("updateStrategy"))
    kind = strategy.get("type")
    if not kind:
        causes.append(f.required("spec.updateStrategy"))
    elif kind == "OnDelete" and strategy.get("rollingUpdate") is not None:
        causes.append(f.invalid("spec.updateStrategy.rollingUpdate", f.OMIT, "only allowed for updateStrategy "
                                "'RollingUpdate'"))
    elif kind not in ("OnDelete", "RollingUpdate"):
        causes.append(f.invalid("spec.updateStrategy", f.OMIT, "must be 'RollingUpdate' or 'OnDelete'"))
    causes += f.nonnegative("spec.replicas", spec.get("replicas"))
    causes += _required_selector(spec, "statefulset")
    template = spec.get("template")
    if not isinstance(template, dict):
        causes.append(f.required("spec.template"))
    else:
        causes += _template_labels_match(spec) + pod_template(template, "spec.template")
    restart = _get(spec, "template", "spec", "restartPolicy")
    if restart != "Always":
        causes.append(f.not_supported("spec.template.spec.restartPolicy", restart, ("Always",)))
    if _get(spec, "template", "spec", "activeDeadlineSeconds") is not None:
        causes.append(f.forbidden("spec.template.spec.activeDeadlineSeconds",
                                  "activeDeadlineSeconds in StatefulSet is not Supported"))
    return causes


def daemon_set(obj: Obj) -> list[Cause]:
    spec = f.mapping(obj.get("spec"))
    causes = _required_selector(spec, "daemonset")
    if not selector_matches(spec.get("selector"), _get(spec, "template", "metadata", "labels")):
        labels = _get(spec, "template", "metadata", "labels")
        causes.append(f.invalid("spec.template.metadata.labels", labels, "`selector` does not match template `labels`",
                                rendered=go_string_map(labels)))
    causes += pod_template(spec.get("template"), "spec.template")
    restart = _get(spec, "template", "spec", "restartPolicy")
    if restart != "Always":
        causes.append(f.not_supported("spec.template.spec.restartPolicy", restart, ("Always",)))
    deadline = _get(spec, "template", "spec", "activeDeadlineSeconds")
    if deadline is not None:
        causes.append(f.invalid("spec.template.spec.activeDeadlineSeconds", deadline,
                                "activeDeadlineSeconds must be nil for DaemonSets"))
    causes += f.nonnegative("spec.minReadySeconds", spec.get("minReadySeconds"))
    strategy = f.mapping(spec.get("updateStrategy"))
    kind = strategy.get("type")
    if kind == "RollingUpdate" and not isinstance(strategy.get("rollingUpdate"), dict):
        causes.append(f.required("spec.updateStrategy.rollingUpdate"))
    elif kind not in ("OnDelete", "RollingUpdate"):
        causes.append(f.not_supported("spec.updateStrategy", kind, ("RollingUpdate", "OnDelete")))
    causes += f.nonnegative("spec.revisionHistoryLimit", spec.get("revisionHistoryLimit"))
    return causes


def job_spec(spec: Obj, path: str = "spec") -> list[Cause]:
    causes: list[Cause] = []
    for key in ("parallelism", "completions", "activeDeadlineSeconds", "backoffLimit", "ttlSecondsAfterFinished",
                "backoffLimitPerIndex", "maxFailedIndexes"):
        causes += f.nonnegative(f"{path}.{key}", spec.get(key))
    mode = spec.get("completionMode")
    if mode is not None:
        if mode not in ("NonIndexed", "Indexed"):
            causes.append(f.not_supported(f"{path}.completionMode", mode, ("NonIndexed", "Indexed")))
        if mode == "Indexed" and spec.get("completions") is None:
            causes.append(f.required(f"{path}.completions", "when completion mode is Indexed"))
    replacement = spec.get("podReplacementPolicy")
    if replacement is not None and replacement not in ("Failed", "TerminatingOrFailed"):
        causes.append(f.not_supported(f"{path}.podReplacementPolicy", replacement, ("Failed", "TerminatingOrFailed")))
    causes += pod_template(spec.get("template"), f"{path}.template")
    restart = _get(spec, "template", "spec", "restartPolicy")
    if restart in ("Always", "", None):
        causes.append(f.required(f"{path}.template.spec.restartPolicy", 'valid values: "OnFailure", "Never"'))
    elif restart not in ("OnFailure", "Never"):
        causes.append(f.not_supported(f"{path}.template.spec.restartPolicy", restart, ("OnFailure", "Never")))
    return causes


def job(obj: Obj) -> list[Cause]:
    spec = f.mapping(obj.get("spec"))
    causes = job_spec(spec)
    selector = spec.get("selector")
    if selector is None:
        causes.append(f.required("spec.selector"))
    else:
        causes += label_selector(selector, "spec.selector")
    labels = _get(spec, "template", "metadata", "labels")
    if not selector_matches(selector, labels) and not selector_empty(selector):
        causes.append(f.invalid("spec.template.metadata.labels", labels, "`selector` does not match template `labels`",
                                rendered=go_string_map(labels)))
    return causes


def cron_job(obj: Obj) -> list[Cause]:
    spec = f.mapping(obj.get("spec"))
    causes: list[Cause] = []
    if not spec.get("schedule"):
        causes.append(f.required("spec.schedule"))
    policy = spec.get("concurrencyPolicy")
    if policy not in ("Allow", "Forbid", "Replace"):
        causes.append(f.not_supported("spec.concurrencyPolicy", policy, ("Allow", "Forbid", "Replace")))
    job_template = _get(spec, "jobTemplate", "spec")
    if isinstance(job_template, dict):
        causes += job_spec(job_template, "spec.jobTemplate.spec")
    name = str((obj.get("metadata") or {}).get("name") or "")
    if len(name) > 52:
        causes.append(f.invalid("metadata.name", name, "must be no more than 52 characters"))
    return causes


# updates ---------------------------------------------------------------------------------


def immutable_selector(new: Obj, old: Obj) -> list[Cause]:
    selector, old_selector = _get(new, "spec", "selector"), _get(old, "spec", "selector")
    if selector == old_selector:
        return []
    return [f.immutable("spec.selector", selector, rendered=go_selector(selector))]


def stateful_set_update(new: Obj, old: Obj) -> list[Cause]:
    spec = copy.deepcopy(new.get("spec") or {})
    old_spec = old.get("spec") or {}
    for key in ("replicas", "template", "updateStrategy", "minReadySeconds", "ordinals", "revisionHistoryLimit",
                "persistentVolumeClaimRetentionPolicy"):
        if key in old_spec:
            spec[key] = old_spec[key]
        else:
            spec.pop(key, None)
    if spec == old_spec:
        return []
    return [f.forbidden("spec", "updates to statefulset spec for fields other than 'replicas', 'ordinals', "
                        "'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' "
                        "and 'minReadySeconds' are forbidden")]


def defaulted_template(template: Any) -> Any:
    """A stored template with today's defaults, so an object written before a default existed
    does not read as changed."""
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        return template
    copied = copy.deepcopy(template)
    objects.default_pod_spec(copied["spec"])
    return copied


def job_update(new: Obj, old: Obj) -> list[Cause]:
    spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    causes: list[Cause] = []
    completions = spec.get("completions")
    if completions != old_spec.get("completions"):
        elastic = spec.get("completionMode") == "Indexed" and completions == spec.get("parallelism")
        if not elastic:
            causes.append(f.immutable("spec.completions", completions))
    causes += immutable_selector(new, old)
    if spec.get("template") != defaulted_template(old_spec.get("template")):
        # The real message prints the whole core.PodTemplateSpec struct here.
        causes.append(f.immutable("spec.template", None, rendered="core.PodTemplateSpec{...}"))
    if (spec.get("completionMode") or "NonIndexed") != (old_spec.get("completionMode") or "NonIndexed"):
        causes.append(f.immutable("spec.completionMode", spec.get("completionMode")))
    return causes
