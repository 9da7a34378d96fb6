"""Netns mode: keeps every node's policy tables in step with policies, pods, namespaces and sets.

Reads the store, calls the pure `plan`, loads each node's script with one `nft -f` (atomic), and
posts a Warning Event (`PolicyNotEnforced`) on each policy, or Namespace, asking something the
enforcer cannot do, once per distinct message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from tether.local import events
from tether.local.netns import HostFabric, NetnsError, pod_link
from tether.local.netpolicy.plan import Endpoint, Plan, Problem, plan
from tether.local.nft import NftError, apply_ruleset
from tether.local.services.kernel import node_names_by_ip
from tether.local.services.watch import start_signals
from tether.local.store import Store
from tether.objects import Obj

if TYPE_CHECKING:
    from tether.local.operations import Operations

log = logging.getLogger(__name__)

PODS = "/pods"
NODES = "/nodes"
NAMESPACES = "/namespaces"
K8S_POLICIES = "networking.k8s.io/networkpolicies"
CALICO_POLICIES = "projectcalico.org/networkpolicies"
CALICO_GLOBAL_POLICIES = "projectcalico.org/globalnetworkpolicies"
NETWORK_SETS = "projectcalico.org/globalnetworksets"
WATCHED = (PODS, NODES, NAMESPACES, K8S_POLICIES, CALICO_POLICIES, CALICO_GLOBAL_POLICIES, NETWORK_SETS)
COMPONENT = "tether-policy"


def endpoint_of(pod: Obj) -> Endpoint | None:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    ip = str(status.get("podIP") or "")
    if not ip or status.get("phase") in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
        return None
    ports: dict[str, tuple[str, int]] = {}
    for container in spec.get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") and isinstance(port.get("containerPort"), int):
                ports[str(port["name"])] = (str(port.get("protocol") or "TCP").lower(), port["containerPort"])
    host = bool(spec.get("hostNetwork"))
    uid = str(meta.get("uid", ""))
    return Endpoint(uid=uid, namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")), ip=ip,
                    node=str(spec.get("nodeName") or ""),
                    labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
                    ports=ports, host_network=host, link="" if host else pod_link(uid))


class PolicyEnforcer:
    def __init__(self, store: Store, ops: Operations, fabric: HostFabric, *, resync_s: float = 10.0,
                 settle_s: float = 0.05) -> None:
        self.store = store
        self.ops = ops
        self.fabric = fabric
        self.resync_s = resync_s
        self.settle_s = settle_s
        self._changed = asyncio.Event()
        self._applied: dict[str, str] = {}
        self._reported: set[Problem] = set()
        self._failed = ""

    def current_plan(self, nodes: list[str]) -> Plan:
        lst = self.store.list_objects
        calico = [dict(p, kind="NetworkPolicy") for p in lst(CALICO_POLICIES)]
        calico += [dict(p, kind="GlobalNetworkPolicy") for p in lst(CALICO_GLOBAL_POLICIES)]
        k8s = [dict(p, kind="NetworkPolicy", apiVersion="networking.k8s.io/v1") for p in lst(K8S_POLICIES)]
        endpoints = [e for e in (endpoint_of(p) for p in lst(PODS)) if e is not None]
        fabric = self.fabric.network.fabric_cidr
        return plan(k8s_policies=k8s, calico_policies=calico, endpoints=endpoints, namespaces=lst(NAMESPACES),
                    network_sets=lst(NETWORK_SETS), nodes=nodes, always_allowed=[str(fabric)] if fabric else [])

    def _report(self, problems: tuple[Problem, ...]) -> None:
        for problem in problems:
            if problem in self._reported:
                continue
            self._reported.add(problem)
            involved: Obj = {"apiVersion": problem.api_version, "kind": problem.kind,
                             "metadata": {"name": problem.name, "namespace": problem.namespace}}
            found = self._lookup(problem)
            if found is not None:
                involved["metadata"] = found.get("metadata") or involved["metadata"]
            events.record(self.ops, involved, event_type="Warning", reason="PolicyNotEnforced",
                          message=problem.message, component=COMPONENT)
        self._reported &= set(problems)

    def _lookup(self, problem: Problem) -> Obj | None:
        resource = {"Namespace": NAMESPACES, "GlobalNetworkPolicy": CALICO_GLOBAL_POLICIES}.get(problem.kind)
        if resource is None:
            resource = K8S_POLICIES if problem.api_version.startswith("networking.k8s.io") else CALICO_POLICIES
        with contextlib.suppress(Exception):
            return self.store.get(resource, problem.namespace, problem.name)
        return None

    async def sync(self) -> None:
        names = node_names_by_ip(self.store.list_objects(NODES))
        namespaces = {names.get(ip, ""): ns for ip, ns in self.fabric.node_namespaces().items()}
        result = self.current_plan([n for n in namespaces if n])
        self._report(result.problems)
        for node, script in result.scripts.items():
            namespace = namespaces[node]
            if self._applied.get(namespace) == script:
                continue
            try:
                await apply_ruleset(namespace, script)
            except (NftError, NetnsError) as exc:
                if str(exc) != self._failed:
                    log.warning("policy enforcement in %s: %s", namespace, exc)
                self._failed = str(exc)
                continue
            self._applied[namespace] = script

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            start_signals(group, self.store, WATCHED, self._changed)
            while True:
                await self.sync()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.resync_s):  # wait_for may drop a cancel (3.11)
                        await self._changed.wait()
                await asyncio.sleep(self.settle_s)
                self._changed.clear()
