"""The kubelet's pure parts: image resolution, container environment, pod status."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.local.kubelet import environment, images
from tether.local.kubelet.status import ContainerState, PodRuntimeState, phase, pod_status


@pytest.mark.parametrize(
    ("image", "repo"),
    [
        ("nginx", "nginx"),
        ("nginx:1.27", "nginx"),
        ("docker.io/library/nginx:1.27@sha256:abc", "nginx"),
        ("registry.k8s.io/e2e-test-images/agnhost:2.39", "e2e-test-images/agnhost"),
        ("localhost:5000/team/app:v1", "localhost:5000/team/app"),
    ],
)
def test_repository(image: str, repo: str) -> None:
    assert images.repository(image) == repo


def test_builtin_images_resolve_to_programs_on_their_port() -> None:
    nothing = images.ImageMap()
    web = images.resolve({"image": "nginx:1.27", "ports": [{"containerPort": 8081}]}, nothing)
    assert web.behaviour == "web" and web.argv[-2:] == ("--port", "8081")
    echo = images.resolve({"image": "tether/echo"}, nothing)
    assert echo.behaviour == "echo" and echo.argv[-1] == "8080"
    shell = images.resolve({"image": "busybox", "command": ["sh", "-c", "echo hi"]}, nothing)
    assert shell.argv == ("sh", "-c", "echo hi")
    python = images.resolve({"image": "python:3.12", "command": ["python", "-c", "print(1)"]}, nothing)
    assert python.argv == (sys.executable, "-c", "print(1)")
    assert images.resolve({"image": "example.com/unknown:1"}, nothing).virtual


def test_image_map_file_extends_and_rejects_bad_entries(tmp_path: Path) -> None:
    good = tmp_path / "images.yaml"
    good.write_text("images:\n  myorg/api:\n    command: [/bin/echo, api]\n  nginx:\n    virtual: true\n")
    mapped = images.ImageMap.load(good)
    assert images.resolve({"image": "myorg/api:2", "args": ["x"]}, mapped).argv == ("/bin/echo", "api", "x")
    assert images.resolve({"image": "nginx"}, mapped).virtual
    bad = tmp_path / "bad.yaml"
    bad.write_text("images:\n  myorg/api: {}\n")
    with pytest.raises(images.ImageError, match="needs command"):
        images.ImageMap.load(bad)


def _pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "web-1", "namespace": "shop", "uid": "u1", "labels": {"app": "web"}},
        "spec": {"nodeName": "n0", **spec},
        "status": {"podIP": "127.16.1.5"},
    }


def test_container_env_resolves_every_source() -> None:
    configmaps = {("shop", "cfg"): {"data": {"mode": "fast", "level": "3"}}}
    secrets = {("shop", "db"): {"data": {"password": base64.b64encode(b"s3cret").decode()}}}
    services = [
        {"metadata": {"name": "redis-primary", "namespace": "shop"},
         "spec": {"clusterIP": "127.64.0.20", "ports": [{"port": 6379, "protocol": "TCP", "name": "redis"}]}},
        {"metadata": {"name": "other", "namespace": "elsewhere"}, "spec": {"clusterIP": "127.64.0.21",
                                                                        "ports": [{"port": 1}]}},
        {"metadata": {"name": "kubernetes", "namespace": "default"},
         "spec": {"clusterIP": "127.64.0.1", "ports": [{"port": 443, "protocol": "TCP", "name": "https"}]}},
    ]
    container = {
        "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
        "env": [
            {"name": "A", "value": "1"},
            {"name": "B", "value": "$(A)-$(MISSING)-$$"},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
            {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "none", "key": "x", "optional": True}}},
        ],
    }
    env = environment.container_env(
        _pod(), container, services=services,
        configmaps=lambda ns, n: configmaps.get((ns, n)), secrets=lambda ns, n: secrets.get((ns, n)),
    )
    assert env["CFG_mode"] == "fast" and env["B"] == "1-$(MISSING)-$"
    assert env["POD"] == "web-1" and env["APP"] == "web" and env["PW"] == "s3cret"
    assert "OPT" not in env
    assert env["REDIS_PRIMARY_SERVICE_HOST"] == "127.64.0.20"
    assert env["REDIS_PRIMARY_SERVICE_PORT_REDIS"] == "6379"
    assert env["REDIS_PRIMARY_PORT_6379_TCP_ADDR"] == "127.64.0.20"
    assert env["KUBERNETES_SERVICE_HOST"] == "127.64.0.1"
    assert "OTHER_SERVICE_HOST" not in env


def test_missing_required_reference_is_a_config_error() -> None:
    container = {"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]}
    with pytest.raises(environment.ConfigError, match='configmap "cfg" not found'):
        environment.container_env(_pod(), container, services=[], configmaps=lambda ns, n: None,
                                  secrets=lambda ns, n: None)


def _state(*containers: ContainerState, init: tuple[ContainerState, ...] = ()) -> PodRuntimeState:
    return PodRuntimeState(pod_ip="127.16.1.5", host_ip="127.16.1.1", start_time="t0", init=init,
                           containers=containers)


@pytest.mark.parametrize(
    ("policy", "containers", "expected"),
    [
        ("Always", (ContainerState("a", "i"),), "Pending"),
        ("Always", (ContainerState("a", "i").running("t"),), "Running"),
        ("Never", (ContainerState("a", "i").running("t").terminated(0, "t2"),), "Succeeded"),
        ("Never", (ContainerState("a", "i").running("t").terminated(1, "t2"),), "Failed"),
        ("OnFailure", (ContainerState("a", "i").running("t").terminated(1, "t2"),), "Running"),
        ("Always", (ContainerState("a", "i").running("t").terminated(1, "t2").restarted()
                    .waiting("CrashLoopBackOff"),), "Running"),
    ],
)
def test_phase(policy: str, containers: tuple[ContainerState, ...], expected: str) -> None:
    assert phase(policy, _state(*containers)) == expected


def test_pod_status_reports_ready_and_ips() -> None:
    ready = ContainerState("a", "nginx").running("t1")
    status = pod_status(_pod(), _state(ready.__class__(**{**ready.__dict__, "ready": True})), "t2")
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["Ready"] == "True" and conditions["ContainersReady"] == "True"
    assert status["phase"] == "Running" and status["podIPs"] == [{"ip": "127.16.1.5"}]
    assert status["containerStatuses"][0]["state"] == {"running": {"startedAt": "t1"}}
    waiting = pod_status(_pod(), _state(ContainerState("a", "nginx")), "t2")
    assert {c["type"]: c.get("reason") for c in waiting["conditions"]}["Ready"] == "ContainersNotReady"
