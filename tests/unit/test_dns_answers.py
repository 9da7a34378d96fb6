"""What the cluster DNS answers, from Services and EndpointSlices (pure: build_zone + answer)."""

from __future__ import annotations

from typing import Any

from tether.local.services.dns import answer, build_zone, respond
from tether.net import dnswire as w


def svc(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


def endpoint_slice(service: str, *endpoints: tuple[str, bool, str | None], port: int = 8080) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{service}-abcde", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": ready}, **({"hostname": h} if h else {})}
                      for ip, ready, h in endpoints],
    }


ZONE = build_zone(
    [svc("web", type="ClusterIP", clusterIP="127.64.0.5", ports=[{"name": "http", "port": 80, "protocol": "TCP"}]),
     svc("db", type="ClusterIP", clusterIP="None", ports=[{"name": "http", "port": 5432, "protocol": "TCP"}]),
     svc("ext", type="ExternalName", externalName="example.com")],
    [endpoint_slice("web", ("127.16.1.2", True, None)),
     endpoint_slice("db", ("127.16.1.3", True, "db-0"), ("127.16.1.4", True, None), ("127.16.1.9", False, None),
                    port=5432)],
)


def ask(name: str, qtype: int = w.TYPE_A, *, edns: bool = False) -> w.Message:
    query = w.Message(42, w.FLAG_RD, (w.Question(name, qtype),),
                      additional=(w.opt_record(),) if edns else ())
    return answer(query, ZONE)


def addresses(message: w.Message) -> list[str]:
    return sorted(r.rdata.address for r in message.answers if isinstance(r.rdata, w.A))


def test_cluster_ip_service() -> None:
    reply = ask("web.default.svc.cluster.local")
    assert reply.rcode == w.RCODE_NOERROR and reply.flags & w.FLAG_AA and reply.flags & w.FLAG_QR
    assert reply.flags & w.FLAG_RD and reply.id == 42
    assert addresses(reply) == ["127.64.0.5"]
    assert addresses(ask("WEB.Default.svc.cluster.local.")) == ["127.64.0.5"]  # case-insensitive


def test_headless_service_and_hostnames() -> None:
    assert addresses(ask("db.default.svc.cluster.local")) == ["127.16.1.3", "127.16.1.4"]
    assert addresses(ask("db-0.db.default.svc.cluster.local")) == ["127.16.1.3"]
    assert addresses(ask("127-16-1-4.db.default.svc.cluster.local")) == ["127.16.1.4"]


def test_srv_records() -> None:
    reply = ask("_http._tcp.web.default.svc.cluster.local", w.TYPE_SRV)
    assert [r.rdata for r in reply.answers] == [w.SRV(0, 100, 80, "web.default.svc.cluster.local")]
    assert addresses(w.Message(0, 0, answers=reply.additional)) == ["127.64.0.5"]
    headless = ask("_http._tcp.db.default.svc.cluster.local", w.TYPE_SRV)
    assert sorted((r.rdata.target, r.rdata.port) for r in headless.answers if isinstance(r.rdata, w.SRV)) == [
        ("127-16-1-4.db.default.svc.cluster.local", 5432), ("db-0.db.default.svc.cluster.local", 5432)]


def test_nxdomain_nodata_refused() -> None:
    missing = ask("nope.default.svc.cluster.local")
    assert missing.rcode == w.RCODE_NXDOMAIN and missing.answers == ()
    assert [r.rtype for r in missing.authority] == [w.TYPE_SOA]
    nodata = ask("web.default.svc.cluster.local", w.TYPE_AAAA)
    assert nodata.rcode == w.RCODE_NOERROR and nodata.answers == () and nodata.authority[0].rtype == w.TYPE_SOA
    assert ask("default.svc.cluster.local").rcode == w.RCODE_NOERROR  # an empty non-terminal exists
    outside = ask("example.com")
    assert outside.rcode == w.RCODE_REFUSED and outside.answers == ()
    assert ask("cluster.local", w.TYPE_SOA).answers[0].rtype == w.TYPE_SOA


def test_external_name_and_pods() -> None:
    reply = ask("ext.default.svc.cluster.local")
    assert [r.rdata for r in reply.answers] == [w.CNAME("example.com")]
    assert addresses(ask("127-16-1-5.default.pod.cluster.local")) == ["127.16.1.5"]
    assert ask("bogus.default.pod.cluster.local").rcode == w.RCODE_NXDOMAIN


def test_edns_is_echoed_and_bytes_round_trip() -> None:
    assert ask("web.default.svc.cluster.local", edns=True).opt is not None
    assert ask("web.default.svc.cluster.local").opt is None
    data = respond(w.make_query(9, "web.default.svc.cluster.local", w.TYPE_A, edns=1232), ZONE, limit=4096)
    assert data is not None
    parsed = w.parse_message(data)
    assert parsed.id == 9 and addresses(parsed) == ["127.64.0.5"]
    garbage = respond(b"\x00\x07" + b"\xff" * 20, ZONE)
    assert garbage is not None and w.parse_message(garbage).rcode == w.RCODE_FORMERR
    assert respond(b"\x01", ZONE) is None


def test_query_log_line_reads_like_corednss_log_plugin() -> None:
    from tether.local.services.dns import query_log_line

    data = w.encode_message(w.Message(42, w.FLAG_RD, (w.Question("web.default.svc.cluster.local", w.TYPE_A),)))
    reply = respond(data, ZONE)
    line = query_log_line(data, reply, ("127.16.1.7", 40000), "udp", 0.000123)
    assert line.startswith('[INFO] 127.16.1.7:40000 - 42 "A IN web.default.svc.cluster.local. udp ')
    assert '" NOERROR qr,aa,rd ' in line and line.endswith(" 0.000123000s")
    missing = w.encode_message(w.Message(7, 0, (w.Question("nope.default.svc.cluster.local", w.TYPE_A),)))
    assert '" NXDOMAIN qr,aa ' in query_log_line(missing, respond(missing, ZONE), ("::1", 1), "tcp", 0.0)
    assert "malformed" in query_log_line(b"\x00", None, ("127.0.0.1", 1), "udp", 0.0)
