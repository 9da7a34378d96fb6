"""Certificates for a local cluster: its own CA, a serving certificate, an admin client certificate."""

from __future__ import annotations

import datetime as dt
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 3650
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


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str = "") -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
    )


def issue_ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    name = _name(common_name)
    cert = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return cert, key


def issue_leaf(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    *,
    common_name: str,
    organization: str = "",
    server_names: tuple[str, ...] = (),
    server_ips: tuple[str, ...] = (),
    client: bool = False,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    builder = _builder(_name(common_name, organization), ca_cert.subject, key.public_key())
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [ExtendedKeyUsageOID.SERVER_AUTH]
    builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    alt: list[x509.GeneralName] = [x509.DNSName(n) for n in server_names]
    alt += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
    if alt:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def ensure_cluster_pki(directory: Path, cluster_name: str, *, extra_ips: tuple[str, ...] = ()) -> ClusterPki:
    """Create the cluster's CA, certificates and admin token once; later calls reuse them.

    A serving certificate that lacks one of `extra_ips` (an address the API server is moved to)
    is reissued by the same CA, so clients keep trusting it.
    """
    pki = _ensure_cluster_pki(directory, cluster_name)
    if extra_ips and not _covers(pki.server_cert, extra_ips):
        ca_cert = x509.load_pem_x509_certificate(pki.ca_cert.read_bytes())
        ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        server_cert, server_key = issue_leaf(
            ca_cert, ca_key, common_name="kube-apiserver", server_names=SERVER_NAMES,
            server_ips=("127.0.0.1", "::1", *extra_ips),
        )
        pki.server_cert.write_bytes(_pem(server_cert))
        _write_key(pki.server_key, server_key)
    return pki


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
    ca_cert, ca_key = issue_ca(f"tether-local-{cluster_name}-ca")
    pki.ca_cert.write_bytes(_pem(ca_cert))
    _write_key(pki.ca_key, ca_key)
    server_cert, server_key = issue_leaf(
        ca_cert,
        ca_key,
        common_name="kube-apiserver",
        server_names=SERVER_NAMES,
        server_ips=("127.0.0.1", "::1"),
    )
    pki.server_cert.write_bytes(_pem(server_cert))
    _write_key(pki.server_key, server_key)
    admin_cert, admin_key = issue_leaf(
        ca_cert, ca_key, common_name="tether-admin", organization="system:masters", client=True
    )
    pki.admin_cert.write_bytes(_pem(admin_cert))
    _write_key(pki.admin_key, admin_key)
    pki.token_file.write_text(secrets.token_urlsafe(32) + "\n")
    pki.token_file.chmod(0o600)
    return pki
