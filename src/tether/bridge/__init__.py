"""Bridge: a developer's machine inside a cluster (Service access, env and volumes, intercepts)."""
