"""The sans-I/O HTTP/1.1 response parser and request encoding (`tether.net.http1`, no sockets)."""

from __future__ import annotations

import pytest

from tether.net.http1 import IncompleteMessage, ProtocolError, ResponseParser, encode_request


def feed_bytewise(parser: ResponseParser, data: bytes) -> list[object]:
    return [answer for i in range(len(data)) if (answer := parser.feed(data[i:i + 1])) is not None]


def test_content_length_body_in_one_piece() -> None:
    answer = ResponseParser().feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/json\r\n\r\n{}")
    assert answer is not None
    assert (answer.status, answer.reason, answer.body, answer.keep_alive) == (200, "OK", b"{}", True)
    assert answer.header("content-type") == "application/json"


def test_content_length_body_byte_by_byte() -> None:
    parser = ResponseParser()
    answers = feed_bytewise(parser, b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nhello")
    assert len(answers) == 1
    assert answers[0].body == b"hello"  # type: ignore[attr-defined]
    assert not parser.leftover


def test_chunked_body_with_extensions_and_trailers() -> None:
    raw = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Trailer: yes\r\n\r\n")
    whole = ResponseParser().feed(raw)
    assert whole is not None and whole.body == b"Wikipedia"
    pieces = feed_bytewise(ResponseParser(), raw)
    assert [a.body for a in pieces] == [b"Wikipedia"]  # type: ignore[attr-defined]


def test_informational_heads_are_skipped() -> None:
    answer = ResponseParser().feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx")
    assert answer is not None and (answer.status, answer.body) == (200, b"x")


@pytest.mark.parametrize("status", [204, 304])
def test_no_body_statuses(status: int) -> None:
    answer = ResponseParser().feed(f"HTTP/1.1 {status} X\r\nContent-Length: 10\r\n\r\n".encode())
    assert answer is not None and answer.body == b""


def test_head_request_has_no_body_whatever_the_length() -> None:
    answer = ResponseParser(head_request=True).feed(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n")
    assert answer is not None and answer.body == b""


def test_body_until_close_is_not_keep_alive() -> None:
    parser = ResponseParser()
    assert parser.feed(b"HTTP/1.1 200 OK\r\n\r\npart one ") is None
    assert parser.feed(b"part two") is None
    answer = parser.feed_eof()
    assert answer.body == b"part one part two"
    assert not answer.keep_alive


@pytest.mark.parametrize(("head", "keep_alive"), [
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", False),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", False),
    (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", True),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", True),
])
def test_keep_alive_rules(head: bytes, keep_alive: bool) -> None:
    answer = ResponseParser().feed(head)
    assert answer is not None and answer.keep_alive is keep_alive


def test_repeated_headers_are_joined() -> None:
    answer = ResponseParser().feed(b"HTTP/1.1 200 OK\r\nWarning: a\r\nwarning: b\r\nContent-Length: 0\r\n\r\n")
    assert answer is not None and answer.header("Warning") == "a, b"


def test_bytes_after_the_answer_are_reported_as_leftover() -> None:
    parser = ResponseParser()
    assert parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxEXTRA") is not None
    assert parser.leftover


@pytest.mark.parametrize("raw", [
    b"SSH-2.0-OpenSSH\r\n\r\n",
    b"HTTP/1.1 abc OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x10\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nab",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nab",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxYZ",
])
def test_malformed_answers_raise_protocol_errors(raw: bytes) -> None:
    with pytest.raises(ProtocolError):
        ResponseParser().feed(raw)


def test_oversized_head_is_refused() -> None:
    with pytest.raises(ProtocolError, match="larger than"):
        ResponseParser().feed(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 300_000)


@pytest.mark.parametrize(("received", "answered"), [(b"", False), (b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nab", True)])
def test_eof_before_the_end_says_whether_anything_arrived(received: bytes, answered: bool) -> None:
    parser = ResponseParser()
    parser.feed(received)
    with pytest.raises(IncompleteMessage) as caught:
        parser.feed_eof()
    assert caught.value.received_any is answered


def test_encode_request_frames_body_and_host() -> None:
    raw = encode_request("PATCH", "/api/v1/x?a=1", "127.0.0.1:6443", [("Content-Type", "application/json")], b"{}")
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"PATCH /api/v1/x?a=1 HTTP/1.1"
    assert b"Host: 127.0.0.1:6443" in lines
    assert b"Content-Length: 2" in lines
    assert body == b"{}"


def test_encode_get_has_no_content_length() -> None:
    raw = encode_request("GET", "/version", "h", [], None)
    assert b"Content-Length" not in raw
    assert raw.endswith(b"\r\n\r\n")


def test_streaming_reads_give_the_head_first_then_the_body_as_it_arrives() -> None:
    parser = ResponseParser()
    assert parser.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel") is None
    assert parser.head_ready and parser.head().status == 200
    assert parser.take_body() == b"hel"
    assert parser.feed(b"lo\r\n3\r\n an") is None
    assert parser.take_body() == b"lo an"
    assert not parser.complete
    assert parser.feed(b"\r\n0\r\n\r\n") is not None
    assert parser.complete and parser.take_body() == b""


def test_streaming_a_content_length_body_in_pieces() -> None:
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nabc")
    assert parser.take_body() == b"abc" and not parser.complete
    assert parser.feed(b"def") is not None
    assert parser.complete and parser.take_body() == b"def"


def test_a_repeated_identical_content_length_is_accepted() -> None:
    answer = ResponseParser().feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab")
    assert answer is not None and answer.body == b"ab"


def test_chunked_with_a_content_length_is_read_chunked_and_not_reused() -> None:
    answer = ResponseParser().feed(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 99\r\n\r\n2\r\nab\r\n0\r\n\r\n")
    assert answer is not None and answer.body == b"ab" and not answer.keep_alive


def test_request_targets_cannot_break_the_request_line() -> None:
    raw = encode_request("GET", "/api/v1/namespaces/a b\r\nX: y/é?q=1%2C2", "h", [], None)
    line = raw.split(b"\r\n", 1)[0]
    assert line == b"GET /api/v1/namespaces/a%20b%0D%0AX:%20y/%C3%A9?q=1%2C2 HTTP/1.1"
