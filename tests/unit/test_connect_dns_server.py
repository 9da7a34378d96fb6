"""`tether dns`'s server on 127.0.0.1: real `dig` over UDP and TCP, truncation, EDNS0, the answer
cache, forwarding to another server, metrics, and bad packets (fuzzed) that never stop it."""

from __future__ import annotations

import asyncio
import shutil
import socket
import struct
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_connect_dns_records import mcs_slice, mirror, service_import

from semaphore_dns import dig_answers
from tether.connect.dns.records import build_table
from tether.connect.dns.server import TCP, UDP, DnsServer, ServerConfig
from tether.net import dnswire as w
from tether.net import metrics as m

MANY = 100  # endpoints: more than fit in 1232 bytes

TABLE = build_table(
    imports=[service_import("myservice", ips=("10.42.42.42",)), service_import("headless", type_="Headless"),
             service_import("big", type_="Headless")],
    mcs_slices=[mcs_slice("headless", "clustera", ("10.3.0.100", "my-pet-1", True)),
                mcs_slice("headless", "clusterb", ("10.10.10.10", "my-pet-1", True)),
                mcs_slice("big", "clustera", *((f"10.9.0.{i}", f"pod-{i}", True) for i in range(MANY)))],
    mirrors=[mirror("aws-sys-log-73736d-fluentd", "aws", "10.5.184.192")],
)
UPSTREAM_TABLE = build_table(mirrors=[mirror("up-ns-73736d-thing", "up", "10.77.0.1")])


async def started(table: Any, **config: Any) -> DnsServer:
    server = DnsServer(ServerConfig(host="127.0.0.1", port=0, **config), table)
    await server.start()
    return server


@pytest.fixture
async def upstream() -> AsyncIterator[DnsServer]:
    server = await started(UPSTREAM_TABLE)
    yield server
    await server.close()


@pytest.fixture
async def server(upstream: DnsServer) -> AsyncIterator[DnsServer]:
    assert upstream.address is not None
    front = await started(TABLE, upstreams=(upstream.address,))
    yield front
    await front.close()


async def dig(server: DnsServer, *args: str) -> str:
    assert server.address is not None
    if shutil.which("dig") is None:
        pytest.skip("dig (dnsutils) is not installed")
    proc = await asyncio.create_subprocess_exec(
        "dig", f"@{server.address[0]}", "-p", str(server.address[1]), "+tries=1", "+time=5", *args,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = await proc.communicate()
    return out.decode()


async def udp(server: DnsServer, data: bytes, *, expect_reply: bool = True) -> bytes | None:
    assert server.address is not None
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, server.address)
        await loop.sock_sendall(sock, data)
        try:
            return await asyncio.wait_for(loop.sock_recv(sock, 65535), 5.0 if expect_reply else 0.3)
        except TimeoutError:
            return None
    finally:
        sock.close()


async def test_dig_every_record_type(server: DnsServer) -> None:
    out = await dig(server, "myservice.test.svc.clusterset.local", "A")
    assert "status: NOERROR" in out and " aa " in out.split("flags:")[1].split(";")[0] + " "
    assert dig_answers(out) == ["myservice.test.svc.clusterset.local. 5 IN A 10.42.42.42"]
    out = await dig(server, "_https._tcp.myservice.test.svc.clusterset.local", "SRV")
    assert dig_answers(out) == ["_https._tcp.myservice.test.svc.clusterset.local. 5 IN SRV 0 100 443 "
                            "myservice.test.svc.clusterset.local."]
    out = await dig(server, "dns-version.clusterset.local", "TXT")
    assert dig_answers(out) == ['dns-version.clusterset.local. 28800 IN TXT "1.0.0"']
    out = await dig(server, "headless.test.svc.clusterset.local", "A")
    assert sorted(dig_answers(out)) == ["headless.test.svc.clusterset.local. 5 IN A 10.10.10.10",
                                    "headless.test.svc.clusterset.local. 5 IN A 10.3.0.100"]
    out = await dig(server, "my-pet-1.clusterb.headless.test.svc.clusterset.local", "A")
    assert dig_answers(out) == ["my-pet-1.clusterb.headless.test.svc.clusterset.local. 5 IN A 10.10.10.10"]
    out = await dig(server, "_https._tcp.headless.test.svc.clusterset.local", "SRV")
    assert sorted(a.split()[-1] for a in dig_answers(out)) == [
        "my-pet-1.clustera.headless.test.svc.clusterset.local.", "my-pet-1.clusterb.headless.test.svc.clusterset.local."]
    out = await dig(server, "-x", "10.3.0.100")
    assert dig_answers(out) == ["100.0.3.10.in-addr.arpa. 5 IN PTR my-pet-1.clustera.headless.test.svc.clusterset.local."]
    out = await dig(server, "fluentd.sys-log.svc.cluster.aws", "A")
    assert dig_answers(out) == ["fluentd.sys-log.svc.cluster.aws. 5 IN A 10.5.184.192"]
    out = await dig(server, "nothing.test.svc.clusterset.local", "A")
    assert "status: NXDOMAIN" in out and "clusterset.local. 5 IN SOA" in " ".join(out.split())


async def test_dig_over_tcp_and_forwarding(server: DnsServer, upstream: DnsServer) -> None:
    out = await dig(server, "+tcp", "myservice.test.svc.clusterset.local")
    assert dig_answers(out) == ["myservice.test.svc.clusterset.local. 5 IN A 10.42.42.42"]
    out = await dig(server, "thing.ns.svc.cluster.up", "A")  # not ours: the upstream answers
    assert dig_answers(out) == ["thing.ns.svc.cluster.up. 5 IN A 10.77.0.1"]
    out = await dig(server, "+tcp", "thing.ns.svc.cluster.up", "A")
    assert dig_answers(out) == ["thing.ns.svc.cluster.up. 5 IN A 10.77.0.1"]
    assert server.counters.forwards >= 2
    await dig(server, "+nocookie", "thing.ns.svc.cluster.up", "A")
    before = upstream.udp_received
    await dig(server, "+nocookie", "thing.ns.svc.cluster.up", "A")  # cached for its TTL
    assert upstream.udp_received == before


async def test_truncation_and_edns_buffer_sizes(server: DnsServer) -> None:
    name = "big.test.svc.clusterset.local"
    out = await dig(server, "+notcp", "+ignore", "+noedns", name)
    assert " tc" in out.split("flags:")[1].split(";")[0] and not dig_answers(out)
    out = await dig(server, "+notcp", "+ignore", "+bufsize=4096", name)  # the server sends at most 1232
    assert " tc" in out.split("flags:")[1].split(";")[0]
    out = await dig(server, name)  # dig retries over TCP after TC
    assert len(dig_answers(out)) == MANY
    small = w.make_query(9, name, w.TYPE_A, edns=4096)
    reply = await udp(server, small)
    assert reply is not None and len(reply) <= 1232 and w.parse_message(reply).flags & w.FLAG_TC
    ok = await udp(server, w.make_query(10, "headless.test.svc.clusterset.local", w.TYPE_A, edns=1232))
    assert ok is not None
    parsed = w.parse_message(ok)
    assert parsed.opt is not None and len(parsed.answers) == 2 and not parsed.flags & w.FLAG_TC


async def test_cache_serves_the_same_bytes_with_the_new_id(server: DnsServer) -> None:
    query = w.make_query(100, "myservice.test.svc.clusterset.local", w.TYPE_A)
    first = await udp(server, query)
    hits = server.cache.stats.hits
    second = await udp(server, struct.pack("!H", 200) + query[2:])
    assert first is not None and second is not None
    assert server.cache.stats.hits == hits + 1
    assert second[:2] == struct.pack("!H", 200) and second[2:] == first[2:]
    server.set_table(build_table(imports=[service_import("myservice", ips=("10.42.42.99",))]))
    third = await udp(server, query)
    assert third is not None and w.parse_message(third).answers[0].rdata == w.A("10.42.42.99")
    server.set_table(TABLE)


async def test_cache_ignores_edns_cookies(server: DnsServer) -> None:
    await dig(server, "myservice.test.svc.clusterset.local")  # a fresh random cookie each time
    hits = server.cache.stats.hits
    out = await dig(server, "myservice.test.svc.clusterset.local")
    assert dig_answers(out) == ["myservice.test.svc.clusterset.local. 5 IN A 10.42.42.42"]
    assert server.cache.stats.hits == hits + 1


async def test_metrics_count_requests_and_rcodes(server: DnsServer) -> None:
    await udp(server, w.make_query(1, "nothing.clusterset.local", w.TYPE_A))
    text = m.render(server.metric_families())
    assert 'tether_dns_requests_total{proto="udp"}' in text
    assert 'tether_dns_responses_total{rcode="NXDOMAIN"}' in text
    assert "tether_dns_cache_hits_total" in text and "tether_dns_records" in text


async def test_refused_without_upstreams() -> None:
    lone = await started(TABLE)
    try:
        reply = await udp(lone, w.make_query(3, "example.org", w.TYPE_A))
        assert reply is not None and w.parse_message(reply).rcode == w.RCODE_REFUSED
    finally:
        await lone.close()


async def test_bad_packets_get_formerr_or_are_dropped(server: DnsServer) -> None:
    assert await udp(server, b"\x01\x02\x03", expect_reply=False) is None  # shorter than a header
    response = w.encode_message(w.Message(5, w.FLAG_QR, (w.Question("x.clusterset.local", 1),)))
    assert await udp(server, response, expect_reply=False) is None  # never answer an answer
    truncated = w.make_query(6, "myservice.test.svc.clusterset.local", w.TYPE_A)[:-3]
    reply = await udp(server, truncated)
    assert reply is not None and reply[:2] == truncated[:2] and reply[3] & 0xF == w.RCODE_FORMERR
    oversized = w.make_query(7, "myservice.test.svc.clusterset.local", w.TYPE_A) + b"\0" * 5000
    reply = await udp(server, oversized)
    assert reply is not None and reply[3] & 0xF == w.RCODE_FORMERR
    loop_ptr = struct.pack("!HHHHHH", 8, 0, 1, 0, 0, 0) + b"\xc0\x0c" + b"\0\x01\0\x01"
    reply = await udp(server, loop_ptr)
    assert reply is not None and reply[3] & 0xF == w.RCODE_FORMERR
    high_bytes = struct.pack("!HHHHHH", 9, 0, 1, 0, 0, 0) + b"\x03\xff\xfe\x00\x0bclusterset\x05local\0\0\x01\0\x01"
    reply = await udp(server, high_bytes)
    assert reply is not None and reply[:2] == high_bytes[:2]
    ok = await udp(server, w.make_query(11, "myservice.test.svc.clusterset.local", w.TYPE_A))
    assert ok is not None and w.parse_message(ok).answers


def _valid_query() -> bytes:
    return w.make_query(77, "my-pet-1.clustera.headless.test.svc.clusterset.local", w.TYPE_A, edns=1232)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(
    st.binary(max_size=600),
    st.builds(lambda cut, junk: _valid_query()[:cut] + junk, st.integers(0, 80), st.binary(max_size=40)),
    st.builds(lambda at, byte: (lambda q: q[:at] + bytes([byte]) + q[at + 1:])(_valid_query()),
              st.integers(0, 70), st.integers(0, 255)),
))
def test_fuzzed_queries_never_raise(data: bytes) -> None:
    server = DnsServer(ServerConfig(port=0, upstreams=()), TABLE)
    sent: list[bytes] = []
    for transport in (UDP, TCP):
        out = server.miss(data, transport, sent.append)
        if out is not None:
            assert out[:2] == data[:2]  # always the query's ID
            assert len(out) <= (1232 if transport == UDP else 65535)
            w.parse_message(out)  # and always a well-formed message


async def test_server_keeps_answering_after_a_burst_of_garbage(server: DnsServer) -> None:
    assert server.address is not None
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for i in range(300):
            sock.sendto(bytes((i * 7 + j) & 0xFF for j in range(i % 90)), server.address)
    finally:
        sock.close()
    _reader, writer = await asyncio.open_connection(*server.address)
    writer.write(b"\x00\x05hello")  # a TCP frame that is no query
    writer.write(b"\xff\xff")  # and a length that never arrives
    await writer.drain()
    writer.close()
    reply = await udp(server, _valid_query())
    assert reply is not None and w.parse_message(reply).answers[0].rdata == w.A("10.3.0.100")
