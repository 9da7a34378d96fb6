"""The Python API: a target's environment and volumes, from a kubeconfig or a `KubeClient`.

    from tether import bridge
    env = bridge.environment("deploy/api", namespace="shop", context="dev")
    env.as_dict()["DB_HOST"]

The plain functions run their own event loop (in a thread when the caller already runs one, as a
notebook does); `resolve_environment` and `download_volumes` are the async forms for callers
that hold a `KubeClient`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tether.bridge.envresolve import (
    Environment,
    PodFacts,
    ServiceAddress,
    find_container,
    references,
    resolve,
)
from tether.bridge.target import parse_target, resolve_target
from tether.kube import Forbidden, KubeClient, load_kubeconfig
from tether.objects import ObjView as Obj

T = TypeVar("T")
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"


@dataclass(frozen=True)
class Resolved:
    """A target's pod (or template), the chosen container, and its environment."""

    facts: PodFacts
    container: Obj
    environment: Environment

    @property
    def namespace(self) -> str:
        return str((self.facts.pod.get("metadata") or {}).get("namespace") or "default")

    @property
    def container_name(self) -> str:
        return str(self.container.get("name", ""))


def pick_container(facts: PodFacts, name: str | None) -> Obj:
    spec = facts.pod.get("spec") or {}
    if name is None:
        annotations = (facts.pod.get("metadata") or {}).get("annotations") or {}
        name = annotations.get(DEFAULT_CONTAINER_ANNOTATION)
    return find_container(spec, name)


async def _fetch_named(client: KubeClient, kind: str, names: frozenset[str], namespace: str) -> dict[str, Obj]:
    found: dict[str, Obj] = {}
    for name in sorted(names):
        obj = await client.get_or_none("v1", kind, name, namespace)
        if obj is not None:
            found[name] = obj
    return found


async def _services(client: KubeClient, namespace: str, enable_links: bool) -> tuple[list[Obj], list[str]]:
    """The Services whose link variables the pod gets, and warnings for those tether may not read."""
    services: list[Obj] = []
    warnings: list[str] = []
    if enable_links:
        try:
            services = list(await client.list_objects("v1", "Service", namespace))
        except Forbidden:
            warnings.append(f"Service link variables left out: you may not list Services in {namespace}")
    if namespace != "default" or not enable_links:
        try:
            master = await client.get_or_none("v1", "Service", "kubernetes", "default")
        except Forbidden:
            master = None
            warnings.append("KUBERNETES_SERVICE_* left out: you may not read the Service default/kubernetes")
        if master is not None:
            services.append(master)
    return services, warnings


async def resolve_environment(client: KubeClient, target: str, *, namespace: str,
                              container: str | None = None,
                              addresses: Mapping[tuple[str, str], ServiceAddress] | None = None
                              ) -> Resolved:
    """The declared environment of `target`'s container, resolved as the kubelet would."""
    facts = await resolve_target(client, parse_target(target), namespace)
    chosen = pick_container(facts, container)
    refs = references(chosen)
    configmaps = await _fetch_named(client, "ConfigMap", refs.configmaps, namespace)
    secrets = await _fetch_named(client, "Secret", refs.secrets, namespace)
    spec = facts.pod.get("spec") or {}
    services, warnings = await _services(client, namespace, spec.get("enableServiceLinks") is not False)
    env = resolve(facts, chosen, configmaps=configmaps, secrets=secrets, services=services,
                  addresses=addresses)
    return Resolved(facts, chosen, Environment(env.variables, env.unresolved, env.warnings + tuple(warnings)))


def run_sync(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from synchronous code, also inside a running loop."""

    async def runner() -> T:
        return await make()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(runner())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, runner()).result()


def client_for(context: str | None, kubeconfig: Path | None) -> tuple[KubeClient, str]:
    credentials = load_kubeconfig(kubeconfig, context)
    return KubeClient(credentials), credentials.namespace


def environment(target: str, *, namespace: str | None = None, container: str | None = None,
                context: str | None = None, kubeconfig: Path | None = None,
                addresses: Mapping[tuple[str, str], ServiceAddress] | None = None) -> Environment:
    """`target`'s environment (see `resolve_environment`), for scripts, tests and notebooks."""

    async def run() -> Environment:
        client, default_namespace = client_for(context, kubeconfig)
        async with client:
            resolved = await resolve_environment(client, target, namespace=namespace or default_namespace,
                                                 container=container, addresses=addresses)
            return resolved.environment

    return run_sync(run)
