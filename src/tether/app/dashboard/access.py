"""Who may look at the dashboard: anyone the hub lets `get clusters`.

Authentication is the cluster proxy's (`federation.clusterproxy`): a client certificate from the
hub proxy CA when the dashboard serves TLS, or a bearer token the host cluster accepts (a
SelfSubjectReview sent with that token, cached by its hash). Authorisation is one
SubjectAccessReview on the hub (`get` `clusters.cluster.tether.io`, any name), cached a few
seconds per caller like the proxy's decisions. Tokens are never logged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from tether.federation import clusterproxy as cp
from tether.federation.crds import CLUSTER_GROUP
from tether.kube import KubeClient, KubeError, Unreachable
from tether.objects import Obj

log = logging.getLogger(__name__)

VERB = "get"
REVIEW_TIMEOUT_S = 10.0
_CACHE_CLUSTER = ""  # the decision is about every cluster, not one
_CACHE_VERB = "dashboard:get"  # keeps these apart from proxy decisions in a shared cache

LOGIN_HELP = ("Sign in with a bearer token the hub accepts (for example "
              "`kubectl create token NAME -n NAMESPACE` for a ServiceAccount allowed to get "
              "clusters.cluster.tether.io), or reach the dashboard with a client certificate "
              "from `tether kubeconfig`.")


def dashboard_review(caller: cp.Caller) -> Obj:
    """The SubjectAccessReview that decides whether `caller` may see the dashboard."""
    spec: Obj = {"user": caller.username, "groups": list(caller.groups),
                 "resourceAttributes": {"group": CLUSTER_GROUP, "version": cp.PROXY_VERSION,
                                        "resource": "clusters", "verb": VERB}}
    if caller.uid:
        spec["uid"] = caller.uid
    if caller.extra:
        spec["extra"] = {key: list(values) for key, values in caller.extra}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def forbidden_message(caller: cp.Caller) -> str:
    return (f'User "{caller.username}" cannot {VERB} resource "clusters" in API group '
            f'"{CLUSTER_GROUP}" at the cluster scope: the dashboard shows only what such a user '
            "may see")


class DashboardAccess:
    def __init__(self, host: KubeClient, *, admin_token: str | None = None) -> None:
        self.host = host
        # the proxy's authentication (token reviews and their cache, the hub's admin token);
        # its member pool stays unused
        self.proxy = cp.ClusterProxy(host, admin_token=admin_token)
        self.decisions = cp.DecisionCache()
        self.reviews = 0

    async def aclose(self) -> None:
        await self.proxy.aclose()

    async def caller(self, peer_cert: Mapping[str, Any] | None,
                     headers: Mapping[str, str]) -> cp.Caller | cp.Answer:
        """The allowed caller, or the Status to answer with (401, 403, 503)."""
        caller = cp.caller_from_peercert(peer_cert)
        if caller is None:
            token = cp.bearer_token(headers)
            if token is None:
                return cp.failure(401, "Unauthorized", "Unauthorized: " + LOGIN_HELP)
            try:
                caller = await self.proxy.authenticate_token(token, timeout_s=REVIEW_TIMEOUT_S)
            except Unreachable as exc:
                return cp.failure(503, "ServiceUnavailable",
                                  f"cannot verify the token with the hub: {exc.message}")
            if caller is None:
                return cp.failure(401, "Unauthorized",
                                  "the hub does not accept this token: " + LOGIN_HELP)
        try:
            decision = await self._authorize(caller)
        except KubeError as exc:
            return cp.failure(503, "ServiceUnavailable",
                              f"cannot ask the hub whether {caller.username} may look: {exc.message}")
        if not decision.allowed:
            return cp.failure(403, "Forbidden", forbidden_message(caller))
        return caller

    async def _authorize(self, caller: cp.Caller) -> cp.Decision:
        key = cp.DecisionCache.key(caller, _CACHE_CLUSTER, _CACHE_VERB)
        cached = self.decisions.get(key)
        if cached is not None:
            return cached
        self.reviews += 1
        answer = await self.host.request("POST", cp.SAR_PATH, body=dashboard_review(caller),
                                         timeout_s=REVIEW_TIMEOUT_S, idempotent=True)
        decision = cp.decision_from_review(answer)
        self.decisions.put(key, decision)
        return decision
