"""`KubeClient`'s one transport against real sockets on 127.0.0.1: HTTP CONNECT proxies (plain
and TLS, with proxy headers and credentials), dialers, streamed answers, raw pass-through with a
streamed request body, upgrades (101, then bytes both ways), and every transport failure as
`Unreachable` (refused, proxy 407/502, TLS failure, EOF mid-body)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import ipaddress
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tether.kube import (
    ClusterCredentials,
    ConnectOptions,
    KubeClient,
    KubeError,
    NotFound,
    RetryPolicy,
    Unreachable,
)
from tether.net.httpclient import ConnectionPool, Proxy, TransportError

TIMEOUT_S = 10.0
ONCE = RetryPolicy(attempts=1)


# certificates -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    ca_pem: bytes
    ca_file: Path
    server: ssl.SSLContext  # 127.0.0.1, localhost and member.invalid


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_pki(directory: Path, label: str) -> Pki:
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name(f"{label} CA")).issuer_name(_name(f"{label} CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, key_cert_sign=True, crl_sign=True,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name("server")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost"),
                x509.DNSName("member.invalid")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    (directory / f"{label}-ca.pem").write_bytes(ca_pem)
    (directory / f"{label}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / f"{label}.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(directory / f"{label}.pem", directory / f"{label}.key")
    return Pki(ca_pem, directory / f"{label}-ca.pem", context)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), "apiserver")


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("other"), "other")


# a small HTTP/1.1 server, written without the code under test ---------------------------------


@dataclass
class Request:
    line: str
    fields: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> list[str]:
        return [v for k, v in self.fields if k.lower() == name.lower()]


@dataclass
class Server:
    port: int = 0
    connections: int = 0
    requests: list[Request] = field(default_factory=list)


async def read_request(reader: asyncio.StreamReader) -> Request:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    line, *lines = head[:-4].split("\r\n")
    fields = [(k.strip(), v.strip()) for k, v in (h.split(":", 1) for h in lines)]
    names = {k.lower(): v for k, v in fields}
    body = b""
    if names.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            body += await reader.readexactly(size)
            await reader.readexactly(2)
    elif "content-length" in names:
        body = await reader.readexactly(int(names["content-length"]))
    return Request(line, fields, body)


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Server], Awaitable[None]]


@contextlib.asynccontextmanager
async def serving(handler: Handler, *, tls: ssl.SSLContext | None = None) -> AsyncIterator[Server]:
    server = Server()
    tasks: set[asyncio.Task[None]] = set()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.connections += 1
        tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        try:
            await handler(reader, writer, server)
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    listener = await asyncio.start_server(accept, "127.0.0.1", 0, ssl=tls)
    server.port = listener.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        listener.close()
        for task in tasks:
            task.cancel()
        await listener.wait_closed()


def json_answer(body: bytes = b'{"kind": "Thing"}', status: str = "200 OK") -> bytes:
    return (b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (status.encode(), len(body), body))


async def api(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
    """Answers every request with JSON; `/watch` with chunked lines."""
    while True:
        request = await read_request(reader)
        server.requests.append(request)
        if "/watch" in request.line:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for piece in (b'{"type": "ADDED"}\n{"ty', b'pe": "MODIFIED"}\n'):
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
        else:
            writer.write(json_answer(b'{"n": %d}' % len(server.requests)))
        await writer.drain()


# a CONNECT proxy ------------------------------------------------------------------------------


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, ssl.SSLError):
        pass
    finally:
        writer.close()


class ConnectProxy:
    """Tunnels CONNECT to 127.0.0.1 only; or answers every CONNECT with `refusal`."""

    def __init__(self, *, refusal: bytes | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.refusal = refusal
        self.tls = tls
        self.seen: list[Request] = []
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> ConnectProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.tls)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()

    def url(self, userinfo: str = "") -> str:
        assert self._server is not None
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{userinfo}127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        request = await read_request(reader)
        self.seen.append(request)
        method, target, _ = request.line.split(" ")
        host, port = target.rsplit(":", 1)
        if self.refusal is not None or method != "CONNECT" or host != "127.0.0.1":
            writer.write(self.refusal or b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        self._writers.append(up_writer)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        async with asyncio.TaskGroup() as group:
            group.create_task(_pipe(reader, up_writer))
            group.create_task(_pipe(up_reader, writer))


def credentials(url: str, pki: Pki | None, **kwargs: object) -> ClusterCredentials:
    return ClusterCredentials.from_token(server=url, token="t0ken",
                                         ca_bundle=pki.ca_pem if pki else None, **kwargs)  # type: ignore[arg-type]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# proxies ------------------------------------------------------------------------------------


async def test_requests_watches_and_upgrades_through_a_connect_proxy(pki: Pki) -> None:
    """How the hub reaches a Pull member: CONNECT with the proxy headers and credentials, then
    TLS to the member inside the tunnel, for every kind of call on one path."""
    async with serving(api, tls=pki.server) as server, ConnectProxy() as proxy:
        creds = credentials(f"https://127.0.0.1:{server.port}/prefix", pki,
                            proxy_url=proxy.url("agent:s3cret%21@"),
                            proxy_headers={"X-Cluster": "member1, member2"})
        async with KubeClient(creds) as client:
            assert await client.request("GET", "/version", timeout_s=TIMEOUT_S) == {"n": 1}
            async with client.stream("GET", "/watch", timeout_s=TIMEOUT_S) as raw:
                lines = [line async for line in raw.lines(idle_timeout_s=TIMEOUT_S)]
            assert await client.request("POST", "/things", body={}, timeout_s=TIMEOUT_S) == {"n": 3}
    assert lines == ['{"type": "ADDED"}', '{"type": "MODIFIED"}']
    assert [r.line for r in server.requests] == [
        "GET /prefix/version HTTP/1.1", "GET /prefix/watch HTTP/1.1", "POST /prefix/things HTTP/1.1"]
    assert server.requests[0].header("Authorization") == ["Bearer t0ken"]
    assert server.connections == 1  # the tunnelled connection was kept alive and reused
    connect = proxy.seen[0]
    assert connect.line == f"CONNECT 127.0.0.1:{server.port} HTTP/1.1"
    assert connect.header("Host") == [f"127.0.0.1:{server.port}"]
    assert connect.header("X-Cluster") == ["member1", "member2"]
    assert connect.header("Proxy-Authorization") == ["Basic " + base64.b64encode(b"agent:s3cret!").decode()]
    assert not connect.header("Authorization")  # the member's token only inside the tunnel


async def test_an_upgrade_through_a_connect_proxy(pki: Pki) -> None:
    async with serving(upgrade_echo, tls=pki.server) as server, ConnectProxy() as proxy:
        creds = credentials(f"https://127.0.0.1:{server.port}", pki, proxy_url=proxy.url())
        async with KubeClient(creds) as client, client.upgrade(
                "POST", "/api/v1/namespaces/d/pods/p/exec?command=sh", headers=UPGRADE,
                timeout_s=TIMEOUT_S) as answer:
            assert answer.stream is not None
            assert await read_exactly(answer.stream, len(b"ready")) == b"ready"
            await answer.stream.write(b"ping", timeout_s=TIMEOUT_S)
            assert await read_exactly(answer.stream, 4) == b"PING"
    assert proxy.seen[0].line == f"CONNECT 127.0.0.1:{server.port} HTTP/1.1"


async def test_tls_to_an_https_proxy_then_tls_inside(pki: Pki, other_pki: Pki,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """An https:// proxy URL: TLS to the proxy (trusted from the system store, here made of the
    proxy's CA), then TLS to the apiserver inside that TLS connection."""
    monkeypatch.setenv("SSL_CERT_FILE", str(other_pki.ca_file))
    async with serving(api, tls=pki.server) as server, ConnectProxy(tls=other_pki.server) as proxy:
        assert proxy.url().startswith("https://")
        creds = credentials(f"https://127.0.0.1:{server.port}", pki, proxy_url=proxy.url())
        async with KubeClient(creds, retry=ONCE) as client:
            assert await client.request("GET", "/version", timeout_s=TIMEOUT_S) == {"n": 1}
    assert len(proxy.seen) == 1 and server.requests[0].line == "GET /version HTTP/1.1"


async def test_a_pool_takes_an_explicit_proxy(pki: Pki) -> None:
    async with serving(api) as server, ConnectProxy() as proxy:
        pool = ConnectionPool("127.0.0.1", server.port, ssl_context=None,
                              proxy=Proxy.from_url(proxy.url(), [("Agent-Id", "a")]))
        try:
            answer = await pool.request("GET", "/plain", [])
        finally:
            await pool.close()
    assert answer.status == 200
    assert proxy.seen[0].header("Agent-Id") == ["a"]
    assert not proxy.seen[0].header("Proxy-Authorization")


def test_proxy_urls() -> None:
    proxy = Proxy.from_url("https://u%40x:p@proxy.example", [("A", "1")])
    assert (proxy.host, proxy.port, proxy.tls) == ("proxy.example", 443, True)
    assert proxy.headers == (("A", "1"), ("Proxy-Authorization", "Basic " + base64.b64encode(b"u@x:p").decode()))
    assert "Basic" not in repr(proxy)
    assert Proxy.from_url("http://[::1]:3128").host == "::1"
    with pytest.raises(ValueError, match="socks5"):
        Proxy.from_url("socks5://proxy:1080")


# dialers ------------------------------------------------------------------------------------


async def test_a_dialer_carries_tls_for_a_name_nobody_resolves(pki: Pki) -> None:
    dials: list[tuple[str, int]] = []
    async with serving(api, tls=pki.server) as server:
        async def dial(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            dials.append((host, port))
            return await asyncio.open_connection("127.0.0.1", server.port)

        creds = credentials("https://member.invalid:6443", pki)
        async with KubeClient(creds, connect=ConnectOptions(dialer=dial)) as client:
            assert await client.request("GET", "/version", timeout_s=TIMEOUT_S) == {"n": 1}
            async with client.stream("GET", "/watch", timeout_s=TIMEOUT_S) as raw:
                assert len([line async for line in raw.lines(idle_timeout_s=TIMEOUT_S)]) == 2
    assert dials == [("member.invalid", 6443)]
    assert server.requests[0].header("Host") == ["member.invalid:6443"]


async def test_with_a_proxy_the_dialer_is_asked_for_the_proxy(pki: Pki) -> None:
    dials: list[tuple[str, int]] = []
    async with serving(api, tls=pki.server) as server, ConnectProxy() as proxy:
        proxy_port = int(proxy.url().rsplit(":", 1)[1])

        async def dial(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            dials.append((host, port))
            return await asyncio.open_connection("127.0.0.1", proxy_port)

        creds = credentials(f"https://127.0.0.1:{server.port}", pki,
                            proxy_url="http://proxy.invalid:3128")
        async with KubeClient(creds, connect=ConnectOptions(dialer=dial)) as client:
            assert await client.request("GET", "/version", timeout_s=TIMEOUT_S) == {"n": 1}
    assert dials == [("proxy.invalid", 3128)]
    assert proxy.seen[0].line == f"CONNECT 127.0.0.1:{server.port} HTTP/1.1"


async def test_a_failing_dialer_is_unreachable_and_not_sent() -> None:
    async def dial(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        raise ConnectionError("no tunnel to that cluster")

    creds = credentials("https://member.invalid:6443", None)
    async with KubeClient(creds, connect=ConnectOptions(dialer=dial), retry=ONCE) as client:
        with pytest.raises(Unreachable) as caught:
            await client.request("POST", "/x", body={}, timeout_s=TIMEOUT_S)
    assert not caught.value.request_sent and "no tunnel to that cluster" in caught.value.message


# raw pass-through ---------------------------------------------------------------------------


async def test_raw_pass_through_streams_both_bodies_and_keeps_every_header() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        request = await read_request(reader)
        server.requests.append(request)
        writer.write(b"HTTP/1.1 404 Not Found\r\nWarning: 299 - \"one\"\r\nWarning: 299 - \"two\"\r\n"
                     b"Content-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in (b"you sent: ", request.body):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def body() -> AsyncIterator[bytes]:
        yield b"part one, "
        await asyncio.sleep(0)
        yield b""
        yield b"part two"

    target = "/api/v1/namespaces/d/services/s:80/proxy/a%2Fb?x=%2F&y=1"
    headers = [("Content-Type", "text/plain"), ("Impersonate-Group", "a"), ("Impersonate-Group", "b"),
               ("Host", "elsewhere"), ("Content-Length", "3")]
    async with (serving(echo) as server,
                KubeClient(credentials(f"http://127.0.0.1:{server.port}/base", None)) as client,
                client.send_raw("POST", target, content=body(), timeout_s=TIMEOUT_S,
                                headers=headers) as raw):
        assert raw.status_code == 404  # forwarded, not raised
        pieces = [piece async for piece in raw.chunks(idle_timeout_s=TIMEOUT_S)]
    assert b"".join(pieces) == b"you sent: part one, part two"
    assert [v for k, v in raw.header_items() if k == "Warning"] == ['299 - "one"', '299 - "two"']
    assert raw.headers["content-type"] == "text/plain"
    seen = server.requests[0]
    assert seen.line == f"POST /base{target} HTTP/1.1"
    assert seen.body == b"part one, part two"
    assert seen.header("Transfer-Encoding") == ["chunked"] and not seen.header("Content-Length")
    assert seen.header("Host") == [f"127.0.0.1:{server.port}"]
    assert seen.header("Impersonate-Group") == ["a", "b"]
    assert seen.header("Authorization") == ["Bearer t0ken"]  # the client's own credentials


# upgrades -----------------------------------------------------------------------------------

UPGRADE = [("Connection", "Upgrade"), ("Upgrade", "tether-test")]


async def upgrade_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
    request = await read_request(reader)
    server.requests.append(request)
    if request.header("Upgrade") != ["tether-test"]:
        writer.write(json_answer(b'{"kind":"Status","code":400,"message":"upgrade request required"}',
                                 "400 Bad Request"))
        await writer.drain()
        return
    # the first bytes of the new protocol in the same segment as the 101
    writer.write(b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tether-test\r\n\r\nready")
    await writer.drain()
    while data := await reader.read(65536):
        writer.write(data.upper())
        await writer.drain()


async def read_exactly(stream: object, count: int) -> bytes:
    got = b""
    for _ in range(100):
        if len(got) >= count:
            break
        piece = await stream.read(count - len(got), idle_timeout_s=TIMEOUT_S)  # type: ignore[attr-defined]
        if not piece:
            break
        got += piece
    return got


async def test_an_upgrade_hands_over_the_connection_both_ways(pki: Pki) -> None:
    async with (serving(upgrade_echo, tls=pki.server) as server,
                KubeClient(credentials(f"https://127.0.0.1:{server.port}", pki)) as client):
        async with client.upgrade("GET", "/exec", headers=UPGRADE, timeout_s=TIMEOUT_S) as answer:
            assert answer.status_code == 101 and answer.stream is not None
            assert ("Upgrade", "tether-test") in answer.headers
            assert await read_exactly(answer.stream, 5) == b"ready"
            for word in (b"one", b"two"):
                await answer.stream.write(word, timeout_s=TIMEOUT_S)
                assert await read_exactly(answer.stream, 3) == word.upper()
        async with client.upgrade("GET", "/exec", headers=[], timeout_s=TIMEOUT_S) as refused:
            assert refused.status_code == 400 and refused.stream is None
            assert b"upgrade request required" in refused.body
        # the upgraded connection was given back when its block ended: another one works
        async with client.upgrade("GET", "/exec", headers=UPGRADE, timeout_s=TIMEOUT_S) as again:
            assert again.stream is not None and await read_exactly(again.stream, 5) == b"ready"
    assert server.requests[0].header("Authorization") == ["Bearer t0ken"]


async def test_an_upgraded_connection_holds_its_slot_until_closed() -> None:
    async with serving(upgrade_echo) as server:
        pool = ConnectionPool("127.0.0.1", server.port, ssl_context=None, max_connections=1)
        try:
            answer = await pool.open("GET", "/exec", UPGRADE)
            connection = answer.take_connection()
            answer.close()  # the connection is no longer the answer's
            assert pool._slots.locked()  # a second call would wait for it
            assert await connection.read() == b"ready"
            await connection.aclose()
            assert not pool._slots.locked()
            second = await pool.open("GET", "/exec", UPGRADE)
            assert second.status == 101
            second.close()
        finally:
            await pool.close()


# one error family ---------------------------------------------------------------------------


async def expect_unreachable(client: KubeClient, method: str = "GET") -> Unreachable:
    with pytest.raises(KubeError) as caught:
        await client.request(method, "/api/v1/namespaces", body={} if method == "POST" else None,
                             timeout_s=TIMEOUT_S)
    assert type(caught.value) is Unreachable
    assert isinstance(caught.value.__cause__, TransportError)  # chained, not exposed
    return caught.value


async def test_a_refused_connection() -> None:
    async with KubeClient(credentials(f"https://127.0.0.1:{closed_port()}", None), retry=ONCE) as client:
        error = await expect_unreachable(client, "POST")
    assert not error.request_sent and "ConnectionRefusedError" in error.message


@pytest.mark.parametrize(("refusal", "expected"), [
    (b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n"
     b"Content-Length: 12\r\n\r\nwho are you?", "407 Proxy Authentication Required: who are you?"),
    (b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n\r\ndial tcp 10.0.0.1:6443: refused",
     "502 Bad Gateway: dial tcp 10.0.0.1:6443: refused"),
    (b"HTTP/1.1 200", "closed the connection before answering CONNECT"),
    (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "is not HTTP"),
])
async def test_a_proxy_refusal(refusal: bytes, expected: str, pki: Pki) -> None:
    async with ConnectProxy(refusal=refusal) as proxy:
        creds = credentials("https://127.0.0.1:6443", pki, proxy_url=proxy.url("agent:s3cretpw@"))
        async with KubeClient(creds, retry=ONCE) as client:
            error = await expect_unreachable(client, "POST")
        assert not error.request_sent  # the member never saw it: even a write may be tried again
        assert expected in error.message
        assert f"(via proxy {proxy.url()})" in error.message and "s3cretpw" not in error.message


async def test_a_tls_failure(pki: Pki, other_pki: Pki) -> None:
    async with serving(api, tls=pki.server) as server:
        creds = credentials(f"https://127.0.0.1:{server.port}", other_pki)  # trusts another CA
        async with KubeClient(creds, retry=ONCE) as client:
            error = await expect_unreachable(client, "POST")
    assert not error.request_sent and "CERTIFICATE_VERIFY_FAILED" in error.message
    assert server.requests == []


async def test_the_end_of_the_connection_in_the_middle_of_a_body() -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        request = await read_request(reader)
        server.requests.append(request)
        if "/watch" in request.line:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"8\r\n{\"a\": 1}\r\n4\r\n\n{\"b")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"kind\"")
        await writer.drain()

    got: list[str] = []
    async with (serving(cut) as server,
                KubeClient(credentials(f"http://127.0.0.1:{server.port}", None), retry=ONCE) as client):
        error = await expect_unreachable(client)
        assert error.request_sent and "closed before the answer was complete" in error.message
        with pytest.raises(Unreachable) as caught:
            async with client.stream("GET", "/watch", timeout_s=TIMEOUT_S) as raw:
                async for line in raw.lines(idle_timeout_s=TIMEOUT_S):
                    got.append(line)
    assert got == ['{"a": 1}']  # what came before the cut was delivered
    assert caught.value.request_sent and "closed before" in caught.value.message


async def test_an_error_status_on_a_stream_is_the_status() -> None:
    async def missing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: Server) -> None:
        server.requests.append(await read_request(reader))
        writer.write(json_answer(b'{"kind":"Status","code":404,"reason":"NotFound","message":"gone"}',
                                 "404 Not Found"))
        await writer.drain()

    async with (serving(missing) as server,
                KubeClient(credentials(f"http://127.0.0.1:{server.port}", None)) as client):
        with pytest.raises(NotFound, match="gone"):
            async with client.stream("GET", "/watch", timeout_s=TIMEOUT_S):
                pass


async def test_a_server_url_the_client_cannot_use_is_unreachable() -> None:
    async with KubeClient(credentials("ftp://127.0.0.1:21", None), retry=ONCE) as client:
        error = await expect_unreachable(client)
    assert not error.request_sent and "unsupported server URL" in error.message
