"""Label and field selectors, as the Kubernetes API server parses and applies them.

Pure: no I/O. The server turns a `SelectorError` into a 400 BadRequest. Grammar, validation
rules and error wording follow `k8s.io/apimachinery/pkg/labels` and `.../fields`, because
clients (kubectl, client-go informers) are written against that behaviour:

- label selectors: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>5`,
  `k<5`, joined with `,` (AND). `!=` and `notin` also match objects that lack the key.
- field selectors: `f=v`, `f==v`, `f!=v`, joined with `,`; `\\`, `\\,` and `\\=` escape.
  Only the fields the type declares selectable are accepted (`selectable_fields`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FieldRequirement",
    "FieldSelector",
    "LabelSelector",
    "Operator",
    "Requirement",
    "SelectorError",
    "field_value",
    "label_selector_from_dict",
    "label_selector_to_string",
    "parse_field_selector",
    "parse_label_selector",
    "selectable_fields",
]


class SelectorError(Exception):
    """A selector that does not parse or names an unsupported field (HTTP 400)."""


class Operator(enum.Enum):
    EQUALS = "="
    DOUBLE_EQUALS = "=="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    GREATER_THAN = "gt"
    LESS_THAN = "lt"


_SET_OPS = (Operator.IN, Operator.NOT_IN)
_EXACT_OPS = (Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.NOT_EQUALS)
_NUMERIC_OPS = (Operator.GREATER_THAN, Operator.LESS_THAN)
_INT64 = re.compile(r"[+-]?[0-9]+")


def _parse_int64(text: str) -> int | None:
    """Go's strconv.ParseInt(s, 10, 64): no spaces, no underscores, 64-bit range."""
    if not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


# ---------------------------------------------------------------------------------------------
# Label key and value syntax (k8s.io/apimachinery/pkg/util/validation)

_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME = re.compile(_QNAME_FMT)
_LABEL_VALUE_FMT = f"({_QNAME_FMT})?"
_LABEL_VALUE = re.compile(_LABEL_VALUE_FMT)
_DNS1123_SUBDOMAIN_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_DNS1123_SUBDOMAIN = re.compile(_DNS1123_SUBDOMAIN_FMT)


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    # The double space in "',  or '" is how upstream words it; clients may match on it.
    shown = "".join(("" if i == 0 else " or ") + f"'{e}', " for i, e in enumerate(examples))
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


_QNAME_MSG = _regex_error(
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character",
    _QNAME_FMT,
    "MyName",
    "my.name",
    "123-abc",
)


def qualified_name_errors(value: str) -> list[str]:
    """Why `value` is not a valid label key (`[prefix/]name`); empty when it is."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) > 2:
        return [
            f"a qualified name {_QNAME_MSG} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + e for e in _dns_subdomain_errors(prefix))
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not _QNAME.fullmatch(name):
        errs.append("name part " + _QNAME_MSG)
    return errs


def _dns_subdomain_errors(value: str) -> list[str]:
    errs: list[str] = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        errs.append(
            _regex_error(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.', and must start and end with an alphanumeric character",
                _DNS1123_SUBDOMAIN_FMT,
                "example.com",
            )
        )
    return errs


def label_value_errors(value: str) -> list[str]:
    """Why `value` is not a valid label value; empty when it is."""
    errs: list[str] = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_VALUE.fullmatch(value):
        errs.append(
            _regex_error(
                "a valid label must be an empty string or consist of alphanumeric characters, "
                "'-', '_' or '.', and must start and end with an alphanumeric character",
                _LABEL_VALUE_FMT,
                "MyValue",
                "my_value",
                "12345",
            )
        )
    return errs


def _go_quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n").replace("\t", "\\t") + '"'


def _invalid(field: str, value: str, errs: Sequence[str]) -> str:
    return f"{field}: Invalid value: {_go_quote(value)}: {'; '.join(errs)}"


# ---------------------------------------------------------------------------------------------
# Label selectors


@dataclass(frozen=True)
class Requirement:
    """One clause of a label selector. `values` is sorted and de-duplicated."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        present = self.key in labels
        if op is Operator.EXISTS:
            return present
        if op is Operator.DOES_NOT_EXIST:
            return not present
        if op in (Operator.NOT_IN, Operator.NOT_EQUALS):
            return not present or labels[self.key] not in self.values
        if not present:
            return False
        if op in _NUMERIC_OPS:
            return self._compare(labels[self.key])
        return labels[self.key] in self.values

    def _compare(self, label: str) -> bool:
        # A label value that is not an integer never matches `>`/`<`, as upstream.
        have = _parse_int64(label)
        want = _parse_int64(self.values[0]) if len(self.values) == 1 else None
        if have is None or want is None:
            return False
        return have > want if self.operator is Operator.GREATER_THAN else have < want

    def __str__(self) -> str:
        op = self.operator
        if op is Operator.EXISTS:
            return self.key
        if op is Operator.DOES_NOT_EXIST:
            return "!" + self.key
        joined = ",".join(self.values)
        if op in _SET_OPS:
            return f"{self.key} {op.value} ({joined})"
        symbol = {Operator.GREATER_THAN: ">", Operator.LESS_THAN: "<"}.get(op, op.value)
        return f"{self.key}{symbol}{joined}"


def _new_requirement(key: str, op: Operator, values: Sequence[str]) -> Requirement:
    """Validate one requirement the way labels.NewRequirement does."""
    errs: list[str] = []
    if key_errs := qualified_name_errors(key):
        errs.append(_invalid("key", key, key_errs))
    shown = "[" + " ".join(values) + "]"  # Go's %v of a []string
    if op in _SET_OPS and not values:
        errs.append(
            f"values: Invalid value: {shown}: for 'in', 'notin' operators, values set can't be empty"
        )
    elif op in _EXACT_OPS and len(values) != 1:
        errs.append(
            f"values: Invalid value: {shown}: exact-match compatibility requires one single value"
        )
    elif op in (Operator.EXISTS, Operator.DOES_NOT_EXIST) and values:
        errs.append(
            f"values: Invalid value: {shown}: values set must be empty for exists and does not exist"
        )
    elif op in _NUMERIC_OPS:
        if len(values) != 1:
            errs.append(
                f"values: Invalid value: {shown}: for 'Gt', 'Lt' operators, "
                "exactly one value is required"
            )
        for i, v in enumerate(values):
            if _parse_int64(v) is None:
                errs.append(
                    f"values[{i}]: Invalid value: {_go_quote(v)}: "
                    "for 'Gt', 'Lt' operators, the value must be an integer"
                )
    for i, v in enumerate(values):
        if value_errs := label_value_errors(v):
            errs.append(_invalid(f"values[{i}][{key}]", v, value_errs))
    if errs:
        raise SelectorError(errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]")
    return Requirement(key, op, tuple(sorted(set(values))))


@dataclass(frozen=True)
class LabelSelector:
    """A conjunction of requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def exact(self, key: str) -> str | None:
        """The single value `key` must have, if the selector pins one (for index lookups)."""
        for r in self.requirements:
            if r.key == key and r.operator in (
                Operator.EQUALS,
                Operator.DOUBLE_EQUALS,
                Operator.IN,
            ):
                return r.values[0] if len(r.values) == 1 else None
        return None

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _selector(requirements: Sequence[Requirement]) -> LabelSelector:
    # Sorted by key (stable) so the string form is canonical, as upstream.
    return LabelSelector(tuple(sorted(requirements, key=lambda r: r.key)))


# Lexer. Tokens are (kind, text); kind is the operator text, "id" or "end".
_SPECIAL = frozenset("=!(),><")
_MULTI = ("!=", "==")
_WHITESPACE = " \t\r\n"


def _lex(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _WHITESPACE:
            i += 1
        if i == n:
            tokens.append(("end", ""))
            return tokens
        if text[i] in _SPECIAL:
            two = text[i : i + 2]
            tok = two if two in _MULTI else text[i]
            tokens.append((tok, tok))
            i += len(tok)
            continue
        start = i
        while i < n and text[i] not in _SPECIAL and text[i] not in _WHITESPACE:
            i += 1
        tokens.append(("id", text[start:i]))


class _LabelParser:
    """Recursive descent over the token list; error texts follow upstream's parser."""

    def __init__(self, text: str) -> None:
        self._tokens = _lex(text)
        self._pos = 0

    def _peek(self) -> tuple[str, str]:
        return self._tokens[self._pos]

    def _next(self) -> tuple[str, str]:
        tok = self._tokens[self._pos]
        self._pos = min(self._pos + 1, len(self._tokens) - 1)
        return tok

    def parse(self) -> list[Requirement]:
        out: list[Requirement] = []
        while True:
            kind, text = self._peek()
            if kind == "end":
                return out
            if kind not in ("id", "!"):
                raise SelectorError(f"found '{text}', expected: !, identifier, or 'end of string'")
            try:
                out.append(self._requirement())
            except SelectorError as exc:
                raise SelectorError(f"unable to parse requirement: {exc}") from None
            kind, text = self._next()
            if kind == "end":
                return out
            if kind != ",":
                raise SelectorError(f"found '{text}', expected: ',' or 'end of string'")
            kind, text = self._peek()
            if kind not in ("id", "!"):
                raise SelectorError(f"found '{text}', expected: identifier after ','")

    def _requirement(self) -> Requirement:
        negated = self._peek()[0] == "!"
        if negated:
            self._next()
        kind, key = self._next()
        if kind != "id":
            raise SelectorError(f"found '{key}', expected: identifier")
        if errs := qualified_name_errors(key):
            raise SelectorError(_invalid("<nil>", key, errs))
        if negated:
            return _new_requirement(key, Operator.DOES_NOT_EXIST, [])
        if self._peek()[0] in ("end", ","):
            return _new_requirement(key, Operator.EXISTS, [])
        op = self._operator()
        values = self._set_values() if op in _SET_OPS else self._exact_value()
        return _new_requirement(key, op, values)

    def _operator(self) -> Operator:
        kind, text = self._next()
        ops = {
            "=": Operator.EQUALS,
            "==": Operator.DOUBLE_EQUALS,
            "!=": Operator.NOT_EQUALS,
            ">": Operator.GREATER_THAN,
            "<": Operator.LESS_THAN,
        }
        if kind == "id" and text in ("in", "notin"):
            return Operator(text)
        if kind in ops:
            return ops[kind]
        raise SelectorError(f"found '{text}', expected: in, notin, =, ==, !=, gt, lt")

    def _exact_value(self) -> list[str]:
        kind, text = self._peek()
        if kind in ("end", ","):
            return [""]  # `k=` selects the empty value
        self._next()
        if kind != "id":
            raise SelectorError(f"found '{text}', expected: identifier")
        return [text]

    def _set_values(self) -> list[str]:
        kind, text = self._next()
        if kind != "(":
            raise SelectorError(f"found '{text}' expected: '('")
        values: list[str] = []
        expect_value = True  # empty items, as in `(a,,b)` or `()`, are the empty string
        while True:
            kind, text = self._next()
            if kind == ")":
                if expect_value:
                    values.append("")
                return values
            if kind == "," and expect_value:
                values.append("")
            elif kind == ",":
                expect_value = True
            elif kind == "id" and expect_value:
                values.append(text)
                expect_value = False
            else:
                expected = "',', ')' or identifier" if expect_value else "',' or ')'"
                raise SelectorError(f"found '{text}', expected: {expected}")


def parse_label_selector(text: str) -> LabelSelector:
    """Parse the `labelSelector` query parameter; raises SelectorError."""
    return _selector(_LabelParser(text).parse())


_DICT_OPS = {
    "In": Operator.IN,
    "NotIn": Operator.NOT_IN,
    "Exists": Operator.EXISTS,
    "DoesNotExist": Operator.DOES_NOT_EXIST,
}


def label_selector_from_dict(sel: Mapping[str, Any] | None) -> LabelSelector:
    """A metav1.LabelSelector (matchLabels + matchExpressions); `{}` matches everything."""
    requirements = [
        _new_requirement(str(k), Operator.EQUALS, [str(v)])
        for k, v in ((sel or {}).get("matchLabels") or {}).items()
    ]
    for expr in (sel or {}).get("matchExpressions") or []:
        op = _DICT_OPS.get(expr.get("operator", ""))
        if op is None:
            raise SelectorError(
                f"{_go_quote(str(expr.get('operator', '')))} is not a valid label selector operator"
            )
        values = [str(v) for v in expr.get("values") or []]
        requirements.append(_new_requirement(str(expr.get("key", "")), op, values))
    return _selector(requirements)


def label_selector_to_string(sel: LabelSelector | Mapping[str, Any] | None) -> str:
    """Canonical string form (keys sorted, set values sorted); "" when it selects everything."""
    if not isinstance(sel, LabelSelector):
        sel = label_selector_from_dict(sel)
    return str(sel)


# ---------------------------------------------------------------------------------------------
# Structured selectors matched directly (no parse step): label selectors as objects carry them,
# and the node selector terms of affinity. Lenient where the API already validated: an
# expression with an unknown operator matches nothing, as Kubernetes and Karmada treat a
# selector that fails to convert.


def matches_requirement(requirement: Any, labels: Mapping[str, str]) -> bool:
    """One `{key, operator, values}` requirement, label- or node-selector form (`Gt`/`Lt`
    compare integers). A missing key matches `NotIn` and `DoesNotExist`."""
    if not isinstance(requirement, Mapping):
        return False
    key = str(requirement.get("key", ""))
    op = requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or []]
    present = key in labels
    if op == "In":
        return present and str(labels[key]) in values
    if op == "NotIn":
        return not present or str(labels[key]) not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def matches_label_selector(selector: Any, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector as an object carries it: `matchLabels` and `matchExpressions`
    ANDed; `{}` matches everything (a missing selector means different things per API, so
    callers decide about None)."""
    sel = selector if isinstance(selector, Mapping) else {}
    for key, value in (sel.get("matchLabels") or {}).items():
        if labels.get(str(key)) != str(value):
            return False
    return all(matches_requirement(expr, labels) for expr in sel.get("matchExpressions") or [])


def matches_node_selector_term(term: Any, node: Mapping[str, Any]) -> bool:
    """One NodeSelectorTerm: every label expression and field (`metadata.name`) holds. A term
    with no requirements matches nothing, as upstream."""
    if not isinstance(term, Mapping):
        return False
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    meta = node.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    node_fields = {"metadata.name": str(meta.get("name", ""))}
    return (all(matches_requirement(r, labels) for r in expressions)
            and all(matches_requirement(r, node_fields) for r in fields))


# ---------------------------------------------------------------------------------------------
# Field selectors


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    value: str
    negated: bool = False

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, self.field) == self.value) != self.negated

    def __str__(self) -> str:
        return f"{self.field}{'!=' if self.negated else '='}{_escape(self.value)}"


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(r.matches(obj) for r in self.requirements)

    def exact(self, field: str) -> str | None:
        """The value `field` must equal, if pinned (e.g. metadata.name for a single GET)."""
        for r in self.requirements:
            if r.field == field and not r.negated:
                return r.value
        return None

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def _split_terms(text: str) -> Iterator[str]:
    """Split on commas that are not backslash-escaped."""
    start, escaped = 0, False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            yield text[start:i]
            start = i + 1
    yield text[start:]


def _unescape(value: str) -> str:
    out: list[str] = []
    escaped = False
    for ch in value:
        if escaped:
            if ch not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in ",=":
            raise SelectorError(f"invalid field selector: unescaped character in value: {ch}")
        else:
            out.append(ch)
    if escaped:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


_TERM = re.compile(r"(.*?)(!=|==|=)(.*)", re.DOTALL)


def parse_field_selector(text: str, allowed: Collection[str]) -> FieldSelector:
    """Parse the `fieldSelector` query parameter against the type's selectable fields."""
    requirements: list[FieldRequirement] = []
    for term in sorted(_split_terms(text)):
        if not term:
            continue
        match = _TERM.fullmatch(term)
        if match is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        field, op, raw = match.group(1).strip(), match.group(2), match.group(3)
        value = _unescape(raw)
        if field not in allowed:
            raise SelectorError(f"field label not supported: {field}")
        requirements.append(FieldRequirement(field, value, negated=op == "!="))
    return FieldSelector(tuple(requirements))


# Per-type selectable fields, from upstream's ToSelectableFields / field label conversions.
_TYPE_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "Pod"): (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    ("", "Event"): (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    ("", "Node"): ("spec.unschedulable",),
    # `name` is an upstream historical alias of metadata.name kept for compatibility.
    ("", "Namespace"): ("status.phase", "name"),
    ("", "Secret"): ("type",),
    ("", "Service"): ("spec.clusterIP", "spec.type"),
    ("", "ReplicationController"): ("status.replicas",),
    ("apps", "ReplicaSet"): ("status.replicas",),
    ("batch", "Job"): ("status.successful",),
    ("certificates.k8s.io", "CertificateSigningRequest"): ("spec.signerName",),
}


def selectable_fields(
    group: str, kind: str, namespaced: bool, extra: Sequence[str] = ()
) -> frozenset[str]:
    """Fields a `fieldSelector` may name for this type; `extra` are CRD selectableFields."""
    fields = {"metadata.name", *_TYPE_FIELDS.get((group, kind), ())}
    if namespaced:
        fields.add("metadata.namespace")
    fields.update(path.strip().lstrip(".") for path in extra)
    return frozenset(fields)


def _event_source(obj: Mapping[str, Any]) -> Any:
    # core/v1 events written through events.k8s.io carry reportingComponent instead.
    return _lookup(obj, "source.component") or obj.get("reportingComponent", "")


def _pod_ip(obj: Mapping[str, Any]) -> Any:
    ips = _lookup(obj, "status.podIPs")
    if isinstance(ips, list) and ips and isinstance(ips[0], Mapping):
        return ips[0].get("ip", "")
    return _lookup(obj, "status.podIP")


# Fields whose value is not simply the value at the dotted path.
_EXTRACTORS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "source": _event_source,
    "status.podIP": _pod_ip,
    "status.successful": lambda obj: _lookup(obj, "status.succeeded"),
    "name": lambda obj: _lookup(obj, "metadata.name"),
}
# Go zero values of non-string fields: an absent `spec.hostNetwork` selects as "false".
_ZERO: dict[str, str] = {
    "spec.hostNetwork": "false",
    "spec.unschedulable": "false",
    "status.replicas": "0",
    "status.successful": "0",
}


def _lookup(obj: Mapping[str, Any], path: str) -> Any:
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def field_value(obj: Mapping[str, Any], field: str) -> str:
    """The string a field selector compares: bools as true/false, missing as ""."""
    extract = _EXTRACTORS.get(field)
    value = extract(obj) if extract else _lookup(obj, field)
    if value is None or value == "":
        return _ZERO.get(field, "")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
