"""Counting the Redis round trips of the group commit (`gateway.redis_batching.PipelineBatcher`)."""

from __future__ import annotations

from typing import Any

from gateway.redis_batching import PipelineBatcher


class RoundTrips:
    """Put between a batcher and its link (`gateway.redis_link`): counts the round trips from now
    on and keeps what each wrote. (The compiled build's classes take no patched methods.)"""

    def __init__(self, batcher: PipelineBatcher) -> None:
        self.count = 0
        self.sent: list[bytes] = []
        self._link = batcher._link
        batcher._link = self

    async def round_trip(self, packed: bytes, count: int) -> list[Any]:
        self.count += 1
        self.sent.append(packed)
        return await self._link.round_trip(packed, count)
