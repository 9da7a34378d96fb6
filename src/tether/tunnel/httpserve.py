"""A tiny HTTP/1.1 responder for health and admin ports: one GET per connection, bounded reads."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from tether.net import http1

Route = Callable[[str], tuple[int, str, str] | None]  # path+query → (status, content type, body)
REASONS = {200: "OK", 301: "Moved Permanently", 400: "Bad Request", 403: "Forbidden",
           404: "Not Found", 405: "Method Not Allowed", 407: "Proxy Authentication Required",
           500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
           504: "Gateway Timeout"}
HEADER_LIMIT = 16 * 1024


def response(status: int, body: str, content_type: str = "text/plain; charset=utf-8",
             extra: str = "") -> bytes:
    payload = body.encode()
    return (f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(payload)}\r\n{extra}Connection: close\r\n\r\n").encode() + payload


def handler(route: Route, *, header_timeout_s: float = 10.0) -> Callable[
        [asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(header_timeout_s):
                head = await reader.readuntil(b"\r\n\r\n")
            try:
                request = http1.parse_request_head(head[:-4])
            except http1.ProtocolError:
                request = None
            if request is None:
                writer.write(response(400, "bad request"))
            elif request.method not in ("GET", "HEAD"):
                writer.write(response(405, "method not allowed"))
            else:
                found = route(request.target)
                if found is None:
                    writer.write(response(404, "404 page not found"))
                else:
                    status, content_type, body = found
                    writer.write(response(status, body, content_type))
            async with asyncio.timeout(header_timeout_s):
                await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await writer.wait_closed()

    return handle


async def start(route: Route, host: str | None, port: int) -> asyncio.Server:
    return await asyncio.start_server(handler(route), host, port, limit=HEADER_LIMIT)
