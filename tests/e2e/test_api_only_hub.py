"""An API-only hub, as Karmada's control plane: templates there only propagate, and the hub's
`kubectl get deploy` shows the members' summed status (issue 12, item 3)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from e2e_util import manifest, poll, unique

pytestmark = pytest.mark.e2e

WAIT_S = 90.0


def deployment(name: str, namespace: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "web", "image": "nginx:1.17"}]}}}}


def divided(name: str, namespace: str, weights: dict[str, int]) -> dict[str, Any]:
    return {"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name}],
                     "placement": {
                         "clusterAffinity": {"clusterNames": sorted(weights)},
                         "replicaScheduling": {
                             "replicaSchedulingType": "Divided",
                             "replicaDivisionPreference": "Weighted",
                             "weightPreference": {"staticWeightList": [
                                 {"targetCluster": {"clusterNames": [c]}, "weight": w}
                                 for c, w in sorted(weights.items())]}}}}}


def test_the_hub_is_an_api_server_only(api_only_hub: Any) -> None:
    assert api_only_hub.names[0] == "hub"
    assert api_only_hub.kubectl_json("get", "nodes", context="hub")["items"] == []
    assert api_only_hub.kubectl_json("get", "nodes", context="member1")["items"]
    groups = api_only_hub.kubectl("api-versions", context="hub").stdout.split()
    assert "apps/v1" in groups and not any(g.startswith("metrics.k8s.io") for g in groups)
    status = subprocess.run([sys.executable, "-m", "tether", "local", "status", "--data-dir",
                             str(api_only_hub.data_dir)], capture_output=True, text=True, timeout=60)
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip()
            for line in status.stdout.splitlines() if line.count("│") >= 4}
    assert rows.get("hub") == "hub (API only)" and rows.get("member1") == "cluster", status.stdout


def test_six_replicas_divided_four_two_show_six_ready_on_the_hub(api_only_hub: Any) -> None:
    namespace = unique("karmada")
    hub = api_only_hub
    hub.kubectl("create", "namespace", namespace, context="hub")
    hub.kubectl("apply", "-f", "-", context="hub", input=manifest(
        deployment("web", namespace, 6), divided("web", namespace, {"member1": 2, "member2": 1})))

    def member_ready(context: str, replicas: int) -> bool:
        got = hub.kubectl("-n", namespace, "get", "deployment", "web", "-o", "json",
                          context=context, check=False)
        if got.returncode != 0:
            return False
        obj = json.loads(got.stdout)
        return bool(obj["spec"]["replicas"] == replicas
                    and obj.get("status", {}).get("readyReplicas") == replicas)

    poll(lambda: member_ready("member1", 4), timeout=WAIT_S, interval=0.5, what="member1: 4 ready")
    poll(lambda: member_ready("member2", 2), timeout=WAIT_S, interval=0.5, what="member2: 2 ready")

    def hub_row() -> list[str] | None:
        out = hub.kubectl("-n", namespace, "get", "deployment", "web", "--no-headers",
                          context="hub").stdout.split()
        return out if out[1:4] == ["6/6", "6", "6"] else None

    # kubectl's own columns: NAME READY UP-TO-DATE AVAILABLE AGE, summed over the members
    poll(hub_row, timeout=WAIT_S, interval=0.5, what="the hub's READY 6/6")
    template = hub.kubectl_json("-n", namespace, "get", "deployment", "web", context="hub")
    status = template["status"]
    assert (status["replicas"], status["readyReplicas"], status["availableReplicas"],
            status["updatedReplicas"]) == (6, 6, 6, 6)
    assert status["observedGeneration"] == template["metadata"]["generation"]
    # kubectl's rollout check reads the same fields (observedGeneration, updated, available)
    done = hub.kubectl("-n", namespace, "rollout", "status", "deployment/web", "--timeout=60s",
                       context="hub")
    assert "successfully rolled out" in done.stdout, done.stdout
    # The hub ran nothing itself: no ReplicaSet, no pod.
    assert hub.kubectl_json("get", "replicasets,pods", "-A", context="hub")["items"] == []
    # Per cluster, what Karmada keeps in its ResourceBinding's aggregatedStatus; the sum is in
    # .status, so not repeated in the annotation.
    report = json.loads(template["metadata"]["annotations"]["tether.io/propagation-status"])
    per_cluster = {c["name"]: (c["replicas"], c["status"]["readyReplicas"]) for c in report["clusters"]}
    assert per_cluster == {"member1": (4, 4), "member2": (2, 2)}
    assert "aggregatedStatus" not in report and report["conditions"][0]["status"] == "True"
