"""Memory of waves of idle TLS connections to the HTTPS server (`tether.net.httpserver`).

    python bench/connection_memory.py [--connections 2000] [--waves 3]

A server in a child process (the real HttpServer and a local cluster's TLS settings, with the
per-address limit raised so every connection is kept) is sent waves of idle TLS connections
from 127.0.0.2. After each wave opens and after it closes, the server reports its RSS and how many
connection objects are alive (its table, TLS protocols and objects, stream writers; counted
with `gc`); at the end it calls `malloc_trim` once more by hand. Prints one line per reading.
Numbers are in `docs/security.md`, "Connections and controllers".
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import http.client
import json
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WATCHED = ("Connection", "_TlsStream", "SSLObject", "StreamWriter", "StreamReader", "Task")


def serve(directory: str, port_file: str, per_address: int) -> None:
    from tether.local.cluster import server_ssl_context
    from tether.local.pki import ensure_cluster_pki
    from tether.net.connections import ConnectionLimits
    from tether.net.httpserver import HttpServer, Request, Response

    pki = ensure_cluster_pki(Path(directory) / "pki", "memory")
    server: HttpServer | None = None

    async def handler(request: Request) -> Response:
        if request.path == "/trim":
            ctypes.CDLL(None).malloc_trim(0)
        gc.collect()
        counts: dict[str, Any] = dict.fromkeys(WATCHED, 0)
        for obj in gc.get_objects():
            name = type(obj).__name__
            if name in counts:
                counts[name] += 1
        status = Path("/proc/self/status").read_text()
        counts["rss_mb"] = int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1]) // 1024
        counts["table"] = len(server.table) if server is not None else 0
        return Response(200, json.dumps(counts).encode())

    async def main() -> None:
        nonlocal server
        server = HttpServer(handler, host="127.0.0.1", port=0, ssl_context=server_ssl_context(pki),
                            limits=ConnectionLimits(max_unauthenticated_per_address=per_address))
        await server.start()
        Path(port_file).write_text(str(server.port))
        await asyncio.Event().wait()

    asyncio.run(main())


def reading(port: int, context: ssl.SSLContext, path: str = "/stats") -> dict[str, Any]:
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=60)
    try:
        connection.request("GET", path)
        result: dict[str, Any] = json.loads(connection.getresponse().read())
        return result
    finally:
        connection.close()


async def wave(port: int, context: ssl.SSLContext, count: int) -> list[asyncio.StreamWriter]:
    gate = asyncio.Semaphore(200)
    writers: list[asyncio.StreamWriter] = []

    async def one() -> None:
        async with gate:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context,
                                                          server_hostname="localhost", local_addr=("127.0.0.2", 0))
                writers.append(writer)
            except (OSError, ssl.SSLError):
                pass

    await asyncio.gather(*(one() for _ in range(count)))
    return writers


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--waves", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-connmem-") as tmp:
        port_file = Path(tmp) / "port"
        child = subprocess.Popen([sys.executable, __file__, "--serve", tmp, str(port_file), str(args.connections + 10)])
        try:
            for _ in range(600):
                if port_file.exists() and port_file.read_text():
                    break
                time.sleep(0.1)
            port = int(port_file.read_text())
            context = ssl.create_default_context(cafile=str(Path(tmp) / "pki" / "ca.crt"))
            print("baseline      ", reading(port, context))
            for index in range(args.waves):
                async def one_wave(index: int) -> None:
                    writers = await wave(port, context, args.connections)
                    print(f"wave {index} open  ", len(writers), reading(port, context))
                    for writer in writers:
                        writer.close()
                    await asyncio.sleep(3.0)  # closes noticed, then the server's own trim (after 1 s)

                asyncio.run(one_wave(index))
                print(f"wave {index} closed", reading(port, context))
            print("trimmed again ", reading(port, context, "/trim"))
        finally:
            child.terminate()
            child.wait(timeout=30)


if __name__ == "__main__":
    main()
