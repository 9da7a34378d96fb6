"""Pod volumes, ServiceAccount token mounting, in-cluster config, system pods: the pure parts,
and the atomic writer on a temporary directory."""

from __future__ import annotations

import base64
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tether.kube.config import KubeconfigError, in_cluster
from tether.local import tokens
from tether.local.kubelet import environment, images, volumes
from tether.local.kubelet.system_pods import ControlPlane, component_of, static_pod
from tether.local.store import Store
from tether.objects.podfiles import mount_env_name

POD: dict[str, Any] = {"metadata": {"name": "web", "namespace": "shop", "uid": "u1", "labels": {"app": "web"}},
                       "spec": {"nodeName": "n0", "serviceAccountName": "default"}}


def lookup(objects: dict[str, dict[str, Any]]) -> environment.Lookup:
    return lambda namespace, name: objects.get(f"{namespace}/{name}")


CONFIGMAPS = lookup({"shop/code": {"data": {"run.py": "print(1)", "conf": "x"}, "binaryData": {"b": "AAE="}},
                     "shop/kube-root-ca.crt": {"data": {"ca.crt": "CA"}}})
SECRETS = lookup({"shop/creds": {"data": {"password": base64.b64encode(b"s3cret").decode()}}})


def files(volume: dict[str, Any]) -> dict[str, tuple[bytes, int]]:
    found = volumes.payload(POD, volume, configmaps=CONFIGMAPS, secrets=SECRETS, token=lambda pod, src: "TOKEN")
    return {k: (v.data, v.mode) for k, v in found.items()}


@pytest.mark.parametrize(
    ("volume", "expected"),
    [
        ({"configMap": {"name": "code"}},
         {"run.py": (b"print(1)", 0o644), "conf": (b"x", 0o644), "b": (b"\x00\x01", 0o644)}),
        ({"configMap": {"name": "code", "items": [{"key": "run.py", "path": "bin/run.py", "mode": 0o755}],
                        "defaultMode": 0o600}},
         {"bin/run.py": (b"print(1)", 0o755)}),
        ({"secret": {"secretName": "creds", "defaultMode": 0o400}}, {"password": (b"s3cret", 0o400)}),
        ({"configMap": {"name": "missing", "optional": True}}, {}),
        ({"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                                    {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
         {"labels": (b'app="web"', 0o644), "name": (b"web", 0o644)}),
        (tokens.access_volume("kube-api-access-abcde"),
         {"token": (b"TOKEN", 0o644), "ca.crt": (b"CA", 0o644), "namespace": (b"shop", 0o644)}),
    ],
)
def test_payload(volume: dict[str, Any], expected: dict[str, tuple[bytes, int]]) -> None:
    volume = {"name": "v", **volume}
    if "projected" in volume:
        volume = tokens.access_volume("v")
    assert files(volume) == expected


@pytest.mark.parametrize(
    ("volume", "message"),
    [
        ({"configMap": {"name": "missing"}}, 'configmap "missing" not found'),
        ({"configMap": {"name": "code", "items": [{"key": "nope", "path": "p"}]}},
         "configmap references non-existent config key: nope"),
        ({"secret": {"secretName": "gone"}}, 'secret "gone" not found'),
    ],
)
def test_missing_sources_fail_the_mount(volume: dict[str, Any], message: str) -> None:
    with pytest.raises(environment.ConfigError, match=message):
        files({"name": "v", **volume})


def test_atomic_writer_swaps_content_and_drops_old_names(tmp_path: Path) -> None:
    target = tmp_path / "vol"
    volumes.write_atomic(target, {"a": volumes.File(b"1"), "dir/b": volumes.File(b"2", 0o600)})
    first = os.readlink(target / "..data")
    assert (target / "a").read_bytes() == b"1" and (target / "dir" / "b").read_bytes() == b"2"
    assert os.readlink(target / "a") == "..data/a"
    assert (target / first / "dir" / "b").stat().st_mode & 0o777 == 0o600
    time.sleep(0.001)
    volumes.write_atomic(target, {"a": volumes.File(b"3")})
    assert (target / "a").read_bytes() == b"3"
    assert not (target / "dir").exists() and not (target / first).exists()
    assert sorted(p.name for p in target.iterdir() if not p.name.startswith("..2")) == ["..data", "a"]


def test_binds_put_volumes_at_their_mount_paths(tmp_path: Path) -> None:
    pod = {"spec": {"volumes": [{"name": "code", "configMap": {"name": "code"}},
                                {"name": "scratch", "emptyDir": {}},
                                {"name": "host", "hostPath": {"path": str(tmp_path / "host")}}]}}
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "run.py").write_text("x")
    container = {"volumeMounts": [
        {"name": "code", "mountPath": "/opt/app/"},
        {"name": "code", "mountPath": "/etc/run.py", "subPath": "run.py"},
        {"name": "scratch", "mountPath": "/scratch", "readOnly": True},
        {"name": "host", "mountPath": "/data"},
        {"name": "scratch", "mountPath": "/opt/app/cache"},
    ]}
    found = volumes.binds(pod, container, lambda name: tmp_path / name, {})
    targets = [b.target for b in found]
    assert targets.index("/opt/app") < targets.index("/opt/app/cache")  # parents first
    assert volumes.Bind(str(tmp_path / "code"), "/opt/app", True) in found  # configMap: always read-only
    assert volumes.Bind(str(tmp_path / "code" / "run.py"), "/etc/run.py", True) in found
    assert volumes.Bind(str(tmp_path / "host"), "/data", False) in found
    assert volumes.mount_env(found)["TETHER_MOUNT_OPT_APP"] == str(tmp_path / "code")
    # mounted (root): the files are at the mount path, and the source may be hidden there (a
    # volume at /tmp over a data directory under /tmp)
    assert volumes.mount_env(found, mounted=True)["TETHER_MOUNT_OPT_APP"] == "/opt/app"


@pytest.mark.parametrize("sub", ["../etc", "/etc", "a/../../x"])
def test_sub_path_must_stay_inside_its_volume(tmp_path: Path, sub: str) -> None:
    pod = {"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}
    with pytest.raises(volumes.MountError):
        volumes.binds(pod, {"volumeMounts": [{"name": "v", "mountPath": "/x", "subPath": sub}]},
                      lambda name: tmp_path / name, {})


def test_sub_path_through_a_symlink_out_of_the_volume_is_refused(tmp_path: Path) -> None:
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "escape").symlink_to("/etc")
    pod = {"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}
    with pytest.raises(volumes.MountError, match="outside the volume"):
        volumes.binds(pod, {"volumeMounts": [{"name": "v", "mountPath": "/x", "subPath": "escape"}]},
                      lambda name: tmp_path / name, {})


@pytest.mark.parametrize(
    ("path", "name"),
    [("/var/run/secrets/kubernetes.io/serviceaccount", "TETHER_MOUNT_VAR_RUN_SECRETS_KUBERNETES_IO_SERVICEACCOUNT"),
     ("/opt", "TETHER_MOUNT_OPT"), ("/etc/my-app/", "TETHER_MOUNT_ETC_MY_APP")],
)
def test_mount_env_name(path: str, name: str) -> None:
    assert mount_env_name(path) == name


# ServiceAccount admission --------------------------------------------------------------------------


def pod_with(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "shop"},
            "spec": {"containers": [{"name": "a"}], "initContainers": [{"name": "i"}], **spec}}


@pytest.mark.parametrize(
    ("pod_setting", "sa_setting", "mounted"),
    [(None, None, True), (False, None, False), (None, False, False), (True, False, True), (False, True, False)],
)
def test_automount(pod_setting: bool | None, sa_setting: bool | None, mounted: bool) -> None:
    pod = pod_with(**({} if pod_setting is None else {"automountServiceAccountToken": pod_setting}))
    sa = {"metadata": {"name": "default"}, **({} if sa_setting is None else {"automountServiceAccountToken": sa_setting})}
    tokens.mount_service_account_token(pod, sa, "abcde")
    assert bool(pod["spec"].get("volumes")) == mounted
    if mounted:
        assert pod["spec"]["volumes"] == [tokens.access_volume("kube-api-access-abcde")]
        mount = {"name": "kube-api-access-abcde", "readOnly": True,
                 "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
        assert pod["spec"]["containers"][0]["volumeMounts"] == [mount]
        assert pod["spec"]["initContainers"][0]["volumeMounts"] == [mount]


def test_admission_keeps_a_mount_the_pod_has_and_skips_mirror_pods() -> None:
    own = pod_with()
    own["spec"]["containers"][0]["volumeMounts"] = [{"name": "mine", "mountPath": tokens.SERVICE_ACCOUNT_DIR}]
    own["spec"]["initContainers"] = []
    tokens.mount_service_account_token(own, None, "abcde")
    assert "volumes" not in own["spec"]
    mirror = pod_with()
    mirror["metadata"]["annotations"] = {tokens.MIRROR_ANNOTATION: "x"}
    tokens.mount_service_account_token(mirror, None, "abcde")
    assert "volumes" not in mirror["spec"]


def test_pod_bound_token_lives_as_long_as_its_pod(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    try:
        signer = tokens.Signer.load_or_create(tmp_path / "pki")
        sa = {"metadata": {"name": "default", "namespace": "shop", "uid": "sa-uid"}}
        pod = {"metadata": {"name": "p", "namespace": "shop", "uid": "pod-uid"}}
        store.create("/serviceaccounts", "shop", "default", {"kind": "ServiceAccount", **sa})
        store.create("/pods", "shop", "p", {"kind": "Pod", **pod})
        now = time.time()
        token, renew_at = tokens.pod_token(signer, pod, sa, None, {"expirationSeconds": 3607}, now)
        claims = signer.verify(token)
        assert claims is not None and claims["kubernetes.io"]["pod"] == {"name": "p", "uid": "pod-uid"}
        assert claims["exp"] - claims["iat"] == tokens.EXTENDED_EXPIRATION_S  # kube-apiserver's extension
        assert claims["kubernetes.io"]["warnafter"] == int(now) + 3607
        assert renew_at == pytest.approx(now + 0.8 * 3607)
        assert tokens.check_claims(claims, store, now) == "system:serviceaccount:shop:default"
        store.delete("/pods", "shop", "p")
        assert tokens.check_claims(claims, store, now) is None
    finally:
        store.close()


# in-cluster config -----------------------------------------------------------------------------------


def test_in_cluster_reads_the_service_account_directory(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("tok\n")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    (tmp_path / "namespace").write_text("shop")
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
           mount_env_name("/var/run/secrets/kubernetes.io/serviceaccount"): str(tmp_path)}
    creds = in_cluster(env)
    assert (creds.server, creds.token, creds.namespace) == ("https://10.96.0.1:443", "tok", "shop")
    assert in_cluster({**env, "KUBERNETES_SERVICE_HOST": "fd00::1"}).server == "https://[fd00::1]:443"
    with pytest.raises(KubeconfigError, match="KUBERNETES_SERVICE_HOST"):
        in_cluster({})
    with pytest.raises(KubeconfigError, match="automountServiceAccountToken"):
        in_cluster({**env, mount_env_name("/var/run/secrets/kubernetes.io/serviceaccount"): str(tmp_path / "no")})


# the tether image and system pods ------------------------------------------------------------------


@pytest.mark.parametrize("image", ["ghcr.io/tether-dev/tether:0.1.0", "ghcr.io/tether-dev/tether", "tether",
                                   "tether:dev"])
def test_tether_image_runs_this_install(image: str) -> None:
    import sys

    nothing = images.ImageMap()
    program = images.resolve({"image": image, "args": ["hub", "run"]}, nothing)
    assert program.argv == (sys.executable, "-m", "tether", "hub", "run")
    replaced = images.resolve({"image": image, "command": ["tether", "agent"], "args": ["run"]}, nothing)
    assert replaced.argv == (sys.executable, "-m", "tether", "agent", "run")
    shell = images.resolve({"image": image, "command": ["sh", "-c", "true"]}, nothing)
    assert shell.argv == ("sh", "-c", "true")


@pytest.mark.parametrize(
    ("namespace", "labels", "component"),
    [("kube-system", {"k8s-app": "kube-dns"}, "coredns"),
     ("kube-system", {"k8s-app": "kube-proxy", "x": "y"}, "kube-proxy"),
     ("kube-system", {"component": "kube-scheduler", "tier": "control-plane"}, "kube-scheduler"),
     ("default", {"k8s-app": "kube-dns"}, None),
     ("kube-system", {"app": "web"}, None)],
)
def test_component_of(namespace: str, labels: dict[str, str], component: str | None) -> None:
    assert component_of({"metadata": {"namespace": namespace, "labels": labels}}) == component


def test_static_pod_is_a_mirror_owned_by_its_node() -> None:
    node = {"metadata": {"name": "c-node-0", "uid": "n-uid"}}
    pod = static_pod("kube-apiserver", node, ControlPlane("127.0.0.1", 6443, "10.96.0.0/16", "10.16.0.0/16"), "t")
    meta = pod["metadata"]
    assert meta["name"] == "kube-apiserver-c-node-0" and meta["labels"] == {"component": "kube-apiserver",
                                                                             "tier": "control-plane"}
    assert meta["annotations"]["kubernetes.io/config.mirror"] == meta["annotations"]["kubernetes.io/config.hash"]
    assert meta["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "c-node-0", "uid": "n-uid",
                                        "controller": True}]
    assert pod["spec"]["nodeName"] == "c-node-0" and "--secure-port=6443" in pod["spec"]["containers"][0]["command"]
