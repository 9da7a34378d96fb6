"""The local cluster DNS's Corefile: parsing, what each plugin compiles to, and the query path
(Semaphore's rewrite stanza, fallthrough, forwarding only to loopback, unsupported plugins)."""

from __future__ import annotations

from typing import Any

import pytest

from semaphore_dns import MIRROR_NAMESPACE, SEMAPHORE_STANZA
from tether.local.services.corefile import (
    CorefileError,
    apply_rewrites,
    compile_corefile,
    default_corefile,
    normalize_zone,
    parse,
)
from tether.local.services.dns import answer, build_zone
from tether.local.services.dnsplugins import Forward, Resolver
from tether.net import dnswire as w


def test_default_corefile_parses_like_kubeadm_s() -> None:
    config = compile_corefile(default_corefile())
    assert config.warnings == ()
    (block,) = config.blocks
    assert block.zones == ("",)
    assert block.kubernetes is not None and block.kubernetes.ttl == 30
    assert block.kubernetes.zones == ("cluster.local", "in-addr.arpa", "ip6.arpa")
    assert block.kubernetes.fallthrough == ("in-addr.arpa", "ip6.arpa")
    assert block.forward is not None and block.forward.targets == ("/etc/resolv.conf",)
    assert block.cache_ttl == 30 and block.errors and block.loadbalance


@pytest.mark.parametrize(("key", "zone"), [(".:53", ""), (".", ""), ("cluster.aws", "cluster.aws"),
                                           ("dns://Cluster.AWS.:53", "cluster.aws"), ("cluster.global:53", "cluster.global")])
def test_zone_keys(key: str, zone: str) -> None:
    assert normalize_zone(key) == zone


@pytest.mark.parametrize("text", ["cluster.aws {\n forward . 1.2.3.4\n", "forward . 1.2.3.4\n",
                                  ".:53 {\n kubernetes cluster.local {\n ttl 5\n}\n"])
def test_unreadable_corefiles(text: str) -> None:
    with pytest.raises(CorefileError, match="line"):
        parse(text)


def test_unsupported_plugins_are_named() -> None:
    config = compile_corefile(".:53 {\n    hosts /etc/hosts\n    kubernetes cluster.local\n    template IN A x\n}\n")
    assert len(config.warnings) == 2
    assert "plugin hosts is not supported" in config.warnings[0] and "line 2" in config.warnings[0]
    assert "plugin template" in config.warnings[1]


def test_server_block_selection_is_longest_zone() -> None:
    config = compile_corefile(SEMAPHORE_STANZA + default_corefile())
    chosen = config.select("fluentd.sys-log.svc.cluster.aws")
    assert chosen is not None and chosen.zones == ("cluster.aws",)
    fallback = config.select("web.default.svc.cluster.local")
    assert fallback is not None and fallback.zones == ("",)


def test_semaphore_rewrite_both_ways() -> None:
    (block,) = compile_corefile(SEMAPHORE_STANZA).blocks
    result = apply_rewrites(block.rewrites, "fluentd.sys-log.svc.cluster.aws")
    assert result.name == "aws-sys-log-73736d-fluentd.sys-semaphore.svc.cluster.local"
    assert result.revert("aws-sys-log-73736d-fluentd.sys-semaphore.svc.cluster.local") == \
        "fluentd.sys-log.svc.cluster.aws"
    pod = apply_rewrites(block.rewrites, "fluentd-0.fluentd.sys-log.svc.cluster.aws")
    assert pod.name == "fluentd-0.aws-sys-log-73736d-fluentd.sys-semaphore.svc.cluster.local"


@pytest.mark.parametrize(("rule", "name", "expected"), [
    ("rewrite name exact foo.example.com bar.svc.cluster.local", "foo.example.com", "bar.svc.cluster.local"),
    ("rewrite name suffix .example.com .svc.cluster.local", "web.example.com", "web.svc.cluster.local"),
    ("rewrite name prefix foo. bar.", "foo.x.y", "bar.x.y"),
    ("rewrite name substring old new", "an.old.name", "an.new.name"),
    ("rewrite stop name regex (.*)\\.c\\.aws {1}.default.svc.cluster.local answer name (.*)\\.default\\.svc\\.cluster\\.local {1}.c.aws",
     "web.c.aws", "web.default.svc.cluster.local"),
])
def test_rewrite_kinds(rule: str, name: str, expected: str) -> None:
    (block,) = compile_corefile(f".:53 {{\n    {rule}\n}}\n").blocks
    assert apply_rewrites(block.rewrites, name).name == expected


# the query path ------------------------------------------------------------------------------

SERVICES = [{"metadata": {"name": "aws-sys-log-73736d-fluentd", "namespace": MIRROR_NAMESPACE},
             "spec": {"type": "ClusterIP", "clusterIP": "127.64.0.9",
                      "ports": [{"name": "http", "port": 8888, "protocol": "TCP"}]}},
            {"metadata": {"name": "web", "namespace": "default"},
             "spec": {"type": "ClusterIP", "clusterIP": "127.64.0.5"}}]
ZONE = build_zone(SERVICES, [])


def resolver(corefile: str) -> tuple[Resolver, list[str]]:
    said: list[str] = []
    return Resolver(compile_corefile(corefile), lambda q: answer(q, ZONE), "cluster.local", warn=said.append), said


def ask(r: Resolver, name: str, qtype: int = w.TYPE_A) -> Any:
    return r.resolve(w.make_query(4, name, qtype), 1)


def test_semaphore_stanza_answers_with_the_asked_name() -> None:
    r, _ = resolver(SEMAPHORE_STANZA + default_corefile())
    out = ask(r, "fluentd.sys-log.svc.cluster.aws")
    assert isinstance(out, bytes)
    message = w.parse_message(out)
    assert message.questions[0].name == "fluentd.sys-log.svc.cluster.aws"
    assert [(a.name, a.rdata, a.ttl) for a in message.answers] == [
        ("fluentd.sys-log.svc.cluster.aws", w.A("127.64.0.9"), 5)]  # the stanza's kubernetes: default TTL 5
    web = w.parse_message(ask(r, "web.default.svc.cluster.local"))
    assert web.answers[0].ttl == 30  # kubeadm's default block says ttl 30


def test_forward_to_loopback_and_not_elsewhere(tmp_path: Any) -> None:
    r, said = resolver("cluster.aws {\n    forward . 127.0.0.1:5353\n}\n" + default_corefile())
    step = ask(r, "fluentd.sys-log.svc.cluster.aws")
    assert isinstance(step, Forward) and step.upstreams == (("127.0.0.1", 5353),)
    query = w.make_query(4, "fluentd.sys-log.svc.cluster.aws", w.TYPE_A)
    upstream_answer = w.encode_message(w.Message(4, w.FLAG_QR | w.FLAG_AA, w.parse_message(query).questions,
                                                 (w.Record.of("fluentd.sys-log.svc.cluster.aws", 5, w.A("10.1.1.1")),)))
    assert w.parse_message(step.finish(upstream_answer)).answers[0].rdata == w.A("10.1.1.1")
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 10.255.255.53\nnameserver 127.0.0.53\n")
    r, said = resolver(f".:53 {{\n    forward . {resolv}\n}}\n")
    step = ask(r, "example.org")
    assert isinstance(step, Forward) and step.upstreams == (("127.0.0.53", 53),)
    assert any("not forwarding to 10.255.255.53" in line for line in said)
    r, said = resolver(".:53 {\n    forward . 10.255.255.53\n}\n")
    refused = ask(r, "example.org")
    assert isinstance(refused, bytes) and refused[3] & 0xF == w.RCODE_REFUSED


def test_fallthrough_sends_nxdomain_on() -> None:
    r, _ = resolver(".:53 {\n    kubernetes cluster.local {\n      fallthrough\n    }\n    forward . 127.0.0.1:53\n}\n")
    assert isinstance(ask(r, "nope.default.svc.cluster.local"), Forward)
    r, _ = resolver(".:53 {\n    kubernetes cluster.local\n    forward . 127.0.0.1:53\n}\n")
    out = ask(r, "nope.default.svc.cluster.local")
    assert isinstance(out, bytes) and out[3] & 0xF == w.RCODE_NXDOMAIN


def test_no_block_for_the_name_is_refused() -> None:
    r, _ = resolver("cluster.aws {\n    forward . 127.0.0.1:5353\n}\n")
    out = ask(r, "web.default.svc.cluster.local")
    assert isinstance(out, bytes) and out[3] & 0xF == w.RCODE_REFUSED
