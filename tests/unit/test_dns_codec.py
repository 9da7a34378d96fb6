"""The DNS wire codec: golden bytes for queries and responses, compression, EDNS0, bad input."""

from __future__ import annotations

import pytest

from tether.net import dnswire as w

QNAME = b"\x03web\x07default\x03svc\x07cluster\x05local\x00"
QUERY = bytes.fromhex("123401000001000000000000") + QNAME + b"\x00\x01\x00\x01"
# as dig sends it: EDNS0 OPT with a 1232-byte payload size and a client cookie
COOKIE = bytes.fromhex("000a0008") + bytes.fromhex("0102030405060708")
DIG_QUERY = (bytes.fromhex("abcd01200001000000000001") + QNAME + b"\x00\x01\x00\x01"
             + b"\x00" + bytes.fromhex("0029") + bytes.fromhex("04d0") + bytes.fromhex("00000000")
             + bytes.fromhex("000c") + COOKIE)


def test_parse_query_golden() -> None:
    message = w.parse_message(QUERY)
    assert message.id == 0x1234
    assert message.flags == w.FLAG_RD
    assert message.questions == (w.Question("web.default.svc.cluster.local", w.TYPE_A, w.CLASS_IN),)
    assert message.opt is None and message.udp_limit == 512


def test_parse_dig_query_with_edns() -> None:
    message = w.parse_message(DIG_QUERY)
    assert message.questions[0].name == "web.default.svc.cluster.local"
    assert message.opt is not None
    assert message.opt.rclass == 1232 and message.udp_limit == 1232
    assert message.opt.rdata == w.Raw(COOKIE)


def test_make_query_matches_golden() -> None:
    assert w.make_query(0x1234, "web.default.svc.cluster.local", w.TYPE_A) == QUERY


def test_encode_response_golden_with_compression() -> None:
    response = w.Message(
        0x1234, w.FLAG_QR | w.FLAG_AA | w.FLAG_RD,
        (w.Question("web.default.svc.cluster.local", w.TYPE_A),),
        (w.Record.of("web.default.svc.cluster.local", 5, w.A("127.64.0.5")),),
    )
    expected = (bytes.fromhex("123485000001000100000000") + QNAME + b"\x00\x01\x00\x01"
                + bytes.fromhex("c00c" "0001" "0001" "00000005" "0004" "7f400005"))
    assert w.encode_message(response) == expected
    uncompressed = w.encode_message(response, compress=False)
    assert uncompressed == expected.replace(bytes.fromhex("c00c"), QNAME)
    assert w.parse_message(expected) == response


def test_srv_soa_cname_round_trip() -> None:
    soa = w.SOA("ns.dns.cluster.local", "hostmaster.cluster.local", 3, 7200, 1800, 86400, 5)
    response = w.Message(
        7, w.FLAG_QR,
        (w.Question("_http._tcp.web.default.svc.cluster.local", w.TYPE_SRV),),
        (w.Record.of("_http._tcp.web.default.svc.cluster.local", 5, w.SRV(0, 100, 80, "web.default.svc.cluster.local")),
         w.Record.of("ext.default.svc.cluster.local", 5, w.CNAME("example.com"))),
        (w.Record.of("cluster.local", 5, soa),),
        (w.Record.of("web.default.svc.cluster.local", 5, w.A("127.64.0.5")), w.opt_record(1232)),
    )
    data = w.encode_message(response)
    assert w.parse_message(data) == response
    # the SRV target is written in full (RFC 2782), so it parses without the rest of the message
    srv_rdata = bytes.fromhex("0000" "0064" "0050") + QNAME
    assert srv_rdata in data


def test_truncation_sets_tc() -> None:
    answers = tuple(w.Record.of("web.default.svc.cluster.local", 5, w.A(f"127.16.1.{i}")) for i in range(1, 60))
    response = w.Message(1, w.FLAG_QR, (w.Question("web.default.svc.cluster.local", w.TYPE_A),), answers)
    assert len(w.encode_message(response)) > 512
    short = w.parse_message(w.encode_for_limit(response, 512))
    assert short.flags & w.FLAG_TC and short.answers == ()
    assert w.parse_message(w.encode_for_limit(response, 4096)).answers == answers


@pytest.mark.parametrize("data", [
    b"\x00\x01",  # shorter than a header
    bytes.fromhex("000100000001000000000000") + b"\x03web",  # name runs off the end
    bytes.fromhex("000100000001000000000000") + b"\xc0\x0c\x00\x01\x00\x01",  # pointer to itself
    bytes.fromhex("000100000001000000000000") + b"\x40abc\x00\x00\x01\x00\x01",  # unknown label type
])
def test_bad_messages_raise(data: bytes) -> None:
    with pytest.raises(w.DnsFormatError):
        w.parse_message(data)


def test_label_too_long_is_refused_on_encode() -> None:
    with pytest.raises(w.DnsFormatError):
        w.make_query(1, "x" * 64 + ".cluster.local", w.TYPE_A)


# -- against dnspython, as a reference implementation -----------------------------------------

import dns.message  # noqa: E402
import dns.rdatatype  # noqa: E402


def test_dnspython_reads_what_we_write() -> None:
    soa = w.SOA("ns.dns.cluster.local", "hostmaster.cluster.local", 3, 7200, 1800, 86400, 5)
    response = w.Message(
        9, w.FLAG_QR | w.FLAG_AA,
        (w.Question("_http._tcp.web.default.svc.cluster.local", w.TYPE_SRV),),
        (w.Record.of("_http._tcp.web.default.svc.cluster.local", 5, w.SRV(0, 100, 80, "web.default.svc.cluster.local")),
         w.Record.of("web.default.svc.cluster.local", 5, w.A("127.64.0.5")),
         w.Record.of("web.default.svc.cluster.local", 5, w.AAAA("fd00::5")),
         w.Record.of("ext.default.svc.cluster.local", 5, w.CNAME("example.com"))),
        (w.Record.of("cluster.local", 5, soa),),
        (w.opt_record(1232),),
    )
    parsed = dns.message.from_wire(w.encode_message(response))
    assert parsed.id == 9 and parsed.payload == 1232
    texts = sorted(rr.to_text() for rrset in parsed.answer + parsed.authority for rr in [rrset])
    assert texts == sorted([
        "_http._tcp.web.default.svc.cluster.local. 5 IN SRV 0 100 80 web.default.svc.cluster.local.",
        "web.default.svc.cluster.local. 5 IN A 127.64.0.5",
        "web.default.svc.cluster.local. 5 IN AAAA fd00::5",
        "ext.default.svc.cluster.local. 5 IN CNAME example.com.",
        "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 3 7200 1800 86400 5",
    ])


@pytest.mark.parametrize("qtype", ["A", "AAAA", "SRV", "TXT", "ANY"])
def test_we_read_what_dnspython_writes(qtype: str) -> None:
    query = dns.message.make_query("web.default.svc.cluster.local", qtype, use_edns=0, payload=4096)
    message = w.parse_message(query.to_wire())
    assert message.id == query.id
    assert message.questions == (w.Question("web.default.svc.cluster.local",
                                            int(dns.rdatatype.from_text(qtype))),)
    assert message.udp_limit == 4096
