"""Certificates for a local cluster: its own CA, a serving certificate, an admin client certificate."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from tether.net.pki import CertificateAuthority, Issued, write_private

SERVER_NAMES = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local")


@dataclass(frozen=True)
class ClusterPki:
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    admin_cert: Path
    admin_key: Path
    token_file: Path

    def token(self) -> str:
        return self.token_file.read_text().strip()


def ensure_cluster_pki(directory: Path, cluster_name: str, *, extra_ips: tuple[str, ...] = ()) -> ClusterPki:
    """Create the cluster's CA, certificates and admin token once; later calls reuse them.

    A serving certificate that lacks one of `extra_ips` (an address the API server is moved to)
    is reissued by the same CA, so clients keep trusting it.
    """
    pki = _ensure_cluster_pki(directory, cluster_name)
    if extra_ips and not _covers(pki.server_cert, extra_ips):
        ca = CertificateAuthority.from_files(pki.ca_cert, pki.ca_key)
        _write(pki.server_cert, pki.server_key, _serving(ca, extra_ips))
    return pki


def _serving(ca: CertificateAuthority, extra_ips: tuple[str, ...] = ()) -> Issued:
    return ca.issue("kube-apiserver", server=True, sans=(*SERVER_NAMES, "127.0.0.1", "::1", *extra_ips))


def _write(cert_path: Path, key_path: Path, issued: Issued) -> None:
    cert_path.write_bytes(issued.cert_pem)
    write_private(key_path, issued.key_pem())


def _covers(cert_path: Path, ips: tuple[str, ...]) -> bool:
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    present = {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    return all(ip in present for ip in ips)


def _ensure_cluster_pki(directory: Path, cluster_name: str) -> ClusterPki:
    directory.mkdir(parents=True, exist_ok=True)
    pki = ClusterPki(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        server_cert=directory / "apiserver.crt",
        server_key=directory / "apiserver.key",
        admin_cert=directory / "admin.crt",
        admin_key=directory / "admin.key",
        token_file=directory / "admin.token",
    )
    if pki.ca_cert.exists() and pki.admin_key.exists() and pki.token_file.exists():
        return pki
    ca = CertificateAuthority.create(f"tether-local-{cluster_name}-ca")
    pki.ca_cert.write_bytes(ca.cert_pem)
    write_private(pki.ca_key, ca.key_pem())
    _write(pki.server_cert, pki.server_key, _serving(ca))
    _write(pki.admin_cert, pki.admin_key, ca.issue("tether-admin", organizations=("system:masters",)))
    write_private(pki.token_file, (secrets.token_urlsafe(32) + "\n").encode())
    return pki
