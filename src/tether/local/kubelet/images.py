"""Which program a container image runs: a built-in stand-in, the container's own command, or nothing.

The map is extensible with a YAML file (`$TETHER_IMAGE_MAP`, else `<data-dir>/images.yaml`):

    images:
      myorg/api: {command: ["/usr/local/bin/api", "--serve"]}  # run this program
      myorg/tools: {shell: true}       # run the container's command/args on this machine
      myorg/heavy: {virtual: true}     # Running, no process

The tether image (`tether.version.IMAGE`, any tag, or plain `tether`) runs this install of
tether: `python -m tether` with the container's `args`; a `command` replaces that entrypoint, as
in Docker, and a command `tether ...` is this install too.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from tether.version import IMAGE_REPOSITORY

ECHO_MODULE = "tether.local.kubelet.programs.echo"
WEB_MODULE = "tether.local.kubelet.programs.web"
REGISTRY_PREFIXES = ("docker.io/", "index.docker.io/", "registry.hub.docker.com/", "quay.io/",
                     "ghcr.io/", "registry.k8s.io/", "k8s.gcr.io/", "gcr.io/", "public.ecr.aws/")

Behaviour = Literal["echo", "web", "shell", "python", "tether", "command", "virtual"]

BUILTIN: Mapping[str, Behaviour] = {
    "tether/echo": "echo",
    "ealen/echo-server": "echo",
    "mendhak/http-https-echo": "echo",
    "jmalloc/echo-server": "echo",
    "inanimate/echo-server": "echo",
    "nginx": "web",
    "nginxdemos/hello": "web",
    "nginxinc/nginx-unprivileged": "web",
    "bitnami/nginx": "web",
    "httpd": "web",
    "busybox": "shell",
    "alpine": "shell",
    "debian": "shell",
    "ubuntu": "shell",
    "bash": "shell",
    "curlimages/curl": "shell",
    "python": "python",
    "tether": "tether",
}
DEFAULT_PORTS: Mapping[Behaviour, int] = {"echo": 8080, "web": 80}


class ImageError(Exception):
    pass


@dataclass(frozen=True)
class Program:
    """What to run for a container: argv empty means a virtual container."""

    behaviour: Behaviour
    argv: tuple[str, ...] = ()

    @property
    def virtual(self) -> bool:
        return not self.argv


@dataclass(frozen=True)
class MapEntry:
    behaviour: Behaviour
    command: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImageMap:
    entries: Mapping[str, MapEntry] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | None) -> ImageMap:
        if path is None or not path.exists():
            return cls()
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ImageError(f"{path}: not valid YAML: {exc}") from None
        entries: dict[str, MapEntry] = {}
        for image, spec in (doc.get("images") or {}).items():
            if not isinstance(spec, Mapping):
                raise ImageError(f"{path}: entry {image!r} must be a mapping")
            if spec.get("virtual"):
                entries[repository(str(image))] = MapEntry("virtual")
            elif spec.get("shell"):
                entries[repository(str(image))] = MapEntry("shell")
            elif isinstance(spec.get("command"), list) and spec["command"]:
                entries[repository(str(image))] = MapEntry("command", tuple(str(c) for c in spec["command"]))
            else:
                raise ImageError(f"{path}: entry {image!r} needs command: [...], shell: true or virtual: true")
        return cls(entries)

    def behaviour(self, image: str) -> MapEntry:
        repo = repository(image)
        if repo in self.entries:
            return self.entries[repo]
        return MapEntry(BUILTIN.get(repo, "virtual"))


def repository(image: str) -> str:
    """`docker.io/library/nginx:1.27@sha256:…` -> `nginx`; tether's own image -> `tether`."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[: name.rfind(":")]
    for prefix in REGISTRY_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    if name.startswith("library/"):
        name = name[len("library/"):]
    if name == IMAGE_REPOSITORY.split("/", 1)[1]:
        return "tether"
    return name


def _python_argv(argv: Sequence[str]) -> tuple[str, ...]:
    if argv and os.path.basename(argv[0]).startswith("python"):
        return (sys.executable, *argv[1:])
    return tuple(argv)


def _tether_argv(argv: Sequence[str]) -> tuple[str, ...]:
    if argv and os.path.basename(argv[0]) == "tether":
        return (sys.executable, "-m", "tether", *argv[1:])
    return _python_argv(argv)


def exec_argv(container: Mapping[str, Any], argv: Sequence[str]) -> tuple[str, ...]:
    """A command run in a container (an exec probe): `tether ...` in tether's image is this
    install, as the image's PATH makes it on a real node."""
    if repository(str(container.get("image", ""))) == "tether":
        return _tether_argv(argv)
    return tuple(argv)


def resolve(container: Mapping[str, Any], image_map: ImageMap) -> Program:
    image = str(container.get("image", ""))
    command = [str(c) for c in container.get("command") or []]
    args = [str(a) for a in container.get("args") or []]
    entry = image_map.behaviour(image)
    ports = [p.get("containerPort") for p in container.get("ports") or [] if isinstance(p, Mapping)]
    if entry.behaviour in ("echo", "web"):
        if command:  # a container that brings its own command runs it, as with the real image
            return Program("shell", tuple(command + args))
        port = next((int(p) for p in ports if isinstance(p, int)), DEFAULT_PORTS[entry.behaviour])
        module = ECHO_MODULE if entry.behaviour == "echo" else WEB_MODULE
        return Program(entry.behaviour, (sys.executable, "-m", module, "--port", str(port), *args))
    if entry.behaviour == "shell":
        return Program("shell", tuple(command + args) if command or args else ("sh",))
    if entry.behaviour == "python":
        argv = command + args if command or args else ["python3"]
        return Program("python", _python_argv(argv))
    if entry.behaviour == "tether":
        if command:  # replaces the image's entrypoint
            return Program("tether", _tether_argv(command + args))
        return Program("tether", (sys.executable, "-m", "tether", *args))
    if entry.behaviour == "command":
        return Program("command", tuple(list(entry.command) + args))
    return Program("virtual")
