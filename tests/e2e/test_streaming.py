"""exec, attach, port-forward and proxy end to end: `tether local up`, real pods, the real kubectl.

The pods are run by the cluster's kubelet (busybox runs its command on this machine, nginx is
the built-in web stand-in on its container port), so this also checks that the streaming
handlers are registered in the daemon. Until they are, the module skips with that reason.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_util import Streamed, manifest, poll

pytestmark = pytest.mark.e2e

WEB_PORT = 8080
FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)")


def _running(clusters: Any, ns: str, name: str) -> bool:
    result = clusters.kubectl("get", "pod", name, "-n", ns, "-o", "jsonpath={.status.phase}", check=False)
    return result.stdout.strip() == "Running"


@pytest.fixture
def pods(clusters: Any, ns: str) -> Iterator[str]:
    probe = clusters.kubectl("get", "--raw", f"/api/v1/namespaces/{ns}/pods/none/exec", check=False)
    if "not served by this cluster yet" in probe.stderr:
        pytest.skip("the exec/attach/portforward/proxy handlers are not registered in the API server")
    shell = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "shell", "namespace": ns},
             "spec": {"containers": [{"name": "main", "image": "busybox",
                                      "command": ["sh", "-c", "while true; do echo tick; sleep 1; done"]}]}}
    web = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": ns, "labels": {"app": "web"}},
           "spec": {"containers": [{"name": "nginx", "image": "nginx",
                                    "ports": [{"containerPort": WEB_PORT, "name": "http"}]}]}}
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": ns},
           "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}}
    clusters.kubectl("create", "-f", "-", input=manifest(shell, web, svc))
    poll(lambda: _running(clusters, ns, "shell") and _running(clusters, ns, "web"), timeout=60,
         what="pods shell and web Running")

    def serving() -> bool:  # Running is not listening yet: the web pod has no readiness probe
        path = f"/api/v1/namespaces/{ns}/pods/web:{WEB_PORT}/proxy/"
        return clusters.kubectl("get", "--raw", path, check=False).returncode == 0

    poll(serving, timeout=60, interval=0.2, what="the web pod serving")
    yield ns


@pytest.mark.parametrize("websockets", ["true", "false"])
def test_exec(clusters: Any, pods: str, websockets: str) -> None:
    env = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": websockets}
    hi = clusters.kubectl("exec", "-n", pods, "shell", "--", "echo", "hi", env=env)
    assert hi.stdout == "hi\n"
    failed = clusters.kubectl("exec", "-n", pods, "shell", "--", "sh", "-c", "exit 3", env=env, check=False)
    assert failed.returncode == 3 and "command terminated with exit code 3" in failed.stderr
    cat = clusters.kubectl("exec", "-i", "-n", pods, "shell", "--", "cat", input="foo\n", env=env)
    assert cat.stdout == "foo\n"
    named = clusters.kubectl("exec", "-n", pods, "shell", "--", "sh", "-c", "echo $POD_NAME", env=env)
    assert named.stdout == "shell\n"


def test_attach_streams_new_output(clusters: Any, pods: str) -> None:
    with Streamed(clusters, "attach", "-n", pods, "shell") as attached:
        attached.wait_for_line(lambda line: line == "tick", timeout=15)


@pytest.mark.parametrize("websockets", ["true", "false"])
def test_port_forward(clusters: Any, pods: str, websockets: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    monkeypatch.setenv("KUBECTL_PORT_FORWARD_WEBSOCKETS", websockets)  # Streamed copies os.environ
    with Streamed(clusters, "port-forward", "-n", pods, "pod/web", f":{WEB_PORT}") as forwarding:
        line = forwarding.wait_for_line(lambda text: FORWARDING.search(text) is not None, timeout=15)
        found = FORWARDING.search(line)
        assert found is not None
        for _ in range(2):
            answer = httpx.get(f"http://127.0.0.1:{found.group(1)}/", timeout=10)
            assert answer.status_code == 200 and "Welcome to nginx!" in answer.text


def test_pod_and_service_proxy(clusters: Any, pods: str) -> None:
    by_pod = clusters.kubectl("get", "--raw", f"/api/v1/namespaces/{pods}/pods/web:{WEB_PORT}/proxy/")
    assert "Welcome to nginx!" in by_pod.stdout

    def by_service() -> str:
        result = clusters.kubectl("get", "--raw", f"/api/v1/namespaces/{pods}/services/web:http/proxy/",
                                  check=False)
        return result.stdout if result.returncode == 0 else ""

    assert "Welcome to nginx!" in poll(by_service, timeout=30, what="service endpoints")
