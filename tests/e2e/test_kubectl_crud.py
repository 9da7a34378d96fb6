"""kubectl apply / get / label / annotate / scale and discovery against a local cluster."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_util import manifest, unique

pytestmark = pytest.mark.e2e

APP = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
        env:
        - {name: A, value: "1"}
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports:
  - port: 80
    targetPort: 8080
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
data:
  color: blue
"""


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def header(text: str) -> list[str]:
    return lines(text)[0].split()


def configmap(name: str, ns: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data}


def test_apply_created_unchanged_configured(clusters: Any, ns: str, tmp_path: Path) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(APP)
    first = clusters.kubectl("apply", "-n", ns, "-f", str(path)).stdout
    assert lines(first) == ["deployment.apps/web created", "service/web created", "configmap/web-config created"]

    second = clusters.kubectl("apply", "-n", ns, "-f", str(path)).stdout
    assert lines(second) == ["deployment.apps/web unchanged", "service/web unchanged", "configmap/web-config unchanged"]

    cm_before = clusters.kubectl_json("get", "-n", ns, "cm", "web-config")
    svc_rv = clusters.kubectl_json("get", "-n", ns, "svc", "web")["metadata"]["resourceVersion"]
    path.write_text(APP.replace("color: blue", "color: green").replace("replicas: 1", "replicas: 2"))
    third = clusters.kubectl("apply", "-n", ns, "-f", str(path)).stdout
    assert lines(third) == ["deployment.apps/web configured", "service/web unchanged", "configmap/web-config configured"]

    cm = clusters.kubectl_json("get", "-n", ns, "cm", "web-config")
    assert cm["data"] == {"color": "green"}
    assert int(cm["metadata"]["resourceVersion"]) > int(cm_before["metadata"]["resourceVersion"])
    last_applied = json.loads(cm["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert last_applied["data"] == {"color": "green"}
    dep = clusters.kubectl_json("get", "-n", ns, "deploy", "web")
    assert dep["spec"]["replicas"] == 2
    assert dep["metadata"]["generation"] == 2
    assert clusters.kubectl_json("get", "-n", ns, "svc", "web")["metadata"]["resourceVersion"] == svc_rv


def test_get_output_formats(clusters: Any, ns: str, tmp_path: Path) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(APP)
    clusters.kubectl("apply", "-n", ns, "-f", str(path))

    as_yaml = yaml.safe_load(clusters.kubectl("get", "-n", ns, "cm", "web-config", "-o", "yaml").stdout)
    meta = as_yaml["metadata"]
    assert as_yaml["kind"] == "ConfigMap" and as_yaml["apiVersion"] == "v1"
    assert meta["namespace"] == ns and meta["name"] == "web-config"
    assert re.fullmatch(r"[0-9a-f-]{36}", meta["uid"])
    assert int(meta["resourceVersion"]) > 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", meta["creationTimestamp"])

    as_json = json.loads(clusters.kubectl("get", "-n", ns, "deploy", "web", "-o", "json").stdout)
    assert as_json["metadata"]["uid"] != meta["uid"]
    assert as_json["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.27"

    listed = clusters.kubectl_json("get", "-n", ns, "cm")
    assert listed["kind"] == "List"
    assert {i["metadata"]["name"] for i in listed["items"]} >= {"web-config"}

    wide = clusters.kubectl("get", "-n", ns, "deploy", "-o", "wide").stdout
    assert header(wide) == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
    row = lines(wide)[1].split()
    assert row[0] == "web" and row[5:] == ["nginx", "nginx:1.27", "app=web"]

    plain = clusters.kubectl("get", "-n", ns, "svc", "web").stdout
    assert header(plain) == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    assert lines(plain)[1].split()[:2] == ["web", "ClusterIP"]
    assert "80/TCP" in lines(plain)[1]
    svc_wide = clusters.kubectl("get", "-n", ns, "svc", "web", "-o", "wide").stdout
    assert header(svc_wide)[-1] == "SELECTOR" and lines(svc_wide)[1].split()[-1] == "app=web"

    cms = clusters.kubectl("get", "-n", ns, "cm", "web-config").stdout
    assert header(cms) == ["NAME", "DATA", "AGE"]
    assert lines(cms)[1].split()[:2] == ["web-config", "1"]

    name_only = clusters.kubectl("get", "-n", ns, "cm,deploy", "-o", "name").stdout
    assert set(lines(name_only)) >= {"configmap/web-config", "deployment.apps/web"}

    jsonpath = clusters.kubectl("get", "-n", ns, "cm", "web-config", "-o", "jsonpath={.data.color}").stdout
    assert jsonpath == "blue"


def test_get_table_options(clusters: Any, ns: str) -> None:
    objs = [configmap(n, ns, k="v") for n in ("c-b", "c-a", "c-c")]
    for i, obj in enumerate(objs):
        obj["metadata"]["labels"] = {"tier": f"t{i}"}
    clusters.kubectl("create", "-f", "-", input=manifest(*objs))

    shown = clusters.kubectl("get", "-n", ns, "cm", "c-a", "--show-labels").stdout
    assert header(shown)[-1] == "LABELS" and lines(shown)[1].split()[-1] == "tier=t1"
    by_label = clusters.kubectl("get", "-n", ns, "cm", "-L", "tier", "-l", "tier in (t0,t2)").stdout
    assert header(by_label)[-1] == "TIER"
    assert [line.split()[0] for line in lines(by_label)[1:]] == ["c-b", "c-c"]
    assert [line.split()[-1] for line in lines(by_label)[1:]] == ["t0", "t2"]

    sorted_rows = clusters.kubectl("get", "-n", ns, "cm", "--sort-by=.metadata.labels.tier", "-l", "tier").stdout
    assert [line.split()[0] for line in lines(sorted_rows)[1:]] == ["c-b", "c-a", "c-c"]
    chunked = clusters.kubectl("get", "-n", ns, "cm", "--chunk-size=1", "-l", "tier").stdout
    assert lines(chunked)[0].split()[0] == "NAME"
    assert [line.split()[0] for line in lines(chunked)[1:]] == ["c-a", "c-b", "c-c"]

    all_ns = clusters.kubectl("get", "cm", "-A", "-l", "tier=t2").stdout
    assert header(all_ns)[:2] == ["NAMESPACE", "NAME"]
    assert lines(all_ns)[1].split()[:2] == [ns, "c-c"]


def test_get_all(clusters: Any, ns: str, tmp_path: Path) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(APP)
    clusters.kubectl("apply", "-n", ns, "-f", str(path))
    out = clusters.kubectl("get", "all", "-n", ns).stdout
    names = {line.split()[0] for line in lines(out) if not line.startswith("NAME")}
    assert {"service/web", "deployment.apps/web"} <= names
    assert "configmap/web-config" not in names  # configmaps are not in the "all" category


def test_generate_name(clusters: Any, ns: str) -> None:
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"}, "data": {"a": "b"}}
    out = clusters.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(obj)).stdout.strip()
    match = re.fullmatch(r"configmap/gen-([a-z0-9]{5}) created", out)
    assert match, out
    got = clusters.kubectl_json("get", "-n", ns, "cm", f"gen-{match.group(1)}")
    assert got["metadata"]["generateName"] == "gen-"


def test_api_resources(clusters: Any) -> None:
    out = clusters.kubectl("api-resources", "-o", "wide").stdout
    cols = header(out)
    assert cols[:5] == ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    pods = next(line.split() for line in lines(out) if line.split()[0] == "pods")
    assert pods[:5] == ["pods", "po", "v1", "true", "Pod"]
    assert "create,delete,deletecollection,get,list,patch,update,watch" in pods
    assert "all" in pods[-1].split(",")
    deployments = next(line.split() for line in lines(out) if line.split()[0] == "deployments")
    assert deployments[:5] == ["deployments", "deploy", "apps/v1", "true", "Deployment"]
    namespaces = next(line.split() for line in lines(out) if line.split()[0] == "namespaces")
    assert namespaces[3] == "false"

    namespaced = lines(clusters.kubectl("api-resources", "--namespaced=false", "-o", "name").stdout)
    assert "namespaces" in namespaced and "pods" not in namespaced
    apps = lines(clusters.kubectl("api-resources", "--api-group=apps", "-o", "name").stdout)
    assert "deployments.apps" in apps and "pods" not in apps


def test_api_versions_and_version(clusters: Any) -> None:
    versions = set(lines(clusters.kubectl("api-versions").stdout))
    assert {"v1", "apps/v1", "apiextensions.k8s.io/v1", "discovery.k8s.io/v1", "coordination.k8s.io/v1"} <= versions
    info = json.loads(clusters.kubectl("version", "-o", "json").stdout)
    assert info["serverVersion"]["major"] == "1"
    assert info["serverVersion"]["minor"].isdigit()
    for path in ("/api", "/apis"):
        doc = json.loads(clusters.kubectl("get", "--raw", path).stdout)
        assert doc["kind"] in ("APIVersions", "APIGroupList")


def test_label_and_annotate(clusters: Any, ns: str) -> None:
    clusters.kubectl("create", "-f", "-", input=manifest(configmap("lab", ns, a="1")))
    assert clusters.kubectl("label", "-n", ns, "cm", "lab", "env=prod", "tier=web").stdout.strip() == "configmap/lab labeled"
    assert clusters.kubectl_json("get", "-n", ns, "cm", "lab")["metadata"]["labels"] == {"env": "prod", "tier": "web"}

    refused = clusters.kubectl("label", "-n", ns, "cm", "lab", "env=dev", check=False)
    assert refused.returncode != 0 and "--overwrite" in refused.stderr
    clusters.kubectl("label", "-n", ns, "cm", "lab", "env=dev", "--overwrite")
    clusters.kubectl("label", "-n", ns, "cm", "lab", "tier-")
    assert clusters.kubectl_json("get", "-n", ns, "cm", "lab")["metadata"]["labels"] == {"env": "dev"}
    selected = clusters.kubectl("get", "-n", ns, "cm", "-l", "env=dev", "-o", "name").stdout
    assert lines(selected) == ["configmap/lab"]

    out = clusters.kubectl("annotate", "-n", ns, "cm", "lab", "note=hello world").stdout
    assert out.strip() == "configmap/lab annotated"
    meta = clusters.kubectl_json("get", "-n", ns, "cm", "lab")["metadata"]
    assert meta["annotations"] == {"note": "hello world"}
    clusters.kubectl("annotate", "-n", ns, "cm", "lab", "note-")
    meta = clusters.kubectl_json("get", "-n", ns, "cm", "lab")["metadata"]
    assert not meta.get("annotations")
    assert meta["labels"] == {"env": "dev"}


def test_scale_subresource(clusters: Any, ns: str, tmp_path: Path) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(APP)
    clusters.kubectl("apply", "-n", ns, "-f", str(path))
    before = clusters.kubectl_json("get", "-n", ns, "deploy", "web")
    out = clusters.kubectl("scale", "-n", ns, "deploy", "web", "--replicas=3").stdout
    assert out.strip() == "deployment.apps/web scaled"
    after = clusters.kubectl_json("get", "-n", ns, "deploy", "web")
    assert after["spec"]["replicas"] == 3
    assert after["metadata"]["generation"] == before["metadata"]["generation"] + 1
    scale = clusters.kubectl_json("get", "-n", ns, "deploy", "web", "--subresource=scale")
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"]["replicas"] == 3
    assert scale["status"]["selector"] == "app=web"

    stale = clusters.kubectl("scale", "-n", ns, "deploy", "web", "--replicas=5", "--current-replicas=2", check=False)
    assert stale.returncode != 0
    assert clusters.kubectl_json("get", "-n", ns, "deploy", "web")["spec"]["replicas"] == 3
    bad = clusters.kubectl("scale", "-n", ns, "deploy", "nope", "--replicas=1", check=False)
    assert bad.returncode == 1 and 'deployments.apps "nope" not found' in bad.stderr


def test_second_cluster_is_independent(clusters: Any) -> None:
    name = unique("iso")
    clusters.kubectl("create", "-f", "-", input=manifest(configmap(name, "default", a="1")), context="cluster1")
    missing = clusters.kubectl("get", "cm", name, "-n", "default", context="cluster2", check=False)
    assert missing.returncode == 1 and "NotFound" in missing.stderr
    clusters.kubectl("delete", "cm", name, "-n", "default", context="cluster1")


def test_describe_edit_set_image(clusters: Any, ns: str, tmp_path: Path) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(APP)
    clusters.kubectl("apply", "-n", ns, "-f", str(path))

    described = clusters.kubectl("describe", "-n", ns, "cm", "web-config").stdout
    assert re.search(r"^Name:\s+web-config$", described, re.M)
    assert re.search(rf"^Namespace:\s+{ns}$", described, re.M)
    assert "color:" in described and "blue" in described
    dep = clusters.kubectl("describe", "-n", ns, "deploy", "web").stdout
    assert re.search(r"^Selector:\s+app=web$", dep, re.M)
    assert re.search(r"Image:\s+nginx:1.27", dep)

    editor = f"{sys.executable} -c \"import sys,pathlib; p=pathlib.Path(sys.argv[1]); p.write_text(p.read_text().replace('color: blue', 'color: edited'))\""
    out = clusters.kubectl("edit", "-n", ns, "cm", "web-config", env={"KUBE_EDITOR": editor}).stdout
    assert out.strip() == "configmap/web-config edited"
    assert clusters.kubectl_json("get", "-n", ns, "cm", "web-config")["data"] == {"color": "edited"}

    out = clusters.kubectl("set", "image", "-n", ns, "deploy/web", "nginx=nginx:1.28").stdout
    assert out.strip() == "deployment.apps/web image updated"
    got = clusters.kubectl_json("get", "-n", ns, "deploy", "web")
    assert got["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.28"
    assert got["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]

    deleted = clusters.kubectl("delete", "-n", ns, "cm", "--all").stdout
    assert 'configmap "web-config" deleted' in deleted
    assert "web-config" not in clusters.kubectl("get", "-n", ns, "cm", "-o", "name").stdout
