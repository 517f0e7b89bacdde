"""A job's ledger writes made in groups: the writes of one kind that arrive while a transaction is
being written share the next one.

Two kinds go through here. **Outcomes** (`ledger.record_outcomes`): every outcome moves the job's
own row (its counts), so transactions that write outcomes queue on that row's lock; one each would
cap a job at the rate commits happen one after another. **Run begins** (`ledger.begin_attempts`):
a line's run is written down after it holds its permit and before it is sent, so a transaction
each puts a commit between every permit and its send; when a wave of requests ends together, the
next wave's commits queue on the connection pool while the server's freed slots idle.

Each caller still waits for the transaction that holds its write: nothing counts as written before
it is. A group the database refuses is written again one item at a time, so that one item it
cannot store fails its own caller only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Generic, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.jobs import ledger
from gateway.jobs.ledger import Claim, LineOutcome, PendingLine
from gateway.metering.events import UsageEvent

Item = TypeVar("Item")
Result = TypeVar("Result")
Finished = tuple[LineOutcome, UsageEvent | None]
RunBegin = tuple[PendingLine, str, str]  # the line, its run's request id, the deployment's id


class GroupedWrites(Generic[Item, Result]):
    """`write(items)` stores a group in one transaction and answers one result per item."""

    def __init__(self, write: Callable[[Sequence[Item]], Awaitable[list[Result]]], name: str) -> None:
        self._write_group, self._name = write, name
        self._waiting: list[tuple[Item, asyncio.Future[Result]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def write(self, item: Item) -> Result:
        """`item`'s result once the transaction holding it is committed."""
        written: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, written))
        if self._writer is None:
            self._writer = asyncio.create_task(self._write(), name=self._name)
        return await asyncio.shield(written)  # a caller cancelled now must not cancel its group's write

    async def _write(self) -> None:
        try:
            while self._waiting:
                group, self._waiting = self._waiting, []
                if len(group) == 1:
                    await self._write_alone(*group[0])
                    continue
                try:
                    results = await self._write_group([item for item, _ in group])
                except Exception:
                    # One item the database refuses must not take its group with it: each alone
                    # then, so that only its own caller sees the error
                    for item, written in group:
                        await self._write_alone(item, written)
                    continue
                for (_, written), result in zip(group, results, strict=True):
                    if not written.done():
                        written.set_result(result)
        finally:
            self._writer = None

    async def _write_alone(self, item: Item, written: asyncio.Future[Result]) -> None:
        try:
            [result] = await self._write_group([item])
        except Exception as exc:
            if not written.done():
                written.set_exception(exc)
            return
        if not written.done():
            written.set_result(result)


def outcome_groups(
    sessions: async_sessionmaker[AsyncSession], claim: Claim, clock: Callable[[], datetime]
) -> GroupedWrites[Finished, bool]:
    """Outcomes stored with their usage records: True once stored, False if the claim no longer
    holds the job (then nothing of its group was written)."""

    async def record(group: Sequence[Finished]) -> list[bool]:
        async with sessions() as session:
            held = await ledger.record_outcomes(session, claim, group, clock())
        return [held] * len(group)

    return GroupedWrites(record, f"batch-outcomes-{claim.job_id}")


def run_begins(
    sessions: async_sessionmaker[AsyncSession], claim: Claim, clock: Callable[[], datetime]
) -> GroupedWrites[RunBegin, bool]:
    """Runs written down before they are sent: True for each one written (`ledger.begin_attempts`)."""

    async def begin(group: Sequence[RunBegin]) -> list[bool]:
        async with sessions() as session:
            return await ledger.begin_attempts(session, claim, group, clock())

    return GroupedWrites(begin, f"batch-run-begins-{claim.job_id}")
