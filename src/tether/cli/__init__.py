"""The `tether` command line: thin typer commands over the capability packages."""
