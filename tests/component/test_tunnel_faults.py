"""Faults: agents and servers going away, garbage and wrong-CA peers, foreign identities, dial
storms to a dead port, and a stalled reader next to a live transfer. All on 127.0.0.0/8."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import ssl
import sys
from pathlib import Path

import httpx
import pytest
from test_tunnel_common import (
    HOST,
    agent_config,
    echo_server,
    eventually,
    open_fds,
    running,
    server_config,
    start_server,
    tls_files,
)

from tether.tunnel import client, pki
from tether.tunnel.tls import ClientTLS


async def test_agent_stream_cut_mid_transfer_closes_clients_and_agent_reconnects() -> None:
    async with running() as env, echo_server() as port:
        agent = await env.add_agent(agent_config(env.server))
        r, w = await client.dial(env.frontend, HOST, port, timeout_s=5)
        w.write(b"a" * 100_000)
        await w.drain()
        await asyncio.wait_for(r.readexactly(50_000), 5)
        for stream in list(agent.streams.values()):
            stream.call.cancel()  # the agent's connection dies mid-transfer
        async with asyncio.timeout(5):
            while await r.read(65536):
                pass  # a clean EOF, not a hang
        await eventually(lambda: not env.server.state.established)
        await eventually(lambda: "agent-1" in env.server.agent_ids(), timeout_s=3.0)  # backoff ≤ 1 s
        r, w = await client.dial(env.frontend, HOST, port, timeout_s=5)
        w.write(b"again")
        assert await asyncio.wait_for(r.readexactly(5), 5) == b"again"
        w.close()


async def test_agent_process_killed_mid_transfer_gives_clean_close() -> None:
    async with running() as env, echo_server() as port:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tether", "tunnel", "agent", "--allow-insecure",
            "--proxy-server-host", HOST, "--proxy-server-port", str(env.server.ports["agent"]),
            "--agent-id", "killed", "--health-server-port", "0", "--admin-server-port", "0",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        try:
            await eventually(lambda: "killed" in env.server.agent_ids(), timeout_s=20)
            r, w = await client.dial(env.frontend, HOST, port, timeout_s=5)
            w.write(b"b" * 100_000)
            await w.drain()
            await asyncio.wait_for(r.readexactly(10_000), 5)
            proc.send_signal(signal.SIGKILL)
            async with asyncio.timeout(5):
                while await r.read(65536):
                    pass
            await eventually(lambda: not env.server.state.established and not env.server.agent_ids())
        finally:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.wait_for(proc.wait(), 10)


async def test_server_restart_agents_come_back() -> None:
    async with echo_server() as port:
        server, stop, task = await start_server(server_config())
        agent_port, front_port = server.ports["agent"], server.ports["server"]
        env_agent = None
        from tether.tunnel.agent import TunnelAgent

        env_agent = TunnelAgent(agent_config(server))
        agent_stop = asyncio.Event()
        agent_task = asyncio.create_task(env_agent.run(agent_stop))
        try:
            await eventually(lambda: server.agent_ids() == ["agent-1"])
            stop.set()
            await asyncio.wait_for(task, 15)
            await eventually(lambda: not env_agent.streams)
            server, stop, task = await start_server(server_config(agent_port=agent_port,
                                                                  server_port=front_port))
            await eventually(lambda: server.agent_ids() == ["agent-1"], timeout_s=5)
            r, w = await client.dial(f"{HOST}:{front_port}", HOST, port, timeout_s=5)
            w.write(b"back")
            assert await asyncio.wait_for(r.readexactly(4), 5) == b"back"
            w.close()
        finally:
            agent_stop.set()
            await asyncio.wait_for(agent_task, 10)
            stop.set()
            await asyncio.wait_for(task, 15)


async def _garbage(port: int) -> None:
    with contextlib.suppress(ConnectionError, OSError, TimeoutError, asyncio.IncompleteReadError):
        r, w = await asyncio.open_connection(HOST, port)
        w.write(os.urandom(4096) + b"\r\n\r\n")
        await w.drain()
        async with asyncio.timeout(5):
            await r.read()
        w.close()


async def _wrong_ca_tls(port: int, wrong: Path) -> bool:
    """True when the TLS handshake with a foreign client certificate is refused."""
    context = ssl.create_default_context(cafile=str(wrong / "issued/ca.crt"))
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(str(wrong / "issued/proxy-client.crt"), str(wrong / "private/proxy-client.key"))
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(HOST, port, ssl=context), 5)
        w.write(b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n")
        data = await asyncio.wait_for(r.read(), 5)
        w.close()
        return data == b""
    except (ssl.SSLError, ConnectionError, OSError):
        return True


@pytest.mark.parametrize("mode", ["grpc", "http-connect"])
async def test_garbage_and_wrong_ca_are_refused_without_harm(tmp_path: Path, mode: str) -> None:
    tls = tls_files(tmp_path / "good")
    pki.write_pkis(tmp_path / "bad", "127.0.0.1")
    config = server_config(mode=mode, frontend_tls=tls["frontend"], agent_tls=tls["agent"])
    good = tmp_path / "good"
    async with running(config) as env, echo_server() as port:
        agent_tls = ClientTLS(str(good / "agent/issued/ca.crt"), str(good / "agent/issued/proxy-agent.crt"),
                              str(good / "agent/private/proxy-agent.key"))
        await env.add_agent(agent_config(env.server, tls=agent_tls))
        ports = [env.server.ports[k] for k in ("server", "agent", "health", "admin")]
        await asyncio.gather(*(_garbage(p) for p in ports))
        for p in ports[:2]:
            assert await _wrong_ca_tls(p, tmp_path / "bad/frontend")
        # A wrong-CA agent never registers.
        bad = tmp_path / "bad/agent"
        bad_tls = ClientTLS(str(good / "agent/issued/ca.crt"), str(bad / "issued/proxy-agent.crt"),
                            str(bad / "private/proxy-agent.key"))
        intruder = await env.add_agent(agent_config(env.server, tls=bad_tls, agent_id="intruder"), wait=False)
        await asyncio.sleep(0.5)
        assert "intruder" not in env.server.agent_ids() and not intruder.streams
        # The real clients still work.
        front_tls = ClientTLS(str(good / "frontend/issued/ca.crt"), str(good / "frontend/issued/proxy-client.crt"),
                              str(good / "frontend/private/proxy-client.key"))
        if mode == "grpc":
            r, w = await client.dial(env.frontend, HOST, port, tls=front_tls, timeout_s=5)
            with pytest.raises(client.DialError):
                await client.dial(env.frontend, HOST, port, timeout_s=2)  # plaintext to a TLS port
        else:
            r, w = await asyncio.open_connection(HOST, env.server.ports["server"],
                                                 ssl=front_tls.ssl_context(), server_hostname="localhost")
            w.write(f"CONNECT {HOST}:{port} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            assert await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 5) == \
                b"HTTP/1.1 200 Connection Established\r\n\r\n"
        w.write(b"still fine")
        assert await asyncio.wait_for(r.readexactly(10), 5) == b"still fine"
        w.close()
        async with httpx.AsyncClient() as http:
            health = await http.get(f"http://{HOST}:{env.server.ports['health']}/readyz")
            assert health.status_code == 200 and health.text == "ok"


async def test_agent_claiming_another_identity_is_refused(tmp_path: Path) -> None:
    tls = tls_files(tmp_path)
    cert, key = pki.issue_agent_cert(tmp_path / "member-a", tmp_path / "agent", "member-a",
                                     ["member-a", "127.0.0.1"])
    config = server_config(agent_tls=tls["agent"], proxy_strategies=("destHost", "default"))
    ca = str(tmp_path / "agent/issued/ca.crt")
    async with running(config) as env:
        bound = ClientTLS(ca, str(cert), str(key))
        for agent_id, identifiers in (("member-b", ""), ("member-a", "host=127.0.0.9")):
            rogue = await env.add_agent(agent_config(env.server, tls=bound, agent_id=agent_id,
                                                     agent_identifiers=identifiers), wait=False)
            await asyncio.sleep(0.5)
            assert not rogue.streams and not env.server.agent_ids()
            await env.stop_agent(rogue)
        await env.add_agent(agent_config(env.server, tls=bound, agent_id="member-a",
                                         agent_identifiers="host=127.0.0.1"))
        assert env.server.agent_ids() == ["member-a"]


async def test_ten_thousand_dials_to_a_dead_port_leave_nothing_behind() -> None:
    with socket.socket() as s:
        s.bind((HOST, 0))
        dead = s.getsockname()[1]  # closed once this block ends: connection refused, fast
    async with running() as env:
        agent = await env.add_agent(agent_config(env.server))
        async with client.TunnelClient(env.frontend, timeout_s=10) as tunnel:
            await asyncio.sleep(0.1)
            baseline = open_fds()
            semaphore = asyncio.Semaphore(200)
            failures = 0

            async def one() -> None:
                nonlocal failures
                async with semaphore:
                    try:
                        await tunnel.dial(HOST, dead)
                    except client.DialError:
                        failures += 1

            async with asyncio.timeout(120):
                await asyncio.gather(*(one() for _ in range(10_000)))
            assert failures == 10_000
            await eventually(lambda: not env.server.state.pending and not env.server.state.frontends)
            assert not agent.open_endpoints and all(not s.state.conns for s in agent.streams.values())
            await eventually(lambda: open_fds() <= baseline + 5, what=f"fds {open_fds()} vs {baseline}")


@pytest.mark.parametrize("flow_control", [True, False])
async def test_stalled_reader_does_not_slow_a_parallel_transfer(flow_control: bool) -> None:
    async def firehose(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            block = b"z" * 65536
            for _ in range(100_000):  # bounded: 6.5 GB, far more than any window
                writer.write(block)
                await writer.drain()
        writer.close()

    source = await asyncio.start_server(firehose, HOST, 0)
    source_port = source.sockets[0].getsockname()[1]
    try:
        async with running(server_config(legacy_buffer_bytes=4 * 1024 * 1024)) as env, \
                echo_server() as port:
            await env.add_agent(agent_config(env.server, window_bytes=(1 << 20) if flow_control else 0))
            _stalled_r, stalled_w = await client.dial(env.frontend, HOST, source_port, timeout_s=5)
            await asyncio.sleep(0.5)  # the stalled connection fills every buffer it may
            r, w = await client.dial(env.frontend, HOST, port, timeout_s=5)
            payload = os.urandom(1 << 20)
            async with asyncio.timeout(20):
                for _ in range(16):  # 16 MiB through the same agent stream
                    w.write(payload)
                    await w.drain()
                    assert await r.readexactly(len(payload)) == payload
            w.close()
            queued = sum(fe.recv.buffered for fe in env.server._frontends.values())
            if flow_control:
                assert queued <= (1 << 20) + (1 << 18)  # one window (+ one chunk) for the stalled one
            stalled_w.close()
    finally:
        source.close()
