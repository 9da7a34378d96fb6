"""The server side of `tether.net.http1`: request heads and body framing, strict (no sockets)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.net import http1
from tether.net.http1 import (
    CHUNKED,
    FIXED,
    BodyDecoder,
    BodyTooLarge,
    Headers,
    ProtocolError,
    UnsupportedCoding,
    encode_chunk,
    encode_connect,
    encode_request,
    field_items,
    parse_fields,
    parse_request_head,
    request_body,
)


def test_a_request_head() -> None:
    head = parse_request_head(b"GET /api/v1/pods?watch=1 HTTP/1.1\r\nHost: h\r\nAccept: a\r\naccept: b")
    assert (head.method, head.target, head.version) == ("GET", "/api/v1/pods?watch=1", "HTTP/1.1")
    assert head.headers == {"host": "h", "accept": "a, b"}
    assert head.fields == (("Host", "h"), ("Accept", "a"), ("accept", "b"))
    assert head.keep_alive and request_body(head) is None


@pytest.mark.parametrize(("raw", "keep_alive"), [
    (b"GET / HTTP/1.1\r\nConnection: close", False),
    (b"GET / HTTP/1.0", False),
    (b"GET / HTTP/1.0\r\nConnection: keep-alive", True),
])
def test_request_keep_alive(raw: bytes, keep_alive: bool) -> None:
    assert parse_request_head(raw).keep_alive is keep_alive


@pytest.mark.parametrize("raw", [
    b"GET /  HTTP/1.1",  # two spaces
    b"GET / HTTP/1.1 extra",
    b"GET /a b HTTP/1.1",
    b"GET / HTTP/2.0",
    b"GET / http/1.1",
    b"G(T / HTTP/1.1",
    b"GET /\x7f HTTP/1.1",
    b"GET / HTTP/1.1\r\nHost : h",  # space before the colon
    b"GET / HTTP/1.1\r\n folded: line",
    b"GET / HTTP/1.1\r\nX: a\x00b",
    b"GET / HTTP/1.1\r\nX: a\nInjected: b",
    b"GET / HTTP/1.1\r\nno colon",
    b"",
])
def test_malformed_request_heads_are_refused(raw: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_request_head(raw)


def body_of(raw_head: bytes, data: bytes, *, limit: int | None = None) -> tuple[bytes, bytes]:
    decoder = request_body(parse_request_head(raw_head), limit=limit)
    assert decoder is not None
    buffer = bytearray(data)
    assert decoder.feed(buffer)
    return bytes(decoder.body), bytes(buffer)


def test_request_bodies_by_length_and_chunked_and_what_follows_them() -> None:
    assert body_of(b"POST / HTTP/1.1\r\nContent-Length: 3", b"abcGET") == (b"abc", b"GET")
    assert body_of(b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3", b"abc") == (b"abc", b"")
    chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked"
    assert body_of(chunked, b"3;x=y\r\nabc\r\n1\r\nd\r\n0\r\nT: 1\r\n\r\nNEXT") == (b"abcd", b"NEXT")
    assert request_body(parse_request_head(b"POST / HTTP/1.1\r\nContent-Length: 0")) is None


@pytest.mark.parametrize(("raw_head", "error"), [
    (b"POST / HTTP/1.1\r\nContent-Length: -1", ProtocolError),
    (b"POST / HTTP/1.1\r\nContent-Length: +3", ProtocolError),
    (b"POST / HTTP/1.1\r\nContent-Length: 0x10", ProtocolError),
    (b"POST / HTTP/1.1\r\nContent-Length: 1e3", ProtocolError),
    (b"POST / HTTP/1.1\r\nContent-Length: ", ProtocolError),
    (b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999", ProtocolError),
    (b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4", ProtocolError),
    (b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked", ProtocolError),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked", UnsupportedCoding),
    (b"POST / HTTP/1.1\r\nTransfer-Encoding: identity", UnsupportedCoding),
    (b"POST / HTTP/1.1\r\nContent-Length: 11", BodyTooLarge),
])
def test_request_framing_two_parties_could_read_differently_is_refused(
        raw_head: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        request_body(parse_request_head(raw_head), limit=10)


@pytest.mark.parametrize("data", [
    b"-1\r\n", b"+1\r\nx\r\n", b"0x1\r\nx\r\n", b"zz\r\n", b"1\r\nxYZ", b"1" * 2000,
])
def test_malformed_chunks_are_refused(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        BodyDecoder(CHUNKED).feed(bytearray(data))


def test_a_chunked_body_over_its_limit() -> None:
    decoder = BodyDecoder(CHUNKED, limit=4)
    with pytest.raises(BodyTooLarge):
        decoder.feed(bytearray(b"3\r\nabc\r\n3\r\ndef\r\n"))


def test_a_body_in_pieces_is_taken_as_it_arrives() -> None:
    decoder = BodyDecoder(FIXED, 5)
    buffer = bytearray(b"ab")
    assert not decoder.feed(buffer) and decoder.take() == b"ab"
    buffer += b"cdeX"
    assert decoder.feed(buffer) and decoder.take() == b"cde" and buffer == b"X"


def test_headers_view_is_case_insensitive_and_keeps_repeats() -> None:
    block = b"Warning: a\r\nwarning:b\r\nX-One:  1 "
    view = Headers(parse_fields(block), field_items(block))
    assert view["WARNING"] == "a, b" and view.get("x-one") == "1" and "x-two" not in view
    assert view.multi_items() == [("Warning", "a"), ("warning", "b"), ("X-One", "1")]


def test_what_a_client_writes() -> None:
    assert encode_chunk(b"hello") == b"5\r\nhello\r\n"
    raw = encode_request("POST", "/x", "h", [], None, chunked=True)
    assert b"Transfer-Encoding: chunked" in raw and b"Content-Length" not in raw
    assert encode_connect("[::1]:6443", [("Agent-Id", "a")]) == (
        b"CONNECT [::1]:6443 HTTP/1.1\r\nHost: [::1]:6443\r\nAgent-Id: a\r\n\r\n")
    with pytest.raises(ValueError):
        encode_connect("h:1", [("X", "a\r\nInjected: b")])


def _read_exactly(decoder: http1.BodyDecoder, stream: bytes) -> tuple[bytes, bytes]:
    """What a server reading the way `wants` says gets: the body, and the untouched rest."""
    buffer = bytearray()
    rest = stream
    while want := decoder.wants():
        end = rest.index(b"\r\n") + 2 if want == http1.LINE else want
        buffer += rest[:end]
        rest = rest[end:]
        decoder.feed(buffer)
        assert not buffer  # everything read was the body's
    return bytes(decoder.body), rest


@pytest.mark.parametrize(("framing", "length", "wire"), [
    (http1.FIXED, 5, b"hello"),
    (http1.CHUNKED, 0, b"5\r\nhello\r\n0\r\n\r\n"),
    (http1.CHUNKED, 0, b"2;ext=1\r\nhe\r\n3\r\nllo\r\n0\r\nTrailer: x\r\n\r\n"),
])
def test_a_server_reading_what_the_decoder_wants_never_reads_into_the_next_request(
        framing: int, length: int, wire: bytes) -> None:
    following = b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n"
    body, rest = _read_exactly(http1.BodyDecoder(framing, length), wire + following)
    assert body == b"hello"
    assert rest == following


def test_a_huge_chunk_size_is_read_in_bounded_pieces_and_refused_at_the_limit() -> None:
    decoder = http1.BodyDecoder(http1.CHUNKED, limit=100_000)
    buffer = bytearray(b"ffffffffff\r\n")
    decoder.feed(buffer)
    assert 0 < decoder.wants() <= 64 * 1024
    with pytest.raises(http1.BodyTooLarge):
        for _ in range(3):
            buffer += b"x" * decoder.wants()
            decoder.feed(buffer)


# The one-regex fast path must accept exactly what the step-by-step parse accepts, with the
# same result: heads built from the bytes where the two could disagree.
_PIECES = [b"GET", b"PATCH", b"G(T", b" ", b"  ", b"/", b"/a?b=c", b"\x7f", b"\x80", b"HTTP/1.1",
           b"HTTP/1.0", b"HTTP/2.0", b"http/1.1", b"\r\n", b"\r", b"\n", b"\x00", b":", b"Host",
           b"X-A", b"h", b"\t", b"a b", b"\xff", b"", b"Host: h", b"Content-Length: 2"]


def _strict_or_error(raw: bytes) -> object:
    try:
        return http1._parse_request_head_strictly(raw)
    except ProtocolError:
        return ProtocolError


def _fast_or_error(raw: bytes) -> object:
    try:
        return parse_request_head(raw)
    except ProtocolError:
        return ProtocolError


@pytest.mark.parametrize("raw", [
    b"GET / HTTP/1.1", b"GET / HTTP/1.1\r\n", b"GET / HTTP/1.1\r\n\r\n", b"GET / HTTP/1.1\r\nA:",
    b"GET / HTTP/1.1\r\nA: b \t\r\nB:\tc", b"GET / HTTP/1.1\r\nA: \xe9\x80", b"GET / HTTP/1.1\n",
    b"GET / HTTP/1.1\r\nA: b\r\n", b"GET / HTTP/1.1\r\nA: b\r\n\r\nB: c", b"GET / HTTP/1.1\rA: b",
    b"GET /\r\n HTTP/1.1", b" GET / HTTP/1.1", b"GET / HTTP/1.1\r\n:b", b"GET / HTTP/1.1\r\nA\r\n: b",
])
def test_the_fast_path_agrees_with_the_strict_parse(raw: bytes) -> None:
    assert _fast_or_error(raw) == _strict_or_error(raw)


@given(st.lists(st.sampled_from(_PIECES), max_size=12))
@settings(max_examples=400, deadline=None)
def test_the_fast_path_agrees_with_the_strict_parse_on_generated_heads(pieces: list[bytes]) -> None:
    raw = b"".join(pieces)
    assert _fast_or_error(raw) == _strict_or_error(raw)
    assert _fast_or_error(b"GET / HTTP/1.1\r\n" + raw) == _strict_or_error(b"GET / HTTP/1.1\r\n" + raw)


def test_a_header_name_checked_once_is_still_refused_without_its_colon() -> None:
    # names are checked against the token grammar once per distinct name, then remembered
    assert parse_request_head(b"GET / HTTP/1.1\r\nX-Seen: 1").headers["x-seen"] == "1"
    with pytest.raises(ProtocolError):
        parse_request_head(b"GET / HTTP/1.1\r\nX-Seen")
    with pytest.raises(ProtocolError):
        parse_request_head(b"GET / HTTP/1.1\r\nX-Seen: a\rb")
    assert parse_request_head(b"GET / HTTP/1.1\r\nX-Seen: a\r\nx-seen: b").headers["x-seen"] == "a, b"
