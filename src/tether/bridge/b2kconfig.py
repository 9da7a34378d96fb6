"""Bridge to Kubernetes' `KubernetesLocalProcessConfig.yaml`, read as B2K reads it.

    version: 0.1
    env:
      - name: ALLOW_LIST_PATH
        value: $(volumeMounts:testvolume)          # the local directory the volume went to
      - name: KAFKA_BROKER
        value: $(services:kafka-headless.kafka)    # the Service's local name
      - name: DB_HOST
        value: $(externalendpoints:db.example.com:1433)
    volumeMounts:
      - name: testvolume
        localPath: ./data                          # download here instead of a temporary directory
    enableFeatures: [ManagedIdentity]

Entries in `env` add to or replace the container's variables. Token kinds are matched without
regard to case, as B2K does. `services` resolves to the name `tether connect` makes reachable
(`name`, or `name.namespace` for another namespace, or the mapped host when given mappings);
`externalendpoints` to the host itself. Anything unknown (a key, a token kind, a volume the
container does not mount, a `version` other than 0.1) is an error naming it and its line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from tether.bridge.envresolve import Environment, ResolveError, ServiceAddress, Source, Variable

if TYPE_CHECKING:
    from tether.bridge.volumecopy import Downloaded

SUPPORTED_VERSION = "0.1"
TOP_KEYS = ("version", "env", "volumeMounts", "enableFeatures")
ENV_KEYS = ("name", "value")
MOUNT_KEYS = ("name", "localPath")
TOKEN_KINDS = ("volumemounts", "services", "externalendpoints")
_TOKEN = re.compile(r"\$\(([^)]*)\)")


class ConfigFileError(ResolveError):
    pass


@dataclass(frozen=True)
class Token:
    kind: str  # one of TOKEN_KINDS
    argument: str
    text: str  # as written, for messages


@dataclass(frozen=True)
class EnvEntry:
    name: str
    value: str
    line: int
    tokens: tuple[Token, ...]


@dataclass(frozen=True)
class MountEntry:
    name: str
    local_path: Path
    line: int


@dataclass(frozen=True)
class LocalProcessConfig:
    path: Path
    env: tuple[EnvEntry, ...] = ()
    volume_mounts: tuple[MountEntry, ...] = ()
    features: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default=())

    @property
    def needs_volumes(self) -> bool:
        return bool(self.volume_mounts) or any(t.kind == "volumemounts" for e in self.env for t in e.tokens)

    def local_paths(self) -> dict[str, Path]:
        return {m.name: m.local_path for m in self.volume_mounts}

    def apply(self, env: Environment, downloaded: Mapping[str, Downloaded], namespace: str,
              addresses: Mapping[tuple[str, str], ServiceAddress] | None = None) -> Environment:
        """`env` with the file's entries added, their tokens replaced."""
        for mount in self.volume_mounts:
            if mount.name not in downloaded:
                raise ConfigFileError(f"{self.path}:{mount.line}: volumeMounts names volume "
                                      f"{mount.name!r}, which the container does not mount")
        variables: list[Variable] = []
        for entry in self.env:
            value = entry.value
            for token in entry.tokens:
                value = value.replace(token.text, self._token_value(token, entry, downloaded, namespace, addresses), 1)
            variables.append(Variable(entry.name, value, Source("config", f"{self.path.name}:{entry.line}")))
        result = env.with_variables(variables)
        return Environment(result.variables, result.unresolved, result.warnings + self.warnings)

    def _token_value(self, token: Token, entry: EnvEntry, downloaded: Mapping[str, Downloaded],
                     namespace: str, addresses: Mapping[tuple[str, str], ServiceAddress] | None) -> str:
        where = f"{self.path}:{entry.line}"
        if token.kind == "volumemounts":
            found = downloaded.get(token.argument)
            if found is None:
                raise ConfigFileError(f"{where}: {token.text} names volume {token.argument!r}, which the "
                                      f"container does not mount (it mounts: {', '.join(downloaded) or 'none'})")
            return str(found.path)
        if token.kind == "services":
            name, _, service_namespace = token.argument.partition(".")
            service_namespace = service_namespace or namespace
            address = (addresses or {}).get((service_namespace, name))
            if address is not None:
                return address.host
            return name if service_namespace == namespace else f"{name}.{service_namespace}"
        host = token.argument.rsplit(":", 1)[0] if ":" in token.argument else token.argument
        return host


def _where(path: Path, node: yaml.Node) -> str:
    return f"{path}:{node.start_mark.line + 1}"


def _mapping(path: Path, node: yaml.Node, what: str, allowed: tuple[str, ...]) -> dict[str, yaml.Node]:
    if not isinstance(node, yaml.MappingNode):
        raise ConfigFileError(f"{_where(path, node)}: {what} must be a mapping")
    found: dict[str, yaml.Node] = {}
    for key_node, value_node in node.value:
        key = str(key_node.value)
        if key not in allowed:
            raise ConfigFileError(f"{_where(path, key_node)}: unknown key {key!r} in {what} "
                                  f"(known: {', '.join(allowed)})")
        found[key] = value_node
    return found


def _scalar(path: Path, node: yaml.Node | None, what: str) -> str:
    if node is None or not isinstance(node, yaml.ScalarNode):
        raise ConfigFileError(f"{_where(path, node) if node else path}: {what} must be a string")
    return str(node.value)


def _sequence(path: Path, node: yaml.Node, what: str) -> list[yaml.Node]:
    if isinstance(node, yaml.ScalarNode) and node.value in ("", "null", "~"):
        return []
    if not isinstance(node, yaml.SequenceNode):
        raise ConfigFileError(f"{_where(path, node)}: {what} must be a list")
    return list(node.value)


def parse_tokens(value: str, where: str) -> tuple[Token, ...]:
    tokens: list[Token] = []
    for match in _TOKEN.finditer(value):
        kind, colon, argument = match.group(1).partition(":")
        if not colon or kind.lower() not in TOKEN_KINDS:
            raise ConfigFileError(f"{where}: unknown token {match.group(0)!r} "
                                  f"(known: $(volumeMounts:NAME), $(services:NAME[.NAMESPACE]), "
                                  f"$(externalendpoints:HOST:PORT))")
        if not argument.strip():
            raise ConfigFileError(f"{where}: token {match.group(0)!r} needs a name after the colon")
        tokens.append(Token(kind.lower(), argument.strip(), match.group(0)))
    return tuple(tokens)


def parse(text: str, path: Path) -> LocalProcessConfig:
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"{path}: not valid YAML: {exc}") from None
    if root is None:
        raise ConfigFileError(f"{path}: the file is empty; it needs at least `version: 0.1`")
    top = _mapping(path, root, "the file", TOP_KEYS)
    if "version" not in top:
        raise ConfigFileError(f"{path}:1: `version: {SUPPORTED_VERSION}` is missing")
    version = _scalar(path, top["version"], "version")
    if version != SUPPORTED_VERSION:
        raise ConfigFileError(f"{_where(path, top['version'])}: version {version!r} is not supported "
                              f"(Bridge to Kubernetes files are version {SUPPORTED_VERSION})")
    base = path.parent
    env: list[EnvEntry] = []
    for item in _sequence(path, top["env"], "env") if "env" in top else []:
        fields = _mapping(path, item, "an env entry", ENV_KEYS)
        name = _scalar(path, fields.get("name"), "env name") if "name" in fields else ""
        if not name:
            raise ConfigFileError(f"{_where(path, item)}: env entry without a name")
        value = _scalar(path, fields["value"], "env value") if "value" in fields else ""
        where = _where(path, fields.get("value", item))
        env.append(EnvEntry(name, value, item.start_mark.line + 1, parse_tokens(value, where)))
    mounts: list[MountEntry] = []
    for item in _sequence(path, top["volumeMounts"], "volumeMounts") if "volumeMounts" in top else []:
        fields = _mapping(path, item, "a volumeMounts entry", MOUNT_KEYS)
        name = _scalar(path, fields.get("name"), "volumeMounts name") if "name" in fields else ""
        if not name:
            raise ConfigFileError(f"{_where(path, item)}: volumeMounts entry without a name")
        local = _scalar(path, fields["localPath"], "localPath") if "localPath" in fields else ""
        if not local:
            raise ConfigFileError(f"{_where(path, item)}: volumeMounts entry {name!r} without a localPath")
        local_path = Path(local).expanduser()
        mounts.append(MountEntry(name, local_path if local_path.is_absolute() else base / local_path,
                                 item.start_mark.line + 1))
    features: list[str] = []
    warnings: list[str] = []
    if "enableFeatures" in top:
        features = [_scalar(path, n, "a feature") for n in _sequence(path, top["enableFeatures"], "enableFeatures")]
        if features:
            warnings.append(f"{_where(path, top['enableFeatures'])}: enableFeatures "
                            f"({', '.join(features)}) has no effect in tether")
    return LocalProcessConfig(path, tuple(env), tuple(mounts), tuple(features), tuple(warnings))


def load(path: Path) -> LocalProcessConfig:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigFileError(f"cannot read {path}: {exc.strerror}") from None
    return parse(text, path)
