"""Running nftables in a cluster's network namespaces (netns mode): one `nft -f` per change.

A script given to `apply_ruleset` is one transaction: the kernel takes all of it or none, so
packets never see half a ruleset. Scripts replace whole tables (`table x {}; delete table x;
table x {...}`), which is what every caller renders.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil

from tether.local.netns import exec_prefix

NFT_TIMEOUT_S = 10.0


class NftError(Exception):
    """nft is missing or refused a script (the message has nft's own words)."""


def nft_binary() -> str:
    found = shutil.which("nft") or shutil.which("nft", path="/usr/sbin:/sbin:/usr/bin:/bin")
    if found is None:
        raise NftError("the `nft` command is missing: install nftables (e.g. `apt-get install nftables`)")
    return found


async def run_nft(namespace: str | None, args: list[str], stdin: str = "", *, timeout_s: float = NFT_TIMEOUT_S) -> str:
    """`nft <args>` in `namespace` (None: here); its stdout. Raises NftError."""
    argv = [*(exec_prefix(namespace) if namespace else []), nft_binary(), *args]
    process = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(process.communicate(stdin.encode()), timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        raise NftError(f"nft in {namespace or 'the host'} did not finish within {timeout_s:.0f}s") from None
    if process.returncode != 0:
        raise NftError(f"nft {' '.join(args)} in {namespace or 'the host'} failed: "
                       f"{err.decode(errors='replace').strip()[:2000]}")
    return out.decode(errors="replace")


async def apply_ruleset(namespace: str, script: str) -> None:
    """Load `script` into `namespace` atomically."""
    await run_nft(namespace, ["-f", "-"], script)
