"""The service mirror run by the hub: a `MirrorPolicy`, a push and a pull member, no config file.

Clusters `hub` and `aws` in one data dir, `gcp` in another. `aws` is joined (push); `gcp`
registers with a bootstrap token and runs its agent (pull), so the hub reaches gcp's API only
through its tunnel. A MirrorPolicy makes each member mirror the other's labelled Services (the
hub reads gcp and writes gcp's mirrors through the tunnel); the remote's Cluster carries the
mirrored endpoints' condition; deleting the policy removes the mirrors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2e_util import Collected, poll, root_conftest

pytestmark = pytest.mark.e2e

POLICY = {"apiVersion": "connect.tether.io/v1alpha1", "kind": "MirrorPolicy", "metadata": {"name": "semaphore"},
          "spec": {"mirrorNamespace": "sys-semaphore", "stalePolicy": "withdraw", "staleAfter": "20s"}}


def app(name: str, namespace: str) -> list[dict[str, Any]]:
    labels = {"app": name}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
         "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels},
                               "spec": {"containers": [{"name": name, "image": f"example.com/{name}"}]}}}},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {"name": name, "namespace": namespace,
                      "labels": {"mirror.semaphore.uw.io/mirror-service": "true"}},
         "spec": {"selector": labels, "ports": [{"name": "http", "port": 8889}]}},
    ]


@dataclass
class Hub:
    clusters: Any

    def kubectl(self, context: str, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.clusters.kubectl(*args, context=context, **kw)  # type: ignore[no-any-return]

    def json(self, context: str, *args: str) -> Any:
        return json.loads(self.kubectl(context, *args, "-o", "json").stdout)

    def apply(self, context: str, *objs: dict[str, Any]) -> None:
        self.kubectl(context, "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                     "items": list(objs)}))

    def exists(self, context: str, kind: str, name: str, namespace: str = "sys-semaphore") -> bool:
        return self.kubectl(context, "get", kind, name, "-n", namespace, check=False).returncode == 0

    def mirror_ips(self, context: str, name: str) -> set[str]:
        slices = self.json(context, "get", "endpointslices", "-n", "sys-semaphore", "-l",
                           f"kubernetes.io/service-name={name}")["items"]
        return {a for s in slices for e in s.get("endpoints") or [] for a in e["addresses"]}

    def pod_ips(self, context: str, namespace: str) -> set[str]:
        return {p["status"].get("podIP") for p in self.json(context, "get", "pods", "-n", namespace)["items"]
                if p["status"].get("podIP") and not p["metadata"].get("deletionTimestamp")}


def tether(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    root = root_conftest()
    data_dir = tmp_path_factory.mktemp("connect-hub")
    member_dir = tmp_path_factory.mktemp("connect-pull")
    agents_dir = tmp_path_factory.mktemp("connect-agents")
    cache = tmp_path_factory.mktemp("kubecache-hub")
    clusters = root.start_clusters(data_dir, ["hub", "aws"], cache)
    process: Collected | None = None
    try:
        pull = root.start_clusters(member_dir, ["gcp"], cache)
        merged = tmp_path_factory.mktemp("kubeconfig") / "kubeconfig"
        merged.write_text(subprocess.run(
            [root.kubectl_binary(), "config", "view", "--flatten"], capture_output=True, text=True, check=True,
            env={**os.environ, "KUBECONFIG": f"{clusters.kubeconfig}:{pull.kubeconfig}"}).stdout)
        clusters.kubeconfig = merged
        clusters.names = ["hub", "aws", "gcp"]
        kubeconfig = str(clusters.kubeconfig)
        tether("hub", "install", "--kubeconfig", kubeconfig, "--context", "hub")
        tether("join", "aws", "--cluster-context", "aws", "--host-kubeconfig", kubeconfig, "--host-context", "hub",
               "--cluster-kubeconfig", kubeconfig)
        process = Collected([sys.executable, "-m", "tether", "hub", "run", "--kubeconfig", kubeconfig, "--context",
                             "hub", "--port", "0", "--health-period", "0.5", "--health-threshold", "1",
                             "--tunnel-agent-port", "0", "--tunnel-frontend-port", "0",
                             "--tunnel-bind-address", "127.0.0.1", "--data-dir", str(data_dir / "hub-state"),
                             "--verbose"], merge_stderr=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        process.wait_for_line(lambda line: "tunnel server: agents at" in line, timeout=60)
        command = tether("token", "create", "--ttl", "1h", "--print-register-command", "--kubeconfig", kubeconfig,
                         "--host-context", "hub", "--cluster-name", "gcp").stdout.strip().splitlines()[-1]
        words = command.split()
        assert words[:2] == ["tether", "register"]
        tether(*words[1:], "--kubeconfig", kubeconfig, "--context", "gcp", "--data-dir", str(agents_dir),
               "--period", "0.5")
        yield Hub(clusters)
    finally:
        subprocess.run([sys.executable, "-m", "tether", "agent", "stop", "--cluster-name", "gcp", "--data-dir",
                        str(agents_dir)], capture_output=True, timeout=60)
        if process is not None:
            process.stop()
            print("\n".join(process.snapshot()[-60:]))
        root.tether("local", "down", "--data-dir", str(member_dir))
        root.tether("local", "down", "--data-dir", str(data_dir))


def test_members_mirror_each_other(hub: Hub, tmp_path: Path) -> None:
    gcp = hub.json("hub", "get", "clusters.cluster.tether.io", "gcp")
    assert gcp["spec"]["syncMode"] == "Pull" and gcp["spec"].get("proxyURL")  # reached through the tunnel
    hub.apply("aws", *app("fluentd", "sys-log"))
    hub.apply("gcp", *app("web", "shop"))

    def ready(name: str) -> bool:
        status = hub.json("hub", "get", "clusters.cluster.tether.io", name).get("status") or {}
        return any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))

    poll(lambda: ready("aws") and ready("gcp"),
         timeout=60, what="both members Ready")
    poll(lambda: hub.kubectl("hub", "get", "crd", "mirrorpolicies.connect.tether.io", check=False).returncode == 0,
         timeout=60, what="the MirrorPolicy CRD")
    hub.apply("hub", POLICY)

    poll(lambda: hub.exists("gcp", "service", "aws-sys-log-73736d-fluentd"), timeout=90, what="aws's mirror in gcp")
    poll(lambda: hub.exists("aws", "service", "gcp-shop-73736d-web"), timeout=90, what="gcp's mirror in aws")
    poll(lambda: hub.mirror_ips("gcp", "aws-sys-log-73736d-fluentd") == hub.pod_ips("aws", "sys-log")
         and len(hub.pod_ips("aws", "sys-log")) == 2, timeout=90, what="fluentd's endpoints in gcp")
    poll(lambda: hub.mirror_ips("aws", "gcp-shop-73736d-web") == hub.pod_ips("gcp", "shop")
         and len(hub.pod_ips("gcp", "shop")) == 2, timeout=90, what="web's endpoints in aws")

    def ready_status() -> Any:
        status = hub.json("hub", "get", "mirrorpolicy", "semaphore").get("status") or {}
        return status if any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", [])) \
            else None

    status = poll(ready_status, timeout=60, what="the policy Ready")
    assert sorted((c["name"], c["mirrors"]) for c in status["clusters"]) == [("aws", ["gcp"]), ("gcp", ["aws"])]

    def fresh(name: str) -> bool:
        conditions = (hub.json("hub", "get", "clusters.cluster.tether.io", name).get("status") or {}).get(
            "conditions", [])
        kinds = {c["type"]: c for c in conditions}
        return kinds.get("ServiceMirrorEndpointsFresh", {}).get("status") == "True" and "Ready" in kinds

    poll(lambda: fresh("aws") and fresh("gcp"), timeout=60, what="the mirrored-endpoints condition on both Clusters")

    hub.kubectl("hub", "delete", "mirrorpolicy", "semaphore")
    poll(lambda: not hub.exists("gcp", "service", "aws-sys-log-73736d-fluentd")
         and not hub.exists("aws", "service", "gcp-shop-73736d-web")
         and not hub.mirror_ips("gcp", "aws-sys-log-73736d-fluentd"), timeout=90,
         what="the mirrors removed with the policy")
