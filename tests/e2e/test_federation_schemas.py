"""The hub's CRDs are as strict as Karmada's and KubeFed's, seen through the real kubectl.

A local cluster `hub` gets `tether hub install`; manifests are applied as users write them (YAML
on stdin). kubectl asks for strict field validation by default, so a misspelt field is refused
with an error naming it; `--validate=warn` stores the object without the field and prints
"Warning: unknown field"; `--validate=false` drops it silently. Every manifest tether's docs,
examples and demo show still applies under the default.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_util import root_conftest, unique

from tether.app import demo

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SERVED_GROUPS = ("policy.karmada.io", "work.karmada.io", "core.kubefed.io", "types.kubefed.io",
                 "scheduling.kubefed.io", "cluster.tether.io", "work.tether.io")


def tether(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                          timeout=120)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@dataclass
class Hub:
    kubeconfig: Path
    cache: Path
    namespace: str

    def kubectl(self, *args: str, input: str | None = None,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "KUBECACHEDIR": str(self.cache)}
        result = subprocess.run([root_conftest().kubectl_binary(), "--context", "hub", *args],
                                input=input, capture_output=True, text=True, timeout=60, env=env)
        if check:
            assert result.returncode == 0, result.stdout + result.stderr
        return result

    def get(self, kind: str, name: str) -> Any:
        return json.loads(self.kubectl("-n", self.namespace, "get", kind, name, "-o", "json").stdout)

    def apply(self, text: str, *flags: str) -> subprocess.CompletedProcess[str]:
        return self.kubectl("-n", self.namespace, "apply", *flags, "-f", "-", input=text, check=False)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    data_dir = tmp_path_factory.mktemp("schemas")
    ok(tether("local", "up", "--data-dir", str(data_dir), "--name", "hub"))
    try:
        kubeconfig = data_dir / "kubeconfig"
        ok(tether("hub", "install", "--kubeconfig", str(kubeconfig), "--context", "hub"))
        started = Hub(kubeconfig, tmp_path_factory.mktemp("schemas-kubecache"), "schemas")
        started.kubectl("create", "namespace", started.namespace)
        yield started
    finally:
        tether("local", "down", "--data-dir", str(data_dir))


def override_policy(name: str, overriders: str) -> str:
    return f"""\
apiVersion: policy.karmada.io/v1alpha1
kind: OverridePolicy
metadata:
  name: {name}
spec:
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: nginx
  overrideRules:
    - targetCluster:
        clusterNames:
          - member1
      overriders:
{overriders}"""


LABEL_OVERRIDER_TYPO = """\
        labelOverrider:
          - operator: add
            value:
              env: prod
"""
LABELS_OVERRIDER = LABEL_OVERRIDER_TYPO.replace("labelOverrider", "labelsOverrider")


def propagation_policy(name: str, body: str) -> str:
    return f"""\
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: {name}
spec:
{body}"""


SELECTORS = """\
  resourceSelectors:
    - apiVersion: apps/v1
      kind: Deployment
      name: nginx
"""


@pytest.mark.parametrize(("text", "field"), [
    (override_policy("typo-labels", LABEL_OVERRIDER_TYPO), "spec.overrideRules[0].overriders.labelOverrider"),
    (propagation_policy("typo-selectors", SELECTORS.replace("resourceSelectors", "resourceSelectorz")),
     "spec.resourceSelectorz"),
    (propagation_policy("typo-affinity", SELECTORS + """\
  placement:
    clusterAffinity:
      clusterNamez:
        - member1
"""), "spec.placement.clusterAffinity.clusterNamez"),
], ids=["labelOverrider", "resourceSelectorz", "clusterAffinity"])
def test_strict_by_default_refuses_an_unknown_field(hub: Hub, text: str, field: str) -> None:
    name = re.search(r"name: (\S+)", text).group(1)  # type: ignore[union-attr]
    result = hub.apply(text)
    assert result.returncode != 0, result.stdout
    assert f'unknown field "{field}"' in result.stderr
    assert "BadRequest" in result.stderr
    kind = "op" if "OverridePolicy" in text else "pp"
    assert hub.kubectl("-n", hub.namespace, "get", kind, name, check=False).returncode != 0
    # server-side apply is refused too
    result = hub.apply(text, "--server-side")
    assert result.returncode != 0 and f'unknown field "{field}"' in result.stderr, result.stderr


def test_strict_refuses_a_typo_in_an_update(hub: Hub) -> None:
    name = unique("op")
    ok(hub.apply(override_policy(name, LABELS_OVERRIDER)))
    result = hub.apply(override_policy(name, LABELS_OVERRIDER + LABEL_OVERRIDER_TYPO))
    assert result.returncode != 0
    assert 'unknown field "spec.overrideRules[0].overriders.labelOverrider"' in result.stderr
    stored = hub.get("overridepolicy", name)["spec"]["overrideRules"][0]["overriders"]
    assert stored == {"labelsOverrider": [{"operator": "add", "value": {"env": "prod"}}]}


def test_validate_warn_stores_the_object_without_the_field(hub: Hub) -> None:
    name = unique("op")
    result = hub.apply(override_policy(name, LABELS_OVERRIDER + LABEL_OVERRIDER_TYPO), "--validate=warn")
    assert result.returncode == 0, result.stderr
    assert f"overridepolicy.policy.karmada.io/{name} created" in result.stdout
    assert 'Warning: unknown field "spec.overrideRules[0].overriders.labelOverrider"' in result.stderr
    overriders = hub.get("overridepolicy", name)["spec"]["overrideRules"][0]["overriders"]
    assert list(overriders) == ["labelsOverrider"]


def test_validate_false_drops_the_field_silently(hub: Hub) -> None:
    name = unique("op")
    result = hub.apply(override_policy(name, LABELS_OVERRIDER + LABEL_OVERRIDER_TYPO), "--validate=false")
    assert result.returncode == 0, result.stderr
    assert "Warning" not in result.stderr and "unknown field" not in result.stderr
    overriders = hub.get("overridepolicy", name)["spec"]["overrideRules"][0]["overriders"]
    assert list(overriders) == ["labelsOverrider"]


def test_defaults_and_enums_as_upstream(hub: Hub) -> None:
    name = unique("pp")
    ok(hub.apply(propagation_policy(name, SELECTORS + "  placement:\n    replicaScheduling: {}\n")))
    spec = hub.get("propagationpolicy", name)["spec"]
    assert spec["conflictResolution"] == "Abort"
    assert spec["placement"]["replicaScheduling"]["replicaSchedulingType"] == "Divided"
    bad = propagation_policy(unique("pp"), SELECTORS + "  conflictResolution: Replace\n")
    result = hub.apply(bad)
    assert result.returncode != 0
    assert 'spec.conflictResolution: Unsupported value: "Replace"' in result.stderr
    assert '"Abort", "Overwrite"' in result.stderr


def test_federated_types_are_strict_outside_the_template(hub: Hub) -> None:
    name = unique("fd")
    text = f"""\
apiVersion: types.kubefed.io/v1beta1
kind: FederatedDeployment
metadata:
  name: {name}
spec:
  template:
    spec:
      replicas: 2
      selector:
        matchLabels: {{app: x}}
      template:
        metadata:
          labels: {{app: x}}
        spec:
          containers:
            - name: x
              image: nginx
  placement:
    cluster:
      - name: member1
"""
    result = hub.apply(text)
    assert result.returncode != 0 and 'unknown field "spec.placement.cluster"' in result.stderr
    ok(hub.apply(text.replace("    cluster:", "    clusters:")))
    stored = hub.get("federateddeployment", name)
    assert stored["spec"]["template"]["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx"


def test_rb_and_kubefedclusters_are_served(hub: Hub) -> None:
    """The user guides' `kubectl get rb` and `kubectl get kubefedclusters` find the types."""
    hub.kubectl("get", "rb", "-A")
    hub.kubectl("get", "crb")
    hub.kubectl("get", "kubefedclusters", "-A")


# every manifest tether shows -----------------------------------------------------------------


def shown_manifests() -> list[tuple[str, dict[str, Any]]]:
    """(where, object) for each manifest of a hub type in the README, docs, examples and demo."""
    found: list[tuple[str, dict[str, Any]]] = []
    texts: list[tuple[str, str]] = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for i, block in enumerate(re.findall(r"```ya?ml\n(.*?)```", doc.read_text(), re.S)):
            texts.append((f"{doc.name}#{i}", block))
    for path in sorted((REPO / "examples").rglob("*.y*ml")) if (REPO / "examples").is_dir() else []:
        texts.append((str(path.relative_to(REPO)), path.read_text()))
    for where, text in texts:
        found += [(where, d) for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    found += [(f"tether demo: {name}", value) for name, value in vars(demo).items()
              if isinstance(value, dict) and "apiVersion" in value]
    return [(where, obj) for where, obj in found
            if str(obj.get("apiVersion", "")).split("/")[0] in SERVED_GROUPS]


def test_every_manifest_tether_shows_still_applies(hub: Hub) -> None:
    manifests = shown_manifests()
    assert any(where.startswith("tether demo") for where, _ in manifests)
    namespaces = {str(obj["metadata"].get("namespace")) for _, obj in manifests
                  if obj.get("metadata", {}).get("namespace")}
    for namespace in sorted(namespaces):
        hub.kubectl("create", "namespace", namespace, check=False)
    refused = []
    for where, obj in manifests:
        namespace = obj["metadata"].get("namespace") or hub.namespace
        result = hub.kubectl("-n", namespace, "apply", "--dry-run=server", "-f", "-",
                             input=yaml.safe_dump(obj), check=False)
        if result.returncode != 0 or "Warning" in result.stderr:
            refused.append(f"{where}: {result.stderr.strip()}")
    assert refused == []


def test_status_writes_are_pruned_too(hub: Hub) -> None:
    """A status write keeps only what the schema declares (kubectl patch sends no
    fieldValidation: the server's default, Warn, drops the field and says so)."""
    name = unique("kfc")
    ok(hub.apply(f"""\
apiVersion: core.kubefed.io/v1beta1
kind: KubeFedCluster
metadata:
  name: {name}
spec:
  apiEndpoint: https://127.0.0.1:6443
  secretRef:
    name: {name}
"""))
    status = {"status": {"conditions": [{"type": "Ready", "status": "True",
                                         "lastProbeTime": "2026-01-01T00:00:00Z"}],
                         "region": "eu", "regionz": "eu"}}
    result = hub.kubectl("-n", hub.namespace, "patch", "kubefedcluster", name, "--subresource=status",
                         "--type=merge", "-p", json.dumps(status), check=False)
    assert result.returncode == 0, result.stderr
    assert 'Warning: unknown field "status.regionz"' in result.stderr
    stored = hub.get("kubefedcluster", name)["status"]
    assert stored["region"] == "eu" and "regionz" not in stored
    assert stored["conditions"][0]["type"] == "Ready"
