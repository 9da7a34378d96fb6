"""`tether certs`: the two PKIs of apiserver-network-proxy's `make certs`, with `cryptography`.

    DIR/frontend/issued/{ca.crt,proxy-frontend.crt,proxy-client.crt}
    DIR/frontend/private/{ca.key,proxy-frontend.key,proxy-client.key}
    DIR/agent/issued/{ca.crt,proxy-frontend.crt,proxy-agent.crt}
    DIR/agent/private/{ca.key,proxy-frontend.key,proxy-agent.key}

Frontend CA `CN=127.0.0.1@`, agent CA `CN=<server ip>@` (make's empty `$(date +%s)`);
`proxy-frontend` is serverAuth with SAN `DNS:kubernetes,DNS:localhost,IP:<ip>` (127.0.0.1 on the
frontend side); `proxy-client` and `proxy-agent` are clientAuth. `agent_names` adds SANs to the
agent certificate, which binds that agent to those identities on a tether server.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=3650)


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _san(names: Iterable[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def _ca(cn: str) -> tuple[rsa.RSAPrivateKey, x509.Certificate]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=True, crl_sign=True,
                                         encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(ca_key: rsa.RSAPrivateKey, ca: x509.Certificate, cn: str, *, server: bool,
          sans: Iterable[str] = ()) -> tuple[rsa.RSAPrivateKey, x509.Certificate]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + VALIDITY)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                            key_encipherment=True, data_encipherment=False,
                                            key_agreement=False, key_cert_sign=False, crl_sign=False,
                                            encipher_only=False, decipher_only=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                              critical=False))
    names = _san(sans)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _write(directory: Path, name: str, key: rsa.RSAPrivateKey, cert: x509.Certificate) -> None:
    issued, private = directory / "issued", directory / "private"
    issued.mkdir(parents=True, exist_ok=True)
    private.mkdir(parents=True, exist_ok=True)
    private.chmod(0o700)
    (issued / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path = private / f"{name}.key"
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.TraditionalOpenSSL,
                                       serialization.NoEncryption()))


def write_pkis(out: Path, server_ip: str, *, agent_names: Iterable[str] = ()) -> list[Path]:
    """Write both PKIs under `out`; returns the certificate paths written."""
    ipaddress.ip_address(server_ip)  # `make certs` puts it in an IP SAN
    written: list[Path] = []
    for side, ca_cn, server_san, client_cn, client_sans in (
        ("frontend", "127.0.0.1@", "127.0.0.1", "proxy-client", ()),
        ("agent", f"{server_ip}@", server_ip, "proxy-agent", tuple(agent_names)),
    ):
        directory = out / side
        ca_key, ca = _ca(ca_cn)
        _write(directory, "ca", ca_key, ca)
        key, cert = _leaf(ca_key, ca, "proxy-frontend", server=True,
                          sans=("kubernetes", "localhost", server_san))
        _write(directory, "proxy-frontend", key, cert)
        key, cert = _leaf(ca_key, ca, client_cn, server=False, sans=client_sans)
        _write(directory, client_cn, key, cert)
        written += [directory / "issued" / f"{n}.crt" for n in ("ca", "proxy-frontend", client_cn)]
    return written


def issue_agent_cert(out: Path, ca_dir: Path, name: str, names: Iterable[str]) -> tuple[Path, Path]:
    """A further agent client certificate from an existing agent CA, bound to `names`."""
    ca = x509.load_pem_x509_certificate((ca_dir / "issued" / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((ca_dir / "private" / "ca.key").read_bytes(), None)
    if not isinstance(ca_key, rsa.RSAPrivateKey):
        raise ValueError("the agent CA key is not RSA")
    key, cert = _leaf(ca_key, ca, name, server=False, sans=names)
    _write(out, name, key, cert)
    return out / "issued" / f"{name}.crt", out / "private" / f"{name}.key"
