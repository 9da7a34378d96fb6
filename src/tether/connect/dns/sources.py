"""Where `tether dns` gets its records: watches on one cluster, no polling.

Informers (list, then watch; relist on 410) on:

- ServiceImports (`multicluster.x-k8s.io`, v1beta1 where served, else v1alpha1) and the
  EndpointSlices labelled `multicluster.kubernetes.io/service-name`;
- Services labelled `mirrored-svc=true` or `global-svc=true` (Semaphore's mirrors and global
  services) and the EndpointSlices labelled `mirrored-svc=true` or `mirrored-endpoint-slice=true`.

Every event marks the records stale; a rebuild follows after `settle_s` (a burst of events, a
relist of 1,000 Services, costs one rebuild), and the new `Table` is handed to `on_table`, which
swaps it in and empties the answer cache. The first table is handed over once every informer
has listed, so the server never answers NXDOMAIN for a name it has simply not seen yet.

A cluster without the MCS CRDs is watched for Semaphore's names only; discovery is asked again
every `crd_recheck_s` until ServiceImports appear.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tether.connect.dns.records import (
    DEFAULT_TTL,
    GLOBAL_SVC,
    MCS_SERVICE_NAME,
    MIRRORED_SLICE,
    MIRRORED_SVC,
    Table,
    build_table,
)
from tether.kube import Informer, KubeClient, KubeError, NotFound, WatchEvent, strip_managed_fields

log = logging.getLogger(__name__)

MCS_GROUP = "multicluster.x-k8s.io"
MCS_VERSIONS = ("v1beta1", "v1alpha1")


@dataclass(frozen=True)
class SourceConfig:
    prefixes: tuple[str, ...] = ()
    ttl: int = DEFAULT_TTL
    semaphore: bool = True
    mcs: bool = True
    settle_s: float = 0.02
    crd_recheck_s: float = 30.0


async def import_version(client: KubeClient) -> str | None:
    """The ServiceImport API version the cluster serves (the newest), or None."""
    for version in MCS_VERSIONS:
        try:
            await client.resource(f"{MCS_GROUP}/{version}", "ServiceImport")
            return f"{MCS_GROUP}/{version}"
        except NotFound:
            continue
    return None


class ClusterRecords:
    def __init__(self, client: KubeClient, on_table: Callable[[Table], None],
                 config: SourceConfig | None = None) -> None:
        self.client = client
        self.on_table = on_table
        self.config = config or SourceConfig()
        self._dirty = asyncio.Event()
        self._dirty.set()  # the first table is built once everything has listed, events or not
        self._serial = 0

        def informer(api_version: str, kind: str, selector: str) -> Informer:
            return Informer(client, api_version, kind, label_selector=selector, on_event=self._changed,
                            transform=strip_managed_fields)

        self.mirrors = informer("v1", "Service", f"{MIRRORED_SVC}=true")
        self.globals = informer("v1", "Service", f"{GLOBAL_SVC}=true")
        self.mirror_slices = informer("discovery.k8s.io/v1", "EndpointSlice", f"{MIRRORED_SVC}=true")
        self.global_slices = informer("discovery.k8s.io/v1", "EndpointSlice", f"{MIRRORED_SLICE}=true")
        self.mcs_slices = informer("discovery.k8s.io/v1", "EndpointSlice", MCS_SERVICE_NAME)
        self.imports: Informer | None = None
        self._informer = informer

    def _changed(self, _event: WatchEvent) -> None:
        self._dirty.set()

    @property
    def informers(self) -> list[Informer]:
        found = []
        if self.config.semaphore:
            found += [self.mirrors, self.globals, self.mirror_slices, self.global_slices]
        if self.config.mcs:
            found.append(self.mcs_slices)
            if self.imports is not None:
                found.append(self.imports)
        return found

    @property
    def synced(self) -> bool:
        return all(i.synced for i in self.informers)

    def build(self) -> Table:
        self._serial += 1
        imports = self.imports.list() if self.imports is not None else []
        mcs = self.config.mcs
        sem = self.config.semaphore
        return build_table(
            imports=imports if mcs else (), mcs_slices=self.mcs_slices.list() if mcs else (),
            mirrors=[*self.mirrors.list(), *self.globals.list()] if sem else (),
            mirror_slices=[*self.mirror_slices.list(), *self.global_slices.list()] if sem else (),
            prefixes=self.config.prefixes, ttl=self.config.ttl, serial=self._serial, semaphore=sem)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for informer in self.informers:
                group.create_task(informer.run())
            if self.config.mcs:
                group.create_task(self._find_imports(group))
            group.create_task(self._rebuild())

    async def _find_imports(self, group: asyncio.TaskGroup) -> None:
        while True:
            try:
                version = await import_version(self.client)
            except KubeError as exc:
                log.warning("dns: discovery of ServiceImports failed: %s", exc)
                version = None
            if version is not None:
                self.imports = self._informer(version, "ServiceImport", "")
                group.create_task(self.imports.run())
                log.info("dns: watching ServiceImports (%s)", version)
                return
            log.info("dns: %s has no ServiceImport API yet; clusterset.local answers only dns-version",
                     self.client.server)
            await asyncio.sleep(self.config.crd_recheck_s)

    async def _rebuild(self) -> None:
        first = True
        while True:
            await self._dirty.wait()
            await asyncio.sleep(self.config.settle_s)
            if first:
                await self._wait_synced(self.informers)
                first = False
            self._dirty.clear()
            self.on_table(self.build())

    @staticmethod
    async def _wait_synced(informers: Sequence[Informer]) -> None:
        for informer in informers:
            while not informer.synced:
                try:
                    await informer.wait_synced(3600.0)
                except TimeoutError:
                    continue
