"""`tether env` and `tether volumes` against a local cluster, objects made by the real kubectl
from `examples/bridge/app.yaml` (the README's walkthrough).

- `tether env deploy/api -- sh -c env` gives the command the pod's declared environment (values,
  expansions, ConfigMap, Secret, downward API, Service links), with Secret values in clear,
  and they match what the running container itself has (`kubectl exec ... env`).
- Printed output redacts Secret values; `--reveal` shows them; `--explain` names sources.
- Without a running pod the template is used, and `status.podIP` is reported unresolved.
- Volumes: ConfigMap items, Secret with defaultMode 0400, an emptyDir and a PVC-backed volume
  written by the pod, with their modes; the same through the no-tar fallback.
- B2K's `$(volumeMounts:testvolume)` points at the downloaded emptyDir; an unknown token fails
  naming the token and its line.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from e2e_util import poll

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "bridge"
TIMEOUT_S = 90.0
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def tether(clusters: Any, *args: str, check: bool = True, tmpdir: Path | None = None
           ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **({"TMPDIR": str(tmpdir)} if tmpdir else {})}
    result = subprocess.run([sys.executable, "-m", "tether", *args, "--kubeconfig", str(clusters.kubeconfig),
                             "--context", clusters.names[0]] if "--" not in args else
                            [sys.executable, "-m", "tether", *args[:args.index("--")], "--kubeconfig",
                             str(clusters.kubeconfig), "--context", clusters.names[0], *args[args.index("--"):]],
                            capture_output=True, text=True, timeout=120, env=env)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def running_pod(clusters: Any, ns: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        for pod in clusters.kubectl_json("get", "pods", "-n", ns, "-l", "app=api")["items"]:
            conditions = (pod.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                return dict(pod)
        return None

    found: dict[str, Any] = poll(check, timeout=TIMEOUT_S, interval=0.5, what="the api pod Ready")
    return found


def written(clusters: Any, ns: str, pod: str) -> None:
    """The pod's command has written its files (it starts before it is Ready)."""
    poll(lambda: clusters.kubectl("exec", "-n", ns, pod, "--", "sh", "-c",
                                  "test -x /tmp/bridge-example/lib/run.sh", check=False).returncode == 0,
         timeout=TIMEOUT_S, interval=0.5, what="the pod's files")


@pytest.fixture
def app(clusters: Any, ns: str) -> dict[str, Any]:
    clusters.kubectl("apply", "-n", ns, "-f", str(EXAMPLES / "app.yaml"))
    pod = running_pod(clusters, ns)
    written(clusters, ns, pod["metadata"]["name"])
    return pod


def parse_env(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        name, eq, value = line.partition("=")
        if eq:  # dotenv quotes values with characters a shell would read specially
            out[name] = value[1:-1] if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"" else value
    return out


@pytest.mark.skipif(not IS_ROOT, reason="the pod writes its volumes at their mountPath: needs mount namespaces (root)")
def test_env_command_gets_the_pods_environment(clusters: Any, ns: str, app: dict[str, Any]) -> None:
    pod_name, pod_ip = app["metadata"]["name"], app["status"]["podIP"]
    child = parse_env(tether(clusters, "env", "deploy/api", "-n", ns, "--", "sh", "-c", "env").stdout)
    assert child["GREETING"] == "hello"
    assert child["MESSAGE"] == "hello from $(POD_NAME) ($literal)"  # POD_NAME is declared later
    assert child["POD_NAME"] == pod_name
    assert child["POD_IP"] == pod_ip
    assert child["MEMORY_MB"] == "128"
    assert child["LEVEL"] == "debug"
    assert child["CFG_MODE"] == "prod"
    assert child["DB_PASSWORD"] == "s3cr3t-pw"  # never redacted for the command
    svc = clusters.kubectl_json("get", "service", "todos-db", "-n", ns)
    assert child["TODOS_DB_SERVICE_HOST"] == svc["spec"]["clusterIP"]
    assert child["TODOS_DB_PORT_27017_TCP_ADDR"] == svc["spec"]["clusterIP"]
    assert child["STATS_QUEUE_SERVICE_PORT_AMQP"] == "5672"
    assert child["DB_URL"] == f"mongodb://app:s3cr3t-pw@{svc['spec']['clusterIP']}:27017"
    assert "KUBERNETES_SERVICE_HOST" in child
    assert child["PATH"] == os.environ["PATH"]  # the local environment stays under the pod's

    # What the container really has agrees, variable for variable (resources aside: local
    # clusters do not account them).
    inside = parse_env(clusters.kubectl("exec", "-n", ns, pod_name, "--", "env").stdout)
    for name in ("GREETING", "MESSAGE", "POD_NAME", "POD_IP", "LEVEL", "CFG_MODE", "DB_PASSWORD",
                 "TODOS_DB_SERVICE_HOST", "TODOS_DB_PORT", "STATS_QUEUE_PORT_5672_TCP", "DB_URL"):
        assert child[name] == inside[name], name


def test_printed_env_redacts_secrets_and_explains(clusters: Any, ns: str, app: dict[str, Any]) -> None:
    printed = tether(clusters, "env", "deploy/api", "-n", ns).stdout
    assert "s3cr3t-pw" not in printed and "key-123" not in printed
    assert parse_env(printed)["DB_PASSWORD"] == "<redacted>"
    assert parse_env(printed)["DB_URL"] == "<redacted>"  # built from a Secret value
    revealed = json.loads(tether(clusters, "env", "deploy/api", "-n", ns, "--format", "json", "--reveal").stdout)
    assert revealed["DB_PASSWORD"] == "s3cr3t-pw"
    explained = tether(clusters, "env", "deploy/api", "-n", ns, "--explain", "--format", "shell").stdout
    assert "# DB_PASSWORD: envFrom.secret Secret app-secret key DB_PASSWORD (secret)" in explained
    assert "# CFG_MODE: envFrom.configMap ConfigMap app-config key MODE (prefix CFG_)" in explained
    assert "# POD_IP: fieldRef status.podIP" in explained
    assert "# MEMORY_MB: resourceFieldRef limits.memory (divisor 1Mi)" in explained
    assert f"# TODOS_DB_SERVICE_HOST: serviceLink Service {ns}/todos-db" in explained
    assert "export GREETING=hello" in explained


def test_template_without_a_pod_reports_what_it_cannot_know(clusters: Any, ns: str, app: dict[str, Any]) -> None:
    clusters.kubectl("scale", "deploy/api", "-n", ns, "--replicas=0")
    poll(lambda: not clusters.kubectl_json("get", "pods", "-n", ns, "-l", "app=api")["items"],
         timeout=TIMEOUT_S, interval=0.5, what="the api pods gone")
    result = tether(clusters, "env", "deploy/api", "-n", ns)
    env = parse_env(result.stdout)
    assert env["GREETING"] == "hello" and "POD_IP" not in env
    assert "POD_IP not resolved: status.podIP is known only for a running pod" in result.stderr
    assert "note: no pod of deploy/api is running: resolved from its pod template" in result.stderr
    missing = tether(clusters, "env", "deploy/absent", "-n", ns, check=False)
    assert missing.returncode == 1 and 'deployment "absent" not found' in missing.stderr


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.skipif(not IS_ROOT, reason="the pod writes its volumes at their mountPath: needs mount namespaces (root)")
@pytest.mark.parametrize("method", ["auto", "shell"])
def test_volumes_download_with_contents_and_modes(clusters: Any, ns: str, app: dict[str, Any], tmp_path: Path,
                                                  method: str) -> None:
    from tether import bridge

    downloaded = bridge.volumes("deploy/api", tmp_path, namespace=ns, context=clusters.names[0],
                                kubeconfig=clusters.kubeconfig, method=method)  # type: ignore[arg-type]
    access = next(name for name in downloaded if name.startswith("kube-api-access-"))
    assert set(downloaded) == {"config", "secret", "testvolume", "data", access}
    # the projected ServiceAccount volume: a fresh token from the TokenRequest API, the CA, the namespace
    assert (tmp_path / access / "namespace").read_text() == ns
    assert (tmp_path / access / "token").read_text().count(".") == 2
    assert "BEGIN CERTIFICATE" in (tmp_path / access / "ca.crt").read_text()
    assert (tmp_path / "config" / "lists" / "allow.txt").read_text() == "alice\nbob\n"
    assert mode(tmp_path / "config" / "lists" / "allow.txt") == 0o644
    assert (tmp_path / "secret" / "DB_PASSWORD").read_text() == "s3cr3t-pw"
    assert mode(tmp_path / "secret" / "DB_PASSWORD") == 0o400
    assert (tmp_path / "testvolume" / "test.txt").read_text() == "this is a test\n"  # the emptyDir B2K failed on
    assert (tmp_path / "data" / "db" / "rows").read_text() == "row 1\n"
    assert mode(tmp_path / "data" / "db" / "rows") == 0o640
    assert mode(tmp_path / "data" / "run.sh") == 0o755
    assert downloaded["testvolume"].path == tmp_path / "testvolume"


@pytest.mark.skipif(not IS_ROOT, reason="the pod writes its volumes at their mountPath: needs mount namespaces (root)")
def test_b2k_config_runs_an_existing_project(clusters: Any, ns: str, app: dict[str, Any], tmp_path: Path) -> None:
    result = tether(clusters, "env", "deploy/api", "-n", ns, "--config", str(EXAMPLES / "KubernetesLocalProcessConfig.yaml"),
                    "--", "sh", "-c", 'cat "$ALLOW_LIST_PATH/test.txt"; echo "queue=$QUEUE_HOST"; '
                    'echo "vol=$TETHER_VOLUME_TESTVOLUME"', tmpdir=tmp_path)
    lines = result.stdout.splitlines()
    assert lines[0] == "this is a test"
    assert lines[1] == "queue=stats-queue"
    assert lines[2].startswith(f"vol={tmp_path}/tether-volumes-") and lines[2].endswith("/testvolume")

    bad = tmp_path / "KubernetesLocalProcessConfig.yaml"
    bad.write_text("version: 0.1\nenv:\n  - name: A\n    value: ok\n  - name: B\n    value: $(volumes:testvolume)\n")
    failed = tether(clusters, "env", "deploy/api", "-n", ns, "--config", str(bad), "--", "true", check=False)
    assert failed.returncode == 1
    assert f"{bad}:6: unknown token '$(volumes:testvolume)'" in failed.stderr


async def test_watch_keeps_configmap_and_secret_volumes_in_sync(clusters: Any, ns: str, tmp_path: Path) -> None:
    """No pod needed: API-built volumes follow their ConfigMap and Secret through watches."""
    import asyncio

    from tether.bridge import volumecopy
    from tether.bridge.api import client_for, resolve_environment

    clusters.kubectl("apply", "-n", ns, "-f", str(EXAMPLES / "app.yaml"))
    clusters.kubectl("scale", "deploy/api", "-n", ns, "--replicas=0")
    client, _ = client_for(clusters.names[0], clusters.kubeconfig)
    async with client:
        resolved = await resolve_environment(client, "deploy/api", namespace=ns)
        config = [m for m in volumecopy.mounts(resolved.facts, resolved.container_name) if m.from_api]
        downloaded = {}
        for mount in config:
            directory = tmp_path / mount.name
            volumecopy.write_files(directory, await volumecopy.render_api_volume(client, resolved, mount))
            downloaded[mount.name] = volumecopy.Downloaded(mount.name, mount.kind, directory, mount.mount_path, True)
        allow = tmp_path / "config" / "lists" / "allow.txt"
        assert allow.read_text() == "alice\nbob\n"
        updates: list[str] = []
        stop = asyncio.Event()
        task = asyncio.create_task(volumecopy.watch(client, resolved, downloaded, log=updates.append, stop=stop))
        try:
            await asyncio.to_thread(clusters.kubectl, "patch", "configmap", "app-config", "-n", ns, "--type=merge",
                                    "-p", json.dumps({"data": {"allow-list.txt": "carol\n"}}))
            await asyncio.to_thread(poll, lambda: allow.read_text() == "carol\n", timeout=TIMEOUT_S,
                                    what="the ConfigMap change in the volume")
            await asyncio.to_thread(clusters.kubectl, "patch", "secret", "app-secret", "-n", ns, "--type=merge",
                                    "-p", json.dumps({"stringData": {"DB_PASSWORD": "rotated"}}))
            password = tmp_path / "secret" / "DB_PASSWORD"
            await asyncio.to_thread(poll, lambda: password.read_text() == "rotated", timeout=TIMEOUT_S,
                                    what="the Secret change in the volume")
            assert stat.S_IMODE(password.stat().st_mode) == 0o400
        finally:
            stop.set()
            await asyncio.wait_for(task, TIMEOUT_S)
        assert any("volume config updated (ConfigMap app-config modified)" in u for u in updates), updates


@pytest.mark.skipif(not IS_ROOT, reason="the pod writes its volumes at their mountPath: needs mount namespaces (root)")
def test_image_without_tar_falls_back_and_without_a_shell_fails_clearly(clusters: Any, ns: str,
                                                                        tmp_path: Path) -> None:
    """Local pods use this machine's tools: a PATH holding only sh, find, ls and cat is an image
    without tar; an empty PATH one without a shell either."""
    import shutil

    from tether import bridge

    tools, empty = tmp_path / "bin", tmp_path / "empty"
    tools.mkdir()
    empty.mkdir()
    for name in ("sh", "find", "ls", "cat", "sleep"):
        found = shutil.which(name)
        assert found, name
        (tools / name).symlink_to(found)
    mount = str(tmp_path / "mnt")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "notar"}, "spec": {
        "containers": [
            {"name": "app", "image": "busybox", "command": ["sh", "-c", f"echo no tar here > {mount}/f; exec sleep 3600"],
             "env": [{"name": "PATH", "value": str(tools)}], "volumeMounts": [{"name": "d", "mountPath": mount}]},
            {"name": "bare", "image": "busybox", "command": [str(tools / "sleep"), "3600"],
             "env": [{"name": "PATH", "value": str(empty)}], "volumeMounts": [{"name": "d", "mountPath": mount}]}],
        "volumes": [{"name": "d", "emptyDir": {}}]}}
    clusters.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(pod))
    poll(lambda: clusters.kubectl("exec", "-n", ns, "notar", "-c", "app", "--", "cat", f"{mount}/f",
                                  check=False).stdout == "no tar here\n", timeout=TIMEOUT_S, interval=0.5,
         what="the pod's file")
    common: dict[str, Any] = {"namespace": ns, "context": clusters.names[0], "kubeconfig": clusters.kubeconfig}

    result = tether(clusters, "volumes", "notar", "-n", ns, "-c", "app", "--to", str(tmp_path / "out"))
    assert "container app has no tar: copying volume d file by file" in result.stderr
    assert (tmp_path / "out" / "d" / "f").read_text() == "no tar here\n"
    with pytest.raises(bridge.VolumeError, match="the container app of pod notar has no tar"):
        bridge.volumes("notar", tmp_path / "tar", container="app", method="tar", **common)
    with pytest.raises(bridge.VolumeError, match="the container has neither tar nor a shell with find, ls and cat"):
        bridge.volumes("notar", tmp_path / "bare", container="bare", **common)
