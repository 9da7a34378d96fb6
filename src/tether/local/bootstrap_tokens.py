"""Bootstrap tokens for local clusters, as kube-apiserver's bootstrap-token authenticator and
kube-controller-manager's token cleaner handle them.

A bootstrap token is `<id>.<secret>` (6 and 16 characters of `[a-z0-9]`), stored as the Secret
`kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token` with the keys
`token-id`, `token-secret`, `expiration` (RFC 3339, optional), `usage-bootstrap-authentication`
("true" to authenticate) and `auth-extra-groups` (comma list, each `system:bootstrappers:...`).

- `identity`: the user a token stands for, `system:bootstrap:<id>` in the groups
  `system:bootstrappers`, the extra groups and `system:authenticated`, while the Secret exists,
  is not being deleted, has the same secret, allows authentication and has not expired. The
  expiry is checked at every authentication, so a token stops working at its `expiration`,
  to the second, whatever runs or does not run afterwards.
- `plan_cleanup`: the cleaner deletes an expired token's Secret (and says when to look again
  otherwise); the token controller runs it for every Secret it sees.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tether.local.store import Store

NAMESPACE = "kube-system"
SECRET_TYPE = "bootstrap.kubernetes.io/token"
SECRET_PREFIX = "bootstrap-token-"
USER_PREFIX = "system:bootstrap:"
GROUP = "system:bootstrappers"
AUTHENTICATED = "system:authenticated"
TOKEN = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
SECRETS = "/secrets"


@dataclass(frozen=True)
class Identity:
    username: str
    groups: tuple[str, ...]


def _data(secret: Mapping[str, Any], key: str) -> str:
    value = (secret.get("data") or {}).get(key)
    if not isinstance(value, str):
        return ""
    try:
        return base64.b64decode(value, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return ""


def expiration(secret: Mapping[str, Any]) -> float | None:
    """The token's expiry (epoch seconds), None when it has none; an unreadable one counts as
    already expired (refuse rather than guess)."""
    text = _data(secret, "expiration")
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def identity_from_secret(token: str, secret: Mapping[str, Any] | None, now: float) -> Identity | None:
    """Who `token` is, given the Secret its id names (pure)."""
    found = TOKEN.match(token)
    if found is None or secret is None:
        return None
    token_id, token_secret = found.groups()
    meta = secret.get("metadata") or {}
    if secret.get("type") != SECRET_TYPE or meta.get("deletionTimestamp"):
        return None
    if _data(secret, "token-id") != token_id:
        return None
    if not hmac.compare_digest(_data(secret, "token-secret").encode(), token_secret.encode()):
        return None
    if _data(secret, "usage-bootstrap-authentication") != "true":
        return None
    expires = expiration(secret)
    if expires is not None and now >= expires:
        return None
    extra = [g.strip() for g in _data(secret, "auth-extra-groups").split(",") if g.strip()]
    if any(not g.startswith(GROUP + ":") for g in extra):
        return None  # kube-apiserver refuses such a Secret outright
    return Identity(USER_PREFIX + token_id, (GROUP, *dict.fromkeys(extra), AUTHENTICATED))


def identity(token: str, store: Store, now: float) -> Identity | None:
    found = TOKEN.match(token)
    if found is None:
        return None
    return identity_from_secret(token, store.get(SECRETS, NAMESPACE, SECRET_PREFIX + found.group(1)),
                                now)


@dataclass(frozen=True)
class Cleanup:
    delete: bool
    recheck_s: float | None = None  # look again then (the token expires meanwhile)


def plan_cleanup(secret: Mapping[str, Any], now: float) -> Cleanup:
    meta = secret.get("metadata") or {}
    if (secret.get("type") != SECRET_TYPE or meta.get("namespace") != NAMESPACE
            or meta.get("deletionTimestamp")):
        return Cleanup(False)
    expires = expiration(secret)
    if expires is None:
        return Cleanup(False)
    if now >= expires:
        return Cleanup(True)
    return Cleanup(False, expires - now)
