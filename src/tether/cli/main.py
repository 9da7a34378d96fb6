from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tether import __version__
from tether.cli import (
    agent,
    bridge,
    bridgeconnect,
    certs,
    clusters,
    connect,
    dns,
    fed,
    hub,
    intercept,
    local,
    manifests,
    mcs,
    mesh,
    proxy,
    rebalance,
    status,
    tunnel,
    whoami,
)

app = typer.Typer(
    name="tether",
    help="A multi-cluster Kubernetes toolkit: federation, reach, connect and bridge.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(local.app, name="local")
hub.app.command("manifest")(manifests.hub_manifest)
mesh.app.command("manifest")(manifests.mesh_manifest)
app.add_typer(hub.app, name="hub")
app.add_typer(tunnel.app, name="tunnel")
app.add_typer(mcs.app, name="mcs")
app.add_typer(mesh.app, name="mesh")
clusters.register(app)  # join, unjoin, clusters
certs.register(app)  # certs
status.register(app)  # status
rebalance.register(app)  # rebalance (Karmada's WorkloadRebalancer)
fed.register(app)  # enable, disable, federate, get, describe
agent.register(app)  # agent run|stop|manifest, token create, register
proxy.register(app)  # proxy serve, kubeconfig, logs -C, exec -C
whoami.register(app)  # whoami (hidden): check credentials, in a pod too
connect.register(app)  # mirror, policy-sets (Semaphore's service mirror and policy controller)
bridge.register(app)  # env, volumes: a workload's environment and files here
intercept.register(app)  # intercept, leave, bridge router|reset|intercepts: cluster traffic here
bridgeconnect.register(app)  # connect, quit, bridge status: the cluster's Services here
dns.register(app)  # dns: clusterset.local and Semaphore's names, forwarding the rest


@app.command()
def version() -> None:
    """Print tether's version."""
    typer.echo(__version__)


@app.command()
def demo(
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="Root of the demo's state, apart "
                                                  "from your own clusters' [default: "
                                                  "$TETHER_HOME/demo]")] = None,
) -> None:
    """Start local clusters (a hub, three members), federate a sample app, mirror a Service, and
    reach and intercept a member's Service from this machine."""
    from tether.app import demo as demo_app
    from tether.net import daemon

    directory = data_dir or daemon.state_home() / "demo"
    raise typer.Exit(demo_app.run(directory.expanduser().resolve(), Console()))
