"""A built-in component's own log (the cluster DNS, the service proxy, the scheduler, ...).

One file per component and cluster (`<data-dir>/logs/<component>.log`), written in the format
the kubelet stores container logs in (`<RFC 3339 nano time> <stream> <line>`), so the log
endpoint serves it unchanged as the log of the component's system pod in `kube-system`
(`kubectl logs -n kube-system coredns-...`). Writing never raises: a full disk must not stop
the component it describes.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from pathlib import Path
from typing import BinaryIO

LOGS_DIR = "logs"


def _timestamp() -> str:
    now = dt.datetime.now(dt.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond * 1000:09d}Z"


def klog(level: str, text: str, source: str) -> str:
    """A line as Kubernetes components print it: `I1201 14:11:45.013689       1 source] text`."""
    now = dt.datetime.now(dt.UTC)
    return f"{level[:1].upper()}{now:%m%d %H:%M:%S}.{now.microsecond:06d}       1 {source}] {text}"


class ComponentLog:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: BinaryIO | None = None

    @classmethod
    def in_dir(cls, data_dir: Path, component: str) -> ComponentLog:
        return cls(data_dir / LOGS_DIR / f"{component}.log")

    def write(self, text: str, stream: str = "stderr") -> None:
        with contextlib.suppress(OSError):
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("ab", buffering=0)
            for line in text.splitlines() or [""]:
                self._file.write(f"{_timestamp()} {stream} {line}\n".encode())

    def touch(self) -> None:
        """Create the file, so a log can be served before the component wrote anything."""
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch()

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None
