"""HTTP/1.1 on the wire, without I/O: bytes in, values out (RFC 9112).

One parser family for both ends of a connection:
- `ResponseParser`: a client reads one response (status line, headers, a body framed by
  Content-Length, chunked coding, or the end of the connection). 1xx heads are skipped; a `101`
  and a 2xx to CONNECT end at their head, and the bytes after it belong to the new protocol
  (`take_leftover`).
- `parse_request_head` and `request_body`: what a server needs to read a request, with the
  framing rules it must enforce.
- `BodyDecoder`: the body framing both use; `parse_fields`, `field_items`: header lines.
- `encode_request`, `encode_connect`, `encode_chunk`: what a client writes.

Framing is strict, because a message whose end two parties see in different places is how
requests get smuggled past a proxy: a Content-Length is plain decimal digits (a repeated one
must agree), a chunk size plain hex, header names are tokens with no space before the colon,
and values carry no CR, LF or NUL. A request with both Transfer-Encoding and Content-Length, or
with a transfer coding other than `chunked`, is refused; a response with both is read chunked
and its connection is not reused (RFC 9112 6.3).

Why hand-written rather than httpx/httpcore/h11: a controller's cost is its API calls, and a
profile of the hub under load spent about 85 % of its CPU inside httpx, httpcore and anyio's
pure-Python TLS stream (~2 ms a call), against ~0.3 ms for the same call through this parser
and `tether.net.httpclient` on asyncio streams (TLS in the event loop's C-level transport).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

MAX_HEAD_BYTES = 256 * 1024
MAX_CHUNK_LINE = 1024

FIXED, CHUNKED, UNTIL_CLOSE = range(3)  # how a body ends: `BodyDecoder` framings
LINE = -1  # `BodyDecoder.wants`: one CRLF-ended line
_READ_SIZE = 64 * 1024

_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")
_DIGITS = re.compile(r"[0-9]{1,19}")
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BAD_VALUE = re.compile(rb"[\r\n\x00]")
_FIELD = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[^\r\n\x00]*"  # a token, a colon, no CR/LF/NUL after
_FIELDS = re.compile(_FIELD + rb"(?:\r\n" + _FIELD + rb")*")
_VERSION = re.compile(rb"HTTP/1\.[01]")
_TARGET = re.compile(rb"[\x21-\x7e]+")  # printable ASCII, no space
# A well-formed request line in one match: token SP printable target SP version. A head whose
# request line or header block the fast path refuses goes the slow way, which says what is wrong.
_REQUEST_LINE = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+) ([\x21-\x7e]+) (HTTP/1\.[01])")
_TOKEN_TEXT = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TARGET_SAFE = "".join(chr(c) for c in range(0x21, 0x7F))
_BODY_METHODS = frozenset(("POST", "PUT", "PATCH"))  # a Content-Length even when empty


class ProtocolError(ValueError):
    """The peer's bytes are not HTTP/1.1 as we read it."""


class IncompleteMessage(ProtocolError):
    """The connection ended before the message did; `received_any` says whether some of it
    had arrived."""

    def __init__(self, message: str, *, received_any: bool) -> None:
        super().__init__(message)
        self.received_any = received_any


class BodyTooLarge(ProtocolError):
    """A body longer than the reader's limit."""


class UnsupportedCoding(ProtocolError):
    """A request's transfer coding other than `chunked` (a server answers 501)."""


# headers ----------------------------------------------------------------------------------


def parse_fields(block: bytes) -> dict[str, str]:
    """Header lines joined by CRLF (without the final one) -> lower-cased names, a repeated
    name's values joined by ", ". `field_items` gives the fields as received."""
    if not block:
        return {}
    joined = _checked_fields(block)
    return _strict_fields(block) if joined is None else joined


def _strict_fields(block: bytes) -> dict[str, str]:
    """`parse_fields` by the grammar itself (`_FIELDS`), saying which line is wrong: the
    reference `_checked_fields` is tested against."""
    if not _FIELDS.fullmatch(block):
        bad = next((line for line in block.split(b"\r\n") if not _FIELDS.fullmatch(line)), block)
        raise ProtocolError(f"bad header line {bad[:60]!r}")
    joined: dict[str, str] = {}
    for line in block.decode("latin-1").split("\r\n"):
        name, _, value = line.partition(":")
        key = name.lower()
        value = value.strip(" \t")
        joined[key] = joined[key] + ", " + value if key in joined else value
    return joined


def _checked_fields(block: bytes) -> dict[str, str] | None:
    """`parse_fields` of what `_FIELDS` accepts, None for anything else. A bearer token makes a
    request head ~1 KB, and a regex stepping through every value byte cost ~2 us of a request's
    parse, so the values are checked by one C-level pass instead (deleting CR, LF and NUL must
    remove exactly the CRLFs that end lines), and each name against the token grammar once per
    distinct name (they repeat on every request)."""
    lines = block.decode("latin-1").split("\r\n")
    if len(block) - len(block.translate(None, b"\r\n\x00")) != 2 * (len(lines) - 1):
        return None
    joined: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if name not in _TOKENS_SEEN:
            if not colon or _TOKEN_TEXT.fullmatch(name) is None:
                return None
            if len(_TOKENS_SEEN) < _TOKENS_SEEN_MAX:
                _TOKENS_SEEN.add(name)
        elif not colon:
            return None
        key = name.lower()
        if key in joined:
            joined[key] += ", " + value.strip(" \t")
        else:
            joined[key] = value.strip(" \t")
    return joined


_TOKENS_SEEN: set[str] = set()  # header names already checked: valid tokens
_TOKENS_SEEN_MAX = 4096  # peers choose names: the memory stays bounded, checking goes on beyond


def field_items(block: bytes) -> tuple[tuple[str, str], ...]:
    """Every field of a header block (checked by `parse_fields`) as received, in order."""
    if not block:
        return ()
    pairs = (line.partition(":") for line in block.decode("latin-1").split("\r\n"))
    return tuple((name, value.strip(" \t")) for name, _, value in pairs)


def content_length(value: str) -> int:
    """A Content-Length value; a repeated header arrives joined ("2, 2"): fine when all agree."""
    if value.isascii() and value.isdigit() and len(value) <= 19:
        return int(value)
    values = {part.strip() for part in value.split(",")}
    if len(values) != 1:
        raise ProtocolError(f"bad Content-Length {value[:20]!r}")
    number = next(iter(values))
    if not _DIGITS.fullmatch(number):
        raise ProtocolError(f"bad Content-Length {value[:20]!r}")
    return int(number)


def _keep_alive(version: bytes, connection: str) -> bool:
    tokens = connection.lower()
    return "close" not in tokens if version == b"HTTP/1.1" else "keep-alive" in tokens


class Headers(Mapping[str, str]):
    """A message's headers, read-only and case-insensitive (a repeated name's values joined by
    ", "); `multi_items()` gives every field as received."""

    __slots__ = ("_fields", "_joined")

    def __init__(self, joined: Mapping[str, str], fields: Sequence[tuple[str, str]] = ()) -> None:
        self._joined = joined
        self._fields = fields

    def __getitem__(self, name: str) -> str:
        return self._joined[name.lower()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._joined)

    def __len__(self) -> int:
        return len(self._joined)

    def multi_items(self) -> list[tuple[str, str]]:
        return list(self._fields) if self._fields else list(self._joined.items())


# bodies -----------------------------------------------------------------------------------

_SIZE, _DATA, _DATA_END, _TRAILERS = range(4)


class BodyDecoder:
    """One body's framing: `feed(buffer)` moves the body's bytes out of `buffer` (transfer
    coding removed) into `body`, leaves whatever follows the body in `buffer`, and returns True
    once the body is complete. `limit` bounds the decoded size (`BodyTooLarge`)."""

    __slots__ = ("_limit", "_remaining", "_state", "body", "complete", "framing", "received")

    def __init__(self, framing: int, length: int = 0, *, limit: int | None = None) -> None:
        self.framing = framing
        self.body = bytearray()
        self.received = 0
        self.complete = framing == FIXED and length == 0
        self._remaining = length
        self._state = _SIZE
        self._limit = limit
        if limit is not None and framing == FIXED and length > limit:
            raise BodyTooLarge(f"body of {length} bytes, more than {limit}")

    def feed(self, buffer: bytearray) -> bool:
        if self.complete:
            return True
        if self.framing == FIXED:
            self.complete = self._take(buffer)
            return self.complete
        if self.framing == UNTIL_CLOSE:
            if buffer:
                self._add(buffer)
                buffer.clear()
            return False
        while True:
            state = self._state
            if state == _SIZE:
                end = buffer.find(b"\r\n")
                if end < 0:
                    if len(buffer) > MAX_CHUNK_LINE:
                        raise ProtocolError("chunk size line too long")
                    return False
                line = bytes(buffer[:end]).split(b";", 1)[0].strip(b" \t")
                del buffer[:end + 2]
                if not _HEX.fullmatch(line):
                    raise ProtocolError(f"bad chunk size {line[:20]!r}")
                self._remaining = int(line, 16)
                self._state = _DATA if self._remaining else _TRAILERS
            elif state == _DATA:
                if not self._take(buffer):
                    return False
                self._state = _DATA_END
            elif state == _DATA_END:
                if len(buffer) < 2:
                    return False
                if buffer[:2] != b"\r\n":
                    raise ProtocolError("chunk not followed by CRLF")
                del buffer[:2]
                self._state = _SIZE
            else:  # trailers: read past them, up to the empty line
                end = buffer.find(b"\r\n")
                if end < 0:
                    if len(buffer) > MAX_HEAD_BYTES:
                        raise ProtocolError(f"trailers larger than {MAX_HEAD_BYTES} bytes")
                    return False
                del buffer[:end + 2]
                if end == 0:
                    self.complete = True
                    return True

    def wants(self) -> int:
        """What a reader that must not read past the body (a server: the next request may
        follow) reads next: `LINE`, or up to that many bytes; 0 once the body is complete."""
        if self.complete:
            return 0
        if self.framing == UNTIL_CLOSE:
            return _READ_SIZE
        state = self._state
        if self.framing == FIXED or state == _DATA:
            return min(self._remaining, _READ_SIZE) if self.framing == CHUNKED else self._remaining
        return 2 if state == _DATA_END else LINE

    def eof(self) -> None:
        """The connection ended: completes a body read until the end, else `IncompleteMessage`."""
        if self.framing == UNTIL_CLOSE:
            self.complete = True
        elif not self.complete:
            raise IncompleteMessage("connection closed before the body was complete",
                                    received_any=True)

    def take(self) -> bytes:
        """The body bytes decoded so far and not taken yet (streaming use)."""
        piece = bytes(self.body)
        self.body.clear()
        return piece

    def _take(self, buffer: bytearray) -> bool:
        """Move what has arrived of the `_remaining` bytes; True once all are there."""
        count = min(len(buffer), self._remaining)
        if count:
            if count == len(buffer):
                self._add(buffer)
                buffer.clear()
            else:
                self._add(buffer[:count])
                del buffer[:count]
            self._remaining -= count
        return self._remaining == 0

    def _add(self, data: bytes | bytearray) -> None:
        self.received += len(data)
        if self._limit is not None and self.received > self._limit:
            raise BodyTooLarge(f"body larger than {self._limit} bytes")
        self.body += data


# responses --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    headers: dict[str, str]  # lower-case names; a repeated header's values joined by ", "
    body: bytes
    keep_alive: bool
    raw_fields: bytes = field(default=b"", compare=False, repr=False)  # the header block

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    @property
    def fields(self) -> tuple[tuple[str, str], ...]:
        """Every header as received, repeated names included."""
        return field_items(self.raw_fields)


class ResponseParser:
    """Reads one response; `feed` returns the `Answer` once it is complete, else None.

    `head_request`: the request was HEAD (no body whatever the headers say); `connect_request`:
    it was CONNECT (a 2xx is the tunnel, no body)."""

    def __init__(self, *, head_request: bool = False, connect_request: bool = False) -> None:
        self.head_request = head_request
        self.connect_request = connect_request
        self.received_any = False
        self._buffer = bytearray()
        self._status = 0  # 0 until the head is in
        self._reason = ""
        self._headers: dict[str, str] = {}
        self._keep_alive = False
        self._block = b""
        self._decoder: BodyDecoder | None = None
        self._done = False

    def feed(self, data: bytes) -> Answer | None:
        if data:
            self.received_any = True
            self._buffer += data
        if self._done:
            return None
        if not self._status:
            while True:
                end = self._buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._buffer) > MAX_HEAD_BYTES:
                        raise ProtocolError(f"response head larger than {MAX_HEAD_BYTES} bytes")
                    return None
                head = bytes(self._buffer[:end])
                del self._buffer[:end + 4]
                if self._start(head):
                    break  # else a 1xx: the real answer follows
        decoder = self._decoder
        if decoder is None or decoder.feed(self._buffer):
            self._done = True
            return self._answer()
        return None

    @property
    def head_ready(self) -> bool:
        return self._status != 0

    @property
    def complete(self) -> bool:
        return self._done

    def head(self) -> Answer:
        """The answer so far, without its body (once `head_ready`)."""
        assert self._status
        return Answer(self._status, self._reason, self._headers, b"", self._keep_alive, self._block)

    def take_body(self) -> bytes:
        """The body bytes decoded so far and not yet taken (streaming use)."""
        return self._decoder.take() if self._decoder is not None else b""

    def take_leftover(self) -> bytes:
        """The bytes received after the answer (after a 101: the new protocol's first ones)."""
        piece = bytes(self._buffer)
        self._buffer.clear()
        return piece

    def feed_eof(self) -> Answer:
        """The connection ended: the answer if that completes it, else `IncompleteMessage`."""
        if not self._status:
            raise IncompleteMessage("connection closed before the answer was complete"
                                    if self.received_any else "connection closed without an answer",
                                    received_any=self.received_any)
        if self._decoder is not None and not self._done:
            try:
                self._decoder.eof()
            except IncompleteMessage:
                raise IncompleteMessage("connection closed before the answer was complete",
                                        received_any=True) from None
        self._done = True
        return self._answer()

    @property
    def leftover(self) -> bool:
        """Bytes after the answer: the connection is out of step and must not be reused."""
        return bool(self._buffer)

    def _start(self, head: bytes) -> bool:
        """Read a head; False for a 1xx that another head follows."""
        first, _, block = head.partition(b"\r\n")
        parts = first.split(b" ", 2)
        if len(parts) < 2 or not _VERSION.fullmatch(parts[0]):
            raise ProtocolError(f"not an HTTP/1.x status line: {first[:60]!r}")
        code = parts[1]
        if len(code) != 3 or not code.isdigit():
            raise ProtocolError(f"bad status code {code[:10]!r}")
        status = int(code)
        if 100 <= status < 200 and status != 101:
            return False
        headers = parse_fields(block)
        keep_alive = _keep_alive(parts[0], headers.get("connection", ""))
        decoder: BodyDecoder | None = None
        if (self.head_request or status in (101, 204, 304)
                or (self.connect_request and 200 <= status < 300)):
            pass
        elif "transfer-encoding" in headers:
            if headers["transfer-encoding"].rsplit(",", 1)[-1].strip().lower() == "chunked":
                decoder = BodyDecoder(CHUNKED)
                if "content-length" in headers:
                    keep_alive = False  # RFC 9112 6.3: framing in doubt, do not reuse
            else:  # RFC 9112 6.3: not chunked last, the body runs to the end of the connection
                decoder = BodyDecoder(UNTIL_CLOSE)
                keep_alive = False
        elif "content-length" in headers:
            length = content_length(headers["content-length"])
            if length:
                decoder = BodyDecoder(FIXED, length)
        else:
            decoder = BodyDecoder(UNTIL_CLOSE)
            keep_alive = False
        self._decoder = decoder
        self._status = status
        self._reason = parts[2].decode("latin-1") if len(parts) > 2 else ""
        self._headers = headers
        self._keep_alive = keep_alive
        self._block = block
        return True

    def _answer(self) -> Answer:
        body = bytes(self._decoder.body) if self._decoder is not None else b""
        return Answer(self._status, self._reason, self._headers, body, self._keep_alive, self._block)


# requests (the server side) ---------------------------------------------------------------


class RequestHead(NamedTuple):
    """A request's head, immutable. A NamedTuple rather than a frozen dataclass because a server
    builds one per request: 0.3 us to build against 0.65 us."""

    method: str
    target: str
    version: str
    headers: dict[str, str]  # lower-case names; a repeated header's values joined by ", "
    raw_fields: bytes = b""  # the header block

    def __repr__(self) -> str:  # as the dataclass it was: without the raw block
        return (f"RequestHead(method={self.method!r}, target={self.target!r}, "
                f"version={self.version!r}, headers={self.headers!r})")

    @property
    def fields(self) -> tuple[tuple[str, str], ...]:
        """Every header as received, repeated names included."""
        return field_items(self.raw_fields)

    @property
    def keep_alive(self) -> bool:
        tokens = self.headers.get("connection", "").lower()
        return "close" not in tokens if self.version == "HTTP/1.1" else "keep-alive" in tokens


def parse_request_head(head: bytes) -> RequestHead:
    """A request head, up to (without) the empty line that ends it: `METHOD SP target SP
    HTTP/1.x`, then header fields; anything else is a `ProtocolError` (a server answers 400)."""
    if len(head) > MAX_HEAD_BYTES:
        raise ProtocolError(f"request head larger than {MAX_HEAD_BYTES} bytes")
    first, _, block = head.partition(b"\r\n")
    match = _REQUEST_LINE.fullmatch(first)
    fields = _checked_fields(block) if block else {}
    if match is None or fields is None:
        return _parse_request_head_strictly(head)
    method, target, version = match.groups()
    return RequestHead(method.decode("ascii"), target.decode("ascii"), version.decode("ascii"),
                       fields, block)


def _parse_request_head_strictly(head: bytes) -> RequestHead:
    """`parse_request_head` a step at a time: what its fast path refuses is refused here too,
    with the reason."""
    first, _, block = head.partition(b"\r\n")
    parts = first.split(b" ")
    if (len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not _TARGET.fullmatch(parts[1])
            or not _VERSION.fullmatch(parts[2])):
        raise ProtocolError(f"bad request line {first[:80]!r}")
    return RequestHead(parts[0].decode("ascii"), parts[1].decode("ascii"),
                       parts[2].decode("ascii"), _strict_fields(block) if block else {}, block)


def request_body(head: RequestHead, *, limit: int | None = None) -> BodyDecoder | None:
    """How a request's body is framed, None when it has none. Refuses framings two parties
    could read differently (`ProtocolError`), codings other than chunked (`UnsupportedCoding`)
    and declared lengths over `limit` (`BodyTooLarge`)."""
    coding = head.headers.get("transfer-encoding")
    length = head.headers.get("content-length")
    if coding is not None:
        if length is not None:
            raise ProtocolError("both Transfer-Encoding and Content-Length")
        if coding.strip().lower() != "chunked":
            raise UnsupportedCoding(f"unsupported transfer coding {coding[:40]!r}")
        return BodyDecoder(CHUNKED, limit=limit)
    if length is None:
        return None
    size = content_length(length)
    return BodyDecoder(FIXED, size, limit=limit) if size else None


# what a client writes ----------------------------------------------------------------------


def encode_request(method: str, target: str, host: str, headers: Sequence[tuple[str, str]],
                   body: bytes | None, *, chunked: bool = False) -> bytes:
    """The request head and body. Spaces, control and non-ASCII characters in `target` are
    percent-encoded (UTF-8), so nothing can end the request line early. `chunked`: the body
    follows in `encode_chunk` pieces and `LAST_CHUNK`."""
    target = urllib.parse.quote(target, safe=_TARGET_SAFE)
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers]
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    elif body is not None or method in _BODY_METHODS:
        lines.append(f"Content-Length: {len(body or b'')}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body if body and not chunked else head


def encode_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"


def encode_connect(authority: str, headers: Sequence[tuple[str, str]]) -> bytes:
    """A CONNECT request for `authority` ("host:port", IPv6 in brackets)."""
    lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
    for name, value in headers:
        if not _TOKEN.fullmatch(name.encode("latin-1")) or _BAD_VALUE.search(value.encode("latin-1")):
            raise ValueError(f"bad proxy header {name[:40]!r}")
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
