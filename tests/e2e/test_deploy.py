"""`deploy/`, the kustomize tree: what `kubectl kustomize` builds from it is exactly what the
renderer (and so the `manifest` subcommands) gives; every container is hardened; the hub applies
with `--dry-run=server` against a local cluster."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_util import kubectl_binary, poll, root_conftest

from tether import __version__
from tether.app.deploy import COMPONENTS
from tether.app.deploy.tree import write_tree

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def kustomize(component: str) -> list[dict[str, Any]]:
    out = subprocess.run([kubectl_binary(), "kustomize", str(DEPLOY / component)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def key(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"]


def pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for obj in objects:
        if obj["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job"):
            yield obj["metadata"]["name"], obj["spec"]["template"]


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_the_tree_is_what_the_renderer_gives(component: str) -> None:
    built = {key(o): o for o in kustomize(component)}
    rendered = {key(o): o for o in COMPONENTS[component]()}
    assert built.keys() == rendered.keys()
    for k, obj in rendered.items():
        assert built[k] == yaml.safe_load(yaml.safe_dump(obj)), k


def test_the_tree_is_up_to_date(tmp_path: Path) -> None:
    """`python -m tether.app.deploy.tree deploy` was run after the last change."""
    for path in write_tree(tmp_path):
        committed = DEPLOY / path.relative_to(tmp_path)
        assert committed.exists() and committed.read_text() == path.read_text(), (
            f"{committed} is stale: run `python -m tether.app.deploy.tree deploy`")


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_every_container_is_hardened(component: str) -> None:
    for workload, template in pod_specs(kustomize(component)):
        spec = template["spec"]
        for container in spec.get("initContainers", []) + spec["containers"]:
            where = f"{component}/{workload}/{container['name']}"
            image = container["image"]
            assert ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"), where
            assert image.endswith(f":{__version__}"), where
            res = container["resources"]
            assert res["requests"]["cpu"] and res["requests"]["memory"], where
            assert res["limits"]["memory"], where
            assert container["livenessProbe"] and container["readinessProbe"], where
            sc = container["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            if sc.get("runAsNonRoot") is not True:
                # only the mesh runs as root, with NET_ADMIN alone, and says why
                assert component == "mesh", where
                assert sc["capabilities"].get("add") == ["NET_ADMIN"], where
                assert "NET_ADMIN" in template["metadata"]["annotations"]["tether.io/runs-as-root"]
            else:
                assert sc["runAsUser"] != 0, where
            # a read-only root: /tmp and the data directory are volumes
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            assert {"/tmp", "/var/lib/tether"} <= mounts, where


def test_hub_runs_two_replicas_behind_a_pdb_and_a_service_with_every_port() -> None:
    objects = {(o["kind"], o["metadata"]["name"]): o for o in kustomize("hub")}
    deployment = objects[("Deployment", "tether-hub")]
    assert deployment["spec"]["replicas"] == 2
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["hub", "run"] and "--leader-elect" in args
    pdb = objects[("PodDisruptionBudget", "tether-hub")]
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    ports = {p["name"]: p["port"] for p in objects[("Service", "tether-hub")]["spec"]["ports"]}
    assert ports == {"metrics": 8080, "proxy": 6443, "tunnel": 8091, "dashboard": 8090}
    # RBAC: never escalate or bind, never impersonate
    verbs = {v for r in objects[("ClusterRole", "tether-hub")]["rules"] for v in r["verbs"]}
    assert not verbs & {"escalate", "bind", "impersonate", "*"}


@pytest.fixture(scope="module")
def one_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    data_dir = tmp_path_factory.mktemp("deploy")
    clusters = root_conftest().start_clusters(data_dir, ["deploy"],
                                              tmp_path_factory.mktemp("deploy-cache"))
    try:
        yield clusters
    finally:
        subprocess.run([sys.executable, "-m", "tether", "local", "down", "--data-dir",
                        str(data_dir)], capture_output=True, timeout=120)


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_apply_dry_run_server(one_cluster: Any, component: str) -> None:
    """As on a real cluster, the namespaces exist first (`tether hub install` makes the hub's):
    the API server refuses objects in a namespace that is only being dry-run created."""
    for obj in kustomize(component):
        if obj["kind"] == "Namespace":
            one_cluster.kubectl("create", "namespace", obj["metadata"]["name"], check=False)
    result = one_cluster.kubectl("apply", "-k", str(DEPLOY / component), "--dry-run=server")
    created = [ln for ln in result.stdout.splitlines() if "(server dry run)" in ln]
    assert len(created) == len(kustomize(component)), result.stdout + result.stderr


@pytest.mark.parametrize("component", ["hub", "mesh", "mirror", "dns"])
def test_manifest_subcommand_prints_the_tree(component: str) -> None:
    """`tether NAME manifest` with no values is `kubectl kustomize deploy/NAME`."""
    out = subprocess.run([sys.executable, "-m", "tether", component, "manifest"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    printed = {key(o): o for o in yaml.safe_load_all(out) if o}
    assert printed == {key(o): o for o in kustomize(component)}


def test_manifest_subcommand_values(tmp_path: Path) -> None:
    def manifest(*args: str) -> dict[tuple[str, str], Any]:
        result = subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(result.stdout) if o}

    hub = manifest("hub", "manifest", "--image", "registry.example/tether:9.9", "--replicas", "3",
                   "--tunnel-advertise-address", "hub.example:443")
    deployment = hub[("Deployment", "tether-hub")]
    assert deployment["spec"]["replicas"] == 3
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/tether:9.9"
    assert container["args"][container["args"].index("--tunnel-advertise-address") + 1] == "hub.example:443"

    config = tmp_path / "mirror.json"
    config.write_text((ROOT / "examples/connect/semaphore-service-mirror.json").read_text())
    mirror = manifest("mirror", "manifest", "--config", str(config))
    assert mirror[("ConfigMap", "tether-mirror")]["data"]["config.json"] == config.read_text()
    assert ("Namespace", "sys-semaphore") in mirror

    dns = manifest("dns", "manifest", "--prefix", "aws")
    assert "cluster.aws:53 {" in dns[("ConfigMap", "tether-dns-coredns-stanza")]["data"]["Corefile.snippet"]


@pytest.mark.parametrize(("args", "message"), [
    (["hub", "manifest", "--image", "ghcr.io/x/tether:latest"], "`latest` is not a release"),
    (["hub", "manifest", "--image", "ghcr.io/x/tether"], "has no tag"),
    (["mirror", "manifest", "--config", "/nonexistent.json"], "/nonexistent.json"),
])
def test_manifest_subcommand_refuses(args: list[str], message: str) -> None:
    result = subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_two_hub_replicas_run_in_a_loopback_cluster(one_cluster: Any, tmp_path: Path) -> None:
    """Without --netns a local cluster's pods share the host's network (each its own loopback
    address): two replicas bind their pod's address, `--bind-address $(POD_IP)` with POD_IP from
    the downward API, which the kubelet expands as Kubernetes does; the listeners on 127.0.0.1
    (the hub's own CONNECT port, the plain-HTTP dashboard) take free ports, 127.0.0.1 being
    shared. Both become Ready, one leads."""
    c = one_cluster
    kubeconfig = str(c.data_dir / "kubeconfig")
    subprocess.run([sys.executable, "-m", "tether", "hub", "install", "--kubeconfig", kubeconfig,
                    "--context", "deploy"], capture_output=True, text=True, timeout=120, check=True)
    certs = tmp_path / "certs"
    subprocess.run([sys.executable, "-m", "tether", "certs", "--out", str(certs), "--server-ip",
                    "127.0.0.1"], capture_output=True, timeout=120, check=True)
    agent = certs / "agent"
    c.kubectl("-n", "tether-system", "create", "secret", "generic", "tether-hub-tunnel-certs",
              f"--from-file=ca.crt={agent / 'issued' / 'ca.crt'}",
              f"--from-file=proxy-frontend.crt={agent / 'issued' / 'proxy-frontend.crt'}",
              f"--from-file=proxy-frontend.key={agent / 'private' / 'proxy-frontend.key'}")
    objects = kustomize("hub")
    for obj in objects:
        if obj["kind"] == "Deployment":
            container = obj["spec"]["template"]["spec"]["containers"][0]
            args = container["args"]
            for flag in ("--bind-address", "--tunnel-bind-address"):
                args[args.index(flag) + 1] = "$(POD_IP)"
            args[args.index("--dashboard-port") + 1] = "0"  # loopback only, as the CONNECT listener
            args += ["--tunnel-frontend-port", "0"]
            container["env"].append({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    c.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))

    def ready_pods() -> list[dict[str, Any]] | None:
        pods = c.kubectl_json("-n", "tether-system", "get", "pods", "-l",
                              "app.kubernetes.io/name=tether-hub")["items"]
        ready = [p for p in pods if any(k["type"] == "Ready" and k["status"] == "True"
                                        for k in (p.get("status") or {}).get("conditions") or [])]
        return ready if len(ready) == 2 else None

    try:
        pods = poll(ready_pods, timeout=180, interval=1.0, what="two Ready hub pods")
    except AssertionError as exc:
        logs = c.kubectl("-n", "tether-system", "logs", "-l", "app.kubernetes.io/name=tether-hub",
                         "--tail", "20", "--prefix", check=False)
        raise AssertionError(f"{exc}\n{logs.stdout}{logs.stderr}") from None
    holder = poll(lambda: c.kubectl("-n", "tether-system", "get", "lease", "tether-hub", "-o",
                                    "jsonpath={.spec.holderIdentity}", check=False).stdout.strip(),
                  timeout=120, interval=0.5, what="a leader")
    assert holder.rpartition("_")[0] in {p["metadata"]["name"] for p in pods}
    # each replica listens on its own address
    for pod in pods:
        body = c.kubectl("get", "--raw", f"/api/v1/namespaces/tether-system/pods/"
                         f"{pod['metadata']['name']}:8080/proxy/readyz").stdout
        assert f"leader: {holder}" in body, body
