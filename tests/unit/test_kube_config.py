"""Several kubeconfig files merged as kubectl merges them (`$KUBECONFIG=a:b`, `--kubeconfig`)."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tether.kube.config import (
    KubeconfigError,
    credentials_for,
    default_kubeconfig_path,
    kubeconfig_paths,
    load_kubeconfig,
    merge_kubeconfigs,
    read_kubeconfig,
)


def config(name: str, server: str, *, current: str | None = None, user: dict[str, Any] | None = None,
           cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Config",
        **({"current-context": current} if current is not None else {}),
        "clusters": [{"name": name, "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": f"{name}-admin", "user": user or {"token": f"token-{name}"}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-admin"}}],
    }


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return tmp_path


def test_a_context_of_the_second_file_is_found(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = write(env / "hub.yaml", config("hub", "https://127.0.0.1:1", current="hub"))
    member = write(env / "member.yaml", config("member1", "https://127.0.0.1:2", current="member1"))
    monkeypatch.setenv("KUBECONFIG", f"{hub}{os.pathsep}{member}")
    creds = load_kubeconfig(None, "member1")
    assert (creds.context, creds.server, creds.token) == ("member1", "https://127.0.0.1:2", "token-member1")
    # current-context comes from the first file that sets one
    assert load_kubeconfig().context == "hub"


@pytest.mark.parametrize(("first", "second", "expected_server", "expected_current"), [
    # the first file to set a map key wins, whatever the later files say
    (config("c", "https://first", current="c"), config("c", "https://second", current="c"), "https://first", "c"),
    # a file without current-context leaves it to a later one
    (config("c", "https://first"), config("d", "https://second", current="d"), "https://first", "d"),
])
def test_first_file_wins(env: Path, first: dict[str, Any], second: dict[str, Any],
                         expected_server: str, expected_current: str) -> None:
    merged = merge_kubeconfigs([(env / "a", first), (env / "b", second)])
    assert str(merged.clusters["c"].value["server"]) == expected_server
    assert merged.current_context == expected_current


def test_missing_files_of_kubeconfig_are_skipped(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    member = write(env / "member.yaml", config("member1", "https://m", current="member1"))
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(env / "gone.yaml"), "", str(member)]))
    assert load_kubeconfig().server == "https://m"
    assert kubeconfig_paths() == (env / "gone.yaml", member)
    assert default_kubeconfig_path() == member  # the first that exists, as kubectl writes to


def test_explicit_kubeconfig_overrides_the_environment(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = write(env / "a.yaml", config("c", "https://a", current="c"))
    b = write(env / "b.yaml", config("c", "https://b", current="c"))
    monkeypatch.setenv("KUBECONFIG", str(a))
    assert load_kubeconfig(b).server == "https://b"
    with pytest.raises(KubeconfigError, match="no such file"):
        load_kubeconfig(env / "absent.yaml")


def test_without_kubeconfig_the_home_file_is_read(env: Path) -> None:
    write(env / "home" / ".kube" / "config", config("c", "https://home", current="c"))
    assert load_kubeconfig().server == "https://home"


def test_no_file_at_all_names_what_was_tried(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(env / "x.yaml"))
    with pytest.raises(KubeconfigError, match=r"none of .*x\.yaml exists"):
        load_kubeconfig()


def test_an_unknown_context_lists_the_files_and_contexts(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = write(env / "a.yaml", config("hub", "https://a"))
    b = write(env / "b.yaml", config("member1", "https://b"))
    monkeypatch.setenv("KUBECONFIG", f"{a}{os.pathsep}{b}")
    with pytest.raises(KubeconfigError) as err:
        load_kubeconfig(None, "member2")
    assert str(a) in str(err.value) and str(b) in str(err.value) and "hub, member1" in str(err.value)


def test_relative_paths_resolve_against_the_file_that_holds_them(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    (env / "one").mkdir()
    (env / "two" / "certs").mkdir(parents=True)
    (env / "two" / "certs" / "ca.crt").write_bytes(pem)
    (env / "two" / "token").write_text("from-file\n")
    write(env / "one" / "a.yaml", config("hub", "https://a", current="hub"))
    write(env / "two" / "b.yaml", config("member1", "https://b", cluster={"certificate-authority": "certs/ca.crt"},
                                         user={"tokenFile": "token"}))
    monkeypatch.setenv("KUBECONFIG", f"{env / 'one' / 'a.yaml'}{os.pathsep}{env / 'two' / 'b.yaml'}")
    monkeypatch.chdir(env / "one")  # not the working directory: the file's own
    creds = load_kubeconfig(None, "member1")
    assert creds.ca_pem == pem and creds.token == "from-file"


def test_a_context_may_use_a_user_from_another_file(env: Path) -> None:
    cert = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n").decode()
    users = {"users": [{"name": "shared", "user": {"client-certificate-data": cert}}]}
    contexts = {"clusters": [{"name": "c", "cluster": {"server": "https://c"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "shared"}}]}
    merged = merge_kubeconfigs([(env / "a", contexts), (env / "b", users)])
    assert credentials_for(merged, "c").client_cert_pem is not None


def test_a_broken_file_is_a_clear_error(env: Path) -> None:
    (env / "bad.yaml").write_text("clusters: {not: a list}\n")
    with pytest.raises(KubeconfigError, match="clusters must be a list"):
        read_kubeconfig(env / "bad.yaml")
