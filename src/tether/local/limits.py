"""The limits that keep one request from freezing or breaking a local cluster.

Every cluster of a daemon shares one event loop, so a request that makes the server build a huge
object, recurse without end or backtrack through a regex stalls all of them. These bounds follow
kube-apiserver's where it has one (body size, object size in etcd, JSON patch operations, the
size a JSON patch may copy) and are chosen so Python's recursion stays safe where it has none
that applies (nesting depth). docs/security.md ("API server limits") lists them for users.
"""

from __future__ import annotations

from typing import Final

from tether.objects import jsonpatch

# A request body, as kube-apiserver's default --max-request-bytes for JSON/YAML/protobuf.
MAX_BODY_BYTES: Final = 3 * 1024 * 1024
# A stored object as compact JSON: etcd's request limit, which kube-apiserver inherits.
MAX_OBJECT_BYTES: Final = 3 * 512 * 1024
# Containers (objects, arrays) nested in a body or an object. kube-apiserver's decoders allow
# 10,000 levels; the validation, patching and field-tracking code here recurses a few Python
# frames per level, so the bound keeps every step well inside the interpreter's stack while
# leaving real manifests (a deep CRD schema nests ~80 levels) room to spare.
MAX_NESTING_DEPTH: Final = jsonpatch.MAX_DEPTH
# The expanded size of a YAML body (what its aliases stand for) may not exceed the body limit:
# a few hundred bytes of anchors must not become megabytes of object.
MAX_YAML_EXPANDED_BYTES: Final = MAX_BODY_BYTES
# JSON patch: kube-apiserver's operation limit, and the accumulated size of what `copy`
# operations may duplicate (it sets the same bound on its JSON patch library).
MAX_JSON_PATCH_OPERATIONS: Final = jsonpatch.MAX_OPERATIONS
MAX_JSON_PATCH_COPY_BYTES: Final = jsonpatch.MAX_COPY_BYTES
# metadata.annotations: keys plus values, as kube-apiserver's TotalAnnotationSizeLimitB.
MAX_ANNOTATIONS_BYTES: Final = 256 * 1024
