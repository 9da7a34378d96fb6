"""Bridge: a developer's machine inside a cluster (Service access, env and volumes, intercepts).

`environment(target, ...)` and `volumes(target, to, ...)` are the Python API; `tether env` and
`tether volumes` are the same on the command line. See docs/bridge.md.
"""

from tether.bridge.api import Resolved, environment, resolve_environment
from tether.bridge.b2kconfig import ConfigFileError, LocalProcessConfig
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
    "Downloaded",
    "Environment",
    "LocalProcessConfig",
    "ResolveError",
    "Resolved",
    "ServiceAddress",
    "Source",
    "Unresolved",
    "Variable",
    "VolumeError",
    "download",
    "environment",
    "resolve_environment",
    "volumes",
]
