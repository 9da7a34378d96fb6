"""The hub's registry controller: decides pull members' ClusterRegistrationRequests.

A bootstrap token may only fill in its own request (`tether.federation.bootstrap`); this
controller, running in `tether hub run` with the hub's identity, does what needs privileges:

- a submitted request (its `spec.credentials` set) is checked against the token that owns it
  (the Secret `kube-system/bootstrap-token-<request name>`, which only admins can write): the
  token must be valid and unexpired and name the same cluster (`cluster.tether.io/bootstrap-for`),
  and the cluster must not clash with a registered one (`registry.check_conflicts`);
- approved: the execution namespace, the member credential Secret `tether-system/<name>`, the
  agent's ServiceAccount, token Secret and Roles (`bootstrap.agent_rbac`), its Lease, and the
  `Cluster` (`syncMode: Pull`) are applied; the credentials leave the request; its status gets
  `Approved`, the agent's token and `observedGeneration`. Denied: `Denied` with the reason;
- cleanup, by the token's state: a request whose token is gone or expired is deleted with the
  token's Role; a token whose request is gone (collected by `register`, or deleted) is used up
  and deleted. Bootstrap tokens are swept every `sweep_s` as well, so expiries are acted on
  without events. A request with no token yet is given `NEW_REQUEST_GRACE_S` (its token comes
  a moment later) unless the token was already seen: then it is gone, and cleaned up at once.

Decisions are the pure `plan`; the controller observes, plans and applies.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from tether.engine import Engine, RequeueAfter
from tether.federation import bootstrap, registry
from tether.federation.crds import CLUSTER_API_VERSION, REGISTRATION_KIND, execution_namespace
from tether.federation.health import HUB_NAMESPACE
from tether.kube import Informer, KubeClient, KubeError, NotFound, WatchEvent
from tether.objects import Obj
from tether.objects.times import rfc3339, seconds_of

log = logging.getLogger(__name__)

FIELD_MANAGER = "tether-registry-controller"
NEW_REQUEST_GRACE_S = 30.0  # `token create` makes the request before the token
# how soon a fresh request looks for its token again: only the request is watched, so the token
# (created a moment later) is found by looking, and a short-lived one is then acted on at its
# expiry rather than after the whole grace
TOKEN_RECHECK_S = 1.0
SWEEP_S = 30.0
LEASE_API = "coordination.k8s.io/v1"

Action = Literal["wait", "approve", "deny", "cleanup"]


@dataclass(frozen=True)
class Submission:
    cluster: str
    api_endpoint: str
    cluster_id: str
    proxy_url: str
    token: str  # the member credential; never logged
    ca_bundle: str  # base64 PEM

    def __repr__(self) -> str:
        return f"Submission({self.cluster!r}, {self.api_endpoint!r})"


@dataclass(frozen=True)
class Plan:
    action: Action
    message: str = ""
    submission: Submission | None = None
    delete_request: bool = False
    delete_token: bool = False
    recheck_s: float | None = None


def submission(request: Mapping[str, Any]) -> Submission | None:
    spec = request.get("spec") or {}
    credentials = spec.get("credentials") or {}
    if not credentials.get("token"):
        return None
    return Submission(cluster=str(spec.get("clusterName") or ""),
                      api_endpoint=str(spec.get("apiEndpoint") or ""),
                      cluster_id=str(spec.get("clusterID") or ""),
                      proxy_url=str(spec.get("proxyURL") or ""),
                      token=str(credentials.get("token") or ""),
                      ca_bundle=str(credentials.get("caBundle") or ""))


def token_expiry(secret: Mapping[str, Any]) -> float | None:
    raw = (secret.get("data") or {}).get("expiration")
    if not raw:
        return None
    try:
        return seconds_of(base64.b64decode(raw).decode()) or 0.0
    except (ValueError, UnicodeDecodeError):
        return 0.0


def plan(request: Mapping[str, Any] | None, token: Mapping[str, Any] | None,
         clusters: Sequence[Mapping[str, Any]], now: float, *, token_seen: bool = False) -> Plan:
    """What to do about one token's request (pure). `token_seen`: this controller has seen the
    token, so a missing one is gone (expired and removed by a token cleaner, or deleted), not
    yet to come."""
    if token is None or (token.get("metadata") or {}).get("deletionTimestamp"):
        if request is None:
            return Plan("cleanup")
        created = seconds_of((request.get("metadata") or {}).get("creationTimestamp"))
        if not token_seen and created is not None and now - created < NEW_REQUEST_GRACE_S:
            return Plan("wait", recheck_s=min(TOKEN_RECHECK_S, NEW_REQUEST_GRACE_S - (now - created)))
        return Plan("cleanup", "its bootstrap token is gone", delete_request=True)
    expires = token_expiry(token)
    if expires is not None and now >= expires:
        return Plan("cleanup", "its bootstrap token expired", delete_request=True,
                    delete_token=True)
    recheck = None if expires is None else expires - now
    if request is None:  # collected by `register` (or deleted): the token is used up
        return Plan("cleanup", "registration collected", delete_token=True)
    submitted = submission(request)
    if submitted is None:
        return Plan("wait", recheck_s=recheck)
    allowed = str(((token.get("metadata") or {}).get("labels") or {}).get(
        bootstrap.BOOTSTRAP_FOR_LABEL, ""))
    if not allowed:
        return Plan("deny", "the bootstrap token names no cluster", submitted, recheck_s=recheck)
    if submitted.cluster != allowed:
        return Plan("deny", f"the bootstrap token may register {allowed!r}, not "
                    f"{submitted.cluster!r}", submitted, recheck_s=recheck)
    try:
        registry.validate_name(submitted.cluster)
    except registry.RegistryError as exc:
        return Plan("deny", str(exc), submitted, recheck_s=recheck)
    endpoint = urlsplit(submitted.api_endpoint)
    if endpoint.scheme != "https" or not endpoint.hostname:
        return Plan("deny", f"apiEndpoint must be https://HOST[:PORT], got "
                    f"{submitted.api_endpoint!r}", submitted, recheck_s=recheck)
    if submitted.proxy_url and urlsplit(submitted.proxy_url).scheme not in ("http", "https"):
        return Plan("deny", f"proxyURL must be http(s)://HOST:PORT, got {submitted.proxy_url!r}",
                    submitted, recheck_s=recheck)
    try:
        registry.check_conflicts(submitted.cluster, submitted.api_endpoint, submitted.cluster_id,
                                 clusters)
    except registry.RegistryError as exc:
        return Plan("deny", str(exc), submitted, recheck_s=recheck)
    return Plan("approve", submission=submitted, recheck_s=recheck)


def hub_objects(submitted: Submission) -> list[Obj]:
    """What an approved registration creates on the hub, in order (the Cluster last but for the
    agent's token)."""
    name = submitted.cluster
    spec: Obj = {"id": submitted.cluster_id, "syncMode": "Pull",
                 "apiEndpoint": submitted.api_endpoint,
                 "secretRef": {"namespace": HUB_NAMESPACE, "name": name}}
    if submitted.proxy_url:
        spec["proxyURL"] = submitted.proxy_url
    token_b64 = base64.b64encode(submitted.token.encode()).decode()
    return [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": execution_namespace(name), "labels": registry.labels(name)}},
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": name, "namespace": HUB_NAMESPACE, "labels": registry.labels(name)},
         "data": {"token": token_b64, "caBundle": submitted.ca_bundle}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": registry.agent_account(name), "namespace": HUB_NAMESPACE,
                      "labels": {bootstrap.AGENT_FOR_LABEL: name}}},
        *bootstrap.agent_rbac(name),
        {"apiVersion": LEASE_API, "kind": "Lease",
         "metadata": {"name": name, "namespace": HUB_NAMESPACE,
                      "labels": {bootstrap.AGENT_FOR_LABEL: name}},
         "spec": {"holderIdentity": name}},
        {"apiVersion": CLUSTER_API_VERSION, "kind": "Cluster",
         "metadata": {"name": name, "labels": {}}, "spec": spec},
        bootstrap.agent_token_secret_object(name),
    ]


def decision_status(kind: str, reason: str, message: str, generation: int, now: float,
                    agent_token: str = "") -> Obj:
    status: Obj = {"observedGeneration": generation,
                   "conditions": [{"type": kind, "status": "True", "reason": reason,
                                   "message": message, "lastTransitionTime": rfc3339(now)}]}
    if agent_token:
        status["agentToken"] = agent_token
    return status


class RegistrationController:
    """`await run()` in the hub's TaskGroup."""

    def __init__(self, host: KubeClient, *, sweep_s: float = SWEEP_S,
                 clock: Any = time.time) -> None:
        self.host = host
        self.sweep_s = sweep_s
        self.clock = clock
        self.requests = Informer(host, CLUSTER_API_VERSION, REGISTRATION_KIND, HUB_NAMESPACE,
                                 on_event=self._on_event)
        self.engine: Engine[str] = Engine("registry-controller", self._reconcile)
        self.decisions: dict[str, int] = {}  # approved/denied, for metrics and tests
        self._seen_tokens: set[str] = set()  # token ids seen since start (forgotten at cleanup)

    @property
    def synced(self) -> bool:
        return self.requests.synced

    def _on_event(self, event: WatchEvent) -> None:
        if event.key.name:
            self.engine.enqueue(event.key.name)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.requests.run())
            group.create_task(self.engine.run())
            group.create_task(self._sweep())

    async def _sweep(self) -> None:
        while True:
            try:
                tokens = await self.host.list_objects(
                    "v1", "Secret", bootstrap.TOKEN_NAMESPACE,
                    label_selector=bootstrap.BOOTSTRAP_LABEL)
                for secret in tokens:
                    token_id = str(((secret.get("metadata") or {}).get("labels") or {}).get(
                        bootstrap.BOOTSTRAP_LABEL, ""))
                    if token_id:
                        self.engine.enqueue(token_id, background=True)
                for request in self.requests.list():
                    self.engine.enqueue(request["metadata"]["name"], background=True)
            except KubeError as exc:
                log.warning("registry controller: cannot list bootstrap tokens: %s", exc)
            await asyncio.sleep(self.sweep_s)

    async def _token(self, token_id: str) -> Obj | None:
        try:
            return await self.host.get("v1", "Secret", bootstrap.token_secret_name(token_id),
                                       bootstrap.TOKEN_NAMESPACE)
        except NotFound:
            return None

    async def _reconcile(self, token_id: str) -> None:
        request = self.requests.get(HUB_NAMESPACE, token_id)
        token = await self._token(token_id)
        clusters: list[Obj] = []
        if request is not None and submission(request) is not None:
            clusters = await self.host.list_objects(CLUSTER_API_VERSION, "Cluster")
        now = self.clock()
        if token is not None:
            self._seen_tokens.add(token_id)
        decided = plan(request, token, clusters, now, token_seen=token_id in self._seen_tokens)
        if decided.action == "cleanup":
            await self._cleanup(token_id, decided)
            self._seen_tokens.discard(token_id)
        elif decided.action == "deny":
            assert request is not None
            await self._decide(request, bootstrap.DENIED, "RegistrationDenied", decided.message)
        elif decided.action == "approve":
            assert request is not None and decided.submission is not None
            await self._approve(request, decided.submission)
        if decided.recheck_s is not None and decided.action != "cleanup":
            raise RequeueAfter(max(decided.recheck_s, 0.1))

    async def _cleanup(self, token_id: str, decided: Plan) -> None:
        if decided.message:
            log.info("bootstrap token %s: %s; cleaning up", token_id, decided.message)
        leftovers = bootstrap.token_leftovers(token_id)
        if not decided.delete_request:
            leftovers = [item for item in leftovers if item[1] != REGISTRATION_KIND]
        for api_version, kind, name, namespace in leftovers:
            await _delete(self.host, api_version, kind, name, namespace)
        if decided.delete_token:
            await _delete(self.host, "v1", "Secret", bootstrap.token_secret_name(token_id),
                          bootstrap.TOKEN_NAMESPACE)

    async def _approve(self, request: Obj, submitted: Submission) -> None:
        name = submitted.cluster
        for obj in hub_objects(submitted):
            if obj["kind"] == "Lease":
                await _create_once(self.host, obj)  # the agent renews it; never reset
            else:
                await self.host.apply(obj, field_manager=FIELD_MANAGER)
        secret = await self.host.get("v1", "Secret", registry.agent_token_secret(name),
                                     HUB_NAMESPACE)
        token = (secret.get("data") or {}).get("token")
        if not token:
            raise RequeueAfter(0.2)  # the token controller fills it shortly
        log.info("registration of pull cluster %s approved (%s)", name, submitted.api_endpoint)
        await self._decide(request, bootstrap.APPROVED, "RegistrationApproved",
                           f"cluster {name} registered in Pull mode",
                           base64.b64decode(token).decode())

    async def _decide(self, request: Obj, kind: str, reason: str, message: str,
                      agent_token: str = "") -> None:
        meta = request["metadata"]
        path = f"{bootstrap.REQUESTS_PATH}/{meta['name']}"
        generation = int(meta.get("generation") or 1)
        if kind == bootstrap.DENIED:
            log.info("registration request %s denied: %s", meta["name"], message)
        try:
            # the member credential is in the Secret now (or refused): not kept in the request
            await self.host.request("PATCH", path, body={"spec": {"credentials": None}},
                                    content_type="application/merge-patch+json",
                                    params={"fieldManager": FIELD_MANAGER})
            status = decision_status(kind, reason, message, generation, self.clock(), agent_token)
            await self.host.request("PATCH", f"{path}/status", body={"status": status},
                                    content_type="application/merge-patch+json",
                                    params={"fieldManager": FIELD_MANAGER})
        except NotFound:
            pass  # collected or deleted meanwhile
        self.decisions[kind] = self.decisions.get(kind, 0) + 1


async def _delete(host: KubeClient, api_version: str, kind: str, name: str,
                  namespace: str | None) -> None:
    try:
        await host.delete(api_version, kind, name, namespace)
    except NotFound:
        pass


async def _create_once(host: KubeClient, obj: Obj) -> None:
    try:
        await host.create(obj, field_manager=FIELD_MANAGER)
    except KubeError as exc:
        if exc.code != 409:
            raise
