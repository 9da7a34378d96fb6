"""Intercept sessions in a cluster: what `tether intercept` creates, and how it is undone.

One session is one route-as name in one namespace. Its ConfigMap `tether-intercept-NAME`
(labels `tether.io/bridge-session`, `tether.io/intercepted-service`) records who, since when,
the mode (header or `--all`), the digest of the token its parked connections present, and the
Service's original selector; a Lease of the same name (owned by it) is renewed by the client.
Per intercepted Service, the sessions share a router (ServiceAccount, Role, RoleBinding,
Deployment `SVC-tether-router`) and the cloned Service `SVC-cloned-routing-svc` (headless,
the original selector: the router dials its endpoints); each session is one of their owners,
so the garbage collector removes them with the last session. Everything is written with the
field manager `tether-bridge`.

The Service's selector is moved to the router pods, and moved back when the last session ends,
with a merge patch that states the whole selector (the selector map must end up exactly equal,
whoever owned which key). A selector someone else changed meanwhile (a GitOps controller putting
it back) is reported (an Event, an annotation on the sessions) and left alone.

The router ends sessions whose Lease expired (`--restore-after`, default 30 s): a client that
was SIGKILLed or went to sleep leaves nothing behind; one that returns before expiry resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.bridge import routing
from tether.bridge.channel import BridgeError
from tether.bridge.target import KINDS
from tether.kube import AlreadyExists, Conflict, KubeClient, KubeError, NotFound, Preconditions
from tether.net.daemon import state_home
from tether.objects import ObjView as Obj
from tether.objects.selectors import label_selector_to_string
from tether.objects.times import micro_time, now_rfc3339, parse_time
from tether.version import IMAGE

log = logging.getLogger(__name__)

FIELD_MANAGER = "tether-bridge"
MANAGED_BY = {"app.kubernetes.io/managed-by": "tether"}
SESSION_LABEL = "tether.io/bridge-session"
SERVICE_LABEL = "tether.io/intercepted-service"
OBJECT_LABEL = "tether.io/bridge-object"
REQUESTS_ANNOTATION = "tether.io/requests-routed"
DRIFT_ANNOTATION = "tether.io/selector-drift"
LEAVING_ANNOTATION = "tether.io/leaving"  # set by `end`: the router stops routing to the session
RELEASED_ANNOTATION = "tether.io/router-released"  # the router's answer: it routes nothing there now
RELEASE_WAIT_S = 5.0
PARK_PORT = 15021
DEFAULT_RESTORE_AFTER_S = 30
ROUTER_USER = 65532



class InterceptError(BridgeError):
    """An intercept cannot be made or undone; the message says why and what to do."""


# what the user asked for --------------------------------------------------------------------


def parse_port(text: str) -> tuple[int, int | None]:
    """`--port LOCAL[:REMOTE]`."""
    local, _, remote = text.partition(":")
    try:
        ports = int(local), (int(remote) if remote else None)
    except ValueError:
        raise InterceptError(f"--port {text!r}: use LOCAL or LOCAL:REMOTE with port numbers, as in 3001:80") from None
    if not all(p is None or 0 < p < 65536 for p in ports):
        raise InterceptError(f"--port {text!r}: ports run from 1 to 65535")
    return ports


def _selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def service_port(service: Obj, remote: int | None) -> int:
    """The Service port the intercept takes: `remote`, or the only one."""
    ports = [int(p["port"]) for p in (service.get("spec") or {}).get("ports") or []]
    name = service["metadata"]["name"]
    if remote is None:
        if len(ports) != 1:
            raise InterceptError(f'service "{name}" exposes ports {ports}: say which with --port LOCAL:REMOTE')
        return ports[0]
    if remote not in ports:
        raise InterceptError(f'service "{name}" does not expose port {remote} (it exposes {ports})')
    return remote


async def find_service(client: KubeClient, target: str, namespace: str) -> Obj:
    """The Service TARGET names (`svc/NAME`, `NAME`), or the one in front of `deploy/X`, `sts/X`."""
    kind, slash, name = target.partition("/")
    if not slash:
        kind, name = "service", target
    if kind.lower() in ("svc", "service", "services"):
        service = await client.get_or_none("v1", "Service", name, namespace)
        if service is None:
            raise InterceptError(f'service "{name}" not found in namespace "{namespace}"')
        if not (service.get("spec") or {}).get("selector"):
            raise InterceptError(f'service "{name}" has no selector: tether intercepts by moving a selector')
        return service
    if kind.lower() not in KINDS or KINDS[kind.lower()][1] not in ("Deployment", "StatefulSet", "ReplicaSet",
                                                                 "DaemonSet"):
        raise InterceptError(f"target {target!r}: use a Service name, svc/NAME, deploy/NAME or sts/NAME")
    api_version, kind_name = KINDS[kind.lower()]
    workload = await client.get_or_none(api_version, kind_name, name, namespace)
    if workload is None:
        raise InterceptError(f'{kind_name.lower()} "{name}" not found in namespace "{namespace}"')
    labels = ((workload.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}
    fronting = [s for s in await client.list_objects("v1", "Service", namespace)
                if _selector_matches((s.get("spec") or {}).get("selector") or {}, labels)]
    if not fronting:
        raise InterceptError(f'no Service in namespace "{namespace}" selects the pods of {kind_name.lower()} '
                             f'"{name}": create one, or intercept a Service by name')
    if len(fronting) > 1:
        names = ", ".join(sorted(s["metadata"]["name"] for s in fronting))
        raise InterceptError(f"several Services select {kind_name.lower()} \"{name}\" ({names}): name one as TARGET")
    return fronting[0]


# objects -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    namespace: str
    service: str
    route: str
    take_all: bool
    user: str
    token_digest: str
    original_selector: Mapping[str, str]
    service_ports: tuple[Mapping[str, Any], ...]
    named_ports: Mapping[str, int]
    restore_after_s: int
    image: str = IMAGE
    ingress_hosts: tuple[tuple[str, str, str], ...] = ()  # (ingress, host, subdomain host) for --ingress


def _meta(name: str, namespace: str, labels: Mapping[str, str], owners: Sequence[Obj] = ()) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {**MANAGED_BY, **labels}}
    if owners:
        meta["ownerReferences"] = [dict(o) for o in owners]
    return meta


def session_object(plan: Plan) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": _meta(routing.session_name(plan.route), plan.namespace,
                          {SESSION_LABEL: plan.route, SERVICE_LABEL: plan.service, OBJECT_LABEL: "session"}),
        "data": {
            "route": plan.route, "service": plan.service, "mode": "all" if plan.take_all else "header",
            "user": plan.user, "since": now_rfc3339(), "tokenDigest": plan.token_digest,
            "originalSelector": json.dumps(dict(plan.original_selector), sort_keys=True),
            "restoreAfterSeconds": str(plan.restore_after_s),
            "ingressHosts": json.dumps([sub for _, _, sub in plan.ingress_hosts]),
        },
    }


def ingress_objects(plan: Plan, ingresses: Sequence[Obj], owner: Obj) -> list[dict[str, Any]]:
    """For each Ingress rule that routes to the Service, a copy on host `NAME.<host>` (only the
    paths to the Service): the router sends requests for that host to the developer."""
    by_name = {str(i["metadata"]["name"]): i for i in ingresses}
    out: list[dict[str, Any]] = []
    for ingress_name, host, sub in plan.ingress_hosts:
        source = by_name[ingress_name]
        spec = source.get("spec") or {}
        paths = [p for rule in spec.get("rules") or [] if rule.get("host") == host
                 for p in ((rule.get("http") or {}).get("paths") or [])
                 if ((p.get("backend") or {}).get("service") or {}).get("name") == plan.service]
        new_spec: dict[str, Any] = {"rules": [{"host": sub, "http": {"paths": paths}}]}
        if spec.get("ingressClassName"):
            new_spec["ingressClassName"] = spec["ingressClassName"]
        name = routing.session_name(plan.route) + "-" + ingress_name
        if len(name) > 63:
            name = name[:56] + "-" + routing.token_digest(name)[:6]
        meta = _meta(name, plan.namespace, {SESSION_LABEL: plan.route, SERVICE_LABEL: plan.service,
                                            OBJECT_LABEL: "ingress"}, [owner])
        annotations = {k: v for k, v in ((source.get("metadata") or {}).get("annotations") or {}).items()
                       if k.startswith(("kubernetes.io/ingress.class", "nginx.ingress.kubernetes.io/",
                                        "traefik.ingress.kubernetes.io/"))}
        if annotations:
            meta["annotations"] = annotations
        out.append({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta, "spec": new_spec})
    return out


def lease_object(plan: Plan, owner: Obj, holder: str) -> dict[str, Any]:
    now = micro_time(time.time())
    return {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": _meta(routing.session_name(plan.route), plan.namespace,
                          {SESSION_LABEL: plan.route, SERVICE_LABEL: plan.service, OBJECT_LABEL: "lease"}, [owner]),
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": plan.restore_after_s,
                 "acquireTime": now, "renewTime": now},
    }


def owner_ref(obj: Obj) -> dict[str, Any]:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"]}


def router_objects(plan: Plan, listen: Mapping[int, int]) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding, cloned Service and router Deployment (owners added later)."""
    name = routing.router_name(plan.service)
    ns = plan.namespace
    labels = {SERVICE_LABEL: plan.service, OBJECT_LABEL: "router"}
    pod_labels = {**MANAGED_BY, **labels, **routing.router_selector(plan.service)}
    clone = routing.cloned_service_name(plan.service)
    by_number = {number: port_name for port_name, number in plan.named_ports.items()}
    container_ports = [{"containerPort": PARK_PORT, "name": "tether-park"}]
    for number in sorted(set(listen.values())):
        port: dict[str, Any] = {"containerPort": number, "protocol": "TCP"}
        if number in by_number:
            port["name"] = by_number[number]  # a named targetPort must resolve on the router too
        container_ports.append(port)
    args = ["bridge", "router", "--service", plan.service, "--namespace", ns, "--park-port", str(PARK_PORT)]
    for number in sorted(set(listen.values())):
        args += ["--listen", str(number)]
    # Least privilege: the router is reachable by every pod that talks to the Service, so its
    # token must not be able to change or delete anything but its own objects and the Service it
    # restores. Session ConfigMaps, Leases and Ingress copies have names only known later
    # (one per developer), so those stay namespace-wide, and only with the verbs `end` needs.
    own = [name]
    rules = [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "patch", "delete"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "delete"]},
        {"apiGroups": [""], "resources": ["services"], "verbs": ["get", "patch"], "resourceNames": [plan.service]},
        {"apiGroups": [""], "resources": ["services"], "verbs": ["delete"], "resourceNames": [clone]},
        {"apiGroups": [""], "resources": ["endpoints"], "verbs": ["get"], "resourceNames": [clone]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["delete"], "resourceNames": own},
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["delete"], "resourceNames": own},
        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"], "verbs": ["list", "delete"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["delete"],
         "resourceNames": own},
    ]
    restricted = {"runAsNonRoot": True, "runAsUser": ROUTER_USER, "runAsGroup": ROUTER_USER,
                  "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                  "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, ns, labels)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(name, ns, labels),
         "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": _meta(name, ns, labels),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]},
        {"apiVersion": "v1", "kind": "Service",
         "metadata": {**_meta(clone, ns, labels),
                      "annotations": {"tether.io/original-selector": json.dumps(dict(plan.original_selector),
                                                                                 sort_keys=True)}},
         "spec": {"clusterIP": "None", "selector": dict(plan.original_selector),
                  "ports": [{k: v for k, v in p.items() if k in ("name", "port", "targetPort", "protocol")}
                            for p in plan.service_ports]}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(name, ns, labels),
         "spec": {
             "replicas": 1, "selector": {"matchLabels": routing.router_selector(plan.service)},
             "template": {
                 "metadata": {"labels": pod_labels},
                 "spec": {
                     "serviceAccountName": name, "automountServiceAccountToken": True,
                     "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [{
                         "name": "router", "image": plan.image, "args": args, "ports": container_ports,
                         "securityContext": restricted,
                         "readinessProbe": {"tcpSocket": {"port": PARK_PORT}, "periodSeconds": 1},
                         "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                                       "limits": {"memory": "256Mi"}},
                     }],
                 },
             },
         }},
    ]


# local state: the token that proves a session is ours ---------------------------------------


def _state_dir() -> Path:
    # under the one root of tether's per-user state, like every other file tether keeps
    return state_home() / "intercepts"


def _token_path(context: str, namespace: str, route: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-." else "_" for c in context)
    return _state_dir() / f"{safe}.{namespace}.{route}.token"


def _legacy_token_path(context: str, namespace: str, route: str) -> Path:
    # where tether kept tokens before they moved under its state root: an intercept begun by
    # that version can still be resumed or left after an upgrade
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "tether" / "intercepts" / _token_path(context, namespace, route).name


def local_token(context: str, namespace: str, route: str) -> str | None:
    for path in (_token_path(context, namespace, route), _legacy_token_path(context, namespace, route)):
        with contextlib.suppress(OSError):
            if token := path.read_text().strip():
                return token
    return None


def save_token(context: str, namespace: str, route: str, token: str) -> None:
    path = _token_path(context, namespace, route)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token)


def forget_token(context: str, namespace: str, route: str) -> None:
    for path in (_token_path(context, namespace, route), _legacy_token_path(context, namespace, route)):
        with contextlib.suppress(OSError):
            path.unlink()


# beginning ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Started:
    plan: Plan
    token: str
    resumed: bool
    router_pod_ip: str
    service_port: int


async def sessions(client: KubeClient, namespace: str, service: str | None = None) -> list[Obj]:
    selector = f"{OBJECT_LABEL}=session" + (f",{SERVICE_LABEL}={service}" if service else "")
    return list(await client.list_objects("v1", "ConfigMap", namespace, selector))


async def _named_ports(client: KubeClient, namespace: str, selector: Mapping[str, str]) -> dict[str, int]:
    pods = await client.list_objects("v1", "Pod", namespace, label_selector_to_string({"matchLabels": dict(selector)}))
    named: dict[str, int] = {}
    for pod in pods:
        for container in (pod.get("spec") or {}).get("containers") or []:
            for port in container.get("ports") or []:
                if port.get("name"):
                    named.setdefault(str(port["name"]), int(port["containerPort"]))
    return named


async def begin(client: KubeClient, *, target: str, namespace: str, route: str, take_all: bool,
                remote_port: int | None, context: str, user: str, restore_after_s: int = DEFAULT_RESTORE_AFTER_S,
                image: str = IMAGE, ready_timeout_s: float = 120.0, ingress: bool = False) -> Started:
    """Check everything, then create (or resume) the session and move the Service to the router."""
    routing.validate_route_name(route)
    if restore_after_s < 5:
        raise InterceptError("--restore-after must be at least 5 seconds (the client renews every few)")
    service = await find_service(client, target, namespace)
    svc_name = service["metadata"]["name"]
    port = service_port(service, remote_port)
    spec = service.get("spec") or {}
    router_sel = routing.router_selector(svc_name)
    existing = await client.get_or_none("v1", "ConfigMap", routing.session_name(route), namespace)
    token = local_token(context, namespace, route)
    resumed = False
    if existing is not None:
        data = existing.get("data") or {}
        if token is None or routing.token_digest(token) != data.get("tokenDigest"):
            raise InterceptError(
                f"route-as {route!r} is taken by {data.get('user', 'another session')} (intercepting "
                f"{data.get('service')} since {data.get('since')}): choose another --route-as")
        if data.get("service") != svc_name:
            raise InterceptError(f"route-as {route!r} is already intercepting service {data.get('service')!r}; "
                                 f"run `tether leave {route}` first")
        resumed = True
    others = [s for s in await sessions(client, namespace, svc_name)
              if s["metadata"]["name"] != routing.session_name(route)]
    if take_all and others:
        raise InterceptError(f'service "{svc_name}" is intercepted by {", ".join(sorted(str((s.get("data") or {}).get("route")) for s in others))}: '
                             "--all needs the Service to itself")
    if any((s.get("data") or {}).get("mode") == "all" for s in others):
        raise InterceptError(f'service "{svc_name}" is intercepted with --all by another session')
    current = dict(spec.get("selector") or {})
    if current == router_sel:  # already routed: the original selector is on record
        clone = await client.get_or_none("v1", "Service", routing.cloned_service_name(svc_name), namespace)
        recorded = ((clone or {}).get("metadata") or {}).get("annotations", {}).get("tether.io/original-selector")
        if not recorded and others:
            recorded = (others[0].get("data") or {}).get("originalSelector")
        if not recorded:
            raise InterceptError(f'service "{svc_name}" points at a tether router but no session records its '
                                 f"original selector: run `tether bridge reset -n {namespace}`")
        original = {str(k): str(v) for k, v in json.loads(recorded).items()}
    else:
        original = current
    ports = tuple(dict(p) for p in spec.get("ports") or [])
    named = await _named_ports(client, namespace, original)
    try:
        listen = routing.listen_ports(ports, named)
    except ValueError as exc:
        raise InterceptError(f'service "{svc_name}": {exc}') from None
    ingresses: list[Obj] = []
    hosts: tuple[tuple[str, str, str], ...] = ()
    if ingress:
        if take_all:
            raise InterceptError("--ingress adds hosts for header routing; --all takes every request already")
        ingresses = list(await client.list_objects("networking.k8s.io/v1", "Ingress", namespace))
        hosts = tuple(routing.ingress_hosts(route, ingresses, svc_name))
        if not hosts:
            raise InterceptError(f'--ingress: no Ingress in namespace "{namespace}" routes a host to service '
                                 f'"{svc_name}"')
    if token is None or not resumed:
        token = secrets.token_urlsafe(24)
    plan = Plan(namespace, svc_name, route, take_all, user, routing.token_digest(token), original, ports, named,
                restore_after_s, image, hosts)

    # From here on the cluster changes: the session object first, so everything else has an owner.
    if existing is None:
        try:
            session = await client.create(session_object(plan), field_manager=FIELD_MANAGER)
        except AlreadyExists:
            raise InterceptError(f"route-as {route!r} was taken by another session just now: "
                                 "choose another --route-as") from None
        except KubeError as exc:
            raise InterceptError(f"cannot set up the intercept of {svc_name}: {exc}") from exc
    else:
        session = existing
        if (existing.get("metadata") or {}).get("annotations", {}).get(LEAVING_ANNOTATION):
            # an `end` that did not finish: the router must route to this session again
            session = await client.patch("v1", "ConfigMap", routing.session_name(route),
                                         {"metadata": {"annotations": {LEAVING_ANNOTATION: None,
                                                                       RELEASED_ANNOTATION: None}}},
                                         namespace=namespace, field_manager=FIELD_MANAGER)
    try:
        save_token(context, namespace, route, token)
        await client.apply(lease_object(plan, owner_ref(session), holder_identity(user)), field_manager=FIELD_MANAGER)
        for obj in router_objects(plan, listen):
            await _owned_by(client, obj, owner_ref(session))
        for obj in ingress_objects(plan, ingresses, owner_ref(session)):
            await client.apply(obj, field_manager=FIELD_MANAGER)
        pod_ip = await wait_router(client, namespace, svc_name, ready_timeout_s)
        fresh = await client.get("v1", "Service", svc_name, namespace)
        selector = dict((fresh.get("spec") or {}).get("selector") or {})
        if selector != router_sel:
            await client.patch("v1", "Service", svc_name,
                               {"spec": {"selector": routing.selector_patch(selector, router_sel)}},
                               namespace=namespace, field_manager=FIELD_MANAGER)
    except BaseException as exc:
        # Half made: undo it now rather than leave it to a router that may never have started.
        with contextlib.suppress(Exception):
            await asyncio.shield(end(client, namespace, route, reason="setup failed", release_wait_s=0))
        forget_token(context, namespace, route)
        if isinstance(exc, KubeError):
            raise InterceptError(f"cannot set up the intercept of {svc_name}: {exc}") from exc
        raise
    return Started(plan, token, resumed, pod_ip, port)


async def own_agent(client: KubeClient, plan: Plan, name: str) -> None:
    """Make the session an owner of its bridge agent (Deployment, ServiceAccount) in the namespace."""
    session = await client.get("v1", "ConfigMap", routing.session_name(plan.route), plan.namespace)
    for api_version, kind in (("apps/v1", "Deployment"), ("v1", "ServiceAccount")):
        current = await client.get_or_none(api_version, kind, name, plan.namespace)
        if current is not None:
            await _owned_by(client, {"apiVersion": api_version, "kind": kind,
                                     "metadata": {"name": name, "namespace": plan.namespace}}, owner_ref(session))


def holder_identity(user: str) -> str:
    return f"{user}@{socket.gethostname()}"


async def _owned_by(client: KubeClient, obj: dict[str, Any], owner: Obj) -> None:
    """Create `obj` owned by `owner`, or add `owner` to the owners of the one that exists
    (shared by every session on the Service; the garbage collector removes it with the last)."""
    api_version, kind, name, ns = obj["apiVersion"], obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"]
    for _ in range(5):
        current = await client.get_or_none(api_version, kind, name, ns)
        if current is None:
            # create, not apply: two sessions starting at once both find nothing, and a second
            # apply by the same manager would replace the first session's owner reference (the
            # router then went with that session while the other still used it)
            obj["metadata"]["ownerReferences"] = [dict(owner)]
            try:
                await client.create(obj, field_manager=FIELD_MANAGER)
                return
            except AlreadyExists:
                continue  # made meanwhile: add this owner to it
        refs = list((current.get("metadata") or {}).get("ownerReferences") or [])
        if any(r.get("uid") == owner["uid"] for r in refs):
            return
        updated = json.loads(json.dumps(current))
        updated["metadata"]["ownerReferences"] = [*refs, dict(owner)]
        try:
            await client.replace(updated, field_manager=FIELD_MANAGER)
            return
        except Conflict:
            continue
    raise InterceptError(f"{kind} {name} keeps changing; try again")


def _pod_ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return not (pod.get("metadata") or {}).get("deletionTimestamp") and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def router_pod_ip(client: KubeClient, namespace: str, service: str) -> str | None:
    selector = label_selector_to_string({"matchLabels": routing.router_selector(service)})
    for pod in await client.list_objects("v1", "Pod", namespace, selector):
        if _pod_ready(pod) and (pod.get("status") or {}).get("podIP"):
            return str(pod["status"]["podIP"])
    return None


async def wait_router(client: KubeClient, namespace: str, service: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ip = await router_pod_ip(client, namespace, service)
        if ip:
            return ip
        await asyncio.sleep(0.5)
    raise InterceptError(f"the router for {service} was not Ready within {timeout_s:g}s "
                         f"(kubectl -n {namespace} describe deploy {routing.router_name(service)})")


async def renew(client: KubeClient, namespace: str, route: str) -> None:
    await client.patch("coordination.k8s.io/v1", "Lease", routing.session_name(route),
                       {"spec": {"renewTime": micro_time(time.time())}}, namespace=namespace,
                       field_manager=FIELD_MANAGER)


# ending ------------------------------------------------------------------------------------


async def _delete(client: KubeClient, api_version: str, kind: str, name: str, namespace: str) -> None:
    with contextlib.suppress(NotFound):
        await client.delete(api_version, kind, name, namespace)


async def end(client: KubeClient, namespace: str, route: str, *, reason: str = "left",
              release_wait_s: float = RELEASE_WAIT_S) -> bool:
    """End one session; the last one on its Service restores the selector and removes the router.
    False when there was no such session.

    The router is told first (an annotation on the session, which it watches) and given up to
    `release_wait_s` to answer that it routes nothing to the session any more: deleting the
    session also deletes the session's bridge agent, the developer's end of every connection the
    router hands their requests to, and a request must not be in one of those then (0: no wait,
    for the router itself and for sessions whose developer is gone)."""
    session = await client.get_or_none("v1", "ConfigMap", routing.session_name(route), namespace)
    if session is None:
        return False
    if release_wait_s > 0:
        await _released(client, namespace, session, release_wait_s)
    data = session.get("data") or {}
    service = str(data.get("service", ""))
    others = [s for s in await sessions(client, namespace, service) if s["metadata"]["name"] != session["metadata"]["name"]]
    if not others:
        await restore_service(client, namespace, service, json.loads(data.get("originalSelector") or "{}"))
    await _delete(client, "coordination.k8s.io/v1", "Lease", routing.session_name(route), namespace)
    for ingress in await client.list_objects("networking.k8s.io/v1", "Ingress", namespace,
                                             f"{OBJECT_LABEL}=ingress,{SESSION_LABEL}={route}"):
        await _delete(client, "networking.k8s.io/v1", "Ingress", ingress["metadata"]["name"], namespace)
    await _delete(client, "v1", "ConfigMap", routing.session_name(route), namespace)
    if not others:
        await remove_router(client, namespace, service)
    log.info("intercept %s of %s ended (%s)", route, service, reason)
    return True


async def _released(client: KubeClient, namespace: str, session: Obj, wait_s: float) -> None:
    """Mark the session leaving and wait (at most `wait_s`) for its router to say it let go."""
    name = session["metadata"]["name"]
    try:
        marked = await client.patch("v1", "ConfigMap", name, {"metadata": {"annotations": {LEAVING_ANNOTATION: "true"}}},
                                    namespace=namespace, field_manager=FIELD_MANAGER)
    except NotFound:
        return
    deadline = time.monotonic() + wait_s
    while not ((marked.get("metadata") or {}).get("annotations") or {}).get(RELEASED_ANNOTATION):
        if time.monotonic() >= deadline:
            log.info("intercept %s: the router did not answer the leave within %gs; ending anyway",
                     (session.get("data") or {}).get("route"), wait_s)
            break
        await asyncio.sleep(0.1)
        current = await client.get_or_none("v1", "ConfigMap", name, namespace)
        if current is None:
            return
        marked = current


async def end_expired(client: KubeClient, namespace: str, route: str, lease: Obj | None) -> bool:
    """End a session whose Lease was seen expired, unless the client renewed it since: the Lease
    is deleted only at the version that was read (a renewal in between makes that a Conflict,
    and the session lives on). False when the session was kept."""
    if lease is not None:
        meta = lease.get("metadata") or {}
        try:
            await client.delete("coordination.k8s.io/v1", "Lease", str(meta.get("name", "")), namespace,
                                preconditions=Preconditions(uid=meta.get("uid"),
                                                            resource_version=meta.get("resourceVersion")))
        except Conflict:
            return False
        except NotFound:
            pass
    return await end(client, namespace, route, reason="lease expired", release_wait_s=0)


async def restore_service(client: KubeClient, namespace: str, service: str, original: Mapping[str, str]) -> str:
    """Put the original selector back if the Service still points at the router: 'restored',
    'changed' (someone else set it meanwhile: left as it is) or 'gone'."""
    current = await client.get_or_none("v1", "Service", service, namespace)
    if current is None:
        return "gone"
    selector = dict((current.get("spec") or {}).get("selector") or {})
    if selector != routing.router_selector(service):
        return "changed"
    if not original:
        raise InterceptError(f"no original selector on record for service {service}")
    await client.patch("v1", "Service", service, {"spec": {"selector": routing.selector_patch(selector, original)}},
                       namespace=namespace, field_manager=FIELD_MANAGER)
    return "restored"


async def remove_router(client: KubeClient, namespace: str, service: str) -> None:
    name = routing.router_name(service)
    await _delete(client, "v1", "Service", routing.cloned_service_name(service), namespace)
    await _delete(client, "rbac.authorization.k8s.io/v1", "RoleBinding", name, namespace)
    await _delete(client, "rbac.authorization.k8s.io/v1", "Role", name, namespace)
    await _delete(client, "v1", "ServiceAccount", name, namespace)
    await _delete(client, "apps/v1", "Deployment", name, namespace)  # last: this may be the router itself


async def reset(client: KubeClient, namespace: str) -> list[str]:
    """Every tether-bridge intercept object in `namespace` removed, selectors restored."""
    done: list[str] = []
    for session in await sessions(client, namespace):
        data = session.get("data") or {}
        service = str(data.get("service", ""))
        with contextlib.suppress(KubeError, InterceptError, ValueError):
            await restore_service(client, namespace, service, json.loads(data.get("originalSelector") or "{}"))
        await _delete(client, "v1", "ConfigMap", session["metadata"]["name"], namespace)
        done.append(f"session {data.get('route')} ({service})")
    routers = {str((o.get("metadata") or {}).get("labels", {}).get(SERVICE_LABEL, ""))
               for o in await client.list_objects("apps/v1", "Deployment", namespace, f"{OBJECT_LABEL}=router")}
    for kind in (("v1", "Service"), ("v1", "ServiceAccount")):
        for obj in await client.list_objects(*kind, namespace, f"{OBJECT_LABEL}=router"):
            routers.add(str(obj["metadata"]["labels"].get(SERVICE_LABEL, "")))
    for lease in await client.list_objects("coordination.k8s.io/v1", "Lease", namespace, f"{OBJECT_LABEL}=lease"):
        await _delete(client, "coordination.k8s.io/v1", "Lease", lease["metadata"]["name"], namespace)
    for ingress in await client.list_objects("networking.k8s.io/v1", "Ingress", namespace, f"{OBJECT_LABEL}=ingress"):
        await _delete(client, "networking.k8s.io/v1", "Ingress", ingress["metadata"]["name"], namespace)
        done.append(f"ingress {ingress['metadata']['name']}")
    for service in sorted(routers - {""}):
        svc = await client.get_or_none("v1", "Service", service, namespace)
        if svc is not None and dict((svc.get("spec") or {}).get("selector") or {}) == routing.router_selector(service):
            clone = await client.get_or_none("v1", "Service", routing.cloned_service_name(service), namespace)
            recorded = ((clone or {}).get("metadata") or {}).get("annotations", {}).get("tether.io/original-selector")
            if recorded:
                await restore_service(client, namespace, service, json.loads(recorded))
        await remove_router(client, namespace, service)
        done.append(f"router of {service}")
    return done


# the router's control loop (in the cluster) --------------------------------------------------


def lease_expired(lease: Obj | None, now: float, session: Obj | None = None) -> bool:
    """A Lease past `renewTime + leaseDurationSeconds`. A missing one counts as expired once its
    session is older than its restore window: `begin` makes the session before the Lease, and a
    router already serving the Service must not end a session that is still being made."""
    if lease is None:
        if session is None:
            return True
        created = parse_time((session.get("metadata") or {}).get("creationTimestamp"))
        window = float((session.get("data") or {}).get("restoreAfterSeconds") or DEFAULT_RESTORE_AFTER_S)
        return created is None or created.timestamp() + window < now
    spec = lease.get("spec") or {}
    renewed = parse_time(spec.get("renewTime") or spec.get("acquireTime"))
    if renewed is None:
        return True
    return renewed.timestamp() + float(spec.get("leaseDurationSeconds") or DEFAULT_RESTORE_AFTER_S) < now


@dataclass(frozen=True)
class SessionView:
    route: str
    service: str
    mode: str
    user: str
    since: str
    requests: str
    drift: str


def view(session: Obj) -> SessionView:
    data = session.get("data") or {}
    notes = (session.get("metadata") or {}).get("annotations") or {}
    return SessionView(str(data.get("route", "")), str(data.get("service", "")), str(data.get("mode", "")),
                       str(data.get("user", "")), str(data.get("since", "")), str(notes.get(REQUESTS_ANNOTATION, "0")),
                       str(notes.get(DRIFT_ANNOTATION, "")))
