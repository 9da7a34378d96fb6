"""Read a kubeconfig context into what a client needs: server, trust, credentials."""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from collections.abc import Mapping, Sequence
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


def _data(section: Mapping[str, Any], key: str, base: Path) -> bytes | None:
    if section.get(f"{key}-data"):
        return base64.b64decode(section[f"{key}-data"])
    if section.get(key):
        return _resolve(section[key], base).read_bytes()
    return None


def _resolve(value: str, base: Path) -> Path:
    """A path as kubectl reads it: relative to the directory of the file that holds it."""
    path = Path(os.path.expanduser(value))
    return path if path.is_absolute() else base / path


# which files, and how they merge ----------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """One named cluster, user or context, with the directory its relative paths resolve against."""

    value: Mapping[str, Any]
    base: Path


@dataclass(frozen=True)
class MergedKubeconfig:
    """The view kubectl takes of several kubeconfig files: for every map key (a cluster, user or
    context name) the first file to set it wins, and `current-context` comes from the first file
    that sets one."""

    sources: tuple[Path, ...]
    current_context: str = ""
    clusters: Mapping[str, Entry] = field(default_factory=dict)
    users: Mapping[str, Entry] = field(default_factory=dict)
    contexts: Mapping[str, Entry] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return ", ".join(str(s) for s in self.sources) or "(no kubeconfig file)"


def kubeconfig_paths(explicit: Path | None = None,
                     environ: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """The files to read, in precedence order: `explicit` (`--kubeconfig`) alone, else every
    entry of `$KUBECONFIG` (empty entries and repeats dropped), else `~/.kube/config`."""
    if explicit is not None:
        return (explicit,)
    env = os.environ if environ is None else environ
    paths: list[Path] = []
    for part in env.get("KUBECONFIG", "").split(os.pathsep):
        if part and Path(part) not in paths:
            paths.append(Path(part))
    return tuple(paths) or (Path.home() / ".kube" / "config",)


def default_kubeconfig_path(environ: Mapping[str, str] | None = None) -> Path:
    """The file new entries go to, as kubectl chooses it: the first of `$KUBECONFIG` that
    exists, else its first entry (or `~/.kube/config`)."""
    paths = kubeconfig_paths(None, environ)
    return next((p for p in paths if p.exists()), paths[0])


def _named_section(doc: Mapping[str, Any], section: str, what: str, source: Path) -> list[tuple[str, Mapping[str, Any]]]:
    items = doc.get(section) or []
    if not isinstance(items, list):
        raise KubeconfigError(f"{source}: {section} must be a list")
    out: list[tuple[str, Mapping[str, Any]]] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise KubeconfigError(f"{source}: every entry of {section} needs a name")
        value = item.get(what) or {}
        out.append((item["name"], value if isinstance(value, dict) else {}))
    return out


def merge_kubeconfigs(docs: Sequence[tuple[Path, Mapping[str, Any]]]) -> MergedKubeconfig:
    """Merge parsed kubeconfig files, given in precedence order, as kubectl does."""
    current = ""
    sections: dict[str, dict[str, Entry]] = {"clusters": {}, "users": {}, "contexts": {}}
    singular = {"clusters": "cluster", "users": "user", "contexts": "context"}
    for source, doc in docs:
        if not isinstance(doc, Mapping):
            raise KubeconfigError(f"{source} is not a kubeconfig (expected a mapping)")
        if not current and doc.get("current-context"):
            current = str(doc["current-context"])
        for section, entries in sections.items():
            for name, value in _named_section(doc, section, singular[section], source):
                entries.setdefault(name, Entry(value, source.parent))
    return MergedKubeconfig(tuple(p for p, _ in docs), current, sections["clusters"],
                            sections["users"], sections["contexts"])


def read_kubeconfig(path: Path | None = None, environ: Mapping[str, str] | None = None) -> MergedKubeconfig:
    """Read and merge the kubeconfig files kubectl would: an explicit `path` must exist; files
    of `$KUBECONFIG` that do not are skipped."""
    paths = kubeconfig_paths(path, environ)
    docs: list[tuple[Path, Mapping[str, Any]]] = []
    for source in paths:
        try:
            text = source.read_text()
        except FileNotFoundError:
            if path is not None:
                raise KubeconfigError(f"cannot read kubeconfig {source}: no such file") from None
            continue
        except OSError as exc:
            raise KubeconfigError(f"cannot read kubeconfig {source}: {exc.strerror}") from None
        try:
            doc = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise KubeconfigError(f"{source} is not valid YAML: {exc}") from None
        docs.append((source, doc))
    if not docs:
        listed = os.pathsep.join(str(p) for p in paths)
        raise KubeconfigError(f"no kubeconfig: none of {listed} exists (set KUBECONFIG, or pass "
                              "--kubeconfig)")
    return merge_kubeconfigs(docs)


def credentials_for(config: MergedKubeconfig, context: str | None = None) -> ClusterCredentials:
    """What a client needs for `context` (default: the current context) of merged kubeconfigs."""
    name = context or config.current_context
    if not name:
        raise KubeconfigError(f"{config.where}: no current-context; pass a context name (--context)")
    ctx = config.contexts.get(name)
    if ctx is None:
        known = ", ".join(sorted(config.contexts)) or "none"
        raise KubeconfigError(f"context {name!r} not found in {config.where} (contexts: {known})")
    cluster_name = str(ctx.value.get("cluster", ""))
    cluster = config.clusters.get(cluster_name)
    if cluster is None:
        raise KubeconfigError(f"context {name!r} names cluster {cluster_name!r}, which is not in "
                              f"{config.where}")
    user_name = str(ctx.value.get("user") or "")
    user = config.users.get(user_name) if user_name else Entry({}, cluster.base)
    if user is None:
        raise KubeconfigError(f"context {name!r} names user {user_name!r}, which is not in "
                              f"{config.where}")
    token = user.value.get("token")
    if not token and user.value.get("tokenFile"):
        try:
            token = _resolve(str(user.value["tokenFile"]), user.base).read_text().strip()
        except OSError as exc:
            raise KubeconfigError(f"user {user_name!r}: cannot read tokenFile: {exc.strerror}") from None
    try:
        ca = _data(cluster.value, "certificate-authority", cluster.base)
        cert = _data(user.value, "client-certificate", user.base)
        key = _data(user.value, "client-key", user.base)
    except OSError as exc:
        raise KubeconfigError(f"context {name!r}: cannot read {exc.filename}: {exc.strerror}") from None
    return ClusterCredentials(
        context=name,
        server=str(cluster.value.get("server", "")).rstrip("/"),
        namespace=str(ctx.value.get("namespace") or "default"),
        ca_pem=ca,
        insecure=bool(cluster.value.get("insecure-skip-tls-verify")),
        client_cert_pem=cert,
        client_key_pem=key,
        token=token,
        proxy_url=str(cluster.value["proxy-url"]) if cluster.value.get("proxy-url") else None,
    )


def load_kubeconfig(path: Path | None = None, context: str | None = None) -> ClusterCredentials:
    """Credentials for `context` from `path` (`--kubeconfig`), else from every file of
    `$KUBECONFIG` merged as kubectl merges them, else from `~/.kube/config`."""
    return credentials_for(read_kubeconfig(path), context)


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
