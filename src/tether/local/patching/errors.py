"""Errors raised by the patch engines; the HTTP layer maps them to `metav1.Status`.

PatchError           the patch is malformed or cannot be applied (400/422)
PatchTooLarge        the patch has too many operations or would build too much (413)
ApplyConflictError   server-side apply touched fields another manager owns (409)
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.objects.jsonpatch import PatchError, PatchTooLarge

__all__ = ["ApplyConflictError", "FieldConflict", "PatchError", "PatchTooLarge"]

@dataclass(frozen=True)
class FieldConflict:
    """One field an apply wanted to change while another manager owns it."""

    manager: str
    field: str  # e.g. ".data.a" or '.spec.containers[name="c"].image'
    api_version: str

    @property
    def message(self) -> str:
        # The exact wording kubectl and client-go print in the 409 causes.
        return f'conflict with "{self.manager}" using {self.api_version}'


class ApplyConflictError(Exception):
    """Server-side apply conflicts; retry with force=true to take ownership."""

    def __init__(self, conflicts: list[FieldConflict]) -> None:
        self.conflicts = conflicts
        super().__init__(self._summary())

    def _summary(self) -> str:
        count = len(self.conflicts)
        noun = "conflict" if count == 1 else "conflicts"
        lines = [f"{c.message}: {c.field}" for c in self.conflicts]
        return f"Apply failed with {count} {noun}: " + "\n".join(lines)
