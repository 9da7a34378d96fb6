"""The sans-io SPDY/3.1 codec and session, and kubectl's port-forward stream pairing."""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import pytest

from tether.net import spdy
from tether.net import websocket as ws
from tether.net.spdy import (
    Data,
    GoAway,
    HeadersReceived,
    Ping,
    PortForwardError,
    PortForwardPairing,
    PortForwardRequest,
    ProtocolError,
    RstStatus,
    Settings,
    SpdyError,
    SpdySession,
    StreamOpened,
    StreamReplied,
    StreamReset,
    WindowUpdate,
)


def sessions() -> tuple[SpdySession, SpdySession]:
    return SpdySession(client=True), SpdySession()


def splits(data: bytes) -> Iterator[list[bytes]]:
    for cut in range(len(data) + 1):
        yield [data[:cut], data[cut:]]
    yield [data[i : i + 1] for i in range(len(data))]


def rst_frame(stream_id: int, status: int) -> bytes:
    return (
        bytes.fromhex("80030003 00000008")
        + stream_id.to_bytes(4, "big")
        + status.to_bytes(4, "big")
    )


# -- dictionary and header blocks ------------------------------------------------------------


def test_dictionary_is_the_published_constant() -> None:
    assert len(spdy.SPDY_DICTIONARY) == 1423
    assert spdy.SPDY_DICTIONARY.startswith(b"\x00\x00\x00\x07options\x00\x00\x00\x04head")
    assert spdy.SPDY_DICTIONARY.endswith(b"charset=iso-8859-1,utf-,*,enq=0.")
    # The zlib stream names its preset dictionary by Adler-32; peers check it.
    assert zlib.adler32(spdy.SPDY_DICTIONARY) == 0xE3C6A7C2
    first = spdy.HeaderCompressor().compress({"a": "b"})
    assert first[1] & 0x20  # FDICT flag
    assert first[2:6] == (0xE3C6A7C2).to_bytes(4, "big")


def test_header_block_layout_uses_32_bit_lengths() -> None:
    block = spdy.encode_header_block({"Port": "80"})
    assert block == b"\x00\x00\x00\x01" + b"\x00\x00\x00\x04port" + b"\x00\x00\x00\x0280"
    assert spdy.decode_header_block(block) == {"port": "80"}


def test_header_block_round_trip() -> None:
    headers = {"streamtype": "data", "port": "8080", "requestid": "0", "multi": "a\x00b", "e": ""}
    assert spdy.decode_header_block(spdy.encode_header_block(headers)) == headers
    assert spdy.decode_header_block(b"") == {}


@pytest.mark.parametrize(
    "block",
    [
        b"\x00\x00\x01",  # short count
        b"\x00\x00\x00\x01\x00\x00\x00\x09port",  # name longer than the block
        b"\x00\x00\x00\x01\x00\x00\x00\x01a",  # value length missing
        b"\x00\x00\x00\x00extra",  # trailing bytes
        b"\x00\x00\x00\x02" + (b"\x00\x00\x00\x01a\x00\x00\x00\x01b" * 2),  # duplicate name
        b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00",  # empty name
    ],
)
def test_malformed_header_blocks(block: bytes) -> None:
    with pytest.raises(SpdyError):
        spdy.decode_header_block(block)


def test_compression_context_is_shared_across_blocks() -> None:
    compressor, decompressor = spdy.HeaderCompressor(), spdy.HeaderDecompressor()
    blocks = [
        {"streamtype": "error", "port": "80", "requestid": str(n)} for n in range(5)
    ]  # fmt: skip
    wire = [compressor.compress(headers) for headers in blocks]
    assert [decompressor.decompress(data) for data in wire] == blocks
    # Later blocks refer back to earlier ones, so they are smaller and undecodable on their own.
    assert len(wire[1]) < len(wire[0])
    with pytest.raises(SpdyError):
        spdy.HeaderDecompressor().decompress(wire[1])


def test_header_block_decodes_with_plain_zlib() -> None:
    """An independent decoder: stock zlib with the dictionary sees the raw name/value block."""
    wire = spdy.HeaderCompressor().compress({"port": "80"})
    raw = zlib.decompressobj(zdict=spdy.SPDY_DICTIONARY).decompress(wire)
    assert raw == spdy.encode_header_block({"port": "80"})


def test_decompression_limit() -> None:
    wire = spdy.HeaderCompressor().compress({"big": "x" * 5000})
    with pytest.raises(SpdyError):
        spdy.HeaderDecompressor(max_size=1000).decompress(wire)


# -- golden frames -----------------------------------------------------------------------------


def test_golden_frames() -> None:
    client, server = sessions()
    assert client.ping() == bytes.fromhex("80030006 00000004 00000001")
    assert server.ping() == bytes.fromhex("80030006 00000004 00000002")
    assert server.reset(5, RstStatus.CANCEL) == rst_frame(5, 5)
    assert server.goaway() == bytes.fromhex("80030007 00000008 00000000 00000000")
    assert spdy.data_frame(1, spdy.FLAG_FIN, b"abc") == bytes.fromhex("00000001 01000003 616263")
    assert client.window_update(3, 1000) == bytes.fromhex("80030009 00000008 00000003 000003e8")
    assert client.settings(((7, 0, 65536),)) == bytes.fromhex(
        "80030004 0000000c 00000001 00000007 00010000"
    )
    syn = client.open_stream({"port": "80"}, fin=True)[1]
    assert syn[:5] == bytes.fromhex("80030001 01")  # control, version 3, SYN_STREAM, FIN
    assert syn[8:18] == bytes.fromhex("00000001 00000000 0000")  # id 1, no association


# -- session round trips -----------------------------------------------------------------------


def test_stream_round_trip_and_half_close() -> None:
    client, server = sessions()
    stream_id, syn = client.open_stream({"streamType": "data", "port": "80"})
    assert stream_id == 1
    assert server.receive_data(syn) == [
        StreamOpened(1, {"streamtype": "data", "port": "80"}, fin=False)
    ]
    assert client.receive_data(server.reply(1, {})) == [StreamReplied(1, {}, fin=False)]
    assert server.receive_data(client.data(1, b"hello", fin=True)) == [Data(1, b"hello", True)]
    assert server.is_open(1)  # half-closed: the server may still write
    assert client.receive_data(server.data(1, b"world", fin=True)) == [Data(1, b"world", True)]
    assert not server.is_open(1) and not client.is_open(1)
    assert server.data_to_send() == b"" and client.data_to_send() == b""


def test_every_split_point_gives_the_same_events() -> None:
    client, _ = sessions()
    stream_id, wire = client.open_stream({"streamtype": "error", "port": "80", "requestid": "0"})
    wire += client.data(stream_id, b"", fin=True)
    second, syn = client.open_stream({"streamtype": "data", "port": "80", "requestid": "0"})
    wire += syn + client.ping() + client.data(second, b"payload")
    expected = [
        StreamOpened(1, {"streamtype": "error", "port": "80", "requestid": "0"}, False),
        Data(1, b"", True),
        StreamOpened(3, {"streamtype": "data", "port": "80", "requestid": "0"}, False),
        Ping(1, reply=False),
        Data(3, b"payload", False),
    ]
    for chunks in splits(wire):
        server = SpdySession()
        events = [event for chunk in chunks for event in server.receive_data(chunk)]
        assert events == expected


def test_many_header_blocks_over_one_session() -> None:
    client, server = sessions()
    for n in range(20):
        headers = {"streamtype": "data", "port": str(8000 + n), "requestid": str(n)}
        stream_id, syn = client.open_stream(headers)
        assert server.receive_data(syn) == [StreamOpened(stream_id, headers, False)]
        reply_headers = {"n": str(n)}
        assert client.receive_data(server.reply(stream_id, reply_headers)) == [
            StreamReplied(stream_id, reply_headers, False)
        ]
    assert server.open_streams == list(range(1, 40, 2))


def test_large_data_is_split_into_frames() -> None:
    client, server = sessions()
    stream_id, syn = client.open_stream({})
    server.receive_data(syn)
    payload = bytes(i % 253 for i in range(200 * 1024))
    wire = server.data(stream_id, payload, fin=True)
    events = client.receive_data(wire)
    assert [len(e.data) for e in events if isinstance(e, Data)] == [65536, 65536, 65536, 8192]
    assert [e.fin for e in events if isinstance(e, Data)] == [False, False, False, True]
    assert b"".join(e.data for e in events if isinstance(e, Data)) == payload


def test_headers_frame() -> None:
    client, server = sessions()
    stream_id, syn = client.open_stream({})
    server.receive_data(syn)
    assert server.receive_data(client.headers(stream_id, {"x": "y"}, fin=True)) == [
        HeadersReceived(stream_id, {"x": "y"}, True)
    ]


def test_ping_echo() -> None:
    client, server = sessions()
    events = server.receive_data(client.ping())
    assert events == [Ping(1, reply=False)]
    assert isinstance(events[0], Ping)
    assert client.receive_data(server.ping(events[0].ping_id)) == [Ping(1, reply=True)]
    assert client.receive_data(server.ping()) == [Ping(2, reply=False)]
    assert client.ping() == bytes.fromhex("80030006 00000004 00000003")


def test_settings_and_window_update_are_reported() -> None:
    client, server = sessions()
    wire = client.settings(((4, 1, 100), (7, 0, 1 << 20)), clear=True)
    wire += client.window_update(0, 4096)
    assert server.receive_data(wire) == [
        Settings(((4, 1, 100), (7, 0, 1 << 20)), clear=True),
        WindowUpdate(0, 4096),
    ]


def test_reset_by_peer() -> None:
    client, server = sessions()
    stream_id, syn = client.open_stream({})
    server.receive_data(syn)
    assert server.receive_data(client.reset(stream_id)) == [StreamReset(stream_id, 5)]
    assert not server.is_open(stream_id)
    with pytest.raises(SpdyError):
        server.data(stream_id, b"x")


def test_goaway() -> None:
    client, server = sessions()
    stream_id, syn = client.open_stream({})
    server.receive_data(syn)
    assert client.receive_data(server.goaway()) == [GoAway(stream_id, 0)]
    assert client.goaway_received
    with pytest.raises(SpdyError):
        client.open_stream({})


def test_syn_streams_after_goaway_are_ignored_but_still_decompressed() -> None:
    client, server = sessions()
    server.goaway()
    late = [client.open_stream({"n": str(n)})[1] for n in range(3)]
    # If a skipped block were not inflated, the next one would no longer decode.
    for frame in late:
        assert server.receive_data(frame) == []
    assert server.receive_data(client.ping()) == [Ping(1)]


def test_unknown_control_frames_are_ignored() -> None:
    _, server = sessions()
    assert server.receive_data(spdy.control_frame(10, 0, b"credential")) == []
    assert not server.failed


# -- stream errors -----------------------------------------------------------------------------


def open_pair() -> tuple[SpdySession, SpdySession, int]:
    client, server = sessions()
    stream_id, syn = client.open_stream({})
    server.receive_data(syn)
    return client, server, stream_id


def test_data_after_fin_resets_the_stream() -> None:
    client, server, stream_id = open_pair()
    server.receive_data(client.data(stream_id, b"last", fin=True))
    after_fin = spdy.data_frame(stream_id, 0, b"more")
    assert server.receive_data(after_fin) == [
        StreamReset(stream_id, RstStatus.STREAM_ALREADY_CLOSED, by_peer=False)
    ]
    assert server.data_to_send() == rst_frame(stream_id, RstStatus.STREAM_ALREADY_CLOSED)
    assert not server.is_open(stream_id)
    assert server.receive_data(after_fin) == []  # in flight after our reset: dropped quietly
    assert server.data_to_send() == b""


def test_data_on_a_fully_closed_stream() -> None:
    client, server, stream_id = open_pair()
    server.receive_data(client.data(stream_id, b"", fin=True))
    server.data(stream_id, b"", fin=True)
    assert not server.is_open(stream_id)
    events = server.receive_data(spdy.data_frame(stream_id, 0, b"zombie"))
    assert events == [StreamReset(stream_id, RstStatus.STREAM_ALREADY_CLOSED, by_peer=False)]


def test_data_on_an_unknown_stream() -> None:
    _, server = sessions()
    assert server.receive_data(spdy.data_frame(7, 0, b"?")) == [
        StreamReset(7, RstStatus.INVALID_STREAM, by_peer=False)
    ]
    assert server.data_to_send() == rst_frame(7, RstStatus.INVALID_STREAM)


class HandWriter:
    """Hand-built header frames for stream ids a well-behaved session would never produce."""

    def __init__(self) -> None:
        self.compressor = spdy.HeaderCompressor()

    def syn_stream(self, stream_id: int) -> bytes:
        body = stream_id.to_bytes(4, "big") + bytes(6) + self.compressor.compress({})
        return spdy.control_frame(spdy.FrameType.SYN_STREAM, 0, body)

    def syn_reply(self, stream_id: int) -> bytes:
        body = stream_id.to_bytes(4, "big") + self.compressor.compress({})
        return spdy.control_frame(spdy.FrameType.SYN_REPLY, 0, body)


def test_stream_ids_of_the_wrong_parity_or_reused() -> None:
    _, server = sessions()
    peer = HandWriter()
    assert server.receive_data(peer.syn_stream(2)) == [  # even: a server's id
        StreamReset(2, RstStatus.PROTOCOL_ERROR, by_peer=False)
    ]
    assert server.receive_data(peer.syn_stream(0)) == [
        StreamReset(0, RstStatus.PROTOCOL_ERROR, by_peer=False)
    ]
    assert server.receive_data(peer.syn_stream(1)) == [StreamOpened(1, {}, False)]
    assert server.receive_data(peer.syn_stream(1)) == [  # duplicate of an open stream
        StreamReset(1, RstStatus.PROTOCOL_ERROR, by_peer=False)
    ]
    assert not server.failed


def test_decreasing_stream_id_is_a_session_error() -> None:
    client, server = sessions()
    peer = HandWriter()
    server.receive_data(peer.syn_stream(5))
    events = server.receive_data(peer.syn_stream(3))
    assert len(events) == 1 and isinstance(events[0], ProtocolError)
    assert server.data_to_send() == bytes.fromhex("80030007 00000008 00000005 00000001")
    assert server.failed and server.receive_data(client.ping()) == []


@pytest.mark.parametrize(
    "frame",
    [
        bytes.fromhex("80020006 00000004 00000001"),  # SPDY/2 PING
        spdy.control_frame(spdy.FrameType.PING, 0, b"\x00\x01"),  # short PING
        spdy.control_frame(spdy.FrameType.RST_STREAM, 0, b"\x00" * 4),
        spdy.control_frame(spdy.FrameType.SETTINGS, 0, b"\x00\x00\x00\x02" + bytes(8)),
        spdy.control_frame(spdy.FrameType.SYN_STREAM, 0, b"\x00\x00\x00\x01"),
        spdy.data_frame(0, 0, b"x"),  # DATA on stream 0
        spdy.control_frame(
            spdy.FrameType.SYN_STREAM,
            0,
            bytes.fromhex("00000001 00000000 0000") + b"not zlib at all",
        ),
    ],
)
def test_session_errors(frame: bytes) -> None:
    _, server = sessions()
    events = server.receive_data(frame)
    assert len(events) == 1 and isinstance(events[0], ProtocolError)
    assert server.data_to_send()[:4] == bytes.fromhex("80030007")


def test_local_misuse() -> None:
    _, server, stream_id = open_pair()
    server.reply(stream_id, {})
    with pytest.raises(SpdyError):
        server.reply(stream_id, {})  # twice
    server.data(stream_id, b"", fin=True)
    with pytest.raises(SpdyError):
        server.data(stream_id, b"x")  # after our FIN
    with pytest.raises(SpdyError):
        server.data(99, b"x")  # never opened
    with pytest.raises(ValueError):
        SpdySession(max_data_frame=0x1000000)


def test_syn_reply_twice_is_a_stream_error() -> None:
    client = SpdySession(client=True)
    stream_id, _ = client.open_stream({})
    server = HandWriter()
    assert client.receive_data(server.syn_reply(stream_id)) == [StreamReplied(stream_id, {}, False)]
    assert client.receive_data(server.syn_reply(stream_id)) == [
        StreamReset(stream_id, RstStatus.STREAM_IN_USE, by_peer=False)
    ]
    assert client.receive_data(server.syn_reply(99)) == [
        StreamReset(99, RstStatus.INVALID_STREAM, by_peer=False)
    ]


# -- tunnelled in WebSocket --------------------------------------------------------------------


def test_spdy_tunnelled_in_websocket_binary_messages() -> None:
    """kubectl's first attempt: SPDY bytes as a raw stream inside WebSocket binary messages."""
    assert ws.negotiate(spdy.TUNNEL_SUBPROTOCOL, [spdy.TUNNEL_SUBPROTOCOL])
    ws_client, ws_server = ws.WebSocketConnection(client=True), ws.WebSocketConnection()
    client, server = sessions()
    stream_id, syn = client.open_stream({"streamtype": "data", "port": "80", "requestid": "0"})
    spdy_bytes = syn + client.data(stream_id, b"GET / HTTP/1.1\r\n\r\n")
    # Message boundaries need not match frame boundaries: cut the byte stream anywhere.
    wire = ws_client.send_binary(spdy_bytes[:7]) + ws_client.send_binary(spdy_bytes[7:])
    events = []
    for message in ws_server.receive_data(wire):
        assert isinstance(message, ws.Message)
        events += server.receive_data(message.payload)
    assert [type(e) for e in events] == [StreamOpened, Data]
    answer = ws_server.send_binary(server.reply(stream_id, {}) + server.data(stream_id, b"200"))
    replies = [
        e for m in ws_client.receive_data(answer) if isinstance(m, ws.Message)
        for e in client.receive_data(m.payload)
    ]  # fmt: skip
    assert replies == [StreamReplied(stream_id, {}, False), Data(stream_id, b"200", False)]


# -- port-forward pairing ----------------------------------------------------------------------


def pf_headers(kind: str, port: int = 80, request_id: str | None = "0") -> dict[str, str]:
    headers = {"streamtype": kind, "port": str(port)}
    if request_id is not None:
        headers["requestid"] = request_id
    return headers


def test_pairing_by_request_id() -> None:
    pairing = PortForwardPairing()
    assert pairing.add(1, pf_headers("error")) is None
    assert pairing.pending == 1
    assert pairing.add(3, pf_headers("data")) == PortForwardRequest("0", 80, 3, 1)
    assert pairing.pending == 0


def test_interleaved_requests_and_either_order() -> None:
    pairing = PortForwardPairing()
    assert pairing.add(1, pf_headers("error", 80, "0")) is None
    assert pairing.add(3, pf_headers("data", 443, "1")) is None
    assert pairing.add(5, pf_headers("error", 443, "1")) == PortForwardRequest("1", 443, 3, 5)
    assert pairing.add(7, pf_headers("data", 80, "0")) == PortForwardRequest("0", 80, 7, 1)


def test_pairing_without_request_id_falls_back_to_stream_ids() -> None:
    pairing = PortForwardPairing()
    assert pairing.add(1, pf_headers("error", request_id=None)) is None
    assert pairing.add(3, pf_headers("data", request_id=None)) == PortForwardRequest("1", 80, 3, 1)


@pytest.mark.parametrize(
    "headers",
    [
        {"port": "80", "requestid": "0"},
        pf_headers("control"),
        {"streamtype": "data", "requestid": "0"},
        pf_headers("data", port=0),
        {"streamtype": "data", "port": "http", "requestid": "0"},
        {"streamtype": "data", "port": "70000", "requestid": "0"},
    ],
)
def test_pairing_rejects_bad_headers(headers: dict[str, str]) -> None:
    with pytest.raises(PortForwardError):
        PortForwardPairing().add(1, headers)


def test_pairing_rejects_duplicates_and_port_mismatch() -> None:
    pairing = PortForwardPairing()
    pairing.add(1, pf_headers("data"))
    with pytest.raises(PortForwardError):
        pairing.add(3, pf_headers("data"))
    with pytest.raises(PortForwardError):
        pairing.add(5, pf_headers("error", port=81))
    pairing2 = PortForwardPairing()
    pairing2.add(1, pf_headers("error"))
    with pytest.raises(PortForwardError):
        pairing2.add(3, pf_headers("error"))


def test_pairing_remove_and_expire() -> None:
    pairing = PortForwardPairing()
    pairing.add(1, pf_headers("error", request_id="a"), now=0.0)
    assert pairing.remove(1) == [1]
    assert pairing.remove(1) == []
    pairing.add(3, pf_headers("error", request_id="b"), now=10.0)
    pairing.add(5, pf_headers("data", request_id="c"), now=30.0)
    assert pairing.expire(now=39.0, timeout=30.0) == []
    assert pairing.expire(now=40.0, timeout=30.0) == [3]
    assert pairing.pending == 1
    # A stream of a completed request is no longer tracked.
    assert pairing.add(7, pf_headers("error", request_id="c")) == PortForwardRequest("c", 80, 5, 7)
    assert pairing.remove(5) == []


def test_kubectl_port_forward_flow() -> None:
    """kubectl: error stream, its write side closed, then the data stream; server replies to
    both, relays bytes on the data stream, and ends with FIN."""
    client, server = sessions()
    pairing = PortForwardPairing()
    error_id, wire = client.open_stream(pf_headers("error", 8080))
    wire += client.data(error_id, b"", fin=True)
    data_id, syn = client.open_stream(pf_headers("data", 8080))
    wire += syn + client.data(data_id, b"GET / HTTP/1.1\r\n\r\n")
    requests, received, replies = [], b"", b""
    for event in server.receive_data(wire):
        if isinstance(event, StreamOpened):
            replies += server.reply(event.stream_id, {})
            done = pairing.add(event.stream_id, event.headers)
            if done is not None:
                requests.append(done)
        elif isinstance(event, Data) and event.stream_id == data_id:
            received += event.data
    assert requests == [PortForwardRequest("0", 8080, data_id, error_id)]
    assert received == b"GET / HTTP/1.1\r\n\r\n"
    replies += server.data(data_id, b"HTTP/1.1 200 OK\r\n\r\n", fin=True)
    replies += server.data(error_id, b"", fin=True)
    events = client.receive_data(replies)
    assert [type(e) for e in events] == [StreamReplied, StreamReplied, Data, Data]
    assert not client.is_open(error_id)  # both sides finished the error stream
    assert client.is_open(data_id)  # the client has not closed its write side yet
