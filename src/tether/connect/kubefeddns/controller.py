"""KubeFed's Service DNS, Ingress DNS and DNS Endpoint controllers, in one, on the hub.

Watches on the hub: Domains, ServiceDNSRecords, IngressDNSRecords and DNSEndpoints; on each
Ready member (given by `members()` with credentials, zones and region): Services, EndpointSlices
and Ingresses. Any change enqueues the record it concerns (a member's Service `ns/name` concerns
the ServiceDNSRecord of the same name, as in KubeFed). A reconcile writes the record's status
(`records.service_status` / `ingress_status`) and applies its DNSEndpoint (`service-<name>` /
`ingress-<name>`, owned by the record, so it goes with it) when either differs from what the
watch holds. Hostname load balancers are resolved to addresses off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tether.connect.fleetwatch import FleetWatcher
from tether.connect.kubefeddns import records as R
from tether.connect.kubefeddns.crds import multicluster_dns_crds
from tether.engine import Engine
from tether.kube import (
    AlreadyExists,
    ClusterCredentials,
    Forbidden,
    Informer,
    KubeClient,
    KubeError,
    WatchEvent,
    strip_managed_fields,
)
from tether.objects import Obj

log = logging.getLogger(__name__)
FIELD_MANAGER = "tether-kubefed-dns"
MEMBERS_RECHECK_S = 10.0
KUBEFED_NAMESPACE = "kube-federation-system"
Key = tuple[str, str, str]  # ("service" | "ingress", namespace, name)


@dataclass(frozen=True)
class Member:
    view: R.ClusterView
    credentials: ClusterCredentials


@dataclass
class _Member:
    member: Member
    client: KubeClient
    informers: dict[str, Informer] = field(default_factory=dict)

    @property
    def synced(self) -> bool:
        return bool(self.informers) and all(i.synced for i in self.informers.values())


def _refresh(state: _Member, member: Member) -> bool:
    """Same credentials: only the zones and region of the member may have changed."""
    if state.member.view == member.view:
        return False
    state.member = member
    return True


def _resolve(hostname: str) -> list[str]:
    try:
        infos = socket.getaddrinfo(hostname, None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError as exc:
        log.warning("kubefed dns: cannot resolve load balancer %s: %s", hostname, exc)
        return []
    return sorted({str(i[4][0]) for i in infos})


def _same(a: object, b: object) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


class KubeFedDnsController:
    def __init__(self, host: KubeClient, members: Callable[[], Iterable[Member]], *,
                 crds: list[Obj] | None = None) -> None:
        self.host = host
        self.members = members
        self.crds = crds if crds is not None else multicluster_dns_crds()
        self.engine: Engine[Key] = Engine("kubefed-dns", self._reconcile, workers=2)
        self.fleet: FleetWatcher[Member, _Member] = FleetWatcher(
            "kubefed dns", self.members, name=lambda m: m.view.name, credentials=lambda m: m.credentials,
            join=self._join, serve=self._run_member, refresh=_refresh, changed=self._enqueue_all,
            recheck_s=MEMBERS_RECHECK_S)
        self.states: dict[str, _Member] = self.fleet.states

        def hub(kind: str, key: str) -> Informer:
            return Informer(host, R.API_VERSION, kind, transform=strip_managed_fields,
                            on_event=lambda e: self._hub_event(key, e))

        self.domains = hub("Domain", "domain")
        self.service_records = hub("ServiceDNSRecord", "service")
        self.ingress_records = hub("IngressDNSRecord", "ingress")
        self.endpoints = hub("DNSEndpoint", "endpoint")

    def members_changed(self) -> None:
        self.fleet.members_changed()

    async def run(self) -> None:
        await self._ensure_crds()
        async with asyncio.TaskGroup() as group:
            for informer in (self.domains, self.service_records, self.ingress_records, self.endpoints):
                group.create_task(informer.run())
            group.create_task(self.engine.run())
            group.create_task(self.fleet.run())

    async def _ensure_crds(self) -> None:
        for crd in self.crds:
            name = crd["metadata"]["name"]
            for _ in range(30):
                try:
                    if await self.host.get_or_none("apiextensions.k8s.io/v1", "CustomResourceDefinition",
                                                   name) is None:
                        await self.host.create(crd, field_manager=FIELD_MANAGER)
                    break
                except AlreadyExists:
                    break
                except Forbidden as exc:
                    log.error("kubefed dns: cannot install %s (%s); install it with cluster-admin rights", name,
                              exc.message)
                    break
                except KubeError as exc:
                    log.warning("kubefed dns: %s: %s; retrying", name, exc)
                    await asyncio.sleep(2.0)

    # members --------------------------------------------------------------------------------

    def _join(self, member: Member, client: KubeClient) -> _Member:
        state = _Member(member, client)
        for key, api, kind in (("services", "v1", "Service"), ("slices", "discovery.k8s.io/v1", "EndpointSlice"),
                               ("ingresses", "networking.k8s.io/v1", "Ingress")):
            state.informers[key] = Informer(client, api, kind, transform=strip_managed_fields,
                                            on_event=self._member_handler(key))
        return state

    async def _run_member(self, state: _Member) -> None:
        async with asyncio.TaskGroup() as group:
            for informer in state.informers.values():
                group.create_task(informer.run())
            for informer in state.informers.values():
                while not informer.synced:
                    with contextlib.suppress(TimeoutError):
                        await informer.wait_synced(3600.0)
            self._enqueue_all()

    # events ---------------------------------------------------------------------------------

    def _hub_event(self, key: str, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if key in ("service", "ingress"):
            self.engine.enqueue((key, ns, name))
        elif key == "endpoint":
            kind, _, record = name.partition("-")
            if kind in ("service", "ingress") and record:
                self.engine.enqueue((kind, ns, record))
        elif key == "domain":
            self._enqueue_all()

    def _member_handler(self, kind: str) -> Callable[[WatchEvent], None]:
        return lambda event: self._member_event(kind, event)

    def _member_event(self, kind: str, event: WatchEvent) -> None:
        meta = event.object.get("metadata") or {}
        ns = str(meta.get("namespace") or "")
        if kind == "services":
            self.engine.enqueue(("service", ns, str(meta.get("name") or "")))
        elif kind == "slices":
            service = (meta.get("labels") or {}).get("kubernetes.io/service-name")
            if service:
                self.engine.enqueue(("service", ns, str(service)))
        else:
            self.engine.enqueue(("ingress", ns, str(meta.get("name") or "")))

    def _enqueue_all(self) -> None:
        for key in self.service_records.keys():  # noqa: SIM118 (an Informer)
            self.engine.enqueue(("service", key.namespace, key.name))
        for key in self.ingress_records.keys():  # noqa: SIM118 (an Informer)
            self.engine.enqueue(("ingress", key.namespace, key.name))

    # reconcile ------------------------------------------------------------------------------

    def _domain(self, ref: str) -> str | None:
        found = [d for d in self.domains.list() if (d.get("metadata") or {}).get("name") == ref]
        found.sort(key=lambda d: (d.get("metadata") or {}).get("namespace") != KUBEFED_NAMESPACE)
        return str(found[0].get("domain") or "") or None if found else None

    async def _reconcile(self, key: Key) -> None:
        kind, ns, name = key
        informer = self.service_records if kind == "service" else self.ingress_records
        record = informer.get(ns, name)
        if record is None or (record.get("metadata") or {}).get("deletionTimestamp"):
            return  # its DNSEndpoint is owned by it: garbage collection removes it
        states = [s for s in self.states.values() if s.synced]
        views = [s.member.view for s in states]
        if kind == "service":
            ref = str((record.get("spec") or {}).get("domainRef") or "")
            domain = self._domain(ref)
            if domain is None:
                log.warning("kubefed dns: ServiceDNSRecord %s/%s: no Domain %r", ns, name, ref)
                return
            services = {s.member.view.name: s.informers["services"].get(ns, name) for s in states}
            slices = {s.member.view.name: [x for x in s.informers["slices"].list()
                                           if (x.get("metadata") or {}).get("namespace") == ns
                                           and ((x.get("metadata") or {}).get("labels") or {}).get(
                                               "kubernetes.io/service-name") == name] for s in states}
            status = R.service_status(record, domain, views, services, slices)
        else:
            ingresses = {s.member.view.name: s.informers["ingresses"].get(ns, name) for s in states}
            status = R.ingress_status(views, ingresses)
        if not _same({k: (record.get("status") or {}).get(k) for k in status}, status):
            record = await self.host.apply_status(
                {"apiVersion": R.API_VERSION, "kind": record.get("kind"), "metadata": {"name": name, "namespace": ns},
                 "status": status}, field_manager=FIELD_MANAGER)
        else:
            record = {**record, "status": {**(record.get("status") or {}), **status}}
        resolver = asyncio.get_running_loop()

        def resolve(hostname: str) -> list[str]:
            return _resolve(hostname)

        builder = R.service_endpoints if kind == "service" else R.ingress_endpoints
        needs_lookup = any(not _is_ip(t) for e in status.get("dns") or []
                           for t in R.load_balancer_targets(e.get("loadBalancer")))
        if needs_lookup:
            endpoints = await resolver.run_in_executor(None, lambda: builder(record, resolve))
        else:
            endpoints = builder(record, None)
        wanted = R.dns_endpoint(kind, record, endpoints)
        current = self.endpoints.get(ns, wanted["metadata"]["name"])
        if current is None or not _same((current.get("spec") or {}).get("endpoints") or [],
                                        wanted["spec"]["endpoints"]):
            await self.host.apply(wanted, field_manager=FIELD_MANAGER)


def _is_ip(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False
