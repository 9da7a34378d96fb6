"""nftables in a cluster's network namespaces (netns mode): one `nft -f` per change.

A script given to `apply_ruleset` is one transaction (see `tether.net.nft`, the runner). Most
scripts replace whole tables (`table x {}; delete table x; table x {...}`); the underlay's node
filter adds or deletes one chain per peer in its table.
"""

from __future__ import annotations

from tether.local.netns import exec_prefix
from tether.net.nft import NftError, run_nft

__all__ = ["NftError", "apply_ruleset"]


async def apply_ruleset(namespace: str, script: str) -> None:
    """Load `script` into `namespace` atomically. Raises NftError."""
    await run_nft(["-f", "-"], script, prefix=exec_prefix(namespace), where=namespace)
