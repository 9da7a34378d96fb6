"""How Semaphore's tools reach a remote cluster: a kubeconfig, or an API URL, a CA URL and a token.

Upstream fetches the remote API server's CA from `remoteCAURL` (plain HTTP GET, system trust
for https) and reads a ServiceAccount token from a file, checked against the bearer-token
character set. Paths are used as given: relative ones are relative to the working directory.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import urllib.parse
from pathlib import Path

from tether.kube import ClusterCredentials, KubeconfigError, load_kubeconfig
from tether.net.httpclient import ConnectionPool, TransportError

BEARER = re.compile(r"^[A-Za-z0-9\-._~+/]+=*$")
CA_FETCH_TIMEOUT_S = 10.0
MAX_CA_BYTES = 1 << 20


class RemoteError(Exception):
    """The remote's credentials could not be put together (the message says which input)."""


def read_token(path: str) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise RemoteError(f"cannot read the token file {path}: {exc.strerror}") from None
    if not token:
        raise RemoteError(f"the token file {path} is empty")
    if not BEARER.match(token):
        raise RemoteError(f"the token in {path} is not a bearer token (characters outside A-Z a-z 0-9 -._~+/=)")
    return token


async def fetch_ca(url: str, *, timeout_s: float = CA_FETCH_TIMEOUT_S) -> bytes:
    """The PEM CA bundle served at `url`."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(f"{url!r} is not an http(s) URL")
    context = ssl.create_default_context() if parts.scheme == "https" else None
    pool = ConnectionPool(parts.hostname, parts.port or (443 if context else 80), ssl_context=context,
                          connect_timeout_s=timeout_s)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        async with asyncio.timeout(timeout_s):
            answer = await pool.request("GET", target, [("Accept", "*/*"), ("User-Agent", "tether")])
    except (TransportError, TimeoutError) as exc:
        raise RemoteError(f"cannot fetch the CA from {url}: {exc or 'timed out'}") from None
    finally:
        await pool.close()
    if answer.status != 200:
        raise RemoteError(f"fetching the CA from {url} answered {answer.status}")
    body = answer.body[:MAX_CA_BYTES]
    if b"-----BEGIN CERTIFICATE-----" not in body:
        raise RemoteError(f"{url} did not serve a PEM certificate")
    return body


def kubeconfig_credentials(path: str, context: str | None = None) -> ClusterCredentials:
    try:
        return load_kubeconfig(Path(path), context)
    except KubeconfigError as exc:
        raise RemoteError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise RemoteError(f"cannot use kubeconfig {path}: {exc}") from None


async def url_credentials(name: str, api_url: str, ca_url: str, token_path: str) -> ClusterCredentials:
    token = read_token(token_path)
    ca = await fetch_ca(ca_url)
    return ClusterCredentials.from_token(server=api_url, token=token, ca_bundle=ca, name=name)
