"""`pods/exec` and `pods/attach` against the real kubectl, the Python client and a raw WebSocket."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
from typing import Any

import httpx
import pytest
from test_streaming_common import Env, env, next_pod_ip

from tether.local.kubelet.runtime import LogWriter
from tether.net import websocket as ws

__all__ = ["env"]

SPDY = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false"}
TRANSPORTS = [pytest.param({}, id="websocket"), pytest.param(SPDY, id="spdy")]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_kubectl_exec_output_exit_code_and_stdin(env: Env, transport: dict[str, str]) -> None:
    env.create_pod("p", pod_ip=next_pod_ip())
    code, out, err = await env.kubectl("exec", "p", "--", "echo", "hi", env=transport)
    assert (code, out) == (0, "hi\n"), err
    code, out, err = await env.kubectl("exec", "p", "--", "sh", "-c", "exit 3", env=transport)
    assert code == 3 and "command terminated with exit code 3" in err
    code, out, err = await env.kubectl("exec", "-i", "p", "--", "cat", stdin=b"foo\n", env=transport)
    assert (code, out) == (0, "foo\n"), err
    code, out, err = await env.kubectl("exec", "p", "--", "sh", "-c", "echo out; echo err >&2",
                                       env=transport)
    assert (code, out, err) == (0, "out\n", "err\n")
    wanted = ("GET", "websocket") if not transport else ("POST", "spdy/3.1")
    assert {(method, upgrade) for _, method, upgrade in env.upgrades} == {wanted}


async def test_exec_gets_the_container_env_and_pod_directory(env: Env) -> None:
    pod = env.create_pod("p", pod_ip=(ip := next_pod_ip()))
    code, out, err = await env.kubectl("exec", "p", "--", "sh", "-c", 'echo "$POD_NAME $POD_IP"; pwd')
    assert code == 0, err
    name_ip, cwd = out.splitlines()
    assert name_ip == f"p {ip}"
    assert cwd == str(env.kubelet.pods_dir / pod["metadata"]["uid"] / "root")


async def test_exec_of_a_missing_program_reports_it(env: Env) -> None:
    env.create_pod("p", pod_ip=next_pod_ip())
    code, _, err = await env.kubectl("exec", "p", "--", "no-such-program-here")
    assert code != 0 and 'exec: "no-such-program-here": executable file not found in $PATH' in err


async def test_exec_refusals_answer_400_before_upgrading(env: Env) -> None:
    done = env.create_pod("done", pod_ip=next_pod_ip(), phase="Succeeded", container_state="terminated")
    env.create_pod("pending", pod_ip="", phase="Pending", container_state="waiting")
    env.create_pod("p", pod_ip=next_pod_ip())
    headers = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": ws.new_client_key(), "Sec-WebSocket-Protocol": ws.CHANNEL_V5}
    base = "/api/v1/namespaces/default/pods"
    async with httpx.AsyncClient(base_url=env.cluster.url, verify=env.trust()) as client:
        async def refused(path: str) -> str:
            answer = await client.get(f"{base}/{path}", headers=headers)
            assert answer.status_code == 400, answer.text
            message: str = answer.json()["message"]
            return message

        assert await refused(f"{done['metadata']['name']}/exec?command=true&stdout=true") == \
            "cannot exec into a container in a completed pod; current phase is Succeeded"
        assert await refused("pending/exec?command=true&stdout=true") == 'container not found ("main")'
        assert await refused("p/exec?command=true&stdout=true&container=nope") == \
            "container nope is not valid for pod p"
        assert "was not started with stdin: true" in (await refused("p/attach?stdout=true&stdin=true"))
    code, _, err = await env.kubectl("exec", "p", "-c", "nope", "--", "true")
    assert code != 0 and "nope" in err


async def test_python_client_exec_stdout_and_exit_code(env: Env) -> None:
    env.create_pod("p", pod_ip=next_pod_ip())
    from kubernetes.stream import stream

    api = env.python_client()

    def run() -> tuple[str, Any]:
        out = stream(api.connect_get_namespaced_pod_exec, "p", "default", command=["echo", "hi"],
                     stderr=True, stdin=False, stdout=True, tty=False)
        resp = stream(api.connect_get_namespaced_pod_exec, "p", "default",
                      command=["sh", "-c", "exit 5"], stderr=True, stdin=False, stdout=True,
                      tty=False, _preload_content=False)
        resp.run_forever(timeout=10)
        return out, resp.returncode

    out, returncode = await asyncio.to_thread(run)
    assert out == "hi\n" and returncode == 5


async def test_python_client_tty_applies_resize(env: Env) -> None:
    env.create_pod("p", pod_ip=next_pod_ip())
    from kubernetes.stream import stream

    api = env.python_client()

    def run() -> str:
        resp = stream(api.connect_get_namespaced_pod_exec, "p", "default",
                      command=["sh", "-c", "read line; stty size; tty >/dev/null && echo is-a-tty"],
                      stderr=True, stdin=True, stdout=True, tty=True, _preload_content=False)
        resp.write_channel(ws.RESIZE, json.dumps({"Width": 123, "Height": 45}))
        resp.write_stdin("go\n")
        output = ""
        for _ in range(200):
            resp.update(timeout=0.1)
            output += resp.read_stdout()
            if not resp.is_open():
                break
        resp.close()
        return output

    output = await asyncio.to_thread(run)
    assert "45 123" in output and "is-a-tty" in output


async def test_raw_websocket_v4_ping_pong_and_status(env: Env) -> None:
    """The protocol by hand with the sans-io client: handshake, pong, channels, Status, close."""
    env.create_pod("p", pod_ip=next_pod_ip())
    reader, writer = await asyncio.open_connection("127.0.0.1", env.cluster.port, ssl=env.trust(),
                                                   server_hostname="127.0.0.1")
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write((f"GET /api/v1/namespaces/default/pods/p/exec?command=sh&command=-c&"
                  f"command=sleep%200.3%3B%20echo%20late%3B%20exit%202&stdout=true&stderr=true HTTP/1.1\r\n"
                  f"Host: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                  f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {ws.CHANNEL_V4}\r\n\r\n").encode())
    head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).decode()
    assert head.startswith("HTTP/1.1 101")
    assert f"Sec-WebSocket-Accept: {ws.accept_key(key)}" in head
    assert f"Sec-WebSocket-Protocol: {ws.CHANNEL_V4}" in head
    conn = ws.WebSocketConnection(client=True)
    writer.write(conn.send_ping(b"are you there"))
    events: list[ws.Event] = []
    try:
        for _ in range(100):
            data = await asyncio.wait_for(reader.read(65536), 5)
            if not data:
                break
            events += conn.receive_data(data)
            writer.write(conn.data_to_send())
            if conn.close_received:
                break
    finally:
        writer.close()
    assert events[0] == ws.Pong(b"are you there")
    messages = [ws.parse_channel(e.payload) for e in events if isinstance(e, ws.Message)]
    assert (ws.STDOUT, b"late\n") in messages
    status = json.loads(next(data for channel, data in messages if channel == ws.ERROR))
    assert status["reason"] == "NonZeroExitCode"
    assert status["details"]["causes"] == [{"reason": "ExitCode", "message": "2"}]
    assert isinstance(events[-1], ws.Close) and events[-1].code == 1000


async def test_kubectl_attach_follows_container_output(env: Env) -> None:
    pod = env.create_pod("p", pod_ip=next_pod_ip())
    log = LogWriter(env.kubelet.pods_dir / pod["metadata"]["uid"] / "logs" / "main" / "0.log")
    log.write("stdout", b"before attach: not shown")
    process = await asyncio.create_subprocess_exec(
        *_kubectl_args(env), "attach", "p", "-c", "main",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env.kubectl_env())
    try:
        assert process.stdout is not None
        # Attach shows only what is written after it started following: write until it shows.
        seen = b""
        for _ in range(40):
            log.write("stdout", b"ping")
            with contextlib.suppress(TimeoutError):
                seen = await asyncio.wait_for(process.stdout.readline(), 0.5)
            if seen == b"ping\n":
                break
        assert seen == b"ping\n"
        await asyncio.sleep(0.3)  # let the other pings drain before the lines under test
        while True:
            try:
                await asyncio.wait_for(process.stdout.readline(), 0.3)
            except TimeoutError:
                break
        log.write("stdout", b"line one")
        log.write("stderr", b"line two")
        first = await asyncio.wait_for(process.stdout.readline(), 10)
        assert first == b"line one\n"
        env.set_status(pod, phase="Running", pod_ip=pod["status"]["podIP"], container_state="terminated")
        out, err = await asyncio.wait_for(process.communicate(), 10)
        assert process.returncode == 0, err
        assert b"before attach" not in out and b"line two" in err
    finally:
        log.close()
        if process.returncode is None:
            process.kill()
            await process.wait()


def _kubectl_args(env: Env) -> list[str]:
    from test_streaming_common import kubectl_binary

    return [kubectl_binary()]
