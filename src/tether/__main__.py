from tether.cli.main import app

app()
