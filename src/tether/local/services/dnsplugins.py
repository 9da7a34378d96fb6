"""The cluster DNS's query path as its Corefile sets it up: select the server block, rewrite, answer
from the cluster (`kubernetes`), forward, rewrite back, cache.

`Resolver.resolve(data, transport)` returns the response bytes, None (drop), or a `Forward`
step: the query to send upstream and what to do with the answer (the caller does the I/O, so
the UDP path stays a callback and only forwarded queries cost a task).

Forwarding reaches only loopback upstreams (127.0.0.0/8, ::1) unless `TETHER_LOCAL_DNS_FORWARD_ANY=1`:
a local cluster on a test machine must not send its pods' lookups to the machine's own resolver
behind anyone's back. Upstreams left out are named once in the DNS pod's log, and such names get
REFUSED, as they did before the Corefile was read.
"""

from __future__ import annotations

import ipaddress
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

from tether.local.services.corefile import Block, Config, Rewritten, apply_rewrites, in_zone
from tether.net import dnsclient
from tether.net import dnswire as w
from tether.net.dnscache import WireCache, has_options

FORWARD_ANY_ENV = "TETHER_LOCAL_DNS_FORWARD_ANY"
MAX_FORWARD_CACHE_S = 3600.0


@dataclass(frozen=True)
class Forward:
    query: bytes
    upstreams: tuple[dnsclient.Upstream, ...]
    tcp: bool
    finish: Callable[[bytes], bytes]


Outcome = bytes | Forward | None
ZoneAnswer = Callable[[w.Message], w.Message]


def _formerr(data: bytes) -> bytes:
    flags = w.FLAG_QR | (((data[2] << 8) | data[3]) & (0x7800 | w.FLAG_RD)) | w.RCODE_FORMERR
    return data[:2] + struct.pack("!HHHHH", flags, 0, 0, 0, 0)


class Resolver:
    def __init__(self, config: Config, zone_answer: ZoneAnswer, zone_domain: str, *,
                 warn: Callable[[str], None] | None = None, max_udp: int = 4096) -> None:
        self.config = config
        self.zone_answer = zone_answer
        self.zone_domain = zone_domain
        self.warn = warn or (lambda _text: None)
        self.max_udp = max_udp
        self.cache = WireCache(10_000)
        self._warned: set[str] = set()
        self._turn = 0
        self.allow_any = os.environ.get(FORWARD_ANY_ENV, "") == "1"

    def changed(self, config: Config | None = None) -> None:
        """The cluster's records (or the Corefile) changed: nothing cached may be served."""
        if config is not None:
            self.config = config
        self.cache.clear()

    def upstreams(self, block: Block) -> tuple[dnsclient.Upstream, ...]:
        assert block.forward is not None
        found: list[dnsclient.Upstream] = []
        for target in block.forward.targets:
            if target.startswith("/"):
                found += dnsclient.upstreams_from_resolv_conf(target)
                continue
            try:
                found.append(dnsclient.parse_upstream(target))
            except ValueError as exc:
                self._warn_once(f"forward {target}: {exc}")
        allowed = []
        for host, port in found:
            if self.allow_any or ipaddress.ip_address(host).is_loopback:
                allowed.append((host, port))
            else:
                self._warn_once(f"[WARNING] plugin/forward: not forwarding to {host}:{port}: outside the loopback "
                                f"range (set {FORWARD_ANY_ENV}=1 to allow)")
        return tuple(allowed)

    def _warn_once(self, text: str) -> None:
        if text not in self._warned:
            self._warned.add(text)
            self.warn(text)

    def resolve(self, data: bytes, transport: int) -> Outcome:
        """`transport`: 0 for TCP, 1 for UDP."""
        if len(data) < 12 or data[2] & 0x80:
            return None
        hit = self.cache.get(data, transport)
        if hit is not None:
            return hit
        try:
            query = w.parse_message(data)
        except (w.DnsFormatError, ValueError, struct.error, UnicodeError):
            return _formerr(data)
        limit = 65535 if transport == 0 else min(query.udp_limit, self.max_udp)

        def encode(message: w.Message) -> bytes:
            try:
                return w.encode_for_limit(message, max(w.MAX_UDP_PLAIN, limit))
            except (w.DnsFormatError, ValueError, UnicodeError, struct.error):
                return _formerr(data)

        def refused() -> bytes:
            flags = w.FLAG_QR | (query.flags & w.FLAG_RD) | (query.opcode << 11) | w.RCODE_REFUSED
            opt = (w.opt_record(),) if query.opt is not None else ()
            return encode(w.Message(query.id, flags, query.questions[:1], additional=opt))

        if query.opcode != 0 or len(query.questions) != 1:
            return encode(self.zone_answer(query))  # NOTIMP / FORMERR, as before
        question = query.questions[0]
        name = question.name.rstrip(".").lower()
        block = self.config.select(name)
        if block is None:
            return refused()
        rewritten = apply_rewrites(block.rewrites, name)
        asked = w.Message(query.id, query.flags, (w.Question(rewritten.name, question.qtype, question.qclass),),
                          additional=query.additional)
        kube = block.kubernetes
        if kube is not None and any(in_zone(rewritten.name, z) for z in kube.zones):
            response: w.Message | None = None
            if in_zone(rewritten.name, self.zone_domain):
                response = self.zone_answer(asked)
                if response.rcode == w.RCODE_NXDOMAIN and kube.falls_through(rewritten.name):
                    response = None
            elif not kube.falls_through(rewritten.name):
                response = self.zone_answer(asked)  # REFUSED: a zone this cluster has no records for
            if response is not None:
                out = encode(self._finish(response, query, rewritten, kube.ttl, block))
                self.cache.put(data, transport, out)
                return out
        if block.forward is not None and in_zone(rewritten.name, block.forward.zone):
            upstreams = self.upstreams(block)
            if not upstreams:
                return refused()
            outgoing = data if not rewritten.rules else w.encode_message(asked)
            cache_s = min(float(block.cache_ttl), MAX_FORWARD_CACHE_S) if block.cache_ttl else 0.0

            def finish(raw: bytes) -> bytes:
                out = raw
                if rewritten.rules or block.loadbalance:
                    try:
                        out = encode(self._finish(w.parse_message(raw), query, rewritten, None, block))
                    except (w.DnsFormatError, ValueError, struct.error):
                        out = raw
                out = data[:2] + out[2:]
                ttl = dnsclient.min_ttl(raw)
                if cache_s and ttl is not None and not has_options(data):
                    self.cache.put(data, transport, out, min(float(ttl), cache_s))
                return out

            return Forward(outgoing, upstreams, transport == 0, finish)
        return refused()

    def _finish(self, response: w.Message, query: w.Message, rewritten: Rewritten, ttl: int | None,
                block: Block) -> w.Message:
        """The question as asked, answer names rewritten back, the kubernetes plugin's TTL."""
        def fix(records: tuple[w.Record, ...]) -> tuple[w.Record, ...]:
            out = []
            for r in records:
                owner = rewritten.revert(r.name) if rewritten.rules else r.name
                out.append(w.Record(owner, r.rtype, r.ttl if ttl is None or r.rtype == w.TYPE_OPT else ttl,
                                    r.rdata, r.rclass))
            return tuple(out)

        answers = fix(response.answers)
        if block.loadbalance and len(answers) > 1:
            self._turn += 1
            addresses = [r for r in answers if r.rtype in (w.TYPE_A, w.TYPE_AAAA)]
            if len(addresses) > 1:
                shift = self._turn % len(addresses)
                rotated = iter(addresses[shift:] + addresses[:shift])
                answers = tuple(next(rotated) if r.rtype in (w.TYPE_A, w.TYPE_AAAA) else r for r in answers)
        return w.Message(query.id, response.flags, query.questions[:1], answers, fix(response.authority),
                         fix(response.additional))

