"""Line outcomes stored in groups: the lines of one job that finish while a transaction is being
written share the next one (`ledger.record_outcomes`).

Every outcome moves the job's own row (its counts), so transactions that write outcomes queue on
that row's lock; one each would cap a job at the rate commits happen one after another. Each line
still waits for the transaction that holds its outcome: nothing counts as done before it is stored.
A group the database refuses is written again one outcome at a time, so that one outcome it cannot
store fails its own line only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.jobs import ledger
from gateway.jobs.ledger import Claim, LineOutcome
from gateway.metering.events import UsageEvent

Finished = tuple[LineOutcome, UsageEvent | None]


class OutcomeGroups:
    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], claim: Claim, clock: Callable[[], datetime]
    ) -> None:
        self._sessions, self._claim, self._clock = sessions, claim, clock
        self._waiting: list[tuple[Finished, asyncio.Future[bool]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def store(self, outcome: LineOutcome, event: UsageEvent | None) -> bool:
        """True once the outcome is stored; False if the claim no longer holds the job (then
        nothing of its group was written)."""
        stored: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append(((outcome, event), stored))
        if self._writer is None:
            self._writer = asyncio.create_task(self._write(), name=f"batch-outcomes-{self._claim.job_id}")
        return await asyncio.shield(stored)  # a line cancelled now must not cancel its group's write

    async def _write(self) -> None:
        try:
            while self._waiting:
                group, self._waiting = self._waiting, []
                if len(group) == 1:
                    await self._write_alone(*group[0])
                    continue
                try:
                    held = await self._record([finished for finished, _ in group])
                except Exception:
                    # One outcome the database refuses must not take its group with it: each alone
                    # then, so that only its own line sees the error (the runner counts it).
                    for finished, stored in group:
                        await self._write_alone(finished, stored)
                    continue
                for _, stored in group:
                    if not stored.done():
                        stored.set_result(held)
        finally:
            self._writer = None

    async def _write_alone(self, finished: Finished, stored: asyncio.Future[bool]) -> None:
        try:
            held = await self._record([finished])
        except Exception as exc:
            if not stored.done():
                stored.set_exception(exc)
            return
        if not stored.done():
            stored.set_result(held)

    async def _record(self, group: list[Finished]) -> bool:
        async with self._sessions() as session:
            return await ledger.record_outcomes(session, self._claim, group, self._clock())
