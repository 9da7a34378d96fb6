"""The tagged block `tether connect` keeps in a hosts file, and how the file is rewritten.

A block belongs to one process and says so:

    # BEGIN tether connect pid=4242 (removed by `tether quit`)
    127.1.1.1	stats-queue stats-queue.shop stats-queue.shop.svc stats-queue.shop.svc.cluster.local
    # END tether connect pid=4242

Every rewrite drops this process's block and the block of any owner that no longer runs (a
session killed with SIGKILL), and leaves every other line byte-identical, line endings included.
The new text is written to a temporary file next to the hosts file and renamed over it, so a
reader sees the old file or the new one; where the hosts file is a mount point (a container's
/etc/hosts is a bind mount and cannot be replaced) it is rewritten in place instead.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

BEGIN = re.compile(r"^# BEGIN tether connect pid=(\d+)\b")
END = re.compile(r"^# END tether connect pid=(\d+)\b")
DEFAULT_HOSTS = Path("/etc/hosts")
ADDED_EOL = "[newline added before]"  # removing the block removes it too


class HostsFileError(Exception):
    """The hosts file could not be read or written (the message says how to fix it)."""


def render_block(pid: int, entries: Iterable[tuple[str, tuple[str, ...]]]) -> str:
    lines = [f"# BEGIN tether connect pid={pid} (removed by `tether quit`)\n"]
    lines += [f"{address}\t{' '.join(names)}\n" for address, names in entries if names]
    lines.append(f"# END tether connect pid={pid}\n")
    return "".join(lines)


def owners(text: str) -> list[int]:
    """The pids whose blocks `text` holds."""
    return [int(m.group(1)) for line in text.splitlines() if (m := BEGIN.match(line))]


def strip_blocks(text: str, drop: Callable[[int], bool]) -> str:
    """`text` without the blocks whose owner `drop` selects; everything else kept as it was.

    A BEGIN without its END (a file cut short) drops the rest of that block's lines only up to
    the next line that is not a mapping, so nothing the user wrote is lost.
    """
    out: list[str] = []
    dropping: int | None = None
    for line in text.splitlines(keepends=True):
        if dropping is None:
            begin = BEGIN.match(line)
            if begin and drop(int(begin.group(1))):
                dropping = int(begin.group(1))
                if ADDED_EOL in line and out and out[-1].endswith("\n"):
                    out[-1] = out[-1][:-1]  # the file ended without a newline before the block came
                continue
            out.append(line)
            continue
        end = END.match(line)
        if end and int(end.group(1)) == dropping:
            dropping = None
            continue
        if line.startswith("127.1.") or not line.strip():
            continue  # one of the block's own mappings
        dropping = None  # unterminated block: stop at the first foreign line
        out.append(line)
    return "".join(out)


def with_block(text: str, block: str) -> str:
    if not block:
        return text
    if text and not text.endswith("\n"):
        first, rest = block.split("\n", 1)
        return f"{text}\n{first} {ADDED_EOL}\n{rest}"
    return text + block


def update(path: Path, pid: int, block: str, alive: Callable[[int], bool]) -> None:
    """Replace `pid`'s block in `path` by `block` ("" removes it), dropping dead owners' blocks."""
    try:
        original = path.read_bytes().decode("utf-8", errors="surrogateescape")
    except FileNotFoundError:
        original = ""
    except OSError as exc:
        raise HostsFileError(f"cannot read {path}: {exc.strerror}") from None
    stripped = strip_blocks(original, lambda owner: owner == pid or not alive(owner))
    new = with_block(stripped, block)
    if new != original:
        write_atomically(path, new.encode("utf-8", errors="surrogateescape"))


def write_atomically(path: Path, data: bytes) -> None:
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o644
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tether-", dir=path.parent)
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            _rewrite_in_place(path, data)
            return
        raise HostsFileError(f"cannot write next to {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        try:
            os.replace(tmp, path)
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.EXDEV, errno.EPERM):
                raise
            _rewrite_in_place(path, data)  # a bind-mounted file cannot be replaced
    except OSError as exc:
        raise HostsFileError(f"cannot write {path}: {exc.strerror} "
                             "(run as root, or pass --hosts-file / --dns)") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _rewrite_in_place(path: Path, data: bytes) -> None:
    try:
        with path.open("r+b") as handle:
            handle.write(data)
            handle.truncate()
    except OSError as exc:
        raise HostsFileError(f"cannot write {path}: {exc.strerror} "
                             "(run as root, or pass --hosts-file / --dns)") from None
