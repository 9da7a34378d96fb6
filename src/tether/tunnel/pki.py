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

import ipaddress
from collections.abc import Iterable
from pathlib import Path

from tether.net.pki import CertificateAuthority, Issued, PkiError, write_private


def _write(directory: Path, name: str, issued: Issued | CertificateAuthority) -> None:
    issued_dir, private = directory / "issued", directory / "private"
    issued_dir.mkdir(parents=True, exist_ok=True)
    private.mkdir(parents=True, exist_ok=True)
    private.chmod(0o700)
    (issued_dir / f"{name}.crt").write_bytes(issued.cert_pem)
    write_private(private / f"{name}.key", issued.key_pem(traditional=True))


def _leaf(ca: CertificateAuthority, cn: str, *, server: bool, sans: Iterable[str] = ()) -> Issued:
    return ca.issue(cn, server=server, sans=sans, key_encipherment=True)


def write_pkis(out: Path, server_ip: str, *, agent_names: Iterable[str] = ()) -> list[Path]:
    """Write both PKIs under `out`; returns the certificate paths written."""
    ipaddress.ip_address(server_ip)  # `make certs` puts it in an IP SAN
    written: list[Path] = []
    for side, ca_cn, server_san, client_cn, client_sans in (
        ("frontend", "127.0.0.1@", "127.0.0.1", "proxy-client", ()),
        ("agent", f"{server_ip}@", server_ip, "proxy-agent", tuple(agent_names)),
    ):
        directory = out / side
        ca = CertificateAuthority.create(ca_cn, key_type="rsa", key_ids=True)
        _write(directory, "ca", ca)
        _write(directory, "proxy-frontend",
               _leaf(ca, "proxy-frontend", server=True, sans=("kubernetes", "localhost", server_san)))
        _write(directory, client_cn, _leaf(ca, client_cn, server=False, sans=client_sans))
        written += [directory / "issued" / f"{n}.crt" for n in ("ca", "proxy-frontend", client_cn)]
    return written


def issue_agent_cert(out: Path, ca_dir: Path, name: str, names: Iterable[str]) -> tuple[Path, Path]:
    """A further agent client certificate from an existing agent CA, bound to `names`."""
    ca = CertificateAuthority.from_files(ca_dir / "issued" / "ca.crt", ca_dir / "private" / "ca.key",
                                         key_ids=True)
    if ca.key_type != "rsa":
        raise PkiError("the agent CA key is not RSA")
    _write(out, name, _leaf(ca, name, server=False, sans=names))
    return out / "issued" / f"{name}.crt", out / "private" / f"{name}.key"
