"""An async Kubernetes client: discovery-backed resource paths, get/list/apply/delete."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from tether.kube.config import ClusterCredentials, load_kubeconfig

Obj = dict[str, Any]
REQUEST_TIMEOUT_S = 30.0


class KubeError(Exception):
    """A failed API call, carrying the server's `Status` when there is one."""

    def __init__(self, code: int, reason: str, message: str, status: Obj | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.status = status or {}


@dataclass(frozen=True)
class Resource:
    group_version: str
    plural: str
    kind: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/api/{self.group_version}" if "/" not in self.group_version else f"/apis/{self.group_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


class KubeClient:
    def __init__(self, credentials: ClusterCredentials) -> None:
        self.credentials = credentials
        headers = {"User-Agent": "tether"}
        if credentials.token:
            headers["Authorization"] = f"Bearer {credentials.token}"
        self._http = httpx.AsyncClient(
            base_url=credentials.server,
            verify=credentials.ssl_context(),
            headers=headers,
            timeout=REQUEST_TIMEOUT_S,
        )
        self._resources: dict[tuple[str, str], Resource] = {}

    @classmethod
    def from_kubeconfig(cls, path: Path | None = None, context: str | None = None) -> KubeClient:
        return cls(load_kubeconfig(path, context))

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def request(self, method: str, path: str, *, body: Any = None, content_type: str = "application/json",
                      params: dict[str, str] | None = None) -> Obj:
        content = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if content is not None else {}
        try:
            response = await self._http.request(method, path, content=content, headers=headers, params=params)
        except httpx.HTTPError as exc:
            raise KubeError(0, "Unreachable", f"{self.credentials.server}: {exc}") from None
        try:
            payload: Obj = response.json()
        except ValueError:
            payload = {}
        if response.status_code >= 400:
            raise KubeError(response.status_code, str(payload.get("reason", "")),
                            str(payload.get("message", response.text[:200])), payload)
        return payload

    async def resource(self, api_version: str, kind: str) -> Resource:
        key = (api_version, kind)
        if key not in self._resources:
            path = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
            for entry in (await self.request("GET", path)).get("resources", []):
                if "/" not in entry["name"]:
                    self._resources[(api_version, entry["kind"])] = Resource(
                        api_version, entry["name"], entry["kind"], bool(entry["namespaced"]))
            if key not in self._resources:
                raise KubeError(404, "NotFound", f"the server has no resource for {kind} in {api_version}")
        return self._resources[key]

    async def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj:
        res = await self.resource(api_version, kind)
        return await self.request("GET", res.path(namespace, name))

    async def list_objects(self, api_version: str, kind: str, namespace: str | None = None,
                   label_selector: str = "") -> list[Obj]:
        res = await self.resource(api_version, kind)
        params = {"labelSelector": label_selector} if label_selector else None
        items: list[Obj] = (await self.request("GET", res.path(namespace), params=params)).get("items", [])
        return items

    async def apply(self, obj: Obj, *, field_manager: str = "tether", force: bool = True) -> Obj:
        """Server-side apply: create or update, owning the fields this manifest sets."""
        res = await self.resource(obj["apiVersion"], obj["kind"])
        meta = obj.get("metadata", {})
        namespace = meta.get("namespace") or (self.credentials.namespace if res.namespaced else None)
        params = {"fieldManager": field_manager, "force": "true" if force else "false"}
        return await self.request("PATCH", res.path(namespace, meta["name"]), body=obj,
                                  content_type="application/apply-patch+yaml", params=params)

    async def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj:
        res = await self.resource(api_version, kind)
        return await self.request("DELETE", res.path(namespace, name), body={"propagationPolicy": "Background"})
