"""The bridge's multiplexing protocol, sans I/O: frames, opens both ways, flow control, errors."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.bridge import mux
from tether.bridge.mux import FrameType, MuxProtocolError, MuxSession, MuxUsageError, encode_frame


def _pair(window: int = mux.INITIAL_WINDOW) -> tuple[MuxSession, MuxSession]:
    client, agent = MuxSession("client", window=window), MuxSession("agent", window=window)
    assert isinstance(agent.receive_data(client.data_to_send())[0], mux.HelloReceived)
    assert isinstance(client.receive_data(agent.data_to_send())[0], mux.HelloReceived)
    return client, agent


def _hello(role: str = "client") -> bytes:
    return encode_frame(FrameType.HELLO, 0, json.dumps({"version": 1, "role": role}).encode())


def test_frame_round_trip_split_anywhere() -> None:
    frames = (encode_frame(FrameType.DATA, 3, b"abc") + encode_frame(FrameType.EOF, 3)
              + encode_frame(FrameType.PING, 0, b"12345678", mux.PING_ACK))
    for cut in range(len(frames) + 1):
        decoder = mux.FrameDecoder()
        got = decoder.feed(frames[:cut]) + decoder.feed(frames[cut:])
        assert [(f.type, f.flags, f.stream, f.payload) for f in got] == [
            (FrameType.DATA, 0, 3, b"abc"), (FrameType.EOF, 0, 3, b""), (FrameType.PING, 1, 0, b"12345678")]
        assert decoder.buffered == 0


def test_open_tcp_accept_data_eof_both_ways() -> None:
    client, agent = _pair()
    sid = client.open_tcp("web.default", 80)
    assert sid % 2 == 1
    [opened] = agent.receive_data(client.data_to_send())
    assert opened == mux.StreamOpened(sid, "tcp", host="web.default", port=80)
    agent.accept(sid)
    assert agent.send_data(sid, b"reply") == 5
    agent.send_eof(sid)
    events = client.receive_data(agent.data_to_send())
    assert events == [mux.OpenReplied(sid, True), mux.DataReceived(sid, b"reply"), mux.EofReceived(sid)]
    client.send_data(sid, b"req")
    client.send_eof(sid)
    events = agent.receive_data(client.data_to_send())
    assert events == [mux.DataReceived(sid, b"req"), mux.EofReceived(sid), mux.StreamClosed(sid, by_peer=False)]
    assert not agent.is_open(sid) and not client.is_open(sid)


def test_reverse_stream_from_agent_with_route_port_peer() -> None:
    client, agent = _pair()
    sid = agent.open_reverse("naison-e4be", 3001, "10.1.2.3:4567")
    assert sid % 2 == 0
    [opened] = client.receive_data(agent.data_to_send())
    assert opened == mux.StreamOpened(sid, "reverse", port=3001, route="naison-e4be", peer="10.1.2.3:4567")
    client.reject(sid, "nothing listens on 3001")
    assert agent.receive_data(client.data_to_send()) == [mux.OpenReplied(sid, False, "nothing listens on 3001")]
    assert not agent.is_open(sid)


@pytest.mark.parametrize(("role", "call"), [
    ("agent", lambda s: s.open_tcp("h", 1)),
    ("agent", lambda s: s.open_udp("h", 1)),
    ("client", lambda s: s.open_reverse("r", 1)),
])
def test_wrong_side_cannot_open(role: str, call: object) -> None:
    with pytest.raises(MuxUsageError):
        call(MuxSession(role))  # type: ignore[operator, arg-type]


def test_flow_control_bounds_what_a_slow_reader_receives() -> None:
    client, agent = _pair(window=1000)
    sid = client.open_tcp("h", 1)
    agent.receive_data(client.data_to_send())
    agent.accept(sid)
    client.receive_data(agent.data_to_send())
    assert client.send_data(sid, b"x" * 5000) == 1000  # only the window goes
    assert client.send_data(sid, b"more") == 0
    events = agent.receive_data(client.data_to_send())
    assert sum(len(e.data) for e in events if isinstance(e, mux.DataReceived)) == 1000
    agent.consumed(sid, 100)  # below a quarter of the window: no update yet
    assert agent.data_to_send() == b""
    agent.consumed(sid, 200)
    [opened] = client.receive_data(agent.data_to_send())
    assert opened == mux.WindowOpened(sid, 300)
    assert client.send_data(sid, b"y" * 1000) == 300


def test_peer_overrunning_its_window_is_a_protocol_error() -> None:
    client, agent = _pair(window=10)
    sid = client.open_tcp("h", 1)
    agent.receive_data(client.data_to_send())
    with pytest.raises(MuxProtocolError, match="beyond its window"):
        agent.receive_data(encode_frame(FrameType.DATA, sid, b"x" * 11))


def test_udp_datagram_goes_whole_or_not_at_all() -> None:
    client, agent = _pair(window=100)
    sid = client.open_udp("kube-dns.kube-system", 53)
    [opened] = agent.receive_data(client.data_to_send())
    assert opened.kind == "udp"
    assert client.send_data(sid, b"q" * 60) == 60
    assert client.send_data(sid, b"q" * 60) == 0  # would not fit: dropped, not split


def test_close_ends_stream_and_late_frames_are_dropped() -> None:
    client, agent = _pair()
    sid = client.open_tcp("h", 1)
    agent.receive_data(client.data_to_send())
    agent.accept(sid)
    client.close_stream(sid, "bye")
    assert agent.receive_data(client.data_to_send()) == [mux.StreamClosed(sid, "bye")]
    assert agent.receive_data(encode_frame(FrameType.DATA, sid, b"late")) == []


def test_ping_is_answered_and_control_passes_json() -> None:
    client, agent = _pair()
    client.ping(b"abcdefgh")
    assert agent.receive_data(client.data_to_send()) == [mux.PingReceived(b"abcdefgh")]
    assert client.receive_data(agent.data_to_send()) == [mux.PongReceived(b"abcdefgh")]
    client.control({"id": 1, "op": "register", "route": "r"})
    assert agent.receive_data(client.data_to_send()) == [
        mux.ControlReceived({"id": 1, "op": "register", "route": "r"})]


def test_open_after_goaway_is_refused() -> None:
    client, agent = _pair()
    agent.goaway("shutting down")
    assert client.receive_data(agent.data_to_send()) == [mux.GoAwayReceived("shutting down")]
    sid = client.open_tcp("h", 1)
    agent.receive_data(client.data_to_send())
    assert client.receive_data(agent.data_to_send()) == [mux.OpenReplied(sid, False, "connection closing")]


def test_too_many_streams_refused_not_fatal() -> None:
    client, agent = MuxSession("client"), MuxSession("agent", max_streams=2)
    agent.receive_data(client.data_to_send())
    client.receive_data(agent.data_to_send())
    ids = [client.open_tcp("h", 1) for _ in range(3)]
    events = agent.receive_data(client.data_to_send())
    assert [e.stream for e in events if isinstance(e, mux.StreamOpened)] == ids[:2]
    assert client.receive_data(agent.data_to_send())[-1] == mux.OpenReplied(ids[2], False, "too many streams")


def _open(stream: int, body: object, type_: FrameType = FrameType.OPEN_TCP) -> bytes:
    return encode_frame(type_, stream, json.dumps(body).encode())


@pytest.mark.parametrize(("frames", "message"), [
    (encode_frame(FrameType.DATA, 1, b"x"), "expected HELLO"),
    (encode_frame(FrameType.HELLO, 0, b'{"version": 9}'), "version 9"),
    (encode_frame(FrameType.HELLO, 0, b"not json"), "not JSON"),
    (_hello() + _hello(), "second HELLO"),
    (_hello() + encode_frame(0x7F, 0), "unknown frame type"),  # type: ignore[arg-type]
    (_hello() + _open(2, {"host": "h", "port": 1}), "this side's id space"),
    (_hello() + _open(1, {"host": "h", "port": 0}), "bad port"),
    (_hello() + _open(1, {"host": "h", "port": "80"}), "bad port"),
    (_hello() + _open(1, {"port": 80}), "without a host"),
    (_hello() + _open(1, [1]), "JSON object"),
    (_hello() + _open(1, {"host": "h", "port": 1}) * 2, "opened twice"),
    (_hello() + _open(1, {"route": "r", "port": 1}, FrameType.OPEN_REVERSE), "does not accept reverse"),
    (_hello() + encode_frame(FrameType.PING, 3, b"12345678"), "PING on stream 3"),
    (_hello() + encode_frame(FrameType.DATA, 0, b"x"), "DATA on stream 0"),
    (_hello() + encode_frame(FrameType.PING, 0, b"short"), "8 bytes"),
    (_hello() + struct.pack(">BBII", FrameType.DATA, 0, 1, mux.MAX_PAYLOAD + 1), "exceeds the limit"),
])
def test_agent_rejects_bad_input(frames: bytes, message: str) -> None:
    agent = MuxSession("agent")
    with pytest.raises(MuxProtocolError, match=message):
        agent.receive_data(frames)


def test_window_frame_must_be_four_bytes_and_bounded() -> None:
    client, agent = _pair()
    sid = client.open_tcp("h", 1)
    agent.receive_data(client.data_to_send())
    agent.accept(sid)
    client.receive_data(agent.data_to_send())
    with pytest.raises(MuxProtocolError, match="4 bytes"):
        client.receive_data(encode_frame(FrameType.WINDOW, sid, b"\0\0\1"))
    client2, agent2 = _pair()
    sid2 = client2.open_tcp("h", 1)
    agent2.receive_data(client2.data_to_send())
    with pytest.raises(MuxProtocolError, match="2\\^31"):
        agent2.receive_data(encode_frame(FrameType.WINDOW, sid2, struct.pack(">I", 2**32 - 1)))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 0x10), st.integers(0, 3), st.integers(0, 6),
                          st.binary(max_size=64)), max_size=12), st.binary(max_size=40))
def test_decoder_fuzz_only_protocol_errors(frames: list[tuple[int, int, int, bytes]], tail: bytes) -> None:
    """Whatever arrives, the session either yields events or raises MuxProtocolError: no other crash."""
    for role in ("client", "agent"):
        session = MuxSession(role)  # type: ignore[arg-type]
        wire = _hello() + b"".join(struct.pack(">BBII", t, f, s, len(p)) + p for t, f, s, p in frames) + tail
        try:
            session.receive_data(wire)
        except MuxProtocolError:
            pass
        assert isinstance(session.data_to_send(), bytes)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_decoder_fuzz_raw_bytes(data: bytes) -> None:
    session = MuxSession("agent")
    try:
        session.receive_data(data)
    except MuxProtocolError:
        pass
