"""The official Python clients against local clusters: kubernetes_asyncio, kubernetes, lightkube.

Spec: list and watch as kube-apiserver serves them (resourceVersion resume, bookmarks, 410
relist, ordered events). Every test works in its own namespace and asserts what the server sent.
Watches are bounded by `timeoutSeconds` or by a count of expected events under a generous
deadline; nothing here depends on how fast the server is.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2
import kubernetes
import pytest
import pytest_asyncio
from kubernetes import client as sync_client
from kubernetes import config as sync_config
from kubernetes import dynamic
from kubernetes import watch as sync_watch
from kubernetes_asyncio import client as aclient
from kubernetes_asyncio import config as aconfig
from kubernetes_asyncio import watch as awatch
from kubernetes_asyncio.client.exceptions import ApiException
from lightkube import ApiError as LightkubeApiError
from lightkube import Client as LightkubeClient
from lightkube import KubeConfig
from lightkube import operators as op
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap

if TYPE_CHECKING:
    from conftest import Clusters

pytestmark = pytest.mark.e2e

CONTEXT = "cluster1"
DEADLINE_S = 20.0  # an upper bound for waiting on events that must come; never reached when green


# fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def core_v1(clusters: Clusters) -> Iterator[sync_client.CoreV1Api]:
    api_client = sync_config.new_client_from_config(config_file=str(clusters.kubeconfig), context=CONTEXT)
    with api_client:
        yield sync_client.CoreV1Api(api_client)


@pytest.fixture
def namespace(core_v1: sync_client.CoreV1Api) -> Iterator[str]:
    name = f"pyc-{uuid.uuid4().hex[:8]}"
    core_v1.create_namespace({"metadata": {"name": name}})
    yield name
    with contextlib.suppress(kubernetes.client.ApiException):
        core_v1.delete_namespace(name)


@pytest_asyncio.fixture
async def av1(clusters: Clusters) -> AsyncIterator[aclient.CoreV1Api]:
    configuration = aclient.Configuration()
    await aconfig.load_kube_config(
        config_file=str(clusters.kubeconfig), context=CONTEXT, client_configuration=configuration
    )
    async with aclient.ApiClient(configuration) as api_client:
        yield aclient.CoreV1Api(api_client)


# Every namespace holds the cluster's CA bundle ConfigMap, as on real clusters; the tests
# count only the objects they made.
ROOT_CA = "kube-root-ca.crt"
NOT_ROOT_CA = f"metadata.name!={ROOT_CA}"


def cm(name: str, data: dict[str, str] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels is not None:
        meta["labels"] = labels
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    if data is not None:
        body["data"] = data
    return body


def status_body(exc: ApiException | kubernetes.client.ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


async def take(stream: awatch.Watch, count: int) -> list[dict[str, Any]]:
    """The next `count` events of a kubernetes_asyncio watch (bounded by DEADLINE_S)."""
    events: list[dict[str, Any]] = []
    async with asyncio.timeout(DEADLINE_S):
        async for event in stream:
            events.append(event)
            if len(events) == count:
                break
    return events


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str, dict[str, str] | None]]:
    return [(e["type"], e["raw_object"]["metadata"]["name"], e["raw_object"].get("data")) for e in events]


# kubernetes_asyncio: CRUD and errors ---------------------------------------------------------


async def test_asyncio_configmap_crud(av1: aclient.CoreV1Api, namespace: str) -> None:
    created = await av1.create_namespaced_config_map(namespace, cm("crud", {"a": "1"}, {"app": "crud"}))
    assert created.metadata.name == "crud"
    assert created.metadata.namespace == namespace
    assert created.metadata.uid
    assert int(created.metadata.resource_version) > 0
    assert created.metadata.creation_timestamp is not None
    assert created.data == {"a": "1"}

    read = await av1.read_namespaced_config_map("crud", namespace)
    assert read.metadata.uid == created.metadata.uid
    assert read.data == {"a": "1"}

    listed = await av1.list_namespaced_config_map(namespace, field_selector=NOT_ROOT_CA)
    assert [i.metadata.name for i in listed.items] == ["crud"]
    assert int(listed.metadata.resource_version) >= int(created.metadata.resource_version)

    read.data = {"a": "2", "b": "3"}
    replaced = await av1.replace_namespaced_config_map("crud", namespace, read)
    assert replaced.data == {"a": "2", "b": "3"}
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    assert replaced.metadata.uid == created.metadata.uid

    patched = await av1.patch_namespaced_config_map("crud", namespace, {"data": {"c": "4"}})
    assert patched.data == {"a": "2", "b": "3", "c": "4"}
    assert patched.metadata.labels == {"app": "crud"}

    status = await av1.delete_namespaced_config_map("crud", namespace)
    assert status.status == "Success"
    assert status.details.name == "crud"
    with pytest.raises(ApiException) as missing:
        await av1.read_namespaced_config_map("crud", namespace)
    assert missing.value.status == 404
    body = status_body(missing.value)
    assert body["reason"] == "NotFound"
    assert body["message"] == 'configmaps "crud" not found'


async def test_asyncio_create_twice_is_already_exists(av1: aclient.CoreV1Api, namespace: str) -> None:
    await av1.create_namespaced_config_map(namespace, cm("twice", {"k": "v"}))
    with pytest.raises(ApiException) as dup:
        await av1.create_namespaced_config_map(namespace, cm("twice", {"k": "other"}))
    assert dup.value.status == 409
    body = status_body(dup.value)
    assert body["kind"] == "Status"
    assert body["reason"] == "AlreadyExists"
    assert body["message"] == 'configmaps "twice" already exists'
    assert body["details"]["name"] == "twice"
    assert (await av1.read_namespaced_config_map("twice", namespace)).data == {"k": "v"}


async def test_asyncio_stale_replace_is_conflict(av1: aclient.CoreV1Api, namespace: str) -> None:
    first = await av1.create_namespaced_config_map(namespace, cm("stale", {"v": "1"}))
    stale_rv = first.metadata.resource_version
    fresh = await av1.read_namespaced_config_map("stale", namespace)
    fresh.data = {"v": "2"}
    await av1.replace_namespaced_config_map("stale", namespace, fresh)

    old = cm("stale", {"v": "3"})
    old["metadata"]["resourceVersion"] = stale_rv
    with pytest.raises(ApiException) as conflict:
        await av1.replace_namespaced_config_map("stale", namespace, old)
    assert conflict.value.status == 409
    body = status_body(conflict.value)
    assert body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]
    assert (await av1.read_namespaced_config_map("stale", namespace)).data == {"v": "2"}


async def test_asyncio_dry_run_create_does_not_persist(av1: aclient.CoreV1Api, namespace: str) -> None:
    before = await av1.list_namespaced_config_map(namespace, field_selector=NOT_ROOT_CA)
    dry = await av1.create_namespaced_config_map(namespace, cm("dry", {"x": "y"}), dry_run="All")
    assert dry.metadata.name == "dry"
    assert dry.data == {"x": "y"}
    with pytest.raises(ApiException) as missing:
        await av1.read_namespaced_config_map("dry", namespace)
    assert missing.value.status == 404
    after = await av1.list_namespaced_config_map(namespace, field_selector=NOT_ROOT_CA)
    assert after.items == []
    # A dry run writes nothing, so the global resourceVersion has not moved either.
    assert after.metadata.resource_version == before.metadata.resource_version


# kubernetes_asyncio: watch -------------------------------------------------------------------


async def test_asyncio_watch_sees_changes_in_order(av1: aclient.CoreV1Api, namespace: str) -> None:
    rv = (await av1.list_namespaced_config_map(namespace, field_selector=NOT_ROOT_CA)).metadata.resource_version
    async with awatch.Watch() as w:
        stream = w.stream(av1.list_namespaced_config_map, namespace, field_selector=NOT_ROOT_CA, resource_version=rv,
                          timeout_seconds=int(DEADLINE_S))
        reader = asyncio.ensure_future(take(stream, 6))
        await av1.create_namespaced_config_map(namespace, cm("a", {"n": "1"}))
        await av1.patch_namespaced_config_map("a", namespace, {"data": {"n": "2"}})
        await av1.create_namespaced_config_map(namespace, cm("b", {"n": "1"}))
        await av1.delete_namespaced_config_map("a", namespace)
        await av1.patch_namespaced_config_map("b", namespace, {"data": {"n": "2"}})
        await av1.delete_namespaced_config_map("b", namespace)
        events = await reader
    assert summary(events) == [
        ("ADDED", "a", {"n": "1"}),
        ("MODIFIED", "a", {"n": "2"}),
        ("ADDED", "b", {"n": "1"}),
        ("DELETED", "a", {"n": "2"}),
        ("MODIFIED", "b", {"n": "2"}),
        ("DELETED", "b", {"n": "2"}),
    ]
    versions = [int(e["raw_object"]["metadata"]["resourceVersion"]) for e in events]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert all(e["object"].kind == "ConfigMap" for e in events)


async def test_asyncio_watch_from_list_rv_resumes_with_later_events(
    av1: aclient.CoreV1Api, namespace: str
) -> None:
    await av1.create_namespaced_config_map(namespace, cm("early1", {"v": "1"}))
    await av1.create_namespaced_config_map(namespace, cm("early2", {"v": "1"}))
    listed = await av1.list_namespaced_config_map(namespace, field_selector=NOT_ROOT_CA)
    assert sorted(i.metadata.name for i in listed.items) == ["early1", "early2"]
    list_rv = listed.metadata.resource_version

    # Changes made after the list, before any watch exists.
    await av1.patch_namespaced_config_map("early1", namespace, {"data": {"v": "2"}})
    await av1.create_namespaced_config_map(namespace, cm("late", {"v": "1"}))
    await av1.delete_namespaced_config_map("early2", namespace)

    async with awatch.Watch() as w:
        stream = w.stream(av1.list_namespaced_config_map, namespace, field_selector=NOT_ROOT_CA, resource_version=list_rv,
                          timeout_seconds=int(DEADLINE_S), allow_watch_bookmarks=True)
        replayed = [e for e in await take(stream, 3) if e["type"] != "BOOKMARK"]
        assert summary(replayed) == [
            ("MODIFIED", "early1", {"v": "2"}),
            ("ADDED", "late", {"v": "1"}),
            ("DELETED", "early2", {"v": "1"}),
        ]
        assert all(int(e["raw_object"]["metadata"]["resourceVersion"]) > int(list_rv) for e in replayed)
        # Nothing else is pending: the next event is the one written now.
        await av1.create_namespaced_config_map(namespace, cm("sentinel"))
        nxt = [e for e in await take(stream, 1) if e["type"] != "BOOKMARK"]
        assert summary(nxt) == [("ADDED", "sentinel", None)]


async def test_asyncio_label_selector_watch_sees_delete_when_object_stops_matching(
    av1: aclient.CoreV1Api, namespace: str
) -> None:
    await av1.create_namespaced_config_map(namespace, cm("sel", {"v": "1"}, {"app": "a"}))
    listed = await av1.list_namespaced_config_map(namespace, field_selector=NOT_ROOT_CA, label_selector="app=a")
    assert [i.metadata.name for i in listed.items] == ["sel"]
    async with awatch.Watch() as w:
        stream = w.stream(av1.list_namespaced_config_map, namespace, field_selector=NOT_ROOT_CA, label_selector="app=a",
                          resource_version=listed.metadata.resource_version,
                          timeout_seconds=int(DEADLINE_S))
        reader = asyncio.ensure_future(take(stream, 4))
        await av1.create_namespaced_config_map(namespace, cm("other", {"v": "1"}, {"app": "b"}))
        await av1.patch_namespaced_config_map("sel", namespace, {"metadata": {"labels": {"app": "b"}}})
        await av1.patch_namespaced_config_map("other", namespace, {"data": {"v": "2"}})
        await av1.patch_namespaced_config_map("sel", namespace, {"data": {"v": "2"}})
        await av1.patch_namespaced_config_map("sel", namespace, {"metadata": {"labels": {"app": "a"}}})
        await av1.patch_namespaced_config_map("sel", namespace, {"data": {"v": "3"}})
        await av1.delete_namespaced_config_map("sel", namespace)
        events = await reader
    assert summary(events) == [
        ("DELETED", "sel", {"v": "1"}),  # relabelled away: gone for this watcher
        ("ADDED", "sel", {"v": "2"}),  # relabelled back: appears again
        ("MODIFIED", "sel", {"v": "3"}),
        ("DELETED", "sel", {"v": "3"}),
    ]
    assert events[0]["raw_object"]["metadata"]["labels"] == {"app": "b"}
    assert events[1]["raw_object"]["metadata"]["labels"] == {"app": "a"}


async def test_asyncio_watch_bookmarks(av1: aclient.CoreV1Api, namespace: str) -> None:
    await av1.create_namespaced_config_map(namespace, cm("bm", {"v": "1"}))
    rv = (await av1.list_namespaced_config_map(namespace, field_selector=NOT_ROOT_CA)).metadata.resource_version

    async def whole_stream(**kwargs: Any) -> list[dict[str, Any]]:
        async with awatch.Watch() as w:
            stream = w.stream(av1.list_namespaced_config_map, namespace, field_selector=NOT_ROOT_CA, resource_version=rv,
                              timeout_seconds=1, **kwargs)
            async with asyncio.timeout(DEADLINE_S):
                return [e async for e in stream]  # ends when the server closes at timeoutSeconds

    with_bookmarks = await whole_stream(allow_watch_bookmarks=True)
    bookmarks = [e for e in with_bookmarks if e["type"] == "BOOKMARK"]
    assert bookmarks, [e["type"] for e in with_bookmarks]
    for mark in bookmarks:
        assert mark["raw_object"]["kind"] == "ConfigMap"
        assert mark["raw_object"]["apiVersion"] == "v1"
        assert int(mark["raw_object"]["metadata"]["resourceVersion"]) >= int(rv)
    assert [e["type"] for e in with_bookmarks if e["type"] != "BOOKMARK"] == []

    without = await whole_stream()
    assert [e["type"] for e in without] == []


@pytest.fixture
def compacting_cluster(tmp_path: Path) -> Iterator[Path]:
    """A cluster in its own thread and event loop that keeps only 10 revisions of history."""
    from tether.local import kubeconfig
    from tether.local.cluster import ClusterConfig, LocalCluster

    ready = threading.Event()
    box: dict[str, Any] = {}

    def serve() -> None:
        async def main() -> None:
            cluster = LocalCluster(ClusterConfig(name="compact", data_dir=tmp_path / "compact", compact_keep=10))
            await cluster.start()
            box["cluster"] = cluster
            box["loop"] = asyncio.get_running_loop()
            box["task"] = asyncio.current_task()
            ready.set()
            with contextlib.suppress(asyncio.CancelledError):
                await cluster.run()

        try:
            asyncio.run(main())
        finally:
            ready.set()

    thread = threading.Thread(target=serve, name="compacting-cluster", daemon=True)
    thread.start()
    assert ready.wait(30) and "cluster" in box, "in-process cluster did not start"
    cluster = box["cluster"]
    path = kubeconfig.write(tmp_path / "kubeconfig",
                            [kubeconfig.ClusterAccess("compact", cluster.url, cluster.pki)])
    try:
        yield path
    finally:
        box["loop"].call_soon_threadsafe(box["task"].cancel)
        thread.join(15)
        assert not thread.is_alive()


async def test_asyncio_watch_after_compaction_gets_410_and_relists(compacting_cluster: Path) -> None:
    configuration = aclient.Configuration()
    await aconfig.load_kube_config(config_file=str(compacting_cluster), context="compact",
                                   client_configuration=configuration)
    async with aclient.ApiClient(configuration) as api_client:
        v1 = aclient.CoreV1Api(api_client)
        await v1.create_namespaced_config_map("default", cm("busy", {"n": "0"}))
        old_rv = (await v1.list_namespaced_config_map("default", field_selector=NOT_ROOT_CA)).metadata.resource_version
        for i in range(1, 41):  # 40 revisions > 2 x compact_keep: history before old_rv is gone
            await v1.patch_namespaced_config_map("busy", "default", {"data": {"n": str(i)}})

        async with awatch.Watch() as w:
            stream = w.stream(v1.list_namespaced_config_map, "default", field_selector=NOT_ROOT_CA, resource_version=old_rv,
                              timeout_seconds=int(DEADLINE_S))
            with pytest.raises(ApiException) as gone:
                await take(stream, 1)
        assert gone.value.status == 410
        assert "Expired" in str(gone.value.reason)
        assert f"too old resource version: {old_rv}" in str(gone.value.reason)

        # What an informer does next: relist, then watch from the new list's resourceVersion.
        relisted = await v1.list_namespaced_config_map("default", field_selector=NOT_ROOT_CA)
        assert [(i.metadata.name, i.data) for i in relisted.items] == [("busy", {"n": "40"})]
        assert int(relisted.metadata.resource_version) > int(old_rv)
        async with awatch.Watch() as w:
            stream = w.stream(v1.list_namespaced_config_map, "default", field_selector=NOT_ROOT_CA,
                              resource_version=relisted.metadata.resource_version,
                              timeout_seconds=int(DEADLINE_S))
            reader = asyncio.ensure_future(take(stream, 2))
            await v1.patch_namespaced_config_map("busy", "default", {"data": {"n": "41"}})
            await v1.delete_namespaced_config_map("busy", "default")
            events = await reader
        assert summary(events) == [("MODIFIED", "busy", {"n": "41"}), ("DELETED", "busy", {"n": "41"})]


# kubernetes (sync) ---------------------------------------------------------------------------


def test_sync_list_pages_with_limit_and_continue(core_v1: sync_client.CoreV1Api, namespace: str) -> None:
    names = [f"page-{i:02d}" for i in range(25)]
    for name in reversed(names):  # created out of order: the list must still be in key order
        core_v1.create_namespaced_config_map(namespace, cm(name, {"i": name[-2:]}))
    seen: list[str] = []
    pages: list[int] = []
    versions: set[str] = set()
    remaining: list[int | None] = []
    token: str | None = None
    while True:
        page = core_v1.list_namespaced_config_map(namespace, field_selector=NOT_ROOT_CA, limit=10, _continue=token)
        seen += [i.metadata.name for i in page.items]
        pages.append(len(page.items))
        versions.add(page.metadata.resource_version)
        remaining.append(page.metadata.remaining_item_count)
        token = page.metadata._continue
        if not token:
            break
        assert len(pages) < 10, "paging does not end"
    assert pages == [10, 10, 5]
    assert remaining == [15, 5, None]
    assert seen == names
    assert len(versions) == 1  # later pages report the first page's resourceVersion
    whole = core_v1.list_namespaced_config_map(namespace, field_selector=NOT_ROOT_CA)
    assert [i.metadata.name for i in whole.items] == names
    assert whole.metadata._continue is None


def test_sync_dynamic_client_resolves_deployments(clusters: Clusters, namespace: str) -> None:
    api_client = sync_config.new_client_from_config(config_file=str(clusters.kubeconfig), context=CONTEXT)
    with api_client:
        dyn = dynamic.DynamicClient(api_client)
        deployments = dyn.resources.get(api_version="apps/v1", kind="Deployment")
        assert deployments.name == "deployments"
        assert deployments.group == "apps"
        assert deployments.namespaced is True
        assert "create" in deployments.verbs and "watch" in deployments.verbs
        assert deployments.subresources["scale"].kind == "Scale"

        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "dyn"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "dyn"}},
                "template": {"metadata": {"labels": {"app": "dyn"}},
                             "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
            },
        }
        created = deployments.create(body=body, namespace=namespace)
        assert created.metadata.name == "dyn"
        fetched = deployments.get(name="dyn", namespace=namespace)
        assert fetched.metadata.uid == created.metadata.uid
        assert fetched.spec.replicas == 1
        listed = deployments.get(namespace=namespace)
        assert [i.metadata.name for i in listed.items] == ["dyn"]
        configmaps = dyn.resources.get(api_version="v1", kind="ConfigMap")
        assert configmaps.namespaced is True and configmaps.group == ""


def test_sync_watch_stream_with_timeout_ends_by_itself(
    core_v1: sync_client.CoreV1Api, namespace: str
) -> None:
    for name in ("w1", "w2"):
        core_v1.create_namespaced_config_map(namespace, cm(name, {"n": name}))
    w = sync_watch.Watch()
    events = list(w.stream(core_v1.list_namespaced_config_map, namespace, field_selector=NOT_ROOT_CA, timeout_seconds=2,
                           _request_timeout=DEADLINE_S))
    # No resourceVersion: the current state arrives as ADDED events, then the stream ends.
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "w1"), ("ADDED", "w2")]


# lightkube -----------------------------------------------------------------------------------


@pytest.fixture
def lk(clusters: Clusters) -> Iterator[LightkubeClient]:
    config = KubeConfig.from_file(clusters.kubeconfig).get(context_name=CONTEXT)
    client = LightkubeClient(config=config, timeout=httpx2.Timeout(DEADLINE_S))
    yield client


def test_lightkube_apply_creates_then_updates(lk: LightkubeClient, namespace: str) -> None:
    with pytest.raises(LightkubeApiError) as missing:
        lk.get(ConfigMap, "applied", namespace=namespace)
    assert missing.value.status.code == 404

    desired = ConfigMap(metadata=ObjectMeta(name="applied", namespace=namespace), data={"a": "1", "b": "2"})
    created = lk.apply(desired, field_manager="pytest")
    assert created.metadata is not None and created.metadata.uid
    assert created.data == {"a": "1", "b": "2"}
    managers = {m.manager for m in created.metadata.managedFields or []}
    assert managers == {"pytest"}

    desired = ConfigMap(metadata=ObjectMeta(name="applied", namespace=namespace), data={"a": "9"})
    updated = lk.apply(desired, field_manager="pytest")
    assert updated.metadata is not None
    assert updated.metadata.uid == created.metadata.uid
    assert int(updated.metadata.resourceVersion or 0) > int(created.metadata.resourceVersion or 0)
    assert updated.data == {"a": "9"}  # "b" is no longer applied by its only manager, so it is gone
    assert lk.get(ConfigMap, "applied", namespace=namespace).data == {"a": "9"}


def test_lightkube_watch_streams_events(lk: LightkubeClient, namespace: str) -> None:
    lk.create(ConfigMap(metadata=ObjectMeta(name="lw1"), data={"v": "1"}), namespace=namespace)
    seen: list[tuple[str, str, dict[str, str] | None]] = []
    stream = lk.watch(ConfigMap, namespace=namespace, fields={"metadata.name": op.not_equal(ROOT_CA)})
    try:
        for kind, obj in stream:
            assert obj.metadata is not None and obj.metadata.name is not None
            seen.append((kind, obj.metadata.name, obj.data))
            if len(seen) == 1:  # the current state has arrived: change things while watching
                lk.patch(ConfigMap, "lw1", {"data": {"v": "2"}}, namespace=namespace)
                lk.create(ConfigMap(metadata=ObjectMeta(name="lw2"), data={"v": "1"}), namespace=namespace)
                lk.delete(ConfigMap, "lw1", namespace=namespace)
            if len(seen) == 4:
                break
    finally:
        stream.close()
    assert seen == [
        ("ADDED", "lw1", {"v": "1"}),
        ("MODIFIED", "lw1", {"v": "2"}),
        ("ADDED", "lw2", {"v": "1"}),
        ("DELETED", "lw1", {"v": "2"}),
    ]


def test_lightkube_list_with_label_selectors(lk: LightkubeClient, namespace: str) -> None:
    for name, labels in [("l-a", {"tier": "a", "app": "x"}), ("l-b", {"tier": "b", "app": "x"}),
                         ("l-c", {"tier": "c"}), ("l-none", {})]:
        lk.create(ConfigMap(metadata=ObjectMeta(name=name, labels=labels)), namespace=namespace)

    def names(**labels: Any) -> list[str]:
        return [o.metadata.name for o in lk.list(ConfigMap, namespace=namespace, labels=labels, fields={"metadata.name": op.not_equal(ROOT_CA)})
                if o.metadata is not None and o.metadata.name is not None]

    assert names(app="x") == ["l-a", "l-b"]
    assert names(tier=op.in_(["a", "c"])) == ["l-a", "l-c"]
    assert names(tier=op.not_equal("a")) == ["l-b", "l-c", "l-none"]  # != also matches a missing key
    assert names(app=op.exists()) == ["l-a", "l-b"]
    assert names(app=op.not_exists()) == ["l-c", "l-none"]
    assert names(app="x", tier="b") == ["l-b"]
    assert names(app="nope") == []
