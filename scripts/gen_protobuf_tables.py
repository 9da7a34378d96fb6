#!/usr/bin/env python3
"""Generate `src/tether/local/protobuf_tables.py` from Kubernetes' `generated.proto` files.

`tether.local.protobuf` decodes the protobuf bodies kubectl sends. It needs, for every message
reachable from the kinds it accepts, each field's number, wire type, JSON name and two Go facts
the `.proto` does not carry: whether a zero scalar is a real value (`keep_zero`: a Go pointer, or
a field without `omitempty`) and whether the field is an embedded struct that JSON flattens
(`inline`). This script reads both from an upstream checkout, fetched at development time:

    git clone --depth 1 --branch v0.37.0 https://github.com/kubernetes/api /tmp/k8s-api
    git clone --depth 1 --branch v0.37.0 https://github.com/kubernetes/apimachinery \\
        /tmp/k8s-apimachinery
    python scripts/gen_protobuf_tables.py /tmp/k8s-api /tmp/k8s-apimachinery
    ruff check src && mypy && pytest -q tests/unit/test_protobuf*.py

Then commit the regenerated module; nothing from the checkout is committed and CI never
regenerates. `--check` compares instead of writing (exit status 1 on a difference).

Where the facts come from:
- field numbers, proto types, `repeated` and `map<>`: the `generated.proto` files;
- JSON names, `omitempty`, Go pointers and embedded structs: the struct tags in the same
  package's Go files (`json:"replicas,omitempty" protobuf:"varint,1,opt,name=replicas"`),
  matched to the `.proto` field by number;
- messages with a JSON form that is not an object (a Go type with its own `MarshalJSON`, such as
  `metav1.Time` or `resource.Quantity`, or a named slice such as `ExtraValue`) are not expanded:
  the tables reference them and `protobuf.py` decodes them by hand. The generated module lists
  them in `SPECIAL_MESSAGES` so a test can check every one has a decoder.

Message names are Go-style qualified (`corev1.Pod`, `metav1.ObjectMeta`, `intstr.IntOrString`)
so that same-named messages of different packages never collide.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUTPUT = REPO / "src" / "tether" / "local" / "protobuf_tables.py"
EXPECTED_TAG_PREFIX = "v0.37."

# Kinds the decoder accepts: (API group, k8s.io/api package directory, kind). Add a kind here and
# regenerate; the decoder needs no other change unless a new special message shows up.
ROOTS: tuple[tuple[str, str, str], ...] = (
    ("", "core/v1", "Namespace"),
    ("", "core/v1", "ConfigMap"),
    ("", "core/v1", "Secret"),
    ("", "core/v1", "ServiceAccount"),
    ("", "core/v1", "Service"),
    ("", "core/v1", "ResourceQuota"),
    ("", "core/v1", "Pod"),
    ("", "core/v1", "Binding"),
    ("apps", "apps/v1", "Deployment"),
    ("autoscaling", "autoscaling/v1", "Scale"),
    ("batch", "batch/v1", "Job"),
    ("batch", "batch/v1", "CronJob"),
    ("rbac.authorization.k8s.io", "rbac/v1", "Role"),
    ("rbac.authorization.k8s.io", "rbac/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io", "rbac/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io", "rbac/v1", "ClusterRoleBinding"),
    ("networking.k8s.io", "networking/v1", "Ingress"),
    ("policy", "policy/v1", "PodDisruptionBudget"),
    ("policy", "policy/v1", "Eviction"),
    ("scheduling.k8s.io", "scheduling/v1", "PriorityClass"),
    ("authentication.k8s.io", "authentication/v1", "TokenRequest"),
    ("authentication.k8s.io", "authentication/v1", "TokenReview"),
    ("authentication.k8s.io", "authentication/v1", "SelfSubjectReview"),
    ("authorization.k8s.io", "authorization/v1", "SelfSubjectAccessReview"),
    ("authorization.k8s.io", "authorization/v1", "SelfSubjectRulesReview"),
)

# Kinds registered in every group (and as meta.k8s.io/v1): kind -> apimachinery message.
ANY_GROUP_ROOTS: tuple[tuple[str, str], ...] = (("DeleteOptions", "metav1.DeleteOptions"),)

# apimachinery packages the k8s.io/api protos import: directory -> Go-style qualifier.
APIMACHINERY_PACKAGES: dict[str, str] = {
    "pkg/apis/meta/v1": "metav1",
    "pkg/api/resource": "resource",
    "pkg/util/intstr": "intstr",
    "pkg/runtime": "runtime",
    "pkg/runtime/schema": "schema",
}

# proto scalar type -> the decoder's scalar name (k8s protos use no other scalars).
SCALARS: dict[str, str] = {
    "string": "STRING",
    "bytes": "BYTES",
    "int32": "INT",
    "int64": "INT",
    "bool": "BOOL",
}
PROTO_SCALARS = frozenset(
    {"double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32",
     "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes"}
)  # fmt: skip
# Map values the decoder reads (keys are always strings in Kubernetes' protos).
MAP_SCALAR_VALUES = frozenset({"STRING", "BYTES"})


class GenerationError(Exception):
    """The checkout does not look like what this script understands."""


# ---------------------------------------------------------------------------------------
# generated.proto
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProtoField:
    name: str
    number: int
    type: str  # a proto scalar, or a qualified message name after resolution
    repeated: bool = False
    is_map: bool = False


@dataclass(frozen=True)
class ProtoPackage:
    name: str  # e.g. k8s.io.api.core.v1
    messages: dict[str, list[ProtoField]]


# One pattern, so whichever comment starts first wins (`/*` inside `//` and `//` inside `/* */`).
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_PACKAGE = re.compile(r"^\s*package\s+([\w.]+)\s*;", re.MULTILINE)
_MESSAGE = re.compile(r"\bmessage\s+(\w+)\s*\{([^{}]*)\}")
_FIELD = re.compile(r"^(optional|repeated)\s+([\w.]+)\s+(\w+)\s*=\s*(\d+)$")
_MAP_FIELD = re.compile(r"^map\s*<\s*(\w+)\s*,\s*([\w.]+)\s*>\s+(\w+)\s*=\s*(\d+)$")


def parse_proto(text: str, where: str) -> ProtoPackage:
    """Parse the proto2 subset go-to-protobuf writes: flat messages of plain fields."""
    text = _COMMENT.sub("", text)
    package = _PACKAGE.search(text)
    if package is None:
        raise GenerationError(f"{where}: no package statement")
    messages: dict[str, list[ProtoField]] = {}
    for match in _MESSAGE.finditer(text):
        name, body = match.group(1), match.group(2)
        statements = [statement.strip() for statement in body.split(";")]
        messages[name] = [_parse_field(st, f"{where}: {name}") for st in statements if st]
    leftover = _MESSAGE.sub("", text)
    if "{" in leftover or "}" in leftover:
        raise GenerationError(f"{where}: nested or unknown blocks (enum, oneof, service?)")
    return ProtoPackage(package.group(1), messages)


def _parse_field(statement: str, where: str) -> ProtoField:
    plain = _FIELD.match(statement)
    if plain:
        label, type_, name, number = plain.groups()
        return ProtoField(name, int(number), type_, repeated=label == "repeated")
    mapped = _MAP_FIELD.match(statement)
    if mapped:
        key, value, name, number = mapped.groups()
        if key != "string":
            raise GenerationError(f"{where}.{name}: map key {key}, the decoder reads strings")
        return ProtoField(name, int(number), value, is_map=True)
    raise GenerationError(f"{where}: cannot parse {statement!r}")


# ---------------------------------------------------------------------------------------
# Go struct tags
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GoField:
    proto_name: str
    go_type: str
    json_name: str
    json_options: frozenset[str]
    embedded: bool


@dataclass
class GoPackage:
    structs: dict[str, dict[int, GoField]]  # struct -> protobuf field number -> field
    other_types: set[str]  # named non-struct types (`type ExtraValue []string`)
    custom_json: set[str]  # types with their own MarshalJSON


_STRUCT_START = re.compile(r"^type\s+(\w+)\s+struct\s*\{\s*$")
_OTHER_TYPE = re.compile(r"^type\s+(\w+)\s+(?!struct\b)[^=\s]")
_MARSHAL_JSON = re.compile(r"^func\s+\(\s*(?:\w+\s+)?\*?(\w+)\s*\)\s+MarshalJSON\(")
_GO_FIELD = re.compile(r"^\s*(?:(\w+)\s+)?([^\s`]+)\s+`([^`]*)`")
_TAG = re.compile(r'(\w+):"([^"]*)"')


def parse_go_package(directory: Path) -> GoPackage:
    package = GoPackage({}, set(), set())
    for path in sorted(directory.glob("*.go")):
        if not path.name.endswith("_test.go"):
            _parse_go_file(path.read_text(encoding="utf-8").splitlines(), package)
    return package


def _parse_go_file(lines: list[str], package: GoPackage) -> None:
    struct: str | None = None
    for line in lines:
        if struct is not None:
            if line.startswith("}"):
                struct = None
            else:
                _parse_go_field(line, package.structs[struct])
            continue
        if start := _STRUCT_START.match(line):
            struct = start.group(1)
            package.structs[struct] = {}
        elif other := _OTHER_TYPE.match(line):
            package.other_types.add(other.group(1))
        elif marshal := _MARSHAL_JSON.match(line):
            package.custom_json.add(marshal.group(1))


def _parse_go_field(line: str, fields: dict[int, GoField]) -> None:
    if line.lstrip().startswith("//"):
        return
    match = _GO_FIELD.match(line)
    if match is None:
        return
    name, go_type, tag_text = match.groups()
    tags = dict(_TAG.findall(tag_text))
    proto_tag = tags.get("protobuf", "-")
    if proto_tag == "-":
        return
    parts = proto_tag.split(",")
    proto_name = next((p[5:] for p in parts if p.startswith("name=")), "")
    json_name, *options = tags.get("json", "").split(",")
    fields[int(parts[1])] = GoField(
        proto_name, go_type, json_name, frozenset(options), embedded=name is None
    )


# ---------------------------------------------------------------------------------------
# Closure and tables
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableField:
    name: str
    type: str  # "STRING"/"BYTES"/"INT"/"BOOL" or a qualified message name
    repeated: bool = False
    map_value: bool = False
    keep_zero: bool = False
    inline: bool = False


@dataclass(frozen=True)
class Tables:
    messages: dict[str, dict[int, TableField]]
    special: frozenset[str]
    kinds: dict[tuple[str, str], str]
    any_group_kinds: dict[str, str]


class Sources:
    """The proto and Go views of every package, keyed by Go-style qualifier."""

    def __init__(self, directories: dict[str, Path]) -> None:
        self.proto: dict[str, ProtoPackage] = {}
        self.go: dict[str, GoPackage] = {}
        self.qualifiers: dict[str, str] = {}  # proto package -> qualifier
        for qualifier, directory in directories.items():
            proto_path = directory / "generated.proto"
            if not proto_path.is_file():
                raise GenerationError(f"{proto_path} is missing: is this the right checkout?")
            package = parse_proto(proto_path.read_text(encoding="utf-8"), str(proto_path))
            self.proto[qualifier] = package
            self.go[qualifier] = parse_go_package(directory)
            self.qualifiers[package.name] = qualifier

    @classmethod
    def from_checkouts(
        cls, api: Path, apimachinery: Path, roots: Iterable[tuple[str, str, str]] = ROOTS
    ) -> Sources:
        dirs = {q: apimachinery / d for d, q in APIMACHINERY_PACKAGES.items()}
        for _, api_dir, _ in roots:
            dirs[_qualifier_for_api_dir(api_dir)] = api / api_dir
        return cls(dirs)

    def resolve(self, type_: str, qualifier: str, where: str) -> str:
        if type_ in SCALARS:
            return SCALARS[type_]
        if type_ in PROTO_SCALARS:
            raise GenerationError(f"{where}: {type_} is a scalar the decoder does not read")
        if type_.startswith("."):
            package, _, message = type_[1:].rpartition(".")
            if package not in self.qualifiers:
                raise GenerationError(f"{where}: {type_} is in a package this script does not load")
            return f"{self.qualifiers[package]}.{message}"
        return f"{qualifier}.{type_}"

    def is_special(self, message: str) -> bool:
        qualifier, _, name = message.partition(".")
        go = self.go[qualifier]
        return name in go.custom_json or (name in go.other_types and name not in go.structs)


def _qualifier_for_api_dir(api_dir: str) -> str:
    group, version = api_dir.split("/")
    return f"{group}{version}"


def build_tables(
    sources: Sources,
    roots: Iterable[tuple[str, str, str]] = ROOTS,
    any_group_roots: Iterable[tuple[str, str]] = ANY_GROUP_ROOTS,
) -> Tables:
    """Tables for every message reachable from the root kinds."""
    kinds = {
        (group, kind): f"{_qualifier_for_api_dir(api_dir)}.{kind}" for group, api_dir, kind in roots
    }
    any_group_kinds = dict(any_group_roots)
    messages: dict[str, dict[int, TableField]] = {}
    special: set[str] = set()
    pending = [*kinds.values(), *any_group_kinds.values()]
    while pending:
        message = pending.pop()
        if message in messages or message in special:
            continue
        if sources.is_special(message):
            special.add(message)
            continue
        table = _table(sources, message)
        messages[message] = table
        pending.extend(f.type for f in table.values() if f.type not in SCALARS.values())
    return Tables(messages, frozenset(special), kinds, any_group_kinds)


def _table(sources: Sources, message: str) -> dict[int, TableField]:
    qualifier, _, name = message.partition(".")
    proto_fields = sources.proto[qualifier].messages.get(name)
    if proto_fields is None:
        raise GenerationError(f"no message {message} in the .proto files")
    go_fields = sources.go[qualifier].structs.get(name)
    if go_fields is None:
        raise GenerationError(f"{message}: no Go struct of that name next to its .proto")
    table: dict[int, TableField] = {}
    for field in proto_fields:
        where = f"{message}.{field.name}"
        go = go_fields.get(field.number)
        if go is None:
            raise GenerationError(f"{where}: no Go field tagged protobuf number {field.number}")
        type_ = sources.resolve(field.type, qualifier, where)
        if field.is_map and type_ in SCALARS.values() and type_ not in MAP_SCALAR_VALUES:
            raise GenerationError(f"{where}: map of {field.type}, the decoder cannot read it")
        table[field.number] = _table_field(field, go, type_, where)
    return dict(sorted(table.items()))


def _table_field(field: ProtoField, go: GoField, type_: str, where: str) -> TableField:
    inline = go.embedded and not go.json_name
    if go.proto_name != field.name and not (go.embedded and not go.proto_name):
        raise GenerationError(f"{where}: the Go field with this number is {go.proto_name!r}")
    if not inline and not go.json_name:
        raise GenerationError(f"{where}: a named Go field without a JSON name")
    # Only varint scalars need it: the decoder drops "" and keeps any decoded message.
    scalar_varint = type_ in ("INT", "BOOL") and not field.repeated and not field.is_map
    omits = bool(go.json_options & {"omitempty", "omitzero"})
    keep_zero = scalar_varint and (go.go_type.startswith("*") or not omits)
    return TableField(
        name="" if inline else go.json_name,
        type=type_,
        repeated=field.repeated,
        map_value=field.is_map,
        keep_zero=keep_zero,
        inline=inline,
    )


# ---------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------

_HEADER = '''\
"""Protobuf field tables for the kinds `tether.local.protobuf` decodes. Generated: do not edit.

Generated by `scripts/gen_protobuf_tables.py` from the `generated.proto` files and Go struct
tags of k8s.io/api {api_tag} and k8s.io/apimachinery {apimachinery_tag} (see the script for
how to fetch them and regenerate). Field numbers and types come from the `.proto`; JSON names,
`omitempty`, pointers and embedded structs from the Go types.

Message names are qualified Go-style (`corev1.Pod`). A table maps a field number to its Field;
SPECIAL_MESSAGES are referenced but not tabled: their JSON form is not an object, and the
decoder reads them by hand.
"""

# Code generated by scripts/gen_protobuf_tables.py. DO NOT EDIT.

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "ANY_GROUP_KINDS",
    "BOOL",
    "BYTES",
    "INT",
    "KINDS",
    "MESSAGES",
    "SCALARS",
    "SPECIAL_MESSAGES",
    "STRING",
    "Field",
    "Table",
]

# Scalar types; anything else in `Field.type` names a message in MESSAGES or SPECIAL_MESSAGES.
STRING: Final = "string"
BYTES: Final = "bytes"
INT: Final = "int"
BOOL: Final = "bool"
SCALARS: Final = frozenset({{STRING, BYTES, INT, BOOL}})


@dataclass(frozen=True, slots=True)
class Field:
    name: str  # JSON name ("" when inline)
    type: str  # a scalar type or a message name
    repeated: bool = False
    map_value: bool = False  # map<string, type>: entries are messages {{1: key, 2: value}}
    keep_zero: bool = False  # Go pointer or no `omitempty`: 0/false is a real value
    inline: bool = False  # Go embedded struct: JSON flattens its fields into the parent


Table = dict[int, Field]
'''


def render(tables: Tables, api_tag: str, apimachinery_tag: str) -> str:
    out = [_HEADER.format(api_tag=api_tag, apimachinery_tag=apimachinery_tag)]
    out.append("\nMESSAGES: Final[dict[str, Table]] = {\n")
    for message in sorted(tables.messages):
        out.append(f"    {message!r}: {{\n".replace("'", '"'))
        for number, field in tables.messages[message].items():
            out.append(_render_field(number, field))
        out.append("    },\n")
    out.append("}\n")
    out.append("\n# (API group, kind) -> top-level message.\n")
    out.append("KINDS: Final[dict[tuple[str, str], str]] = {\n")
    for (group, kind), message in tables.kinds.items():
        out.append(f'    ("{group}", "{kind}"): "{message}",\n')
    out.append("}\n")
    out.append("\n# Kinds registered in every group (and as meta.k8s.io/v1): kind -> message.\n")
    out.append("ANY_GROUP_KINDS: Final[dict[str, str]] = {\n")
    for kind, message in tables.any_group_kinds.items():
        out.append(f'    "{kind}": "{message}",\n')
    out.append("}\n")
    out.append("\nSPECIAL_MESSAGES: Final[frozenset[str]] = frozenset(\n    {\n")
    out.extend(f'        "{message}",\n' for message in sorted(tables.special))
    out.append("    }\n)\n")
    return "".join(out)


def _render_field(number: int, field: TableField) -> str:
    type_ = field.type if field.type in SCALARS.values() else f'"{field.type}"'
    args = [f'"{field.name}"', type_]
    args.extend(
        f"{flag}=True"
        for flag in ("repeated", "map_value", "keep_zero", "inline")
        if getattr(field, flag)
    )
    line = f"        {number}: Field({', '.join(args)}),\n"
    if len(line) - 1 <= 100:
        return line
    inner = "".join(f"            {arg},\n" for arg in args)
    return f"        {number}: Field(\n{inner}        ),\n"


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------


def _tag(checkout: Path, given: str | None) -> str:
    if given:
        return given
    try:
        result = subprocess.run(
            ["git", "-C", str(checkout), "describe", "--tags", "--exact-match", "--match", "v*"],
            check=True,
            capture_output=True,
            text=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        raise GenerationError(
            f"{checkout}: not a git checkout at a v* tag; clone it with --branch v0.37.x "
            "or name the tag with --api-tag/--apimachinery-tag"
        ) from exc
    return result.stdout.strip()


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("api", type=Path, help="checkout of github.com/kubernetes/api")
    parser.add_argument(
        "apimachinery", type=Path, help="checkout of github.com/kubernetes/apimachinery"
    )
    parser.add_argument("--api-tag", help="tag of the api checkout (default: git describe)")
    parser.add_argument("--apimachinery-tag", help="tag of the apimachinery checkout")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(None if argv is None else list(argv))
    try:
        api_tag = _tag(args.api, args.api_tag)
        apimachinery_tag = _tag(args.apimachinery, args.apimachinery_tag)
        tables = build_tables(Sources.from_checkouts(args.api, args.apimachinery))
    except GenerationError as exc:
        print(f"gen_protobuf_tables: {exc}", file=sys.stderr)
        return 2
    for tag in (api_tag, apimachinery_tag):
        if not tag.startswith(EXPECTED_TAG_PREFIX):
            print(f"warning: {tag} is not a {EXPECTED_TAG_PREFIX}x tag", file=sys.stderr)
    text = render(tables, api_tag, apimachinery_tag)
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} differs from what the checkout generates", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text, encoding="utf-8")
    print(
        f"wrote {args.output}: {len(tables.messages)} messages, "
        f"{len(tables.special)} special ({', '.join(sorted(tables.special))})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
