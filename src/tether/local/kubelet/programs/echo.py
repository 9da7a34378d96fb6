"""An HTTP echo server: answers with the pod's name, namespace, IP and the request's headers.

Each request is logged to stdout (the container log), one line per request, like an access log.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class EchoHandler(BaseHTTPRequestHandler):
    server_version = "tether-echo/1"
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do
    disable_nagle_algorithm = True  # headers and body go out as separate writes

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        payload = {
            "pod": os.environ.get("POD_NAME") or os.environ.get("HOSTNAME", ""),
            "namespace": os.environ.get("POD_NAMESPACE", ""),
            "podIP": os.environ.get("POD_IP", ""),
            "node": os.environ.get("NODE_NAME", ""),
            "method": self.command,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body,
        }
        data = (json.dumps(payload, indent=2) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _answer

    def log_message(self, format: str, *args: object) -> None:
        sys.stdout.write(f'{self.client_address[0]} "{self.requestline}" {args[1] if len(args) > 1 else ""}\n')
        sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default=os.environ.get("POD_IP", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8080")))
    args = parser.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), EchoHandler)
    print(f"echo server listening on {args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
