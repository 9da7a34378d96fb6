"""CPU and memory of a process and its descendants, from /proc (Linux)."""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")
MAX_PROCESSES = 1024  # a container's tree larger than this is measured in part
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def tree(pid: int) -> list[int]:
    """`pid` and its descendants (bounded)."""
    seen: list[int] = []
    pending = [pid]
    while pending and len(seen) < MAX_PROCESSES:
        current = pending.pop()
        if current in seen:
            continue
        seen.append(current)
        pending += _children(current)
    return seen


def cpu_seconds(pid: int) -> float:
    """User and system CPU of the process and of its children it has waited for; 0 if gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rfind(")") + 2:].split()
    try:
        utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    except (ValueError, IndexError):
        return 0.0
    return (utime + stime + cutime + cstime) / _TICKS


def resident_bytes(pid: int) -> int:
    try:
        return int((PROC / str(pid) / "statm").read_text().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def measure(pid: int) -> tuple[float, int]:
    """(cumulative CPU seconds, resident bytes) of the process tree rooted at `pid`."""
    pids = tree(pid)
    return sum(cpu_seconds(p) for p in pids), sum(resident_bytes(p) for p in pids)
