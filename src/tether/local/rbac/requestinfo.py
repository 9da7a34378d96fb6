"""What an HTTP request asks for, in authorization terms (kube-apiserver's request-info resolver).

- `/api/v1/...` and `/apis/<group>/<version>/...` with at least a resource are *resource
  requests*; everything else (`/api`, `/apis/apps/v1`, `/version`, `/openapi/v3`) is a
  *non-resource request* judged by its path;
- a path's verb is the method in lower case (`get`, `post`, `head`); a resource's verb comes
  from the method: GET and HEAD `get` (`list` without a name, `watch` with
  `watch=true`), POST `create`, PUT `update`, PATCH `patch`, DELETE `delete`
  (`deletecollection` without a name); the legacy `/watch/` and `/proxy/` path prefixes set the
  verb themselves;
- `namespaces/<ns>/<resource>/...` sets the namespace; a namespace itself
  (`/api/v1/namespaces/<ns>`, `.../finalize`, `.../status`) is resource `namespaces`, named and
  in its own namespace, so a RoleBinding can grant reading the namespace it lives in;
- a list or watch with `fieldSelector=metadata.name=<x>` is about the object `<x>`, so a rule
  with resourceNames admits `kubectl get pod x -w`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

API_PREFIXES = ("api", "apis")
NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
SPECIAL_VERBS = frozenset({"proxy", "watch"})
METHOD_VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch",
                "DELETE": "delete"}
TRUE = ("1", "t", "T", "true", "True", "TRUE")


@dataclass(frozen=True)
class RequestInfo:
    resource_request: bool
    path: str
    verb: str
    api_prefix: str = ""
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""


def _last(query: Mapping[str, Sequence[str]], key: str) -> str:
    values = query.get(key)
    return values[-1] if values else ""


def _name_from_field_selector(selector: str) -> str:
    """The name a field selector pins (`metadata.name=x` or `metadata.name==x`), else ""."""
    for term in selector.split(","):
        key, op, value = term.partition("==")
        if not op:
            key, op, value = term.partition("=")
        if op and key.strip() == "metadata.name" and not key.strip().endswith("!"):
            value = value.strip()
            if value and "/" not in value and value not in (".", ".."):
                return value
    return ""


def resolve(method: str, path: str, query: Mapping[str, Sequence[str]]) -> RequestInfo:
    method = method.upper()
    parts = [p for p in path.strip("/").split("/") if p] if path.strip("/") else []
    non_resource = RequestInfo(False, path, method.lower())  # a path's verb is the method
    if len(parts) < 3 or parts[0] not in API_PREFIXES:
        return non_resource
    prefix, rest = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(rest) < 3:
            return non_resource
        group, rest = rest[0], rest[1:]
    version, rest = rest[0], rest[1:]
    by_method = True
    verb = METHOD_VERBS.get(method, "")
    if rest and rest[0] in SPECIAL_VERBS:
        if len(rest) < 2:
            return non_resource
        verb, rest, by_method = rest[0], rest[1:], False
    namespace = ""
    if rest and rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 and verb != "proxy" else ""
    if not name and verb == "get":
        verb = "watch" if _last(query, "watch") in TRUE else "list"
        name = _name_from_field_selector(_last(query, "fieldSelector"))
    if by_method and not name and verb == "delete":
        verb = "deletecollection"
    return RequestInfo(True, path, verb, prefix, group, version, namespace, resource, subresource, name)
