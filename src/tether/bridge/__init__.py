"""Bridge: a developer's machine inside a cluster (Service access, env and volumes, intercepts).

`environment(target, ...)` and `volumes(target, to, ...)` are the Python API; `tether env` and
`tether volumes` are the same on the command line; `connect(context=...)` maps a cluster's Services
here as `tether connect` does, for the length of a `with` block. See docs/bridge.md.
"""

from tether.bridge.api import Resolved, environment, resolve_environment
from tether.bridge.b2kconfig import ConfigFileError, LocalProcessConfig
from tether.bridge.connection import Connection, ServiceMapping, connect
from tether.bridge.envresolve import (
    Environment,
    ResolveError,
    ServiceAddress,
    Source,
    Unresolved,
    Variable,
)
from tether.bridge.volumecopy import Downloaded, VolumeError, download, volumes

__all__ = [
    "ConfigFileError",
    "Connection",
    "Downloaded",
    "Environment",
    "LocalProcessConfig",
    "ResolveError",
    "Resolved",
    "ServiceAddress",
    "ServiceMapping",
    "Source",
    "Unresolved",
    "Variable",
    "VolumeError",
    "connect",
    "download",
    "environment",
    "resolve_environment",
    "volumes",
]
