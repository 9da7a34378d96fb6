"""ServiceAccount token authentication remembers verified signatures, never verdicts: a revoked
token is refused at once even though its signature was verified before, and a bad signature is
never remembered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether.local import tokens
from tether.local.store import Store

NS = "default"


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Store, Any, list[str], str]:
    store = Store(tmp_path / "s.db")
    sa = store.create(tokens.SERVICEACCOUNTS, NS, "agent",
                      {"metadata": {"name": "agent", "namespace": NS, "uid": "sa-1"}})
    secret = store.create(tokens.SECRETS, NS, "agent-token",
                          {"metadata": {"name": "agent-token", "namespace": NS, "uid": "s-1"}})
    signer = tokens.Signer.load_or_create(tmp_path / "pki")
    token = signer.sign(tokens.secret_claims(NS, sa, secret))
    verified: list[str] = []
    original = tokens.Signer.verify

    def counting(self: tokens.Signer, text: str) -> Any:
        verified.append(text)
        return original(self, text)

    monkeypatch.setattr(tokens.Signer, "verify", counting)
    check = tokens.authenticator(store, tmp_path / "pki", lambda _t: None)
    return store, check, verified, token


def test_a_token_is_verified_once_and_its_claims_checked_every_time(
        setup: tuple[Store, Any, list[str], str]) -> None:
    store, check, verified, token = setup
    user = "system:serviceaccount:default:agent"
    assert [check(token) for _ in range(5)] == [user] * 5
    assert len(verified) == 1
    store.delete(tokens.SECRETS, NS, "agent-token")  # revoked: refused at once
    assert check(token) is None
    assert len(verified) == 1


def test_a_bad_signature_is_never_remembered(setup: tuple[Store, Any, list[str], str]) -> None:
    _, check, verified, token = setup
    head, body, sig = token.split(".")
    forged = f"{head}.{body}.{sig[:-4]}AAAA"
    assert check(forged) is None and check(forged) is None
    assert len(verified) == 2
