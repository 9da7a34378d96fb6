"""Background processes: where their state lives, starting them detached, telling whether they
still run, and stopping them within a bound. The one supervisor every `tether` daemon uses
(`tether local up`, `tether agent start`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

POLL_S = 0.1


def state_home() -> Path:
    """The root of tether's per-user state: `$TETHER_HOME`, else `$XDG_DATA_HOME/tether`
    (default `~/.local/share/tether`)."""
    explicit = os.environ.get("TETHER_HOME")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tether"


def alive(pid: int) -> bool:
    """Whether `pid` runs. A zombie does not count (it serves nothing): a zombie child of this
    process is reaped here, any other is recognised by its /proc state."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def spawn(args: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
    """Start `args` in its own session (no terminal signals reach it), output appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(list(args), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def stop(pid: int, *, stop_s: float) -> bool:
    """SIGTERM `pid`, and SIGKILL it if it still runs after `stop_s`; whether it was running."""
    if not alive(pid):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + stop_s
    while time.monotonic() < deadline and alive(pid):
        time.sleep(POLL_S)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return True
