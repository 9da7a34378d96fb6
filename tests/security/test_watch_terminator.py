"""SIGTERM of `tether local` ends open watches with the chunked terminator (`0\\r\\n\\r\\n`), so
a watching client sees a clean end of stream, not a cut connection (issue 10, clean shutdown)."""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

DEADLINE_S = 60.0
Obj = dict[str, Any]


def _tether(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tether", *args], capture_output=True, text=True,
                          timeout=120, check=False)


def _read_line(sock: ssl.SSLSocket, buffer: bytearray) -> bytes | None:
    while b"\r\n" not in buffer:
        data = sock.recv(65536)
        if not data:
            return None
        buffer += data
    line, _, rest = bytes(buffer).partition(b"\r\n")
    buffer[:] = rest
    return line


def _read_exactly(sock: ssl.SSLSocket, buffer: bytearray, size: int) -> bytes | None:
    while len(buffer) < size:
        data = sock.recv(65536)
        if not data:
            return None
        buffer += data
    out = bytes(buffer[:size])
    del buffer[:size]
    return out


def watch_until_end(sock: ssl.SSLSocket, on_first_event: Callable[[], object]) -> tuple[list[Obj], bool]:
    """Read a chunked watch response; (events, ended with the terminator)."""
    buffer = bytearray()
    status = _read_line(sock, buffer)
    assert status is not None and status.startswith(b"HTTP/1.1 200"), status
    headers = []
    while (line := _read_line(sock, buffer)) not in (b"", None):
        headers.append(line.lower())
    assert b"transfer-encoding: chunked" in headers
    events: list[Obj] = []
    pending = b""
    while True:
        size_line = _read_line(sock, buffer)
        if size_line is None:
            return events, False  # cut: no terminator
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return events, _read_line(sock, buffer) == b""
        chunk = _read_exactly(sock, buffer, size + 2)
        if chunk is None:
            return events, False
        pending += chunk[:-2]
        while b"\n" in pending:
            line, _, pending = pending.partition(b"\n")
            events.append(json.loads(line))
            if len(events) == 1:
                on_first_event()


@pytest.mark.parametrize("how", ["foreground", "daemon"])
def test_sigterm_ends_watches_with_the_chunked_terminator(tmp_path: Path, how: str) -> None:
    data_dir = tmp_path / "local"
    process = None
    if how == "foreground":
        log = (tmp_path / "fg.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "tether", "local", "up", "--foreground", "--data-dir", str(data_dir),
             "--name", "term"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + DEADLINE_S
        while not (data_dir / "daemon.json").exists():
            assert process.poll() is None and time.monotonic() < deadline, (tmp_path / "fg.log").read_text()
            time.sleep(0.1)
    else:
        started = _tether("local", "up", "--data-dir", str(data_dir), "--name", "term")
        assert started.returncode == 0, started.stdout + started.stderr
    state = json.loads((data_dir / "daemon.json").read_text())
    pid = int(state["pid"])
    server = state["clusters"][0]["server"]
    pki = Path(state["clusters"][0]["dataDir"]) / "pki"
    host, port = server.removeprefix("https://").rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    token = (pki / "admin.token").read_text().strip()
    downs: list[subprocess.Popen[bytes]] = []
    try:
        raw = socket.create_connection((host, int(port)), timeout=DEADLINE_S)
        with context.wrap_socket(raw, server_hostname="localhost") as sock:
            sock.sendall(f"GET /api/v1/namespaces?watch=1 HTTP/1.1\r\nHost: {host}\r\n"
                         f"Authorization: Bearer {token}\r\n\r\n".encode())
            # SIGTERM once the stream is open and has delivered its first event.
            def stop() -> None:
                if process is not None:
                    os.kill(pid, signal.SIGTERM)
                else:  # `local down` sends the daemon SIGTERM
                    downs.append(subprocess.Popen([sys.executable, "-m", "tether", "local", "down",
                                                   "--data-dir", str(data_dir)]))
            events, clean = watch_until_end(sock, stop)
        assert events and events[0]["type"] == "ADDED"
        assert clean, "the watch was cut without the chunked terminator"
    finally:
        if process is not None:
            try:
                process.wait(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                process.kill()
        for down in downs:
            down.wait(timeout=DEADLINE_S)
        if process is None:
            _tether("local", "down", "--data-dir", str(data_dir))
