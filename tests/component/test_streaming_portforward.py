"""`pods/portforward`: kubectl over tunnelled and plain SPDY, and the Python client's WebSocket."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import AsyncIterator

import httpx
import pytest
from test_streaming_common import (
    Env,
    env,
    http_backend,
    http_get,
    kubectl_binary,
    next_pod_ip,
    serving,
    shout_backend,
)

from tether.net import websocket as ws

__all__ = ["env"]

TRANSPORTS = [pytest.param({}, id="websocket-tunnel"),
              pytest.param({"KUBECTL_PORT_FORWARD_WEBSOCKETS": "false"}, id="spdy")]
FORWARDING = re.compile(rb"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)")


@contextlib.asynccontextmanager
async def port_forward(env: Env, target: str, port: int, transport: dict[str, str]
                       ) -> AsyncIterator[tuple[int, asyncio.subprocess.Process]]:
    """`kubectl port-forward <target> :<port>`; yields the local port kubectl picked."""
    process = await asyncio.create_subprocess_exec(
        kubectl_binary(), "port-forward", "--address", "127.0.0.1", target, f":{port}",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env.kubectl_env(transport))
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 15)
        found = FORWARDING.search(line)
        assert found is not None, line
        yield int(found.group(1)), process
    finally:
        if process.returncode is None:
            process.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 5)
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_kubectl_port_forward_reaches_the_pod(env: Env, transport: dict[str, str]) -> None:
    ip = next_pod_ip()
    async with serving(ip, http_backend) as port:
        env.create_pod("p", pod_ip=ip, ports=[port])
        async with port_forward(env, "pod/p", port, transport) as (local, _):
            for _ in range(3):  # several connections over one session: stream pairing by requestID
                answer = await http_get("127.0.0.1", local, "/hello")
                assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"hello from the pod\n")
    wanted = ("GET", "websocket") if not transport else ("POST", "spdy/3.1")
    assert {(method, upgrade) for _, method, upgrade in env.upgrades} == {wanted}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_kubectl_port_forward_half_close(env: Env, transport: dict[str, str]) -> None:
    ip = next_pod_ip()
    async with serving(ip, shout_backend) as port:
        env.create_pod("p", pod_ip=ip)
        async with port_forward(env, "pod/p", port, transport) as (local, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", local)
            writer.write(b"quiet words")
            writer.write_eof()  # the backend answers only after EOF
            assert await asyncio.wait_for(reader.read(), 10) == b"QUIET WORDS"
            writer.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_kubectl_port_forward_reports_dial_errors(env: Env, transport: dict[str, str]) -> None:
    ip = next_pod_ip()
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind((ip, 0))
        closed_port = probe.getsockname()[1]
    env.create_pod("p", pod_ip=ip)
    async with port_forward(env, "pod/p", closed_port, transport) as (local, process):
        try:
            answer = await http_get("127.0.0.1", local, "/")
        except ConnectionResetError:  # kubectl may close with our request unread: a reset
            answer = b""
        assert answer == b""
        assert process.stderr is not None
        text = b""
        with contextlib.suppress(TimeoutError):
            while b"connection refused" not in text:
                text += await asyncio.wait_for(process.stderr.readline(), 10)
        assert b"an error occurred forwarding" in text.lower() and b"connection refused" in text, text


async def test_python_client_port_forward(env: Env) -> None:
    ip = next_pod_ip()
    async with serving(ip, http_backend) as port:
        env.create_pod("p", pod_ip=ip)
        from kubernetes.stream import portforward

        api = env.python_client()

        def run() -> bytes:
            forward = portforward(api.connect_get_namespaced_pod_portforward, "p", "default",
                                  ports=str(port))
            sock = forward.socket(port)
            sock.settimeout(10)
            sock.sendall(b"GET /hello HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n")
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
            sock.close()
            assert forward.error(port) is None
            return received

        answer = await asyncio.to_thread(run)
        assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"hello from the pod\n")


async def test_port_forward_of_a_pending_pod_is_refused(env: Env) -> None:
    env.create_pod("p", pod_ip="", phase="Pending", container_state="waiting")
    headers = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": ws.new_client_key(), "Sec-WebSocket-Protocol": ws.CHANNEL_V4}
    async with httpx.AsyncClient(base_url=env.cluster.url, verify=env.trust()) as client:
        answer = await client.get("/api/v1/namespaces/default/pods/p/portforward?ports=80",
                                  headers=headers)
    assert answer.status_code == 400
    assert answer.json()["message"] == \
        "unable to forward port because pod is not running. Current status=Pending"
