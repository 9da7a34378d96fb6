"""Running `nft` (nftables): one subprocess a call, bounded in time, nft's own words on failure.

The one runner for every caller: the local clusters' rulesets in their network namespaces (the
caller passes the `ip netns exec` prefix) and `tether connect --routes` on this machine. A script
fed with `-f -` is one transaction: the kernel takes all of it or none, so packets never see half
a ruleset.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
from collections.abc import Sequence

NFT_TIMEOUT_S = 10.0


class NftError(Exception):
    """nft is missing, refused its input or hung (the message has nft's own words)."""


class NftMissing(NftError):
    """There is no `nft` command on this machine."""


def nft_binary() -> str:
    # sbin is often not on a non-root user's PATH, and nft lives there
    found = shutil.which("nft") or shutil.which("nft", path="/usr/sbin:/sbin:/usr/bin:/bin")
    if found is None:
        raise NftMissing("the `nft` command is missing: install nftables (e.g. `apt-get install nftables`)")
    return found


async def run_nft(args: Sequence[str], stdin: str = "", *, prefix: Sequence[str] = (), where: str = "the host",
                  timeout_s: float = NFT_TIMEOUT_S) -> str:
    """`<prefix> nft <args>` fed `stdin`; its stdout. `where` names the place in errors. Raises NftError."""
    argv = [*prefix, nft_binary(), *args]
    try:
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    except OSError as exc:  # the prefix's program (`ip`) missing, or not executable
        raise NftError(f"cannot run {argv[0]} for nft in {where}: {exc}") from None
    try:
        out, err = await asyncio.wait_for(process.communicate(stdin.encode()), timeout_s)
    except TimeoutError:
        await _reap(process)
        raise NftError(f"nft in {where} did not finish within {timeout_s:.0f}s") from None
    except BaseException:
        await _reap(process)  # cancelled: no nft left running behind its caller
        raise
    if process.returncode != 0:
        raise NftError(f"nft {' '.join(args)} in {where} failed: {err.decode(errors='replace').strip()[:2000]}")
    return out.decode(errors="replace")


async def _reap(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    await process.wait()


def nft_succeeds_sync(args: Sequence[str], *, timeout_s: float = NFT_TIMEOUT_S) -> bool:
    """Whether `nft <args>` on this machine exits 0 (False too when nft is missing or hangs); for
    clean-up and checks outside an event loop."""
    try:
        done = subprocess.run([nft_binary(), *args], capture_output=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError, NftError):
        return False
    return done.returncode == 0
