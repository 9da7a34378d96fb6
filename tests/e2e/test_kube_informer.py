"""tether.kube.Informer against a real local cluster: convergence, feeding the engine, a server
restart (reconnect with backoff), and a relist with a synthetic diff after 410 Expired."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tether.engine import Engine
from tether.kube import (
    Backoff,
    ClusterCredentials,
    ConnectOptions,
    Expired,
    Informer,
    KubeClient,
    ObjectKey,
    Unreachable,
    WatchEvent,
    load_kubeconfig,
    strip_managed_fields,
)

pytestmark = pytest.mark.e2e
Obj = dict[str, Any]
NAME = "ki1"
FAST = Backoff(base_s=0.05, max_s=1.0)


def _tether(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                            timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("kube-informer")
    _tether("local", "up", "--data-dir", str(root), "--name", NAME, "--compact-keep", "10")
    try:
        yield root
    finally:
        _tether("local", "down", "--data-dir", str(root))


def credentials(data_dir: Path) -> ClusterCredentials:
    return load_kubeconfig(data_dir / "kubeconfig", NAME)


def cm(name: str, namespace: str, **data: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": data}


_seq = iter(range(1_000_000))


async def new_namespace(client: KubeClient) -> str:
    name = f"inf-{next(_seq)}-{time.monotonic_ns() % 100000}"
    await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


async def eventually(check: Callable[[], Awaitable[bool] | bool], *, timeout_s: float = 15.0,
                     what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if await result if isinstance(result, Awaitable) else result:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[Informer]:
    """The informer's run() in a TaskGroup, cancelled on exit (structured, nothing leaks)."""
    async with asyncio.TaskGroup() as group:
        task = group.create_task(informer.run(), name=repr(informer))
        try:
            yield informer
        finally:
            task.cancel()


async def server_state(client: KubeClient, ns: str) -> dict[str, str]:
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"]
            for o in await client.list_objects("v1", "ConfigMap", ns)}


def cache_state(informer: Informer) -> dict[str, str]:
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in informer.list()}


async def test_cache_converges_and_feeds_the_engine(data_dir: Path) -> None:
    reconciled: list[ObjectKey] = []

    async def reconcile(key: ObjectKey) -> None:
        reconciled.append(key)

    engine: Engine[ObjectKey] = Engine("test", reconcile)
    events: list[WatchEvent] = []

    def on_event(event: WatchEvent) -> None:
        events.append(event)
        engine.enqueue(event.key)

    async with KubeClient(credentials(data_dir)) as client:
        ns = await new_namespace(client)
        await client.create(cm("before", ns, v="0"))
        informer = Informer(client, "v1", "ConfigMap", ns, on_event=on_event, backoff=FAST, page_size=2)
        async with asyncio.TaskGroup() as group, running(informer):
            engine_task = group.create_task(engine.run())
            await informer.wait_synced(timeout_s=10)
            assert informer.get(ns, "before") is not None
            for i in range(5):
                await client.create(cm(f"c{i}", ns, v="1"))
            await client.patch("v1", "ConfigMap", "c1", {"data": {"v": "2"}}, namespace=ns)
            await client.delete("v1", "ConfigMap", "c2", ns)
            expected = await server_state(client, ns)
            await eventually(lambda: cache_state(informer) == expected, what="cache == server")
            await eventually(lambda: ObjectKey(ns, "c4") in reconciled, what="engine reconcile")
            engine_task.cancel()
        assert informer.get(ns, "c2") is None
        assert informer.get(ns, "c1")["data"] == {"v": "2"}  # type: ignore[index]
        mine = [(e.type, e.key.name) for e in events if e.key.name == "c1"]
        assert mine == [("ADDED", "c1"), ("MODIFIED", "c1")]
        assert informer.relists == 1


async def test_transform_strips_managed_fields_from_listed_and_watched_objects(data_dir: Path) -> None:
    events: list[WatchEvent] = []
    async with KubeClient(credentials(data_dir)) as client:
        ns = await new_namespace(client)
        await client.apply(cm("listed", ns, v="0"), field_manager="test")
        informer = Informer(client, "v1", "ConfigMap", ns, on_event=events.append, backoff=FAST,
                            transform=strip_managed_fields)
        async with running(informer):
            await informer.wait_synced(timeout_s=10)
            await client.apply(cm("watched", ns, v="1"), field_manager="test")
            await eventually(lambda: informer.get(ns, "watched") is not None, what="watched cached")
        server = await client.get("v1", "ConfigMap", "watched", ns)
    assert server["metadata"]["managedFields"]  # the server has them; the cache does not
    for name in ("listed", "watched"):
        cached = informer.get(ns, name)
        assert cached is not None and "managedFields" not in cached["metadata"], cached
        assert cached["metadata"]["resourceVersion"]
    assert all("managedFields" not in e.object["metadata"] for e in events)


async def test_wait_synced_times_out_while_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    creds = ClusterCredentials.from_token(server=f"https://127.0.0.1:{port}", token="t", ca_bundle=None)
    async with KubeClient(creds, timeout_s=2) as client:
        informer = Informer(client, "v1", "ConfigMap", backoff=FAST)
        async with running(informer):
            with pytest.raises(TimeoutError):
                await informer.wait_synced(timeout_s=1.0)
            # the list inside is retried by the client first, then the informer backs off
            await eventually(lambda: isinstance(informer.last_error, Unreachable), what="Unreachable")
            assert str(port) in str(informer.last_error) and not informer.synced


class Partition:
    """A dialer that can cut this client off from the server (and refuse new connections)."""

    def __init__(self) -> None:
        self.cut = False
        self.refused = 0
        self._writers: list[asyncio.StreamWriter] = []

    async def dial(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        assert host.startswith("127.")
        if self.cut:
            self.refused += 1
            raise ConnectionRefusedError(f"partitioned from {host}:{port}")
        reader, writer = await asyncio.open_connection(host, port)
        self._writers.append(writer)
        return reader, writer

    def sever(self) -> None:
        self.cut = True
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()

    def heal(self) -> None:
        self.cut = False


async def test_relist_after_expired_with_synthetic_diff(data_dir: Path) -> None:
    partition = Partition()
    events: list[WatchEvent] = []
    async with KubeClient(credentials(data_dir)) as writer, \
            KubeClient(credentials(data_dir), connect=ConnectOptions(dialer=partition.dial)) as cut_off:
        ns = await new_namespace(writer)
        for name in ("stays", "changes", "goes"):
            await writer.create(cm(name, ns, v="1"))
        informer = Informer(cut_off, "v1", "ConfigMap", ns, on_event=events.append, backoff=FAST)
        async with running(informer):
            await informer.wait_synced(timeout_s=10)
            await eventually(lambda: informer.watches >= 1, what="watching")
            partition.sever()
            await eventually(lambda: partition.refused >= 1, what="a refused re-dial")
            events.clear()
            await writer.patch("v1", "ConfigMap", "changes", {"data": {"v": "2"}}, namespace=ns)
            await writer.delete("v1", "ConfigMap", "goes", ns)
            await writer.create(cm("new", ns, v="1"))
            for i in range(30):  # enough writes to compact the revision the informer holds
                await writer.apply(cm("churn", ns, i=str(i)), field_manager="t")
            assert informer.relists == 1
            partition.heal()
            expected = await server_state(writer, ns)
            await eventually(lambda: informer.relists >= 2, what="a relist after 410")
            await eventually(lambda: cache_state(informer) == expected, what="cache == server")
        seen = {(e.type, e.key.name) for e in events}
        assert {("MODIFIED", "changes"), ("DELETED", "goes"), ("ADDED", "new"), ("ADDED", "churn")} <= seen
        assert not any(e.key.name == "stays" for e in events)
        assert all(e.type != "BOOKMARK" for e in events)
        deleted = next(e for e in events if e.type == "DELETED")
        assert deleted.object["data"] == {"v": "1"}  # the last state the informer knew
        assert isinstance(informer.last_error, Expired)


async def test_survives_server_restart(data_dir: Path) -> None:
    async with KubeClient(credentials(data_dir)) as client:
        ns = await new_namespace(client)
        await client.create(cm("a", ns, v="1"))
        informer = Informer(client, "v1", "ConfigMap", ns, backoff=FAST)
        async with running(informer):
            await informer.wait_synced(timeout_s=10)
            await asyncio.to_thread(_tether, "local", "down", "--data-dir", str(data_dir))
            await eventually(lambda: isinstance(informer.last_error, Unreachable), what="Unreachable seen")
            failures_while_down = informer.failures
            await asyncio.sleep(1.0)
            assert informer.failures >= failures_while_down  # still retrying, with backoff
            await asyncio.to_thread(_tether, "local", "up", "--data-dir", str(data_dir), "--name", NAME,
                                    "--compact-keep", "10")
            await client.patch("v1", "ConfigMap", "a", {"data": {"v": "2"}}, namespace=ns, timeout_s=20)
            await client.create(cm("b", ns, v="1"))
            expected = await server_state(client, ns)
            await eventually(lambda: cache_state(informer) == expected, timeout_s=30, what="cache == server")
            await eventually(lambda: informer.failures == 0, timeout_s=30, what="a healthy watch")
        assert informer.get(ns, "a")["data"] == {"v": "2"}  # type: ignore[index]
