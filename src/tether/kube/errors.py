"""Errors from a Kubernetes API, translated once, at the client boundary.

Every failure a caller can see is a `KubeError`. Server answers are classified from their
`metav1.Status` (HTTP code first, `reason` to split 409 and 410); transport failures (refused,
reset, TLS, timeouts, proxy refusals) are `Unreachable`, carrying the server address but never
credentials. The HTTP library's own exceptions are chained as `__cause__`, not exposed.

    KubeError
    ├── BadRequest (400)          ├── Gone (410)
    ├── Unauthorized (401)        │   └── Expired (410, reason Expired: relist)
    ├── Forbidden (403)           ├── Invalid (422, with causes)
    ├── NotFound (404)            ├── TooManyRequests (429, retry_after_s)
    ├── MethodNotAllowed (405)    ├── ServerError (5xx, including 504 Timeout)
    ├── AlreadyExists (409)       └── Unreachable (no answer: code 0)
    └── Conflict (409)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tether.objects import Obj


@dataclass(frozen=True)
class Cause:
    """One entry of `Status.details.causes`: which field is wrong, and why."""

    reason: str
    message: str
    field: str


class KubeError(Exception):
    """A failed API call, carrying the server's `Status` when there is one."""

    def __init__(self, code: int, reason: str, message: str, status: Obj | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.status: Obj = status or {}

    @property
    def causes(self) -> tuple[Cause, ...]:
        details = self.status.get("details") or {}
        raw = details.get("causes") or [] if isinstance(details, dict) else []
        return tuple(
            Cause(str(c.get("reason", "")), str(c.get("message", "")), str(c.get("field", "")))
            for c in raw if isinstance(c, dict)
        )

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later without any change by the caller."""
        return False


class BadRequest(KubeError):
    pass


class Unauthorized(KubeError):
    pass


class Forbidden(KubeError):
    pass


class NotFound(KubeError):
    pass


class MethodNotAllowed(KubeError):
    pass


class AlreadyExists(KubeError):
    pass


class Conflict(KubeError):
    """Optimistic concurrency (stale resourceVersion), failed preconditions, SSA field conflicts."""


class Gone(KubeError):
    """410: the requested history is no longer there (clients check the code, not the reason)."""


class Expired(Gone):
    """410 Expired: a watch resourceVersion or continue token too old; list again."""


class Invalid(KubeError):
    """422: the object failed validation; `causes` says which fields."""


class TooManyRequests(KubeError):
    def __init__(self, code: int, reason: str, message: str, status: Obj | None = None,
                 *, retry_after_s: float | None = None) -> None:
        super().__init__(code, reason, message, status)
        self.retry_after_s = retry_after_s

    @property
    def retryable(self) -> bool:
        return True


class ServerError(KubeError):
    @property
    def retryable(self) -> bool:
        return True


class Unreachable(KubeError):
    """No answer from the server: refused, reset, TLS failure, proxy refusal or timeout.

    `request_sent` is False only when the request certainly never reached the server (the
    connection was never established), which makes even a write safe to try again.
    """

    def __init__(self, server: str, detail: str, *, request_sent: bool = True) -> None:
        super().__init__(0, "Unreachable", f"{server}: {detail}")
        self.server = server
        self.request_sent = request_sent

    @property
    def retryable(self) -> bool:
        return True


_BY_CODE: Mapping[int, type[KubeError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def error_from_status(status: Mapping[str, Any], *, http_code: int = 0,
                      retry_after_s: float | None = None) -> KubeError:
    """Classify a `metav1.Status` (an error body, or a watch ERROR event's object)."""
    body: Obj = dict(status)
    raw_code = body.get("code")
    code = raw_code if isinstance(raw_code, int) and raw_code else http_code
    reason = str(body.get("reason") or "")
    message = str(body.get("message") or reason or f"HTTP {code}")
    cls: type[KubeError]
    if code == 409 and reason == "AlreadyExists":
        cls = AlreadyExists
    elif code == 410 and reason in ("Expired", ""):
        cls = Expired
    elif code >= 500:
        cls = ServerError
    else:
        cls = _BY_CODE.get(code, KubeError)
    if cls is TooManyRequests:
        return TooManyRequests(code, reason or "TooManyRequests", message, body,
                               retry_after_s=retry_after_s)
    return cls(code, reason, message, body)
