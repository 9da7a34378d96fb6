"""The Kubernetes JSONPath subset that CRD printer columns and selectable fields use.

Pure: no I/O. Supported, with or without surrounding `{...}`:

- `.a.b`, `$.a`, `.a\\.b` (escaped dot), `['key.with.dots']`, `["k"]`, `['a','b']`
- `.a[0]`, `.a[-1]`, `.a[1:3]`, `.a[::2]`, `.a[0,2]`, `.a[*]`, `.a.*`, `..name` (recursive)
- filters `[?(@.type=="Ready")]` with `== != < > <= >=` against string, number or boolean
  literals or another `@`/`$` path, and existence filters `[?(@.name)]`

Like the server (which sets AllowMissingKeys), missing keys and out-of-range indexes give
no result instead of an error; only a malformed expression raises `JsonPathError`.
"""

from __future__ import annotations

import decimal
import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["JsonPath", "JsonPathError", "compile_path", "evaluate", "to_text"]


class JsonPathError(ValueError):
    """The expression is not valid JSONPath."""


@dataclass(frozen=True)
class _Field:
    name: str


@dataclass(frozen=True)
class _Wildcard:
    pass


@dataclass(frozen=True)
class _Recursive:
    name: str | None  # None: every descendant (`..*`)


@dataclass(frozen=True)
class _Indexes:
    indexes: tuple[int, ...]


@dataclass(frozen=True)
class _Slice:
    start: int | None
    stop: int | None
    step: int | None


@dataclass(frozen=True)
class _Keys:
    keys: tuple[str, ...]


@dataclass(frozen=True)
class _Literal:
    value: Any


@dataclass(frozen=True)
class _SubPath:
    relative: bool  # `@` (the current item) rather than `$` (the document root)
    steps: tuple[_Step, ...]


@dataclass(frozen=True)
class _Filter:
    left: _SubPath | _Literal
    op: str | None  # None: existence test on `left`
    right: _SubPath | _Literal | None


_Step = _Field | _Wildcard | _Recursive | _Indexes | _Slice | _Keys | _Filter

_TERMINATORS = frozenset(" .,[]$@{}()")
_COMPARATORS = ("==", "!=", "<=", ">=", "<", ">")
_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def error(self, what: str) -> JsonPathError:
        return JsonPathError(f"{what} at position {self.pos} in {self.text!r}")

    def peek(self, n: int = 1) -> str:
        return self.text[self.pos : self.pos + n]

    def steps(self, *, stop: str = "") -> tuple[_Step, ...]:
        """Parse steps until the end of text or a character in `stop`."""
        out: list[_Step] = []
        while self.pos < len(self.text) and self.peek() not in stop:
            ch = self.peek()
            if ch == ".":
                self.pos += 1
                out.extend(self._dotted())
            elif ch == "[":
                out.append(self._bracket())
            elif ch.isspace():
                raise self.error("unexpected space")
            elif not out and ch not in _TERMINATORS:
                out.append(_Field(self._name()))  # lenient: `metadata.name` without a dot
            else:
                raise self.error(f"unrecognized character {ch!r}")
        return tuple(out)

    def _dotted(self) -> list[_Step]:
        if self.peek() == ".":
            self.pos += 1
            if self.peek() == "*":
                self.pos += 1
                return [_Recursive(None)]
            if self.peek() == "[":
                return [_Recursive(None), self._bracket()]
            return [_Recursive(self._name())]
        if self.peek() == "*":
            self.pos += 1
            return [_Wildcard()]
        if self.pos == len(self.text) or self.peek() in _TERMINATORS:
            return []  # a bare `.` is the current node
        return [_Field(self._name())]

    def _name(self) -> str:
        chars: list[str] = []
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == "\\" and self.pos + 1 < len(self.text):
                chars.append(self.text[self.pos + 1])
                self.pos += 2
                continue
            if ch in _TERMINATORS:
                break
            chars.append(ch)
            self.pos += 1
        if not chars:
            raise self.error("expected a field name")
        return "".join(chars)

    def _bracket(self) -> _Step:
        self.pos += 1  # "["
        end = self._closing("[", "]")
        body = self.text[self.pos : end].strip()
        self.pos = end + 1
        if body == "*":
            return _Wildcard()
        if body.startswith("?"):
            return self._filter(body[1:].strip())
        if body[:1] in ("'", '"'):
            return _Keys(tuple(str(_quoted(part.strip(), self)) for part in _split(body, ",")))
        if ":" in body:
            return self._slice(body)
        try:
            return _Indexes(tuple(int(part) for part in body.split(",")))
        except ValueError:
            raise self.error(f"invalid array index {body!r}") from None

    def _closing(self, opening: str, closing: str) -> int:
        """Index of the bracket that closes the one just consumed, skipping quoted text."""
        depth, i, quote = 1, self.pos, ""
        while i < len(self.text):
            ch = self.text[i]
            if quote:
                if ch == "\\":
                    i += 1
                elif ch == quote:
                    quote = ""
            elif ch in "'\"":
                quote = ch
            elif ch == opening:
                depth += 1
            elif ch == closing:
                depth -= 1
                if depth == 0:
                    return i
            i += 1
        raise self.error(f"unclosed {opening!r}")

    def _slice(self, body: str) -> _Slice:
        parts = body.split(":")
        if len(parts) > 3:
            raise self.error(f"invalid slice {body!r}")
        try:
            bounds = [int(p) if p.strip() else None for p in parts] + [None]
        except ValueError:
            raise self.error(f"invalid slice {body!r}") from None
        if bounds[2] == 0:
            raise self.error("slice step cannot be 0")
        return _Slice(bounds[0], bounds[1], bounds[2])

    def _filter(self, body: str) -> _Filter:
        if not (body.startswith("(") and body.endswith(")")):
            raise JsonPathError(f"invalid filter {body!r} in {self.text!r}")
        inner = body[1:-1].strip()
        at = _find_comparator(inner)
        if at is None:
            return _Filter(_operand(inner, self.text), None, None)
        index, op = at
        left = _operand(inner[:index].strip(), self.text)
        right = _operand(inner[index + len(op) :].strip(), self.text)
        return _Filter(left, op, right)


def _split(text: str, sep: str) -> list[str]:
    """Split on `sep` outside quotes."""
    parts: list[str] = []
    current: list[str] = []
    quote = ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == sep:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    return parts


def _quoted(text: str, parser: _Parser) -> str:
    if len(text) < 2 or text[0] != text[-1] or text[0] not in "'\"":
        raise parser.error(f"invalid quoted key {text!r}")
    return re.sub(r"\\(.)", r"\1", text[1:-1])


def _find_comparator(text: str) -> tuple[int, str] | None:
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        else:
            for op in _COMPARATORS:
                if text.startswith(op, i):
                    return i, op
    return None


def _operand(text: str, whole: str) -> _SubPath | _Literal:
    if text[:1] in ("@", "$"):
        return _SubPath(text[0] == "@", _Parser(text[1:]).steps())
    if text[:1] in ("'", '"') and len(text) >= 2 and text[-1] == text[0]:
        return _Literal(text[1:-1])
    if text in ("true", "false"):
        return _Literal(text == "true")
    if _NUMBER.fullmatch(text):
        return _Literal(json.loads(text))
    raise JsonPathError(f"unrecognized filter operand {text!r} in {whole!r}")


@dataclass(frozen=True)
class JsonPath:
    """A compiled expression; `find(obj)` returns every match, in document order."""

    text: str
    steps: tuple[_Step, ...]

    def find(self, obj: Any) -> list[Any]:
        return _walk(self.steps, [obj], obj)


@functools.lru_cache(maxsize=512)
def compile_path(expr: str) -> JsonPath:
    text = expr.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if text.startswith("$"):
        text = text[1:]
    return JsonPath(expr, _Parser(text).steps())


def evaluate(expr: str, obj: Any) -> list[Any]:
    """All values `expr` selects in `obj`; [] when nothing matches."""
    return compile_path(expr).find(obj)


def _walk(steps: Sequence[_Step], nodes: list[Any], root: Any) -> list[Any]:
    for step in steps:
        nodes = [out for node in nodes for out in _apply(step, node, root)]
    return nodes


def _children(node: Any) -> list[Any]:
    if isinstance(node, Mapping):
        return [node[k] for k in sorted(node)]
    if isinstance(node, list):
        return list(node)
    return []


def _descendants(node: Any) -> list[Any]:
    out = []
    for child in _children(node):
        out.append(child)
        out.extend(_descendants(child))
    return out


def _apply(step: _Step, node: Any, root: Any) -> list[Any]:
    if isinstance(step, _Field):
        return [node[step.name]] if isinstance(node, Mapping) and step.name in node else []
    if isinstance(step, _Keys):
        if not isinstance(node, Mapping):
            return []
        return [node[k] for k in step.keys if k in node]
    if isinstance(step, _Wildcard):
        return _children(node)
    if isinstance(step, _Recursive):
        if step.name is None:
            return _descendants(node)
        pool = [node, *_descendants(node)]
        return [n[step.name] for n in pool if isinstance(n, Mapping) and step.name in n]
    if not isinstance(node, list):
        return []
    if isinstance(step, _Indexes):
        return [node[i] for i in step.indexes if -len(node) <= i < len(node)]
    if isinstance(step, _Slice):
        return node[step.start : step.stop : step.step]
    return [item for item in node if _keep(step, item, root)]


def _operand_values(operand: _SubPath | _Literal, item: Any, root: Any) -> list[Any]:
    if isinstance(operand, _Literal):
        return [operand.value]
    return _walk(operand.steps, [item if operand.relative else root], root)


def _keep(step: _Filter, item: Any, root: Any) -> bool:
    left = _operand_values(step.left, item, root)
    if step.op is None or step.right is None:
        return bool(left)
    right = _operand_values(step.right, item, root)
    return bool(left and right) and _compare(left[0], step.op, right[0])


def _compare(a: Any, op: str, b: Any) -> bool:
    numeric = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        comparable = isinstance(a, bool) and isinstance(b, bool)
    elif isinstance(a, numeric) and isinstance(b, numeric):
        comparable = True
    else:
        comparable = isinstance(a, str) and isinstance(b, str)
    if not comparable:
        return op == "!="  # values of different types are simply unequal
    if op == "==":
        return bool(a == b)
    if op == "!=":
        return bool(a != b)
    if isinstance(a, bool):
        return False
    ordering = {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}
    return bool(ordering[op])


def to_text(value: Any) -> str:
    """A value as the Go JSONPath printer writes it (and as `%v` prints a number).

    Strings print raw, numbers the way Go's `%v` does (`3`, `1.5`, `1e+06`), booleans as
    `true`/`false`, and objects or arrays as compact JSON with Go's HTML escaping.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if value is None:
        return "<nil>"
    text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _go_float(value: float) -> str:
    """Go's `%v` for float64: shortest digits, exponent form outside 1e-4 <= |x| < 1e6."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    sign, digits, exponent = decimal.Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits)).rstrip("0") or "0"
    point = len(digits) + exponent  # position of the decimal point within `digits`
    prefix = "-" if sign else ""
    if value == 0:
        return prefix + "0"
    exp = point - 1
    if exp < -4 or exp >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{prefix}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if point <= 0:
        return f"{prefix}0.{'0' * -point}{text}"
    if point >= len(text):
        return prefix + text + "0" * (point - len(text))
    return f"{prefix}{text[:point]}.{text[point:]}"
