"""Where slots live: the store Protocol, and the in-process store of a gateway without Redis.

A slot is claimed atomically (the first request of a key owns it for a lease), then holds the
answer for the window, or is released for a retry to run. Only the claim's owner may store or
release (a claim whose lease ran out may have been taken over).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from gateway.idempotency.records import Claim, Record, StoredAnswer

# What the in-process store keeps at most, answers and claims together: the oldest go first.
MEMORY_BUDGET_BYTES = 64 * 1024 * 1024
CLAIM_BYTES = 256  # what a claim is counted for


class StoreUnavailable(Exception):
    """The store could not be reached (Redis down): the request runs without deduplication."""


class IdempotencyStore(Protocol):
    async def claim(self, slot: str, claim: Claim, lease_s: float) -> Record | None:
        """Claim a free slot for `lease_s` (None), or what holds it: a running claim or an answer."""
        ...

    async def keep(self, slot: str, claim: Claim, answer: StoredAnswer, window_s: float) -> None:
        """Store the answer for `window_s` in place of `claim`, unless another request claimed the
        slot since (this one's lease ran out)."""
        ...

    async def release(self, slot: str, claim: Claim) -> None:
        """Free the slot `claim` holds, if it still holds it: a retry runs anew."""
        ...

    async def renew(self, slot: str, claim: Claim, lease_s: float) -> None:
        """Hold the slot for `lease_s` from now, if `claim` still holds it: its request still runs."""
        ...


class MemoryIdempotencyStore:
    """Slots in this process, each expiring with its lease or window, within a memory budget."""

    def __init__(
        self, budget_bytes: int = MEMORY_BUDGET_BYTES, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._budget = budget_bytes
        self._clock = clock
        self._slots: OrderedDict[str, tuple[Record, float, int]] = OrderedDict()  # oldest first
        self._size = 0

    async def claim(self, slot: str, claim: Claim, lease_s: float) -> Record | None:
        held = self._held(slot)
        if held is not None:
            return held
        self._put(slot, claim, lease_s, CLAIM_BYTES)
        return None

    async def keep(self, slot: str, claim: Claim, answer: StoredAnswer, window_s: float) -> None:
        held = self._held(slot)
        if held is None or held == claim:
            self._put(slot, answer, window_s, answer.size())

    async def release(self, slot: str, claim: Claim) -> None:
        if self._held(slot) == claim:
            self._drop(slot)

    async def renew(self, slot: str, claim: Claim, lease_s: float) -> None:
        if self._held(slot) == claim:
            self._put(slot, claim, lease_s, CLAIM_BYTES)

    def _held(self, slot: str) -> Record | None:
        entry = self._slots.get(slot)
        if entry is None:
            return None
        record, expires_at, _ = entry
        if expires_at <= self._clock():
            self._drop(slot)
            return None
        return record

    def _put(self, slot: str, record: Record, ttl_s: float, size: int) -> None:
        self._drop(slot)
        self._slots[slot] = (record, self._clock() + ttl_s, size)
        self._size += size
        while self._size > self._budget and len(self._slots) > 1:
            self._drop(next(iter(self._slots)))

    def _drop(self, slot: str) -> None:
        entry = self._slots.pop(slot, None)
        if entry is not None:
            self._size -= entry[2]
