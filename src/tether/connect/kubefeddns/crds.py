"""Minimal CRDs for `multiclusterdns.kubefed.io/v1alpha1` (Domain, ServiceDNSRecord,
IngressDNSRecord, DNSEndpoint), for hubs that lack KubeFed's own: the fields the controllers
use are declared, the rest of `spec` and `status` is kept as written. A hub whose CRDs came
from KubeFed (or from tether's hub install with upstream schemas) keeps them."""

from __future__ import annotations

from typing import Any

from tether.connect.kubefeddns.records import GROUP, VERSION

Crd = dict[str, Any]
OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _crd(kind: str, plural: str, properties: dict[str, Any], *, status: bool = True) -> Crd:
    version: dict[str, Any] = {"name": VERSION, "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                   "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                   "metadata": {"type": "object"}, **properties}}}}
    if status:
        version["subresources"] = {"status": {}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{GROUP}", "labels": {"app.kubernetes.io/part-of": "tether-connect"}},
            "spec": {"group": GROUP, "scope": "Namespaced",
                     "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
                     "versions": [version]}}


def multicluster_dns_crds() -> list[Crd]:
    return [
        _crd("Domain", "domains", {"domain": {"type": "string"}, "nameServer": {"type": "string"}}, status=False),
        _crd("ServiceDNSRecord", "servicednsrecords", {"spec": OPEN, "status": OPEN}),
        _crd("IngressDNSRecord", "ingressdnsrecords", {"spec": OPEN, "status": OPEN}),
        _crd("DNSEndpoint", "dnsendpoints", {"spec": OPEN, "status": OPEN}),
    ]
