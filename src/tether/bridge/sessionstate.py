"""Where a running `tether connect` records itself, so `tether quit`, `tether bridge status` and
`tether env --use-kubernetes-service-environment-variables` find it, and a later run can clean up
after one that was killed.

One JSON file per session, `STATE_ROOT/bridge/sessions/<pid>.json`, rewritten atomically when
its mappings change and every few seconds while bytes flow. It records what the session changed
on this machine (the hosts file it wrote a block into, the nftables table it loaded) and in the
clusters (the agent), so whoever finds it with a dead owner can undo exactly that.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.bridge import hostsfile
from tether.bridge.envresolve import ServiceAddress


def sessions_dir(state_root: Path) -> Path:
    return state_root / "bridge" / "sessions"


def path_for(state_root: Path, pid: int) -> Path:
    return sessions_dir(state_root) / f"{pid}.json"


def write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(doc, handle, indent=1, sort_keys=True)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


@dataclass(frozen=True)
class Recorded:
    """One session's state file."""

    path: Path
    doc: dict[str, Any]

    @property
    def pid(self) -> int:
        return int(self.doc.get("pid", 0))

    @property
    def hosts_file(self) -> Path | None:
        value = self.doc.get("hostsFile")
        return Path(value) if value else None

    @property
    def nft_table(self) -> str:
        return str(self.doc.get("nftTable") or "")

    @property
    def mappings(self) -> list[dict[str, Any]]:
        return list(self.doc.get("mappings") or [])

    def addresses(self, cluster: str | None = None) -> dict[tuple[str, str], ServiceAddress]:
        """The session's mappings as `tether env` takes them (one cluster's; None: the first's)."""
        clusters = [c.get("name") for c in self.doc.get("clusters") or []]
        wanted = cluster if cluster is not None else (clusters[0] if clusters else "")
        out: dict[tuple[str, str], ServiceAddress] = {}
        for m in self.mappings:
            if m.get("cluster") != wanted:
                continue
            ports = {int(p["port"]): int(p["localPort"]) for p in m.get("ports") or []}
            out[(m["namespace"], m["name"])] = ServiceAddress(m["namespace"], m["name"], m["envHost"], ports)
        return out


def read_all(state_root: Path) -> list[Recorded]:
    found: list[Recorded] = []
    directory = sessions_dir(state_root)
    if not directory.is_dir():
        return found
    for path in sorted(directory.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # half-written by a crash: the next write or `quit` replaces it
        if isinstance(doc, dict):
            found.append(Recorded(path, doc))
    return found


def clean_local(record: Recorded, alive: Callable[[int], bool],
                remove_table: Callable[[str], None] | None = None) -> list[str]:
    """Undo what a session that no longer runs changed on this machine; what was done."""
    done: list[str] = []
    hosts = record.hosts_file
    if hosts is not None and hosts.exists():
        before = hosts.read_bytes()
        hostsfile.update(hosts, record.pid, "", alive)
        if hosts.read_bytes() != before:
            done.append(f"removed its block from {hosts}")
    if record.nft_table and remove_table is not None:
        remove_table(record.nft_table)
        done.append(f"deleted nftables table {record.nft_table}")
    with contextlib.suppress(FileNotFoundError):
        record.path.unlink()
    return done
