"""`tether enable|disable|federate|get|describe` end to end, run as a user runs them.

Local clusters `hub`, `cluster` and `cluster1` are started with the CLI in a temporary data dir,
the hub installed and both members joined; everything is stopped at the end of the module.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_util import poll, root_conftest

pytestmark = pytest.mark.e2e

NS = "fedcli"


def tether(*args: str, input: str | None = None, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                          input=input, timeout=timeout)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@dataclass
class Fleet:
    data_dir: Path
    kubeconfig: Path
    cache: Path

    def hub(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return tether(*args, "--host-kubeconfig", str(self.kubeconfig), "--host-context", "hub", input=input)

    def kubectl(self, context: str, *args: str, check: bool = True,
                input: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "KUBECACHEDIR": str(self.cache / context)}
        result = subprocess.run([root_conftest().kubectl_binary(), "--context", context, *args],
                                input=input, capture_output=True, text=True, timeout=60, env=env)
        if check:
            assert result.returncode == 0, result.stdout + result.stderr
        return result

    def get_json(self, context: str, *args: str) -> Any:
        return json.loads(self.kubectl(context, "get", *args, "-o", "json").stdout)

    def exists(self, context: str, *args: str) -> bool:
        return self.kubectl(context, "get", *args, check=False).returncode == 0


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    data_dir = tmp_path_factory.mktemp("fedcli")
    ok(tether("local", "up", "--data-dir", str(data_dir), "--name", "hub", "--name", "cluster",
              "--name", "cluster1"))
    try:
        started = Fleet(data_dir, data_dir / "kubeconfig", tmp_path_factory.mktemp("fedcli-kubecache"))
        ok(tether("hub", "install", "--kubeconfig", str(started.kubeconfig), "--context", "hub"))
        for member in ("cluster", "cluster1"):
            ok(started.hub("join", member, "--cluster-context", member))
        for context in ("hub", "cluster", "cluster1"):
            started.kubectl(context, "create", "namespace", NS)
        yield started
    finally:
        tether("local", "down", "--data-dir", str(data_dir))


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


# enable / disable -------------------------------------------------------------------------------


def test_enable_prints_the_type_config_and_crd_as_yaml(fleet: Fleet) -> None:
    out = ok(fleet.hub("enable", "pdb", "-o", "yaml"))
    assert out.startswith("---\n")
    ftc, crd = documents(out)
    assert (ftc["apiVersion"], ftc["kind"]) == ("core.kubefed.io/v1beta1", "FederatedTypeConfig")
    assert ftc["metadata"]["name"] == "poddisruptionbudgets.policy"
    assert ftc["spec"]["propagation"] == "Enabled"
    assert ftc["spec"]["targetType"] == {"group": "policy", "version": "v1", "kind": "PodDisruptionBudget",
                                         "pluralName": "poddisruptionbudgets", "scope": "Namespaced"}
    assert ftc["spec"]["federatedType"] == {"group": "types.kubefed.io", "version": "v1beta1",
                                            "kind": "FederatedPodDisruptionBudget",
                                            "pluralName": "federatedpoddisruptionbudgets",
                                            "scope": "Namespaced"}
    assert (crd["apiVersion"], crd["kind"]) == ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "federatedpoddisruptionbudgets.types.kubefed.io"
    assert crd["spec"]["names"]["shortNames"] == ["fpdb"]  # kubefedctl prefixes short names with f
    # -o yaml creates nothing
    assert not fleet.exists("hub", "crd", "federatedpoddisruptionbudgets.types.kubefed.io")


@pytest.mark.parametrize("name", ["deployments.apps", "deployment", "Deployment", "deploy"])
def test_enable_resolves_every_name_of_a_type(fleet: Fleet, name: str) -> None:
    ftc, _ = documents(ok(fleet.hub("enable", name, "-o", "yaml")))
    assert ftc["metadata"]["name"] == "deployments.apps"


def test_enable_and_disable_a_type(fleet: Fleet) -> None:
    out = ok(fleet.hub("enable", "poddisruptionbudgets.policy"))
    assert "customresourcedefinition.apiextensions.k8s.io/federatedpoddisruptionbudgets.types.kubefed.io created" in out
    assert "federatedtypeconfig.core.kubefed.io/poddisruptionbudgets.policy created" in out
    crd = fleet.get_json("hub", "crd", "federatedpoddisruptionbudgets.types.kubefed.io")
    assert any(c["type"] == "Established" and c["status"] == "True" for c in crd["status"]["conditions"])
    ftc = fleet.get_json("hub", "-n", "tether-system", "federatedtypeconfig", "poddisruptionbudgets.policy")
    assert ftc["spec"]["propagation"] == "Enabled"
    again = ok(fleet.hub("enable", "PodDisruptionBudget"))
    assert "created" not in again and "configured" not in again  # idempotent

    out = ok(fleet.hub("disable", "pdb"))
    assert 'Disabled propagation for FederatedTypeConfig "tether-system/poddisruptionbudgets.policy"' in out
    ftc = fleet.get_json("hub", "-n", "tether-system", "federatedtypeconfig", "poddisruptionbudgets.policy")
    assert ftc["spec"]["propagation"] == "Disabled"
    assert "Propagation already disabled" in ok(fleet.hub("disable", "poddisruptionbudgets.policy"))

    out = ok(fleet.hub("disable", "poddisruptionbudgets.policy", "--delete-crd"))
    assert 'customresourcedefinition "federatedpoddisruptionbudgets.types.kubefed.io" deleted' in out
    assert not fleet.exists("hub", "crd", "federatedpoddisruptionbudgets.types.kubefed.io")
    assert not fleet.exists("hub", "-n", "tether-system", "federatedtypeconfig", "poddisruptionbudgets.policy")


def test_enable_a_crd_type(fleet: Fleet) -> None:
    # The hub's own Cluster type is a CRD like any other.
    ftc, crd = documents(ok(fleet.hub("enable", "tcl", "-o", "yaml")))
    assert ftc["metadata"]["name"] == "clusters.cluster.tether.io"
    assert ftc["spec"]["federatedType"]["scope"] == "Cluster"
    assert crd["spec"]["scope"] == "Cluster"


def test_type_errors_say_what_to_do(fleet: Fleet) -> None:
    result = fleet.hub("enable", "gizmos")
    assert result.returncode == 1
    assert 'the server doesn\'t have a resource type "gizmos"' in result.stderr
    result = fleet.hub("disable", "networkpolicies")
    assert result.returncode == 1
    assert "'networkpolicies.networking.k8s.io' is not enabled" in result.stderr
    result = fleet.hub("federate", "networkpolicy/x", "-n", NS)
    assert result.returncode == 1
    assert "tether enable networkpolicies.networking.k8s.io" in result.stderr


# federate ---------------------------------------------------------------------------------------


def test_federate_a_configmap_as_kubefedctl_does(fleet: Fleet) -> None:
    fleet.kubectl("hub", "-n", NS, "create", "configmap", "settings", "--from-literal=mode=fast")
    fleet.kubectl("hub", "-n", NS, "label", "configmap", "settings", "team=a")
    fleet.kubectl("hub", "-n", NS, "annotate", "configmap", "settings", "note=x")
    out = ok(fleet.hub("federate", "configmap/settings", "-n", NS, "-o", "yaml"))
    assert documents(out) == [{
        "apiVersion": "types.kubefed.io/v1beta1",
        "kind": "FederatedConfigMap",
        "metadata": {"name": "settings", "namespace": NS},
        "spec": {
            "template": {"data": {"mode": "fast"}, "metadata": {"labels": {"team": "a"}}},
            "placement": {"clusterSelector": {"matchLabels": {}}},
        },
    }]
    assert not fleet.exists("hub", "-n", NS, "federatedconfigmap", "settings")
    out = ok(fleet.hub("federate", "cm", "settings", "-n", NS))
    assert f"federatedconfigmap.types.kubefed.io/{NS}/settings created" in out
    created = fleet.get_json("hub", "-n", NS, "federatedconfigmap", "settings")
    assert created["spec"]["template"]["data"] == {"mode": "fast"}
    assert created["spec"]["placement"] == {"clusterSelector": {"matchLabels": {}}}
    assert "unchanged" in ok(fleet.hub("federate", "configmap/settings", "-n", NS))


def test_federate_a_deployment(fleet: Fleet) -> None:
    fleet.kubectl("hub", "-n", NS, "create", "deployment", "web", "--image", "nginx:1.17", "--replicas", "2")
    out = ok(fleet.hub("federate", "deployment/web", "-n", NS, "-o", "yaml"))
    [fed] = documents(out)
    assert fed["apiVersion"] == "types.kubefed.io/v1beta1"
    assert fed["kind"] == "FederatedDeployment"
    assert fed["metadata"] == {"name": "web", "namespace": NS}
    assert set(fed["spec"]) == {"template", "placement"}
    assert fed["spec"]["placement"] == {"clusterSelector": {"matchLabels": {}}}
    template = fed["spec"]["template"]
    assert template["metadata"] == {"labels": {"app": "web"}}  # only labels stay of the metadata
    assert "status" not in template and "apiVersion" not in template and "kind" not in template
    assert template["spec"]["replicas"] == 2
    assert template["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.17"
    ok(fleet.hub("federate", "deploy/web", "-n", NS))
    assert fleet.exists("hub", "-n", NS, "federateddeployment", "web")


def test_federate_into_a_namespace_that_is_not_federated_says_how(fleet: Fleet) -> None:
    fleet.kubectl("hub", "create", "namespace", "fedcli-plain")
    fleet.kubectl("hub", "-n", "fedcli-plain", "create", "configmap", "lonely")
    result = fleet.hub("federate", "configmap/lonely", "-n", "fedcli-plain")
    assert result.returncode == 0, result.stderr
    assert "federatedconfigmap.types.kubefed.io/fedcli-plain/lonely created" in result.stdout
    assert "namespace 'fedcli-plain' is not federated" in result.stderr
    assert "`tether federate namespace/fedcli-plain`" in result.stderr
    ok(fleet.hub("federate", "namespace/fedcli-plain"))
    again = fleet.hub("federate", "configmap/lonely", "-n", "fedcli-plain")
    assert again.returncode == 0 and "not federated" not in again.stderr


def test_federate_namespace_contents(fleet: Fleet) -> None:
    fleet.kubectl("hub", "create", "namespace", "fedcli-contents")
    fleet.kubectl("hub", "-n", "fedcli-contents", "create", "configmap", "one", "--from-literal=a=1")
    fleet.kubectl("hub", "-n", "fedcli-contents", "create", "deployment", "api", "--image", "nginx:1.17")
    fleet.kubectl("hub", "-n", "fedcli-contents", "create", "role", "reader", "--verb=get", "--resource=pods")
    poll(lambda: fleet.get_json("hub", "-n", "fedcli-contents", "pods")["items"], timeout=30, what="api pods")
    out = fleet.hub("federate", "namespace/fedcli-contents", "--contents")
    assert out.returncode == 0, out.stdout + out.stderr
    kinds = {line.split("/")[0] for line in out.stdout.splitlines() if " created " in line}
    assert kinds == {"federatednamespace.types.kubefed.io", "federatedconfigmap.types.kubefed.io",
                     "federateddeployment.types.kubefed.io"}
    # Roles are not enabled: reported, not federated; the Deployment's Pods/ReplicaSets are skipped.
    assert "skipped 1 roles.rbac.authorization.k8s.io" in out.stderr
    assert "federatedreplicaset" not in out.stdout and "pods/" not in out.stdout
    assert "kube-root-ca.crt" not in out.stdout and "serviceaccount" not in out.stdout
    assert "metrics.k8s.io" not in out.stderr  # PodMetrics cannot be created: not content
    # --enable-type enables what is missing first.
    out = fleet.hub("federate", "role/reader", "-n", "fedcli-contents", "--enable-type")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "federatedtypeconfig.core.kubefed.io/roles.rbac.authorization.k8s.io created" in out.stdout
    assert fleet.exists("hub", "-n", "fedcli-contents", "federatedrole", "reader")
    assert fleet.hub("federate", "deployment/web", "-n", NS, "--contents").returncode == 1


def test_federate_filename_converts_manifests(fleet: Fleet, tmp_path: Path) -> None:
    manifests = tmp_path / "app.yaml"
    manifests.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  namespace: app\n  labels: {tier: web}\n"
        "  annotations: {a: b}\ndata:\n  k: v\n"
        "---\n"
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  namespace: app\nspec:\n  type: NodePort\n"
        "  clusterIP: 10.0.0.5\n  ports:\n  - port: 80\n    nodePort: 30080\n"
        "---\n"
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: app\nspec:\n  finalizers: [kubernetes]\n")
    out = ok(tether("federate", "-f", str(manifests)))
    cm, svc, ns = documents(out)
    assert cm == {"apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedConfigMap",
                  "metadata": {"name": "cfg", "namespace": "app"},
                  "spec": {"template": {"data": {"k": "v"}, "metadata": {"labels": {"tier": "web"}}},
                           "placement": {"clusterSelector": {"matchLabels": {}}}}}
    assert svc["kind"] == "FederatedService"
    assert svc["spec"]["template"]["spec"] == {"type": "NodePort", "ports": [{"port": 80}]}
    assert ns["kind"] == "FederatedNamespace"
    assert ns["metadata"] == {"name": "app", "namespace": "app"}
    assert "finalizers" not in ns["spec"]["template"].get("spec", {})
    from_stdin = ok(tether("federate", "-f", "-", input=manifests.read_text()))
    assert from_stdin == out
    bad = tether("federate", "-f", "-", input="kind: ConfigMap\n")
    assert bad.returncode == 1 and "needs apiVersion, kind and metadata.name" in bad.stderr


# get / describe ---------------------------------------------------------------------------------


def _ready(fleet: Fleet, context: str, name: str, replicas: int) -> bool:
    status = fleet.get_json(context, "-n", NS, "deployment", name).get("status") or {}
    return bool(status.get("readyReplicas") == replicas)


@pytest.fixture(scope="module")
def member_apps(fleet: Fleet) -> Fleet:
    fleet.kubectl("cluster", "-n", NS, "create", "deployment", "shop", "--image", "nginx:1.14.0-alpine",
                  "--replicas", "2")
    fleet.kubectl("cluster1", "-n", NS, "create", "deployment", "shop", "--image", "nginx:1.17",
                  "--replicas", "1")
    fleet.kubectl("cluster1", "-n", NS, "create", "service", "clusterip", "shop", "--tcp", "80:80")
    poll(lambda: _ready(fleet, "cluster", "shop", 2) and _ready(fleet, "cluster1", "shop", 1),
         timeout=30, what="shop ready in both members")
    return fleet


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def test_get_across_clusters(member_apps: Fleet) -> None:
    fleet = member_apps
    out = ok(fleet.hub("get", "deployments", "-n", NS, "-C", "cluster,cluster1"))
    table = rows(out)
    assert table[0] == ["CLUSTER", "NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert [r[:3] for r in table[1:]] == [["cluster", "shop", "2/2"], ["cluster1", "shop", "1/1"]]

    wide = rows(ok(fleet.hub("get", "deploy", "shop", "-n", NS, "-o", "wide")))
    assert wide[0][-3:] == ["CONTAINERS", "IMAGES", "SELECTOR"]
    assert {r[0]: r[-2] for r in wide[1:]} == {"cluster": "nginx:1.14.0-alpine", "cluster1": "nginx:1.17"}

    only = rows(ok(fleet.hub("get", "deploy", "-n", NS, "-C", "cluster1")))
    assert [r[0] for r in only[1:]] == ["cluster1"]

    services = rows(ok(fleet.hub("get", "svc", "-A", "-C", "cluster1")))
    assert services[0] == ["CLUSTER", "NAMESPACE", "NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    assert ["cluster1", NS, "shop", "ClusterIP"] in [r[:4] for r in services[1:]]

    listed = json.loads(ok(fleet.hub("get", "deployments", "-n", NS, "-o", "json")))
    assert listed["kind"] == "List"
    assert sorted(i["metadata"]["annotations"]["tether.io/cluster"] for i in listed["items"]) == [
        "cluster", "cluster1"]

    unknown = fleet.hub("get", "deploy", "-C", "nowhere")
    assert unknown.returncode == 1 and "cluster(s) not joined: nowhere" in unknown.stderr


def test_get_reports_unreachable_clusters_in_a_footer(member_apps: Fleet) -> None:
    fleet = member_apps
    token = base64.b64encode(b"not-a-token").decode()
    ghost = [
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ghost", "namespace": "tether-system"},
         "data": {"token": token}},
        {"apiVersion": "cluster.tether.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "ghost"},
         "spec": {"syncMode": "Push", "apiEndpoint": "https://127.0.0.1:9",
                  "secretRef": {"namespace": "tether-system", "name": "ghost"}}},
    ]
    fleet.kubectl("hub", "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": ghost}))
    try:
        result = fleet.hub("get", "deployments", "-n", NS, "--timeout", "3")
        assert result.returncode == 0, result.stdout + result.stderr
        assert [r[0] for r in rows(result.stdout)[1:]] == ["cluster", "cluster1"]
        assert "ghost: unreachable" in result.stderr
        described = fleet.hub("describe", "deployment/shop", "-n", NS, "-C", "ghost,cluster", "--timeout", "3")
        assert described.returncode == 0, described.stdout + described.stderr
        assert "Cluster:            ghost\nError:              unreachable" in described.stdout
    finally:
        fleet.kubectl("hub", "delete", "cluster.cluster.tether.io/ghost", "-n", "tether-system",
                      "secret/ghost", "--ignore-not-found", check=False)


def test_describe_across_clusters(member_apps: Fleet) -> None:
    out = ok(member_apps.hub("describe", "deployment/shop", "-n", NS))
    sections = out.split("\n\n")
    assert sections[0].startswith("Cluster:            cluster\n")
    assert sections[1].startswith("Cluster:            cluster1\n")
    first = sections[0]
    assert "Name:               shop" in first
    assert "Replicas:           2 desired | 2 updated | 2 total | 2 ready | 2 available" in first
    assert "Image:              nginx:1.14.0-alpine" in first
    assert "Available" in first and "MinimumReplicasAvailable" in first
    assert "ScalingReplicaSet" in first  # the member's Events
    assert "Image:              nginx:1.17" in sections[1]
    missing = member_apps.hub("describe", "deployment/none", "-n", NS, "-C", "cluster")
    assert missing.returncode == 1 and 'deployments.apps "none" not found' in missing.stdout
