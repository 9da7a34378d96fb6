"""Validation of built-in kinds: the 422 message kube-apiserver writes for each case (its
`field.Error` wording, aggregated as upstream does), after the server's defaulting."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tether.local import objects, validation
from tether.local.errors import invalid

Obj = dict[str, Any]


def message(group: str, kind: str, obj: Obj, old: Obj | None = None) -> str | None:
    obj = copy.deepcopy(obj)
    objects.apply_defaults(group, kind, obj)
    if old is not None:
        old = copy.deepcopy(old)
        objects.apply_defaults(group, kind, old)
    causes = validation.causes(group, kind, obj, old)
    return invalid(kind, obj["metadata"].get("name", ""), causes, group).message if causes else None


def ingress(path: Obj) -> Obj:
    return {"metadata": {"name": "web"},
            "spec": {"rules": [{"host": "web.example.com", "http": {"paths": [path]}}]}}


SERVICE_BACKEND = {"service": {"name": "web", "port": {"number": 80}}}


def pod(**spec: Any) -> Obj:
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "nginx"}], **spec}}


def deployment(selector: Any, labels: Any) -> Obj:
    spec: Obj = {"template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}
    if selector is not None:
        spec["selector"] = selector
    return {"metadata": {"name": "d"}, "spec": spec}


def job(restart: str | None = "Never", image: str = "busybox") -> Obj:
    spec: Obj = {"containers": [{"name": "c", "image": image}]}
    if restart:
        spec["restartPolicy"] = restart
    obj: Obj = {"metadata": {"name": "j", "uid": "u1"}, "spec": {"template": {"spec": spec}}}
    objects.default_job_selector(obj)
    return obj


CASES = [
    # Ingress: the manifest (v1beta1 backend fields, no pathType)
    ("networking.k8s.io", "Ingress", ingress({"path": "/", "backend": {"serviceName": "web", "servicePort": 80}}),
     'Ingress.networking.k8s.io "web" is invalid: spec.rules[0].http.paths[0].pathType: Required value: '
     "pathType must be specified"),
    ("networking.k8s.io", "Ingress", ingress({"path": "/", "pathType": "Prefix",
                                              "backend": {"serviceName": "web", "servicePort": 80}}),
     'Ingress.networking.k8s.io "web" is invalid: spec.rules[0].http.paths[0].backend: Invalid value: "": '
     "resource or service backend is required"),
    ("networking.k8s.io", "Ingress", ingress({"path": "/", "pathType": "Regex", "backend": SERVICE_BACKEND}),
     'Ingress.networking.k8s.io "web" is invalid: spec.rules[0].http.paths[0].pathType: Unsupported value: '
     '"Regex": supported values: "Exact", "ImplementationSpecific", "Prefix"'),
    ("networking.k8s.io", "Ingress", ingress({"path": "api", "pathType": "Prefix", "backend": SERVICE_BACKEND}),
     'Ingress.networking.k8s.io "web" is invalid: spec.rules[0].http.paths[0].path: Invalid value: "api": '
     "must be an absolute path"),
    ("networking.k8s.io", "Ingress", {"metadata": {"name": "web"}, "spec": {}},
     'Ingress.networking.k8s.io "web" is invalid: spec: Invalid value: []networking.IngressRule(nil): either '
     "`defaultBackend` or `rules` must be specified"),
    ("networking.k8s.io", "Ingress", ingress({"path": "/", "pathType": "Prefix", "backend": SERVICE_BACKEND}), None),
    # Service
    ("", "Service", {"metadata": {"name": "s"}, "spec": {"type": "Internal", "ports": [{"port": 80}]}},
     'Service "s" is invalid: spec.type: Unsupported value: "Internal": supported values: "ClusterIP", '
     '"ExternalName", "LoadBalancer", "NodePort"'),
    ("", "Service", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}, {"port": 81}]}},
     'Service "s" is invalid: [spec.ports[0].name: Required value, spec.ports[1].name: Required value]'),
    ("", "Service", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80, "protocol": "HTTP"}]}},
     'Service "s" is invalid: spec.ports[0].protocol: Unsupported value: "HTTP": supported values: "SCTP", '
     '"TCP", "UDP"'),
    ("", "Service", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 0}]}},
     'Service "s" is invalid: [spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive, '
     "spec.ports[0].targetPort: Invalid value: 0: must be between 1 and 65535, inclusive]"),
    ("", "Service", {"metadata": {"name": "1web"}, "spec": {"ports": [{"port": 80}]}},
     'Service "1web" is invalid: metadata.name: Invalid value: "1web": a DNS-1035 label must consist of lower '
     "case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric "
     "character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"),
    ("", "Service", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}], "selector": {"app": "a b"}}},
     'Service "s" is invalid: spec.selector: Invalid value: "a b": a valid label must be an empty string or '
     "consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
     "character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is "
     "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"),
    # Deployment
    ("apps", "Deployment", deployment({"matchLabels": {"app": "a"}}, {"app": "b"}),
     'Deployment.apps "d" is invalid: spec.template.metadata.labels: Invalid value: map[string]string{"app":"b"}: '
     "`selector` does not match template `labels`"),
    ("apps", "Deployment", deployment(None, {"app": "b"}),
     'Deployment.apps "d" is invalid: [spec.selector: Required value, spec.template.metadata.labels: Invalid '
     'value: map[string]string{"app":"b"}: `selector` does not match template `labels`]'),
    ("apps", "Deployment", deployment({}, {"app": "b"}),
     'Deployment.apps "d" is invalid: spec.selector: Invalid value: v1.LabelSelector{MatchLabels:'
     "map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid "
     "for deployment"),
    ("apps", "DaemonSet", deployment({"matchLabels": {"app": "a"}}, {"app": "a"}), None),
    ("apps", "StatefulSet", {**deployment({"matchLabels": {"app": "a"}}, {"app": "a"}),
                             "metadata": {"name": "s"}}, None),
    # Pod
    ("", "Pod", {"metadata": {"name": "p"}, "spec": {}}, 'Pod "p" is invalid: spec.containers: Required value'),
    ("", "Pod", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}},
     'Pod "p" is invalid: [spec.containers[0].image: Required value, spec.containers[0].imagePullPolicy: '
     "Required value]"),
    ("", "Pod", pod(restartPolicy="Sometimes"),
     'Pod "p" is invalid: spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", '
     '"OnFailure", "Never"'),
    ("", "Pod", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"},
                                                                    {"name": "c", "image": "y"}]}},
     'Pod "p" is invalid: spec.containers[1].name: Duplicate value: "c"'),
    ("", "Pod", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x", "volumeMounts": [
        {"name": "data", "mountPath": "/data"}]}]}},
     'Pod "p" is invalid: spec.containers[0].volumeMounts[0].name: Not found: "data"'),
    ("", "Pod", pod(), None),
    # ConfigMap and Secret
    ("", "ConfigMap", {"metadata": {"name": "c"}, "data": {"bad key": "v"}},
     "ConfigMap \"c\" is invalid: data[bad key]: Invalid value: \"bad key\": a valid config key must consist of "
     "alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for "
     "validation is '[-._a-zA-Z0-9]+')"),
    ("", "Secret", {"metadata": {"name": "t"}, "type": "kubernetes.io/tls", "data": {}},
     'Secret "t" is invalid: [data[tls.crt]: Required value, data[tls.key]: Required value]'),
    # Job
    ("batch", "Job", job(restart=None),
     'Job.batch "j" is invalid: spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", '
     '"Never"'),
    ("batch", "Job", job(), None),
    # Namespace, labels
    ("", "Namespace", {"metadata": {"name": "Team_A"}},
     'Namespace "Team_A" is invalid: metadata.name: Invalid value: "Team_A": a lowercase RFC 1123 label must '
     "consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character "
     "(e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"),
    ("", "ConfigMap", {"metadata": {"name": "c", "labels": {"-bad": "v"}}},
     'ConfigMap "c" is invalid: metadata.labels: Invalid value: "-bad": name part must consist of alphanumeric '
     "characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or "
     "'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"),
]


@pytest.mark.parametrize(("group", "kind", "obj", "expected"), CASES)
def test_create_validation(group: str, kind: str, obj: Obj, expected: str | None) -> None:
    assert message(group, kind, obj) == expected


UPDATES = [
    ("apps", "Deployment", deployment({"matchLabels": {"app": "b"}}, {"app": "b"}),
     deployment({"matchLabels": {"app": "a"}}, {"app": "a"}),
     'Deployment.apps "d" is invalid: spec.selector: Invalid value: v1.LabelSelector{MatchLabels:'
     'map[string]string{"app":"b"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable'),
    ("apps", "Deployment", deployment({"matchLabels": {"app": "a"}}, {"app": "a", "v": "2"}),
     deployment({"matchLabels": {"app": "a"}}, {"app": "a"}), None),
    ("batch", "Job", job(image="busybox:2"), job(),
     'Job.batch "j" is invalid: spec.template: Invalid value: core.PodTemplateSpec{...}: field is immutable'),
    ("", "Pod", {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "c", "image": "nginx:2", "imagePullPolicy": "Always"}]}}, pod(), None),
    ("", "ConfigMap", {"metadata": {"name": "c"}, "immutable": True, "data": {"a": "2"}},
     {"metadata": {"name": "c"}, "immutable": True, "data": {"a": "1"}},
     'ConfigMap "c" is invalid: data: Forbidden: field is immutable when `immutable` is set'),
]


@pytest.mark.parametrize(("group", "kind", "new", "old", "expected"), UPDATES)
def test_update_validation(group: str, kind: str, new: Obj, old: Obj, expected: str | None) -> None:
    assert message(group, kind, new, old) == expected


def test_pod_spec_changes_are_forbidden_but_images_are_not() -> None:
    changed = pod(containers=[{"name": "c", "image": "nginx", "command": ["sleep"]}])
    text = message("", "Pod", changed, pod())
    assert text is not None
    assert text.startswith('Pod "p" is invalid: spec: Forbidden: pod updates may not change fields other than '
                           "`spec.containers[*].image`")
