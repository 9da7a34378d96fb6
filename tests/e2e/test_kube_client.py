"""tether.kube.KubeClient against a real local cluster: CRUD, patches, errors, paging, discovery,
watch, unreachable servers, tokens, proxies and the client pool."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tether.kube import (
    AlreadyExists,
    BadRequest,
    ClientPool,
    ClusterCredentials,
    Conflict,
    Expired,
    Forbidden,
    Invalid,
    KubeClient,
    KubeError,
    NotFound,
    Preconditions,
    Unauthorized,
    Unreachable,
    load_kubeconfig,
)

pytestmark = pytest.mark.e2e
Obj = dict[str, Any]
NAME = "kc1"


@dataclass(frozen=True)
class Local:
    data_dir: Path

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "kubeconfig"

    @property
    def token(self) -> str:
        return (self.data_dir / "clusters" / NAME / "pki" / "admin.token").read_text().strip()

    def credentials(self) -> ClusterCredentials:
        return load_kubeconfig(self.kubeconfig, NAME)


def _tether(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                            timeout=90)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Local]:
    data_dir = tmp_path_factory.mktemp("kube-client")
    _tether("local", "up", "--data-dir", str(data_dir), "--name", NAME, "--compact-keep", "10")
    try:
        yield Local(data_dir)
    finally:
        _tether("local", "down", "--data-dir", str(data_dir))


@contextlib.asynccontextmanager
async def connected(local: Local, **kwargs: Any) -> AsyncIterator[KubeClient]:
    async with KubeClient(local.credentials(), **kwargs) as client:
        yield client


_seq = iter(range(1_000_000))


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_seq)}-{time.monotonic_ns() % 100000}"


def cm(name: str, namespace: str, **data: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": data}


async def new_namespace(client: KubeClient) -> str:
    name = unique("kube")
    await client.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, timeout_s=10)
    return name


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# CRUD and patches --------------------------------------------------------------------------


async def test_crud_and_every_patch_type(local: Local) -> None:
    async with connected(local) as client:
        ns = await new_namespace(client)
        created = await client.create(cm("c", ns, a="1"), timeout_s=10)
        assert created["metadata"]["uid"]
        got = await client.get("v1", "ConfigMap", "c", ns, timeout_s=10)
        assert got["data"] == {"a": "1"}

        merged = await client.patch("v1", "ConfigMap", "c", {"data": {"b": "2"}}, namespace=ns, timeout_s=10)
        assert merged["data"] == {"a": "1", "b": "2"}
        jsoned = await client.patch("v1", "ConfigMap", "c", [{"op": "remove", "path": "/data/a"}],
                                    namespace=ns, patch_type="json", timeout_s=10)
        assert jsoned["data"] == {"b": "2"}
        strategic = await client.patch("v1", "ConfigMap", "c", {"data": {"s": "3"}}, namespace=ns,
                                       patch_type="strategic", field_manager="smp", timeout_s=10)
        assert strategic["data"] == {"b": "2", "s": "3"}

        got = await client.get("v1", "ConfigMap", "c", ns, timeout_s=10)
        got["data"] = {"replaced": "yes"}
        replaced = await client.replace(got, timeout_s=10)
        assert replaced["data"] == {"replaced": "yes"}

        applied = await client.apply(cm("c", ns, replaced="yes", applied="1"), field_manager="t1", timeout_s=10)
        assert applied["data"]["applied"] == "1"
        dry = await client.apply(cm("c", ns, replaced="yes", applied="2"), field_manager="t1", dry_run=True,
                                 timeout_s=10)
        assert dry["data"]["applied"] == "2"
        assert (await client.get("v1", "ConfigMap", "c", ns))["data"]["applied"] == "1"

        await client.delete("v1", "ConfigMap", "c", ns, dry_run=True, timeout_s=10)
        await client.get("v1", "ConfigMap", "c", ns)  # still there
        await client.delete("v1", "ConfigMap", "c", ns, propagation_policy="Foreground", timeout_s=10)
        with pytest.raises(NotFound):
            await client.get("v1", "ConfigMap", "c", ns)


async def test_namespace_defaults_to_the_context_namespace(local: Local) -> None:
    async with connected(local) as client:
        name = unique("dflt")
        await client.apply(cm(name, "")| {"metadata": {"name": name}}, field_manager="t")
        assert (await client.get("v1", "ConfigMap", name))["metadata"]["namespace"] == "default"
        await client.delete("v1", "ConfigMap", name)


# errors -------------------------------------------------------------------------------------


async def test_errors_map_to_classes(local: Local) -> None:
    async with connected(local) as client:
        ns = await new_namespace(client)
        with pytest.raises(NotFound) as missing:
            await client.get("v1", "ConfigMap", "absent", ns, timeout_s=10)
        assert missing.value.code == 404 and "absent" in missing.value.message

        first = await client.create(cm("dup", ns), timeout_s=10)
        with pytest.raises(AlreadyExists):
            await client.create(cm("dup", ns), timeout_s=10)

        await client.patch("v1", "ConfigMap", "dup", {"data": {"x": "1"}}, namespace=ns)
        with pytest.raises(Conflict):
            await client.replace(first, timeout_s=10)  # stale resourceVersion
        with pytest.raises(Conflict):
            await client.delete("v1", "ConfigMap", "dup", ns, preconditions=Preconditions(uid="not-the-uid"))

        await client.apply(cm("ssa", ns, k="mine"), field_manager="owner")
        with pytest.raises(Conflict) as ssa:
            await client.apply(cm("ssa", ns, k="theirs"), field_manager="other", force=False)
        assert any(c.reason == "FieldManagerConflict" for c in ssa.value.causes)

        with pytest.raises(Invalid) as invalid:
            await client.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Not_Valid"}},
                                namespace=ns)
        assert invalid.value.code == 422 and invalid.value.causes

        with pytest.raises(BadRequest):
            await client.list_objects("v1", "ConfigMap", ns, "a in (", timeout_s=10)

        with pytest.raises(NotFound):
            await client.resource("v1", "NoSuchKind")
        with pytest.raises(NotFound):
            await client.resource("nothing.example.com/v1", "Thing")


async def test_forbidden_in_a_terminating_namespace(local: Local) -> None:
    async with connected(local) as client:
        ns = await new_namespace(client)
        held = cm("held", ns) | {"metadata": {"name": "held", "namespace": ns,
                                              "finalizers": ["example.com/hold"]}}
        await client.create(held)
        await client.delete("v1", "Namespace", ns)
        with pytest.raises(Forbidden):
            await client.create(cm("late", ns), timeout_s=10)
        await client.patch("v1", "ConfigMap", "held", {"metadata": {"finalizers": None}}, namespace=ns)


async def test_unauthorized_token_and_working_token(local: Local) -> None:
    creds = local.credentials()
    assert creds.ca_pem is not None
    good = ClusterCredentials.from_token(server=creds.server, token=local.token, ca_bundle=creds.ca_pem, name=NAME)
    assert local.token not in repr(good)
    async with KubeClient(good) as client:
        assert (await client.get("v1", "Namespace", "default", timeout_s=10))["metadata"]["name"] == "default"
    secret_data = {"token": base64.b64encode(local.token.encode()).decode(),
                   "caBundle": base64.b64encode(creds.ca_pem).decode()}
    from_secret = ClusterCredentials.from_secret_data(secret_data, server=creds.server)
    assert from_secret.ca_pem == creds.ca_pem and from_secret.token == local.token
    bad = replace(good, token="wrong-" + "x" * 20)
    async with KubeClient(bad) as client:
        with pytest.raises(Unauthorized) as denied:
            await client.get("v1", "Namespace", "default", timeout_s=10)
        assert "wrong-" not in str(denied.value)


async def test_watch_from_a_compacted_revision_is_expired(local: Local) -> None:
    async with connected(local) as client:
        ns = await new_namespace(client)
        start = (await client.list_all("v1", "ConfigMap", ns)).resource_version
        for i in range(30):  # --compact-keep 10: history older than ~10 revisions is dropped
            await client.apply(cm("churn", ns, i=str(i)), field_manager="t")
        with pytest.raises(Expired) as gone:
            async for _ in client.watch("v1", "ConfigMap", ns, resource_version=start, timeout_s=5):
                pass
        assert gone.value.code == 410


# unreachable servers -------------------------------------------------------------------------


async def test_unreachable_is_quick_and_names_the_address() -> None:
    port = free_port()
    creds = ClusterCredentials.from_token(server=f"https://127.0.0.1:{port}", token="secret-token-value",
                                          ca_bundle=None)
    async with KubeClient(creds) as client:
        started = time.monotonic()
        with pytest.raises(Unreachable) as refused:
            await client.get("v1", "Namespace", "default", timeout_s=5)
        assert time.monotonic() - started < 5
        assert f"127.0.0.1:{port}" in str(refused.value)
        assert "secret-token-value" not in str(refused.value)
        assert refused.value.request_sent is False
        with pytest.raises(Unreachable):  # writes are retried only because nothing was sent
            await client.create(cm("x", "default"), timeout_s=5)


async def test_silent_server_times_out_as_unreachable() -> None:
    with socket.socket() as silent:  # accepts TCP (backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        creds = ClusterCredentials.from_token(server=f"https://127.0.0.1:{port}", token="t", ca_bundle=None)
        async with KubeClient(creds, timeout_s=1.0) as client:
            started = time.monotonic()
            with pytest.raises(Unreachable) as slow:
                await client.server_version()
            assert time.monotonic() - started < 3
            assert f"127.0.0.1:{port}" in str(slow.value)


async def test_untrusted_certificate_is_unreachable(local: Local) -> None:
    creds = local.credentials()
    untrusted = ClusterCredentials.from_token(server=creds.server, token=local.token, ca_bundle=None)
    async with KubeClient(untrusted) as client:
        with pytest.raises(Unreachable) as tls:
            await client.healthz(timeout_s=5)
        assert creds.server in str(tls.value) and "CERTIFICATE" in str(tls.value).upper()


# paging, discovery, watch ----------------------------------------------------------------------


async def test_list_pages_transparently(local: Local) -> None:
    async with connected(local) as client:
        ns = await new_namespace(client)
        for i in range(23):
            await client.create(cm(f"p{i:02d}", ns, i=str(i)) | {"metadata": {
                "name": f"p{i:02d}", "namespace": ns, "labels": {"half": str(i % 2)}}})
        first = await client.request("GET", f"/api/v1/namespaces/{ns}/configmaps", params={"limit": "5"})
        assert first["metadata"].get("continue")  # the server really pages at this size
        listed = await client.list_all("v1", "ConfigMap", ns, limit=5, timeout_s=20)
        names = [o["metadata"]["name"] for o in listed.items if o["metadata"]["name"].startswith("p")]
        assert names == [f"p{i:02d}" for i in range(23)]
        assert listed.resource_version
        odd = await client.list_objects("v1", "ConfigMap", ns, "half=1", limit=4)
        assert len(odd) == 11
        one = await client.list_objects("v1", "ConfigMap", ns, field_selector="metadata.name=p07")
        assert [o["metadata"]["name"] for o in one] == ["p07"]


def crd(group: str, kind: str, plural: str) -> Obj:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                          "schema": {"openAPIV3Schema": {"type": "object",
                                                         "x-kubernetes-preserve-unknown-fields": True}}}],
        },
    }


async def test_crd_created_after_discovery_resolves(local: Local) -> None:
    group = f"{unique('g')}.example.com"
    async with connected(local) as client:
        ns = await new_namespace(client)
        with pytest.raises(NotFound):
            await client.resource(f"{group}/v1", "Widget")
        await client.create(crd(group, "Widget", "widgets"))
        widget = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": ns},
                  "spec": {"size": 1}}
        applied = await client.apply(widget, field_manager="t", timeout_s=10)
        assert applied["spec"] == {"size": 1}
        # a second kind in the now-cached group-version
        await client.create(crd(group, "Gadget", "gadgets"))
        assert (await client.resource(f"{group}/v1", "Gadget")).plural == "gadgets"
        # status subresource: apply_status changes only status
        res = await client.resource(f"{group}/v1", "Widget")
        assert "status" in res.subresources
        status = {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": ns},
                  "status": {"ready": True}}
        after = await client.apply_status(status, field_manager="status-writer", timeout_s=10)
        assert after["spec"] == {"size": 1}
        # The local server accepts SSA on /status but does not yet keep the applied status
        # (tether.local.operations._apply); a merge patch on the subresource does.
        patched = await client.patch(f"{group}/v1", "Widget", "w", {"status": {"ready": True}},
                                     namespace=ns, subresource="status", timeout_s=10)
        assert patched["status"] == {"ready": True} and patched["spec"] == {"size": 1}
        with pytest.raises(KubeError) as smp:  # custom resources have no strategic merge patch
            await client.patch(f"{group}/v1", "Widget", "w", {"spec": {"size": 2}}, namespace=ns,
                               patch_type="strategic")
        assert smp.value.code == 415


async def test_watch_sees_ordered_events_and_bookmarks(local: Local) -> None:
    async with connected(local) as client:
        ns = await new_namespace(client)
        start = (await client.list_all("v1", "ConfigMap", ns)).resource_version
        await client.create(cm("w", ns, v="1"))
        await client.patch("v1", "ConfigMap", "w", {"data": {"v": "2"}}, namespace=ns)
        await client.delete("v1", "ConfigMap", "w", ns)
        events = []
        async with contextlib.aclosing(client.watch("v1", "ConfigMap", ns, resource_version=start,
                                                    timeout_s=2)) as stream:
            async for event in stream:
                events.append(event)
        changes = [e for e in events if e.type != "BOOKMARK" and e.key.name == "w"]
        assert [e.type for e in changes] == ["ADDED", "MODIFIED", "DELETED"]
        rvs = [int(e.resource_version) for e in changes]
        assert rvs == sorted(rvs) and rvs[0] > int(start)
        assert events[-1].type == "BOOKMARK"  # sent before the server ends the stream
        assert int(events[-1].resource_version) >= rvs[-1]


async def test_stream_and_health(local: Local) -> None:
    async with connected(local) as client:
        assert (await client.server_version(timeout_s=5)).major == "1"
        assert await client.healthz(timeout_s=5) == (200, "ok")
        code, _ = await client.healthz("/livez", timeout_s=5)
        assert code == 200
        async with client.stream("GET", "/version", timeout_s=5) as raw:
            body = b"".join([chunk async for chunk in raw.chunks(idle_timeout_s=5)])
        assert json.loads(body)["major"] == "1"


# proxy, dialer, pool ---------------------------------------------------------------------------


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


class ConnectProxy:
    """A tiny HTTP CONNECT proxy on 127.0.0.1 that only tunnels to 127.0.0.1."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> ConnectProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        request_line, *header_lines = head.strip().split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in header_lines)}
        self.requests.append((request_line, headers))
        method, target, _ = request_line.split(" ")
        host, port = target.rsplit(":", 1)
        if method != "CONNECT" or host != "127.0.0.1":
            writer.write(b"HTTP/1.1 403 Forbidden\r\n\r\n")
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        self._writers += [writer, up_writer]
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        async with asyncio.TaskGroup() as group:
            group.create_task(_pipe(reader, up_writer))
            group.create_task(_pipe(up_reader, writer))


async def test_http_connect_proxy_with_headers(local: Local) -> None:
    creds = local.credentials()
    async with ConnectProxy() as proxy:
        via = replace(creds, proxy_url=proxy.url, proxy_headers=(("X-Cluster", NAME), ("X-Cluster", "b")))
        async with KubeClient(via) as client:
            assert (await client.get("v1", "Namespace", "default", timeout_s=10))["metadata"]["name"] == "default"
            events = [e async for e in client.watch("v1", "Namespace", timeout_s=1)]
            assert any(e.type == "ADDED" for e in events)
        port = creds.server.rsplit(":", 1)[1]
        line, headers = proxy.requests[0]
        assert line == f"CONNECT 127.0.0.1:{port} HTTP/1.1"
        assert "x-cluster" in headers
        karmada_style = ClusterCredentials.from_token(server=creds.server, token=local.token,
                                                      ca_bundle=creds.ca_pem, proxy_url=proxy.url,
                                                      proxy_headers={"Agent-Id": "a, b"})
        assert karmada_style.proxy_headers == (("Agent-Id", "a"), ("Agent-Id", "b"))
        async with KubeClient(karmada_style) as client:
            assert (await client.healthz(timeout_s=5))[0] == 200
    closed = ClusterCredentials.from_token(server=creds.server, token="t", ca_bundle=creds.ca_pem,
                                           proxy_url=f"http://user:pw@127.0.0.1:{free_port()}")
    async with KubeClient(closed) as client:
        with pytest.raises(Unreachable) as down:
            await client.healthz(timeout_s=3)
        assert "via proxy http://127.0.0.1:" in str(down.value) and "pw" not in str(down.value)


async def test_client_pool(local: Local) -> None:
    creds = local.credentials()
    async with ClientPool() as pool:
        a = await pool.set("a", creds)
        assert await pool.set("a", creds) is a
        b = await pool.set("b", replace(creds, namespace="kube-system"))
        assert pool.names() == ["a", "b"] and "a" in pool and len(pool) == 2
        results = await asyncio.gather(*(pool.get(n).get("v1", "Namespace", "default") for n in pool.names()))
        assert all(r["metadata"]["name"] == "default" for r in results)
        a2 = await pool.set("a", replace(creds, namespace="other"))
        assert a2 is not a and pool.get("a") is a2
        await pool.remove("b")
        with pytest.raises(KeyError):
            pool.get("b")
        assert b is not None
