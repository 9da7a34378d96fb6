"""JSON in and out of the Kubernetes API: the foundation's codec (`tether.objects.jsoncodec`),
orjson with the standard library for what orjson refuses, shared with the embedded API server."""

from __future__ import annotations

from tether.objects.jsoncodec import decode, encode

__all__ = ["decode", "encode"]
