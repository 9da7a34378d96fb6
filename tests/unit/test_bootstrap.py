"""Pull registration helpers: kubeadm's CA hash, token and hash parsing, the agent's RBAC."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tether.app.pullagent import member_host
from tether.federation import bootstrap as b
from tether.objects.times import micro_time


def _ca() -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1).not_valid_before(now)
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(ca_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate) -> x509.Certificate:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    return (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "apiserver")]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(2)
            .not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .sign(ca_key, hashes.SHA256()))


def test_ca_cert_hash_is_kubeadms_spki_sha256() -> None:
    _, ca = _ca()
    pem = ca.public_bytes(serialization.Encoding.PEM)
    spki = ca.public_key().public_bytes(serialization.Encoding.DER,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    assert b.ca_cert_hash(pem) == "sha256:" + hashlib.sha256(spki).hexdigest()


def test_pin_accepts_the_issuing_ca_and_refuses_others() -> None:
    key, ca = _ca()
    pem = ca.public_bytes(serialization.Encoding.PEM)
    leaf = _leaf(key, ca)
    b._check_pin(pem, leaf, b.ca_cert_hash(pem), "https://hub")
    with pytest.raises(b.BootstrapError, match="public key hash"):
        b._check_pin(pem, leaf, "sha256:" + "0" * 64, "https://hub")
    other_key, other = _ca()
    other_pem = other.public_bytes(serialization.Encoding.PEM)
    with pytest.raises(b.BootstrapError, match="not issued by the pinned CA"):
        b._check_pin(other_pem, leaf, b.ca_cert_hash(other_pem), "https://hub")
    del other_key


@pytest.mark.parametrize("value", ["", "sha256:", "md5:" + "0" * 64, "sha256:" + "g" * 64,
                                   "sha256:" + "0" * 63])
def test_malformed_hashes_are_refused(value: str) -> None:
    with pytest.raises(b.BootstrapError, match="sha256:<64 hex digits>"):
        b.normalize_hash(value)


def test_hash_is_normalised() -> None:
    assert b.normalize_hash(" SHA256:" + "AB" * 32) == "sha256:" + "ab" * 32


def test_tokens_split_into_id_and_bearer() -> None:
    assert b.split_token("abc123.eyJhbGciOi.x.y") == ("abc123", "eyJhbGciOi.x.y")
    for bad in ("", "abc123", "ABC123.x", "abc12.x", "abc123."):
        with pytest.raises(b.BootstrapError, match="id"):
            b.split_token(bad)


def test_bootstrap_token_repr_hides_the_secret() -> None:
    token = b.BootstrapToken("abc123", "abc123.secret-jwt", 0.0)
    assert "secret" not in repr(token)


def test_agent_rbac_is_limited_to_its_cluster() -> None:
    objs = b.agent_rbac("m1")
    role = objs[0]
    named = [r for r in role["rules"] if "resourceNames" in r]
    assert all(r["resourceNames"] == ["m1"] for r in named)
    work_role = next(o for o in objs if o["kind"] == "Role")
    assert work_role["metadata"]["namespace"] == "tether-es-m1"
    assert not any("*" in r.get("verbs", []) for o in objs for r in o.get("rules", []))


def test_member_host_and_micro_time() -> None:
    assert member_host("https://10.150.0.1:6443") == "10.150.0.1"
    assert micro_time(0.5) == "1970-01-01T00:00:00.500000Z"
