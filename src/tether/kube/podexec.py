"""Run a command in a pod's container through the API server's `exec` subresource (WebSocket).

The client side of `v5.channel.k8s.io` (falling back to v4): binary messages whose first byte
is the channel; the final `Status` arrives on channel 3 and carries the exit code as an
`ExitCode` cause. Output is collected whole (bounded by `max_output`), which is what callers that
copy files out of a pod need, or stdout is handed to a sink as it arrives (a large archive).
Stdin, when given, is sent and then closed with v5's `[255, 0]`; v4 has no way to close it, so
under v4 the command must not read stdin to its end.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tether.kube.client import KubeClient
from tether.kube.errors import KubeError, Unreachable, error_from_status
from tether.net import websocket

DEFAULT_MAX_OUTPUT = 256 << 20  # what is kept in memory; a stdout sink has no limit
DEFAULT_IDLE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ExecResult:
    stdout: bytes
    stderr: bytes
    exit_code: int  # -1 when the command could not be started at all
    message: str = ""  # the Status message when it failed


class ExecError(KubeError):
    """The exec request was refused or the stream broke."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "ExecFailed", message)

    def __str__(self) -> str:
        return self.message


def exec_target(namespace: str, pod: str, container: str, command: Sequence[str], *, stdin: bool) -> str:
    query: list[tuple[str, str]] = [("command", c) for c in command]
    query += [("container", container), ("stdout", "true"), ("stderr", "true")]
    if stdin:
        query.append(("stdin", "true"))
    quoted_ns, quoted_pod = urllib.parse.quote(namespace, safe=""), urllib.parse.quote(pod, safe="")
    return f"/api/v1/namespaces/{quoted_ns}/pods/{quoted_pod}/exec?{urllib.parse.urlencode(query)}"


def exit_code_of(status: dict[str, object]) -> tuple[int, str]:
    """(exit code, message) from the Status on the error channel."""
    if status.get("status") == "Success":
        return 0, ""
    message = str(status.get("message", ""))
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    for cause in causes or []:
        if isinstance(cause, dict) and cause.get("reason") == "ExitCode":
            try:
                return int(str(cause.get("message"))), message
            except ValueError:
                break
    return -1, message


async def run(client: KubeClient, namespace: str, pod: str, container: str, command: Sequence[str], *,
              stdin: bytes | None = None, timeout_s: float | None = None,
              idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S, max_output: int = DEFAULT_MAX_OUTPUT,
              stdout_sink: Callable[[bytes], object] | None = None) -> ExecResult:
    """Run `command` to completion and collect its output and exit code. `timeout_s` bounds the
    whole run (None: no bound), `idle_timeout_s` each wait for data; with `stdout_sink` stdout
    goes there and `ExecResult.stdout` is empty."""
    headers = [("Connection", "Upgrade"), ("Upgrade", "websocket"), ("Sec-WebSocket-Version", "13"),
               ("Sec-WebSocket-Key", websocket.new_client_key()),
               ("Sec-WebSocket-Protocol", ", ".join(websocket.EXEC_SUBPROTOCOLS))]
    target = exec_target(namespace, pod, container, command, stdin=stdin is not None)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    async with client.upgrade("GET", target, headers=headers, timeout_s=idle_timeout_s) as answer:
        if answer.stream is None:
            try:
                status = json.loads(answer.body)
            except ValueError:
                status = None
            if isinstance(status, dict) and status.get("kind") == "Status":
                raise error_from_status(status)
            raise ExecError(f"exec in {namespace}/{pod} refused: HTTP {answer.status_code}: "
                            f"{answer.body[:300].decode('utf-8', 'replace')}")
        protocol = next((v.strip() for k, v in answer.headers if k.lower() == "sec-websocket-protocol"),
                        websocket.CHANNEL_V4)
        conn = websocket.WebSocketConnection(client=True, max_message_size=64 << 20)
        stream = answer.stream
        if stdin is not None:
            for start in range(0, len(stdin), 32 * 1024):
                await stream.write(conn.send_binary(websocket.channel_frame(websocket.STDIN, stdin[start:start + 32 * 1024])))
            if protocol == websocket.CHANNEL_V5:
                await stream.write(conn.send_binary(websocket.close_channel_frame(websocket.STDIN)))
        out, err, status_raw = bytearray(), bytearray(), b""
        finished = False
        while not finished:
            wait_s = idle_timeout_s
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Unreachable(client.server, f"exec in {namespace}/{pod} did not finish within {timeout_s}s")
                wait_s = min(wait_s, left)
            data = await stream.read(idle_timeout_s=wait_s)
            if not data:
                break
            for event in conn.receive_data(data):
                if isinstance(event, websocket.Message) and event.payload:
                    channel, body = websocket.parse_channel(event.payload)
                    if channel == websocket.STDOUT and stdout_sink is not None:
                        stdout_sink(body)
                    elif channel == websocket.STDOUT:
                        out += body
                    elif channel == websocket.STDERR:
                        err += body
                    elif channel == websocket.ERROR:
                        status_raw += body
                    if len(out) + len(err) > max_output:
                        raise ExecError(f"exec in {namespace}/{pod}: output over {max_output} bytes")
                elif isinstance(event, websocket.Ping):
                    await stream.write(conn.send_pong(event.payload))
                elif isinstance(event, (websocket.Close, websocket.ProtocolError)):
                    finished = True
            pending = conn.data_to_send()
            if pending:
                await stream.write(pending)
    if not status_raw:
        raise ExecError(f"exec in {namespace}/{pod}: the stream ended without a status")
    try:
        status = json.loads(status_raw)
    except ValueError:
        raise ExecError(f"exec in {namespace}/{pod}: unreadable status {status_raw[:200]!r}") from None
    code, message = exit_code_of(status)
    return ExecResult(bytes(out), bytes(err), code, message)
