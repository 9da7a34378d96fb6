"""`tether demo`, Bridge step: a developer's machine inside a member cluster.

`greeter` (one echo-server pod behind a Service on port 80) runs in member `cluster`. Two things
a developer does with it, as `tether connect` and `tether intercept` do them:

1. Reach it by name. A connect session (`tether.bridge.connect`, the Python form of `tether
   connect`; its traffic goes through a bridge agent it runs in the cluster) gives the Service an
   address on this machine (127.1.1.x) and runs a DNS server on 127.1.0.53 (on a free port, so no
   root is needed) that answers `greeter.bridge-demo` with it. No hosts file is written. The step
   asks that DNS server, then the address it got, and shows which pod answered.
2. Take some of its requests. A small HTTP server in this process on 127.0.0.1 stands for the
   program being developed; an intercept with route-as `demo` moves the Service to a routing
   proxy in the cluster, which sends requests carrying `kubernetes-route-as: demo` to this
   program (through connections parked by this machine: nothing here listens for the cluster)
   and every other request to the original pods. The step asks the Service from inside the
   cluster, through the API server's service proxy (which picks one of the Service's endpoints
   as a caller inside the cluster would reach it), once with the header and once without, shows
   who answered each, then ends the intercept and shows the Service restored.

Both leave nothing behind: the connect session removes its agent, and ending the intercept puts
the Service's selector back and removes the router. A session left by a killed demo is ended
before the next one begins, so a second run works the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from tether import bridge
from tether.app import demo_steps as steps
from tether.bridge import agentpods, intercepts, routing
from tether.bridge.channel import BridgeError
from tether.bridge.interceptrun import Holding, keep_renewed
from tether.bridge.muxchannel import MuxChannel
from tether.bridge.session import SessionError
from tether.kube import KubeClient, KubeError
from tether.net.httpserver import HttpServer, Request, Response
from tether.net.tasks import cancel_and_wait
from tether.objects import Obj

CLUSTER = "cluster"
NAMESPACE = "bridge-demo"
SERVICE = "greeter"
PORT = 80
DNS_NAME = f"{SERVICE}.{NAMESPACE}"
ROUTE = "demo"  # the route-as name: requests with `kubernetes-route-as: demo` come here
USER = "tether-demo"
LOCAL_PROGRAM = "the program on this machine"
ASK_TIMEOUT_S = 5.0
ROUTE_HEADER = "kubernetes-route-as"

_LABELS = {"app": SERVICE}
OBJECTS: tuple[Obj, ...] = (steps.namespace(NAMESPACE),
                            *steps.echo_app(SERVICE, NAMESPACE, 1, PORT, service_labels=_LABELS))


@dataclass(frozen=True)
class ReachResult:
    """The Service reached by name from this machine through a connect session."""

    dns_server: str = ""  # "host:port" of the session's DNS server
    resolved: str = ""  # what it answered for DNS_NAME
    listening: str = ""  # "address:port" where the Service's port 80 answers here
    answer: str = ""  # which pod answered there
    error: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.resolved and self.answer) and self.listening.startswith(self.resolved + ":")


@dataclass(frozen=True)
class InterceptResult:
    """Who answered the Service's requests from inside the cluster, during and after the intercept."""

    with_header: str = ""  # the request with `kubernetes-route-as: demo`
    without_header: str = ""  # the one without it
    after: str = ""  # a request with the header once the intercept ended
    restored: bool = False  # the Service's selector is the original again and the router is gone
    local_requests: int = 0  # how many requests the local program served
    local_address: str = ""  # where the local program listened
    error: str = ""

    @property
    def ok(self) -> bool:
        return (self.with_header == LOCAL_PROGRAM and _is_pod(self.without_header) and self.restored
                and _is_pod(self.after))


@dataclass(frozen=True)
class BridgeResult:
    reach: ReachResult = field(default_factory=ReachResult)
    intercept: InterceptResult = field(default_factory=InterceptResult)

    @property
    def ok(self) -> bool:
        return self.reach.ok and self.intercept.ok


def _is_pod(answer: str) -> bool:
    return answer.startswith(f"pod {SERVICE}-")


def describe_answer(body: bytes) -> str:
    """Who an answer came from: the local program, a pod of `greeter` (its echo), or ""."""
    try:
        said = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(said, dict):
        return ""
    if said.get("answeredBy") == LOCAL_PROGRAM:
        return LOCAL_PROGRAM
    if said.get("pod"):
        return f"pod {said['pod']} ({said.get('podIP', '?')})"
    return ""


# the cluster side ----------------------------------------------------------------------------


async def apply_objects(member: KubeClient) -> list[str]:
    return await steps.apply_all(member, OBJECTS)


async def ready_endpoints(member: KubeClient) -> int:
    slices = await member.list_objects("discovery.k8s.io/v1", "EndpointSlice", NAMESPACE,
                                       f"{steps.SERVICE_NAME_LABEL}={SERVICE}")
    return len(steps.ready_addresses(slices, SERVICE))


async def wait_ready(member: KubeClient, timeout_s: float) -> bool:
    return await steps.poll(lambda: ready_endpoints(member), lambda n: n >= 1, timeout_s) >= 1


async def ask_from_cluster(member: KubeClient, route: str | None) -> str:
    """GET / of the Service through the API server's service proxy (one of its endpoints, as a
    pod would reach it), with the route-as header or without; who answered, or ""."""
    target = f"/api/v1/namespaces/{NAMESPACE}/services/{SERVICE}:{PORT}/proxy/"
    headers = [(ROUTE_HEADER, route)] if route else []
    try:
        async with asyncio.timeout(ASK_TIMEOUT_S), member.send_raw(
                "GET", target, headers=headers, timeout_s=ASK_TIMEOUT_S) as answer:
            body = b"".join([chunk async for chunk in answer.chunks()])
            if answer.status_code != 200:
                return ""
    except (KubeError, TimeoutError, OSError):
        return ""
    return describe_answer(body)


async def ask_until(member: KubeClient, route: str | None, wanted: str, timeout_s: float) -> str:
    """Ask until the answer is `wanted` (LOCAL_PROGRAM) or a pod's (wanted ""), within `timeout_s`:
    moving the Service to the router and back takes the endpoints a moment."""
    return await steps.poll(lambda: ask_from_cluster(member, route),
                            lambda answer: answer == wanted if wanted else _is_pod(answer),
                            timeout_s, interval_s=0.3)


async def service_restored(member: KubeClient) -> bool:
    service = await member.get("v1", "Service", SERVICE, NAMESPACE)
    router = await member.get_or_none("apps/v1", "Deployment", routing.router_name(SERVICE), NAMESPACE)
    session = await member.get_or_none("v1", "ConfigMap", routing.session_name(ROUTE), NAMESPACE)
    return ((service.get("spec") or {}).get("selector") == _LABELS and router is None
            and session is None)


# the local program ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def local_program() -> AsyncIterator[tuple[HttpServer, list[str]]]:
    """A tiny HTTP server on 127.0.0.1 (a free port), standing for the program being developed;
    yields it and the route-as header of each request it served."""
    served: list[str] = []

    async def handle(request: Request) -> Response:
        served.append(request.header(ROUTE_HEADER))
        body = json.dumps({"answeredBy": LOCAL_PROGRAM, "path": request.path,
                           "routeAs": request.header(ROUTE_HEADER)}).encode()
        return Response(200, body)

    server = HttpServer(handle, host="127.0.0.1", port=0)
    await server.start()
    try:
        yield server, served
    finally:
        await server.close()


# 1. reach by name ----------------------------------------------------------------------------


def reach_by_name(kubeconfig: Path, state_root: Path) -> ReachResult:
    """Blocking (the session runs its own loop in a thread): call it through `asyncio.to_thread`."""
    try:
        with bridge.connect(context=CLUSTER, kubeconfig=kubeconfig, namespaces=[NAMESPACE], dns=True,
                            state_root=state_root) as session:
            host, port = session.address(SERVICE, PORT)
            dns = session.dns_server
            if dns is None:
                return ReachResult(listening=f"{host}:{port}", error="the session runs no DNS server")

            async def ask() -> tuple[str, str]:
                resolved = next(iter(await steps.resolve(dns, DNS_NAME)), "")
                if not resolved:
                    return "", ""
                answer = await steps.poll(lambda: steps.http_get(resolved, port), bool, 30.0, interval_s=0.3)
                return resolved, answer

            resolved, answer = asyncio.run(ask())
            return ReachResult(f"{dns[0]}:{dns[1]}", resolved, f"{host}:{port}", answer)
    except (SessionError, BridgeError, agentpods.AgentError, KubeError, KeyError, OSError) as exc:
        return ReachResult(error=str(exc) or type(exc).__name__)


# 2. intercept ------------------------------------------------------------------------------


async def agent_channel(member: KubeClient, plan: intercepts.Plan) -> tuple[agentpods.AgentRef, MuxChannel]:
    """The way to the router, as `tether intercept` takes it: a bridge agent in the intercepted
    namespace (owned by the session, so the cluster removes it with a session whose client died),
    reached over one multiplexed port-forward through the API server."""
    agent = await agentpods.ensure_agent(member, session=f"intercept-{plan.route}", namespace=plan.namespace)
    await intercepts.own_agent(member, plan, agent.name)
    channel = MuxChannel(CLUSTER, agentpods.portforward_connector(member, agent))
    try:
        await channel.start()
    except BaseException:
        await channel.aclose()
        raise
    return agent, channel


async def intercept(member: KubeClient, timeout_s: float) -> InterceptResult:
    """Intercept `greeter` for route-as `demo`, ask it with and without the header from inside
    the cluster, end the intercept, check the Service is restored and ask again."""
    # A session a killed run left (the cluster would end it only once its Lease expires) is
    # ended now, so every run begins the same way.
    await intercepts.end(member, NAMESPACE, ROUTE, reason="an earlier demo run left it")
    async with local_program() as (program, served):
        address = f"127.0.0.1:{program.port}"
        try:
            started = await intercepts.begin(member, target=SERVICE, namespace=NAMESPACE, route=ROUTE,
                                             take_all=False, remote_port=PORT, context=member.server,
                                             user=USER, ready_timeout_s=timeout_s)
        except BridgeError as exc:
            return InterceptResult(local_address=address, error=str(exc))
        renewing = asyncio.create_task(keep_renewed(member, started.plan))
        agent: agentpods.AgentRef | None = None
        channel: MuxChannel | None = None
        release = asyncio.Event()
        held: asyncio.Task[None] | None = None
        hold_error = ""
        try:
            agent, channel = await agent_channel(member, started.plan)
            held = asyncio.create_task(Holding(member, channel, started, program.port).hold(release.wait()))
            with_header = await ask_until(member, ROUTE, LOCAL_PROGRAM, timeout_s)
            without_header = await ask_until(member, None, "", timeout_s)
        finally:
            release.set()
            await cancel_and_wait(renewing)
            if held is not None:
                try:
                    await held  # released: it hands back its parked connections and returns
                except (BridgeError, KubeError, OSError) as exc:
                    hold_error = f"holding the parked connections failed: {exc}"
            await intercepts.end(member, NAMESPACE, ROUTE, reason="demo step done")
            intercepts.forget_token(member.server, NAMESPACE, ROUTE)
            if channel is not None:
                with contextlib.suppress(Exception):
                    await channel.aclose()
            if agent is not None:
                with contextlib.suppress(KubeError, agentpods.AgentError):  # the session owned it: GC removes it
                    await agentpods.remove_agent(member, agent)
        served_count = len(served)
    restored = await service_restored(member)
    after = await ask_until(member, ROUTE, "", timeout_s)
    return InterceptResult(with_header, without_header, after, restored, served_count, address, hold_error)


async def run_step(kubeconfig: Path, state_root: Path, timeout_s: float) -> BridgeResult:
    """Both halves; the objects are applied and Ready first."""
    async with KubeClient.from_kubeconfig(kubeconfig, CLUSTER) as member:
        if not await wait_ready(member, timeout_s):
            message = (f"no ready pod of {NAMESPACE}/{SERVICE} in {CLUSTER} within {timeout_s:.0f}s: "
                       f"`kubectl --context {CLUSTER} -n {NAMESPACE} describe deploy {SERVICE}` says why")
            return BridgeResult(ReachResult(error=message), InterceptResult(error=message))
        reach = await asyncio.to_thread(reach_by_name, kubeconfig, state_root)
        try:
            taken = await intercept(member, timeout_s)
        except (BridgeError, agentpods.AgentError, KubeError) as exc:
            taken = InterceptResult(error=str(exc))
    return BridgeResult(reach, taken)


# the step, told ---------------------------------------------------------------------------


async def bridge_step(kubeconfig: Path, state_root: Path, console: Console, timeout_s: float) -> BridgeResult:
    console.print(f"Bridge: this machine inside member `{CLUSTER}`, as a developer works with it: a "
                  "Service reached by name from here (`tether connect`), and some of its requests "
                  "answered by a program here (`tether intercept`)")
    async with KubeClient.from_kubeconfig(kubeconfig, CLUSTER) as member:
        applied = await apply_objects(member)
    console.print(f"applied in {CLUSTER}: " + ", ".join(applied))
    with console.status(f"reaching {DNS_NAME} from this machine, then intercepting it"):
        result = await run_step(kubeconfig, state_root, timeout_s)
    print_reach(console, result.reach)
    print_intercept(console, result.intercept)
    return result


def print_reach(console: Console, reach: ReachResult) -> None:
    if reach.error:
        console.print(f"[red]the connect session to {CLUSTER} failed[/red]: {reach.error}; `kubectl --context "
                      f"{CLUSTER} -n tether-bridge get pods,events` shows what its bridge agent did, and the "
                      "demo is safe to run again")
        return
    root_note = "" if reach.listening.endswith(f":{PORT}") else f", as port {PORT} needs root"
    console.print(f"a connect session gave {CLUSTER}'s Service {NAMESPACE}/{SERVICE} an address on this machine, "
                  f"{reach.listening}{root_note} (its traffic goes through a bridge agent the session ran in "
                  f"{CLUSTER}), and a DNS server ({reach.dns_server}: no root, no hosts file) that answers "
                  f"{DNS_NAME} with {reach.resolved or 'nothing'}")
    if reach.ok:
        port = reach.listening.rpartition(":")[2]
        console.print(f"[green]as expected[/green]: http://{DNS_NAME}:{port}/ from this machine is "
                      f"answered by {CLUSTER}'s pod {reach.answer}; the session ended and removed its agent")
    else:
        console.print(f"[red]{DNS_NAME} did not answer from this machine[/red]: run `tether connect -n "
                      f"{NAMESPACE} --context {CLUSTER} --no-hosts --dns` and `tether bridge status` to see "
                      "what is mapped")


def print_intercept(console: Console, taken: InterceptResult) -> None:
    console.print(f"a program on this machine (an HTTP server on {taken.local_address or '127.0.0.1'} in this "
                  f"process) takes {SERVICE}'s requests that carry `{ROUTE_HEADER}: {ROUTE}`: tether moved the "
                  f"Service to a routing proxy in {CLUSTER}, which sends those here and the rest to the pods")
    if taken.error:
        console.print(f"[red]the intercept failed[/red]: {taken.error}; `tether bridge reset -n {NAMESPACE} "
                      f"--context {CLUSTER}` restores the Service if anything is left")
        return
    nobody = "[red]no answer[/red]"
    console.print(f"  asked from inside {CLUSTER} (through the API server's service proxy) with "
                  f"`{ROUTE_HEADER}: {ROUTE}`: answered by {taken.with_header or nobody}")
    console.print(f"  the same request without the header: answered by {taken.without_header or nobody}")
    if taken.restored:
        console.print(f"the intercept ended: Service {SERVICE} selects its pods again (app={SERVICE}) and "
                      f"the routing proxy is gone; with the header it is answered by "
                      f"{taken.after or nobody}")
    else:
        console.print(f"[red]the intercept ended but Service {SERVICE} is not restored[/red]: "
                      f"`tether bridge reset -n {NAMESPACE} --context {CLUSTER}` restores it")
    if taken.ok:
        console.print(f"[green]as expected[/green]: only the request with `{ROUTE_HEADER}: {ROUTE}` reached "
                      "this machine; every other request still reached the pods, during the intercept and after it")
    elif not taken.error:
        console.print(f"[red]the intercept did not route as expected within the time allowed[/red]: "
                      f"`kubectl --context {CLUSTER} -n {NAMESPACE} get deploy,pods,svc` says what runs")


def try_lines() -> list[str]:
    """For the demo's closing "Try it" list."""
    return [
        f"tether connect -n {NAMESPACE} --context {CLUSTER} --no-hosts --dns   # {DNS_NAME} from your "
        "machine (dig the DNS address it prints)",
        f"tether intercept {SERVICE} -n {NAMESPACE} --context {CLUSTER} --port 3001:{PORT} --route-as $USER"
        f"   # {ROUTE_HEADER}: $USER to localhost:3001",
    ]
