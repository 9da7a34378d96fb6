"""Finding 4 (and the CN part of 9): RBAC is enforced on local clusters, judged with the real kubectl.

A ServiceAccount whose Role allows only `get pods` in its namespace must not read Secrets,
delete pods elsewhere or make itself cluster-admin; `kubectl auth can-i [--list]` and
`kubectl auth whoami` must tell the truth; impersonation needs the `impersonate` verb; a
ClusterRole labelled `aggregate-to-view` ends up in `view`; a client certificate without a CN
authenticates no one. Each test fails on a server that stores RBAC without enforcing it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import ssl
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

pytestmark = pytest.mark.e2e

CLUSTER = "cluster1"
VIRTUAL_IMAGE = "example.com/virtual:1"  # no program maps to it: the pod runs virtually


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _poll(check: Callable[[], Any], *, timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")


@dataclass
class Setup:
    clusters: Any
    ns: str  # where the limited ServiceAccount lives and may get pods
    other: str  # another namespace
    workdir: Path

    @property
    def sa(self) -> str:
        return f"system:serviceaccount:{self.ns}:lim"

    def admin(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        result: subprocess.CompletedProcess[str] = self.clusters.kubectl(*args, context=CLUSTER, check=check,
                                                                         input=input)
        return result

    def apply(self, *objs: dict[str, Any]) -> None:
        self.admin("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))

    def kubeconfig_for(self, account: str) -> Path:
        """A kubeconfig that authenticates as ServiceAccount `account` of `self.ns` (a TokenRequest token)."""
        path = self.workdir / f"{account}.kubeconfig"
        if path.exists():
            return path
        token = self.admin("create", "token", account, "-n", self.ns, "--duration", "1h").stdout.strip()
        ca = self.clusters.data_dir / "clusters" / CLUSTER / "pki" / "ca.crt"
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": account,
            "clusters": [{"name": CLUSTER, "cluster": {"server": self.clusters.servers[CLUSTER],
                                                       "certificate-authority": str(ca)}}],
            "users": [{"name": account, "user": {"token": token}}],
            "contexts": [{"name": account, "context": {"cluster": CLUSTER, "user": account,
                                                       "namespace": self.ns}}],
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def as_sa(self, *args: str, account: str = "lim") -> subprocess.CompletedProcess[str]:
        result: subprocess.CompletedProcess[str] = self.clusters.kubectl(
            *args, context=account, check=False, env={"KUBECONFIG": str(self.kubeconfig_for(account))})
        return result


@pytest.fixture(scope="module")
def setup(clusters: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    s = Setup(clusters, _unique("rbac"), _unique("rbac-other"), tmp_path_factory.mktemp("rbac"))
    for namespace in (s.ns, s.other):
        s.admin("create", "namespace", namespace)
    s.admin("create", "serviceaccount", "lim", "-n", s.ns)
    s.admin("create", "role", "pod-getter", "--verb=get", "--resource=pods", "-n", s.ns)
    s.admin("create", "rolebinding", "lim-pod-getter", "--role=pod-getter", f"--serviceaccount={s.ns}:lim",
            "-n", s.ns)
    s.admin("create", "secret", "generic", "db", "--from-literal=password=hunter2", "-n", s.ns)
    for namespace in (s.ns, s.other):
        s.admin("run", "web", f"--image={VIRTUAL_IMAGE}", "-n", namespace)
    yield s
    for namespace in (s.ns, s.other):
        s.admin("delete", "namespace", namespace, "--wait=false", "--ignore-not-found", check=False)


def test_the_limited_account_gets_pods_in_its_namespace_and_nothing_else(setup: Setup) -> None:
    got = setup.as_sa("get", "pod", "web", "-o", "name")
    assert got.returncode == 0 and got.stdout.strip() == "pod/web", got.stderr
    refused = setup.as_sa("get", "secret", "db", "-o", "yaml")
    assert refused.returncode != 0
    assert "hunter2" not in refused.stdout
    assert (f'Error from server (Forbidden): secrets "db" is forbidden: User "{setup.sa}" cannot get resource '
            f'"secrets" in API group "" in the namespace "{setup.ns}"') in refused.stderr
    listing = setup.as_sa("get", "secrets")
    assert listing.returncode != 0 and "cannot list resource \"secrets\"" in listing.stderr
    # a Role's grant is for its namespace, and for get only
    assert "cannot list resource \"pods\"" in setup.as_sa("get", "pods").stderr
    elsewhere = setup.as_sa("get", "pod", "web", "-n", setup.other)
    assert f'in the namespace "{setup.other}"' in elsewhere.stderr and elsewhere.returncode != 0


def test_the_limited_account_cannot_delete_pods_elsewhere(setup: Setup) -> None:
    refused = setup.as_sa("delete", "pod", "web", "-n", setup.other, "--wait=false")
    assert refused.returncode != 0
    assert (f'pods "web" is forbidden: User "{setup.sa}" cannot delete resource "pods" in API group "" in the '
            f'namespace "{setup.other}"') in refused.stderr
    assert "cannot delete resource" in setup.as_sa("delete", "pod", "web", "--wait=false").stderr
    setup.admin("get", "pod", "web", "-n", setup.other)
    setup.admin("get", "pod", "web", "-n", setup.ns)


def test_the_limited_account_cannot_make_itself_cluster_admin(setup: Setup) -> None:
    name = _unique("pwn")
    refused = setup.as_sa("create", "clusterrolebinding", name, "--clusterrole=cluster-admin",
                          f"--serviceaccount={setup.ns}:lim")
    assert refused.returncode != 0
    assert "cannot create resource \"clusterrolebindings\"" in refused.stderr
    assert setup.admin("get", "clusterrolebinding", name, check=False).returncode != 0
    assert setup.as_sa("get", "secret", "db").returncode != 0


def test_writing_rbac_needs_the_permissions_granted(setup: Setup) -> None:
    """An account that may write bindings and roles still cannot grant what it does not hold
    (escalation refused), unless it may `bind` that role."""
    rbac = "rbac.authorization.k8s.io"
    setup.admin("create", "serviceaccount", "binder", "-n", setup.ns)
    setup.admin("create", "clusterrole", f"{setup.ns}-rbac-writer", "--verb=create,get",
                "--resource=clusterrolebindings,rolebindings,roles")
    setup.admin("create", "clusterrolebinding", f"{setup.ns}-binder", f"--clusterrole={setup.ns}-rbac-writer",
                f"--serviceaccount={setup.ns}:binder")
    user = f"system:serviceaccount:{setup.ns}:binder"
    refused = setup.as_sa("create", "clusterrolebinding", _unique("pwn"), "--clusterrole=cluster-admin",
                          f"--serviceaccount={setup.ns}:binder", account="binder")
    assert refused.returncode != 0
    assert (f'is forbidden: user "{user}" (groups=["system:serviceaccounts" "system:serviceaccounts:{setup.ns}" '
            '"system:authenticated"]) is attempting to grant RBAC permissions not currently held:\n'
            '{APIGroups:["*"], Resources:["*"], Verbs:["*"]}') in refused.stderr
    role = setup.as_sa("create", "role", "secret-reader", "--verb=get", "--resource=secrets", account="binder")
    assert role.returncode != 0
    assert '{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}' in role.stderr
    # with `bind` on the `view` ClusterRole it may bind view in its namespace, and still nothing more
    setup.apply({"apiVersion": f"{rbac}/v1", "kind": "Role", "metadata": {"name": "bind-view", "namespace": setup.ns},
                 "rules": [{"apiGroups": [rbac], "resources": ["clusterroles"], "verbs": ["bind"],
                            "resourceNames": ["view"]}]},
                {"apiVersion": f"{rbac}/v1", "kind": "RoleBinding",
                 "metadata": {"name": "binder-bind-view", "namespace": setup.ns},
                 "roleRef": {"apiGroup": rbac, "kind": "Role", "name": "bind-view"},
                 "subjects": [{"kind": "ServiceAccount", "name": "binder", "namespace": setup.ns}]})
    allowed = setup.as_sa("create", "rolebinding", "viewers", "--clusterrole=view",
                          f"--serviceaccount={setup.ns}:lim", account="binder")
    assert allowed.returncode == 0, allowed.stderr
    again = setup.as_sa("create", "rolebinding", "admins", "--clusterrole=admin",
                        f"--serviceaccount={setup.ns}:lim", account="binder")
    assert again.returncode != 0 and "attempting to grant RBAC permissions not currently held" in again.stderr
    setup.admin("delete", "rolebinding", "viewers", "-n", setup.ns)


@pytest.mark.parametrize(("args", "answer"), [
    (("get", "pods"), "yes"),
    (("get", "pods/web"), "yes"),
    (("list", "pods"), "no"),
    (("get", "pods", "--subresource=log"), "no"),
    (("get", "secrets"), "no"),
    (("create", "clusterrolebindings"), "no"),
    (("delete", "pods", "-n", "{other}"), "no"),
    (("get", "pods", "-n", "{other}"), "no"),
    (("create", "selfsubjectaccessreviews.authorization.k8s.io"), "yes"),
    (("get", "/version"), "yes"),
    (("get", "/apis/apps/v1"), "yes"),
    (("get", "/metrics"), "no"),
])
def test_auth_can_i_answers_for_the_account(setup: Setup, args: tuple[str, ...], answer: str) -> None:
    args = tuple(a.format(other=setup.other) for a in args)
    result = setup.as_sa("auth", "can-i", *args)
    assert result.stdout.strip() == answer, result.stderr
    assert result.returncode == (0 if answer == "yes" else 1)
    # the administrator asking on the account's behalf (impersonation) gets the same answer
    where = () if "-n" in args else ("-n", setup.ns)
    on_behalf = setup.admin("auth", "can-i", *args, *where, f"--as={setup.sa}", check=False)
    assert on_behalf.stdout.strip() == answer, on_behalf.stderr


def test_auth_can_i_as_administrator(setup: Setup) -> None:
    for args in (("*", "*"), ("delete", "nodes"), ("get", "secrets", "-A"), ("escalate", "clusterroles")):
        assert setup.admin("auth", "can-i", *args).stdout.strip() == "yes", args


def _rows(output: str) -> set[tuple[str, ...]]:
    lines = [line for line in output.splitlines() if line.strip()]
    header, rows = lines[0], lines[1:]
    starts = [header.index(col) for col in ("Resources", "Non-Resource URLs", "Resource Names", "Verbs")]
    bounds = [*starts[1:], None]
    return {tuple(row[a:b].strip() for a, b in zip(starts, bounds, strict=True)) for row in rows}


def test_auth_can_i_list_shows_the_role_and_the_defaults_only(setup: Setup) -> None:
    result = setup.as_sa("auth", "can-i", "--list")
    assert result.returncode == 0, result.stderr
    urls = ("/api/*", "/api", "/apis/*", "/apis", "/healthz", "/livez", "/openapi/*", "/openapi", "/readyz",
            "/version/", "/version")
    expected = {
        ("pods", "[]", "[]", "[get]"),
        ("selfsubjectreviews.authentication.k8s.io", "[]", "[]", "[create]"),
        ("selfsubjectaccessreviews.authorization.k8s.io", "[]", "[]", "[create]"),
        ("selfsubjectrulesreviews.authorization.k8s.io", "[]", "[]", "[create]"),
        *(("", f"[{url}]", "[]", "[get]") for url in urls),
    }
    assert _rows(result.stdout) == expected
    elsewhere = _rows(setup.as_sa("auth", "can-i", "--list", "-n", setup.other).stdout)
    assert elsewhere == expected - {("pods", "[]", "[]", "[get]")}


def test_auth_whoami(setup: Setup) -> None:
    result = setup.as_sa("auth", "whoami", "-o", "json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)["status"]["userInfo"]
    assert info["username"] == setup.sa
    assert info["groups"] == ["system:serviceaccounts", f"system:serviceaccounts:{setup.ns}", "system:authenticated"]
    admin = json.loads(setup.admin("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert admin["username"] == "tether-admin" and "system:masters" in admin["groups"]


def test_impersonation_needs_the_impersonate_verb(setup: Setup) -> None:
    rbac = "rbac.authorization.k8s.io"
    # the limited account may not impersonate anyone
    refused = setup.as_sa("get", "pods", "--as=bob")
    assert refused.returncode != 0
    assert (f'users "bob" is forbidden: User "{setup.sa}" cannot impersonate resource "users" in API group "" '
            "at the cluster scope") in refused.stderr
    # an account allowed to impersonate user bob and group devs (only those)
    setup.admin("create", "serviceaccount", "proxy", "-n", setup.ns)
    role = f"{setup.ns}-impersonator"
    setup.apply({"apiVersion": f"{rbac}/v1", "kind": "ClusterRole", "metadata": {"name": role},
                 "rules": [{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"],
                            "resourceNames": ["bob"]},
                           {"apiGroups": [""], "resources": ["groups"], "verbs": ["impersonate"],
                            "resourceNames": ["devs"]}]},
                {"apiVersion": f"{rbac}/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
                 "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": role},
                 "subjects": [{"kind": "ServiceAccount", "name": "proxy", "namespace": setup.ns}]})
    me = setup.as_sa("auth", "whoami", "-o", "json", "--as=bob", "--as-group=devs", account="proxy")
    assert me.returncode == 0, me.stderr
    assert json.loads(me.stdout)["status"]["userInfo"] == {"username": "bob",
                                                           "groups": ["devs", "system:authenticated"]}
    # the request then runs as bob, whom nothing allows to read pods ...
    as_bob = setup.as_sa("get", "pods", "--as=bob", account="proxy")
    assert as_bob.returncode != 0 and 'User "bob" cannot list resource "pods"' in as_bob.stderr
    # ... until bob's group is granted it in the namespace
    setup.admin("create", "rolebinding", "devs-view", "--clusterrole=view", "--group=devs", "-n", setup.ns)
    got = setup.as_sa("get", "pods", "-o", "name", "--as=bob", "--as-group=devs", account="proxy")
    assert got.returncode == 0 and "pod/web" in got.stdout, got.stderr
    for extra in (("--as=alice",), ("--as=bob", "--as-group=system:masters"),
                  (f"--as=system:serviceaccount:{setup.ns}:lim",)):
        denied = setup.as_sa("get", "secrets", *extra, account="proxy")
        assert denied.returncode != 0 and "cannot impersonate resource" in denied.stderr, extra
    # a group without a user is a malformed request, even for the administrator
    pki = setup.clusters.data_dir / "clusters" / CLUSTER / "pki"
    with _client(setup, (pki / "admin.crt", pki / "admin.key")) as client:
        bare = client.get("/api/v1/namespaces", headers={"Impersonate-Group": "devs"})
        assert bare.status_code == 400 and "without impersonating a user" in bare.json()["message"]


def test_a_clusterrole_labelled_aggregate_to_view_joins_view(setup: Setup) -> None:
    name = _unique("leases-view")
    # leases are served and not in view: what view can do about them comes from this role only
    rule = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "watch"]}
    setup.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                 "metadata": {"name": name, "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
                 "rules": [rule]})

    def rules_of(role: str) -> list[Any]:
        rules: list[Any] = json.loads(setup.admin("get", "clusterrole", role, "-o", "json").stdout)["rules"]
        return rules

    # view gathers it, and edit and admin (which gather view) follow
    for role in ("view", "edit", "admin"):
        _poll(lambda role=role: rule in rules_of(role), what=f"{role} to aggregate {name}")
    # the aggregated rule is enforced: a binding of view now grants it
    setup.admin("create", "rolebinding", "lim-view", "--clusterrole=view", f"--serviceaccount={setup.ns}:lim",
                "-n", setup.ns)
    assert setup.as_sa("auth", "can-i", "list", "leases.coordination.k8s.io").stdout.strip() == "yes"
    setup.admin("delete", "clusterrole", name)
    _poll(lambda: rule not in rules_of("view"), what=f"view to drop {name}")
    assert setup.as_sa("auth", "can-i", "list", "leases.coordination.k8s.io").stdout.strip() == "no"
    setup.admin("delete", "rolebinding", "lim-view", "-n", setup.ns)


def test_default_roles_are_bootstrapped(setup: Setup) -> None:
    roles = json.loads(setup.admin("get", "clusterroles", "-l", "kubernetes.io/bootstrapping=rbac-defaults",
                                   "-o", "json").stdout)["items"]
    names = {r["metadata"]["name"] for r in roles}
    assert {"cluster-admin", "admin", "edit", "view", "system:basic-user", "system:discovery",
            "system:public-info-viewer"} <= names
    for role in roles:
        assert role["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"] == "true"
    binding = json.loads(setup.admin("get", "clusterrolebinding", "cluster-admin", "-o", "json").stdout)
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                                    "name": "system:masters"}]


# certificates and anonymous callers ----------------------------------------------------------


def _client_cert(setup: Setup, subject: x509.Name) -> tuple[Path, Path]:
    pki = setup.clusters.data_dir / "clusters" / CLUSTER / "pki"
    ca_cert = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    tag = uuid.uuid4().hex[:6]
    cert_path, key_path = setup.workdir / f"{tag}.crt", setup.workdir / f"{tag}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    os.chmod(key_path, 0o600)
    return cert_path, key_path


def _client(setup: Setup, cert: tuple[Path, Path] | None = None) -> httpx.Client:
    context = ssl.create_default_context(
        cafile=str(setup.clusters.data_dir / "clusters" / CLUSTER / "pki" / "ca.crt"))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    return httpx.Client(base_url=setup.clusters.servers[CLUSTER], verify=context, timeout=30)


def test_a_client_certificate_without_cn_is_refused(setup: Setup) -> None:
    no_cn = _client_cert(setup, x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters")]))
    with _client(setup, no_cn) as client:
        answer = client.get("/api/v1/namespaces")
        assert answer.status_code == 401, answer.text
        assert answer.json()["reason"] == "Unauthorized"


def test_certificate_organizations_are_groups(setup: Setup) -> None:
    carol = _client_cert(setup, x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "carol"),
                                           x509.NameAttribute(NameOID.ORGANIZATION_NAME, "devs")]))
    with _client(setup, carol) as client:
        review = client.post("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                             json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        assert review.status_code == 201, review.text
        assert review.json()["status"]["userInfo"] == {"username": "carol",
                                                       "groups": ["devs", "system:authenticated"]}
        denied = client.get(f"/api/v1/namespaces/{setup.other}/pods")
        assert denied.status_code == 403
        assert denied.json()["message"] == (f'pods is forbidden: User "carol" cannot list resource "pods" in API '
                                            f'group "" in the namespace "{setup.other}"')


def test_anonymous_callers_reach_only_public_paths(setup: Setup) -> None:
    with _client(setup) as client:
        assert client.get("/version").status_code == 200
        assert client.get("/healthz").status_code == 200
        for path in ("/api", "/api/v1/namespaces", f"/api/v1/namespaces/{setup.ns}/secrets", "/metrics"):
            assert client.get(path).status_code == 401, path
        impersonating = client.get("/api/v1/namespaces", headers={"Impersonate-User": "tether-admin",
                                                                  "Impersonate-Group": "system:masters"})
        assert impersonating.status_code == 401
