"""Embedded Kubernetes-API-compatible clusters (`tether local`)."""
