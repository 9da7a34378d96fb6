"""The one nft runner (`tether.net.nft`) and its translation in `connect --routes`."""

from __future__ import annotations

import os
import shutil

import pytest

from tether.bridge import routes
from tether.net.nft import NftError, NftMissing, nft_succeeds_sync, run_nft

needs_nft = pytest.mark.skipif(shutil.which("nft", path="/usr/sbin:/sbin:/usr/bin:/bin") is None or os.geteuid() != 0,
                               reason="needs nft as root")


async def test_missing_nft_is_its_own_error_and_routes_says_how_to_fix_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda *_a, **_k: None)
    with pytest.raises(NftMissing, match="install nftables"):
        await run_nft(["list", "tables"])
    with pytest.raises(routes.RoutesError, match="--routes needs the `nft` command"):
        await routes.load("table ip x {}\n")
    assert nft_succeeds_sync(["list", "tables"]) is False
    assert routes.table_exists_sync("tether-bridge-1") is False


@needs_nft
async def test_nft_refusal_carries_nfts_words_and_where() -> None:
    # -c: the kernel's parser checks the script, nothing is loaded
    with pytest.raises(NftError, match=r"nft -c -f - in the host failed: .*") as info:
        await run_nft(["-c", "-f", "-"], "table ip tether-test { chain c { nonsense; } }\n")
    assert "nonsense" in str(info.value) or "syntax" in str(info.value).lower()
    assert await run_nft(["-c", "-f", "-"], "table ip tether-test {}\n") == ""


@needs_nft
async def test_routes_turns_nft_refusal_into_its_own_error() -> None:
    with pytest.raises(routes.RoutesError, match="failed"):
        await routes.load("this is not nft\n")
    assert routes.table_exists_sync("tether-bridge-no-such-table-0") is False


async def test_a_missing_prefix_program_is_an_nft_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.net import nft

    monkeypatch.setattr(nft, "nft_binary", lambda: "nft")
    with pytest.raises(NftError, match="cannot run /nonexistent/ip for nft in ns1"):
        await run_nft(["list", "tables"], prefix=["/nonexistent/ip", "netns", "exec", "ns1"], where="ns1")


async def test_a_cancelled_caller_leaves_no_process_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from tether.net import nft

    # `sleep` stands in for an nft that hangs: the prefix runs it with nft's path as argument
    monkeypatch.setattr(nft, "nft_binary", lambda: "nft")
    marker = f"tether-nft-cancel-{os.getpid()}"
    task = asyncio.create_task(run_nft([], prefix=["bash", "-c", f"exec -a {marker} sleep 30"]))
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    left = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).startswith(marker)]
    assert left == []


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
