"""Container image references split the way Karmada's ImageOverrider sees them.

Karmada parses with distribution's `reference.Parse` (no normalisation: `nginx` stays `nginx`,
not `docker.io/library/nginx`) and then splits the name at its first `/`: everything before is
the "registry" (hostname), everything after the "repository". So `library/nginx` has registry
`library` — a Karmada quirk that tether keeps, because policies are written against it. A
reference with both a tag and a digest keeps only the tag. Rendering is
`[registry/]repository[:tag|@digest]`; removing the repository of `host/app:1` gives `host/:1`,
again exactly as Karmada renders it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = f"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_NAME = f"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
TAG = re.compile(r"[\w][\w.-]{0,127}", re.ASCII)
DIGEST = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}")
_REFERENCE = re.compile(
    f"({_NAME})(?::({TAG.pattern}))?(?:@({DIGEST.pattern}))?", re.ASCII
)
_NAME_MAX = 255


class ImageError(ValueError):
    """An image string distribution's parser rejects; the message is distribution's."""


@dataclass(frozen=True)
class Image:
    registry: str
    repository: str
    tag: str = ""
    digest: str = ""

    @property
    def tag_or_digest(self) -> str:
        return self.tag or self.digest

    def with_tag_or_digest(self, value: str) -> Image:
        """Karmada's SetTagOrDigest: a valid tag replaces both, a valid digest replaces both,
        anything else changes nothing."""
        if TAG.fullmatch(value):
            return replace(self, tag=value, digest="")
        if DIGEST.fullmatch(value):
            return replace(self, tag="", digest=value)
        return self

    def without_tag_or_digest(self) -> Image:
        return replace(self, tag="") if self.tag else replace(self, digest="")

    def __str__(self) -> str:
        name = f"{self.registry}/{self.repository}" if self.registry else self.repository
        if self.tag:
            return f"{name}:{self.tag}"
        if self.digest:
            return f"{name}@{self.digest}"
        return name


def parse_image(text: str) -> Image:
    """Split an image reference; raises ImageError as distribution's reference.Parse would."""
    if not text:
        raise ImageError("invalid reference format")
    match = _REFERENCE.fullmatch(text)
    if match is None:
        if _REFERENCE.fullmatch(text.lower()):
            raise ImageError("invalid reference format: repository name must be lowercase")
        raise ImageError("invalid reference format")
    name, tag, digest = match.group(1), match.group(2) or "", match.group(3) or ""
    if len(name) > _NAME_MAX:
        raise ImageError(f"repository name must not be more than {_NAME_MAX} characters")
    registry, _, repository = name.partition("/")
    if not repository:
        registry, repository = "", name
    return Image(registry, repository, tag, "" if tag else digest)
