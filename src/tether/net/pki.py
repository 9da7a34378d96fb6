"""Certificate authorities and the certificates they issue: the one X.509 implementation in tether.

Every PKI tether keeps is built from `CertificateAuthority`: a local cluster's CA (serving and
admin certificates, `tether.local.pki`), the tunnel's two ANP-layout PKIs (`tether certs`,
`tether.tunnel.pki`) and the hub's cluster-proxy CA (`tether.app.clusterproxy`). They differ in
key type (ANP's `make certs` uses RSA; the rest use P-256, smaller and faster to sign) and in
their on-disk layout, which stays with each owner.

Private keys are written with `write_private` (created 0600, never world-readable in between).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KeyType = Literal["ec", "rsa"]
PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

VALIDITY = dt.timedelta(days=3650)
BACKDATE = dt.timedelta(minutes=5)  # tolerate clocks a little behind the issuer's


class PkiError(Exception):
    """A key or certificate that cannot be used (wrong type, unreadable)."""


def new_key(key_type: KeyType = "ec") -> PrivateKey:
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: PrivateKey, *, traditional: bool = False) -> bytes:
    """PEM of a private key: PKCS#8, or the traditional OpenSSL form easy-rsa writes."""
    layout = serialization.PrivateFormat.TraditionalOpenSSL if traditional else serialization.PrivateFormat.PKCS8
    return key.private_bytes(serialization.Encoding.PEM, layout, serialization.NoEncryption())


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def load_key(pem: bytes) -> PrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise PkiError(f"unsupported private key type {type(key).__name__} (want EC or RSA)")
    return key


def write_private(path: Path, data: bytes) -> None:
    """Write a secret file readable by its owner only, from its first byte."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    path.chmod(0o600)  # an existing file keeps its old mode through O_CREAT


def subject_alt_names(names: Iterable[str]) -> list[x509.GeneralName]:
    """IP SANs for address literals, DNS SANs for everything else."""
    out: list[x509.GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def _name(common_name: str, organizations: Iterable[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _key_usage(*, ca: bool, key_encipherment: bool) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=True, content_commitment=False,
                         key_encipherment=key_encipherment and not ca, data_encipherment=False,
                         key_agreement=False, key_cert_sign=ca, crl_sign=ca,
                         encipher_only=False, decipher_only=False)


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: PrivateKey = field(repr=False)

    @property
    def cert_pem(self) -> bytes:
        return cert_pem(self.cert)

    def key_pem(self, *, traditional: bool = False) -> bytes:
        return key_pem(self.key, traditional=traditional)


@dataclass(frozen=True)
class CertificateAuthority:
    cert: x509.Certificate
    key: PrivateKey = field(repr=False)
    key_ids: bool = False  # subject/authority key identifiers, as easy-rsa writes them

    @classmethod
    def create(cls, common_name: str, *, key_type: KeyType = "ec", validity: dt.timedelta = VALIDITY,
               path_length: int | None = None, key_ids: bool = False) -> CertificateAuthority:
        key = new_key(key_type)
        name = _name(common_name)
        now = dt.datetime.now(dt.UTC)
        builder = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - BACKDATE).not_valid_after(now + validity)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
                   .add_extension(_key_usage(ca=True, key_encipherment=False), critical=True))
        if key_ids:
            builder = builder.add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        return cls(builder.sign(key, hashes.SHA256()), key, key_ids)

    @classmethod
    def from_pem(cls, cert: bytes, key: bytes, *, key_ids: bool = False) -> CertificateAuthority:
        return cls(x509.load_pem_x509_certificate(cert), load_key(key), key_ids)

    @classmethod
    def from_files(cls, cert: Path, key: Path, *, key_ids: bool = False) -> CertificateAuthority:
        return cls.from_pem(cert.read_bytes(), key.read_bytes(), key_ids=key_ids)

    @property
    def key_type(self) -> KeyType:
        return "rsa" if isinstance(self.key, rsa.RSAPrivateKey) else "ec"

    @property
    def cert_pem(self) -> bytes:
        return cert_pem(self.cert)

    def key_pem(self, *, traditional: bool = False) -> bytes:
        return key_pem(self.key, traditional=traditional)

    def issue(self, common_name: str, *, organizations: Iterable[str] = (), server: bool = False,
              sans: Iterable[str] = (), validity: dt.timedelta = VALIDITY,
              key_encipherment: bool = False) -> Issued:
        """A leaf certificate: serverAuth when `server`, else clientAuth (Kubernetes reads the
        user from CN and the groups from O)."""
        key = new_key(self.key_type)
        now = dt.datetime.now(dt.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (x509.CertificateBuilder().subject_name(_name(common_name, organizations))
                   .issuer_name(self.cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - BACKDATE).not_valid_after(now + validity)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if key_encipherment:
            builder = builder.add_extension(_key_usage(ca=False, key_encipherment=True), critical=True)
        if self.key_ids:
            builder = builder.add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        names = subject_alt_names(sans)
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return Issued(builder.sign(self.key, hashes.SHA256()), key)
