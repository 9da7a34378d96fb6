"""tether.kube without a cluster: Status classification, retry policy, credentials hygiene, and
retries against a scripted HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from tether.kube import (
    AlreadyExists,
    BadRequest,
    ClusterCredentials,
    Conflict,
    Expired,
    Forbidden,
    Gone,
    Invalid,
    KubeClient,
    KubeError,
    NotFound,
    RetryPolicy,
    ServerError,
    TooManyRequests,
    Unauthorized,
    Unreachable,
    error_from_status,
)
from tether.kube.config import KubeconfigError, redact_url


def status(code: int, reason: str, message: str = "m", **details: object) -> dict[str, object]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
            "message": message, "details": details}


@pytest.mark.parametrize(("code", "reason", "cls"), [
    (400, "BadRequest", BadRequest),
    (401, "Unauthorized", Unauthorized),
    (403, "Forbidden", Forbidden),
    (404, "NotFound", NotFound),
    (409, "AlreadyExists", AlreadyExists),
    (409, "Conflict", Conflict),
    (410, "Expired", Expired),
    (410, "Gone", Gone),
    (422, "Invalid", Invalid),
    (429, "TooManyRequests", TooManyRequests),
    (500, "InternalError", ServerError),
    (504, "Timeout", ServerError),
    (418, "Teapot", KubeError),
])
def test_status_classification(code: int, reason: str, cls: type[KubeError]) -> None:
    error = error_from_status(status(code, reason))
    assert type(error) is cls
    assert error.code == code and error.reason == reason


def test_expired_is_gone_and_invalid_has_causes() -> None:
    assert isinstance(error_from_status(status(410, "Expired")), Gone)
    invalid = error_from_status(status(422, "Invalid", causes=[
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}]))
    assert [(c.reason, c.field) for c in invalid.causes] == [("FieldValueRequired", "spec.containers")]


def test_code_from_http_when_body_has_none() -> None:
    error = error_from_status({"message": "slow down"}, http_code=429, retry_after_s=2.0)
    assert isinstance(error, TooManyRequests) and error.retry_after_s == 2.0


def test_retry_policy_is_bounded_and_honours_retry_after() -> None:
    policy = RetryPolicy(attempts=5, base_backoff_s=0.1, max_backoff_s=1.0)
    assert all(0 < policy.delay_s(n) <= 1.0 for n in range(1, 20))
    hint = TooManyRequests(429, "TooManyRequests", "x", retry_after_s=0.7)
    assert policy.delay_s(1, hint) == 0.7


def test_secrets_stay_out_of_repr_and_messages() -> None:
    creds = ClusterCredentials.from_token(server="https://10.0.0.1:6443/", token=" s3cret-token \n",
                                          ca_bundle=None, proxy_url="http://u:pw@proxy:8088")
    assert creds.token == "s3cret-token" and creds.server == "https://10.0.0.1:6443"
    assert "s3cret" not in repr(creds) and "pw" not in repr(creds)
    assert creds.proxy_display == "http://proxy:8088"
    assert redact_url("http://proxy:8088/x") == "http://proxy:8088/x"


def test_ca_bundle_pem_or_base64() -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    as_b64 = base64.b64encode(pem).decode()
    assert ClusterCredentials.from_token(server="https://h", token="t", ca_bundle=pem).ca_pem == pem
    assert ClusterCredentials.from_token(server="https://h", token="t", ca_bundle=as_b64).ca_pem == pem
    with pytest.raises(KubeconfigError):
        ClusterCredentials.from_token(server="https://h", token="t", ca_bundle="not a bundle!")


# a scripted server ---------------------------------------------------------------------------


@dataclass
class Script:
    answers: list[tuple[int, dict[str, object], dict[str, str]]]
    seen: list[str] = field(default_factory=list)


@asynccontextmanager
async def scripted(script: Script) -> AsyncIterator[str]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                length = next((int(v) for k, _, v in (h.partition(":") for h in lines[1:])
                               if k.lower() == "content-length"), 0)
                if length:
                    await reader.readexactly(length)
                script.seen.append(lines[0])
                code, body, headers = script.answers.pop(0) if script.answers else (200, {}, {})
                raw = json.dumps(body).encode()
                extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                writer.write(f"HTTP/1.1 {code} X\r\nContent-Type: application/json\r\n{extra}"
                             f"Content-Length: {len(raw)}\r\n\r\n".encode() + raw)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


def client_for(url: str) -> KubeClient:
    creds = ClusterCredentials.from_token(server=url, token="t", ca_bundle=None)
    return KubeClient(creds, retry=RetryPolicy(attempts=3, base_backoff_s=0.01, max_backoff_s=0.05))


async def test_reads_retry_on_5xx_and_429_then_succeed() -> None:
    script = Script([(503, status(503, "ServiceUnavailable"), {}),
                     (429, status(429, "TooManyRequests"), {"Retry-After": "0"}),
                     (200, {"major": "1", "minor": "30"}, {})])
    async with scripted(script) as url, client_for(url) as client:
        version = await client.server_version(timeout_s=5)
    assert version.minor == "30" and len(script.seen) == 3


async def test_reads_give_up_after_bounded_attempts() -> None:
    script = Script([(500, status(500, "InternalError"), {})] * 5)
    async with scripted(script) as url, client_for(url) as client:
        with pytest.raises(ServerError):
            await client.request("GET", "/version", timeout_s=5)
    assert len(script.seen) == 3


async def test_writes_are_not_retried_blindly() -> None:
    script = Script([(503, status(503, "ServiceUnavailable"), {}), (201, {"kind": "X"}, {})])
    async with scripted(script) as url, client_for(url) as client:
        with pytest.raises(ServerError):
            await client.request("POST", "/api/v1/namespaces/default/configmaps", body={}, timeout_s=5)
    assert len(script.seen) == 1


async def test_writes_retry_on_429() -> None:
    script = Script([(429, status(429, "TooManyRequests"), {"Retry-After": "0"}), (201, {"kind": "X"}, {})])
    async with scripted(script) as url, client_for(url) as client:
        assert await client.request("POST", "/x", body={}, timeout_s=5) == {"kind": "X"}
    assert len(script.seen) == 2


async def test_non_status_error_body_and_healthz_fallback() -> None:
    script = Script([(502, {"not": "a status"}, {}), (404, {}, {}), (200, {}, {})])
    async with scripted(script) as url, client_for(url) as client:
        with pytest.raises(ServerError) as bad:
            await client.request("PUT", "/x", body={}, timeout_s=5)
        assert bad.value.code == 502
        code, _ = await client.healthz(timeout_s=5)
    assert code == 200 and script.seen[1:] == ["GET /readyz HTTP/1.1", "GET /healthz HTTP/1.1"]


async def test_unreachable_carries_address() -> None:
    async with scripted(Script([])) as url:
        pass  # the port is closed now
    async with client_for(url) as client:
        with pytest.raises(Unreachable) as down:
            await client.get("v1", "ConfigMap", "x", "default", timeout_s=3)
    assert url in str(down.value) and down.value.code == 0
