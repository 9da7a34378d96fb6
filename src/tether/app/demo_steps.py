"""What every `tether demo` step does the same way: apply its objects, wait for a result, run a
component in the background, and ask an echo server by DNS name and HTTP.

The steps (`demo`, `demo_pull`, `demo_connect`, `demo_bridge`) differ in what they set up and
what they tell; these are the shared moves, so a fix to one (a wait that never ends, an answer
mis-read) reaches all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any, TypeVar

from tether.kube import KubeClient
from tether.net import dnsclient
from tether.net import dnswire as wire
from tether.net.tasks import cancel_and_wait
from tether.objects import Obj

FIELD_MANAGER = "tether-demo"
ANSWER_TIMEOUT_S = 5.0
POLL_S = 0.5
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
ECHO_PORT = 8080

T = TypeVar("T")


# objects -------------------------------------------------------------------------------------


def namespace(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def deployment(name: str, namespace: str, replicas: int, container: Obj) -> Obj:
    """A Deployment of `replicas` pods running `container`, labelled and selected by `app=name`."""
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
            "spec": {"replicas": replicas, "selector": {"matchLabels": dict(labels)},
                     "template": {"metadata": {"labels": dict(labels)},
                                  "spec": {"containers": [container]}}}}


def propagation_policy(deployment_name: str, namespace: str, placement: Obj) -> Obj:
    """Karmada's PropagationPolicy sending the Deployment `deployment_name` where `placement` says."""
    return {"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": deployment_name, "namespace": namespace},
            "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                            "name": deployment_name}],
                     "placement": placement}}


def echo_app(name: str, namespace: str, replicas: int, port: int,
             service_labels: Mapping[str, str]) -> tuple[Obj, Obj]:
    """A Deployment of `replicas` echo-server pods (ready once they accept TCP) and a Service
    `name` sending `port` to them, labelled `app=name`; the Service carries `service_labels`."""
    echo = {"name": "echo", "image": "tether/echo", "ports": [{"name": "http", "containerPort": ECHO_PORT}],
            "readinessProbe": {"tcpSocket": {"port": ECHO_PORT}, "periodSeconds": 1}}
    service: Obj = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(service_labels)},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": port, "targetPort": "http"}]}}
    return deployment(name, namespace, replicas, echo), service


async def apply_all(client: KubeClient, objects: Iterable[Obj], *, with_namespace: bool = False,
                    suffix: str = "") -> list[str]:
    """Server-side apply each object (idempotent: a second run confirms the same state) and
    name what was applied as `kind/name`, or `kind/namespace/name` with `with_namespace`."""
    applied = []
    for obj in objects:
        out = await client.apply(obj, field_manager=FIELD_MANAGER)
        meta = out["metadata"]
        where = f"{meta['namespace']}/" if with_namespace and meta.get("namespace") else ""
        applied.append(f"{obj['kind'].lower()}/{where}{meta['name']}{suffix}")
    return applied


def ready_addresses(slices: Iterable[Obj], service: str) -> tuple[str, ...]:
    """The addresses of `service`'s endpoints not marked unready, from its EndpointSlices."""
    found: set[str] = set()
    for piece in slices:
        labels: Mapping[str, str] = (piece.get("metadata") or {}).get("labels") or {}
        if labels.get(SERVICE_NAME_LABEL) != service:
            continue
        for endpoint in piece.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is not False:
                found.update(str(a) for a in endpoint.get("addresses") or [])
    return tuple(sorted(found))


# waiting and running -------------------------------------------------------------------------


async def poll(fetch: Callable[[], Awaitable[T]], done: Callable[[T], bool], timeout_s: float,
               interval_s: float = POLL_S) -> T:
    """`fetch()` until `done` says its result is there or `timeout_s` passed; the last result
    either way (the step tells what it got, not only that it timed out)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = await fetch()
        if done(result) or time.monotonic() >= deadline:
            return result
        await asyncio.sleep(interval_s)


@contextlib.asynccontextmanager
async def running(work: Coroutine[Any, Any, object]) -> AsyncIterator[None]:
    """`work` as a task for the block; one that fails at once (bad config) fails the block."""
    task = asyncio.create_task(work)
    try:
        await asyncio.sleep(0.1)
        if task.done():
            task.result()  # raise what stopped it right away
        yield
    finally:
        await cancel_and_wait(task)


# asking --------------------------------------------------------------------------------------


async def resolve(server: tuple[str, int], name: str, timeout_s: float = ANSWER_TIMEOUT_S) -> tuple[str, ...]:
    """The A records `server` gives for `name`, sorted; () when it does not answer."""
    query = wire.make_query(0x7E1E, name, wire.TYPE_A)
    try:
        answer = wire.parse_message(await dnsclient.exchange(query, [server], timeout_s=timeout_s))
    except (dnsclient.DnsClientError, wire.DnsFormatError):
        return ()
    return tuple(sorted(r.rdata.address for r in answer.answers if isinstance(r.rdata, wire.A)))


def describe_echo(raw: bytes) -> str:
    """Which pod an echo server's HTTP answer says it came from: "pod (IP) on node", or ""."""
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.") or b" 200 " not in head.split(b"\r\n", 1)[0] + b" ":
        return ""
    try:
        echo = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(echo, dict) or not echo.get("pod"):
        return ""
    return f"{echo['pod']} ({echo.get('podIP', '?')}) on {echo.get('node', '?')}"


async def http_get(host: str, port: int, timeout_s: float = ANSWER_TIMEOUT_S) -> str:
    """Which pod the echo server behind `host:port` says it is, or "" (no answer in time)."""
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(f"GET / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
                await writer.drain()
                raw = await reader.read(64 * 1024)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError):
        return ""
    return describe_echo(raw)
