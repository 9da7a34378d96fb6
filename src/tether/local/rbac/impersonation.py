"""`Impersonate-*` headers: who the caller asks to act as, and what it must be allowed for that.

As kube-apiserver's impersonation filter:

- `Impersonate-User` (required when any other impersonation header is present),
  `Impersonate-Group` (repeatable), `Impersonate-Uid`, `Impersonate-Extra-<key>` (repeatable;
  the key is percent-decoded and lower-cased);
- each one is a separate check of the verb `impersonate`: `users` (or `serviceaccounts` in the
  account's namespace for `system:serviceaccount:<ns>:<name>`) and `groups` in the core group,
  `uids` and `userextras/<key>` in `authentication.k8s.io`, named by the value;
- the request then runs as the impersonated user: a ServiceAccount without explicit groups gets
  its fixed groups, and everyone but `system:anonymous` gets `system:authenticated` (unless
  `system:unauthenticated` was asked for).

The HTTP layer joins repeated headers with ", ", so values are split on commas (a group name
with a comma cannot be impersonated; Kubernetes' own names have none).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from tether.local.rbac.authorizer import (
    ANONYMOUS,
    AUTHENTICATED,
    UNAUTHENTICATED,
    Attributes,
    UserInfo,
    service_account_groups,
    split_service_account,
)

USER_HEADER = "impersonate-user"
GROUP_HEADER = "impersonate-group"
UID_HEADER = "impersonate-uid"
EXTRA_PREFIX = "impersonate-extra-"
AUTHENTICATION_GROUP = "authentication.k8s.io"


class ImpersonationError(ValueError):
    """Impersonation headers that do not make sense together (a 400)."""


@dataclass(frozen=True)
class Impersonation:
    user: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    groups_given: bool = False


def _values(raw: str) -> list[str]:
    return [v.strip() for v in raw.split(",") if v.strip()]


def requested(headers: Mapping[str, str]) -> Impersonation | None:
    """The impersonation the headers ask for (None: none); ImpersonationError when malformed.
    `headers` has lower-cased names."""
    user = headers.get(USER_HEADER, "").strip()
    groups = tuple(_values(headers.get(GROUP_HEADER, "")))
    uid = headers.get(UID_HEADER, "").strip()
    extra: dict[str, list[str]] = {}
    for name, value in headers.items():
        if name.startswith(EXTRA_PREFIX) and len(name) > len(EXTRA_PREFIX):
            key = unquote(name[len(EXTRA_PREFIX):]).lower()
            extra.setdefault(key, []).extend(_values(value))
    asked = bool(groups or uid or extra or GROUP_HEADER in headers)
    if not user:
        if asked:
            what = ", ".join([*(f"group {g!r}" for g in groups), *(f"extra {k!r}" for k in extra),
                              *([f"uid {uid!r}"] if uid else [])]) or "impersonation"
            raise ImpersonationError(f"requested [{what}] without impersonating a user")
        return None
    return Impersonation(user, groups, uid, tuple((k, tuple(v)) for k, v in sorted(extra.items())),
                         groups_given=bool(groups))


def checks(actor: UserInfo, wanted: Impersonation) -> list[Attributes]:
    """Each `impersonate` permission the actor needs, in kube-apiserver's order."""
    out: list[Attributes] = []
    account = split_service_account(wanted.user)
    if account is not None:
        out.append(Attributes(actor, "impersonate", namespace=account[0], api_version="v1",
                              resource="serviceaccounts", name=account[1]))
    else:
        out.append(Attributes(actor, "impersonate", api_version="v1", resource="users", name=wanted.user))
    out.extend(Attributes(actor, "impersonate", api_version="v1", resource="groups", name=group)
               for group in wanted.groups)
    for key, values in wanted.extra:
        out.extend(Attributes(actor, "impersonate", api_group=AUTHENTICATION_GROUP, api_version="v1",
                              resource="userextras", subresource=key, name=value) for value in values)
    if wanted.uid:
        out.append(Attributes(actor, "impersonate", api_group=AUTHENTICATION_GROUP, api_version="v1",
                              resource="uids", name=wanted.uid))
    return out


def impersonated(wanted: Impersonation) -> UserInfo:
    """The identity the request runs as once every check passed."""
    groups = list(wanted.groups)
    account = split_service_account(wanted.user)
    if account is not None and not wanted.groups_given:
        groups = list(service_account_groups(account[0]))
    if wanted.user != ANONYMOUS:
        if AUTHENTICATED not in groups and UNAUTHENTICATED not in groups:
            groups.append(AUTHENTICATED)
    elif UNAUTHENTICATED not in groups:
        groups.append(UNAUTHENTICATED)
    return UserInfo(wanted.user, tuple(groups), wanted.uid, wanted.extra)
