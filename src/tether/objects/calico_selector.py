"""Calico's label selector language (the `nodeSelector` of an IPPool), parsed and evaluated.

Grammar, as libcalico-go's selector parser accepts it (precedence: `!` over `&&` over `||`):

    expr   := or
    or     := and ("||" and)*
    and    := unary ("&&" unary)*
    unary  := "!" unary | "(" expr ")" | term
    term   := "all()" | "global()" | "has(" key ")"
            | key ("==" | "!=") string
            | key ("in" | "not in") "{" [string ("," string)*] "}"
            | key ("contains" | "starts with" | "ends with") string

Strings take single or double quotes. An empty selector means `all()`, as in Calico. Note the
Calico semantics of negative comparisons: `k != "v"` and `k not in {...}` also match objects
that have no label `k` at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeAlias


class SelectorError(ValueError):
    """The selector text is not valid Calico selector syntax."""


@dataclass(frozen=True)
class All:
    def matches(self, labels: Mapping[str, str]) -> bool:
        return True


@dataclass(frozen=True)
class Has:
    key: str

    def matches(self, labels: Mapping[str, str]) -> bool:
        return self.key in labels


@dataclass(frozen=True)
class Compare:
    key: str
    op: str  # == != contains starts-with ends-with
    value: str

    def matches(self, labels: Mapping[str, str]) -> bool:
        actual = labels.get(self.key)
        if self.op == "!=":
            return actual != self.value
        if actual is None:
            return False
        if self.op == "==":
            return actual == self.value
        if self.op == "contains":
            return self.value in actual
        if self.op == "starts-with":
            return actual.startswith(self.value)
        return actual.endswith(self.value)


@dataclass(frozen=True)
class In:
    key: str
    values: frozenset[str]
    negated: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        found = labels.get(self.key) in self.values if self.key in labels else False
        return not found if self.negated else found


@dataclass(frozen=True)
class Not:
    inner: Selector

    def matches(self, labels: Mapping[str, str]) -> bool:
        return not self.inner.matches(labels)


@dataclass(frozen=True)
class And:
    parts: tuple[Selector, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(p.matches(labels) for p in self.parts)


@dataclass(frozen=True)
class Or:
    parts: tuple[Selector, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return any(p.matches(labels) for p in self.parts)


Selector: TypeAlias = All | Has | Compare | In | Not | And | Or

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<str>"[^"]*"|'[^']*')
      | (?P<op>==|!=|&&|\|\||[!(){},])
      | (?P<word>[A-Za-z0-9_./\-]+)
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Tok:
    kind: str  # str | op | word
    text: str
    pos: int


def _tokens(text: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise SelectorError(f"unexpected character {text[pos:].lstrip()[:1]!r} at {pos} in {text!r}")
        kind = m.lastgroup or ""
        value = m.group(kind)
        out.append(_Tok(kind, value[1:-1] if kind == "str" else value, m.start(kind)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def peek(self, offset: int = 0) -> _Tok | None:
        j = self.i + offset
        return self.toks[j] if j < len(self.toks) else None

    def fail(self, wanted: str) -> SelectorError:
        tok = self.peek()
        where = f"{tok.text!r} at {tok.pos}" if tok else "end of input"
        return SelectorError(f"expected {wanted} but found {where} in selector {self.text!r}")

    def take(self, kind: str, text: str | None = None) -> _Tok:
        tok = self.peek()
        if tok is None or tok.kind != kind or (text is not None and tok.text != text):
            raise self.fail(repr(text) if text else kind)
        self.i += 1
        return tok

    def accept(self, kind: str, text: str) -> bool:
        tok = self.peek()
        if tok is not None and tok.kind == kind and tok.text == text:
            self.i += 1
            return True
        return False

    def parse(self) -> Selector:
        if not self.toks:
            return All()
        result = self.or_()
        if self.peek() is not None:
            raise self.fail("'&&', '||' or the end")
        return result

    def or_(self) -> Selector:
        parts = [self.and_()]
        while self.accept("op", "||"):
            parts.append(self.and_())
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def and_(self) -> Selector:
        parts = [self.unary()]
        while self.accept("op", "&&"):
            parts.append(self.unary())
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def unary(self) -> Selector:
        if self.accept("op", "!"):
            return Not(self.unary())
        if self.accept("op", "("):
            inner = self.or_()
            self.take("op", ")")
            return inner
        return self.term()

    def term(self) -> Selector:
        word = self.take("word").text
        nxt = self.peek()
        if word in ("all", "global", "has") and nxt is not None and nxt.text == "(" and nxt.kind == "op":
            self.i += 1
            if word == "has":
                key = self.take("word").text
                self.take("op", ")")
                return Has(key)
            self.take("op", ")")
            # global() selects non-namespaced objects, which nodes are.
            return All()
        return self.comparison(word)

    def comparison(self, key: str) -> Selector:
        tok = self.peek()
        if tok is None:
            raise self.fail("an operator")
        if tok.kind == "op" and tok.text in ("==", "!="):
            self.i += 1
            return Compare(key, tok.text, self.take("str").text)
        if tok.kind == "word":
            if tok.text == "in":
                self.i += 1
                return In(key, self.value_set())
            if tok.text == "not":
                self.i += 1
                self.take("word", "in")
                return In(key, self.value_set(), negated=True)
            if tok.text == "contains":
                self.i += 1
                return Compare(key, "contains", self.take("str").text)
            if tok.text in ("starts", "ends"):
                self.i += 1
                self.take("word", "with")
                return Compare(key, f"{tok.text}-with", self.take("str").text)
        raise self.fail("an operator (==, !=, in, not in, contains, starts with, ends with)")

    def value_set(self) -> frozenset[str]:
        self.take("op", "{")
        values: set[str] = set()
        if self.accept("op", "}"):
            return frozenset()
        values.add(self.take("str").text)
        while self.accept("op", ","):
            values.add(self.take("str").text)
        self.take("op", "}")
        return frozenset(values)


def parse(text: str) -> Selector:
    """Parse a Calico selector; raises SelectorError with the position of the problem."""
    return _Parser(text).parse()


def matches(text: str, labels: Mapping[str, str]) -> bool:
    return parse(text).matches(labels)
