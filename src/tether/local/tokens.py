"""ServiceAccount tokens for local clusters: signing, authentication, the token controller.

What the real control plane does, in one module:

- a per-cluster ES256 key (`pki/sa.key`) signs JWTs with issuer `ISSUER`;
- the token controller fills `kubernetes.io/service-account-token` Secrets (`data.token`,
  `data.ca.crt`, `data.namespace`) for ServiceAccounts that exist, deletes them when their
  ServiceAccount is gone, and keeps a `default` ServiceAccount and the `kube-root-ca.crt`
  ConfigMap in every namespace;
- the authenticator accepts those JWTs while the signature holds, they have not expired and the
  ServiceAccount (and, for Secret-based tokens, the Secret) still exists with the same uid; the
  user is `system:serviceaccount:<namespace>:<name>`;
- `POST .../serviceaccounts/<name>/token` (TokenRequest) issues bound, expiring tokens, which is
  what `kubectl create token` calls;
- the ServiceAccount admission plugin gives each new pod (unless `automountServiceAccountToken`
  is false on the pod, or on its ServiceAccount when the pod does not say) the projected
  `kube-api-access-<suffix>` volume (token, `ca.crt`, `namespace`), mounted read-only at
  `/var/run/secrets/kubernetes.io/serviceaccount` in every container; the kubelet fills it with
  a token bound to the pod (`pod_token`), which stops authenticating once the pod is gone.
  Asked for the admission's 3607 s, the token is valid for a year but rotated hourly, as
  kube-apiserver's `--service-account-extend-token-expiration` does for clients that never
  re-read the file;
- bootstrap tokens (`tether.local.bootstrap_tokens`) authenticate as kube-apiserver's
  bootstrap-token authenticator says, and the token controller deletes them once expired.

What a ServiceAccount may do is RBAC's to decide (local/rbac/).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import copy
import datetime as dt
import hashlib
import json
import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

from tether.engine import Engine, RequeueAfter
from tether.local import bootstrap_tokens, encoding
from tether.local.errors import ApiError, bad_request, method_not_allowed
from tether.local.operations import Operations, WriteOptions, decode_body
from tether.local.resources import ResourceType
from tether.local.store import Store, follow
from tether.net.httpserver import Reply, Request, Response
from tether.objects import Obj, times
from tether.objects.podfiles import SERVICE_ACCOUNT_DIR

if TYPE_CHECKING:
    from tether.local.cluster import Component, LocalCluster

log = logging.getLogger(__name__)

ISSUER = "https://kubernetes.default.svc.cluster.local"
VERIFIED_TOKENS = 1024  # signatures remembered per API server (see `authenticator`)
KEY_FILE = "sa.key"
SA_TOKEN_TYPE = "kubernetes.io/service-account-token"
SA_NAME_ANNOTATION = "kubernetes.io/service-account.name"
SA_UID_ANNOTATION = "kubernetes.io/service-account.uid"
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
DEFAULT_SA = "default"
MANAGER = "tokens-controller"
DEFAULT_EXPIRATION_S = 3600
MIN_EXPIRATION_S = 600
MAX_EXPIRATION_S = 2**32
NEW_SECRET_GRACE_S = 5.0  # a token Secret may be created just before its ServiceAccount
ACCESS_VOLUME_PREFIX = "kube-api-access-"
ADMISSION_EXPIRATION_S = 3607  # what the admission plugin asks for: "extend me" to kube-apiserver
EXTENDED_EXPIRATION_S = 365 * 24 * 3600
REFRESH_AT = 0.8  # the kubelet renews a token after 80 % of its requested life
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

SERVICEACCOUNTS = "/serviceaccounts"
SECRETS = "/secrets"
CONFIGMAPS = "/configmaps"
NAMESPACES = "/namespaces"
OBSERVED = frozenset({NAMESPACES, SECRETS, SERVICEACCOUNTS, CONFIGMAPS})  # what _observe acts on


# JWT (ES256) --------------------------------------------------------------------------------


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class Signer:
    """The cluster's ServiceAccount signing key."""

    key: ec.EllipticCurvePrivateKey

    @classmethod
    def load_or_create(cls, pki_dir: Path) -> Signer:
        path = pki_dir / KEY_FILE
        pki_dir.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            key = ec.generate_private_key(ec.SECP256R1())
            tmp = path.with_suffix(".tmp")
            tmp.touch(0o600)
            tmp.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                              serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption()))
            tmp.replace(path)
        loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
        if not isinstance(loaded, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{path} is not an EC private key")
        return cls(loaded)

    @property
    def key_id(self) -> str:
        der = self.key.public_key().public_bytes(serialization.Encoding.DER,
                                                 serialization.PublicFormat.SubjectPublicKeyInfo)
        return _b64(hashlib.sha256(der).digest())

    def sign(self, claims: Mapping[str, Any]) -> str:
        header = {"alg": "ES256", "kid": self.key_id}
        signing_input = (_b64(json.dumps(header, separators=(",", ":")).encode()) + "."
                         + _b64(json.dumps(claims, separators=(",", ":")).encode()))
        der = self.key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        return signing_input + "." + _b64(r.to_bytes(32, "big") + s.to_bytes(32, "big"))

    def verify(self, token: str) -> Obj | None:
        """The claims of a token this key signed, or None (bad shape or signature)."""
        parts = token.split(".")
        if len(parts) != 3:
            return None
        try:
            header = json.loads(_unb64(parts[0]))
            raw_sig = _unb64(parts[2])
            if not isinstance(header, dict) or header.get("alg") != "ES256" or len(raw_sig) != 64:
                return None
            signature = encode_dss_signature(int.from_bytes(raw_sig[:32], "big"),
                                             int.from_bytes(raw_sig[32:], "big"))
            self.key.public_key().verify(signature, f"{parts[0]}.{parts[1]}".encode(),
                                         ec.ECDSA(hashes.SHA256()))
            claims = json.loads(_unb64(parts[1]))
        except (ValueError, binascii.Error, InvalidSignature, UnicodeDecodeError):
            return None
        return claims if isinstance(claims, dict) else None


def secret_claims(namespace: str, sa: Obj, secret: Obj) -> Obj:
    """Claims of a long-lived token stored in a Secret (no expiry, bound to the Secret)."""
    sa_meta, secret_meta = sa["metadata"], secret["metadata"]
    name = sa_meta["name"]
    return {
        "iss": ISSUER,
        "sub": f"system:serviceaccount:{namespace}:{name}",
        "aud": [ISSUER],
        "iat": int(time.time()),
        "kubernetes.io": {
            "namespace": namespace,
            "secret": {"name": secret_meta["name"], "uid": secret_meta.get("uid", "")},
            "serviceaccount": {"name": name, "uid": sa_meta.get("uid", "")},
        },
    }


def bound_claims(namespace: str, sa: Obj, audiences: list[str], expiration_s: int, now: float) -> Obj:
    sa_meta = sa["metadata"]
    name = sa_meta["name"]
    return {
        "iss": ISSUER,
        "sub": f"system:serviceaccount:{namespace}:{name}",
        "aud": audiences,
        "iat": int(now),
        "nbf": int(now),
        "exp": int(now) + expiration_s,
        "jti": str(uuid.uuid4()),
        "kubernetes.io": {"namespace": namespace,
                          "serviceaccount": {"name": name, "uid": sa_meta.get("uid", "")}},
    }


def pod_claims(pod: Obj, sa: Obj, node: Obj | None, audiences: list[str], expiration_s: int,
               now: float) -> Obj:
    """Claims of a token bound to a pod (and its node), as the kubelet asks for them."""
    meta = pod["metadata"]
    namespace = str(meta.get("namespace", ""))
    claims = bound_claims(namespace, sa, audiences, expiration_s, now)
    info = claims["kubernetes.io"]
    info["pod"] = {"name": meta["name"], "uid": meta.get("uid", "")}
    if node is not None:
        info["node"] = {"name": node["metadata"]["name"], "uid": node["metadata"].get("uid", "")}
    if expiration_s == ADMISSION_EXPIRATION_S:
        claims["exp"] = int(now) + EXTENDED_EXPIRATION_S
        info["warnafter"] = int(now) + expiration_s
    return claims


def pod_token(signer: Signer, pod: Obj, sa: Obj, node: Obj | None, source: Mapping[str, Any],
              now: float) -> tuple[str, float]:
    """A projected `serviceAccountToken` source's token, and when the kubelet should renew it."""
    expiration_s = source.get("expirationSeconds")
    if not isinstance(expiration_s, int) or expiration_s < MIN_EXPIRATION_S:
        expiration_s = DEFAULT_EXPIRATION_S
    audiences = [str(source["audience"])] if source.get("audience") else [ISSUER]
    token = signer.sign(pod_claims(pod, sa, node, audiences, expiration_s, now))
    return token, now + REFRESH_AT * expiration_s


def check_claims(claims: Mapping[str, Any], store: Store, now: float) -> str | None:
    """The user a verified token stands for, if its claims still hold against the store."""
    if claims.get("iss") != ISSUER:
        return None
    aud = claims.get("aud")
    audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    if ISSUER not in audiences:
        return None
    exp, nbf = claims.get("exp"), claims.get("nbf")
    if isinstance(exp, int | float) and now >= exp:
        return None
    if isinstance(nbf, int | float) and now + 60 < nbf:
        return None
    info = claims.get("kubernetes.io")
    if not isinstance(info, dict):
        return None
    namespace = str(info.get("namespace", ""))
    sa_ref = info.get("serviceaccount") or {}
    if not isinstance(sa_ref, dict):
        return None
    sa = store.get(SERVICEACCOUNTS, namespace, str(sa_ref.get("name", "")))
    if sa is None or sa["metadata"].get("uid") != sa_ref.get("uid") or sa["metadata"].get("deletionTimestamp"):
        return None
    pod_ref = info.get("pod")
    if isinstance(pod_ref, dict):  # bound to a pod: only while that very pod exists
        pod = store.get("/pods", namespace, str(pod_ref.get("name", "")))
        if pod is None or pod["metadata"].get("uid") != pod_ref.get("uid"):
            return None
    secret_ref = info.get("secret")
    if isinstance(secret_ref, dict):
        secret = store.get(SECRETS, namespace, str(secret_ref.get("name", "")))
        if secret is None or secret["metadata"].get("uid") != secret_ref.get("uid"):
            return None
    return f"system:serviceaccount:{namespace}:{sa['metadata']['name']}"


def authenticator(store: Store, pki_dir: Path,
                  static: Callable[[str], str | None]) -> Callable[[str], str | None]:
    """`tokens=` for `ApiServer`: static tokens first, then bootstrap tokens, then
    ServiceAccount JWTs."""
    signer = Signer.load_or_create(pki_dir)
    # Tokens whose signature this key verified, and their claims: a client sends the same token
    # with every request, and an ECDSA verification costs more than the rest of most requests.
    # The claims are still checked against the store every time (expiry, revocation).
    verified: collections.OrderedDict[str, Obj] = collections.OrderedDict()

    def check(token: str) -> str | None:
        user = static(token)
        if user is None and bootstrap_tokens.TOKEN.match(token):
            found = bootstrap_tokens.identity(token, store, time.time())
            return None if found is None else found.username
        if user is not None or token.count(".") != 2:
            return user
        claims = verified.get(token)
        if claims is None:
            claims = signer.verify(token)
            if claims is None:
                return None
            verified[token] = claims
            if len(verified) > VERIFIED_TOKENS:
                verified.popitem(last=False)
        return check_claims(claims, store, time.time())

    return check


# plans (pure) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SecretPlan:
    action: str  # "none" | "fill" | "delete" | "wait"
    reason: str = ""


def plan_secret(secret: Obj, sa: Obj | None, now: float) -> SecretPlan:
    if secret.get("type") != SA_TOKEN_TYPE or secret["metadata"].get("deletionTimestamp"):
        return SecretPlan("none")
    annotations = secret["metadata"].get("annotations") or {}
    if not annotations.get(SA_NAME_ANNOTATION):
        return SecretPlan("none")
    if sa is None or sa["metadata"].get("deletionTimestamp"):
        created = objects_time(secret["metadata"].get("creationTimestamp"))
        if created is not None and now - created < NEW_SECRET_GRACE_S:
            return SecretPlan("wait", "service account not found yet")
        return SecretPlan("delete", "service account does not exist")
    uid = annotations.get(SA_UID_ANNOTATION)
    if uid and uid != sa["metadata"].get("uid"):
        return SecretPlan("delete", "service account was recreated")
    data = secret.get("data") or {}
    if not uid or not all(data.get(k) for k in ("token", "ca.crt", "namespace")):
        return SecretPlan("fill")
    return SecretPlan("none")


def objects_time(stamp: Any) -> float | None:
    if not isinstance(stamp, str):
        return None
    try:
        return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None


# the controller -----------------------------------------------------------------------------

Key = tuple[str, str, str]  # ("namespace" | "secret", namespace, name)


class TokenController:
    """Fills token Secrets; keeps `default` ServiceAccounts and `kube-root-ca.crt` per namespace."""

    def __init__(self, ops: Operations, signer: Signer, ca_pem: bytes) -> None:
        self.ops = ops
        self.signer = signer
        self.ca_pem = ca_pem
        self.engine: Engine[Key] = Engine("tokens-controller", self._reconcile)
        self._opts = WriteOptions(manager=MANAGER, user=f"system:serviceaccount:kube-system:{MANAGER}")

    def _rt(self, storage_key: str) -> ResourceType:
        rt = self.ops.registry.by_storage_key(storage_key)
        assert rt is not None, storage_key
        return rt

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.engine.run())
            group.create_task(follow(self.ops.store, None, None, resources=OBSERVED, resync=self._resync,
                                     on_event=lambda e: self._observe(e.resource, e.namespace, e.name)))

    def _resync(self) -> None:
        store = self.ops.store
        for ns in store.list_objects(NAMESPACES):
            self.engine.enqueue(("namespace", "", ns["metadata"]["name"]))
        for secret in store.list_objects(SECRETS):
            meta = secret["metadata"]
            self.engine.enqueue(("secret", meta.get("namespace", ""), meta["name"]))

    def _observe(self, resource: str, namespace: str, name: str) -> None:
        if resource == NAMESPACES:
            self.engine.enqueue(("namespace", "", name))
        elif resource == SECRETS:
            self.engine.enqueue(("secret", namespace, name))
        elif resource in (SERVICEACCOUNTS, CONFIGMAPS):
            if name in (DEFAULT_SA, ROOT_CA_CONFIGMAP):
                self.engine.enqueue(("namespace", "", namespace))
            if resource == SERVICEACCOUNTS:
                for secret in self.ops.store.list_objects(SECRETS, namespace):
                    annotations = secret["metadata"].get("annotations") or {}
                    if annotations.get(SA_NAME_ANNOTATION) == name:
                        self.engine.enqueue(("secret", namespace, secret["metadata"]["name"]))

    async def _reconcile(self, key: Key) -> None:
        what, namespace, name = key
        if what == "namespace":
            self._reconcile_namespace(name)
        else:
            self._reconcile_secret(namespace, name)

    def _ignore_gone(self, call: Callable[[], Any]) -> None:
        try:
            call()
        except ApiError as exc:
            # 404/409: raced with a delete or another writer; 403: the namespace is terminating.
            if exc.code not in (403, 404, 409):
                raise

    def _reconcile_namespace(self, name: str) -> None:
        store = self.ops.store
        ns = store.get(NAMESPACES, "", name)
        if ns is None or ns["metadata"].get("deletionTimestamp"):
            return
        if store.get(SERVICEACCOUNTS, name, DEFAULT_SA) is None:
            body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": DEFAULT_SA}}
            self._ignore_gone(lambda: self.ops.create(self._rt(SERVICEACCOUNTS), name, body, self._opts))
        ca = self.ca_pem.decode()
        current = store.get(CONFIGMAPS, name, ROOT_CA_CONFIGMAP)
        if current is None:
            body = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": ROOT_CA_CONFIGMAP,
                                 "annotations": {"kubernetes.io/description": _ROOT_CA_DESCRIPTION}},
                    "data": {"ca.crt": ca}}
            self._ignore_gone(lambda: self.ops.create(self._rt(CONFIGMAPS), name, body, self._opts))
        elif (current.get("data") or {}).get("ca.crt") != ca:
            updated = copy.deepcopy(current)
            updated["data"] = {**(current.get("data") or {}), "ca.crt": ca}
            self._ignore_gone(lambda: self.ops.update(self._rt(CONFIGMAPS), name, ROOT_CA_CONFIGMAP,
                                                      updated, self._opts))

    def _reconcile_secret(self, namespace: str, name: str) -> None:
        store = self.ops.store
        secret = store.get(SECRETS, namespace, name)
        if secret is None:
            return
        if secret.get("type") == bootstrap_tokens.SECRET_TYPE:  # kube-controller-manager's tokencleaner
            cleanup = bootstrap_tokens.plan_cleanup(secret, time.time())
            if cleanup.delete:
                log.info("deleting expired bootstrap token %s/%s", namespace, name)
                self._ignore_gone(lambda: self.ops.delete(self._rt(SECRETS), namespace, name, {},
                                                          self._opts))
            elif cleanup.recheck_s is not None:
                raise RequeueAfter(cleanup.recheck_s)
            return
        annotations = secret["metadata"].get("annotations") or {}
        sa = store.get(SERVICEACCOUNTS, namespace, str(annotations.get(SA_NAME_ANNOTATION, "")))
        plan = plan_secret(secret, sa, time.time())
        if plan.action == "wait":
            raise RequeueAfter(1.0)
        if plan.action == "delete":
            log.info("deleting token secret %s/%s: %s", namespace, name, plan.reason)
            self._ignore_gone(lambda: self.ops.delete(self._rt(SECRETS), namespace, name, {}, self._opts))
            return
        if plan.action != "fill":
            return
        assert sa is not None
        updated = copy.deepcopy(secret)
        meta = updated["metadata"]
        meta.setdefault("annotations", {})[SA_UID_ANNOTATION] = sa["metadata"].get("uid", "")
        token = self.signer.sign(secret_claims(namespace, sa, secret))
        updated["data"] = {
            **(secret.get("data") or {}),
            "token": base64.b64encode(token.encode()).decode(),
            "ca.crt": base64.b64encode(self.ca_pem).decode(),
            "namespace": base64.b64encode(namespace.encode()).decode(),
        }
        self._ignore_gone(lambda: self.ops.update(self._rt(SECRETS), namespace, name, updated, self._opts))


_ROOT_CA_DESCRIPTION = ("Contains a CA bundle that can be used to verify the kube-apiserver when using "
                        "internal endpoints such as the internal service IP or kubernetes.default.svc. "
                        "No other usage is guaranteed across distributions of Kubernetes clusters.")


# TokenRequest -------------------------------------------------------------------------------


class TokenRequestHandler:
    """`serviceaccounts/<name>/token`: POST a TokenRequest, get a bound, expiring token."""

    def __init__(self, ops: Operations, signer: Signer) -> None:
        self.ops = ops
        self.signer = signer

    async def __call__(self, request: Request, rt: ResourceType, namespace: str, name: str,
                       rest: str) -> Reply:
        if rt.kind != "ServiceAccount" or not name:
            raise method_not_allowed("the token subresource is served for serviceaccounts only")
        if request.method != "POST":
            raise method_not_allowed()
        sa = self.ops.get(rt, namespace, name)
        body = decode_body(request.header("content-type"), request.body) if request.body else {}
        if not isinstance(body, dict):
            raise bad_request("expected a TokenRequest")
        spec = dict(body.get("spec") or {})
        expiration = spec.get("expirationSeconds")
        expiration_s = DEFAULT_EXPIRATION_S if expiration is None else expiration
        if not isinstance(expiration_s, int) or not MIN_EXPIRATION_S <= expiration_s <= MAX_EXPIRATION_S:
            raise ApiError(422, "Invalid",
                           f'TokenRequest.authentication.k8s.io "{name}" is invalid: spec.expirationSeconds: '
                           f"Invalid value: {expiration_s}: may not specify a duration less than 10 minutes",
                           kind="TokenRequest", group="authentication.k8s.io")
        audiences = [str(a) for a in spec.get("audiences") or []] or [ISSUER]
        now = time.time()
        token = self.signer.sign(bound_claims(namespace, sa, audiences, expiration_s, now))
        spec.update({"audiences": audiences, "expirationSeconds": expiration_s})
        spec.setdefault("boundObjectRef", None)
        expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(now) + expiration_s))
        answer = {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": times.now_rfc3339()},
            "spec": spec,
            "status": {"token": token, "expirationTimestamp": expires},
        }
        return Response(201, encoding.body(answer))


# ServiceAccount admission ---------------------------------------------------------------------


def access_volume(name: str) -> Obj:
    """The projected volume the ServiceAccount admission plugin adds (kube-apiserver's order)."""
    return {"name": name, "projected": {
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": ADMISSION_EXPIRATION_S, "path": "token"}},
            {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ],
        "defaultMode": 0o644,
    }}


def should_automount(pod: Obj, sa: Obj | None) -> bool:
    """The pod's `automountServiceAccountToken` decides; unset, its ServiceAccount's; else yes."""
    own = (pod.get("spec") or {}).get("automountServiceAccountToken")
    if isinstance(own, bool):
        return own
    inherited = (sa or {}).get("automountServiceAccountToken")
    return inherited if isinstance(inherited, bool) else True


def mount_service_account_token(pod: Obj, sa: Obj | None, suffix: str) -> None:
    """What the admission plugin does to a new pod (in place)."""
    meta = pod.get("metadata") or {}
    if MIRROR_ANNOTATION in (meta.get("annotations") or {}) or not should_automount(pod, sa):
        return
    spec = pod.setdefault("spec", {})
    volumes = spec.get("volumes") or []
    existing = next((v["name"] for v in volumes if isinstance(v, dict)
                     and str(v.get("name", "")).startswith(ACCESS_VOLUME_PREFIX)), None)
    name = existing or ACCESS_VOLUME_PREFIX + suffix
    mounted = False
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            if not isinstance(container, dict):
                continue
            mounts = container.setdefault("volumeMounts", [])
            if any(isinstance(m, dict) and m.get("mountPath") == SERVICE_ACCOUNT_DIR for m in mounts):
                continue
            mounts.append({"name": name, "readOnly": True, "mountPath": SERVICE_ACCOUNT_DIR})
            mounted = True
    if mounted and existing is None:
        spec["volumes"] = [*volumes, access_volume(name)]


def service_account_admission(store: Store) -> Callable[[ResourceType, Obj, Obj | None], None]:
    def admit(rt: ResourceType, obj: Obj, current: Obj | None) -> None:
        if current is not None or rt.group != "" or rt.kind != "Pod":
            return
        meta = obj.get("metadata") or {}
        sa_name = str((obj.get("spec") or {}).get("serviceAccountName") or DEFAULT_SA)
        sa = store.get(SERVICEACCOUNTS, str(meta.get("namespace", "")), sa_name)
        suffix = "".join(random.choice(NAME_ALPHABET) for _ in range(5))
        mount_service_account_token(obj, sa, suffix)

    return admit


def build(cluster: LocalCluster) -> list[Component]:
    """The token controller; registers the TokenRequest subresource and the ServiceAccount
    admission plugin on the cluster's API server."""
    signer = Signer.load_or_create(cluster.config.data_dir / "pki")
    cluster.api.subresource_handlers["token"] = TokenRequestHandler(cluster.ops, signer)
    cluster.ops.admission.append(service_account_admission(cluster.store))
    return [TokenController(cluster.ops, signer, cluster.pki.ca_cert.read_bytes())]
