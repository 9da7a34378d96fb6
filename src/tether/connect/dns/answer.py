"""The answer to one query from a `Table` (pure), or None: not ours, forward it.

Authoritative for the table's zones: records of the asked type (ANY: all), with the A/AAAA records
of SRV targets in the additional section; a name that exists without that type answers NODATA
and a name that does not exist NXDOMAIN, both with the zone's SOA in the authority section
(RFC 2308, so resolvers cache the negative answer for the SOA's minimum). Owner names echo the
question's spelling (DNS 0x20 case randomisation keeps working). An EDNS query gets an OPT record
back. Queries that are not standard ones get NOTIMP, more or fewer than one question FORMERR.
"""

from __future__ import annotations

from collections.abc import Iterable

from tether.connect.dns.records import Table
from tether.net import dnswire as w

EDNS_BUFFER = 1232  # what this server advertises (the DNS flag day 2020 value)


def _renamed(owner: str, records: Iterable[w.Record]) -> tuple[w.Record, ...]:
    return tuple(w.Record(owner, r.rtype, r.ttl, r.rdata, r.rclass) for r in records)


def reply(query: w.Message, rcode: int, *, aa: bool = False, ra: bool = False, answers: tuple[w.Record, ...] = (),
          authority: tuple[w.Record, ...] = (), extra: tuple[w.Record, ...] = ()) -> w.Message:
    flags = w.FLAG_QR | (query.flags & w.FLAG_RD) | (query.opcode << 11) | rcode
    if aa:
        flags |= w.FLAG_AA
    if ra:
        flags |= w.FLAG_RA
    opt = (w.opt_record(EDNS_BUFFER),) if query.opt is not None else ()
    return w.Message(query.id, flags, query.questions[:1], answers, authority, extra + opt)


def answer(query: w.Message, table: Table, *, recursion: bool = False) -> w.Message | None:
    if query.opcode != 0:
        return reply(query, w.RCODE_NOTIMP, ra=recursion)
    if len(query.questions) != 1 or query.is_response:
        return reply(query, w.RCODE_FORMERR, ra=recursion)
    question = query.questions[0]
    name = question.name.rstrip(".").lower()
    held = table.records.get(name)
    zone = table.zone_of(name)
    if held is None and zone is None:
        return None  # not ours: forward
    if question.qclass not in (w.CLASS_IN, w.CLASS_ANY):
        return reply(query, w.RCODE_REFUSED, ra=recursion)
    owner = question.name.rstrip(".")
    soa = (table.soas[zone],) if zone is not None else ()
    qtype = question.qtype
    if zone is not None and name == zone and qtype in (w.TYPE_SOA, w.TYPE_ANY):
        return reply(query, w.RCODE_NOERROR, aa=True, ra=recursion, answers=_renamed(owner, soa))
    if held:
        matching = [r for r in held if qtype in (r.rtype, w.TYPE_ANY)]
        if matching:
            extra: list[w.Record] = []
            for record in matching:
                if isinstance(record.rdata, w.SRV):
                    for r in table.records.get(record.rdata.target.lower(), ()):
                        if r.rtype in (w.TYPE_A, w.TYPE_AAAA) and r not in extra:
                            extra.append(r)
            return reply(query, w.RCODE_NOERROR, aa=True, ra=recursion, answers=_renamed(owner, matching),
                         extra=tuple(extra))
        return reply(query, w.RCODE_NOERROR, aa=True, ra=recursion, authority=soa)
    if name in table.names:
        return reply(query, w.RCODE_NOERROR, aa=True, ra=recursion, authority=soa)
    return reply(query, w.RCODE_NXDOMAIN, aa=True, ra=recursion, authority=soa)
