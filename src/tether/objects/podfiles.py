"""Where a pod finds its files: the contract between a kubelet and the code in its pods.

The ServiceAccount directory is where every kubelet puts a pod's token, `ca.crt` and
`namespace`. A local cluster's rootless kubelet cannot bind-mount volumes, so it writes them
elsewhere and says where in a `TETHER_MOUNT_*` variable; code in the pod reads `mounted_path`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
MOUNT_ENV_PREFIX = "TETHER_MOUNT_"


def mount_env_name(mount_path: str) -> str:
    """The variable naming where a volume mounted at `mount_path` really is
    (`/var/run/secrets/kubernetes.io/serviceaccount` ->
    `TETHER_MOUNT_VAR_RUN_SECRETS_KUBERNETES_IO_SERVICEACCOUNT`)."""
    name = "".join(ch if ch.isascii() and ch.isalnum() else "_" for ch in mount_path).upper().strip("_")
    return MOUNT_ENV_PREFIX + name


def mounted_path(mount_path: str, environ: Mapping[str, str] | None = None) -> Path:
    """Where the files a pod expects at `mount_path` are: there, unless a `TETHER_MOUNT_*`
    variable says the kubelet could not put them there (rootless local clusters)."""
    env = os.environ if environ is None else environ
    return Path(env.get(mount_env_name(mount_path)) or mount_path)
