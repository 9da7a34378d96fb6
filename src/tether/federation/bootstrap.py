"""Pull-mode registration: bootstrap tokens on the hub, CA pinning, and `tether register`.

**Bootstrap tokens** are kubeadm's: `<id>.<secret>` (6 and 16 characters of `[a-z0-9]`), stored
as the Secret `kube-system/bootstrap-token-<id>` (type `bootstrap.kubernetes.io/token`, with an
`expiration`), which kube-apiserver's bootstrap-token authenticator (`--enable-bootstrap-token-auth`;
on by default with kubeadm, and in tether's local clusters) checks at every authentication, so a
token stops working at its expiry to the second; kube-controller-manager's token cleaner (and
the hub's registry controller) then delete it. The user is `system:bootstrap:<id>`. A token
names the one cluster it may register (`token create --cluster-name`; the Secret's label
`cluster.tether.io/bootstrap-for`, which only admins can change).

**What a bootstrap token may do**: the Role `tether:bootstrap:<id>` in `tether-system` allows
`get`/`update`/`patch`/`delete` of the ClusterRegistrationRequest named `<id>` and `get` of the
ConfigMap `tether-cluster-info`, nothing else: no Secret reads, no Cluster writes, no RBAC
writes. Registration is CSR-like: `token create` makes the request (`spec.clusterName`),
`register` fills in the member's details and the hub's member credential, and the hub's registry
controller (`tether.federation.registrations`, in `tether hub run`) checks them against the
token, then creates with its own identity what the agent needs (the Cluster, the Secret
`tether-system/<name>`, the agent's ServiceAccount, token and Roles, the Lease, the execution
namespace) and puts the agent's token in the request's status; `register` collects it and
deletes the request, which uses the token up.

**The agent's identity** (`agent_rbac`) may read and patch its own Cluster and its status,
renew its own Lease and work with the Works in its own `tether-es-<name>`: nothing of another
cluster, no Secrets.

**CA pinning, before any credential is sent** (kubeadm's order): `register` opens a TLS
connection without verification, reads the hub CA from the ConfigMap `kube-public/cluster-info`
*anonymously* (`token create` publishes it and lets `system:anonymous` read it, as kubeadm does),
checks the SHA-256 of the CA's DER SubjectPublicKeyInfo against `--ca-cert-hash` and that the
certificate the hub presented was issued by that CA; only then does it send the bootstrap token,
over a connection verified with that CA. A hub that does not publish its CA anonymously is
refused with a message, never sent the token.

**Member side** (as `tether join`, `registry.member_objects`): the ServiceAccount `tether-<name>`
with its token, its least-privilege role (impersonation included, for the cluster proxy) and
the `tether:hub-admins` binding.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import math
import re
import secrets
import ssl
import string
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tether.federation import registry
from tether.federation.crds import (
    CLUSTER_API_VERSION,
    CLUSTER_GROUP,
    REGISTRATION_KIND,
    REGISTRATION_PLURAL,
    execution_namespace,
)
from tether.federation.health import HUB_NAMESPACE
from tether.federation.registry import agent_account, agent_role, agent_token_secret
from tether.kube import ClusterCredentials, KubeClient, KubeError, NotFound
from tether.objects import Obj
from tether.objects.times import rfc3339, seconds_of

FIELD_MANAGER = "tether-bootstrap"
BOOTSTRAP_ROLE = "tether:bootstrap"  # + ":<id>": each token's own Role and RoleBinding
BOOTSTRAP_PREFIX = "tether-bootstrap-"  # the ServiceAccounts older tethers used as tokens
TOKEN_NAMESPACE = "kube-system"
TOKEN_SECRET_PREFIX = "bootstrap-token-"
TOKEN_SECRET_TYPE = "bootstrap.kubernetes.io/token"
TOKEN_USER_PREFIX = "system:bootstrap:"
TOKEN_GROUP = "system:bootstrappers:tether"
BOOTSTRAP_LABEL = "cluster.tether.io/bootstrap-token"
BOOTSTRAP_FOR_LABEL = "cluster.tether.io/bootstrap-for"
AGENT_FOR_LABEL = "cluster.tether.io/agent-for"
CLUSTER_INFO = "tether-cluster-info"  # ConfigMap in tether-system: ca.crt, server, tunnel info
PUBLIC_NAMESPACE = "kube-public"
PUBLIC_CLUSTER_INFO = "cluster-info"  # kubeadm's, readable anonymously
PUBLIC_CLUSTER_INFO_ROLE = "kubeadm:bootstrap-signer-clusterinfo"
TUNNEL_AGENT_ADDRESS_KEY = "tunnelAgentAddress"  # host:port the agents dial
TUNNEL_PROXY_URL_KEY = "tunnelProxyURL"  # http://host:port CONNECT frontend for the hub's clients
TUNNEL_CA_KEY = "tunnel-ca.crt"  # CA of the tunnel agent port's server certificate
REQUEST_TIMEOUT_S = 10.0
APPROVAL_WAIT_S = 60.0
RBAC_API = "rbac.authorization.k8s.io/v1"
REQUESTS_PATH = f"/apis/{CLUSTER_API_VERSION}/namespaces/{HUB_NAMESPACE}/{REGISTRATION_PLURAL}"
APPROVED = "Approved"
DENIED = "Denied"
_ALPHABET = string.ascii_lowercase + string.digits
_TOKEN_ID = re.compile(r"^[a-z0-9]{6}$")


class BootstrapError(Exception):
    """A token or registration problem, with a message for the user (never the token)."""


# CA hashes and token syntax --------------------------------------------------------------------


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
    """(id, secret) from `<id>.<secret>`. Only the id's shape is checked here: whether the
    secret is right (kubeadm's are 16 characters of `[a-z0-9]`) is the hub's to say."""
    token_id, sep, secret = token.strip().partition(".")
    if not sep or not _TOKEN_ID.match(token_id) or not secret:
        raise BootstrapError("the token must look like <6-character id>.<secret> "
                             "(as printed by `tether token create`)")
    return token_id, secret


def token_secret_name(token_id: str) -> str:
    return TOKEN_SECRET_PREFIX + token_id


def token_role(token_id: str) -> str:
    return f"{BOOTSTRAP_ROLE}:{token_id}"


def token_user(token_id: str) -> str:
    return TOKEN_USER_PREFIX + token_id


# what a token is, on the hub (pure) ------------------------------------------------------------


@dataclass(frozen=True)
class BootstrapToken:
    token_id: str
    token: str = ""  # "<id>.<secret>"; never logged
    expires_s: float = 0.0
    cluster: str = ""

    def __repr__(self) -> str:
        return (f"BootstrapToken({self.token_id!r}, cluster={self.cluster!r}, "
                f"expires={rfc3339(self.expires_s)})")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def bootstrap_secret(token_id: str, token_secret: str, cluster: str, expires_s: float) -> Obj:
    """kubeadm's bootstrap-token Secret, authenticating only (no signing), for `cluster`."""
    data = {"token-id": token_id, "token-secret": token_secret,
            "expiration": rfc3339(expires_s), "usage-bootstrap-authentication": "true",
            "auth-extra-groups": TOKEN_GROUP,
            "description": f"tether register {cluster} (created by tether token create)"}
    return {"apiVersion": "v1", "kind": "Secret", "type": TOKEN_SECRET_TYPE,
            "metadata": {"name": token_secret_name(token_id), "namespace": TOKEN_NAMESPACE,
                         "labels": {BOOTSTRAP_LABEL: token_id, BOOTSTRAP_FOR_LABEL: cluster}},
            "data": {k: _b64(v) for k, v in data.items()}}


def registration_request(token_id: str, cluster: str) -> Obj:
    return {"apiVersion": CLUSTER_API_VERSION, "kind": REGISTRATION_KIND,
            "metadata": {"name": token_id, "namespace": HUB_NAMESPACE,
                         "labels": {BOOTSTRAP_LABEL: token_id, BOOTSTRAP_FOR_LABEL: cluster}},
            "spec": {"clusterName": cluster, "tokenID": token_id}}


def bootstrap_rbac(token_id: str) -> list[Obj]:
    """The token's only rights: its own registration request and the hub's cluster info."""
    name = token_role(token_id)
    labels = {BOOTSTRAP_LABEL: token_id}
    return [
        {"apiVersion": RBAC_API, "kind": "Role",
         "metadata": {"name": name, "namespace": HUB_NAMESPACE, "labels": labels},
         "rules": [
             {"apiGroups": [CLUSTER_GROUP], "resources": [REGISTRATION_PLURAL],
              "resourceNames": [token_id], "verbs": ["get", "update", "patch", "delete"]},
             {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [CLUSTER_INFO],
              "verbs": ["get"]},
         ]},
        {"apiVersion": RBAC_API, "kind": "RoleBinding",
         "metadata": {"name": name, "namespace": HUB_NAMESPACE, "labels": labels},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "User", "name": token_user(token_id),
                       "apiGroup": "rbac.authorization.k8s.io"}]},
    ]


def public_cluster_info_rbac() -> list[Obj]:
    """kubeadm's: anonymous clients may read `kube-public/cluster-info` (and nothing else)."""
    return [
        {"apiVersion": RBAC_API, "kind": "Role",
         "metadata": {"name": PUBLIC_CLUSTER_INFO_ROLE, "namespace": PUBLIC_NAMESPACE},
         "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                    "resourceNames": [PUBLIC_CLUSTER_INFO], "verbs": ["get"]}]},
        {"apiVersion": RBAC_API, "kind": "RoleBinding",
         "metadata": {"name": PUBLIC_CLUSTER_INFO_ROLE, "namespace": PUBLIC_NAMESPACE},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                     "name": PUBLIC_CLUSTER_INFO_ROLE},
         "subjects": [{"kind": "User", "name": "system:anonymous",
                       "apiGroup": "rbac.authorization.k8s.io"}]},
    ]


def public_kubeconfig(server: str, ca_pem: bytes) -> str:
    return ("apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n"
            f"    certificate-authority-data: {base64.b64encode(ca_pem).decode()}\n"
            f"    server: {server}\n")


# tokens on the hub (as an admin) ---------------------------------------------------------------


async def publish_cluster_info(host: KubeClient, extra: Mapping[str, str] | None = None, *,
                               field_manager: str = FIELD_MANAGER) -> None:
    """The hub CA (and tunnel details) where `register` finds them: kubeadm's anonymous
    `kube-public/cluster-info` (the CA, to check the pin before any credential is sent) and
    `tether-system/tether-cluster-info` (read with the token once the pin held). Each writer
    (token create, the hub's tunnel) applies its own keys under its own field manager."""
    ca = host.credentials.ca_pem or b""
    data = {"ca.crt": ca.decode(), "server": host.credentials.server, **dict(extra or {})}
    await host.apply({"apiVersion": "v1", "kind": "Namespace",
                      "metadata": {"name": HUB_NAMESPACE}}, field_manager=FIELD_MANAGER)
    await host.apply({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": CLUSTER_INFO, "namespace": HUB_NAMESPACE},
                      "data": data}, field_manager=field_manager)
    await host.apply({"apiVersion": "v1", "kind": "Namespace",
                      "metadata": {"name": PUBLIC_NAMESPACE}}, field_manager=FIELD_MANAGER)
    await host.apply({"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": PUBLIC_CLUSTER_INFO, "namespace": PUBLIC_NAMESPACE},
                      "data": {"kubeconfig": public_kubeconfig(host.credentials.server, ca)}},
                     field_manager=field_manager)
    for obj in public_cluster_info_rbac():
        await host.apply(obj, field_manager=FIELD_MANAGER)


async def create_token(host: KubeClient, cluster: str, ttl_s: float) -> BootstrapToken:
    """A bootstrap token that may register `cluster` for `ttl_s` seconds (exactly: the hub's
    authenticator checks the expiry)."""
    try:
        registry.validate_name(cluster)
    except registry.RegistryError as exc:
        raise BootstrapError(str(exc)) from None
    if ttl_s <= 0:
        raise BootstrapError("--ttl must be positive")
    if not host.credentials.ca_pem:
        raise BootstrapError("the hub kubeconfig has no certificate-authority data to pin")
    await delete_expired(host)
    await publish_cluster_info(host)
    token_id = "".join(secrets.choice(_ALPHABET) for _ in range(6))
    token_secret = "".join(secrets.choice(_ALPHABET) for _ in range(16))
    expires = float(math.ceil(time.time() + ttl_s))  # RFC 3339 in the Secret has whole seconds
    # The request and the Role first, the Secret (what makes the token valid) last: the registry
    # controller reads a request without its token as one whose token is gone.
    try:
        await host.create(registration_request(token_id, cluster), field_manager=FIELD_MANAGER)
    except NotFound:
        raise BootstrapError("the hub has no ClusterRegistrationRequest type: run "
                             "`tether hub install` on it (again, after an upgrade)") from None
    for obj in bootstrap_rbac(token_id):
        await host.apply(obj, field_manager=FIELD_MANAGER)
    await host.create(bootstrap_secret(token_id, token_secret, cluster, expires),
                      field_manager=FIELD_MANAGER)
    token = BootstrapToken(token_id, f"{token_id}.{token_secret}", expires, cluster)
    if not await _accepted(host, token):
        await delete_token(host, token_id)
        raise BootstrapError(
            "the hub's API server does not accept bootstrap tokens (kube-apiserver "
            "--enable-bootstrap-token-auth, on by default with kubeadm): enable it, or register "
            "the member in push mode with `tether join`")
    return token


async def _accepted(host: KubeClient, token: BootstrapToken) -> bool:
    """Whether the hub authenticates `token` (a SelfSubjectReview made with it). A token that
    expired meanwhile (a TTL of seconds) says nothing either way: counted as accepted."""
    credentials = ClusterCredentials.from_token(
        server=host.credentials.server, token=token.token, ca_bundle=host.credentials.ca_pem)
    async with KubeClient(credentials, connect=host.connect, timeout_s=REQUEST_TIMEOUT_S) as client:
        try:
            answer = await client.request(
                "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", idempotent=True,
                body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        except KubeError as exc:
            if exc.code == 401:
                return time.time() >= token.expires_s
            return True  # another refusal (no SelfSubjectReview API): not a verdict on the token
    user = ((answer.get("status") or {}).get("userInfo") or {}).get("username")
    return user == token_user(token.token_id)


async def _delete_quietly(host: KubeClient, api_version: str, kind: str, name: str,
                          namespace: str | None = None) -> bool:
    try:
        await host.delete(api_version, kind, name, namespace)
        return True
    except NotFound:
        return False


async def delete_token(host: KubeClient, token_id: str) -> bool:
    """Revoke a token now: its Secret, its registration request and its Role."""
    found = await _delete_quietly(host, "v1", "Secret", token_secret_name(token_id), TOKEN_NAMESPACE)
    for api_version, kind, name, namespace in token_leftovers(token_id):
        try:
            found = await _delete_quietly(host, api_version, kind, name, namespace) or found
        except NotFound:
            if kind != REGISTRATION_KIND:  # no registration CRD: nothing to delete
                raise
    return found


def token_leftovers(token_id: str) -> list[tuple[str, str, str, str | None]]:
    """What a token brings besides its Secret, removed with it."""
    return [(CLUSTER_API_VERSION, REGISTRATION_KIND, token_id, HUB_NAMESPACE),
            (RBAC_API, "RoleBinding", token_role(token_id), HUB_NAMESPACE),
            (RBAC_API, "Role", token_role(token_id), HUB_NAMESPACE)]


async def delete_expired(host: KubeClient) -> list[str]:
    """Remove what expired tokens left (their Secret, where no token cleaner runs; their
    request and Role), and the broad `tether:bootstrap` ClusterRole and ServiceAccount tokens
    older tethers made."""
    gone: list[str] = []
    try:
        tokens = await host.list_objects("v1", "Secret", TOKEN_NAMESPACE,
                                         label_selector=BOOTSTRAP_LABEL)
    except NotFound:
        tokens = []
    now = time.time()
    for secret in tokens:
        meta = secret.get("metadata") or {}
        token_id = str((meta.get("labels") or {}).get(BOOTSTRAP_LABEL, ""))
        if token_id and token_expired(secret, now):
            await delete_token(host, token_id)
            gone.append(token_id)
    await _delete_legacy(host)
    return gone


def token_expired(secret: Mapping[str, Any], now: float) -> bool:
    raw = (secret.get("data") or {}).get("expiration")
    if not raw:
        return False
    try:
        expires = seconds_of(base64.b64decode(raw).decode())
    except (ValueError, UnicodeDecodeError):
        return True
    return expires is None or expires <= now


async def _delete_legacy(host: KubeClient) -> None:
    for binding in await _list_or_empty(host, RBAC_API, "ClusterRoleBinding", None, BOOTSTRAP_LABEL):
        await _delete_quietly(host, RBAC_API, "ClusterRoleBinding", binding["metadata"]["name"])
    await _delete_quietly(host, RBAC_API, "ClusterRole", BOOTSTRAP_ROLE)
    for account in await _list_or_empty(host, "v1", "ServiceAccount", HUB_NAMESPACE, BOOTSTRAP_LABEL):
        await _delete_quietly(host, "v1", "ServiceAccount", account["metadata"]["name"], HUB_NAMESPACE)


async def _list_or_empty(host: KubeClient, api_version: str, kind: str, namespace: str | None,
                         selector: str) -> list[Obj]:
    try:
        return await host.list_objects(api_version, kind, namespace, label_selector=selector)
    except NotFound:
        return []


# the registrant's side -------------------------------------------------------------------------


async def _peer_certificate(server: str, timeout_s: float) -> x509.Certificate:
    """The hub's serving certificate, from a TLS handshake that sends nothing."""
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


def ca_from_cluster_info(info: Mapping[str, Any]) -> bytes:
    """The CA of kubeadm's cluster-info ConfigMap (a kubeconfig in `data.kubeconfig`)."""
    kubeconfig = str((info.get("data") or {}).get("kubeconfig", ""))
    found = re.search(r"certificate-authority-data:\s*(\S+)", kubeconfig)
    if not found:
        return b""
    try:
        return base64.b64decode(found.group(1))
    except ValueError:
        return b""


async def anonymous_ca(server: str, timeout_s: float) -> bytes:
    """The CA the hub publishes in `kube-public/cluster-info`, read without credentials over
    an unverified connection (what it says is checked against the pin before it is used)."""
    anonymous = KubeClient(ClusterCredentials.from_token(server=server, token="", ca_bundle=None,
                                                         insecure=True))
    try:
        info = await anonymous.request(
            "GET", f"/api/v1/namespaces/{PUBLIC_NAMESPACE}/configmaps/{PUBLIC_CLUSTER_INFO}",
            timeout_s=timeout_s, idempotent=True)
    except KubeError as exc:
        raise BootstrapError(
            f"refusing the hub at {server}: it does not let anonymous clients read its CA "
            f"({PUBLIC_NAMESPACE}/{PUBLIC_CLUSTER_INFO}: {exc.reason or exc.code}), and the token "
            "is only sent once the CA is checked against --ca-cert-hash. On the hub, as an "
            "admin: `tether token create` publishes it (anonymous authentication must be on)"
        ) from None
    finally:
        await anonymous.close()
    ca_pem = ca_from_cluster_info(info)
    if not ca_pem:
        raise BootstrapError(f"refusing the hub at {server}: its {PUBLIC_NAMESPACE}/"
                             f"{PUBLIC_CLUSTER_INFO} holds no CA certificate "
                             "(certificate-authority-data)")
    return ca_pem


async def discover_hub(server: str, token: str, ca_hash: str, *,
                       timeout_s: float = REQUEST_TIMEOUT_S) -> tuple[bytes, dict[str, str]]:
    """The hub CA (verified against `ca_hash` before the token goes anywhere) and the hub's
    cluster info (read with the token over a connection verified with that CA)."""
    expected = normalize_hash(ca_hash)
    split_token(token)
    leaf = await _peer_certificate(server, timeout_s)
    ca_pem = await anonymous_ca(server, timeout_s)
    _check_pin(ca_pem, leaf, expected, server)
    verified = KubeClient(ClusterCredentials.from_token(server=server, token=token,
                                                        ca_bundle=ca_pem))
    try:
        info = await verified.request(
            "GET", f"/api/v1/namespaces/{HUB_NAMESPACE}/configmaps/{CLUSTER_INFO}",
            timeout_s=timeout_s, idempotent=True)
    except KubeError as exc:
        raise _token_error(server, exc) from None
    finally:
        await verified.close()
    data = {str(k): str(v) for k, v in (info.get("data") or {}).items()}
    return ca_pem, data


def _token_error(server: str, exc: KubeError) -> BootstrapError:
    if exc.code == 401:
        return BootstrapError(
            f"{server} refused the bootstrap token (401 Unauthorized): it is wrong, expired or "
            "deleted, or this is not the hub that issued it; create a new one with "
            "`tether token create`")
    if exc.code == 403:
        return BootstrapError(
            f"{server} accepted the bootstrap token but does not let it register ({exc.message}); "
            "create a new one with `tether token create --cluster-name NAME`")
    return BootstrapError(f"the hub at {server} answered: {exc.message}")


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


def condition(request: Mapping[str, Any], kind: str) -> Obj | None:
    for found in (request.get("status") or {}).get("conditions") or []:
        if found.get("type") == kind and found.get("status") == "True":
            return dict(found)
    return None


def decided(request: Mapping[str, Any], generation: int) -> Obj | None:
    """The hub's decision on the submission of `generation`, once made."""
    status = request.get("status") or {}
    if int(status.get("observedGeneration") or 0) < generation:
        return None
    return condition(request, APPROVED) or condition(request, DENIED)


async def register(hub: KubeClient, member: KubeClient, name: str, token_id: str,
                   cluster_info: Mapping[str, str], *, proxy_url: str = "",
                   tunnel_agent_address: str = "", token_wait_s: float = registry.TOKEN_WAIT_S,
                   approval_wait_s: float = APPROVAL_WAIT_S) -> Registration:
    """Submit this member's registration (request `token_id`) and collect the agent's
    credentials once the hub approves; see the module docstring. `hub` authenticates with the
    bootstrap token over a connection verified with the pinned CA."""
    try:
        registry.validate_name(name)
    except registry.RegistryError as exc:
        raise BootstrapError(str(exc)) from None
    path = f"{REQUESTS_PATH}/{token_id}"
    try:
        request = await hub.request("GET", path, idempotent=True)
    except KubeError as exc:
        if exc.code in (403, 404):
            raise BootstrapError(
                f"the hub has no registration for token {token_id}: it was used already, has "
                "expired or was deleted; create a new one with `tether token create "
                f"--cluster-name {name}`") from None
        raise _token_error(hub.server, exc) from None
    allowed = str((request.get("spec") or {}).get("clusterName") or "")
    if allowed != name:
        raise BootstrapError(f"this token may register the cluster {allowed!r}, not {name!r} "
                             "(--cluster-name)")
    endpoint = member.credentials.server
    try:
        kube_system = await member.get("v1", "Namespace", "kube-system")
    except KubeError as exc:
        raise BootstrapError(f"cannot reach the member at {endpoint}: {exc}") from None
    cluster_id = str(kube_system["metadata"].get("uid", ""))
    steps: list[str] = []
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
    spec: Obj = {"apiEndpoint": endpoint, "clusterID": cluster_id,
                 "credentials": {"token": base64.b64decode(data["token"]).decode(),
                                 "caBundle": base64.b64encode(member_ca).decode()}}
    proxy = proxy_url or cluster_info.get(TUNNEL_PROXY_URL_KEY, "")
    if proxy:
        spec["proxyURL"] = proxy
    try:
        submitted = await hub.request("PATCH", path, body={"spec": spec},
                                      content_type="application/merge-patch+json",
                                      params={"fieldManager": FIELD_MANAGER})
    except KubeError as exc:
        raise _token_error(hub.server, exc) from None
    steps.append(f"hub: ClusterRegistrationRequest {token_id} submitted")
    generation = int(submitted["metadata"].get("generation") or 1)
    decision, request = await _wait_decision(hub, path, generation, approval_wait_s)
    if decision["type"] == DENIED:
        raise BootstrapError(f"the hub denied the registration of {name}: "
                             f"{decision.get('message') or decision.get('reason')}")
    agent_token = str((request.get("status") or {}).get("agentToken") or "")
    if not agent_token:
        raise BootstrapError("the hub approved the registration but gave no agent token")
    steps.append(f"hub: approved (Cluster {name}, agent {HUB_NAMESPACE}/{agent_account(name)})")
    try:
        await hub.request("DELETE", path)  # collected: the token is used up
    except NotFound:
        pass
    except KubeError as exc:
        raise _token_error(hub.server, exc) from None
    return Registration(
        name=name, api_endpoint=endpoint, agent_token=agent_token,
        hub_ca_pem=hub.credentials.ca_pem or b"",
        tunnel_agent_address=tunnel_agent_address or cluster_info.get(TUNNEL_AGENT_ADDRESS_KEY, ""),
        tunnel_ca_pem=cluster_info.get(TUNNEL_CA_KEY, "").encode(), steps=tuple(steps))


async def _wait_decision(hub: KubeClient, path: str, generation: int,
                         wait_s: float) -> tuple[Obj, Obj]:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            request = await hub.request("GET", path, idempotent=True)
        except KubeError as exc:
            raise _token_error(hub.server, exc) from None
        decision = decided(request, generation)
        if decision is not None:
            return decision, request
        if time.monotonic() >= deadline:
            raise BootstrapError(
                f"the hub did not answer the registration within {wait_s:.0f}s: is `tether hub "
                "run` running against it? (its registry controller approves registrations)")
        await asyncio.sleep(0.2)


# what the hub makes for an approved registration (pure) ----------------------------------------


def agent_rbac(name: str) -> list[Obj]:
    """The agent's rights on the hub: its own Cluster (and status), its own Lease, the Works of
    its own execution namespace."""
    account = agent_account(name)
    labels = {AGENT_FOR_LABEL: name}
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": HUB_NAMESPACE}]
    ref = {"apiGroup": "rbac.authorization.k8s.io"}
    rules: list[Obj] = [
        # list/watch are authorised by name when they select `metadata.name=<name>`
        {"apiGroups": [CLUSTER_GROUP], "resources": ["clusters"], "resourceNames": [name],
         "verbs": ["get", "list", "watch", "patch", "update"]},
        {"apiGroups": [CLUSTER_GROUP], "resources": ["clusters/status"],
         "resourceNames": [name], "verbs": ["get", "patch", "update"]},
    ]
    return [
        {"apiVersion": RBAC_API, "kind": "ClusterRole",
         "metadata": {"name": agent_role(name), "labels": labels}, "rules": rules},
        {"apiVersion": RBAC_API, "kind": "ClusterRoleBinding",
         "metadata": {"name": agent_role(name), "labels": labels},
         "roleRef": {**ref, "kind": "ClusterRole", "name": agent_role(name)}, "subjects": subject},
        {"apiVersion": RBAC_API, "kind": "Role",
         "metadata": {"name": agent_role(name), "namespace": execution_namespace(name),
                      "labels": labels},
         "rules": [{"apiGroups": ["work.tether.io"], "resources": ["works", "works/status"],
                    "verbs": ["get", "list", "watch", "update", "patch"]}]},
        {"apiVersion": RBAC_API, "kind": "RoleBinding",
         "metadata": {"name": agent_role(name), "namespace": execution_namespace(name),
                      "labels": labels},
         "roleRef": {**ref, "kind": "Role", "name": agent_role(name)}, "subjects": subject},
        {"apiVersion": RBAC_API, "kind": "Role",
         "metadata": {"name": agent_role(name), "namespace": HUB_NAMESPACE, "labels": labels},
         "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                    "resourceNames": [name], "verbs": ["get", "update", "patch"]}]},
        {"apiVersion": RBAC_API, "kind": "RoleBinding",
         "metadata": {"name": agent_role(name), "namespace": HUB_NAMESPACE, "labels": labels},
         "roleRef": {**ref, "kind": "Role", "name": agent_role(name)}, "subjects": subject},
    ]


def agent_token_secret_object(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
            "metadata": {"name": agent_token_secret(name), "namespace": HUB_NAMESPACE,
                         "labels": {AGENT_FOR_LABEL: name},
                         "annotations": {"kubernetes.io/service-account.name": agent_account(name)}}}


async def agent_tokens(host: KubeClient) -> dict[str, frozenset[str]]:
    """bearer → names an agent may serve, from the agents' token Secrets and their Clusters
    (the cluster name and its API host), for the hub's tunnel server."""
    secrets_ = await host.list_objects("v1", "Secret", HUB_NAMESPACE, label_selector=AGENT_FOR_LABEL)
    return agent_tokens_of(secrets_, await host.list_objects(CLUSTER_API_VERSION, "Cluster"))


def agent_tokens_of(secrets_: Iterable[Obj], clusters: Iterable[Obj]) -> dict[str, frozenset[str]]:
    """`agent_tokens` from Secrets and Clusters already at hand (informer caches); Secrets
    without the agent label are skipped."""
    out: dict[str, frozenset[str]] = {}
    by_name = {c["metadata"]["name"]: c for c in clusters}
    for secret in secrets_:
        name = str(((secret.get("metadata") or {}).get("labels") or {}).get(AGENT_FOR_LABEL, ""))
        token = (secret.get("data") or {}).get("token")
        cluster = by_name.get(name)
        if not name or not token or cluster is None:
            continue
        endpoint = str((cluster.get("spec") or {}).get("apiEndpoint", ""))
        host_name = urlsplit(endpoint).hostname or ""
        out[base64.b64decode(token).decode()] = frozenset({name, *([host_name] if host_name else [])})
    return out
