from __future__ import annotations

import typer

from tether import __version__
from tether.cli import local

app = typer.Typer(
    name="tether",
    help="A multi-cluster Kubernetes toolkit: federation, reach, connect and bridge.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(local.app, name="local")


@app.command()
def version() -> None:
    """Print tether's version."""
    typer.echo(__version__)
