"""Finding 2: least-privilege bootstrap. A bootstrap token reads no Secret and writes no RBAC,
registers only the cluster it names, lapses exactly at its TTL (checked by the hub at every
authentication, then removed), and `tether register` checks the CA pin before the token is
sent anywhere.

The pin tests run `tether register` against TLS servers of this module's own (threads on
127.0.0.1) that record every request; the rest run against a local hub (`hub_security_util`).
"""

from __future__ import annotations

import base64
import calendar
import http.server
import json
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hub_security_util import HubEnv, forbidden, hub_env, ok, poll, tether

from tether.app.clusterproxy import new_pki
from tether.federation.bootstrap import ca_cert_hash

pytestmark = pytest.mark.e2e

TOKEN = "abc123.0123456789abcdef"


# the pin comes first --------------------------------------------------------------------------


class Recorder(http.server.ThreadingHTTPServer):
    """HTTPS on 127.0.0.1 with its own CA; records each request's headers. Anonymous
    `kube-public/cluster-info` answers with `published_ca` (when set); everything else is 401."""

    def __init__(self, tmp: Path, published_ca: str | None) -> None:
        self.pki = new_pki()
        self.published_ca = published_ca if published_ca != "own" else self.pki.ca_cert_pem.decode()
        self.seen: list[dict[str, str]] = []
        super().__init__(("127.0.0.1", 0), _Handler)
        cert, key = self.pki.issue("fake-hub", server=True, sans=("127.0.0.1",))
        (tmp / "tls.crt").write_bytes(cert)
        (tmp / "tls.key").write_bytes(key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tmp / "tls.crt", tmp / "tls.key")
        self.socket = context.wrap_socket(self.socket, server_side=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Recorder

    def do_GET(self) -> None:
        self.server.seen.append({k.lower(): v for k, v in self.headers.items()})
        authorized = "authorization" in {k.lower() for k in self.headers}
        if (self.path == "/api/v1/namespaces/kube-public/configmaps/cluster-info"
                and self.server.published_ca and not authorized):
            body: dict[str, Any] = {"kind": "ConfigMap", "apiVersion": "v1", "data": {
                "kubeconfig": _kubeconfig(self.server.url, self.server.published_ca.encode())}}
            code = 200
        else:
            body = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "Unauthorized", "code": 401, "message": "Unauthorized"}
            code = 401
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_PATCH = do_PUT = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _kubeconfig(server: str, ca_pem: bytes) -> str:
    """kubeadm's cluster-info kubeconfig."""
    return ("apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n"
            f"    certificate-authority-data: {base64.b64encode(ca_pem).decode()}\n"
            f"    server: {server}\n")


@pytest.fixture
def recorder(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Recorder]:
    server = Recorder(tmp_path, request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _register(server: str, ca_hash: str, tmp: Path) -> tuple[int, str]:
    result = tether("register", server, "--token", TOKEN, "--ca-cert-hash", ca_hash,
                    "--cluster-name", "m1", "--kubeconfig", str(tmp / "none"), "--no-start",
                    "--data-dir", str(tmp / "agents"), timeout=60)
    return result.returncode, result.stderr


def _other_pin() -> str:
    return ca_cert_hash(new_pki().ca_cert_pem)


@pytest.mark.parametrize("recorder", [None, "other"], indirect=True,
                         ids=["no-anonymous-cluster-info", "cluster-info-with-another-ca"])
def test_a_hub_that_fails_the_pin_never_gets_the_token(recorder: Recorder, tmp_path: Path) -> None:
    if recorder.published_ca == "other":
        recorder.published_ca = new_pki().ca_cert_pem.decode()
    code, stderr = _register(recorder.url, _other_pin(), tmp_path)
    assert code == 1 and "refusing the hub" in stderr, stderr
    assert recorder.seen, "register never reached the server"
    assert all("authorization" not in headers for headers in recorder.seen), recorder.seen


@pytest.mark.parametrize("recorder", ["own"], indirect=True)
def test_a_hub_whose_ca_matches_gets_the_token_over_a_verified_connection(
        recorder: Recorder, tmp_path: Path) -> None:
    """The control: the recorder does see the token once the pin holds (the fake then refuses
    it, so register stops there)."""
    code, stderr = _register(recorder.url, ca_cert_hash(recorder.pki.ca_cert_pem), tmp_path)
    assert code == 1 and "refused the bootstrap token" in stderr, stderr
    sent = [h for h in recorder.seen if "authorization" in h]
    assert sent and sent[0]["authorization"] == f"Bearer {TOKEN}"
    assert "authorization" not in recorder.seen[0]  # the anonymous cluster-info read came first


# what a bootstrap token may do ------------------------------------------------------------------


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubEnv]:
    with hub_env(tmp_path_factory.mktemp("hub-bootstrap"), pull=False) as started:
        yield started


def test_bootstrap_token_reads_no_secret_and_writes_no_rbac(env: HubEnv) -> None:
    token = env.bootstrap_token("c9")
    token_id = token.partition(".")[0]
    other = env.bootstrap_token("c8").partition(".")[0]
    # what it may do: its own request and the cluster info
    own = env.as_token(token, "GET", "/apis/cluster.tether.io/v1alpha1/namespaces/tether-system/"
                       f"clusterregistrationrequests/{token_id}")
    assert own.status_code == 200 and own.json()["spec"]["clusterName"] == "c9"
    info = env.as_token(token, "GET", "/api/v1/namespaces/tether-system/configmaps/"
                        "tether-cluster-info")
    assert info.status_code == 200
    refused: dict[str, tuple[str, str, Any]] = {
        "list every Secret": ("GET", "/api/v1/secrets", None),
        "list tether-system Secrets": ("GET", "/api/v1/namespaces/tether-system/secrets", None),
        "the proxy PKI": ("GET", "/api/v1/namespaces/tether-system/secrets/"
                                 "tether-cluster-proxy-pki", None),
        "c1's credentials": ("GET", "/api/v1/namespaces/tether-system/secrets/c1", None),
        "its own token Secret": ("GET", f"/api/v1/namespaces/kube-system/secrets/"
                                        f"bootstrap-token-{token_id}", None),
        "a ClusterRole": ("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                          {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                           "metadata": {"name": "mine"},
                           "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
        "cluster-admin for itself": (
            "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": "mine"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": "cluster-admin"},
             "subjects": [{"kind": "User", "name": f"system:bootstrap:{token_id}",
                           "apiGroup": "rbac.authorization.k8s.io"}]}),
        "a RoleBinding": ("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/tether-system/"
                                  "rolebindings",
                          {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                           "metadata": {"name": "mine"},
                           "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                       "kind": "ClusterRole", "name": "admin"},
                           "subjects": [{"kind": "User", "name": f"system:bootstrap:{token_id}",
                                         "apiGroup": "rbac.authorization.k8s.io"}]}),
        "a Cluster": ("POST", "/apis/cluster.tether.io/v1alpha1/clusters",
                      {"apiVersion": "cluster.tether.io/v1alpha1", "kind": "Cluster",
                       "metadata": {"name": "c9"},
                       "spec": {"syncMode": "Pull", "apiEndpoint": "https://10.9.9.9"}}),
        "a ServiceAccount": ("POST", "/api/v1/namespaces/tether-system/serviceaccounts",
                             {"apiVersion": "v1", "kind": "ServiceAccount",
                              "metadata": {"name": "mine"}}),
        "another token's request": (
            "PATCH", "/apis/cluster.tether.io/v1alpha1/namespaces/tether-system/"
                     f"clusterregistrationrequests/{other}", None),
        "approving itself": (
            "PATCH", "/apis/cluster.tether.io/v1alpha1/namespaces/tether-system/"
                     f"clusterregistrationrequests/{token_id}/status", None),
    }
    for what, (method, path, body) in refused.items():
        if method == "PATCH":
            answer = _merge_patch(env, token, path, {"status": {"agentToken": "x"}}
                                  if path.endswith("/status") else {"spec": {"clusterName": "c1"}})
        else:
            answer = env.as_token(token, method, path, body=body)
        assert forbidden(answer), (what, answer.status_code, answer.text[:300])
    names = env.kubectl("get", "clusterrolebindings", "-o", "name").stdout.split()
    assert "clusterrolebinding.rbac.authorization.k8s.io/mine" not in names


def _merge_patch(env: HubEnv, token: str, path: str, body: Any) -> Any:
    import httpx

    return httpx.patch(env.server() + path, content=json.dumps(body), verify=env.tls(), timeout=30,
                       headers={"Authorization": f"Bearer {token}",
                                "Content-Type": "application/merge-patch+json"})


def test_a_token_registers_only_the_cluster_it_names(env: HubEnv) -> None:
    """The token's holder may rewrite its whole request; the hub reads the cluster name from
    the token (which only admins can write) and denies anything else, so c1 is untouched."""
    before = env.kubectl("get", "secret", "c1", "-n", "tether-system", "-o",
                         "jsonpath={.data.token}").stdout
    token = env.bootstrap_token("c7")
    token_id = token.partition(".")[0]
    path = f"/apis/cluster.tether.io/v1alpha1/namespaces/tether-system/clusterregistrationrequests/{token_id}"
    forged = _merge_patch(env, token, path, {"spec": {
        "clusterName": "c1", "apiEndpoint": "https://10.9.9.9:6443", "clusterID": "forged",
        "credentials": {"token": "attacker", "caBundle": ""}}})
    assert forged.status_code == 200, forged.text

    def decision() -> dict[str, Any] | None:
        request = json.loads(env.kubectl("get", "clusterregistrationrequest", "-n",
                                         "tether-system", token_id, "-o", "json").stdout)
        for condition in (request.get("status") or {}).get("conditions") or []:
            return dict(condition)
        return None

    found = poll(decision, what="the hub's decision")
    assert found["type"] == "Denied" and "may register 'c7', not 'c1'" in found["message"]
    after = env.kubectl("get", "secret", "c1", "-n", "tether-system", "-o",
                        "jsonpath={.data.token}").stdout
    assert after == before
    request = json.loads(env.kubectl("get", "clusterregistrationrequest", "-n", "tether-system",
                                     token_id, "-o", "json").stdout)
    assert "credentials" not in request["spec"]  # not kept, even when refused
    # and `register` itself refuses to use it for another name
    command = ["register", env.server(), "--token", token, "--ca-cert-hash",
               ca_cert_hash(env.ca().encode()), "--cluster-name", "c1", "--kubeconfig",
               str(env.kubeconfig), "--context", "c1", "--no-start", "--data-dir",
               str(env.data_dir / "agents-c7")]
    result = tether(*command)
    assert result.returncode == 1 and "'c7', not 'c1'" in result.stderr, result.stderr


def _epoch(stamp: str) -> float:
    return float(calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")))


def _whoami(env: HubEnv, token: str) -> int:
    answer = env.as_token(token, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                          body={"apiVersion": "authentication.k8s.io/v1",
                                "kind": "SelfSubjectReview"})
    return answer.status_code


def test_ttl_is_enforced_by_the_hub(env: HubEnv) -> None:
    lasting = env.bootstrap_token("c6", ttl="1m")
    token_id = lasting.partition(".")[0]
    secret = json.loads(env.kubectl("get", "secret", "-n", "kube-system",
                                    f"bootstrap-token-{token_id}", "-o", "json").stdout)
    created = _epoch(secret["metadata"]["creationTimestamp"])
    expires = base64.b64decode(secret["data"]["expiration"]).decode()
    expires_s = _epoch(expires)
    assert 59 <= expires_s - created <= 62, (secret["metadata"]["creationTimestamp"], expires)
    assert _whoami(env, lasting) == 201
    # seconds, not the ten minutes a ServiceAccount token would have lasted
    short = env.bootstrap_token("c5", ttl="3s")
    short_id = short.partition(".")[0]
    short_secret = json.loads(env.kubectl("get", "secret", "-n", "kube-system",
                                          f"bootstrap-token-{short_id}", "-o", "json").stdout)
    short_expires = _epoch(base64.b64decode(short_secret["data"]["expiration"]).decode())
    poll(lambda: _whoami(env, short) == 401, timeout=60, what="the short token refused")
    assert time.time() >= short_expires  # never refused before its expiry
    # the identity is removed once it lapsed: the token's Secret, its request and its Role
    gone = ("secret", "-n", "kube-system", f"bootstrap-token-{short_id}")
    poll(lambda: env.kubectl("get", *gone, check=False).returncode != 0, what="token deleted")
    for kind, name in (("clusterregistrationrequest", short_id), ("role", f"tether:bootstrap:{short_id}"),
                       ("rolebinding", f"tether:bootstrap:{short_id}")):
        poll(lambda k=kind, n=name: env.kubectl("get", k, n, "-n", "tether-system",
                                                check=False).returncode != 0,
             what=f"{kind} {name} deleted")
    ok(tether("token", "delete", token_id, "--kubeconfig", str(env.kubeconfig),
              "--host-context", "host"))
    assert _whoami(env, lasting) == 401  # revoked at once
