"""An nginx stand-in: serves a small page (or files from a directory) on the container port."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

PAGE = """<!DOCTYPE html>
<html><head><title>Welcome to nginx!</title></head>
<body><h1>Welcome to nginx!</h1>
<p>Served by tether's nginx stand-in from pod {pod} ({ip}) in namespace {namespace}.</p>
</body></html>
"""


class PageHandler(SimpleHTTPRequestHandler):
    server_version = "nginx (tether stand-in)"
    protocol_version = "HTTP/1.1"  # keep-alive, as nginx does
    disable_nagle_algorithm = True  # headers and body go out as separate writes

    def do_GET(self) -> None:
        if self.path in ("/", "/index.html") and not os.path.exists(os.path.join(self.directory, "index.html")):
            body = PAGE.format(
                pod=os.environ.get("POD_NAME", ""), ip=os.environ.get("POD_IP", ""),
                namespace=os.environ.get("POD_NAMESPACE", ""),
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:
        sys.stdout.write(f'{self.client_address[0]} - - "{self.requestline}" {args[1] if len(args) > 1 else ""}\n')
        sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default=os.environ.get("POD_IP", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "80")))
    parser.add_argument("--root", default=os.getcwd())
    args = parser.parse_args()
    handler = functools.partial(PageHandler, directory=args.root)
    server = ThreadingHTTPServer((args.host, args.port), handler)
    print(f"nginx stand-in listening on {args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
