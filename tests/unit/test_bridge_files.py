"""Volume files built from the API and Bridge to Kubernetes' config file, without a cluster."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from tether.bridge.b2kconfig import ConfigFileError, parse
from tether.bridge.envresolve import (
    Environment,
    PodFacts,
    ResolveError,
    ServiceAddress,
    Source,
    Variable,
)
from tether.bridge.volumecopy import Downloaded, env_name, write_files
from tether.bridge.volumefiles import File, api_files, mounts
from tether.kube.podexec import exec_target, exit_code_of


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


CONFIGMAPS = {"cfg": {"data": {"a.txt": "A", "b.txt": "B"}, "binaryData": {"blob": b64(b"\x00\x01")}}}
SECRETS = {"creds": {"data": {"user": b64(b"admin"), "pass": b64(b"pw")}}}


def facts(volume: dict[str, Any], *, running: bool = True, mount_path: str = "/etc/x") -> PodFacts:
    spec = {"containers": [{"name": "app", "volumeMounts": [{"name": volume["name"], "mountPath": mount_path}],
                            "resources": {"limits": {"memory": "64Mi"}}}],
            "volumes": [volume]}
    return PodFacts({"metadata": {"name": "p", "namespace": "ns", "labels": {"b": "2", "a": "1"}},
                     "spec": spec, "status": {"podIP": "10.0.0.9"}}, running)


def files_of(volume: dict[str, Any], **kw: Any) -> dict[str, File]:
    pod = facts(volume, **kw)
    mount = mounts(pod, "app")[0]
    return api_files(pod, mount, container=pod.pod["spec"]["containers"][0], configmaps=CONFIGMAPS,
                     secrets=SECRETS, token=lambda spec: f"token-for-{spec.get('audience', 'api')}")


@pytest.mark.parametrize(("volume", "want"), [
    ({"name": "v", "configMap": {"name": "cfg"}},
     {"a.txt": File(b"A", 0o644), "b.txt": File(b"B", 0o644), "blob": File(b"\x00\x01", 0o644)}),
    ({"name": "v", "configMap": {"name": "cfg", "defaultMode": 0o600, "items": [
        {"key": "a.txt", "path": "sub/dir/a"}, {"key": "b.txt", "path": "b", "mode": 0o755}]}},
     {"sub/dir/a": File(b"A", 0o600), "b": File(b"B", 0o755)}),
    ({"name": "v", "secret": {"secretName": "creds", "defaultMode": 0o400}},
     {"user": File(b"admin", 0o400), "pass": File(b"pw", 0o400)}),
    ({"name": "v", "secret": {"secretName": "absent", "optional": True}}, {}),
    ({"name": "v", "configMap": {"name": "cfg", "optional": True, "items": [{"key": "nope", "path": "n"}]}}, {}),
    ({"name": "v", "downwardAPI": {"items": [
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        {"path": "ip", "fieldRef": {"fieldPath": "status.podIP"}, "mode": 0o600},
        {"path": "mem", "resourceFieldRef": {"containerName": "app", "resource": "limits.memory", "divisor": "1Mi"}}]}},
     {"labels": File(b'a="1"\nb="2"', 0o644), "ip": File(b"10.0.0.9", 0o600), "mem": File(b"64", 0o644)}),
    ({"name": "v", "projected": {"defaultMode": 0o440, "sources": [
        {"configMap": {"name": "cfg", "items": [{"key": "a.txt", "path": "a"}]}},
        {"secret": {"name": "creds", "items": [{"key": "user", "path": "u", "mode": 0o400}]}},
        {"serviceAccountToken": {"path": "token", "audience": "vault"}}]}},
     {"a": File(b"A", 0o440), "u": File(b"admin", 0o400), "token": File(b"token-for-vault", 0o440)}),
])
def test_api_volume_files(volume: dict[str, Any], want: dict[str, File]) -> None:
    assert files_of(volume) == want


@pytest.mark.parametrize(("volume", "message"), [
    ({"name": "v", "configMap": {"name": "absent"}}, 'configmap "absent" not found'),
    ({"name": "v", "configMap": {"name": "cfg", "items": [{"key": "nope", "path": "n"}]}}, "no key 'nope'"),
    ({"name": "v", "configMap": {"name": "cfg", "items": [{"key": "a.txt", "path": "../escape"}]}}, "not a relative path"),
    ({"name": "v", "projected": {"sources": [{"clusterTrustBundle": {"path": "b"}}]}}, "clusterTrustBundle"),
])
def test_api_volume_errors(volume: dict[str, Any], message: str) -> None:
    with pytest.raises(ResolveError, match=message):
        files_of(volume)


def test_mounts_know_which_volumes_need_the_pod() -> None:
    pod = facts({"name": "scratch", "emptyDir": {}})
    [mount] = mounts(pod, "app")
    assert (mount.kind, mount.from_api, mount.mount_path) == ("emptyDir", False, "/etc/x")
    assert env_name("kube-api-access.x1") == "TETHER_VOLUME_KUBE_API_ACCESS_X1"


def test_write_files_replaces_the_directory_with_modes(tmp_path: Path) -> None:
    target = tmp_path / "v"
    write_files(target, {"a": File(b"1", 0o600), "d/b": File(b"2", 0o755)})
    write_files(target, {"a": File(b"3", 0o400)})
    assert sorted(p.name for p in target.rglob("*")) == ["a"]
    assert (target / "a").read_bytes() == b"3" and (target / "a").stat().st_mode & 0o777 == 0o400
    assert [p.name for p in tmp_path.iterdir()] == ["v"]


CONFIG = """\
version: 0.1
env:
  - name: ALLOW_LIST_PATH
    value: $(volumeMounts:testvolume)/list
  - name: KAFKA
    value: $(services:kafka-headless.kafka):9092
  - name: LOCAL
    value: $(Services:todos-db)
  - name: DB_HOST
    value: $(externalEndpoints:server.database.windows.net:1433)
  - name: PLAIN
    value: just text
volumeMounts:
  - name: testvolume
    localPath: ./data
"""


def downloaded(path: Path) -> dict[str, Downloaded]:
    return {"testvolume": Downloaded("testvolume", "emptyDir", path, "/data", False)}


def test_b2k_config_tokens(tmp_path: Path) -> None:
    config = parse(CONFIG, tmp_path / "KubernetesLocalProcessConfig.yaml")
    assert config.local_paths() == {"testvolume": tmp_path / "data"}
    assert config.needs_volumes
    base = Environment((Variable("PLAIN", "old", Source("value")), Variable("KEEP", "k", Source("value"))))
    env = config.apply(base, downloaded(tmp_path / "data"), "shop")
    got = env.as_dict()
    assert got["ALLOW_LIST_PATH"] == f"{tmp_path / 'data'}/list"
    assert got["KAFKA"] == "kafka-headless.kafka:9092"
    assert got["LOCAL"] == "todos-db"
    assert got["DB_HOST"] == "server.database.windows.net"
    assert got["PLAIN"] == "just text" and got["KEEP"] == "k"
    assert str(env.get("PLAIN").source) == "config KubernetesLocalProcessConfig.yaml:11"  # type: ignore[union-attr]
    mapped = config.apply(base, downloaded(tmp_path / "data"), "shop",
                          {("shop", "todos-db"): ServiceAddress("shop", "todos-db", "127.1.1.3")})
    assert mapped.as_dict()["LOCAL"] == "127.1.1.3"


@pytest.mark.parametrize(("text", "message"), [
    ("version: 0.1\nenv:\n  - name: A\n    value: $(volume:x)\n", "f.yaml:4: unknown token '$(volume:x)'"),
    ("version: 0.1\nenv:\n  - name: A\n    value: $(HOME)\n", "f.yaml:4: unknown token '$(HOME)'"),
    ("version: 0.1\nenv:\n  - name: A\n    valu: x\n", "f.yaml:4: unknown key 'valu' in an env entry"),
    ("version: 0.1\nservices: []\n", "f.yaml:2: unknown key 'services' in the file"),
    ("version: 0.2\n", "f.yaml:1: version '0.2' is not supported"),
    ("env: []\n", "`version: 0.1` is missing"),
    ("version: 0.1\nvolumeMounts:\n  - name: v\n", "f.yaml:3: volumeMounts entry 'v' without a localPath"),
    ("version: 0.1\nenv:\n  - name: A\n    value: $(services:)\n", "needs a name after the colon"),
    ("version: [\n", "not valid YAML"),
])
def test_b2k_config_errors_name_the_line(text: str, message: str) -> None:
    with pytest.raises(ConfigFileError, match=message.replace("(", r"\(").replace(")", r"\)").replace("$", r"\$")):
        parse(text, Path("f.yaml"))


def test_b2k_config_volume_that_the_container_does_not_mount(tmp_path: Path) -> None:
    config = parse("version: 0.1\nenv:\n  - name: A\n    value: $(volumeMounts:other)\n", tmp_path / "f.yaml")
    with pytest.raises(ConfigFileError, match=r"f.yaml:3: \$\(volumeMounts:other\) names volume 'other'"):
        config.apply(Environment(()), downloaded(tmp_path), "shop")


@pytest.mark.parametrize(("status", "want"), [
    ({"status": "Success"}, (0, "")),
    ({"status": "Failure", "reason": "NonZeroExitCode", "message": "command terminated with non-zero exit code",
      "details": {"causes": [{"reason": "ExitCode", "message": "127"}]}},
     (127, "command terminated with non-zero exit code")),
    ({"status": "Failure", "message": "exec: \"tar\": executable file not found"},
     (-1, "exec: \"tar\": executable file not found")),
])
def test_exec_status(status: dict[str, Any], want: tuple[int, str]) -> None:
    assert exit_code_of(status) == want


def test_exec_target_repeats_command() -> None:
    target = exec_target("ns", "p", "app", ["sh", "-c", "a b"], stdin=False)
    assert target == "/api/v1/namespaces/ns/pods/p/exec?command=sh&command=-c&command=a+b&container=app&stdout=true&stderr=true"
