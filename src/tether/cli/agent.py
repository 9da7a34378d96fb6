"""`tether token create|delete`, `tether register`, `tether agent run|stop|manifest`: pull mode."""

from __future__ import annotations

import asyncio
import re
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
    MemberContext,
    MemberContextAlias,
    MemberKubeconfig,
    MemberKubeconfigAlias,
    pick,
    state_root,
)
from tether.kube import KubeClient, KubeError
from tether.kube.config import KubeconfigError

Opt = typer.Option
app = typer.Typer(help="The pull-mode agent that runs next to a member cluster.",
                  no_args_is_help=True)
token_app = typer.Typer(help="Bootstrap tokens for `tether register`.", no_args_is_help=True)
console = Console(soft_wrap=True, stderr=True)


def _duration(text: str) -> float:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not match or float(match.group(1)) <= 0:
        raise typer.BadParameter("a positive duration like 90s, 30m, 24h or 2d", param_hint="--ttl")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]


def _fail(message: str) -> typer.Exit:
    console.print(f"[red]error:[/red] {message}")
    return typer.Exit(1)


def _data_dir(data_dir: Path | None) -> Path:
    return state_root(data_dir)


@token_app.command("create")
def token_create(
    ttl: Annotated[str, Opt("--ttl", help="Lifetime (s, m, h, d)")] = "24h",
    print_register_command: Annotated[bool, Opt("--print-register-command",
                                                help="Print the full `tether register` command")] = False,
    context: HubContext = None,
    kubeconfig: HubKubeconfig = None,
    hub_address: Annotated[str | None, Opt("--hub-address", help="The hub API address as members "
                                           "reach it [default: the kubeconfig's server]")] = None,
    cluster_name: Annotated[str, Opt("--cluster-name", help="The one cluster this token may "
                                     "register")] = "",
    context_alias: HubContextAlias = None,
    kubeconfig_alias: HubKubeconfigAlias = None,
) -> None:
    """Create a bootstrap token on the hub that may register one cluster, until --ttl ends.

    A kubeadm bootstrap token (Secret kube-system/bootstrap-token-ID): the hub's API server
    refuses it from its expiry on. It may only submit the registration of --cluster-name, which
    `tether hub run` approves; it can read no Secret and write no RBAC.
    """
    from tether.federation import bootstrap

    ttl_s = _duration(ttl)
    context = pick(context, context_alias, "--context")
    kubeconfig = pick(kubeconfig, kubeconfig_alias, "--kubeconfig")
    if not cluster_name:
        raise _fail("--cluster-name is required: a token registers one named cluster")

    async def run() -> None:
        async with KubeClient.from_kubeconfig(kubeconfig, context) as host:
            token = await bootstrap.create_token(host, cluster_name, ttl_s)
            ca_hash = bootstrap.ca_cert_hash(host.credentials.ca_pem or b"")
            address = hub_address or host.credentials.server
        if print_register_command:
            typer.echo(f"tether register {address} --token {token.token} --ca-cert-hash {ca_hash} "
                       f"--cluster-name {cluster_name}")
        else:
            typer.echo(token.token)

    try:
        asyncio.run(run())
    except (bootstrap.BootstrapError, KubeError, KubeconfigError, OSError) as exc:
        raise _fail(str(exc)) from None


@token_app.command("delete")
def token_delete(
    token_id: Annotated[str, typer.Argument(help="The 6-character id (before the '.')")],
    context: HubContext = None,
    kubeconfig: HubKubeconfig = None,
    context_alias: HubContextAlias = None,
    kubeconfig_alias: HubKubeconfigAlias = None,
) -> None:
    """Revoke a bootstrap token."""
    from tether.federation import bootstrap

    context = pick(context, context_alias, "--context")
    kubeconfig = pick(kubeconfig, kubeconfig_alias, "--kubeconfig")

    async def run() -> bool:
        async with KubeClient.from_kubeconfig(kubeconfig, context) as host:
            return await bootstrap.delete_token(host, token_id.partition(".")[0])

    try:
        found = asyncio.run(run())
    except (KubeError, KubeconfigError, OSError) as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"bootstrap token {token_id.partition('.')[0]} {'deleted' if found else 'not found'}")


def register_command(
    hub_address: Annotated[str, typer.Argument(help="The hub API, https://HOST:PORT")],
    token: Annotated[str, Opt("--token", help="From `tether token create`")],
    ca_cert_hash: Annotated[str, Opt("--ca-cert-hash", help="sha256:<hex> of the hub CA's public key")],
    cluster_name: Annotated[str, Opt("--cluster-name", help="This member's name on the hub")],
    kubeconfig: MemberKubeconfig = None,
    context: MemberContext = None,
    tunnel_server: Annotated[str, Opt("--tunnel-server", help="HOST:PORT of the hub's tunnel agent "
                                      "port as this member reaches it [default: what the hub "
                                      "publishes]")] = "",
    proxy_url: Annotated[str, Opt("--proxy-url", help="Override the Cluster's proxyURL")] = "",
    data_dir: DataDir = None,
    no_start: Annotated[bool, Opt("--no-start", help="Register only; do not start the agent")] = False,
    period: Annotated[float, Opt("--period", help="Seconds between heartbeats")] = 10.0,
    context_alias: MemberContextAlias = None,
    kubeconfig_alias: MemberKubeconfigAlias = None,
) -> None:
    """Register this member with a hub in pull mode and start its agent in the background."""
    from tether.app import agent as agent_app
    from tether.federation import bootstrap

    context = pick(context, context_alias, "--context")
    kubeconfig = pick(kubeconfig, kubeconfig_alias, "--kubeconfig")

    async def run() -> bootstrap.Registration:
        # the pin is checked before the token is sent anywhere; from then on only to that CA
        ca_pem, info = await bootstrap.discover_hub(hub_address, token, ca_cert_hash)
        token_id, _ = bootstrap.split_token(token)
        from tether.kube import ClusterCredentials

        hub_creds = ClusterCredentials.from_token(server=hub_address, token=token.strip(),
                                                  ca_bundle=ca_pem, name="hub")
        async with KubeClient(hub_creds) as hub, \
                KubeClient.from_kubeconfig(kubeconfig, context) as member:
            reg = await bootstrap.register(hub, member, cluster_name, token_id, info,
                                           proxy_url=proxy_url, tunnel_agent_address=tunnel_server)
        return bootstrap.Registration(
            name=reg.name, api_endpoint=reg.api_endpoint, agent_token=reg.agent_token,
            hub_ca_pem=ca_pem, tunnel_agent_address=reg.tunnel_agent_address,
            tunnel_ca_pem=reg.tunnel_ca_pem, steps=reg.steps)

    try:
        reg = asyncio.run(run())
    except (bootstrap.BootstrapError, KubeError, KubeconfigError, OSError) as exc:
        raise _fail(str(exc)) from None
    for step in reg.steps:
        typer.echo(step)
    base = _data_dir(data_dir)
    directory = agent_app.agent_dir(base, cluster_name)
    files = agent_app.AgentFiles(
        cluster=cluster_name, hub=hub_address,
        member_kubeconfig=str(kubeconfig.expanduser().resolve()) if kubeconfig else "",
        member_context=context or "", tunnel_address=reg.tunnel_agent_address, period_s=period)
    agent_app.write_files(directory, files, token=reg.agent_token, hub_ca=reg.hub_ca_pem,
                          tunnel_ca=reg.tunnel_ca_pem)
    typer.echo(f"registered cluster {cluster_name} (Pull, apiEndpoint {reg.api_endpoint})")
    if no_start:
        typer.echo(f"agent files in {directory}; start it with "
                   f"`tether agent run --cluster-name {cluster_name} --data-dir {base}`")
        return
    try:
        pid = agent_app.start_background(directory, cluster_name, base)
    except (RuntimeError, OSError) as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"agent started (pid {pid}, log {directory / 'agent.log'}); "
               f"stop it with `tether agent stop --cluster-name {cluster_name}`")


@app.command("run")
def run_cmd(
    cluster_name: Annotated[str, Opt("--cluster-name", help="The member's name on the hub")],
    data_dir: DataDir = None,
    agent_dir: Annotated[Path | None, Opt("--agent-dir", help="The agent's files "
                                          "[default: DATA_DIR/agents/NAME]")] = None,
    hub: Annotated[str, Opt("--hub", help="Override the hub API address")] = "",
    kubeconfig: Annotated[Path | None, Opt("--kubeconfig", help="The member's kubeconfig [default: "
                                           "what `tether register` recorded]")] = None,
    context: Annotated[str | None, Opt("--context", help="The member's context [default: what "
                                       "`tether register` recorded]")] = None,
    tunnel_server: Annotated[str, Opt("--tunnel-server", help="Override the tunnel address")] = "",
    verbose: Annotated[bool, Opt("--verbose", "-v")] = False,
    context_alias: MemberContextAlias = None,
    kubeconfig_alias: MemberKubeconfigAlias = None,
) -> None:
    """Run the agent in the foreground: heartbeats and Lease, Works, the tunnel."""
    import dataclasses
    import logging

    from tether.app import agent as agent_app

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    member_context = pick(context, context_alias, "--context")
    member_kubeconfig = pick(kubeconfig, kubeconfig_alias, "--kubeconfig")
    directory = agent_dir or agent_app.agent_dir(_data_dir(data_dir), cluster_name)
    try:
        files = agent_app.read_files(directory)
    except (OSError, ValueError, TypeError) as exc:
        raise _fail(f"no agent files for {cluster_name} in {directory} ({exc}); run "
                    "`tether register` first") from None
    changes: dict[str, object] = {}
    if hub:
        changes["hub"] = hub
    if member_kubeconfig:
        changes["member_kubeconfig"] = str(member_kubeconfig)
    if member_context:
        changes["member_context"] = member_context
    if tunnel_server:
        changes["tunnel_address"] = tunnel_server
    files = dataclasses.replace(files, **changes)  # type: ignore[arg-type]
    try:
        raise typer.Exit(asyncio.run(agent_app.run_agent(directory, files,
                                                         announce=lambda s: typer.echo(s))))
    except (KubeError, KubeconfigError, OSError) as exc:
        raise _fail(str(exc)) from None


@app.command("stop")
def stop_cmd(
    cluster_name: Annotated[str, Opt("--cluster-name")],
    data_dir: DataDir = None,
) -> None:
    """Stop the background agent `tether register` started (by its recorded pid)."""
    from tether.app import agent as agent_app

    directory = agent_app.agent_dir(_data_dir(data_dir), cluster_name)
    pid = agent_app.stop_background(directory)
    typer.echo(f"agent {cluster_name} stopped (pid {pid})" if pid else
               f"agent {cluster_name} is not running")


@app.command("start")
def start_cmd(
    cluster_name: Annotated[str, Opt("--cluster-name")],
    data_dir: DataDir = None,
) -> None:
    """Start the registered agent in the background again."""
    from tether.app import agent as agent_app

    base = _data_dir(data_dir)
    directory = agent_app.agent_dir(base, cluster_name)
    if not (directory / "agent.json").exists():
        raise _fail(f"no agent files for {cluster_name} in {directory}; run `tether register`")
    try:
        pid = agent_app.start_background(directory, cluster_name, base)
    except (RuntimeError, OSError) as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"agent started (pid {pid}, log {directory / 'agent.log'})")


@app.command("manifest")
def manifest_cmd(
    cluster_name: Annotated[str, Opt("--cluster-name")],
    data_dir: DataDir = None,
    image: Annotated[str, Opt("--image", help="Container image with tether")] = "",
    tunnel_server: Annotated[str, Opt("--tunnel-server", help="Tunnel address as pods reach it")] = "",
) -> None:
    """Print a Deployment/Secret/ServiceAccount manifest running this agent in the member
    (from the files `tether register --no-start` wrote); apply it with kubectl."""
    import dataclasses

    from tether.app import agent as agent_app

    directory = agent_app.agent_dir(_data_dir(data_dir), cluster_name)
    try:
        files = agent_app.read_files(directory)
        token = (directory / "token").read_text()
        hub_ca = (directory / "hub-ca.crt").read_bytes()
        tunnel_ca_path = directory / "tunnel-ca.crt"
        tunnel_ca = tunnel_ca_path.read_bytes() if tunnel_ca_path.exists() else b""
    except (OSError, ValueError, TypeError) as exc:
        raise _fail(f"no agent files for {cluster_name} in {directory} ({exc}); run "
                    "`tether register --no-start` first") from None
    if tunnel_server:
        files = dataclasses.replace(files, tunnel_address=tunnel_server)
    typer.echo(agent_app.manifest(files, token=token, hub_ca=hub_ca, tunnel_ca=tunnel_ca,
                                  image=image or agent_app.IMAGE), nl=False)


def register(root: typer.Typer) -> None:
    """Add `agent`, `token` and `register` to the root app."""
    root.add_typer(app, name="agent")
    root.add_typer(token_app, name="token")
    root.command("register")(register_command)
