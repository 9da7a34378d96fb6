"""TLS material for the tunnel: gRPC credentials, ssl contexts, and the names a peer's certificate
carries (for binding an agent to the identity its certificate names). Keys are read, never logged."""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class ServerTLS:
    """A listener's files. `ca_cert` set: client certificates are required and verified."""

    cert: str = ""
    key: str = ""
    ca_cert: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.cert and self.key)

    def grpc_credentials(self) -> grpc.ServerCredentials:
        pair = (Path(self.key).read_bytes(), Path(self.cert).read_bytes())
        root = Path(self.ca_cert).read_bytes() if self.ca_cert else None
        return grpc.ssl_server_credentials([pair], root_certificates=root,
                                           require_client_auth=bool(self.ca_cert))

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert, self.key)
        if self.ca_cert:
            context.load_verify_locations(self.ca_cert)
            context.verify_mode = ssl.CERT_REQUIRED
        context.set_alpn_protocols(["http/1.1"])  # HTTP-CONNECT: no h2
        return context


@dataclass(frozen=True)
class ClientTLS:
    """A client's (agent's, frontend client's) files; `server_name` overrides the checked name."""

    ca_cert: str
    cert: str = ""
    key: str = ""
    server_name: str = ""

    def grpc_credentials(self) -> grpc.ChannelCredentials:
        root = Path(self.ca_cert).read_bytes()
        if self.cert and self.key:
            return grpc.ssl_channel_credentials(root, Path(self.key).read_bytes(),
                                                Path(self.cert).read_bytes())
        return grpc.ssl_channel_credentials(root)

    def grpc_options(self) -> list[tuple[str, Any]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca_cert)
        if self.cert and self.key:
            context.load_cert_chain(self.cert, self.key)
        return context


def certificate_names(pem: bytes) -> tuple[str, set[str]]:
    """(common name, subject alternative names) of a PEM certificate; SANs are DNS names, IP
    addresses and URIs as text."""
    cert = x509.load_pem_x509_certificate(pem)
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    cn = str(cns[0].value) if cns else ""
    sans: set[str] = set()
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return cn, sans
    sans.update(ext.get_values_for_type(x509.DNSName))
    sans.update(str(ip) for ip in ext.get_values_for_type(x509.IPAddress))
    sans.update(ext.get_values_for_type(x509.UniformResourceIdentifier))
    return cn, sans


def canonical_host(name: str) -> str:
    """IP addresses in canonical text (so `fd00:0::1` matches a SAN `fd00::1`); names unchanged."""
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name
