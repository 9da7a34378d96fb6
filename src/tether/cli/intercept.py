"""`tether intercept`, `tether leave`, `tether bridge router|reset|intercepts`: cluster traffic
to a program on this machine (see docs/bridge.md, "Intercepts")."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from tether.bridge import agentpods, api, b2ktask, intercepts, routing
from tether.bridge.channel import BridgeError, ClusterChannel, DirectChannel
from tether.bridge.interceptrun import Holding, keep_renewed
from tether.bridge.muxchannel import MuxChannel
from tether.cli.bridge import Context, Kubeconfig, Namespace, bridge_app
from tether.kube import KubeClient, KubeError
from tether.kube.config import KubeconfigError


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def _user() -> str:
    with contextlib.suppress(Exception):
        return os.environ.get("USER") or getpass.getuser()
    return "dev"


async def _channel(client: KubeClient, started: intercepts.Started, direct: bool
                   ) -> tuple[ClusterChannel, agentpods.AgentRef | None]:
    """The way to the router: the bridge agent's multiplexed connection (through the API
    server's port-forward), or with `--direct` straight to the pod IP from here. The agent runs
    in the intercepted namespace, owned by the session too: when the cluster ends a session whose
    client died, the garbage collector removes the agent with it."""
    if direct:
        return DirectChannel(), None
    plan = started.plan
    agent = await agentpods.ensure_agent(client, session=f"intercept-{plan.route}"[:40].rstrip("-"),
                                         namespace=plan.namespace)
    await intercepts.own_agent(client, plan, agent.name)
    channel = MuxChannel(client.server, agentpods.portforward_connector(client, agent))
    await channel.start()
    return channel, agent


async def _close_channel(client: KubeClient, channel: ClusterChannel, agent: agentpods.AgentRef | None) -> None:
    with contextlib.suppress(Exception):
        await channel.aclose()
    if agent is not None:
        with contextlib.suppress(Exception):  # the session owns it: the garbage collector removes it anyway
            await agentpods.remove_agent(client, agent)


def intercept(
    target: Annotated[str | None, typer.Argument(help="A Service name (or svc/NAME), deploy/NAME or sts/NAME")] = None,
    command: Annotated[list[str] | None, typer.Argument(help="Run this command (after --); the intercept "
                                                        "lasts as long as it does")] = None,
    port: Annotated[str | None, typer.Option("--port", "-p", help="LOCAL[:REMOTE]: the local program's port, "
                                             "and the Service port to take (needed when it has several)")] = None,
    route_as: Annotated[str | None, typer.Option("--route-as", help="Requests with the header "
                                                 "kubernetes-route-as: NAME come here [default: $USER-<4 hex>]")] = None,
    take_all: Annotated[bool, typer.Option("--all", help="Every connection to the Service's port comes here")] = False,
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
    restore_after: Annotated[int, typer.Option("--restore-after", help="Seconds without this client after "
                                               "which the cluster restores the Service")] = intercepts.DEFAULT_RESTORE_AFTER_S,
    ingress: Annotated[bool, typer.Option("--ingress", help="For each Ingress host H routing to the Service, "
                                          "add host ROUTE.H whose requests come here without the header")] = False,
    b2k_task: Annotated[str | None, typer.Option("--b2k-task", help="A Bridge to Kubernetes tasks.json "
                                                 "(FILE[:LABEL]) to take the target, port and route from")] = None,
    volumes_dir: Annotated[Path | None, typer.Option("--volumes-to", help="With a command: download the "
                                                     "container's volumes here too")] = None,
    direct: Annotated[bool, typer.Option("--direct", hidden=True, help="Reach the router pod's IP from "
                                         "here (rootless local clusters) instead of through the bridge agent")] = False,
) -> None:
    """Send a Service's traffic (by header, or all of it) to a program on this machine."""
    if b2k_task:
        try:
            task = b2ktask.load(b2k_task)
        except b2ktask.TaskError as exc:
            raise _fail(str(exc)) from None
        target = target or task.target
        port = port or task.port
        namespace = namespace or task.namespace
        context = context or task.context
        route_as = route_as or task.isolate_as
        take_all = take_all or (route_as is None)  # B2K without isolateAs takes all traffic
        if task.use_service_env:
            typer.echo("note: useKubernetesServiceEnvironmentVariables: the command's Service variables "
                       "are the cluster's (run `tether connect` for local addresses)", err=True)
    if not target or not port:
        raise _fail("give a TARGET and --port LOCAL[:REMOTE] (or --b2k-task FILE[:LABEL])")
    if take_all and route_as:
        raise _fail("--all and --route-as exclude each other: --all takes every request")
    try:
        local_port, remote_port = intercepts.parse_port(port)
        route = route_as or routing.default_route_name(_user(), secrets.token_hex(2))
        routing.validate_route_name(route)
    except (BridgeError, routing.RouteNameError) as exc:
        raise _fail(str(exc)) from None

    async def run() -> int:
        client, default_namespace = api.client_for(context, kubeconfig)
        ns = namespace or default_namespace
        async with client:
            started = await intercepts.begin(client, target=target, namespace=ns, route=route, take_all=take_all,
                                             remote_port=remote_port, context=client.server, user=_user(),
                                             restore_after_s=restore_after, ingress=ingress)
            plan = started.plan
            what = "every connection" if take_all else f"requests with 'kubernetes-route-as: {route}'"
            typer.echo(f"{'resumed' if started.resumed else 'intercepting'} service {plan.service} port "
                       f"{started.service_port} in {ns}: {what} go to localhost:{local_port}", err=True)
            typer.echo(f"route-as: {route}", err=True)
            for _, _, host in plan.ingress_hosts:
                typer.echo(f"ingress host: {host} (requests to it come here without the header)", err=True)
            renewing = asyncio.create_task(keep_renewed(client, plan))
            try:
                channel, agent = await _channel(client, started, direct)
            except BaseException:
                renewing.cancel()
                await asyncio.wait([renewing])
                await intercepts.end(client, ns, route, reason="no channel")
                raise
            holding = Holding(client, channel, started, local_port)
            child: asyncio.subprocess.Process | None = None
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            code = 0
            try:
                if command:
                    argv = [sys.executable, "-m", "tether", "env", await _pod_of(client, ns, plan), "-n", ns,
                            *(["--context", context] if context else []),
                            *(["--kubeconfig", str(kubeconfig)] if kubeconfig else []),
                            *(["--volumes-to", str(volumes_dir)] if volumes_dir else []),
                            "--", *command]
                    child = await asyncio.create_subprocess_exec(*argv)
                    waiter = asyncio.ensure_future(child.wait())
                    # Ctrl-C, or the session ended in the cluster (`tether leave`, `bridge reset`,
                    # an expired Lease): the command would otherwise run on with no traffic
                    left = asyncio.ensure_future(_until_left(client, ns, route, stop))
                    await holding.hold(asyncio.wait({waiter, left}, return_when=asyncio.FIRST_COMPLETED),
                                       session_ended=lambda: left.done() and not stop.is_set())
                    ended_elsewhere = left.done() and not stop.is_set() and child.returncode is None
                    left.cancel()
                    await asyncio.wait([left])
                    if child.returncode is None:
                        child.terminate()
                        await child.wait()
                    code = child.returncode or 0
                    if ended_elsewhere:
                        typer.echo(f"intercept {route} was ended in the cluster (tether leave, bridge reset "
                                   "or an expired lease); the command was stopped", err=True)
                        code = 1
                else:
                    typer.echo(f"until `tether leave {route}` (or Ctrl-C)", err=True)
                    await holding.hold(_until_left(client, ns, route, stop), session_ended=lambda: not stop.is_set())
            finally:
                renewing.cancel()
                await asyncio.wait([renewing])  # no renewal may land after the session ended
                await intercepts.end(client, ns, route, reason="client ended")
                intercepts.forget_token(client.server, ns, route)
                await _close_channel(client, channel, agent)
                typer.echo(f"intercept {route} ended; service {plan.service} restored", err=True)
            return code

    try:
        code = asyncio.run(run())
    except (BridgeError, KubeError, KubeconfigError, routing.RouteNameError) as exc:
        raise _fail(str(exc)) from None
    raise typer.Exit(code)


async def _pod_of(client: KubeClient, namespace: str, plan: intercepts.Plan) -> str:
    """A pod behind the original selector, for `tether env` (its environment is the workload's)."""
    from tether.objects.selectors import label_selector_to_string

    pods = await client.list_objects("v1", "Pod", namespace,
                                     label_selector_to_string({"matchLabels": dict(plan.original_selector)}))
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    if not running:
        raise intercepts.InterceptError(f"no running pod of service {plan.service} to take the environment from")
    return f"pod/{running[0]['metadata']['name']}"


async def _until_left(client: KubeClient, namespace: str, route: str, stop: asyncio.Event) -> None:
    """Until Ctrl-C or `tether leave` (which deletes the session object)."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                await stop.wait()
        with contextlib.suppress(KubeError):
            if await client.get_or_none("v1", "ConfigMap", routing.session_name(route), namespace) is None:
                return


def leave(
    route: Annotated[str, typer.Argument(help="The route-as name of the intercept")],
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """End an intercept: the Service goes back to its pods (when it was the last intercept on it)."""

    async def run() -> bool:
        client, default_namespace = api.client_for(context, kubeconfig)
        async with client:
            ns = namespace or default_namespace
            ended = await intercepts.end(client, ns, route, reason="tether leave")
            intercepts.forget_token(client.server, ns, route)
            return ended

    try:
        ended = asyncio.run(run())
    except (BridgeError, KubeError, KubeconfigError) as exc:
        raise _fail(str(exc)) from None
    if not ended:
        raise _fail(f"no intercept {route!r} here (see `tether bridge intercepts`)")
    typer.echo(f"intercept {route} ended")


@bridge_app.command(name="router")
def router_command(
    service: Annotated[str, typer.Option("--service", help="The intercepted Service")],
    namespace: Annotated[str, typer.Option("--namespace", help="Its namespace")],
    listen: Annotated[list[int], typer.Option("--listen", help="A target port to take (repeatable)")],
    park_port: Annotated[int, typer.Option("--park-port", help="Port for developers' parked connections")] = intercepts.PARK_PORT,
    kubeconfig: Kubeconfig = None,
    context: Context = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run an intercept's routing proxy (in a pod of the tether image, which `tether intercept` makes)."""
    import logging

    from tether.bridge.routerloop import serve
    from tether.kube.config import in_cluster, load_kubeconfig

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def run() -> None:
        credentials = load_kubeconfig(kubeconfig, context) if kubeconfig else in_cluster()
        async with KubeClient(credentials) as client:
            await serve(client, namespace=namespace, service=service, listen=listen, park_port=park_port,
                        host=os.environ.get("POD_IP", ""))

    try:
        asyncio.run(run())
    except KubeconfigError as exc:
        raise _fail(str(exc)) from None


@bridge_app.command(name="reset")
def reset_command(
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Remove every tether-bridge intercept object in a namespace, restoring Service selectors."""

    async def run() -> list[str]:
        client, default_namespace = api.client_for(context, kubeconfig)
        async with client:
            return await intercepts.reset(client, namespace or default_namespace)

    try:
        done = asyncio.run(run())
    except (BridgeError, KubeError, KubeconfigError) as exc:
        raise _fail(str(exc)) from None
    for line in done:
        typer.echo(f"removed {line}")
    if not done:
        typer.echo("nothing of tether-bridge intercepts here")


@bridge_app.command(name="intercepts")
def intercepts_command(
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """The intercepts in a namespace: route, service, mode, who, since when, requests routed."""

    async def run() -> list[intercepts.SessionView]:
        client, default_namespace = api.client_for(context, kubeconfig)
        async with client:
            return [intercepts.view(s) for s in await intercepts.sessions(client, namespace or default_namespace)]

    try:
        views = asyncio.run(run())
    except (KubeError, KubeconfigError) as exc:
        raise _fail(str(exc)) from None
    typer.echo(format_intercepts(views), nl=False)


def format_intercepts(views: list[intercepts.SessionView]) -> str:
    if not views:
        return "no intercepts\n"
    rows = [("ROUTE", "SERVICE", "MODE", "USER", "SINCE", "REQUESTS")]
    rows += [(v.route, v.service, v.mode, v.user, v.since, v.requests) for v in views]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines += [f"warning: {v.route}: {v.drift}" for v in views if v.drift]
    return "\n".join(lines) + "\n"


def register(app: typer.Typer) -> None:
    app.command(name="intercept", context_settings={"allow_interspersed_args": True})(intercept)
    app.command(name="leave")(leave)
