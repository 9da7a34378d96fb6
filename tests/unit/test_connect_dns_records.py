"""`tether dns`'s names (pure: build_table + answer), checked against the MCS DNS specification's
examples (schema 1.0.0) and Semaphore's names."""

from __future__ import annotations

from typing import Any

import pytest

from tether.connect.dns.answer import answer
from tether.connect.dns.records import build_table, split_name
from tether.net import dnswire as w


def service_import(name: str, ns: str = "test", *, type_: str = "ClusterSetIP", ips: tuple[str, ...] = (),
                   ports: tuple[tuple[str, int], ...] = (("https", 443),)) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns},
            "spec": {"type": type_, "ips": list(ips),
                     "ports": [{"name": n, "port": p, "protocol": "TCP"} for n, p in ports]}}


def mcs_slice(service: str, cluster: str, *endpoints: tuple[str, str | None, bool], ns: str = "test",
              port: int = 443, family: str = "IPv4") -> dict[str, Any]:
    return {"metadata": {"name": f"{service}-{cluster}-x", "namespace": ns,
                         "labels": {"multicluster.kubernetes.io/service-name": service,
                                    "multicluster.kubernetes.io/source-cluster": cluster}},
            "addressType": family, "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": ready}, **({"hostname": h} if h else {})}
                          for ip, h, ready in endpoints]}


TABLE = build_table(
    imports=[service_import("myservice", ips=("10.42.42.42",)),
             service_import("dual", ips=("10.42.42.43", "2001:db8::1")),
             service_import("headless", type_="Headless"),
             service_import("empty", type_="Headless")],
    mcs_slices=[mcs_slice("headless", "clustera", ("10.3.0.100", "my-pet-1", True), ("10.3.0.101", "my-pet-2", True),
                          ("10.3.0.109", "not-ready", False)),
                mcs_slice("headless", "clusterb", ("10.10.10.10", "my-pet-1", True)),
                mcs_slice("empty", "clustera", ("10.3.0.7", "sleepy", False))],
)


def ask(name: str, qtype: int = w.TYPE_A, table: Any = TABLE) -> w.Message:
    result = answer(w.Message(7, w.FLAG_RD, (w.Question(name, qtype),)), table)
    assert result is not None, f"{name} was not answered (forwarded)"
    return result


def rdatas(message: w.Message) -> list[Any]:
    return [r.rdata for r in message.answers]


def test_schema_version_txt() -> None:
    got = ask("dns-version.clusterset.local", w.TYPE_TXT)
    assert got.rcode == w.RCODE_NOERROR and got.flags & w.FLAG_AA
    assert rdatas(got) == [w.TXT(("1.0.0",))]


@pytest.mark.parametrize(("name", "qtype", "expected"), [
    ("myservice.test.svc.clusterset.local", w.TYPE_A, [w.A("10.42.42.42")]),
    ("dual.test.svc.clusterset.local", w.TYPE_A, [w.A("10.42.42.43")]),
    ("dual.test.svc.clusterset.local", w.TYPE_AAAA, [w.AAAA("2001:db8::1")]),
    ("MyService.Test.svc.clusterset.local", w.TYPE_A, [w.A("10.42.42.42")]),  # case-insensitive
    ("_https._tcp.myservice.test.svc.clusterset.local", w.TYPE_SRV,
     [w.SRV(0, 100, 443, "myservice.test.svc.clusterset.local")]),
])
def test_clusterset_ip_service(name: str, qtype: int, expected: list[Any]) -> None:
    got = ask(name, qtype)
    assert got.rcode == w.RCODE_NOERROR
    assert rdatas(got) == expected
    assert got.answers[0].name == name  # the question's spelling comes back


def test_srv_additional_holds_the_target_address() -> None:
    got = ask("_https._tcp.myservice.test.svc.clusterset.local", w.TYPE_SRV)
    assert [r.rdata for r in got.additional] == [w.A("10.42.42.42")]


def test_no_per_cluster_name_for_clusterset_ip() -> None:
    assert ask("clustera.myservice.test.svc.clusterset.local").rcode == w.RCODE_NXDOMAIN


def test_headless_answers_every_ready_endpoint_of_every_cluster() -> None:
    got = ask("headless.test.svc.clusterset.local")
    assert sorted(r.address for r in rdatas(got)) == ["10.10.10.10", "10.3.0.100", "10.3.0.101"]


@pytest.mark.parametrize(("name", "address"), [
    ("my-pet-1.clustera.headless.test.svc.clusterset.local", "10.3.0.100"),
    ("my-pet-2.clustera.headless.test.svc.clusterset.local", "10.3.0.101"),
    ("my-pet-1.clusterb.headless.test.svc.clusterset.local", "10.10.10.10"),
])
def test_headless_per_endpoint_names(name: str, address: str) -> None:
    assert rdatas(ask(name)) == [w.A(address)]


def test_headless_srv_is_endpoints_times_named_ports() -> None:
    got = ask("_https._tcp.headless.test.svc.clusterset.local", w.TYPE_SRV)
    targets = sorted(r.target for r in rdatas(got))
    assert targets == ["my-pet-1.clustera.headless.test.svc.clusterset.local",
                       "my-pet-1.clusterb.headless.test.svc.clusterset.local",
                       "my-pet-2.clustera.headless.test.svc.clusterset.local"]
    assert {r.port for r in rdatas(got)} == {443}
    assert len(got.additional) == 3


def test_headless_without_ready_endpoints_is_nxdomain() -> None:
    got = ask("empty.test.svc.clusterset.local")
    assert got.rcode == w.RCODE_NXDOMAIN
    assert got.authority and got.authority[0].rtype == w.TYPE_SOA
    assert ask("not-ready.clustera.headless.test.svc.clusterset.local").rcode == w.RCODE_NXDOMAIN


def test_cluster_label_of_a_headless_service_has_no_address() -> None:
    got = ask("clustera.headless.test.svc.clusterset.local")
    assert got.rcode == w.RCODE_NOERROR and not got.answers  # an empty non-terminal: NODATA


def test_nodata_for_a_missing_type() -> None:
    got = ask("myservice.test.svc.clusterset.local", w.TYPE_AAAA)
    assert got.rcode == w.RCODE_NOERROR and not got.answers and got.authority[0].rtype == w.TYPE_SOA


def test_ptr_for_headless_endpoints() -> None:
    got = ask("100.0.3.10.in-addr.arpa", w.TYPE_PTR)
    assert rdatas(got) == [w.PTR("my-pet-1.clustera.headless.test.svc.clusterset.local")]


def test_names_outside_the_zones_are_forwarded() -> None:
    query = w.Message(1, w.FLAG_RD, (w.Question("example.org", w.TYPE_A),))
    assert answer(query, TABLE) is None
    query = w.Message(1, w.FLAG_RD, (w.Question("9.9.9.9.in-addr.arpa", w.TYPE_PTR),))
    assert answer(query, TABLE) is None


def test_zone_apex_soa() -> None:
    got = ask("clusterset.local", w.TYPE_SOA)
    assert got.answers[0].rtype == w.TYPE_SOA


def test_not_a_query_or_two_questions() -> None:
    two = w.Message(1, 0, (w.Question("a.clusterset.local", 1), w.Question("b.clusterset.local", 1)))
    result = answer(two, TABLE)
    assert result is not None and result.rcode == w.RCODE_FORMERR
    notify = w.Message(1, 4 << 11, (w.Question("clusterset.local", 6),))
    result = answer(notify, TABLE)
    assert result is not None and result.rcode == w.RCODE_NOTIMP


# Semaphore ------------------------------------------------------------------------------------


def mirror(name: str, prefix: str, cluster_ip: str, *, annotations: dict[str, str] | None = None,
           ns: str = "sys-semaphore", ports: tuple[tuple[str, int], ...] = (("http", 8888),)) -> dict[str, Any]:
    labels = {"global-svc": "true"} if prefix == "gl" else {"mirrored-svc": "true", "mirror-svc-prefix-sync": prefix}
    return {"metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": annotations or {}},
            "spec": {"clusterIP": cluster_ip, "clusterIPs": [cluster_ip] if cluster_ip != "None" else ["None"],
                     "ports": [{"name": n, "port": p, "protocol": "TCP"} for n, p in ports]}}


def mirror_slice(service: str, *endpoints: tuple[str, str | None], ns: str = "sys-semaphore") -> dict[str, Any]:
    return {"metadata": {"name": f"{service}-abc", "namespace": ns,
                         "labels": {"kubernetes.io/service-name": service, "mirrored-svc": "true"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8888, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}, **({"hostname": h} if h else {})}
                          for ip, h in endpoints]}


LONG = "a-very-long-namespace-name-indeed"
SEMAPHORE = build_table(
    mirrors=[mirror("aws-sys-log-73736d-fluentd", "aws", "10.5.184.192"),
             mirror("gl-sys-log-73736d-fluentd", "gl", "10.5.184.193"),
             mirror("aws-kafka-73736d-zk", "aws", "None"),
             mirror("aws-a-very-long-namespace-name-indeed-73736d-s-0123456789", "aws", "10.5.0.9",
                    annotations={"connect.tether.io/source-namespace": LONG,
                                 "connect.tether.io/source-name": "service-with-a-long-name"})],
    mirror_slices=[mirror_slice("aws-kafka-73736d-zk", ("10.2.3.19", "zk-0"), ("10.2.4.19", None))],
    prefixes=("gcp",),
)


@pytest.mark.parametrize(("name", "expected"), [
    ("fluentd.sys-log.svc.cluster.aws", [w.A("10.5.184.192")]),
    ("fluentd.sys-log.svc.cluster.global", [w.A("10.5.184.193")]),
    ("zk.kafka.svc.cluster.aws", [w.A("10.2.3.19"), w.A("10.2.4.19")]),
    ("zk-0.zk.kafka.svc.cluster.aws", [w.A("10.2.3.19")]),
    (f"service-with-a-long-name.{LONG}.svc.cluster.aws", [w.A("10.5.0.9")]),  # from the annotations
])
def test_semaphore_names(name: str, expected: list[Any]) -> None:
    got = ask(name, table=SEMAPHORE)
    assert got.rcode == w.RCODE_NOERROR
    assert sorted(rdatas(got), key=str) == sorted(expected, key=str)
    assert all(r.ttl == 5 for r in got.answers)  # what Semaphore's users see: `drill` shows TTL 5


def test_semaphore_srv_and_unknown_names() -> None:
    got = ask("_http._tcp.fluentd.sys-log.svc.cluster.aws", w.TYPE_SRV, table=SEMAPHORE)
    assert rdatas(got) == [w.SRV(0, 100, 8888, "fluentd.sys-log.svc.cluster.aws")]
    assert ask("nope.sys-log.svc.cluster.aws", table=SEMAPHORE).rcode == w.RCODE_NXDOMAIN
    assert ask("nope.sys-log.svc.cluster.gcp", table=SEMAPHORE).rcode == w.RCODE_NXDOMAIN  # --prefix gcp
    query = w.Message(1, w.FLAG_RD, (w.Question("fluentd.sys-log.svc.cluster.azure", 1),))
    assert answer(query, SEMAPHORE) is None  # not a known prefix: forwarded


@pytest.mark.parametrize(("name", "prefix", "expected"), [
    ("aws-sys-log-73736d-fluentd", "aws", ("sys-log", "fluentd")),
    ("aws-a-73736d-b-73736d-c", "aws", ("a", "b-73736d-c")),
    ("gcp-sys-log-73736d-fluentd", "aws", None),
    ("aws-sys-log-fluentd", "aws", None),
])
def test_split_name(name: str, prefix: str, expected: tuple[str, str] | None) -> None:
    assert split_name(name, prefix) == expected
