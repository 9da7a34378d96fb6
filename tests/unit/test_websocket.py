"""The sans-io WebSocket connection and the Kubernetes channel helpers built on it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tether.net import websocket as ws
from tether.net.websocket import (
    Close,
    CloseCode,
    Message,
    Opcode,
    Ping,
    Pong,
    ProtocolError,
    WebSocketConnection,
    WebSocketError,
)

RFC_MASK = bytes.fromhex("37fa213d")  # the masking key of the RFC 6455 §5.7 examples


class Op:
    """Raw opcodes, for frames the tests craft byte by byte (malformed ones included)."""

    CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def apply_mask(data: bytes, mask: bytes) -> bytes:
    return bytes(b ^ mask[i % 4] for i, b in enumerate(data))


def encode_frame(opcode: int, payload: bytes, *, fin: bool = True, mask: bytes | None = None) -> bytes:
    """One frame exactly as given: the tests' own encoder, independent of the one under test."""
    first = (0x80 if fin else 0) | opcode
    mask_bit = 0x80 if mask is not None else 0
    size = len(payload)
    if size < 126:
        header = bytes([first, mask_bit | size])
    elif size < 1 << 16:
        header = bytes([first, mask_bit | 126]) + size.to_bytes(2, "big")
    else:
        header = bytes([first, mask_bit | 127]) + size.to_bytes(8, "big")
    return header + (payload if mask is None else mask + apply_mask(payload, mask))


def pair() -> tuple[WebSocketConnection, WebSocketConnection]:
    return WebSocketConnection(client=True), WebSocketConnection()


def splits(data: bytes) -> Iterator[list[bytes]]:
    """Every way of cutting `data` in two, plus byte-at-a-time."""
    for cut in range(len(data) + 1):
        yield [data[:cut], data[cut:]]
    yield [data[i : i + 1] for i in range(len(data))]


def feed(conn: WebSocketConnection, chunks: list[bytes]) -> list[ws.Event]:
    events: list[ws.Event] = []
    for chunk in chunks:
        events += conn.receive_data(chunk)
    return events


def close_code(frame: bytes) -> int:
    """The status code of one unmasked close frame from the server."""
    assert frame[0] == 0x88
    return int.from_bytes(frame[2:4], "big")


# -- handshake ---------------------------------------------------------------------------------


def test_accept_key_rfc_example() -> None:
    assert ws.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_client_key_is_valid() -> None:
    assert ws.is_valid_client_key(ws.new_client_key())
    assert ws.is_valid_client_key("dGhlIHNhbXBsZSBub25jZQ==")
    assert not ws.is_valid_client_key("short")
    assert not ws.is_valid_client_key("not base64 at all!!")


@pytest.mark.parametrize(
    ("offered", "expected"),
    [
        ("v5.channel.k8s.io", "v5.channel.k8s.io"),
        ("v5.channel.k8s.io,v4.channel.k8s.io", "v5.channel.k8s.io"),
        ("v4.channel.k8s.io, v5.channel.k8s.io", "v4.channel.k8s.io"),  # the client's order wins
        ("v1.channel.k8s.io, v4.channel.k8s.io", "v4.channel.k8s.io"),
        ("SPDY/3.1+portforward.k8s.io", None),
        ("", None),
    ],
)
def test_negotiate(offered: str, expected: str | None) -> None:
    assert ws.negotiate(offered, ws.EXEC_SUBPROTOCOLS) == expected


def test_negotiate_empty_offer_matches_empty_protocol() -> None:
    assert ws.negotiate("", ["", "v4.channel.k8s.io"]) == ""


def test_handshake_response_headers() -> None:
    headers = dict(ws.handshake_response_headers("dGhlIHNhbXBsZSBub25jZQ==", ws.CHANNEL_V5))
    assert headers == {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Accept": "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
        "Sec-WebSocket-Protocol": "v5.channel.k8s.io",
    }
    assert "Sec-WebSocket-Protocol" not in dict(ws.handshake_response_headers("a", None))


# -- golden frames (RFC 6455 §5.7) -----------------------------------------------------------

HELLO_UNMASKED = bytes.fromhex("810548656c6c6f")
HELLO_MASKED = bytes.fromhex("818537fa213d7f9f4d5158")
HELLO_FRAGMENTED = bytes.fromhex("010348656c") + bytes.fromhex("80026c6f")
PING_UNMASKED = bytes.fromhex("890548656c6c6f")
PONG_MASKED = bytes.fromhex("8a8537fa213d7f9f4d5158")


def test_rfc_hello_frames_encode() -> None:
    assert encode_frame(Opcode.TEXT, b"Hello") == HELLO_UNMASKED
    assert encode_frame(Opcode.TEXT, b"Hello", mask=RFC_MASK) == HELLO_MASKED
    client = WebSocketConnection(client=True)
    masked = client.send_text("Hello")  # a random mask each frame: check the shape and the content
    assert masked[:2] == HELLO_MASKED[:2] and apply_mask(masked[6:], masked[2:6]) == b"Hello"
    assert WebSocketConnection().receive_data(client.send_pong(b"Hello")) == [Pong(b"Hello")]
    assert WebSocketConnection().send_text("Hello") == HELLO_UNMASKED
    assert WebSocketConnection().send_ping(b"Hello") == PING_UNMASKED
    assert WebSocketConnection().send_message(Opcode.TEXT, b"Hello", fragment_size=3) == (
        HELLO_FRAGMENTED
    )


def test_rfc_hello_frames_decode() -> None:
    hello = Message(Opcode.TEXT, b"Hello")
    assert WebSocketConnection().receive_data(HELLO_MASKED) == [hello]
    assert WebSocketConnection(client=True).receive_data(HELLO_UNMASKED) == [hello]
    assert WebSocketConnection(client=True).receive_data(HELLO_FRAGMENTED) == [hello]
    assert WebSocketConnection(client=True).receive_data(PING_UNMASKED) == [Ping(b"Hello")]
    assert WebSocketConnection().receive_data(PONG_MASKED) == [Pong(b"Hello")]
    assert hello.text == "Hello"


@pytest.mark.parametrize(
    ("size", "header"),
    [
        (256, bytes.fromhex("827e0100")),  # 16-bit length form
        (65536, bytes.fromhex("827f0000000000010000")),  # 64-bit length form
        (125, bytes.fromhex("827d")),
        (126, bytes.fromhex("827e007e")),
        (65535, bytes.fromhex("827effff")),
    ],
)
def test_length_forms(size: int, header: bytes) -> None:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    frame = WebSocketConnection().send_binary(payload)
    assert frame == header + payload
    assert WebSocketConnection(client=True).receive_data(frame) == [Message(Opcode.BINARY, payload)]


# -- incremental parsing and round trips -----------------------------------------------------


def test_every_split_point_gives_the_same_events() -> None:
    client = WebSocketConnection(client=True)
    stream = (
        client.send_message(Opcode.BINARY, b"abcdefgh", fragment_size=3)
        + client.send_ping(b"p")
        + client.send_text("héllo")
        + client.send_binary(bytes(300))
        + client.send_binary(b"")
    )
    expected = [
        Message(Opcode.BINARY, b"abcdefgh"),
        Ping(b"p"),
        Message(Opcode.TEXT, "héllo".encode()),
        Message(Opcode.BINARY, bytes(300)),
        Message(Opcode.BINARY, b""),
    ]
    for chunks in splits(stream):
        assert feed(WebSocketConnection(), chunks) == expected


def test_control_frame_between_fragments() -> None:
    # RFC 6455 §5.4: control frames may be injected in the middle of a fragmented message.
    head = encode_frame(Opcode.TEXT, b"He", fin=False, mask=RFC_MASK)
    ping = encode_frame(Op.PING, b"x", mask=RFC_MASK)
    tail = encode_frame(Op.CONTINUATION, b"llo", mask=RFC_MASK)
    assert WebSocketConnection().receive_data(head + ping + tail) == [
        Ping(b"x"),
        Message(Opcode.TEXT, b"Hello"),
    ]


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 70000])
def test_round_trip_both_directions(size: int) -> None:
    client, server = pair()
    payload = bytes(i % 251 for i in range(size))
    assert server.receive_data(client.send_binary(payload)) == [Message(Opcode.BINARY, payload)]
    assert client.receive_data(server.send_binary(payload)) == [Message(Opcode.BINARY, payload)]


def test_client_masks_with_fresh_keys() -> None:
    client = WebSocketConnection(client=True)
    first, second = client.send_binary(b"same"), client.send_binary(b"same")
    assert first[1] & 0x80 and second[1] & 0x80
    assert first != second  # random masks; a collision is a 1 in 2**32 chance


def test_mask_helper_is_its_own_inverse() -> None:
    data = bytes(range(256)) * 3 + b"odd"
    assert apply_mask(apply_mask(data, RFC_MASK), RFC_MASK) == data
    assert apply_mask(b"", RFC_MASK) == b""


def test_interoperates_with_wsproto() -> None:
    frame_protocol = pytest.importorskip("wsproto.frame_protocol")
    peer_client = frame_protocol.FrameProtocol(client=True, extensions=[])
    server = WebSocketConnection()
    wire = bytes(peer_client.send_data(b"x" * 70000, fin=True)) + bytes(
        peer_client.send_data("hé", fin=True)
    )
    assert server.receive_data(wire) == [
        Message(Opcode.BINARY, b"x" * 70000),
        Message(Opcode.TEXT, "hé".encode()),
    ]
    peer_client.receive_bytes(server.send_binary(b"out") + server.send_close(1000, "done"))
    frames = list(peer_client.received_frames())
    assert frames[0].opcode == frame_protocol.Opcode.BINARY and frames[0].payload == b"out"
    assert frames[1].opcode == frame_protocol.Opcode.CLOSE
    assert frames[1].payload == (1000, "done")


# -- protocol violations -----------------------------------------------------------------------


def assert_fails(conn: WebSocketConnection, data: bytes, code: int) -> None:
    events = conn.receive_data(data)
    assert len(events) == 1 and isinstance(events[0], ProtocolError), events
    assert events[0].code == code
    assert close_code(conn.data_to_send()) == code
    assert conn.closed and conn.failed
    assert conn.receive_data(HELLO_MASKED) == []  # nothing is read after a failure
    with pytest.raises(WebSocketError):
        conn.send_binary(b"late")


def test_server_rejects_unmasked_frames() -> None:
    assert_fails(WebSocketConnection(), HELLO_UNMASKED, CloseCode.PROTOCOL_ERROR)


def test_client_rejects_masked_frames() -> None:
    client = WebSocketConnection(client=True)
    events = client.receive_data(HELLO_MASKED)
    assert [e.code for e in events if isinstance(e, ProtocolError)] == [1002]
    out = client.data_to_send()
    assert out[0] == 0x88 and out[1] & 0x80  # the client's own close frame is masked
    assert apply_mask(out[6:8], out[2:6]) == (1002).to_bytes(2, "big")


@pytest.mark.parametrize("opcode", [0x3, 0x7, 0xB, 0xF])
def test_reserved_opcodes(opcode: int) -> None:
    assert_fails(WebSocketConnection(), encode_frame(opcode, b"", mask=RFC_MASK), 1002)


@pytest.mark.parametrize(
    "frame",
    [
        bytes([0xC2, 0x80]) + RFC_MASK,  # RSV1 set, no extension negotiated
        encode_frame(Op.PING, b"", fin=False, mask=RFC_MASK),  # fragmented control
        encode_frame(Op.PING, bytes(126), mask=RFC_MASK),  # control payload > 125
        encode_frame(Op.CONTINUATION, b"x", mask=RFC_MASK),  # nothing to continue
        encode_frame(Opcode.TEXT, b"a", fin=False, mask=RFC_MASK)
        + encode_frame(Opcode.BINARY, b"b", mask=RFC_MASK),  # new message mid-fragment
        bytes([0x82, 0xFE, 0x00, 0x05]) + RFC_MASK + bytes(5),  # non-minimal 16-bit length
        bytes([0x82, 0xFF]) + (5).to_bytes(8, "big") + RFC_MASK + bytes(5),  # non-minimal 64
        bytes([0x82, 0xFF]) + (1 << 63).to_bytes(8, "big"),  # most significant bit set
        encode_frame(Op.CLOSE, b"\x03", mask=RFC_MASK),  # 1-byte close body
        encode_frame(Op.CLOSE, (1005).to_bytes(2, "big"), mask=RFC_MASK),
        encode_frame(Op.CLOSE, (999).to_bytes(2, "big"), mask=RFC_MASK),
        encode_frame(Op.CLOSE, (2000).to_bytes(2, "big"), mask=RFC_MASK),
    ],
)
def test_protocol_errors_close_1002(frame: bytes) -> None:
    assert_fails(WebSocketConnection(), frame, CloseCode.PROTOCOL_ERROR)


def test_invalid_utf8_closes_1007() -> None:
    bad = b"\xff\xfe"
    assert_fails(WebSocketConnection(), encode_frame(Opcode.TEXT, bad, mask=RFC_MASK), 1007)
    close = encode_frame(Op.CLOSE, b"\x03\xe8" + bad, mask=RFC_MASK)
    assert_fails(WebSocketConnection(), close, 1007)


def test_oversize_frame_refused_before_it_is_complete() -> None:
    server = WebSocketConnection(max_message_size=10)
    frame = encode_frame(Opcode.BINARY, bytes(100_000), mask=RFC_MASK)
    # Only the start has arrived: the limit bites before the rest of the payload is buffered.
    assert_fails(server, frame[:14 + 11], CloseCode.MESSAGE_TOO_BIG)


def test_oversize_fragmented_message() -> None:
    server = WebSocketConnection(max_message_size=10)
    first = encode_frame(Opcode.BINARY, bytes(6), fin=False, mask=RFC_MASK)
    assert server.receive_data(first) == []
    second = encode_frame(Op.CONTINUATION, bytes(5), mask=RFC_MASK)
    assert_fails(server, second, CloseCode.MESSAGE_TOO_BIG)


def test_message_at_the_limit_is_fine() -> None:
    server = WebSocketConnection(max_message_size=10)
    frames = encode_frame(Opcode.BINARY, bytes(6), fin=False, mask=RFC_MASK)
    frames += encode_frame(Op.CONTINUATION, bytes(4), mask=RFC_MASK)
    frames += encode_frame(Opcode.BINARY, bytes(10), mask=RFC_MASK)
    assert server.receive_data(frames) == [Message(Opcode.BINARY, bytes(10))] * 2


def test_default_limit_is_16_mib() -> None:
    assert WebSocketConnection().max_message_size == 16 * 1024 * 1024


# -- ping, pong and the close handshake ------------------------------------------------------


def test_ping_is_answered_by_the_caller() -> None:
    client, server = pair()
    events = server.receive_data(client.send_ping(b"keepalive"))
    assert events == [Ping(b"keepalive")]
    assert isinstance(events[0], Ping)
    assert server.data_to_send() == b""  # no automatic pong
    assert client.receive_data(server.send_pong(events[0].payload)) == [Pong(b"keepalive")]
    with pytest.raises(WebSocketError):
        server.send_ping(bytes(126))


def test_client_initiated_close_handshake() -> None:
    client, server = pair()
    assert server.receive_data(client.send_close(1000, "bye")) == [Close(1000, "bye")]
    echo = server.data_to_send()
    assert echo[:4] == bytes([0x88, 0x05, 0x03, 0xE8])  # the peer's code (and reason) echoed
    assert server.closed and not server.failed
    assert not client.close_received
    assert server.send_close(1000) == b""  # the echo already closed our side
    assert client.receive_data(echo) == [Close(1000, "bye")]
    assert client.data_to_send() == b""  # no echo of an echo
    assert client.closed


def test_server_initiated_close_handshake() -> None:
    client, server = pair()
    frame = server.send_close(CloseCode.NORMAL)
    with pytest.raises(WebSocketError):
        server.send_binary(b"too late")
    # Data the client sent before seeing our close is still delivered.
    in_flight = client.send_binary(b"late data")
    assert client.receive_data(frame) == [Close(1000, "")]
    assert server.receive_data(in_flight + client.data_to_send()) == [
        Message(Opcode.BINARY, b"late data"),
        Close(1000, ""),
    ]
    assert server.closed and server.data_to_send() == b""


def test_empty_close_reports_1005_and_echoes_empty() -> None:
    client, server = pair()
    assert server.receive_data(client.send_close(CloseCode.NO_STATUS)) == [Close(1005, "")]
    assert server.data_to_send() == bytes([0x88, 0x00])


def test_bytes_after_close_are_ignored() -> None:
    client, server = pair()
    wire = client.send_close(1001) + encode_frame(Opcode.BINARY, b"junk", mask=RFC_MASK)
    assert server.receive_data(wire) == [Close(1001, "")]
    assert server.receive_data(b"more") == []


# -- Kubernetes channels -----------------------------------------------------------------------


def test_channel_frames() -> None:
    assert ws.channel_frame(ws.STDOUT, b"hi") == b"\x01hi"
    assert ws.parse_channel(b"\x00input") == (ws.STDIN, b"input")
    assert ws.parse_channel(b"\x02") == (ws.STDERR, b"")
    with pytest.raises(ValueError):
        ws.parse_channel(b"")


def test_v5_close_channel() -> None:
    frame = ws.close_channel_frame(ws.STDIN)
    assert frame == b"\xff\x00"
    assert ws.parse_close_channel(frame) == ws.STDIN
    assert ws.parse_close_channel(frame, ws.CHANNEL_V4) is None  # no such signal in v4
    assert ws.parse_close_channel(b"\x00\xff") is None
    assert ws.parse_close_channel(b"\xff\x00\x00") is None


def test_resize() -> None:
    assert ws.resize_payload(80, 24) == b'{"Width":80,"Height":24}'
    assert ws.parse_resize(b'{"Width":80,"Height":24}') == [ws.TerminalSize(80, 24)]
    assert ws.parse_resize(b'{"width":1,"height":2} {"Width":3,"Height":4}') == [
        ws.TerminalSize(1, 2),
        ws.TerminalSize(3, 4),
    ]
    assert ws.parse_resize(b"") == []
    for bad in (b"[1]", b'{"Width":-1}', b'{"Width":"80"}', b"{"):
        with pytest.raises(ValueError):
            ws.parse_resize(bad)


def test_status_payloads() -> None:
    assert ws.status_success() == b'{"metadata":{},"status":"Success"}'
    assert ws.status_exit_code(0, ["true"]) == ws.status_success()
    raw = ws.status_exit_code(3, ["sh", "-c", "exit 3"])
    assert raw == (
        b'{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit '
        b'code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode",'
        b'"details":{"causes":[{"reason":"ExitCode","message":"3"}]}}'
    )
    # What the Python client does with it (ws_client.WSClient.returncode).
    assert int(json.loads(raw)["details"]["causes"][0]["message"]) == 3
    error = json.loads(ws.status_error("boom"))
    assert error["status"] == "Failure" and error["reason"] == "InternalError"
    assert error["message"] == "Internal error occurred: boom" and error["code"] == 500


def test_exec_session_over_the_connection() -> None:
    """A v5 exec as kubectl drives it: stdin, stdin close, stdout, status, close."""
    client, server = pair()
    wire = client.send_binary(ws.channel_frame(ws.STDIN, b"ping\n"))
    wire += client.send_binary(ws.close_channel_frame(ws.STDIN))
    events = server.receive_data(wire)
    payloads = [e.payload for e in events if isinstance(e, Message)]
    assert ws.parse_channel(payloads[0]) == (ws.STDIN, b"ping\n")
    assert ws.parse_close_channel(payloads[1]) == ws.STDIN
    reply = server.send_binary(ws.channel_frame(ws.STDOUT, b"pong\n"))
    reply += server.send_binary(ws.channel_frame(ws.ERROR, ws.status_success()))
    reply += server.send_close(CloseCode.NORMAL)
    seen = client.receive_data(reply)
    assert [ws.parse_channel(e.payload) for e in seen if isinstance(e, Message)] == [
        (ws.STDOUT, b"pong\n"),
        (ws.ERROR, b'{"metadata":{},"status":"Success"}'),
    ]
    assert seen[-1] == Close(1000, "")


# -- the Python client's port-forward --------------------------------------------------------


def test_parse_ports() -> None:
    assert ws.parse_ports(["80,8080"]) == [80, 8080]
    assert ws.parse_ports(["80", "443"]) == [80, 443]
    for bad in (["0"], ["65536"], ["http"], []):
        with pytest.raises(ValueError):
            ws.parse_ports(bad)


def test_port_forward_channels() -> None:
    assert ws.port_channels(0) == (0, 1)
    assert ws.port_channels(3) == (6, 7)
    assert ws.port_prefix(2, 8080) == bytes([2, 0x90, 0x1F])


def test_port_forward_initial_frames_match_the_python_client() -> None:
    forward = ws.WebSocketPortForward((80, 8080))
    payloads = forward.initial_payloads()
    assert payloads == [b"\x00\x50\x00", b"\x01\x50\x00", b"\x02\x90\x1f", b"\x03\x90\x1f"]
    for channel, payload in enumerate(payloads):
        # The client's own check: 3 bytes, port = low + high * 256, in ports order.
        assert len(payload) == 3 and payload[0] == channel
        assert payload[1] + payload[2] * 256 == forward.ports[channel // 2]


def test_port_forward_routing() -> None:
    forward = ws.WebSocketPortForward((80, 8080))
    assert forward.data_payload(1, b"GET /") == b"\x02GET /"
    assert forward.error_payload(0, "refused") == b"\x01refused"
    assert forward.route(b"\x02body") == (1, b"body")
    assert forward.route(b"\x00") == (0, b"")
    assert forward.route(b"\x01ignored") is None  # the server never reads error channels
    with pytest.raises(ValueError):
        forward.route(b"\x04")
    with pytest.raises(ValueError):
        ws.WebSocketPortForward(())
