"""The labels and annotations semaphore-service-mirror puts on what it writes (kept exactly)."""

from __future__ import annotations

MIRRORED_SVC = "mirrored-svc"  # "true" on mirror Services, Endpoints (and here their slices)
PREFIX_SYNC = "mirror-svc-prefix-sync"  # the remote's servicePrefix
GLOBAL_SVC = "global-svc"  # "true" on global Services
GLOBAL_CLUSTERS = "global-svc-clusters"  # annotation: contributing clusters, comma-separated
MIRRORED_SLICE = "mirrored-endpoint-slice"  # "true" on global Services' slices
SLICE_SYNC_NAME = "mirror-endpointslice-sync-name"  # the cluster a global slice came from

SERVICE_NAME = "kubernetes.io/service-name"
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
MANAGER = "semaphore-service-mirror"
# Endpoints we write are already mirrored as slices: a real cluster's EndpointSliceMirroring
# controller must not make a second set from them.
SKIP_MIRROR = "endpointslice.kubernetes.io/skip-mirror"
OVER_CAPACITY = "endpoints.kubernetes.io/over-capacity"
LAST_CHANGE = "endpoints.kubernetes.io/last-change-trigger-time"

TOPOLOGY_HINTS = "service.kubernetes.io/topology-aware-hints"  # Semaphore's (deprecated form)
TOPOLOGY_MODE = "service.kubernetes.io/topology-mode"  # its current name in Kubernetes
REMOTE_ZONE = "remote"

TRUE = "true"
