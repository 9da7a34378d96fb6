"""The userspace service proxy on real loopback sockets (127.0.0.0/8 only), fed from a real store."""

from __future__ import annotations

import asyncio
import contextlib
import random
from pathlib import Path
from typing import Any

from tether.local.services.proxy import ProxyConfig, ServiceProxy
from tether.local.store import Store

SLICES = "discovery.k8s.io/endpointslices"


def service(ip: str, port: int, affinity: str = "None") -> dict[str, Any]:
    return {"metadata": {"name": "web", "namespace": "default"},
            "spec": {"type": "ClusterIP", "clusterIP": ip, "sessionAffinity": affinity,
                     "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}}


def endpoint_slice(port: int, *ips: str) -> dict[str, Any]:
    return {"metadata": {"name": "web-abcde", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips]}


async def echo_server(ip: str, port: int, tag: bytes) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()  # until the client half-closes
        writer.write(tag + data)
        await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, ip, port)


async def call(ip: str, port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(ip, port), 2)
    writer.write(payload)
    writer.write_eof()
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return data


async def wait_listening(proxy: ServiceProxy, address: tuple[str, int], present: bool = True) -> None:
    for _ in range(200):
        if (address in proxy.listeners) == present:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"listener {address} present={present} never happened")


async def test_proxy_balances_fails_over_and_resets(tmp_path: Path) -> None:
    suffix = random.randrange(2, 250)
    cluster_ip, port, target = f"127.95.{suffix}.7", 18080, 18081
    backends = [f"127.94.{suffix}.{i}" for i in (1, 2)]
    dead = f"127.94.{suffix}.3"  # nothing listens there: refused, so the next one is tried
    servers = [await echo_server(ip, target, f"{i}:".encode()) for i, ip in enumerate(backends)]
    store = Store(tmp_path / "state.db")
    proxy = ServiceProxy(store, ProxyConfig(connect_timeout_s=1.0, resync_s=0.2, settle_s=0.01))
    task = asyncio.create_task(proxy.run())
    try:
        store.create("/services", "default", "web", service(cluster_ip, port))
        await wait_listening(proxy, (cluster_ip, port))
        # no endpoints: the connection is reset
        try:
            assert await call(cluster_ip, port, b"x") == b""
        except ConnectionResetError:
            pass
        store.create(SLICES, "default", "web-abcde", endpoint_slice(target, dead, *backends))
        await asyncio.sleep(0.3)
        answers = [await call(cluster_ip, port, b"hi") for _ in range(6)]
        assert set(answers) == {b"0:hi", b"1:hi"}
        # ClientIP affinity: the same backend every time
        store.update("/services", "default", "web", service(cluster_ip, port, "ClientIP"))
        await asyncio.sleep(0.3)
        sticky = {await call(cluster_ip, port, b"s") for _ in range(4)}
        assert len(sticky) == 1
        # the Service goes: so does its listener
        store.delete("/services", "default", "web")
        await wait_listening(proxy, (cluster_ip, port), present=False)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        for server in servers:
            server.close()
        store.close()
    assert proxy.listeners == {}
