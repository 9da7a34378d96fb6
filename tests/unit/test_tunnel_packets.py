"""Golden encodings of ANP's protobuf messages (verified against Python protobuf; see docs/tunnel.md), for every packet type."""

from __future__ import annotations

import pytest

from tether.tunnel import packets as p

R = 1234605616436508552

GOLDEN = [
    ("DIAL_REQ", p.dial_req("127.0.0.1:8000", R),
     "121f0a03746370120e3132372e302e302e313a383030301888ef99abc5e88c9111"),
    ("DIAL_RSP ok", p.dial_rsp(R, connect_id=1), "08011a0c10011888ef99abc5e88c9111"),
    ("DIAL_RSP error", p.dial_rsp(R, error="No agent available"),
     "08011a1e0a124e6f206167656e7420617661696c61626c651888ef99abc5e88c9111"),
    ("DATA", p.data(1, b"hello"), "0804220908011a0568656c6c6f"),
    ("CLOSE_REQ", p.close_req(1), "08022a020801"),
    ("CLOSE_RSP", p.close_rsp(1), "080332021001"),
    ("CLOSE_RSP error", p.close_rsp(7, "Unknown connectID"),
     "080332150a11556e6b6e6f776e20636f6e6e65637449441007"),
    ("DIAL_CLS", p.dial_cls(R), "08053a0a0888ef99abc5e88c9111"),
    ("DRAIN", p.drain(), "08064200"),
]


@pytest.mark.parametrize(("name", "packet", "hexbytes"), GOLDEN, ids=[g[0] for g in GOLDEN])
def test_golden_encode_and_decode(name: str, packet: p.Packet, hexbytes: str) -> None:
    assert p.encode(packet).hex() == hexbytes
    assert p.decode(bytes.fromhex(hexbytes)) == packet


def test_every_packet_type_has_a_golden_vector() -> None:
    covered = {packet.type for _, packet, _ in GOLDEN}
    assert covered >= {t for t in p.PacketType if t != p.PacketType.WINDOW}


def test_empty_payloads_are_present_on_the_wire() -> None:
    assert p.encode(p.Packet.of(p.CloseResponse())).hex() == "08033200"
    assert p.encode(p.Packet(p.PacketType.CLOSE_RSP, None)).hex() == "0803"
    assert p.encode(p.drain()).hex() == "08064200"
    # The DIAL_REQ type (0) is never on the wire; a missing type means DIAL_REQ.
    assert p.encode(p.Packet.of(p.DialRequest())).hex() == "1200"
    assert p.decode(b"") == p.Packet(p.PacketType.DIAL_REQ, p.DialRequest())


def test_missing_payload_decodes_as_the_empty_payload_of_its_type() -> None:
    assert p.decode(bytes.fromhex("0803")).payload == p.CloseResponse()
    assert p.decode(bytes.fromhex("0806")).payload == p.Drain()


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, (1 << 63) - 1, -1, -(1 << 63), -42])
def test_int64_round_trip(value: int) -> None:
    packet = p.dial_rsp(value, connect_id=value)
    assert p.decode(p.encode(packet)) == packet


def test_negative_int64_is_ten_bytes() -> None:
    assert p.encode(p.close_req(-1)).hex() == "08022a0b08ffffffffffffffffff01"


def test_unknown_fields_are_skipped() -> None:
    base = bytes.fromhex("0804220908011a0568656c6c6f")
    extras = [
        bytes.fromhex("f80101"),  # field 31 varint
        bytes.fromhex("fa0103616263"),  # field 31 bytes
        bytes.fromhex("f9010102030405060708"),  # field 31 fixed64
        bytes.fromhex("fd0101020304"),  # field 31 fixed32
    ]
    for extra in extras:
        assert p.decode(base + extra) == p.data(1, b"hello")
    # Unknown fields inside a payload too.
    inner = bytes.fromhex("08011a0568656c6c6f") + bytes.fromhex("200728ff01")
    assert p.decode(bytes.fromhex("0804") + b"\x22" + bytes([len(inner)]) + inner) == p.data(1, b"hello")


def test_unknown_packet_type_survives() -> None:
    packet = p.decode(bytes.fromhex("082a"))
    assert packet.type == 42 and packet.payload is None and packet.type_name == "Unknown"


def test_window_extension_round_trip() -> None:
    packet = p.window(3, 65536)
    assert p.decode(p.encode(packet)) == packet
    assert p.encode(packet).hex() == "0864a20606080310808004"


@pytest.mark.parametrize("hexbytes", [
    "08", "0804220a08011a0568656c6c6f", "0f", "0804220908011a0668656c6c6f",
    "0804" + "2a020801",  # DATA carrying a CloseRequest
    "ffffffffffffffffffffff01",
])
def test_malformed_input_is_a_decode_error(hexbytes: str) -> None:
    with pytest.raises(p.DecodeError):
        p.decode(bytes.fromhex(hexbytes))


def test_large_data_round_trip() -> None:
    chunk = bytes(range(256)) * 1024
    assert p.decode(p.encode(p.data(9, chunk))) == p.data(9, chunk)


def test_method_paths_have_no_package() -> None:
    assert p.PROXY_METHOD == "/ProxyService/Proxy"
    assert p.CONNECT_METHOD == "/AgentService/Connect"
