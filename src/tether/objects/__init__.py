"""Foundation: Kubernetes-shaped objects as plain data, without I/O.

Label and field selectors, Calico selectors, JSONPath, JSON Patch, timestamps and the helpers
every package uses to read and build objects. No Kubernetes client, no capability logic.
"""

from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]
"""A Kubernetes object, or any part of one, as decoded JSON."""

ObjView = Mapping[str, Any]
"""The same, read only: what a function that only reads an object takes."""
