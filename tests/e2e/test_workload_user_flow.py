"""Workloads as a new user tries them: the real kubelet runs pods, Services carry traffic.

The issue's "Must show" flow, with the pinned kubectl on the shared local clusters: a 5-replica
nginx Deployment becomes ready, rolls, scales and self-heals; EndpointSlices list its pods; logs
stream; exec sees the pod env; port-forward and the ClusterIP reach the pods from the host and
from another pod.
"""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import time
import urllib.request
from typing import Any

import pytest
from e2e_util import Streamed, kubectl_binary, poll

pytestmark = pytest.mark.e2e


def pods(clusters: Any, ns: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = clusters.kubectl_json("get", "pods", "-n", ns, "-l", selector)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def http_get(url: str, timeout_s: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return str(response.read().decode())


def test_deployment_runs_rolls_scales_and_heals(clusters: Any, ns: str) -> None:
    clusters.kubectl("create", "deployment", "web", "--image=nginx", "--replicas=5", "--port=80", "-n", ns)
    clusters.kubectl("rollout", "status", "deploy/web", "-n", ns, "--timeout=60s", timeout=90)
    deploy = clusters.kubectl_json("get", "deploy", "web", "-n", ns)
    assert deploy["status"]["readyReplicas"] == 5
    running = pods(clusters, ns, "app=web")
    assert len(running) == 5 and all(p["status"]["phase"] == "Running" for p in running)
    ips = {p["status"]["podIP"] for p in running}
    assert len(ips) == 5 and all(ip.startswith("127.") for ip in ips)
    # Each pod is a real process answering on its own address.
    assert "Welcome to nginx!" in http_get(f"http://{next(iter(ips))}/")

    clusters.kubectl("scale", "deploy/web", "--replicas=2", "-n", ns)
    poll(lambda: len(pods(clusters, ns, "app=web")) == 2, timeout=30, what="scale down to 2")

    clusters.kubectl("set", "image", "deploy/web", "nginx=nginx:1.27", "-n", ns)
    clusters.kubectl("rollout", "status", "deploy/web", "-n", ns, "--timeout=60s", timeout=90)
    rolled = pods(clusters, ns, "app=web")
    assert {p["spec"]["containers"][0]["image"] for p in rolled} == {"nginx:1.27"}
    assert len(clusters.kubectl_json("get", "rs", "-n", ns)["items"]) == 2

    victim = rolled[0]["metadata"]["name"]
    clusters.kubectl("delete", "pod", victim, "-n", ns, "--wait=true", timeout=60)
    poll(lambda: len(pods(clusters, ns, "app=web")) == 2
         and victim not in {p["metadata"]["name"] for p in pods(clusters, ns, "app=web")},
         timeout=30, what="a replacement pod")


def test_service_endpoints_and_traffic(clusters: Any, ns: str) -> None:
    clusters.kubectl("create", "deployment", "web", "--image=nginx", "--replicas=3", "--port=80", "-n", ns)
    clusters.kubectl("expose", "deploy/web", "--port=80", "-n", ns)
    clusters.kubectl("rollout", "status", "deploy/web", "-n", ns, "--timeout=60s", timeout=90)
    pod_ips = {p["status"]["podIP"] for p in pods(clusters, ns, "app=web")}

    def slice_ips() -> set[str]:
        slices = clusters.kubectl_json("get", "endpointslices", "-n", ns, "-l",
                                       "kubernetes.io/service-name=web")["items"]
        return {a for s in slices for e in s.get("endpoints") or [] if e["conditions"].get("ready")
                for a in e["addresses"]}

    poll(lambda: slice_ips() == pod_ips, timeout=30, what="EndpointSlices listing the pod IPs")
    cluster_ip = clusters.kubectl_json("get", "svc", "web", "-n", ns)["spec"]["clusterIP"]
    # From the host (rootless mode: the ClusterIP is a loopback address the proxy listens on) ...
    served_by = {http_get(f"http://{cluster_ip}/").split("from pod ")[1].split(" ")[0] for _ in range(9)}
    assert served_by <= {p["metadata"]["name"] for p in pods(clusters, ns, "app=web")}
    assert len(served_by) > 1  # balanced over the endpoints
    # ... and from another pod, by the Service's environment variables.
    clusters.kubectl("run", "client", "-n", ns, "--image=python:3.12", "--restart=Never", "--",
                     "python3", "-c",
                     "import os,urllib.request;"
                     "print(urllib.request.urlopen('http://'+os.environ['WEB_SERVICE_HOST']).status)")
    poll(lambda: clusters.kubectl_json("get", "pod", "client", "-n", ns)["status"].get("phase") == "Succeeded",
         timeout=60, what="the client pod to finish")
    assert clusters.kubectl("logs", "client", "-n", ns).stdout.strip() == "200"


@pytest.mark.skipif(shutil.which("wget") is None and shutil.which("busybox") is None,
                    reason="busybox-style pods run this machine's wget; it is not installed here")
def test_busybox_wget_through_the_service(clusters: Any, ns: str) -> None:
    clusters.kubectl("create", "deployment", "web", "--image=nginx", "--port=80", "-n", ns)
    clusters.kubectl("expose", "deploy/web", "--port=80", "-n", ns)
    clusters.kubectl("rollout", "status", "deploy/web", "-n", ns, "--timeout=60s", timeout=90)
    clusters.kubectl("run", "probe", "-n", ns, "--image=busybox", "--restart=Never", "--",
                     "sh", "-c", "wget -qO- http://$WEB_SERVICE_HOST")
    poll(lambda: clusters.kubectl_json("get", "pod", "probe", "-n", ns)["status"].get("phase") == "Succeeded",
         timeout=60, what="the busybox pod to finish")
    assert "Welcome to nginx!" in clusters.kubectl("logs", "probe", "-n", ns).stdout


def test_logs_follow_exec_env_and_port_forward(clusters: Any, ns: str) -> None:
    clusters.kubectl("create", "deployment", "echo", "--image=tether/echo", "--port=8080", "-n", ns)
    clusters.kubectl("rollout", "status", "deploy/echo", "-n", ns, "--timeout=60s", timeout=90)
    pod = pods(clusters, ns, "app=echo")[0]
    name, ip = pod["metadata"]["name"], pod["status"]["podIP"]

    follow = Streamed(clusters, "logs", "-f", name, "-n", ns)
    try:
        poll(lambda: any("listening" in line for line in follow.snapshot()), timeout=20, what="the startup line")
        answer = json.loads(http_get(f"http://{ip}:8080/hello?x=1"))
        assert answer["pod"] == name and answer["namespace"] == ns and answer["path"] == "/hello?x=1"
        poll(lambda: any("GET /hello?x=1" in line for line in follow.snapshot()), timeout=20,
             what="the access log line in `logs -f`")
    finally:
        follow.stop()

    env = clusters.kubectl("exec", name, "-n", ns, "--", "env").stdout
    assert f"POD_NAME={name}" in env and f"POD_IP={ip}" in env and f"HOSTNAME={name}" in env

    port = 19000 + os.getpid() % 500
    forward = subprocess.Popen(
        [kubectl_binary(), "--context", clusters.names[0], "port-forward", "-n", ns, f"pod/{name}",
         f"{port}:8080"],
        env={**os.environ, "KUBECONFIG": str(clusters.kubeconfig),
             "KUBECACHEDIR": str(clusters.cache_root / clusters.names[0])},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        body = ""
        while time.monotonic() < deadline:
            try:
                body = http_get(f"http://127.0.0.1:{port}/through-forward")
                break
            except OSError:
                time.sleep(0.2)
        assert json.loads(body)["path"] == "/through-forward"
    finally:
        forward.terminate()
        forward.wait(10)


def test_run_interactive_with_stdin_and_a_tty(clusters: Any, ns: str) -> None:
    # `kubectl run -i --rm`: stdin reaches the container's process, its output comes back.
    piped = clusters.kubectl("run", "calc", "-i", "--rm", "-n", ns, "--image=python:3.12", "--restart=Never",
                             "--", "python3", "-c", "import sys; exec(sys.stdin.read())",
                             input="print(6 * 7)\n", timeout=90)
    assert "42" in piped.stdout.splitlines()
    assert clusters.kubectl("get", "pod", "calc", "-n", ns, check=False).returncode != 0  # --rm removed it

    # `kubectl run -it --rm ... -- sh`: a shell on a pty, driven through a pty as a user types.
    controller, terminal = pty.openpty()
    env = {**os.environ, "KUBECONFIG": str(clusters.kubeconfig),
           "KUBECACHEDIR": str(clusters.cache_root / clusters.names[0])}
    shell = subprocess.Popen(
        [kubectl_binary(), "--context", clusters.names[0], "run", "shell", "-it", "--rm", "-n", ns,
         "--image=busybox", "--restart=Never", "--", "sh"],
        stdin=terminal, stdout=terminal, stderr=terminal, env=env, start_new_session=True)
    os.close(terminal)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        sent = False
        while time.monotonic() < deadline and b"hello-from-42" not in seen:
            ready, _, _ = select.select([controller], [], [], 0.5)
            if ready:
                try:
                    seen += os.read(controller, 4096)
                except OSError:
                    break
            if not sent and b"command prompt" in seen:
                time.sleep(1)
                os.write(controller, b"echo hello-from-$((6*7))\n")
                sent = True
        os.write(controller, b"exit\n")
        assert shell.wait(30) == 0
    finally:
        if shell.poll() is None:
            shell.kill()
        os.close(controller)
    assert b"hello-from-42" in seen
