"""Read a kubeconfig context into what a client needs: server, trust, credentials."""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class KubeconfigError(Exception):
    pass


@dataclass(frozen=True)
class ClusterCredentials:
    context: str
    server: str
    namespace: str
    ca_pem: bytes | None
    insecure: bool
    client_cert_pem: bytes | None
    client_key_pem: bytes | None
    token: str | None

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https://"):
            return False
        context = ssl.create_default_context()
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif self.ca_pem:
            context.load_verify_locations(cadata=self.ca_pem.decode())
        if self.client_cert_pem and self.client_key_pem:
            # ssl loads key pairs only from files: use a private, short-lived directory.
            with tempfile.TemporaryDirectory(prefix="tether-cred-") as tmp:
                cert, key = Path(tmp) / "c.pem", Path(tmp) / "k.pem"
                cert.write_bytes(self.client_cert_pem)
                key.touch(0o600)
                key.write_bytes(self.client_key_pem)
                context.load_cert_chain(cert, key)
        return context


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
    )
