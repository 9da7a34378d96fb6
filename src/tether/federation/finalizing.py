"""Which source kinds the hub keeps watching so that its finalizer never outlives it.

A source (a Karmada template, a KubeFed Federated<Kind> object) carries the finalizer
`tether.io/propagation` while it has Works, so deleting it removes its copies from the members
first. Only the hub removes that finalizer, and only for kinds it watches. It watches a kind
while a policy selects it (Karmada) or an enabled FederatedTypeConfig names it (KubeFed), and
also, after that ends, while any object of the kind carries the finalizer or any Work of the
kind exists: then deletions still finish, whatever was deleted first.

The kinds that ever got the finalizer are recorded in the ConfigMap
`tether-system/tether-finalized-kinds` (one key per dialect, a JSON list of "apiVersion/Kind"),
written before the first finalizer of a kind is added and cleared once the kind is released, so
a restarted hub watches them again even when the policy or type that selected them is gone.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field

from tether.kube import KubeClient, KubeError, NotFound

from ._util import mapping
from .health import HUB_NAMESPACE

log = logging.getLogger(__name__)
RECORD_NAME = "tether-finalized-kinds"
LOAD_RETRY_S = (0.2, 5.0)  # first and largest wait between failed reads

GVK = tuple[str, str]  # (apiVersion, kind)


def encode(kinds: set[GVK]) -> str:
    return json.dumps(sorted(f"{av}/{kind}" for av, kind in kinds))


def decode(text: str) -> set[GVK]:
    """The kinds in a record value; malformed entries are skipped (the record is a hint, never
    a reason to fail)."""
    try:
        raw = json.loads(text) if text else []
    except ValueError:
        return set()
    out: set[GVK] = set()
    for entry in raw if isinstance(raw, list) else []:
        api_version, _, kind = str(entry).rpartition("/")
        if api_version and kind:
            out.add((api_version, kind))
    return out


def releasable(*, wanted: bool, synced: bool, type_gone: bool, finalized: int,
               works: int) -> bool:
    """Whether the hub may stop watching a kind: nothing selects it any more, its objects are
    known (listed, or the type itself is gone) and none of them still holds the finalizer or
    has a Work."""
    if wanted or works:
        return False
    if type_gone:
        return True
    return synced and finalized == 0


@dataclass
class KindRecord:
    """The persisted set of one dialect's finalized kinds (see module docstring)."""

    host: KubeClient
    dialect: str
    namespace: str = HUB_NAMESPACE
    kinds: set[GVK] = field(default_factory=set)
    loaded: bool = False
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def field_manager(self) -> str:
        return f"{RECORD_NAME}-{self.dialect}"

    async def load(self) -> None:
        """Read the record, retrying until the host answers (a missing one is empty)."""
        delay = LOAD_RETRY_S[0]
        while not self.loaded:
            try:
                found = await self.host.get_or_none("v1", "ConfigMap", RECORD_NAME,
                                                    self.namespace)
            except KubeError as exc:
                log.warning("reading %s/%s: %s; retrying in %.1fs", self.namespace,
                            RECORD_NAME, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, LOAD_RETRY_S[1])
                continue
            text = str(mapping(mapping(found).get("data")).get(self.dialect, ""))
            self.kinds |= decode(text)
            self.loaded = True

    async def add(self, gvk: GVK) -> None:
        # While a write is in flight `kinds` still shows the old set: a discard of this very
        # kind may be on its way, so wait for it and look again (a finalizer must never be
        # added to a kind the record no longer names)
        if gvk in self.kinds and not self._lock.locked():
            return
        async with self._lock:
            if gvk not in self.kinds:
                await self._write(self.kinds | {gvk})

    async def discard(self, gvk: GVK) -> None:
        if gvk not in self.kinds and not self._lock.locked():
            return
        async with self._lock:
            if gvk in self.kinds:
                await self._write(self.kinds - {gvk})

    async def _write(self, kinds: set[GVK]) -> None:
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": RECORD_NAME, "namespace": self.namespace,
                             "labels": {"app.kubernetes.io/part-of": "tether-hub"}},
                "data": {self.dialect: encode(kinds)}}
        try:
            await self.host.apply(body, field_manager=self.field_manager, force=True)
        except NotFound as exc:
            raise KubeError(exc.code, exc.reason,
                            f"cannot record finalized kinds in {self.namespace}/{RECORD_NAME}: "
                            f"{exc.message} (run `tether hub install`)") from None
        self.kinds = set(kinds)


__all__ = ["GVK", "RECORD_NAME", "KindRecord", "decode", "encode", "releasable"]
