"""`tether env` and `tether volumes`: a workload's environment and files on this machine."""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from tether.bridge import api, b2kconfig, render, sessionstate
from tether.bridge import volumecopy as volumes
from tether.bridge.agent import DEFAULT_CONTROL_PORT, DEFAULT_MUX_PORT, AgentConfig, run_agent
from tether.bridge.envresolve import ResolveError, ServiceAddress
from tether.cli.options import state_root
from tether.kube import KubeError
from tether.kube.config import KubeconfigError
from tether.net import daemon
from tether.net.dnsclient import parse_upstream

Target = Annotated[str, typer.Argument(help="A pod name, or pod/, deploy/, sts/, ds/, job/, rs/ NAME")]
Container = Annotated[str | None, typer.Option("-c", "--container", help="Container [default: the pod's default]")]
Namespace = Annotated[str | None, typer.Option("-n", "--namespace", help="Namespace [default: the context's]")]
Context = Annotated[str | None, typer.Option("--context", help="Kubeconfig context [default: current]")]
Kubeconfig = Annotated[Path | None, typer.Option("--kubeconfig", help="Kubeconfig file")]


bridge_app = typer.Typer(help="The developer bridge: `status` of `tether connect` sessions, the "
                         "in-cluster agent.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.command(name="env")(env)
    app.command(name="volumes")(volumes_command)
    app.add_typer(bridge_app, name="bridge")


def _address(text: str, what: str) -> tuple[str, int]:
    """`:7700`, `7700`, `0.0.0.0:7700`, `[::]:7700` -> (host, port); host "" means every address."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    host = host.strip("[]")
    try:
        port = int(port_text)
        if not 0 <= port < 65536:
            raise ValueError
    except ValueError:
        raise _fail(f"{what} must be [HOST]:PORT with a port from 0 to 65535, not {text!r}") from None
    return host, port


@bridge_app.command(name="agent")
def agent_command(
    listen: Annotated[str, typer.Option("--listen", help="Address for developers' multiplexed "
                                        "connections, [HOST]:PORT")] = f":{DEFAULT_MUX_PORT}",
    control: Annotated[str, typer.Option("--control", help="Address for health checks and reverse "
                                         "streams from in-cluster routers, [HOST]:PORT")] = f":{DEFAULT_CONTROL_PORT}",
    cluster_dns: Annotated[list[str] | None, typer.Option("--cluster-dns", help="DNS server (IP[:PORT]) for "
                                                         "names the pod's resolver does not know")] = None,
    grace: Annotated[float, typer.Option("--grace", help="Seconds to let clients move away on SIGTERM")] = 5.0,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run the bridge agent (in a pod of the tether image): dials for developers, carries reverse streams."""
    import logging

    from tether.app.signals import HARD_EXIT_MARGIN_S, stop_on_signals

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    host, port = _address(listen, "--listen")
    control_host, control_port = _address(control, "--control")
    if control_host != host:
        raise _fail("--listen and --control must use the same host (or none)")
    try:
        servers = tuple(parse_upstream(text) for text in cluster_dns or [])
    except ValueError as exc:
        raise _fail(f"--cluster-dns: {exc}") from None
    config = AgentConfig(host=host, port=port, control_port=control_port, cluster_dns=servers)

    async def run() -> None:
        stop = asyncio.Event()
        with stop_on_signals(stop, hard_exit_after_s=grace + HARD_EXIT_MARGIN_S):
            await run_agent(config, stop, grace_s=grace)

    try:
        asyncio.run(run())
    except OSError as exc:
        raise _fail(f"cannot listen: {exc}") from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def env(
    target: Target,
    command: Annotated[list[str] | None, typer.Argument(help="Run this command (after --) with the environment")] = None,
    container: Container = None,
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
    fmt: Annotated[str, typer.Option("--format", "-o", help="dotenv, json or shell")] = "dotenv",
    explain: Annotated[bool, typer.Option("--explain", help="Name each variable's source")] = False,
    reveal: Annotated[bool, typer.Option("--reveal", help="Print Secret values instead of <redacted>")] = False,
    config: Annotated[Path | None, typer.Option("--config", help="A Bridge to Kubernetes "
                                                "KubernetesLocalProcessConfig.yaml to apply")] = None,
    volumes_dir: Annotated[Path | None, typer.Option("--volumes-to", help="Download the container's volumes "
                                                     "here and add TETHER_VOLUME_<NAME> paths")] = None,
    service_env: Annotated[bool, typer.Option("--use-kubernetes-service-environment-variables",
                                              help="Point Service variables at the running `tether connect` "
                                              "session's local addresses")] = False,
) -> None:
    """Print the target container's environment, resolved as the kubelet would, or run a command in it.

    Secret values are redacted in what is printed (--reveal shows them) but never in the
    environment given to the command.
    """
    if fmt not in render.FORMATS:
        raise _fail(f"--format must be one of {', '.join(render.FORMATS)}, not {fmt!r}")
    try:
        parsed = b2kconfig.load(config) if config else None
    except b2kconfig.ConfigFileError as exc:
        raise _fail(str(exc)) from None
    needs_volumes = volumes_dir is not None or (parsed is not None and parsed.needs_volumes)

    async def run() -> api.Resolved:
        client, default_namespace = api.client_for(context, kubeconfig)
        addresses = _session_addresses(client.credentials.context) if service_env else None
        async with client:
            resolved = await api.resolve_environment(client, target, namespace=namespace or default_namespace,
                                                     container=container, addresses=addresses)
            if needs_volumes:
                root = volumes_dir or Path(tempfile.mkdtemp(prefix="tether-volumes-"))
                local_paths = parsed.local_paths() if parsed else {}
                downloaded = await volumes.download(client, resolved, root, local_paths=local_paths,
                                                    log=lambda line: typer.echo(line, err=True))
                resolved = api.Resolved(resolved.facts, resolved.container,
                                        resolved.environment.with_variables(volumes.path_variables(downloaded)))
                if parsed:
                    resolved = api.Resolved(resolved.facts, resolved.container,
                                            parsed.apply(resolved.environment, downloaded, resolved.namespace))
            elif parsed:
                resolved = api.Resolved(resolved.facts, resolved.container,
                                        parsed.apply(resolved.environment, {}, resolved.namespace))
            return resolved

    try:
        resolved = asyncio.run(run())
    except (ResolveError, KubeError, KubeconfigError, b2kconfig.ConfigFileError, volumes.VolumeError) as exc:
        raise _fail(str(exc)) from None
    environment = resolved.environment
    if not resolved.facts.running:
        typer.echo(f"note: no pod of {target} is running: resolved from its pod template", err=True)
    for warning in environment.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if not command:
        text = render.render(environment, fmt, reveal=reveal, explain=explain)
        typer.echo(text, nl=False)
        if not explain:
            for missing in environment.unresolved:
                typer.echo(f"warning: {missing.name} not resolved: {missing.reason}", err=True)
        return
    for missing in environment.unresolved:
        typer.echo(f"warning: {missing.name} not resolved: {missing.reason}", err=True)
    child_env = dict(os.environ)
    child_env.update(environment.as_dict())
    try:
        completed = subprocess.run(command, env=child_env, check=False)
    except FileNotFoundError:
        raise _fail(f"command not found: {command[0]}") from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    raise typer.Exit(completed.returncode)


def _session_addresses(context: str) -> dict[tuple[str, str], ServiceAddress]:
    """The mappings of the running `tether connect` session for `context` (else the only one)."""
    live = [r for r in sessionstate.read_all(state_root(None)) if daemon.alive(r.pid)]
    for record in live:
        for cluster in record.doc.get("clusters") or []:
            if cluster.get("context") == context:
                return record.addresses(str(cluster.get("name")))
    if len(live) == 1:
        return live[0].addresses()
    raise _fail("no `tether connect` session is running for this cluster" if not live else
                "several `tether connect` sessions run and none is for this context: pass --context")


def volumes_command(
    target: Target,
    to: Annotated[Path, typer.Option("--to", help="Directory to download into (one subdirectory per volume)")],
    container: Container = None,
    namespace: Namespace = None,
    context: Context = None,
    kubeconfig: Kubeconfig = None,
    watch: Annotated[bool, typer.Option("--watch", help="Keep ConfigMap and Secret volumes in sync")] = False,
) -> None:
    """Download every volume the target container mounts, with the files' modes.

    ConfigMap, Secret, projected and downwardAPI volumes are built from the API; emptyDir,
    hostPath and PersistentVolumeClaim volumes are copied from the running pod through exec.
    """

    async def run() -> None:
        client, default_namespace = api.client_for(context, kubeconfig)
        async with client:
            resolved = await api.resolve_environment(client, target, namespace=namespace or default_namespace,
                                                     container=container)
            downloaded = await volumes.download(client, resolved, to, log=lambda line: typer.echo(line, err=True))
            for variable in volumes.path_variables(downloaded):
                typer.echo(f"{variable.name}={variable.value}")
            if watch:
                typer.echo("watching ConfigMap and Secret volumes (Ctrl-C stops)", err=True)
                await volumes.watch(client, resolved, downloaded, log=lambda line: typer.echo(line, err=True))

    try:
        asyncio.run(run())
    except (ResolveError, KubeError, KubeconfigError, volumes.VolumeError) as exc:
        raise _fail(str(exc)) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
