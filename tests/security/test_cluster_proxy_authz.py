"""Finding 1: the hub's cluster proxy gave any authenticated hub identity admin on every member.

Now the hub's RBAC decides who may use `clusters/NAME/proxy` (a SubjectAccessReview per
request), the member's RBAC decides what they may do there (the proxy impersonates them), and
the credentials that would let anyone around that (the proxy's CA, members' credentials) are
readable only by the hub's admins. Against a local hub with `c1` (push) and `c2` (pull, its
agent running), all on 127.0.0.1 (`hub_security_util`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hub_security_util import HubEnv, forbidden, hub_env

pytestmark = pytest.mark.e2e

SECRETS = "/api/v1/namespaces/kube-system/secrets"
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "made-through-the-proxy"}}
HUB_CREDENTIALS = ("tether-cluster-proxy-pki", "c1", "c2", "tether-agent-c2-token")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubEnv]:
    with hub_env(tmp_path_factory.mktemp("hub-proxy-authz")) as started:
        yield started


@pytest.fixture(scope="module")
def low(env: HubEnv) -> dict[str, str]:
    """Tokens of hub identities that have no business on c1."""
    return {"c2's agent": env.agent_token("c2"),
            "a bootstrap token": env.bootstrap_token("c9"),
            "the hub's default ServiceAccount": env.create_token("default", "default")}


def test_low_privilege_identities_get_403_through_the_proxy(env: HubEnv, low: dict[str, str]) -> None:
    for who, token in low.items():
        read = env.through_proxy("c1", "GET", SECRETS, token=token)
        assert forbidden(read), (who, read.status_code, read.text[:300])
        assert 'cannot get resource "clusters/proxy" in API group "cluster.tether.io"' in \
            read.json()["message"], read.json()["message"]
        assert read.json()["details"] == {"name": "c1", "group": "cluster.tether.io",
                                          "kind": "clusters"}
        made = env.through_proxy("c1", "POST", "/api/v1/namespaces", token=token, body=NAMESPACE)
        assert forbidden(made) and "cannot create" in made.json()["message"], (who, made.text)
        for verb in ("PUT", "PATCH", "DELETE"):
            other = env.through_proxy("c1", verb, "/api/v1/namespaces/default", token=token)
            assert forbidden(other), (who, verb, other.status_code)
        karmada = env.through_proxy("c1", "GET", "/version", token=token, group="cluster.karmada.io")
        assert forbidden(karmada), (who, karmada.status_code)
        unknown = env.through_proxy("no-such-cluster", "GET", "/version", token=token)
        assert forbidden(unknown), (who, unknown.status_code)  # nothing learnt about names
    gone = env.kubectl("get", "namespace", NAMESPACE["metadata"]["name"], context="c1", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr


def test_low_privilege_identities_read_no_hub_credentials(env: HubEnv, low: dict[str, str]) -> None:
    for who, token in low.items():
        for name in HUB_CREDENTIALS:
            answer = env.as_token(token, "GET", f"/api/v1/namespaces/tether-system/secrets/{name}")
            assert forbidden(answer), (who, name, answer.status_code)
        listed = env.as_token(token, "GET", "/api/v1/secrets")
        assert forbidden(listed), (who, listed.status_code)
    # they exist: the refusals are about rights, not absence
    for name in HUB_CREDENTIALS:
        env.kubectl("get", "secret", name, "-n", "tether-system")


def test_an_agent_touches_only_its_own_cluster(env: HubEnv) -> None:
    token = env.agent_token("c2")
    api = "/apis/cluster.tether.io/v1alpha1/clusters"
    assert env.as_token(token, "GET", f"{api}/c2").status_code == 200
    assert env.as_token(token, "GET", f"{api}?fieldSelector=metadata.name%3Dc2").status_code == 200
    status = env.as_token(token, "PATCH", f"{api}/c2/status")
    assert status.status_code != 403  # (415 without a patch type: authorised, then refused)
    lease = "/apis/coordination.k8s.io/v1/namespaces/tether-system/leases"
    assert env.as_token(token, "GET", f"{lease}/c2").status_code == 200
    works = "/apis/work.tether.io/v1alpha1/namespaces/{}/works"
    assert env.as_token(token, "GET", works.format("tether-es-c2")).status_code == 200
    for method, path in (("GET", f"{api}/c1"), ("GET", api), ("DELETE", f"{api}/c2"),
                         ("GET", f"{lease}/c1"), ("GET", works.format("tether-es-c1")),
                         ("POST", lease), ("GET", "/api/v1/namespaces/tether-system/secrets")):
        answer = env.as_token(token, method, path)
        assert forbidden(answer), (method, path, answer.status_code)


def _grant_hub_proxy(env: HubEnv, cluster: str, group: str) -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": f"proxy-{cluster}"},
            "rules": [{"apiGroups": ["cluster.tether.io"], "resources": ["clusters/proxy"],
                       "resourceNames": [cluster],
                       "verbs": ["get", "create", "update", "patch", "delete"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": f"proxy-{cluster}-{group}"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": f"proxy-{cluster}"},
               "subjects": [{"kind": "Group", "name": group,
                             "apiGroup": "rbac.authorization.k8s.io"}]}
    env.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                      "items": [role, binding]}))


def _grant_member_pods(env: HubEnv, cluster: str, user: str) -> None:
    objs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": {"name": "pod-reader", "namespace": "team"},
             "rules": [{"apiGroups": [""], "resources": ["pods"],
                        "verbs": ["get", "list", "watch"]}]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": f"pod-reader-{user}", "namespace": "team"},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                         "name": "pod-reader"},
             "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]}]
    env.kubectl("apply", "-f", "-", context=cluster,
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))


def _whoami(env: HubEnv, config: Path) -> dict[str, object]:
    out = env.kubectl("auth", "whoami", "-o", "json", config=config).stdout
    info: dict[str, object] = json.loads(out)["status"]["userInfo"]
    return info


def test_a_user_granted_one_cluster_gets_what_that_member_grants(env: HubEnv) -> None:
    _grant_hub_proxy(env, "c1", "devs")
    _grant_member_pods(env, "c1", "alice")
    alice = env.proxy_kubeconfig("c1", user="alice", groups=("devs",))
    assert yaml.safe_load(alice.read_text())["users"][0]["user"]["client-certificate-data"]
    who = _whoami(env, alice)
    assert who["username"] == "alice"
    assert set(who["groups"]) == {"devs", "system:authenticated"}  # type: ignore[arg-type]
    pods = env.kubectl("get", "pods", "-n", "team", config=alice)
    assert pods.returncode == 0
    refused = env.kubectl("get", "secrets", "-n", "kube-system", config=alice, check=False)
    assert refused.returncode != 0
    assert 'User "alice" cannot list resource "secrets"' in refused.stderr, refused.stderr
    made = env.kubectl("create", "namespace", "alice-was-here", config=alice, check=False)
    assert made.returncode != 0 and "forbidden" in made.stderr.lower(), made.stderr
    can = env.kubectl("auth", "can-i", "delete", "pods", "-n", "team", config=alice, check=False)
    assert can.stdout.strip() == "no"
    # c2 is not hers: the hub refuses before anything reaches c2
    other = env.proxy_kubeconfig("c2", user="alice", groups=("devs",))
    elsewhere = env.kubectl("get", "--raw", "/version", config=other, check=False)
    assert elsewhere.returncode != 0
    assert 'cannot get resource "clusters/proxy"' in elsewhere.stderr, elsewhere.stderr


def test_nobody_becomes_a_member_admin_by_asking(env: HubEnv) -> None:
    """Client-sent impersonation is dropped, and a caller's own `tether:hub-admins` group is
    not passed on: only the hub's admins are member admins."""
    _grant_hub_proxy(env, "c1", "devs")
    mallory = env.proxy_kubeconfig("c1", user="mallory", groups=("devs", "tether:hub-admins"))
    who = _whoami(env, mallory)
    assert set(who["groups"]) == {"devs", "system:authenticated"}  # type: ignore[arg-type]
    for extra in (["--as", "system:admin", "--as-group", "system:masters"],
                  ["--as-group", "tether:hub-admins", "--as", "mallory"]):
        asked = env.kubectl("get", "secrets", "-n", "kube-system", *extra, config=mallory,
                            check=False)
        assert asked.returncode != 0 and "forbidden" in asked.stderr.lower(), asked.stdout


def test_the_hub_admin_is_a_member_admin_as_tether_hub_admins(env: HubEnv) -> None:
    admin = env.proxy_kubeconfig("c1")
    who = _whoami(env, admin)
    groups = set(who["groups"])  # type: ignore[arg-type]
    assert "tether:hub-admins" in groups and "system:masters" not in groups
    env.kubectl("get", "secrets", "-n", "kube-system", config=admin)
    # the binding that makes it so, made by `tether join`
    binding = json.loads(env.kubectl("get", "clusterrolebinding", "tether:hub-admins:c1", "-o",
                                     "json", context="c1").stdout)
    assert binding["roleRef"]["name"] == "cluster-admin"
    # and through the tunnel to the pull member c2, made by `tether register`
    env.kubectl("get", "secrets", "-n", "kube-system", config=env.proxy_kubeconfig("c2"))


def test_the_member_credential_is_not_cluster_admin(env: HubEnv) -> None:
    role = json.loads(env.kubectl("get", "clusterrole", "tether-controller:tether-c1", "-o",
                                  "json", context="c1").stdout)
    verbs = {verb for rule in role["rules"] for verb in rule["verbs"]}
    assert "impersonate" in verbs and not verbs & {"*", "escalate", "bind"}
    can = env.kubectl("auth", "can-i", "escalate", "clusterroles", "--as",
                      "system:serviceaccount:tether-system:tether-c1", context="c1", check=False)
    assert can.stdout.strip() == "no"
