"""The durable usage buffer between the request path and the database writer.

`UsageBuffer` is the seam: the request path appends frozen events; the writer reads them, writes
them to PostgreSQL/SQLite, and acks them only after the commit. An entry read but never acked
(its writer died) is handed out again by `reclaim` once it has been idle long enough.
`MemoryBuffer` serves the embedded single-process default; `RedisStreamBuffer` (redis_buffer.py)
serves every multi-process deployment.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from typing import Protocol

from gateway.errors import GatewayError
from gateway.metering.events import UsageEvent


class MeteringBacklogFull(GatewayError):
    """The buffer is over its bound (the database has been unreachable for a long while)."""

    status = 503
    type = "api_error"
    code = "metering_backlog_full"


class UsageBuffer(Protocol):
    async def append(self, event: UsageEvent) -> None:
        """Store one event durably; raise MeteringBacklogFull when the buffer is over its bound."""
        ...

    async def read(self, max_count: int, block_ms: int) -> list[tuple[str, UsageEvent]]:
        """Up to max_count entries not yet handed out, waiting up to block_ms for the first."""
        ...

    async def ack(self, ids: list[str]) -> None:
        """Forget entries whose records are committed."""
        ...

    async def depth(self) -> int:
        """Entries not yet acked (waiting or handed out): the metering backlog."""
        ...

    async def oldest_age_s(self) -> float | None:
        """Seconds since the oldest entry not yet acked was appended; None when there is none."""
        ...

    async def reclaim(self, min_idle_ms: int, max_count: int) -> list[tuple[str, UsageEvent]]:
        """Hand out again entries read at least min_idle_ms ago and never acked."""
        ...


class MemoryBuffer:
    """An in-process bounded buffer: one gateway process, events kept until acked.

    It survives a database outage and a graceful stop (the writer drains it), not a crash: a
    killed process loses what it held.
    """

    def __init__(self, maxlen: int = 100_000, id_prefix: str = "") -> None:
        self.maxlen = maxlen
        self.id_prefix = id_prefix  # tells this buffer's ids apart when it backs another one
        self._entries: dict[str, UsageEvent] = {}
        self._appended_at: dict[str, float] = {}  # id -> unix time; the first is the oldest unacked
        self._waiting: deque[str] = deque()  # appended, not yet handed out
        self._handed_out: dict[str, float] = {}  # id -> monotonic time it was read
        self._ids = itertools.count(1)
        self._arrived = asyncio.Event()

    async def append(self, event: UsageEvent) -> None:
        if len(self._entries) >= self.maxlen:
            raise MeteringBacklogFull(f"metering backlog is full ({self.maxlen} records); retry later")
        entry_id = f"{self.id_prefix}{next(self._ids)}"
        self._entries[entry_id] = event
        self._appended_at[entry_id] = time.time()
        self._waiting.append(entry_id)
        self._arrived.set()

    async def read(self, max_count: int, block_ms: int) -> list[tuple[str, UsageEvent]]:
        if not self._waiting and block_ms > 0:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout=block_ms / 1000)
            except TimeoutError:
                return []
        now = time.monotonic()
        batch: list[tuple[str, UsageEvent]] = []
        while self._waiting and len(batch) < max_count:
            entry_id = self._waiting.popleft()
            self._handed_out[entry_id] = now
            batch.append((entry_id, self._entries[entry_id]))
        return batch

    async def ack(self, ids: list[str]) -> None:
        for entry_id in ids:
            self._entries.pop(entry_id, None)
            self._appended_at.pop(entry_id, None)
            self._handed_out.pop(entry_id, None)

    async def depth(self) -> int:
        return len(self._entries)

    async def oldest_age_s(self) -> float | None:
        oldest = next(iter(self._appended_at.values()), None)  # dicts keep their insertion order
        return None if oldest is None else max(time.time() - oldest, 0.0)

    async def reclaim(self, min_idle_ms: int, max_count: int) -> list[tuple[str, UsageEvent]]:
        now = time.monotonic()
        cutoff = now - min_idle_ms / 1000
        stale = [i for i, read_at in self._handed_out.items() if read_at <= cutoff][:max_count]
        for entry_id in stale:
            self._handed_out[entry_id] = now
        return [(entry_id, self._entries[entry_id]) for entry_id in stale]
