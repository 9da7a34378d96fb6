"""Field errors worded as kube-apiserver words them (apimachinery's `field.Error`), and the
name and value rules (`IsDNS1123Label`, `IsQualifiedName`, ...) with their messages.

A cause's message is the error's body: its type ("Required value", "Invalid value: <value>",
...) and detail; the field path is separate, as in `details.causes` of the 422 Status.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from tether.local.errors import Cause

OMIT = object()  # a value the message leaves out (field.OmitValueType)

DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT = DNS1123_LABEL_FMT + "(\\." + DNS1123_LABEL_FMT + ")*"
DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE_FMT = "(" + QUALIFIED_NAME_FMT + ")?"
CONFIG_KEY_FMT = "[-._a-zA-Z0-9]+"
_DNS1123_LABEL = re.compile(f"^{DNS1123_LABEL_FMT}\\Z")
_DNS1123_SUBDOMAIN = re.compile(f"^{DNS1123_SUBDOMAIN_FMT}\\Z")
_DNS1035_LABEL = re.compile(f"^{DNS1035_LABEL_FMT}\\Z")
_QUALIFIED_NAME = re.compile(f"^{QUALIFIED_NAME_FMT}\\Z")
_LABEL_VALUE = re.compile(f"^{LABEL_VALUE_FMT}\\Z")
_CONFIG_KEY = re.compile(f"^{CONFIG_KEY_FMT}\\Z")
_PORT_NAME_CHARS = re.compile("^[-a-z0-9]+\\Z")
_HAS_LETTER = re.compile("[a-z]")
_WILDCARD_SUBDOMAIN = re.compile(r"^\*\." + DNS1123_SUBDOMAIN_FMT + "\\Z")
WILDCARD_SUBDOMAIN_FMT = "\\*\\." + DNS1123_SUBDOMAIN_FMT


def mapping(value: Any) -> dict[str, Any]:
    """`value` if it is an object, else an empty one (bad shapes are reported elsewhere)."""
    return value if isinstance(value, dict) else {}


def go_quote(text: str) -> str:
    """Go's %q for the strings that occur in manifests."""
    return json.dumps(text, ensure_ascii=False)


def go_value(value: Any) -> str:
    """A bad value as the Go validators print it (%v for simple values, %q for strings, %#v for
    maps of strings)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        inner = ", ".join(f"{go_quote(str(k))}:{go_quote(v)}" for k, v in sorted(value.items()))
        return f"map[string]string{{{inner}}}"
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "[]string{" + ", ".join(go_quote(v) for v in value) + "}"
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _body(kind: str, detail: str) -> str:
    return f"{kind}: {detail}" if detail else kind


def required(path: str, detail: str = "") -> Cause:
    return Cause("FieldValueRequired", _body("Required value", detail), path)


def forbidden(path: str, detail: str = "") -> Cause:
    return Cause("FieldValueForbidden", _body("Forbidden", detail), path)


def invalid(path: str, value: Any, detail: str = "", *, rendered: str | None = None) -> Cause:
    """`rendered` replaces the printed value (for Go structs, printed with their type)."""
    if value is OMIT:
        return Cause("FieldValueInvalid", _body("Invalid value", detail), path)
    shown = rendered if rendered is not None else go_value(value)
    return Cause("FieldValueInvalid", _body(f"Invalid value: {shown}", detail), path)


def not_supported(path: str, value: Any, supported: Iterable[str]) -> Cause:
    options = ", ".join(go_quote(s) for s in supported)
    detail = f"supported values: {options}" if options else ""
    return Cause("FieldValueNotSupported", _body(f"Unsupported value: {go_value(value)}", detail), path)


def duplicate(path: str, value: Any, *, rendered: str | None = None) -> Cause:
    return Cause("FieldValueDuplicate", f"Duplicate value: {rendered if rendered is not None else go_value(value)}",
                 path)


def not_found(path: str, value: Any) -> Cause:
    return Cause("FieldValueNotFound", f"Not found: {go_value(value)}", path)


def too_long(path: str, limit: int) -> Cause:
    return Cause("FieldValueTooLong", f"Too long: may not be more than {limit} bytes", path)


def type_invalid(path: str, detail: str) -> Cause:
    return Cause("FieldValueTypeInvalid", detail, path)


def immutable(path: str, value: Any, *, rendered: str | None = None) -> Cause:
    return invalid(path, value, "field is immutable", rendered=rendered)


def nonnegative(path: str, value: Any) -> list[Cause]:
    """ValidateNonnegativeField; a value that is no integer cannot be decoded upstream (a 4xx
    either way), here a type error naming the field."""
    if value is None:
        return []
    if not isinstance(value, int) or isinstance(value, bool):
        return [type_invalid(path, f"Invalid value: {go_quote(str(value))}: {path} in body must be of type integer")]
    if value < 0:
        return [invalid(path, value, "must be greater than or equal to 0")]
    return []


# the name and value rules ------------------------------------------------------------------


def regex_error(message: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


def max_len(limit: int) -> str:
    return f"must be no more than {limit} characters"


@functools.lru_cache(maxsize=4096)  # keys and names repeat across writes
def dns1123_label(value: str) -> tuple[str, ...]:
    errors = []
    if len(value) > 63:
        errors.append(max_len(63))
    if not _DNS1123_LABEL.match(value):
        errors.append(regex_error("a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
                                  "or '-', and must start and end with an alphanumeric character",
                                  DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return tuple(errors)


@functools.lru_cache(maxsize=4096)  # keys and names repeat across writes
def dns1123_subdomain(value: str) -> tuple[str, ...]:
    errors = []
    if len(value) > 253:
        errors.append(max_len(253))
    if not _DNS1123_SUBDOMAIN.match(value):
        errors.append(regex_error("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                                  "characters, '-' or '.', and must start and end with an alphanumeric character",
                                  DNS1123_SUBDOMAIN_FMT, "example.com"))
    return tuple(errors)


@functools.lru_cache(maxsize=4096)  # keys and names repeat across writes
def dns1035_label(value: str) -> tuple[str, ...]:
    errors = []
    if len(value) > 63:
        errors.append(max_len(63))
    if not _DNS1035_LABEL.match(value):
        errors.append(regex_error("a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
                                  "start with an alphabetic character, and end with an alphanumeric character",
                                  DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return tuple(errors)


def wildcard_dns1123_subdomain(value: str) -> tuple[str, ...]:
    errors = []
    if len(value) > 253:
        errors.append(max_len(253))
    if not _WILDCARD_SUBDOMAIN.match(value):
        errors.append(regex_error("a wildcard DNS-1123 subdomain must start with '*.', followed by a valid "
                                  "DNS subdomain, which must consist of lower case alphanumeric characters, '-' "
                                  "or '.' and end with an alphanumeric character", WILDCARD_SUBDOMAIN_FMT,
                                  "*.example.com"))
    return tuple(errors)


QUALIFIED_NAME_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                      "alphanumeric character")


@functools.lru_cache(maxsize=4096)  # keys and names repeat across writes
def qualified_name(value: str) -> tuple[str, ...]:
    errors: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors += [f"prefix part {msg}" for msg in dns1123_subdomain(prefix)]
    else:
        return ("a qualified name " + regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name",
                                                  "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",)
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part " + max_len(63))
    if not _QUALIFIED_NAME.match(name):
        errors.append("name part " + regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name",
                                                 "123-abc"))
    return tuple(errors)


@functools.lru_cache(maxsize=4096)  # keys and names repeat across writes
def label_value(value: str) -> tuple[str, ...]:
    errors = []
    if len(value) > 63:
        errors.append(max_len(63))
    if not _LABEL_VALUE.match(value):
        errors.append(regex_error("a valid label must be an empty string or consist of alphanumeric characters, "
                                  "'-', '_' or '.', and must start and end with an alphanumeric character",
                                  LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return tuple(errors)


@functools.lru_cache(maxsize=4096)  # keys and names repeat across writes
def config_key(value: str) -> tuple[str, ...]:
    errors = []
    if len(value) > 253:
        errors.append(max_len(253))
    if not _CONFIG_KEY.match(value):
        errors.append(regex_error("a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
                                  CONFIG_KEY_FMT, "key.name", "KEY_NAME", "key-name"))
    if value == ".":
        errors.append("must not be '.'")
    elif value == "..":
        errors.append("must not be '..'")
    elif value.startswith(".."):
        errors.append("must not start with '..'")
    return tuple(errors)


def port_number(value: Any) -> list[str]:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        return ["must be between 1 and 65535, inclusive"]
    return []


@functools.lru_cache(maxsize=4096)  # keys and names repeat across writes
def port_name(value: str) -> tuple[str, ...]:
    errors = []
    if len(value) > 15:
        errors.append(max_len(15))
    if not _PORT_NAME_CHARS.match(value):
        errors.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not _HAS_LETTER.search(value):
        errors.append("must contain at least one letter (a-z)")
    if "--" in value:
        errors.append("must not contain consecutive hyphens")
    if value.startswith("-") or value.endswith("-"):
        errors.append("must not begin or end with a hyphen")
    return tuple(errors)


def is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def each(path: str, value: str, messages: Sequence[str]) -> list[Cause]:
    return [invalid(path, value, msg) for msg in messages]


def labels(values: Any, path: str) -> list[Cause]:
    """ValidateLabels: keys are qualified names, values label values (sorted: Go's map order is
    random, a stable order is kinder). Every write checks its labels: the common case, all
    valid, costs one cached lookup per key and one match per value."""
    if not isinstance(values, dict):
        return []
    if all(not qualified_name(str(k)) and (not isinstance(v, str) or not label_value(v)) for k, v in values.items()):
        return []
    causes: list[Cause] = []
    for key in sorted(values, key=str):
        causes += each(path, str(key), qualified_name(str(key)))
        value = values[key]
        if isinstance(value, str):
            causes += each(path, value, label_value(value))
    return causes
