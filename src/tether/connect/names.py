"""Semaphore's names for what it writes, and the stable hashed form of names that do not fit.

semaphore-service-mirror names a mirror `<prefix>-<namespace>-73736d-<name>` and a global
service `gl-<namespace>-73736d-<name>`. `73736d` is not a hash: it is the hex of the ASCII
string "ssm", a fixed separator that lets a CoreDNS `rewrite name regex` split namespace from
name (both may contain dashes). semaphore-policy names a network set
`<cluster>-<namespace>-<name>`.

A Service name is a DNS-1035 label (63 characters at most). Upstream fails forever on longer
names; here such a name keeps a readable head and ends in `-` + 10 hex digits of the SHA-256 of
the full name, so the same source always gives the same mirror and different sources do not
collide. Hashed names cannot be reversed by a DNS regex: whoever needs the source reads the
`SOURCE_*` annotations every mirror carries.
"""

from __future__ import annotations

import hashlib
import re

SEPARATOR = "73736d"  # "ssm" in hex
GLOBAL_PREFIX = "gl"
LABEL_MAX = 63  # DNS-1035/1123 label: Service names
SUBDOMAIN_MAX = 253  # DNS-1123 subdomain: EndpointSlice, GlobalNetworkSet names
HASH_CHARS = 10

# annotations tether adds to every object it mirrors, so the source is known whatever the name
SOURCE_CLUSTER = "connect.tether.io/source-cluster"
SOURCE_NAMESPACE = "connect.tether.io/source-namespace"
SOURCE_NAME = "connect.tether.io/source-name"

_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def digest(text: str, chars: int = HASH_CHARS) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:chars]


def fit(name: str, limit: int = LABEL_MAX) -> str:
    """`name` itself when it fits in `limit` characters; else its head (trailing dashes and dots
    dropped) + "-" + a hash of the whole name, exactly `limit` characters or fewer."""
    if len(name) <= limit:
        return name
    head = name[: limit - HASH_CHARS - 1].rstrip("-.")
    return f"{head}-{digest(name)}"


def mirror_name(prefix: str, namespace: str, name: str) -> str:
    """The mirror of remote Service `namespace/name` from the remote with `servicePrefix` prefix."""
    return fit(f"{prefix}-{namespace}-{SEPARATOR}-{name}")


def global_name(namespace: str, name: str) -> str:
    """The global Service that merges `namespace/name` from every cluster."""
    return fit(f"{GLOBAL_PREFIX}-{namespace}-{SEPARATOR}-{name}")


def global_slice_name(slice_name: str) -> str:
    """A remote EndpointSlice's copy behind a global Service (slice names are already unique:
    the EndpointSlice controller gives each a random suffix)."""
    return fit(f"{GLOBAL_PREFIX}-{slice_name}", SUBDOMAIN_MAX)


def mirror_slice_name(mirror: str, service: str, slice_name: str) -> str:
    """A remote EndpointSlice's copy behind a mirror: the mirror's name and the slice's own
    suffix (`fluentd-x8k2p` of Service `fluentd` -> `<mirror>-x8k2p`), or a hash of the slice
    name when it does not start with its Service's name."""
    suffix = slice_name[len(service) + 1:] if slice_name.startswith(service + "-") else digest(slice_name, 8)
    return fit(f"{mirror}-{suffix or digest(slice_name, 8)}", SUBDOMAIN_MAX)


def split_mirror_name(name: str, prefix: str) -> tuple[str, str] | None:
    """(namespace, name) of an unhashed mirror name made with `prefix`, else None. Used to adopt
    mirrors written before the source annotations existed (by semaphore-service-mirror itself)."""
    head = f"{prefix}-"
    if not name.startswith(head):
        return None
    namespace, sep, source = name[len(head):].partition(f"-{SEPARATOR}-")
    if not sep or not namespace or not source:
        return None
    return namespace, source


def network_set_name(cluster: str, namespace: str, name: str) -> str:
    """semaphore-policy's `makeNetworkSetID`, lower-cased and fitted to a DNS subdomain (a label
    value may hold upper case and underscores, a Calico name may not)."""
    raw = f"{cluster}-{namespace}-{name}"
    candidate = raw.lower().replace("_", "-")
    if candidate == raw and is_subdomain(raw):
        return raw
    cleaned = re.sub(r"[^a-z0-9.-]", "-", candidate).strip("-.") or "set"
    return fit(f"{cleaned[:SUBDOMAIN_MAX - HASH_CHARS - 1]}-{digest(raw)}", SUBDOMAIN_MAX)


def is_label(name: str) -> bool:
    return len(name) <= LABEL_MAX and bool(_LABEL.match(name))


def is_subdomain(name: str) -> bool:
    return len(name) <= SUBDOMAIN_MAX and bool(_SUBDOMAIN.match(name))
