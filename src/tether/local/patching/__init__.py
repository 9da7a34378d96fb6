"""Pure patch engines for the embedded API server: no I/O, inputs are never mutated.

apply_json_patch             application/json-patch+json (RFC 6902)
apply_merge_patch            application/merge-patch+json (RFC 7386)
merge_patch_shared           the same, sharing what the patch leaves alone (read-only documents)
apply_strategic_merge_patch  application/strategic-merge-patch+json (built-in kinds only)
server_side_apply            application/apply-patch+yaml, with managedFields and conflicts
record_update                managedFields bookkeeping for every other write
"""

from tether.local.patching.errors import (
    ApplyConflictError,
    FieldConflict,
    PatchError,
    PatchTooLarge,
)
from tether.local.patching.fieldsets import FieldPath, FieldSet
from tether.local.patching.managedfields import (
    fieldset_of,
    from_fields_v1,
    record_update,
    server_side_apply,
    to_fields_v1,
)
from tether.local.patching.mergepatch import apply_merge_patch, merge_patch_shared
from tether.local.patching.schema import merge_schema_from_openapi
from tether.local.patching.strategic import (
    MergeSchema,
    apply_strategic_merge_patch,
    merge_schema_for,
)
from tether.objects.jsonpatch import apply_json_patch

__all__ = [
    "ApplyConflictError",
    "FieldConflict",
    "FieldPath",
    "FieldSet",
    "MergeSchema",
    "PatchError",
    "PatchTooLarge",
    "apply_json_patch",
    "apply_merge_patch",
    "apply_strategic_merge_patch",
    "fieldset_of",
    "from_fields_v1",
    "merge_patch_shared",
    "merge_schema_for",
    "merge_schema_from_openapi",
    "record_update",
    "server_side_apply",
    "to_fields_v1",
]
