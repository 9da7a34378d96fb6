"""Where a local cluster must answer as kube-apiserver 1.37 does, checked with the real kubectl and
the official `kubernetes` client (which parses answers by their OpenAPI types):

- DELETE answers per registry (the deleted Service, ServiceAccount or Pod; a Success Status
  otherwise; the object itself while finalizers hold it);
- the status every fresh object shows (`status.loadBalancer: {}` on Services, ...);
- the bytes of Status bodies and objects (field order, trailing newline), watch frames, Tables;
- apiregistration.k8s.io APIServices; `metadata.resourceVersion` on create;
- metrics.k8s.io and `kubectl top`; validation of built-in kinds.

Every test works in its own namespace (or with unique names) on the shared clusters; waits are
conditions with generous deadlines, never timings.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_util import manifest, poll, unique
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

pytestmark = pytest.mark.e2e

CONTEXT = "cluster1"
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def api(clusters: Any) -> Iterator[k8s.ApiClient]:
    api_client = k8s_config.new_client_from_config(config_file=str(clusters.kubeconfig), context=CONTEXT)
    with api_client:
        yield api_client


def raw(api: k8s.ApiClient, method: str, path: str, body: Any = None, *, accept: str = "application/json",
        query: list[tuple[str, str]] | None = None) -> tuple[int, bytes]:
    """(status, body bytes) of one request, errors included, as the server wrote them."""
    request = api.param_serialize(method, path, query_params=query or [], body=body,
                                  header_params={"Accept": accept, "Content-Type": "application/json"},
                                  auth_settings=["BearerToken"])
    response = api.call_api(*request)
    return int(response.status), bytes(response.read())


def keys(body: bytes) -> list[str]:
    """The top-level keys of a JSON object, in the order they were written."""
    pairs = json.loads(body, object_pairs_hook=list)
    return [k for k, _ in pairs]


def configmap(name: str, ns: str, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns},
            "data": {"a": "1"}, **extra}


def service(name: str, ns: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"app": name}, "ports": [{"port": 80}]}}


def deployment(name: str, ns: str, app: str | None = None, replicas: int = 0) -> dict[str, Any]:
    app = app or name
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}},
                     "template": {"metadata": {"labels": {"app": app}},
                                  "spec": {"containers": [{"name": "c", "image": "registry.example/virtual:1"}]}}}}


def fails(result: Any) -> str:
    assert result.returncode != 0, result.stdout
    return str(result.stderr)


# 1. DELETE answers -------------------------------------------------------------------------


def test_deleting_a_service_answers_with_the_service(api: k8s.ApiClient, ns: str) -> None:
    core = k8s.CoreV1Api(api)
    core.create_namespaced_service(ns, service("web", ns))
    deleted = core.delete_namespaced_service("web", ns)
    assert deleted.kind == "Service"  # the generated client parsed the answer as a Service
    assert deleted.metadata.name == "web" and deleted.spec.cluster_ip
    core.create_namespaced_service(ns, service("web2", ns))
    code, body = raw(api, "DELETE", f"/api/v1/namespaces/{ns}/services/web2")
    assert code == 200 and json.loads(body)["kind"] == "Service"


def test_deleting_a_service_account_answers_with_it(api: k8s.ApiClient, ns: str) -> None:
    core = k8s.CoreV1Api(api)
    core.create_namespaced_service_account(ns, {"metadata": {"name": "robot"}})
    deleted = core.delete_namespaced_service_account("robot", ns)
    assert deleted.kind == "ServiceAccount" and deleted.metadata.name == "robot"


def test_deleting_other_kinds_answers_with_a_success_status(api: k8s.ApiClient, ns: str) -> None:
    k8s.AppsV1Api(api).create_namespaced_deployment(ns, deployment("d", ns))
    code, body = raw(api, "DELETE", f"/apis/apps/v1/namespaces/{ns}/deployments/d")
    uid = json.loads(body)["details"]["uid"]
    assert code == 200
    assert body == ('{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success",'
                    f'"details":{{"name":"d","group":"apps","kind":"deployments","uid":"{uid}"}}}}\n').encode()
    k8s.CoreV1Api(api).create_namespaced_config_map(ns, configmap("cm", ns))
    status = k8s.CoreV1Api(api).delete_namespaced_config_map("cm", ns)  # typed "object": a dict
    assert status["status"] == "Success" and status["details"]["kind"] == "configmaps"


def test_an_object_held_by_finalizers_answers_with_itself(api: k8s.ApiClient, ns: str) -> None:
    k8s.AppsV1Api(api).create_namespaced_deployment(ns, deployment("held", ns))
    code, body = raw(api, "DELETE", f"/apis/apps/v1/namespaces/{ns}/deployments/held",
                     {"propagationPolicy": "Foreground"})
    answer = json.loads(body)
    assert code == 200 and answer["kind"] == "Deployment"
    assert answer["metadata"]["deletionTimestamp"]
    assert "foregroundDeletion" in answer["metadata"]["finalizers"]
    # The old way of asking for cascading deletion: 202 Accepted while the object stays.
    k8s.CoreV1Api(api).create_namespaced_config_map(ns, configmap("kept", ns, metadata={
        "name": "kept", "namespace": ns, "finalizers": ["example.com/hold"]}))
    code, body = raw(api, "DELETE", f"/api/v1/namespaces/{ns}/configmaps/kept", {"orphanDependents": False})
    assert code == 202 and json.loads(body)["kind"] == "ConfigMap"
    raw(api, "PATCH", f"/api/v1/namespaces/{ns}/configmaps/kept", {"metadata": {"finalizers": None}})


# 2. always-present status ---------------------------------------------------------------------


def test_a_service_always_has_a_load_balancer_status(api: k8s.ApiClient, ns: str) -> None:
    core = k8s.CoreV1Api(api)
    created = core.create_namespaced_service(ns, service("lb", ns))
    assert created.status is not None and created.status.load_balancer is not None
    code, body = raw(api, "GET", f"/api/v1/namespaces/{ns}/services/lb")
    assert code == 200 and json.loads(body)["status"] == {"loadBalancer": {}}


def test_fresh_objects_show_their_empty_status(api: k8s.ApiClient, ns: str) -> None:
    code, body = raw(api, "POST", f"/apis/apps/v1/namespaces/{ns}/deployments", deployment("fresh", ns))
    assert code == 201 and json.loads(body)["status"] == {}
    ingress = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "fresh"},
               "spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}}
    code, body = raw(api, "POST", f"/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses", ingress)
    assert code == 201 and json.loads(body)["status"] == {"loadBalancer": {}}
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "fresh"},
             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}
    code, body = raw(api, "POST", f"/api/v1/namespaces/{ns}/persistentvolumeclaims", claim)
    created = json.loads(body)
    assert code == 201 and created["status"] == {"phase": "Pending"}
    assert created["spec"]["volumeMode"] == "Filesystem"


# 3. bytes -------------------------------------------------------------------------------------


def test_error_status_bytes_are_kube_apiservers(api: k8s.ApiClient, ns: str) -> None:
    raw(api, "POST", f"/api/v1/namespaces/{ns}/configmaps", configmap("twice", ns))
    code, body = raw(api, "POST", f"/api/v1/namespaces/{ns}/configmaps", configmap("twice", ns))
    assert code == 409
    assert body == (b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
                    b'"message":"configmaps \\"twice\\" already exists","reason":"AlreadyExists",'
                    b'"details":{"name":"twice","kind":"configmaps"},"code":409}\n')
    code, body = raw(api, "GET", f"/apis/apps/v1/namespaces/{ns}/deployments/nope")
    assert code == 404 and body.endswith(b'"details":{"name":"nope","group":"apps","kind":"deployments"},'
                                         b'"code":404}\n')


def test_objects_come_in_struct_order_with_a_newline(api: k8s.ApiClient, ns: str) -> None:
    code, body = raw(api, "POST", f"/api/v1/namespaces/{ns}/services", {
        "status": {}, "spec": {"ports": [{"port": 80}]}, "metadata": {"name": "ordered"},
        "kind": "Service", "apiVersion": "v1"})
    assert code == 201 and body.endswith(b"}\n")
    assert keys(body) == ["kind", "apiVersion", "metadata", "spec", "status"]
    code, body = raw(api, "GET", f"/api/v1/namespaces/{ns}/services/ordered")
    assert body.endswith(b"}\n") and keys(body) == ["kind", "apiVersion", "metadata", "spec", "status"]
    meta = [k for k, _ in json.loads(body, object_pairs_hook=list)[2][1]]
    assert meta[:4] == ["name", "namespace", "uid", "resourceVersion"]
    code, body = raw(api, "GET", f"/api/v1/namespaces/{ns}/services")
    assert body.endswith(b"}\n") and keys(body) == ["kind", "apiVersion", "metadata", "items"]
    code, body = raw(api, "GET", f"/api/v1/namespaces/{ns}/services", accept=TABLE)
    assert body.endswith(b"}\n") and keys(body) == ["kind", "apiVersion", "metadata", "columnDefinitions", "rows"]


def test_watch_frames_end_with_a_newline(api: k8s.ApiClient, ns: str) -> None:
    raw(api, "POST", f"/api/v1/namespaces/{ns}/configmaps", configmap("watched", ns))
    code, body = raw(api, "GET", f"/api/v1/namespaces/{ns}/configmaps",
                     query=[("watch", "true"), ("timeoutSeconds", "1"), ("fieldSelector", "metadata.name=watched")])
    assert code == 200 and body.endswith(b"\n")
    frames = body.decode().split("\n")[:-1]
    assert len(frames) == 1
    event = json.loads(frames[0], object_pairs_hook=list)
    assert [k for k, _ in event] == ["type", "object"]
    assert [k for k, _ in event[1][1]][:3] == ["kind", "apiVersion", "metadata"]


def test_custom_resources_come_as_maps_keys_sorted(clusters: Any, api: k8s.ApiClient, ns: str) -> None:
    group = f"{unique('fid')}.example.com"
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": f"gadgets.{group}"},
           "spec": {"group": group, "scope": "Namespaced",
                    "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
    clusters.kubectl("create", "-f", "-", input=manifest(crd))
    try:
        clusters.kubectl("wait", "--for=condition=Established", f"crd/gadgets.{group}", "--timeout=60s")
        path = f"/apis/{group}/v1/namespaces/{ns}/gadgets"
        code, body = raw(api, "POST", path, {"kind": "Gadget", "apiVersion": f"{group}/v1",
                                             "metadata": {"name": "g", "labels": {"z": "1", "a": "2"}},
                                             "spec": {"zeta": 1, "alpha": {"y": 1, "b": 2}}})
        assert code == 201
        for answer in (body, raw(api, "GET", f"{path}/g")[1], raw(api, "GET", path)[1]):
            assert answer.endswith(b"}\n")
            assert answer == (json.dumps(json.loads(answer), separators=(",", ":"), sort_keys=True) + "\n").encode()
        code, body = raw(api, "DELETE", f"{path}/g")
        assert json.loads(body)["kind"] == "Status" and json.loads(body)["details"]["group"] == group
    finally:
        clusters.kubectl("delete", "crd", f"gadgets.{group}", "--wait=false", check=False)


# 4. APIServices -----------------------------------------------------------------------------


def test_local_groups_are_local_apiservices(api: k8s.ApiClient) -> None:
    registration = k8s.ApiregistrationV1Api(api)
    names = {item.metadata.name for item in registration.list_api_service().items}
    assert {"v1.", "v1.apps", "v1.apiregistration.k8s.io", "v2.autoscaling", "v1beta1.metrics.k8s.io"} <= names
    apps = registration.read_api_service("v1.apps")
    assert apps.spec.service is None and apps.spec.group_priority_minimum == 17800
    available = next(c for c in apps.status.conditions if c.type == "Available")
    assert (available.status, available.reason) == ("True", "Local")
    code, body = raw(api, "GET", "/apis/apiregistration.k8s.io/v1/apiservices/v1.apps")
    assert code == 200 and json.loads(body)["spec"]["service"] is None and b'"service":null' in body
    code, body = raw(api, "GET", "/apis")
    assert code == 200
    groups = [g["name"] for g in json.loads(body)["groups"]]
    assert groups[:2] == ["apiregistration.k8s.io", "apps"] and "metrics.k8s.io" in groups
    _, body = raw(api, "GET", "/apis", accept=AGGREGATED)
    assert "apiregistration.k8s.io" in [i["metadata"]["name"] for i in json.loads(body)["items"]]


def test_an_apiservice_with_a_service_says_why_it_is_not_available(clusters: Any, api: k8s.ApiClient,
                                                                   ns: str) -> None:
    group = f"{unique('agg')}.example.com"
    name = f"v1alpha1.{group}"
    body = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": name},
            "spec": {"group": group, "version": "v1alpha1", "groupPriorityMinimum": 1000, "versionPriority": 15,
                     "service": {"namespace": ns, "name": "ext-api"}}}
    clusters.kubectl("create", "-f", "-", input=manifest(body))
    try:
        registration = k8s.ApiregistrationV1Api(api)

        def reason() -> str | None:
            conditions = registration.read_api_service(name).status.conditions or []
            return next((f"{c.status} ({c.reason})" for c in conditions if c.type == "Available"), None)

        poll(lambda: reason() == "False (ServiceNotFound)", timeout=DEADLINE_S, what="ServiceNotFound")
        assert registration.read_api_service(name).spec.service.port == 443
        assert "False (ServiceNotFound)" in clusters.kubectl("get", "apiservice", name).stdout
        k8s.CoreV1Api(api).create_namespaced_service(ns, {"metadata": {"name": "ext-api"},
                                                          "spec": {"ports": [{"port": 443}]}})
        poll(lambda: reason() == "False (MissingEndpoints)", timeout=DEADLINE_S, what="MissingEndpoints")
        bad = dict(body, metadata={"name": "v1.wrong.example.com"})
        err = fails(clusters.kubectl("create", "-f", "-", input=manifest(bad), check=False))
        assert 'metadata.name: Invalid value: "v1.wrong.example.com": must be `spec.version+"."+spec.group`' in err
    finally:
        clusters.kubectl("delete", "apiservice", name, "--wait=false", check=False)


# 5. resourceVersion on create -----------------------------------------------------------------


def test_resource_version_on_create(api: k8s.ApiClient, ns: str) -> None:
    """kubectl clears it before creating; generated clients send what they are given."""
    core = k8s.CoreV1Api(api)
    dropped = core.create_namespaced_config_map(ns, configmap("dropped", ns, metadata={
        "name": "dropped", "namespace": ns, "resourceVersion": "v1"}))
    assert dropped.metadata.resource_version.isdigit()
    refused = configmap("refused", ns, metadata={"name": "refused", "namespace": ns, "resourceVersion": "12"})
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_config_map(ns, refused)
    assert caught.value.status == 500
    assert caught.value.body == ('{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
                                 '"message":"resourceVersion should not be set on objects to be created",'
                                 '"code":500}\n')
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_config_map("refused", ns)
    assert caught.value.status == 404


# 6. metrics.k8s.io and kubectl top ------------------------------------------------------------


def top_millicores(text: str, name: str) -> int:
    for line in text.splitlines():
        cells = line.split()
        if cells and cells[0] == name:
            return int(cells[1].rstrip("m")) if cells[1].endswith("m") else int(cells[1]) * 1000
    raise AssertionError(f"{name} not in {text!r}")


def test_kubectl_top_shows_a_busy_process_pod(clusters: Any, api: k8s.ApiClient, ns: str) -> None:
    idle = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "idle", "namespace": ns},
            "spec": {"containers": [{"name": "c", "image": "registry.example/virtual:1"}]}}
    clusters.kubectl("create", "-f", "-", input=manifest(idle))
    clusters.kubectl("wait", "-n", ns, "--for=condition=Ready", "pod/idle", "--timeout=60s")
    node = clusters.kubectl_json("get", "-n", ns, "pod", "idle")["spec"]["nodeName"]
    before = top_millicores(clusters.kubectl("top", "nodes").stdout, node)
    burner = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "burner", "namespace": ns},
              "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [
                  {"name": "burn", "image": "python", "command": ["python3", "-c", "while True: pass"]}]}}
    clusters.kubectl("create", "-f", "-", input=manifest(burner))
    clusters.kubectl("wait", "-n", ns, "--for=condition=Ready", "pod/burner", "--timeout=60s")

    def busy() -> bool:
        return top_millicores(clusters.kubectl("top", "pod", "-n", ns, "burner").stdout, "burner") >= 20

    poll(busy, timeout=DEADLINE_S, interval=0.5, what="the burner's CPU in kubectl top pod")
    poll(lambda: top_millicores(clusters.kubectl("top", "nodes").stdout, node) > before,
         timeout=DEADLINE_S, interval=0.5, what="the node's CPU in kubectl top nodes to rise")
    pods = k8s.CustomObjectsApi(api).list_namespaced_custom_object("metrics.k8s.io", "v1beta1", ns, "pods")
    by_name = {item["metadata"]["name"]: item for item in pods["items"]}
    assert by_name["idle"]["containers"] == [{"name": "c", "usage": {"cpu": "0", "memory": "0"}}]
    usage = by_name["burner"]["containers"][0]["usage"]
    assert re.fullmatch(r"\d+[num]?", usage["cpu"]) and re.fullmatch(r"\d+(Ki|Mi|Gi)?", usage["memory"])
    assert re.fullmatch(r"[\d.]+s", by_name["burner"]["window"]) and by_name["burner"]["timestamp"]
    nodes = k8s.CustomObjectsApi(api).get_cluster_custom_object("metrics.k8s.io", "v1beta1", "nodes", node)
    assert nodes["kind"] == "NodeMetrics" and set(nodes["usage"]) == {"cpu", "memory"}
    code, _ = raw(api, "GET", "/apis/metrics.k8s.io/v1beta1/nodes/no-such-node")
    assert code == 404
    clusters.kubectl("delete", "-n", ns, "pod", "burner", "--grace-period=0", "--wait=false", check=False)


# 9. validation of built-in kinds ----------------------------------------------------------------


ISSUE_INGRESS = {
    "apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "web"},
    "spec": {"rules": [{"host": "web.example.com", "http": {"paths": [
        {"path": "/", "backend": {"serviceName": "web", "servicePort": 80}}]}}]},
}


def test_an_ingress_a_real_cluster_refuses_is_refused(clusters: Any, ns: str) -> None:
    body = manifest(ISSUE_INGRESS)
    for extra in (["--dry-run=server", "--validate=false"], ["--validate=false"]):
        err = fails(clusters.kubectl("create", "-n", ns, *extra, "-f", "-", input=body, check=False))
        assert ('The Ingress "web" is invalid: spec.rules[0].http.paths[0].pathType: Required value: '
                "pathType must be specified") in err
    fails(clusters.kubectl("apply", "-n", ns, "--dry-run=server", "-f", "-", input=body, check=False))
    assert clusters.kubectl("get", "-n", ns, "ingress", "web", check=False).returncode != 0


def test_a_deployments_selector_is_immutable(clusters: Any, ns: str) -> None:
    clusters.kubectl("apply", "-n", ns, "-f", "-", input=manifest(deployment("sel", ns)))
    changed = deployment("sel", ns, app="other")
    err = fails(clusters.kubectl("apply", "-n", ns, "-f", "-", input=manifest(changed), check=False))
    assert ('The Deployment "sel" is invalid: spec.selector: Invalid value: v1.LabelSelector{MatchLabels:'
            'map[string]string{"app":"other"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: '
            "field is immutable") in err
    mismatch = deployment("mismatch", ns)
    mismatch["spec"]["template"]["metadata"]["labels"] = {"app": "else"}
    err = fails(clusters.kubectl("create", "-n", ns, "-f", "-", input=manifest(mismatch), check=False))
    assert "`selector` does not match template `labels`" in err


def test_invalid_pods_and_services_get_invalid_statuses_with_causes(api: k8s.ApiClient, ns: str) -> None:
    core = k8s.CoreV1Api(api)
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod(ns, {"metadata": {"name": "noimage"}, "spec": {"containers": [{"name": "c"}]}})
    assert caught.value.status == 422
    status = json.loads(caught.value.body)
    assert status["reason"] == "Invalid"
    assert {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers[0].image"} in \
        status["details"]["causes"]
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_service(ns, {"metadata": {"name": "bad"},
                                            "spec": {"type": "Internal", "ports": [{"port": 80}]}})
    status = json.loads(caught.value.body)
    assert status["details"]["causes"] == [{"reason": "FieldValueNotSupported", "field": "spec.type", "message":
                                            'Unsupported value: "Internal": supported values: "ClusterIP", '
                                            '"ExternalName", "LoadBalancer", "NodePort"'}]
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "keys"}, "data": {"no spaces": "x"}})
    assert json.loads(caught.value.body)["details"]["causes"][0]["field"] == "data[no spaces]"


def test_a_jobs_template_is_immutable(clusters: Any, ns: str) -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "once", "namespace": ns},
           "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "c", "image": "registry.example/virtual:1"}]}}}}
    clusters.kubectl("create", "-f", "-", input=manifest(job))
    patch = json.dumps({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "other:2"}]}}}})
    err = fails(clusters.kubectl("patch", "-n", ns, "job", "once", "-p", patch, check=False))
    assert 'The Job "once" is invalid: spec.template: Invalid value: ' in err and "field is immutable" in err
    no_restart = json.loads(json.dumps(job))
    no_restart["metadata"]["name"] = "always"
    del no_restart["spec"]["template"]["spec"]["restartPolicy"]
    err = fails(clusters.kubectl("create", "-f", "-", input=manifest(no_restart), check=False))
    assert 'spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"' in err


def test_tethers_own_writers_pass_validation(clusters: Any, ns: str) -> None:
    """The controllers' writes (ReplicaSets, pods, endpoints, tokens) go through the same
    validation: a Deployment rolls out and its Service gets endpoints."""
    clusters.kubectl("apply", "-f", "-", input=manifest(deployment("ok", ns, replicas=2),
                                                         service("ok", ns)))
    clusters.kubectl("rollout", "status", "-n", ns, "deploy/ok", "--timeout=90s", timeout=120)
    subsets = poll(lambda: clusters.kubectl_json("get", "-n", ns, "endpoints", "ok").get("subsets"),
                   timeout=DEADLINE_S, what="endpoints of the Service")
    assert len(subsets[0]["addresses"]) == 2
