"""Key pairs: one per node per remote, `<dir>/<interface>.key` (base64 private key, mode 0600),
generated when missing and reused across restarts, so peers never see a restart."""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

DEFAULT_KEY_DIR = Path("/var/lib/semaphore-wireguard")


class KeyError_(Exception):
    """A key file that exists but cannot be used."""


@dataclass(frozen=True)
class KeyPair:
    private: str  # base64; never logged
    public: str

    def __repr__(self) -> str:
        return f"KeyPair(public={self.public!r})"


def _public_of(private: bytes) -> str:
    key = X25519PrivateKey.from_private_bytes(private)
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def load_or_create(directory: Path, name: str) -> KeyPair:
    path = directory / f"{name}.key"
    if path.exists():
        text = path.read_text().strip()
        try:
            raw = base64.b64decode(text, validate=True)
        except ValueError as exc:
            raise KeyError_(f"{path}: not a base64 WireGuard key; remove it to get a new one") from exc
        if len(raw) != 32:
            raise KeyError_(f"{path}: not a 32-byte WireGuard key; remove it to get a new one")
        if path.stat().st_mode & 0o077:
            path.chmod(0o600)
        return KeyPair(text, _public_of(raw))
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    raw = X25519PrivateKey.generate().private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    text = base64.b64encode(raw).decode()
    tmp = path.with_suffix(".key.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text + "\n")
    os.replace(tmp, path)
    return KeyPair(text, _public_of(raw))
