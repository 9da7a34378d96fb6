"""Readiness, liveness and startup probes: httpGet, tcpSocket and exec, with k8s timing rules."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.local.kubelet import images
from tether.net import http1
from tether.objects import ObjView as Obj

# How a probe reaches host:port within a timeout (netns mode: from the cluster's namespaces).
Dial = Callable[[str, int, float], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


async def direct_dial(host: str, port: int, timeout_s: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)


@dataclass(frozen=True)
class ProbeTiming:
    initial_delay_s: float = 0.0
    period_s: float = 10.0
    timeout_s: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3

    @classmethod
    def of(cls, probe: Obj) -> ProbeTiming:
        return cls(
            initial_delay_s=float(probe.get("initialDelaySeconds", 0)),
            period_s=float(probe.get("periodSeconds", 10)),
            timeout_s=float(probe.get("timeoutSeconds", 1)),
            success_threshold=int(probe.get("successThreshold", 1)),
            failure_threshold=int(probe.get("failureThreshold", 3)),
        )


def resolve_port(port: Any, container: Obj) -> int:
    if isinstance(port, int):
        return port
    for declared in container.get("ports") or []:
        if declared.get("name") == port:
            return int(declared["containerPort"])
    if isinstance(port, str) and port.isdigit():
        return int(port)
    raise ValueError(f"port {port!r} is not a number or a named container port")


async def http_get(host: str, port: int, path: str, headers: Mapping[str, str], timeout_s: float,
                   dial: Dial = direct_dial) -> bool:
    async def attempt() -> bool:
        reader, writer = await dial(host, port, timeout_s)
        try:
            head = f"GET {path or '/'} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.37\r\n"
            head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "Connection: close\r\n\r\n"
            writer.write(head.encode())
            await writer.drain()
            parser = http1.ResponseParser()
            while not parser.head_ready:  # the status is all a probe reads (1xx skipped)
                data = await reader.read(4096)
                if not data:
                    return False
                parser.feed(data)
            return 200 <= parser.head().status < 400
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    try:
        return await asyncio.wait_for(attempt(), timeout_s)
    except (OSError, TimeoutError, ValueError):
        return False


async def tcp_open(host: str, port: int, timeout_s: float, dial: Dial = direct_dial) -> bool:
    try:
        _, writer = await asyncio.wait_for(dial(host, port, timeout_s), timeout_s)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    return True


async def exec_ok(argv: list[str], env: Mapping[str, str], cwd: Path, timeout_s: float) -> bool:
    try:
        process = await asyncio.create_subprocess_exec(
            *argv, env=dict(env), cwd=str(cwd), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, start_new_session=True,
        )
    except OSError:
        return False
    try:
        return await asyncio.wait_for(process.wait(), timeout_s) == 0
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        return False


def checker(probe: Obj, container: Obj, *, pod_ip: str, env: Mapping[str, str], cwd: Path,
            dial: Dial = direct_dial, prefix: Sequence[str] = ()) -> Callable[[], Awaitable[bool]]:
    """The check of one probe; `dial` reaches the pod, `prefix` runs exec probes in its network."""
    timing = ProbeTiming.of(probe)
    if "httpGet" in probe:
        action = probe["httpGet"]
        port = resolve_port(action.get("port"), container)
        host = str(action.get("host") or pod_ip)
        headers = {str(h.get("name")): str(h.get("value", "")) for h in action.get("httpHeaders") or []}
        path = str(action.get("path", "/"))
        return lambda: http_get(host, port, path, headers, timing.timeout_s, dial)
    if "tcpSocket" in probe:
        action = probe["tcpSocket"]
        port = resolve_port(action.get("port"), container)
        host = str(action.get("host") or pod_ip)
        return lambda: tcp_open(host, port, timing.timeout_s, dial)
    if "exec" in probe:
        command = [str(a) for a in (probe["exec"].get("command") or [])]
        argv = [*prefix, *images.exec_argv(container, command)]
        return lambda: exec_ok(argv, env, cwd, timing.timeout_s)

    async def unsupported() -> bool:  # grpc probes: not checked by local clusters
        return True

    return unsupported


async def run_probe(
    check: Callable[[], Awaitable[bool]],
    timing: ProbeTiming,
    on_result: Callable[[bool], None],
) -> None:
    """Probe forever; report a result each time the threshold flips it."""
    await asyncio.sleep(timing.initial_delay_s)
    successes = failures = 0
    current: bool | None = None
    while True:
        ok = await check()
        successes, failures = (successes + 1, 0) if ok else (0, failures + 1)
        if ok and successes >= timing.success_threshold and current is not True:
            current = True
            on_result(True)
        elif not ok and failures >= timing.failure_threshold and current is not False:
            current = False
            on_result(False)
        await asyncio.sleep(timing.period_s)
