"""How many uploads and batch creates one process works on at once (`files.max_concurrent`).

Each of them moves up to a whole file between the client, the store and the ledger; a burst of
them must not take a process's memory with it. A call past the bound waits for a slot up to
`files.busy_wait_s`, then is refused with 503 `server_busy` and a Retry-After: the client's SDK
retries it, and the other work of the process goes on meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator

from gateway.errors import ServiceUnavailable


class FileSlots:
    """`limit` slots for file work in this process."""

    def __init__(self, limit: int, wait_s: float) -> None:
        self._slots = asyncio.Semaphore(limit)
        self._wait_s = wait_s

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """A slot for the block; ServiceUnavailable (503 server_busy) when none frees in time."""
        try:
            async with asyncio.timeout(self._wait_s):
                await self._slots.acquire()
        except TimeoutError:
            raise ServiceUnavailable(
                "The gateway is busy with other file uploads and batch creates; try again shortly.",
                code="server_busy",
                headers={"retry-after": str(max(1, math.ceil(self._wait_s)))},
            ) from None
        try:
            yield
        finally:
            self._slots.release()
