"""Run the shell blocks of the README (and of marked docs quick starts) as a reader would.

The convention it implements is written down for authors in docs/contributing.md ("Commands in
the docs run as written"); keep the two in step. In short:

- every ```bash block of README.md runs, unless the line before it is
  `<!-- readme-test: skip (why) -->`; in docs/*.md only blocks preceded by `<!-- readme-test -->`;
- the blocks of one `##` section run in one fresh bash, in order; sections run in file order on
  one fresh `$TETHER_HOME` and `$HOME`, the working directory the repository, the venv on PATH;
- each command must exit 0; a command ending in `&` runs in the background (output to a log),
  and the next one starts once it has printed a line; it is stopped when its section ends;
- `logs -f`/`--follow`/`-w`/`--watch` commands run until they printed output (no error line)
  after FOLLOW_QUIET_S, or for FOLLOW_S seconds, and are then stopped;
- lines using `--netns`, and blocks after `<!-- readme-test: root (why) -->`, run only as root
  (and then under the netns test lock);
- PLACEHOLDERS are replaced by values computed while the section runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FOLLOW_S = 5.0
FOLLOW_QUIET_S = 1.0  # a follow that printed output by then (and no error line) has shown it works
FOLLOW_ERROR = r"^(error|Error from server|Traceback)"
COMMAND_TIMEOUT_S = 300.0
BACKGROUND_START_S = 90.0
STOP_S = 20.0
NETNS_LOCK = Path("/tmp/tether-netns.lock")

MARKER = re.compile(r"^<!--\s*readme-test(?P<skip>:\s*skip\b)?(?P<root>:\s*root\b)?.*-->\s*$")
LOGS = re.compile(r"(^|\s)logs\s")
FOLLOW_FLAG = re.compile(r"\s(-f|--follow)(\s|$)")
WATCH_FLAG = re.compile(r"\s(-w|--watch)(\s|$)")
ROOT_ONLY = re.compile(r"(^|\s)--netns(\s|$)")


# what to run -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One command as written (continuation lines joined) and its code without the comment."""

    text: str
    line: int
    root: bool = False  # in a block marked `<!-- readme-test: root (why) -->`

    @property
    def code(self) -> str:
        return strip_comment(self.text).rstrip()

    @property
    def background(self) -> bool:
        code = self.code
        return code.endswith("&") and not code.endswith("&&")

    @property
    def follows(self) -> bool:
        code = self.code
        return bool(LOGS.search(code) and FOLLOW_FLAG.search(code)) or bool(WATCH_FLAG.search(code))

    @property
    def root_only(self) -> bool:
        return self.root or ROOT_ONLY.search(self.code) is not None


@dataclass(frozen=True)
class Section:
    source: Path
    title: str
    commands: tuple[Command, ...]

    @property
    def where(self) -> str:
        return f"{self.source.relative_to(REPO)} § {self.title or '(top)'}"


def strip_comment(line: str) -> str:
    """`line` without its trailing shell comment (a `#` outside quotes, at a word's start)."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def commands(block: str, first_line: int) -> list[Command]:
    out: list[Command] = []
    pending: list[str] = []
    start = first_line
    for number, raw in enumerate(block.splitlines(), first_line):
        if not pending:
            start = number
            if not strip_comment(raw).strip():
                continue
        code = strip_comment(raw).rstrip()
        if code.endswith("\\"):
            pending.append(code[:-1].rstrip())
            continue
        pending.append(raw.strip() if pending else raw.rstrip())
        out.append(Command(" ".join(p.strip() for p in pending), start))
        pending = []
    if pending:
        out.append(Command(" ".join(pending), start))
    return out


def sections(path: Path, *, marked_only: bool) -> list[Section]:
    """The runnable sections of one markdown file."""
    found: list[Section] = []
    title, current = "", []
    lines = path.read_text().splitlines()
    i = 0
    previous = ""  # the last non-blank line before a fence
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            if current:
                found.append(Section(path, title, tuple(current)))
            title, current = line[3:].strip(), []
        if line.strip() == "```bash":
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            marker = MARKER.match(previous.strip())
            wanted = (marker is not None and not marker.group("skip")) if marked_only else \
                not (marker is not None and marker.group("skip"))
            if wanted:
                found_commands = commands("\n".join(lines[i + 1:end]), i + 2)
                if marker is not None and marker.group("root"):
                    found_commands = [Command(c.text, c.line, root=True) for c in found_commands]
                current += found_commands
            i, previous = end + 1, ""
            continue
        if line.strip():
            previous = line
        i += 1
    if current:
        found.append(Section(path, title, tuple(current)))
    return found


def all_sections() -> list[Section]:
    out = sections(REPO / "README.md", marked_only=False)
    for doc in sorted((REPO / "docs").glob("*.md")):
        out += sections(doc, marked_only=True)
    return out


# placeholders ------------------------------------------------------------------------------------

REGISTER = re.compile(r"tether register https://(?P<hub>\S+) --token (?P<token>\S+) "
                      r"--ca-cert-hash sha256:(?P<hash>\S+)")


def _printed_register(transcript: str, what: str) -> str:
    found = list(REGISTER.finditer(transcript))
    if not found:
        raise LookupError(f"{what} needs an earlier `tether token create --print-register-command` "
                          "in the same section")
    return found[-1].group(what)


def _pod(code: str) -> str:
    """A shell expression naming the first pod of the cluster and namespace the line names."""
    where = ""
    kubeconfig = re.search(r"--kubeconfig\s+(\$\([^)]*\)|\S+)", code)
    context = re.search(r"--context[ =](\S+)", code)
    member = re.search(r"\s-C\s+(\S+)", code)
    if code.lstrip().startswith("kubectl") and kubeconfig:
        where = f"--kubeconfig {kubeconfig.group(1)}"
    elif member:
        where = f"--context {member.group(1)}"
    elif context:
        where = f"--context {context.group(1)}"
    namespace = re.search(r"\s(?:-n|--namespace)[ =](\S+)", code)
    if namespace:
        where += f" -n {namespace.group(1)}"
    return f"$(kubectl {where} get pods -o jsonpath='{{.items[0].metadata.name}}')"


# placeholder -> (what it stands for, how the test computes it from the line and the transcript)
PLACEHOLDERS: dict[str, tuple[str, Callable[[str, str], str]]] = {
    "HUB:PORT": ("the hub API address of the last `tether register` command the section printed",
                 lambda code, out: _printed_register(out, "hub")),
    "TOKEN": ("the bootstrap token of that command",
              lambda code, out: _printed_register(out, "token")),
    "sha256:HASH": ("its CA certificate hash",
                    lambda code, out: "sha256:" + _printed_register(out, "hash")),
    "POD": ("the first pod of the namespace (`-n`, else the context's) of the cluster the line "
            "names (`--kubeconfig`, `-C NAME` or `--context NAME`)",
            lambda code, out: _pod(code)),
}


def substitute(code: str, transcript: str) -> str:
    for name, (_, compute) in PLACEHOLDERS.items():
        pattern = re.compile(rf"(?<![\w$-]){re.escape(name)}(?![\w-])")
        if pattern.search(code):
            code = pattern.sub(compute(code, transcript).replace("\\", "\\\\"), code)
    return code


# running -----------------------------------------------------------------------------------------


class CommandFailed(AssertionError):
    pass


@dataclass
class Shell:
    """One bash for a section: commands go in through a pipe, output comes back with markers."""

    env: dict[str, str]
    logs: Path
    proc: subprocess.Popen[str] = field(init=False)
    lines: list[str] = field(default_factory=list)
    background: list[tuple[int, Path, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        read, self._write = os.pipe()
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc", f"/dev/fd/{read}"],
                                     pass_fds=(read,), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, cwd=REPO, env=self.env,
                                     start_new_session=True)
        os.close(read)
        self._lock = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._send("set -m")  # every job its own process group: stopping one stops all it started

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))
                self._lock.notify_all()
        with self._lock:
            self._lock.notify_all()

    def _send(self, text: str) -> None:
        os.write(self._write, (text + "\n").encode())

    @property
    def transcript(self) -> str:
        with self._lock:
            return "\n".join(self.lines)

    def _wait_marker(self, marker: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                for line in reversed(self.lines):
                    if line.startswith(marker):
                        return line[len(marker):].strip()
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise TimeoutError
                self._lock.wait(min(left, 1.0))

    def run(self, command: Command, code: str) -> None:
        token = uuid.uuid4().hex
        if command.background:
            self._start_background(command, code, token)
            return
        if command.follows:
            # stopped once it has followed for FOLLOW_QUIET_S and printed what it follows (and no
            # error), else after FOLLOW_S; a follow that fails exits with its code as before
            script = (f"__f=$(mktemp)\n{{ {code}\n}} >$__f 2>&1 &\n__p=$!; __t=0\n"
                      f"while kill -0 $__p 2>/dev/null && [ $__t -lt {int(FOLLOW_S * 10)} ]; do "
                      f"if [ $__t -ge {int(FOLLOW_QUIET_S * 10)} ] && [ -s $__f ] && "
                      f"! grep -qiE '{FOLLOW_ERROR}' $__f; then break; fi; "
                      "sleep 0.1; __t=$((__t+1)); done\n"
                      "if kill -0 $__p 2>/dev/null; then kill -TERM -- -$__p; wait $__p; __rc=0; "
                      "else wait $__p; __rc=$?; fi\ncat $__f; rm -f $__f")
        else:
            script = f"{code}\n__rc=$?"
        self._send(f"{script}\nprintf '\\n__DONE_{token}__ %s\\n' \"$__rc\"")
        try:
            rc = self._wait_marker(f"__DONE_{token}__", COMMAND_TIMEOUT_S)
        except TimeoutError:
            raise CommandFailed(f"line {command.line}: `{command.text}` did not finish within "
                                f"{COMMAND_TIMEOUT_S:.0f} s") from None
        if rc != "0":
            raise CommandFailed(f"line {command.line}: `{command.text}` exited {rc}")

    def _start_background(self, command: Command, code: str, token: str) -> None:
        log = self.logs / f"background-{len(self.background)}.log"
        self._send(f"{code.rstrip()[:-1]} >{log} 2>&1 &\nprintf '\\n__BG_{token}__ %s\\n' \"$!\"")
        pid = int(self._wait_marker(f"__BG_{token}__", 30))
        self.background.append((pid, log, command.text))
        deadline = time.monotonic() + BACKGROUND_START_S
        while time.monotonic() < deadline:
            if log.exists() and log.read_text().strip():
                return
            if not _alive(pid):
                break
            time.sleep(0.2)
        text = log.read_text() if log.exists() else ""
        raise CommandFailed(f"line {command.line}: `{command.text}` printed nothing within "
                            f"{BACKGROUND_START_S:.0f} s or exited:\n{text}")

    def check_background(self) -> None:
        for pid, log, text in self.background:
            if not _alive(pid):
                raise CommandFailed(f"`{text}` (in the background) exited early:\n{log.read_text()}")

    def close(self) -> None:
        for pid, _, _ in self.background:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_S
        while time.monotonic() < deadline and any(_alive(pid) for pid, _, _ in self.background):
            time.sleep(0.1)
        for pid, _, _ in self.background:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.close(self._write)
        try:
            self.proc.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=STOP_S)

    def background_output(self) -> str:
        return "\n".join(f"--- `{text}`:\n{log.read_text() if log.exists() else ''}"
                         for _, log, text in self.background)


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


@contextlib.contextmanager
def netns_lock(needed: bool) -> Iterator[None]:
    """Netns tests use fixed device names: one at a time on the machine."""
    if not needed:
        yield
        return
    with NETNS_LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def environment(home: Path, tether_home: Path) -> dict[str, str]:
    """A fresh machine's environment, with this interpreter's venv on PATH."""
    venv_bin = str(Path(sys.executable).parent)
    keep = {k: v for k, v in os.environ.items()
            if k not in ("KUBECONFIG", "TETHER_HOME", "XDG_DATA_HOME", "VIRTUAL_ENV", "HOME")}
    return {**keep, "HOME": str(home), "TETHER_HOME": str(tether_home),
            "PATH": f"{venv_bin}{os.pathsep}{keep.get('PATH', '')}", "VIRTUAL_ENV": sys.prefix}


def activate_line(code: str) -> str:
    """`. .venv/bin/activate` means this test's venv when the repository's is another one."""
    own = REPO / ".venv"
    if own.resolve() == Path(sys.prefix).resolve():
        return code
    return re.sub(r"(^|\s)\.\s+\.venv/bin/activate\b", rf"\1. {sys.prefix}/bin/activate", code)


def run_section(section: Section, env: dict[str, str], logs: Path, *, is_root: bool) -> str:
    """Run one section; its transcript, or CommandFailed naming the line and showing the output."""
    runnable = [c for c in section.commands if is_root or not c.root_only]
    logs.mkdir(parents=True, exist_ok=True)
    with netns_lock(is_root and any(c.root_only for c in runnable)):
        shell = Shell(env, logs)
        try:
            for command in runnable:
                try:
                    code = substitute(activate_line(command.code), shell.transcript)
                except LookupError as exc:
                    raise CommandFailed(f"line {command.line}: {exc}") from None
                shell.run(command, code)
                shell.check_background()
        except CommandFailed as exc:
            tail = "\n".join(shell.transcript.splitlines()[-120:])
            raise CommandFailed(f"{section.where}, {exc}\n--- output:\n{tail}\n"
                                f"{shell.background_output()}") from None
        finally:
            shell.close()
        return shell.transcript


def stop_everything(roots: list[Path], env: dict[str, str]) -> None:
    """Stop what the README started and left running: agents, then local clusters."""
    tether = [sys.executable, "-m", "tether"]
    for root in roots:
        for agent in sorted(root.glob("**/agents/*/agent.json")):
            data_dir = agent.parent.parent.parent
            subprocess.run([*tether, "agent", "stop", "--cluster-name", agent.parent.name,
                            "--data-dir", str(data_dir)], env=env, capture_output=True, timeout=60)
        for state in sorted(root.glob("**/daemon.json")):
            subprocess.run([*tether, "local", "down", "--data-dir", str(state.parent)], env=env,
                           capture_output=True, timeout=120)
