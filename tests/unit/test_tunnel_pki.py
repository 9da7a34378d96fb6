"""`tether certs` writes the two PKIs of ANP's `make certs` (names, CNs, SANs, EKUs)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tether.tunnel import pki


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def cn(cert: x509.Certificate) -> str:
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


def eku(cert: x509.Certificate) -> list[x509.ObjectIdentifier]:
    return list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def test_make_certs_layout_and_contents(tmp_path: Path) -> None:
    pki.write_pkis(tmp_path, "10.1.2.3")
    for side, client in (("frontend", "proxy-client"), ("agent", "proxy-agent")):
        for name in ("ca", "proxy-frontend", client):
            assert (tmp_path / side / "issued" / f"{name}.crt").is_file()
            key = tmp_path / side / "private" / f"{name}.key"
            assert key.is_file() and key.stat().st_mode & 0o077 == 0
    assert cn(load(tmp_path / "frontend/issued/ca.crt")) == "127.0.0.1@"
    assert cn(load(tmp_path / "agent/issued/ca.crt")) == "10.1.2.3@"
    server = load(tmp_path / "agent/issued/proxy-frontend.crt")
    assert cn(server) == "proxy-frontend" and eku(server) == [ExtendedKeyUsageOID.SERVER_AUTH]
    san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["kubernetes", "localhost"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.1.2.3")]
    front = load(tmp_path / "frontend/issued/proxy-frontend.crt")
    assert front.extensions.get_extension_for_class(x509.SubjectAlternativeName).value \
        .get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    for path, name in (("frontend/issued/proxy-client.crt", "proxy-client"),
                       ("agent/issued/proxy-agent.crt", "proxy-agent")):
        cert = load(tmp_path / path)
        assert cn(cert) == name and eku(cert) == [ExtendedKeyUsageOID.CLIENT_AUTH]
        assert cert.issuer == load(tmp_path / path.replace(name, "ca")).subject
