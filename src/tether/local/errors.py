"""API errors, rendered once at the HTTP boundary as a `metav1.Status`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Cause:
    reason: str
    message: str
    field: str = ""

    def to_dict(self) -> dict[str, str]:
        out = {"reason": self.reason, "message": self.message}
        if self.field:
            out["field"] = self.field
        return out


@dataclass
class ApiError(Exception):
    """An error the API server answers with; `code` is the HTTP status."""

    code: int
    reason: str
    message: str
    name: str = ""
    kind: str = ""  # the resource (plural), as the real server puts it in details.kind
    group: str = ""
    causes: list[Cause] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.code} {self.reason}: {self.message}"

    @property
    def not_found(self) -> bool:
        return self.code == 404

    def status(self) -> dict[str, Any]:
        """The `metav1.Status`, fields in kube-apiserver's order (clients compare the bytes)."""
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = [c.to_dict() for c in self.causes]
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
        if self.message:
            body["message"] = self.message
        if self.reason:  # an error the server could not classify has no reason (StatusReasonUnknown)
            body["reason"] = self.reason
        if details:
            body["details"] = details
        body["code"] = self.code
        return body


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    prefix = f"{resource}.{group}" if group else resource
    return ApiError(404, "NotFound", f'{prefix} "{name}" not found', name=name, kind=resource, group=group)


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    prefix = f"{resource}.{group}" if group else resource
    return ApiError(409, "AlreadyExists", f'{prefix} "{name}" already exists', name=name, kind=resource, group=group)


def conflict(resource: str, name: str, group: str = "", detail: str = "") -> ApiError:
    prefix = f"{resource}.{group}" if group else resource
    why = detail or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {prefix} "{name}": {why}', name=name, kind=resource, group=group)


def invalid(kind: str, name: str, causes: list[Cause], group: str = "") -> ApiError:
    """422 Invalid; `kind` here is the Kind (the real server's message starts with it). The
    message joins the causes as upstream's aggregate error does: one as is, several in brackets,
    repeats once."""
    texts = list(dict.fromkeys(f"{c.field}: {c.message}" if c.field else c.message for c in causes))
    summary = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    qualified = f"{kind}.{group}" if group else kind
    message = f'{qualified} "{name}" is invalid: {summary}' if texts else f'{qualified} "{name}" is invalid'
    return ApiError(422, "Invalid", message, name=name, kind=kind, group=group, causes=causes)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type: str, accepted: list[str]) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", f'the body of the request was in an unknown format - accepted media types include: {", ".join(accepted)}' if not content_type else f'{content_type} is unsupported - accepted media types include: {", ".join(accepted)}')


def too_large(message: str) -> ApiError:
    return ApiError(413, "RequestEntityTooLarge", message)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)
