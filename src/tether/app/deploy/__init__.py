"""The objects that run tether's components in real clusters, rendered from values.

One renderer for everything: `deploy/` (the kustomize tree, `kubectl apply -k deploy/hub`) is
this module's output with the default values (`tree.write_tree`, checked by a test), and the
`manifest` subcommands (`tether hub|mesh|mirror|dns|agent manifest`) print the same objects with
the user's values. Every container is hardened the same way (`common.container`).
"""

from __future__ import annotations

from tether.app.deploy.common import to_yaml
from tether.app.deploy.components import (
    COMPONENTS,
    AgentValues,
    BridgeValues,
    DnsValues,
    HubValues,
    MeshValues,
    MirrorValues,
    render_agent,
    render_bridge,
    render_dns,
    render_hub,
    render_mesh,
    render_mirror,
)
from tether.objects import Obj

__all__ = [
    "COMPONENTS",
    "AgentValues",
    "BridgeValues",
    "DnsValues",
    "HubValues",
    "MeshValues",
    "MirrorValues",
    "Obj",
    "render_agent",
    "render_bridge",
    "render_dns",
    "render_hub",
    "render_mesh",
    "render_mirror",
    "to_yaml",
]
