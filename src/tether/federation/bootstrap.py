"""Pull-mode registration: bootstrap tokens on the hub, CA pinning, and `tether register`.

**Bootstrap token choice.** kubeadm's `bootstrap-token-<id>` Secrets need the API server's
bootstrap-token authenticator, which tether's local clusters do not have (and which a managed hub
may not enable). tether therefore issues a *ServiceAccount* token with limited rights, named like
kubeadm's: ServiceAccount `tether-system/tether-bootstrap-<id>` (annotated with its expiration),
bound to the ClusterRole `tether:bootstrap` (create/get Clusters; ServiceAccounts, Secrets,
Namespaces, ConfigMaps; the agent's ClusterRole, Role and their bindings), and a TokenRequest token for
it with `expirationSeconds` = the TTL. The printed token is `<id>.<jwt>` (the id names the
ServiceAccount; the JWT is what authenticates). `token create` deletes expired bootstrap
ServiceAccounts, which revokes their tokens; `tether token delete ID` revokes one at once.

**CA pinning.** As kubeadm: `--ca-cert-hash sha256:<hex>` is the SHA-256 of the hub API CA's
DER SubjectPublicKeyInfo. `register` opens an unverified TLS connection, reads the CA from the
ConfigMap `kube-public/cluster-info` anonymously (kubeadm's; readable on real clusters) or, when
anonymous reads are refused (tether's local clusters), from `tether-system/tether-cluster-info`
with the bootstrap token, then checks the CA's hash and that the certificate the hub presented
was issued by that CA. Only then is a verified client built. (With the fallback the bootstrap
token has been sent before the pin was checked: a short TTL bounds that exposure.)

**Registration** (with the bootstrap token on the hub, the member's own credentials there):
member side as `tether join` (ServiceAccount `tether-<name>` with its token, so the hub can reach
the member API through the tunnel); hub side: Namespace `tether-es-<name>`, Secret
`tether-system/<name>` (member token and CA), ServiceAccount `tether-agent-<name>` with the
ClusterRole/Binding `tether:agent:<name>` and its token Secret (the agent's long-lived
credential), and the Cluster (`syncMode: Pull`, `apiEndpoint` as the member sees it, `proxyURL`
the hub's tunnel CONNECT address when the hub runs a tunnel server).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import secrets
import ssl
import string
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tether.federation import registry
from tether.federation.crds import CLUSTER_API_VERSION, execution_namespace
from tether.federation.health import HUB_NAMESPACE
from tether.federation.registry import agent_account, agent_role, agent_token_secret
from tether.kube import ClusterCredentials, KubeClient, KubeError, NotFound
from tether.objects import Obj
from tether.objects.times import rfc3339, seconds_of

FIELD_MANAGER = "tether-bootstrap"
BOOTSTRAP_ROLE = "tether:bootstrap"
BOOTSTRAP_PREFIX = "tether-bootstrap-"
EXPIRES_ANNOTATION = "cluster.tether.io/expiration"
BOOTSTRAP_LABEL = "cluster.tether.io/bootstrap-token"
AGENT_FOR_LABEL = "cluster.tether.io/agent-for"
CLUSTER_INFO = "tether-cluster-info"  # ConfigMap in tether-system: ca.crt, server, tunnel info
TUNNEL_AGENT_ADDRESS_KEY = "tunnelAgentAddress"  # host:port the agents dial
TUNNEL_PROXY_URL_KEY = "tunnelProxyURL"  # http://host:port CONNECT frontend for the hub's clients
TUNNEL_CA_KEY = "tunnel-ca.crt"  # CA of the tunnel agent port's server certificate
REQUEST_TIMEOUT_S = 10.0
_ID = re.compile(r"^[a-z0-9]{6}$")


class BootstrapError(Exception):
    """A token or registration problem, with a message for the user (never the token)."""


# CA hashes -------------------------------------------------------------------------------------


def ca_cert_hash(pem: bytes) -> str:
    """kubeadm's `sha256:<hex>`: SHA-256 of the first certificate's DER SubjectPublicKeyInfo."""
    cert = x509.load_pem_x509_certificate(pem)
    spki = cert.public_key().public_bytes(serialization.Encoding.DER,
                                          serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def normalize_hash(value: str) -> str:
    text = value.strip().lower()
    if not text.startswith("sha256:"):
        raise BootstrapError(f"--ca-cert-hash must look like sha256:<64 hex digits>, got {value!r}")
    digest = text[len("sha256:"):]
    if len(digest) != 64 or any(c not in string.hexdigits for c in digest):
        raise BootstrapError(f"--ca-cert-hash must look like sha256:<64 hex digits>, got {value!r}")
    return text


def split_token(token: str) -> tuple[str, str]:
    """(id, bearer) from `<id>.<jwt>`."""
    token_id, sep, bearer = token.strip().partition(".")
    if not sep or not _ID.match(token_id) or not bearer:
        raise BootstrapError("the token must look like <6-character id>.<secret> "
                             "(as printed by `tether token create`)")
    return token_id, bearer


# tokens on the hub -----------------------------------------------------------------------------


@dataclass(frozen=True)
class BootstrapToken:
    token_id: str
    token: str = ""  # "<id>.<jwt>"; never logged
    expires_s: float = 0.0

    def __repr__(self) -> str:
        return f"BootstrapToken({self.token_id!r}, expires={rfc3339(self.expires_s)})"


def bootstrap_role() -> Obj:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": BOOTSTRAP_ROLE},
        "rules": [
            {"apiGroups": ["cluster.tether.io"], "resources": ["clusters"],
             "verbs": ["get", "list", "create", "patch"]},
            {"apiGroups": [""], "resources": ["namespaces", "serviceaccounts", "secrets",
                                              "configmaps"],
             "verbs": ["get", "create", "patch"]},
            {"apiGroups": ["rbac.authorization.k8s.io"],
             "resources": ["clusterroles", "clusterrolebindings", "roles", "rolebindings"],
             "verbs": ["get", "create", "patch", "bind", "escalate"]},
        ],
    }


async def publish_cluster_info(host: KubeClient, extra: Mapping[str, str] | None = None, *,
                               field_manager: str = FIELD_MANAGER) -> None:
    """The hub CA (and tunnel details) where `register` finds them. Each writer (token create,
    the hub's tunnel) applies its own keys under its own field manager."""
    ca = (host.credentials.ca_pem or b"").decode()
    data = {"ca.crt": ca, "server": host.credentials.server, **dict(extra or {})}
    await host.apply({"apiVersion": "v1", "kind": "Namespace",
                      "metadata": {"name": HUB_NAMESPACE}}, field_manager=FIELD_MANAGER)
    await host.apply({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": CLUSTER_INFO, "namespace": HUB_NAMESPACE},
                      "data": data}, field_manager=field_manager)
    kubeconfig = (
        "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n"
        f"    certificate-authority-data: {base64.b64encode(ca.encode()).decode()}\n"
        f"    server: {host.credentials.server}\n")
    try:  # kubeadm's anonymous-readable cluster-info
        await host.apply({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "cluster-info", "namespace": "kube-public"},
                          "data": {"kubeconfig": kubeconfig}}, field_manager=field_manager)
    except KubeError:
        pass


async def create_token(host: KubeClient, ttl_s: float) -> BootstrapToken:
    if not host.credentials.ca_pem:
        raise BootstrapError("the hub kubeconfig has no certificate-authority data to pin")
    await delete_expired(host)
    await publish_cluster_info(host)
    alphabet = string.ascii_lowercase + string.digits
    token_id = "".join(secrets.choice(alphabet) for _ in range(6))
    account = BOOTSTRAP_PREFIX + token_id
    expires = time.time() + ttl_s
    await host.apply(bootstrap_role(), field_manager=FIELD_MANAGER)
    await host.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                      "metadata": {"name": account, "namespace": HUB_NAMESPACE,
                                   "labels": {BOOTSTRAP_LABEL: token_id},
                                   "annotations": {EXPIRES_ANNOTATION: rfc3339(expires)}}},
                     field_manager=FIELD_MANAGER)
    await host.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                      "metadata": {"name": f"{BOOTSTRAP_ROLE}:{token_id}",
                                   "labels": {BOOTSTRAP_LABEL: token_id}},
                      "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": BOOTSTRAP_ROLE},
                      "subjects": [{"kind": "ServiceAccount", "name": account,
                                    "namespace": HUB_NAMESPACE}]},
                     field_manager=FIELD_MANAGER)
    answer = await host.request(
        "POST", f"/api/v1/namespaces/{HUB_NAMESPACE}/serviceaccounts/{account}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
              "spec": {"expirationSeconds": max(600, int(ttl_s))}})
    jwt = str((answer.get("status") or {}).get("token") or "")
    if not jwt:
        raise BootstrapError("the hub did not issue a token (TokenRequest answered without one)")
    return BootstrapToken(token_id, f"{token_id}.{jwt}", expires)


async def delete_token(host: KubeClient, token_id: str) -> bool:
    found = False
    for api_version, kind, name, namespace in (
        ("v1", "ServiceAccount", BOOTSTRAP_PREFIX + token_id, HUB_NAMESPACE),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", f"{BOOTSTRAP_ROLE}:{token_id}", None),
    ):
        try:
            await host.delete(api_version, kind, name, namespace)
            found = True
        except NotFound:
            pass
    return found


async def delete_expired(host: KubeClient) -> list[str]:

    gone: list[str] = []
    try:
        accounts = await host.list_objects("v1", "ServiceAccount", HUB_NAMESPACE,
                                           label_selector=BOOTSTRAP_LABEL)
    except NotFound:
        return gone
    for account in accounts:
        meta = account.get("metadata") or {}
        expires = seconds_of((meta.get("annotations") or {}).get(EXPIRES_ANNOTATION))
        token_id = str((meta.get("labels") or {}).get(BOOTSTRAP_LABEL, ""))
        if expires is not None and expires < time.time() and token_id:
            await delete_token(host, token_id)
            gone.append(token_id)
    return gone


# the registrant's side -------------------------------------------------------------------------


async def _peer_certificate(server: str, timeout_s: float) -> x509.Certificate:
    parts = urlsplit(server)
    if parts.scheme != "https" or not parts.hostname:
        raise BootstrapError(f"the hub address must be https://HOST:PORT, got {server!r}")
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(parts.hostname, parts.port or 443,
                                                      ssl=context)
    except (OSError, TimeoutError) as exc:
        raise BootstrapError(f"cannot reach the hub at {server}: {exc}") from None
    try:
        ssl_object = writer.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    finally:
        writer.close()
    if not der:
        raise BootstrapError(f"the hub at {server} presented no certificate")
    return x509.load_der_x509_certificate(der)


def _check_pin(ca_pem: bytes, leaf: x509.Certificate, expected: str, server: str) -> None:
    try:
        actual = ca_cert_hash(ca_pem)
        ca = x509.load_pem_x509_certificate(ca_pem)
    except ValueError as exc:
        raise BootstrapError(f"the hub's CA certificate cannot be read: {exc}") from None
    if actual != expected:
        raise BootstrapError(
            f"refusing the hub at {server}: its CA's public key hash is {actual}, not the expected "
            f"{expected} (--ca-cert-hash); is this the right hub?")
    try:
        leaf.verify_directly_issued_by(ca)
    except (ValueError, TypeError, Exception) as exc:  # InvalidSignature has no common base
        raise BootstrapError(
            f"refusing the hub at {server}: its serving certificate was not issued by the pinned "
            f"CA ({type(exc).__name__})") from None


async def discover_hub(server: str, token: str, ca_hash: str, *,
                       timeout_s: float = REQUEST_TIMEOUT_S) -> tuple[bytes, dict[str, str]]:
    """The hub CA (verified against `ca_hash`) and the cluster-info data."""
    expected = normalize_hash(ca_hash)
    _, bearer = split_token(token)
    leaf = await _peer_certificate(server, timeout_s)
    anonymous = KubeClient(ClusterCredentials.from_token(server=server, token="", ca_bundle=None,
                                                         insecure=True))
    data: dict[str, str] = {}
    ca_pem = b""
    try:
        try:
            info = await anonymous.get("v1", "ConfigMap", "cluster-info", "kube-public",
                                       timeout_s=timeout_s)
            kubeconfig = str((info.get("data") or {}).get("kubeconfig", ""))
            found = re.search(r"certificate-authority-data:\s*(\S+)", kubeconfig)
            if found:
                ca_pem = base64.b64decode(found.group(1))
        except KubeError:
            pass
    finally:
        await anonymous.close()
    unverified = KubeClient(ClusterCredentials.from_token(server=server, token=bearer,
                                                          ca_bundle=None, insecure=True))
    try:
        if ca_pem:
            _check_pin(ca_pem, leaf, expected, server)
        try:
            info = await unverified.get("v1", "ConfigMap", CLUSTER_INFO, HUB_NAMESPACE,
                                        timeout_s=timeout_s)
        except KubeError as exc:
            if exc.code == 401:
                raise BootstrapError(
                    f"{server} refused the bootstrap token (401 Unauthorized): it is wrong, "
                    "expired or deleted, or this is not the hub that issued it; create a new one "
                    "with `tether token create`") from None
            raise BootstrapError(f"cannot read the hub's cluster info: {exc.message}") from None
    finally:
        await unverified.close()
    data = {str(k): str(v) for k, v in (info.get("data") or {}).items()}
    if not ca_pem:
        ca_pem = data.get("ca.crt", "").encode()
        if not ca_pem:
            raise BootstrapError("the hub publishes no CA certificate in its cluster info")
        _check_pin(ca_pem, leaf, expected, server)
    return ca_pem, data


@dataclass(frozen=True)
class Registration:
    name: str
    api_endpoint: str
    agent_token: str  # the hub ServiceAccount token the agent uses; never logged
    hub_ca_pem: bytes
    tunnel_agent_address: str
    tunnel_ca_pem: bytes
    steps: tuple[str, ...]

    def __repr__(self) -> str:
        return f"Registration({self.name!r}, {self.api_endpoint!r})"


def agent_rbac(name: str) -> list[Obj]:
    account = agent_account(name)
    labels = {AGENT_FOR_LABEL: name}
    rules: list[Obj] = [
        {"apiGroups": ["cluster.tether.io"], "resources": ["clusters"], "resourceNames": [name],
         "verbs": ["get", "patch", "update"]},
        {"apiGroups": ["cluster.tether.io"], "resources": ["clusters"],
         "verbs": ["list", "watch"]},
        {"apiGroups": ["cluster.tether.io"], "resources": ["clusters/status"],
         "resourceNames": [name], "verbs": ["get", "patch", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
         "verbs": ["get", "create", "update", "patch"]},
    ]
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": agent_role(name), "labels": labels}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": agent_role(name), "labels": labels},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": agent_role(name)},
         "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": HUB_NAMESPACE}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": agent_role(name), "namespace": execution_namespace(name),
                      "labels": labels},
         "rules": [{"apiGroups": ["work.tether.io"], "resources": ["works", "works/status"],
                    "verbs": ["get", "list", "watch", "update", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": agent_role(name), "namespace": execution_namespace(name),
                      "labels": labels},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": agent_role(name)},
         "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": HUB_NAMESPACE}]},
    ]


async def _hub_token(hub: KubeClient, name: str, wait_s: float) -> str:
    account = agent_account(name)
    secret_obj: Obj = {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
        "metadata": {"name": agent_token_secret(name), "namespace": HUB_NAMESPACE,
                     "labels": {AGENT_FOR_LABEL: name},
                     "annotations": {"kubernetes.io/service-account.name": account}}}
    deadline = time.monotonic() + wait_s
    while True:
        try:
            secret: Obj | None = await hub.get("v1", "Secret", agent_token_secret(name),
                                               HUB_NAMESPACE)
        except NotFound:
            secret = None
        if secret is None:
            await hub.apply(secret_obj, field_manager=FIELD_MANAGER)
        elif (secret.get("data") or {}).get("token"):
            return base64.b64decode(secret["data"]["token"]).decode()
        if time.monotonic() >= deadline:
            raise BootstrapError(f"the hub did not issue a token for {HUB_NAMESPACE}/{account} "
                                 f"within {wait_s:.0f}s")
        await asyncio.sleep(0.2)


async def register(hub: KubeClient, member: KubeClient, name: str, cluster_info: Mapping[str, str],
                   *, proxy_url: str = "", tunnel_agent_address: str = "",
                   token_wait_s: float = registry.TOKEN_WAIT_S) -> Registration:
    """Create the pull Cluster and the agent's hub credential; see the module docstring."""
    try:
        registry.validate_name(name)
    except registry.RegistryError as exc:
        raise BootstrapError(str(exc)) from None
    endpoint = member.credentials.server
    try:
        kube_system = await member.get("v1", "Namespace", "kube-system")
    except KubeError as exc:
        raise BootstrapError(f"cannot reach the member at {endpoint}: {exc}") from None
    cluster_id = str(kube_system["metadata"].get("uid", ""))
    try:
        existing = await hub.list_objects(CLUSTER_API_VERSION, "Cluster")
    except NotFound:
        raise BootstrapError("the hub has no Cluster type: run `tether hub install` on it") from None
    try:
        registry.check_conflicts(name, endpoint, cluster_id, existing)
    except registry.RegistryError as exc:
        raise BootstrapError(str(exc)) from None
    steps: list[str] = []
    # member side: the hub's credential for the member API (used through the tunnel)
    objs = registry.member_objects(name)
    sa_uid = ""
    for obj in objs:
        applied = await member.apply(obj, field_manager=FIELD_MANAGER)
        if obj["kind"] == "ServiceAccount":
            sa_uid = str(applied["metadata"].get("uid", ""))
        steps.append(f"member: {obj['kind']} {obj['metadata']['name']}")
    secret = await registry._wait_token(member, name, sa_uid, objs[-1], token_wait_s)
    data = secret.get("data") or {}
    member_ca = member.credentials.ca_pem or (
        base64.b64decode(data["ca.crt"]) if data.get("ca.crt") else b"")
    proxy = proxy_url or cluster_info.get(TUNNEL_PROXY_URL_KEY, "")
    spec: Obj = {"id": cluster_id, "syncMode": "Pull", "apiEndpoint": endpoint,
                 "secretRef": {"namespace": HUB_NAMESPACE, "name": name}}
    if proxy:
        spec["proxyURL"] = proxy
    hub_objects: list[Obj] = [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": execution_namespace(name), "labels": registry.labels(name)}},
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": name, "namespace": HUB_NAMESPACE, "labels": registry.labels(name)},
         "data": {"token": data["token"], "caBundle": base64.b64encode(member_ca).decode()}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": agent_account(name), "namespace": HUB_NAMESPACE,
                      "labels": {AGENT_FOR_LABEL: name}}},
        *agent_rbac(name),
        {"apiVersion": CLUSTER_API_VERSION, "kind": "Cluster",
         "metadata": {"name": name, "labels": {}}, "spec": spec},
    ]
    for obj in hub_objects:
        await hub.apply(obj, field_manager=FIELD_MANAGER)
        steps.append(f"hub: {obj['kind']} {obj['metadata']['name']}")
    agent_token = await _hub_token(hub, name, token_wait_s)
    steps.append(f"hub: Secret {agent_token_secret(name)}")
    return Registration(
        name=name, api_endpoint=endpoint, agent_token=agent_token,
        hub_ca_pem=hub.credentials.ca_pem or b"",
        tunnel_agent_address=tunnel_agent_address or cluster_info.get(TUNNEL_AGENT_ADDRESS_KEY, ""),
        tunnel_ca_pem=cluster_info.get(TUNNEL_CA_KEY, "").encode(), steps=tuple(steps))


async def agent_tokens(host: KubeClient) -> dict[str, frozenset[str]]:
    """bearer → names an agent may serve, from the agents' token Secrets and their Clusters
    (the cluster name and its API host), for the hub's tunnel server."""
    out: dict[str, frozenset[str]] = {}
    secrets_ = await host.list_objects("v1", "Secret", HUB_NAMESPACE, label_selector=AGENT_FOR_LABEL)
    clusters = {c["metadata"]["name"]: c for c in await host.list_objects(CLUSTER_API_VERSION,
                                                                          "Cluster")}
    for secret in secrets_:
        name = str(((secret.get("metadata") or {}).get("labels") or {}).get(AGENT_FOR_LABEL, ""))
        token = (secret.get("data") or {}).get("token")
        cluster = clusters.get(name)
        if not token or cluster is None:
            continue
        endpoint = str((cluster.get("spec") or {}).get("apiEndpoint", ""))
        host_name = urlsplit(endpoint).hostname or ""
        out[base64.b64decode(token).decode()] = frozenset({name, *([host_name] if host_name else [])})
    return out
