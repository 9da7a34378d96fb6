"""An `Environment` as text: dotenv, JSON or shell, with Secret values redacted unless revealed."""

from __future__ import annotations

import json
import re
import shlex
from typing import Literal

from tether.bridge.envresolve import Environment, Variable

Format = Literal["dotenv", "json", "shell"]
FORMATS: tuple[Format, ...] = ("dotenv", "json", "shell")
REDACTED = "<redacted>"
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _shown(variable: Variable, reveal: bool) -> str:
    return REDACTED if variable.secret and not reveal else variable.value


def _dotenv_value(value: str) -> str:
    """Bare when plain; single-quoted (literal in dotenv readers: no escapes, no `$` expansion)
    when possible; else double-quoted with `\\`, `"` and newlines escaped."""
    if value and all(c.isalnum() or c in "_-./:@,+%" for c in value):
        return value
    if "'" not in value and "\n" not in value and "\r" not in value:
        return f"'{value}'"
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def render(env: Environment, fmt: Format = "dotenv", *, reveal: bool = False, explain: bool = False) -> str:
    """The variables in `fmt`; `explain` adds each one's source (a comment, or a JSON field)."""
    if fmt == "json":
        if explain:
            doc: object = {
                "variables": [{"name": v.name, "value": _shown(v, reveal), "source": str(v.source),
                               "secret": v.secret} for v in env.variables],
                "unresolved": [{"name": u.name, "reason": u.reason} for u in env.unresolved],
                "warnings": list(env.warnings),
            }
        else:
            doc = {v.name: _shown(v, reveal) for v in env.variables}
        return json.dumps(doc, indent=2) + "\n"
    lines: list[str] = []
    for variable in env.variables:
        value = _shown(variable, reveal)
        if explain:
            lines.append(f"# {variable.name}: {variable.source}" + (" (secret)" if variable.secret else ""))
        if fmt == "shell" and not _SHELL_NAME.fullmatch(variable.name):
            lines.append(f"# {variable.name}: not a shell variable name, left out")
        elif fmt == "shell":
            lines.append(f"export {variable.name}={shlex.quote(value)}")
        else:
            lines.append(f"{variable.name}={_dotenv_value(value)}")
    for missing in env.unresolved:
        lines.append(f"# {missing.name}: not resolved: {missing.reason}")
    return "\n".join(lines) + ("\n" if lines else "")
