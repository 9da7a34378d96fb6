"""kubectl's generator commands, which POST protobuf bodies (kubectl >= 1.32)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from e2e_util import unique

pytestmark = pytest.mark.e2e


def test_create_namespace(clusters: Any) -> None:
    name = unique("pb")
    out = clusters.kubectl("create", "namespace", name).stdout
    assert out.strip() == f"namespace/{name} created"
    ns = clusters.kubectl_json("get", "namespace", name)
    assert ns["status"]["phase"] == "Active"
    assert ns["metadata"]["labels"]["kubernetes.io/metadata.name"] == name
    again = clusters.kubectl("create", "namespace", name, check=False)
    assert again.returncode == 1
    assert f'namespaces "{name}" already exists' in again.stderr
    clusters.kubectl("delete", "namespace", name, "--wait=false")


def test_create_configmap_from_literal(clusters: Any, ns: str) -> None:
    out = clusters.kubectl("create", "configmap", "lit", "-n", ns, "--from-literal=a=b", "--from-literal=long=x y z").stdout
    assert out.strip() == "configmap/lit created"
    cm = clusters.kubectl_json("get", "-n", ns, "cm", "lit")
    assert cm["data"] == {"a": "b", "long": "x y z"}
    assert cm["metadata"]["namespace"] == ns
    assert cm["metadata"]["uid"] and cm["metadata"]["creationTimestamp"]
    managers = [m["manager"] for m in clusters.kubectl_json("get", "-n", ns, "cm", "lit", "--show-managed-fields")["metadata"]["managedFields"]]
    assert managers == ["kubectl-create"]
    dup = clusters.kubectl("create", "configmap", "lit", "-n", ns, "--from-literal=a=b", check=False)
    assert dup.returncode == 1
    assert 'configmaps "lit" already exists' in dup.stderr


def test_create_deployment(clusters: Any, ns: str) -> None:
    out = clusters.kubectl("create", "deployment", "gen", "-n", ns, "--image=nginx:1.27", "--replicas=2", "--port=80").stdout
    assert out.strip() == "deployment.apps/gen created"
    dep = clusters.kubectl_json("get", "-n", ns, "deploy", "gen")
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["selector"] == {"matchLabels": {"app": "gen"}}
    assert dep["spec"]["template"]["metadata"]["labels"] == {"app": "gen"}
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["name"] == "nginx" and container["image"] == "nginx:1.27"
    assert container["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    assert dep["metadata"]["generation"] == 1
    # The scale subresource works on a generated deployment too.
    clusters.kubectl("scale", "-n", ns, "deploy", "gen", "--replicas=3")
    assert clusters.kubectl_json("get", "-n", ns, "deploy", "gen")["spec"]["replicas"] == 3


def test_create_secret_generic(clusters: Any, ns: str) -> None:
    out = clusters.kubectl("create", "secret", "generic", "sec", "-n", ns, "--from-literal=user=admin",
                           "--from-literal=password=s3cr=t").stdout
    assert out.strip() == "secret/sec created"
    secret = clusters.kubectl_json("get", "-n", ns, "secret", "sec")
    assert secret["type"] == "Opaque"
    decoded = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert decoded == {"user": "admin", "password": "s3cr=t"}
    table = clusters.kubectl("get", "-n", ns, "secret", "sec").stdout.splitlines()
    assert table[0].split() == ["NAME", "TYPE", "DATA", "AGE"]
    assert table[1].split()[:3] == ["sec", "Opaque", "2"]


def test_other_generators(clusters: Any, ns: str) -> None:
    assert clusters.kubectl("create", "service", "clusterip", "svc", "-n", ns, "--tcp=80:8080").stdout.strip() == "service/svc created"
    svc = clusters.kubectl_json("get", "-n", ns, "svc", "svc")
    assert svc["spec"]["ports"][0]["port"] == 80 and svc["spec"]["ports"][0]["targetPort"] == 8080
    assert svc["spec"]["selector"] == {"app": "svc"}
    assert clusters.kubectl("create", "serviceaccount", "sa", "-n", ns).stdout.strip() == "serviceaccount/sa created"
    out = clusters.kubectl("create", "job", "jb", "-n", ns, "--image=busybox:1.36", "--", "echo", "hi").stdout
    assert out.strip() == "job.batch/jb created"
    job = clusters.kubectl_json("get", "-n", ns, "job", "jb")
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["echo", "hi"]
    assert clusters.kubectl("auth", "can-i", "create", "pods").stdout.strip() == "yes"
