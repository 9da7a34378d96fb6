"""`tether certs`: the frontend and agent PKIs of apiserver-network-proxy's `make certs`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command(name="certs")(certs)


def certs(
    server_ip: Annotated[str, typer.Option("--server-ip", help="The proxy server's IP (agent-port SAN)")],
    out: Annotated[Path, typer.Option("--out", help="Output directory")] = Path("certs"),
    agent_name: Annotated[list[str] | None, typer.Option(
        "--agent-name", help="Bind proxy-agent to this identity (agent id or host); repeatable")] = None,
) -> None:
    """Write certs/{frontend,agent}/{issued,private}/ like `make certs PROXY_SERVER_IP=IP`."""
    import ipaddress

    from tether.tunnel import pki

    try:
        ipaddress.ip_address(server_ip)
    except ValueError:
        raise typer.BadParameter("must be an IP address", param_hint="--server-ip") from None
    for path in pki.write_pkis(out, server_ip, agent_names=agent_name or ()):
        typer.echo(str(path))
