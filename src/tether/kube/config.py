"""Read a kubeconfig context into what a client needs: server, trust, credentials."""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml

from tether.objects.podfiles import SERVICE_ACCOUNT_DIR, mounted_path


class KubeconfigError(Exception):
    pass


@dataclass(frozen=True)
class ClusterCredentials:
    """Where a cluster is and how to prove who we are; secrets are kept out of `repr`.

    `proxy_url` (http://, or https:// for TLS to the proxy) routes every connection through an
    HTTP CONNECT proxy, sending `proxy_headers` with each CONNECT: Karmada's
    `spec.proxyURL`/`spec.proxyHeader`, and what apiserver-network-proxy in http-connect mode
    expects.
    """

    context: str
    server: str
    namespace: str
    ca_pem: bytes | None
    insecure: bool
    client_cert_pem: bytes | None
    client_key_pem: bytes | None = field(repr=False)
    token: str | None = field(repr=False)
    proxy_url: str | None = field(default=None, repr=False)
    proxy_headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def from_token(
        cls,
        *,
        server: str,
        token: str,
        ca_bundle: bytes | str | None,
        name: str = "",
        namespace: str = "default",
        insecure: bool = False,
        proxy_url: str | None = None,
        proxy_headers: Mapping[str, str] | None = None,
    ) -> ClusterCredentials:
        """What `tether join` stores for a member (a Secret with `token` and `caBundle`).

        `ca_bundle` is PEM, or base64 of PEM (as Karmada's `caBundle` is); `None` trusts the
        system store. `proxy_headers` values may be comma-separated lists, as in Karmada.
        """
        return cls(
            context=name,
            server=server.rstrip("/"),
            namespace=namespace,
            ca_pem=_pem(ca_bundle),
            insecure=insecure,
            client_cert_pem=None,
            client_key_pem=None,
            token=token.strip(),
            proxy_url=proxy_url or None,
            proxy_headers=_header_pairs(proxy_headers or {}),
        )

    @classmethod
    def from_secret_data(cls, data: Mapping[str, str], *, server: str, name: str = "",
                         **kwargs: Any) -> ClusterCredentials:
        """From a Secret's base64 `data` with keys `token` and optionally `caBundle`."""
        token = base64.b64decode(data["token"]).decode().strip()
        ca = base64.b64decode(data["caBundle"]) if data.get("caBundle") else None
        return cls.from_token(server=server, token=token, ca_bundle=ca, name=name, **kwargs)

    @property
    def proxy_display(self) -> str:
        """The proxy URL without any userinfo, fit for messages and logs."""
        return redact_url(self.proxy_url) if self.proxy_url else ""

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https://"):
            return False
        # With a CA of our own the system store is never read (loading it costs ~15 ms a client)
        trusted = self.ca_pem.decode() if self.ca_pem and not self.insecure else None
        context = ssl.create_default_context(cadata=trusted)
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.client_cert_pem and self.client_key_pem:
            # ssl loads key pairs only from files: use a private, short-lived directory.
            with tempfile.TemporaryDirectory(prefix="tether-cred-") as tmp:
                cert, key = Path(tmp) / "c.pem", Path(tmp) / "k.pem"
                cert.write_bytes(self.client_cert_pem)
                key.touch(0o600)
                key.write_bytes(self.client_key_pem)
                context.load_cert_chain(cert, key)
        return context


def _pem(bundle: bytes | str | None) -> bytes | None:
    if bundle is None or bundle in (b"", ""):
        return None
    raw = bundle.encode() if isinstance(bundle, str) else bundle
    if b"-----BEGIN" in raw:
        return raw
    try:
        decoded = base64.b64decode(raw, validate=True)
    except ValueError:
        raise KubeconfigError("caBundle is neither PEM nor base64 of PEM") from None
    if b"-----BEGIN" not in decoded:
        raise KubeconfigError("caBundle is neither PEM nor base64 of PEM")
    return decoded


def _header_pairs(headers: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    pairs: list[tuple[str, str]] = []
    for key, value in headers.items():
        pairs.extend((key, part.strip()) for part in value.split(",") if part.strip())
    return tuple(pairs)


def redact_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _named(items: list[dict[str, Any]] | None, name: str, what: str, source: Path) -> dict[str, Any]:
    for item in items or []:
        if item.get("name") == name:
            value = item.get(what, {})
            return value if isinstance(value, dict) else {}
    raise KubeconfigError(f"{what} {name!r} not found in {source}")


def _data(section: dict[str, Any], key: str, base: Path) -> bytes | None:
    if section.get(f"{key}-data"):
        return base64.b64decode(section[f"{key}-data"])
    if section.get(key):
        path = Path(os.path.expanduser(section[key]))
        return (path if path.is_absolute() else base / path).read_bytes()
    return None


def default_kubeconfig_path() -> Path:
    env = os.environ.get("KUBECONFIG", "")
    first = env.split(os.pathsep)[0] if env else ""
    return Path(first) if first else Path.home() / ".kube" / "config"


def load_kubeconfig(path: Path | None = None, context: str | None = None) -> ClusterCredentials:
    source = path or default_kubeconfig_path()
    try:
        doc = yaml.safe_load(source.read_text()) or {}
    except OSError as exc:
        raise KubeconfigError(f"cannot read kubeconfig {source}: {exc.strerror}") from None
    name = context or doc.get("current-context") or ""
    if not name:
        raise KubeconfigError(f"{source} has no current-context; pass a context name")
    ctx = _named(doc.get("contexts"), name, "context", source)
    cluster = _named(doc.get("clusters"), ctx.get("cluster", ""), "cluster", source)
    user = _named(doc.get("users"), ctx.get("user", ""), "user", source) if ctx.get("user") else {}
    base = source.parent
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = Path(user["tokenFile"]).read_text().strip()
    return ClusterCredentials(
        context=name,
        server=str(cluster.get("server", "")).rstrip("/"),
        namespace=str(ctx.get("namespace") or "default"),
        ca_pem=_data(cluster, "certificate-authority", base),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        client_cert_pem=_data(user, "client-certificate", base),
        client_key_pem=_data(user, "client-key", base),
        token=token,
        proxy_url=str(cluster["proxy-url"]) if cluster.get("proxy-url") else None,
    )


# in-cluster --------------------------------------------------------------------------------------

def in_cluster(environ: Mapping[str, str] | None = None) -> ClusterCredentials:
    """The credentials a pod has: the `kubernetes` Service from `KUBERNETES_SERVICE_HOST/PORT`,
    its ServiceAccount's token, CA and namespace from the service-account directory, as
    client-go's `rest.InClusterConfig` reads them."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise KubeconfigError("not running in a cluster: KUBERNETES_SERVICE_HOST and "
                              "KUBERNETES_SERVICE_PORT are not set; use a kubeconfig instead")
    directory = mounted_path(SERVICE_ACCOUNT_DIR, env)
    try:
        token = (directory / "token").read_text().strip()
        ca = (directory / "ca.crt").read_bytes()
    except OSError as exc:
        raise KubeconfigError(f"no service-account credentials in {directory}: {exc.strerror}; is "
                              "automountServiceAccountToken false for this pod?") from None
    try:
        namespace = (directory / "namespace").read_text().strip() or "default"
    except OSError:
        namespace = "default"
    server_host = f"[{host}]" if ":" in host else host
    return ClusterCredentials(
        context="in-cluster", server=f"https://{server_host}:{port}", namespace=namespace,
        ca_pem=ca or None, insecure=False, client_cert_pem=None, client_key_pem=None, token=token,
    )
