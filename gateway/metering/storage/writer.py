"""The usage writer: moves events from the buffer into `usage_records`, in bulk and idempotently.

Entries are acked only after their rows are committed; `ON CONFLICT DO NOTHING` on the record's
key makes a retried or re-claimed batch harmless. The key is the request id, and on a partitioned
PostgreSQL table (request_id, created_at): a redelivered event has the same created_at, fixed when
its request arrived (migration 0008). The conflict names no columns, so it fits either key.
While the database is down the writer keeps its batch, backs off (capped, exponential) and tries
again; nothing is acked, so nothing is lost.
The owners of the response ids the events carry (gateway.db.response_owners) go into the same
transaction as their records, as idempotently.
A batch refused for its contents (a value the database or the driver cannot take) is halved until
each refused record is alone: every other record is written, each refused one goes to
`usage_dead_letters` with the reason and is acked, so one record never stops the rest.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import asyncpg
import msgspec
import structlog
from sqlalchemy import Insert, Table, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DataError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.models import UsageDeadLetter, UsageRecord
from gateway.db.response_owners import MAX_RESPONSE_ID, OwnerRow, insert_owners, insert_owners_raw
from gateway.metering.events import UsageEvent
from gateway.metering.storage.buffer import UsageBuffer
from gateway.metering.storage.upkeep import UsageUpkeep, keep_usage_storage_daily
from gateway.settings import Settings

# SQLSTATE classes 22 (data exception) and 23 (integrity violation): the same rows would fail again.
_REFUSED_SQLSTATE_CLASSES = ("22", "23")
# What the driver raises for a value it cannot encode (asyncpg: OverflowError for an int past its
# column's type, its own DataError, a ValueError, for others): the same rows would fail again too.
_UNENCODABLE = (OverflowError, ValueError)
_MILLISECONDS = Decimal("0.001")


class UsageWriter:
    def __init__(
        self,
        buffer: UsageBuffer,
        session_factory: async_sessionmaker[AsyncSession],
        batch_size: int = 1000,
        flush_interval_s: float = 0.2,
        logger: structlog.typing.FilteringBoundLogger | None = None,
        *,
        reclaim_idle_ms: int = 60_000,
        reclaim_interval_s: float | None = None,
        backoff_base_s: float = 0.1,
        backoff_max_s: float = 2.0,
        upkeep: UsageUpkeep | None = None,
    ) -> None:
        self.buffer = buffer
        self.session_factory = session_factory
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.gather_s = min(GATHER_S, flush_interval_s)
        self.reclaim_idle_ms = reclaim_idle_ms
        # Look for orphans twice per idle period (at most every 30 s): one is taken over within 1.5x.
        self.reclaim_interval_s = (
            min(reclaim_idle_ms / 2000, 30.0) if reclaim_interval_s is None else reclaim_interval_s
        )
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.upkeep = upkeep  # month partitions and retention, kept while `run` runs (None: not here)
        self.records_written = 0  # committed (a duplicate of an existing record counts too)
        self.records_rejected = 0  # refused for their contents: dead-lettered (or dropped if that failed)
        self.last_error: str | None = None  # None once a write succeeds again; for /readyz
        self._log = logger or structlog.get_logger("gateway.metering")
        self._stopping = asyncio.Event()
        self._run_task: asyncio.Task[None] | None = None
        self._next_reclaim = 0.0  # monotonic; the first cycle takes over what a dead writer left
        self._writing: asyncio.Future[None] | None = None  # a full batch's write, overlapping the next read

    @classmethod
    def configured(
        cls, settings: Settings, buffer: UsageBuffer, sessions: async_sessionmaker[AsyncSession]
    ) -> UsageWriter:
        """A writer of `buffer` with the batch size, flush interval and reclaim idle time of `settings`."""
        return cls(
            buffer,
            sessions,
            batch_size=settings.metering_batch_size,
            flush_interval_s=settings.metering_flush_interval_s,
            reclaim_idle_ms=int(settings.metering_reclaim_idle_s * 1000),
            upkeep=UsageUpkeep(settings.usage_partitions_ahead, settings.usage_retention_months),
        )

    async def run(self) -> None:
        """Write until `stop`: read a batch (waiting up to flush_interval_s), persist it, repeat."""
        self._run_task = asyncio.current_task()
        upkeep = None
        if self.upkeep is not None:  # beside the writing: a DDL lock wait must not hold up a batch
            upkeep = asyncio.create_task(
                keep_usage_storage_daily(self.session_factory, self.upkeep, self._log), name="usage-upkeep"
            )
        try:
            await self._write_until_stopped()
        finally:
            if upkeep is not None:
                upkeep.cancel()
                await asyncio.gather(upkeep, return_exceptions=True)

    async def _write_until_stopped(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                written = await self._cycle(block_ms=max(int(self.flush_interval_s * 1000), 1))
                failures = 0
                if 0 < written < self.batch_size and not self._stopping.is_set():
                    # A part batch: let events gather a moment, so that light traffic is written in
                    # batches too instead of one transaction per request.
                    await asyncio.sleep(self.gather_s)
            except Exception as exc:  # the buffer itself (Redis) is unreachable: wait, go on
                failures += 1
                self._note_error("usage_buffer_unavailable", exc, attempt=failures)
                await asyncio.sleep(self._backoff(failures))

    async def stop(self, drain_timeout_s: float) -> None:
        """Stop `run`, then write what is still buffered; give up (entries stay unacked) at the timeout."""
        self._stopping.set()
        task = self._run_task
        try:
            async with asyncio.timeout(drain_timeout_s):
                if task is not None and task is not asyncio.current_task():
                    await asyncio.wait({task})
                await self.flush()
        except TimeoutError:
            if task is not None:
                task.cancel()
            self._log.warning("usage_writer_drain_timeout", timeout_s=drain_timeout_s)
        except Exception as exc:  # the buffer is unreachable: what it holds stays there, unacked
            self._note_error("usage_writer_drain_incomplete", exc)

    async def flush(self) -> None:
        """Write everything buffered right now (tests, shutdown)."""
        while await self._cycle(block_ms=0):
            pass

    async def _cycle(self, block_ms: int) -> int:
        """Read a batch while the previous full batch is still being written, then write this one.

        One write at a time, and entries are acked only after their own commit; the overlap only
        hides the Redis read and the decoding behind the database's work."""
        entries = await self._reclaim_if_due()
        if not entries:
            entries = await self.buffer.read(self.batch_size, block_ms)
        if self._writing is not None:
            writing, self._writing = self._writing, None
            await writing
        if len(entries) == self.batch_size and not self._stopping.is_set():
            self._writing = asyncio.ensure_future(self._persist(entries))  # more are likely waiting
        elif entries:
            await self._persist(entries)
        return len(entries)

    async def _reclaim_if_due(self) -> list[tuple[str, UsageEvent]]:
        now = time.monotonic()
        if now < self._next_reclaim:
            return []
        self._next_reclaim = now + self.reclaim_interval_s
        try:
            entries = await self.buffer.reclaim(self.reclaim_idle_ms, self.batch_size)
        except Exception as exc:  # the stream is unreachable; spooled events can still be written
            self._note_error("usage_reclaim_failed", exc)
            return []
        if entries:
            self._log.info("usage_entries_reclaimed", count=len(entries))
        return entries

    async def _persist(self, entries: list[tuple[str, UsageEvent]]) -> None:
        failures = 0
        while True:
            try:
                await self._insert([event for _, event in entries])
                break
            except Exception as exc:
                if is_refused_record(exc):  # retrying would not help: find the culprit
                    await self._persist_apart(entries, exc)
                    return
                # the database is down or busy: keep the batch, retry
                failures += 1
                self._note_error("usage_write_failed", exc, records=len(entries), attempt=failures)
                await asyncio.sleep(self._backoff(failures))
        await self.buffer.ack([entry_id for entry_id, _ in entries])
        self.records_written += len(entries)
        self.last_error = None

    async def _persist_apart(self, entries: list[tuple[str, UsageEvent]], exc: Exception) -> None:
        """Halve a refused batch until each refused record is alone; dead-letter those."""
        if len(entries) > 1:
            middle = len(entries) // 2
            await self._persist(entries[:middle])
            await self._persist(entries[middle:])
            return
        entry_id, event = entries[0]
        reason = describe_error(exc)
        self._log.warning("usage_record_rejected", error=reason, request_id=event.request_id)
        await self._dead_letter(event, reason)
        await self.buffer.ack([entry_id])
        self.records_rejected += 1

    async def _dead_letter(self, event: UsageEvent, reason: str) -> None:
        """Keep a refused event in usage_dead_letters; retried while the database is down."""
        failures = 0
        while True:
            try:
                await self._insert_dead_letter(event, reason)
                return
            except Exception as exc:
                if is_refused_record(exc):  # not even as text: nothing more can be done with it
                    self._note_error("usage_dead_letter_refused", exc, request_id=event.request_id)
                    return
                failures += 1
                self._note_error("usage_dead_letter_failed", exc, attempt=failures)
                await asyncio.sleep(self._backoff(failures))

    async def _insert_dead_letter(self, event: UsageEvent, reason: str) -> None:
        letter = {
            "request_id": event.request_id,
            "refused_at": datetime.now(UTC),
            "reason": reason,
            "event": msgspec.json.encode(event).decode(),
        }
        async with self.session_factory() as session:
            dialect = session.get_bind().dialect.name
            await session.execute(_insert_ignoring_duplicates(dialect, _DEAD_LETTERS), [letter])
            await session.commit()

    async def _insert(self, events: list[UsageEvent]) -> None:
        async with self.session_factory() as session:
            dialect = session.get_bind().dialect.name
            owners = owner_rows(events)  # the response ids the records carry, with their team
            if dialect == "postgresql":  # COPY is the cheaper of the two from a single row up
                await _copy_ignoring_duplicates(session, [record_values(event) for event in events], owners)
            else:
                await session.execute(
                    _insert_ignoring_duplicates(dialect, _RECORDS), [record_row(e) for e in events]
                )
                await insert_owners(session, owners)
            await session.commit()

    def _backoff(self, failures: int) -> float:
        return float(min(self.backoff_base_s * 2 ** (failures - 1), self.backoff_max_s))

    def _note_error(self, event: str, exc: Exception, **fields: Any) -> None:
        # Only the error's class names: a DBAPI error's text would carry the record's values.
        self.last_error = describe_error(exc)
        self._log.warning(event, error=self.last_error, **fields)


GATHER_S = 0.05  # the pause after a part batch; records reach the database this much later
_STAGING = "usage_records_staging"


async def _copy_ignoring_duplicates(
    session: AsyncSession, rows: list[tuple[object, ...]], owners: list[OwnerRow]
) -> None:
    """Binary COPY straight into usage_records; if a row is already there (a retried or reclaimed
    batch), COPY into a session-local staging table and `INSERT ... ON CONFLICT DO NOTHING` instead.

    The binary COPY protocol skips per-row parameter handling: several times the rows/s of an
    executemany. Duplicates are rare (they follow a crash or a failed ack), so the common batch is
    written once, not twice; the idempotency is the same.
    """
    connection = await session.connection()
    raw = (await connection.get_raw_connection()).driver_connection
    assert raw is not None
    try:
        await _copy_on(raw, rows, owners)
    except (asyncpg.PostgresError, *_UNENCODABLE):
        raise  # the server refused, or a value could not be encoded: the driver's transaction
        # rolled back (an encoding failure cancels the COPY), the connection is sound
    except BaseException:
        # Broken under the driver (the server went away mid-COPY): SQLAlchemy never saw it, so tell
        # its pool, or the next checkout would get the same dead connection.
        await connection.invalidate()
        raise


async def _copy_on(raw: asyncpg.Connection, rows: list[tuple[object, ...]], owners: list[OwnerRow]) -> None:
    try:
        async with raw.transaction():
            await raw.copy_records_to_table("usage_records", records=rows, columns=COLUMNS)
            await insert_owners_raw(raw, owners)
        return
    except asyncpg.UniqueViolationError:
        pass  # some of these are stored already: the idempotent path below
    names = ", ".join(COLUMNS)
    # One transaction of the driver's own: the staging rows live until its commit.
    async with raw.transaction():
        await raw.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {_STAGING} "
            "(LIKE usage_records INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
        )
        await raw.copy_records_to_table(_STAGING, records=rows, columns=COLUMNS)
        await raw.execute(
            f"INSERT INTO usage_records ({names}) SELECT {names} FROM {_STAGING} "  # noqa: S608 - fixed names
            "ON CONFLICT DO NOTHING"
        )
        await insert_owners_raw(raw, owners)


_RECORDS: Table = UsageRecord.__table__  # type: ignore[assignment]
_DEAD_LETTERS: Table = UsageDeadLetter.__table__  # type: ignore[assignment]


async def dead_letter_count(sessions: async_sessionmaker[AsyncSession]) -> int:
    """The refused events waiting in usage_dead_letters for an operator."""
    async with sessions() as session:
        return int(await session.scalar(select(func.count()).select_from(_DEAD_LETTERS)) or 0)


def _insert_ignoring_duplicates(dialect_name: str, table: Table) -> Insert:
    # No conflict target: a record's key is (request_id, created_at) on a partitioned table, the
    # request id elsewhere, and either is its only unique constraint.
    if dialect_name == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing()
    if dialect_name == "sqlite":
        return sqlite.insert(table).on_conflict_do_nothing()
    raise RuntimeError(f"usage records cannot be written to a {dialect_name} database")


COLUMNS = (
    "request_id", "created_at", "team_id", "key_id", "model", "provider", "region", "deployment",
    "upstream_model", "endpoint", "batch_id", "status", "prompt_tokens", "completion_tokens",
    "cached_tokens", "cache_write_tokens", "usage_source", "cost", "uncached_cost", "latency_ms",
    "ttft_ms", "error_code", "queue_ms", "client_request_id", "service_tier",
)  # fmt: skip


def record_values(event: UsageEvent) -> tuple[object, ...]:
    """The usage_records row for one event, in `COLUMNS` order (time as an aware UTC datetime)."""
    return (
        event.request_id,
        datetime.fromtimestamp(event.created_at, UTC),
        event.team_id,
        event.key_id,
        event.model,
        event.provider,
        event.region,
        event.deployment,
        event.upstream_model,
        event.endpoint,
        event.batch_id,
        event.status,
        event.prompt_tokens,
        event.completion_tokens,
        event.cached_tokens,
        event.cache_write_tokens,
        event.usage_source.value,
        event.cost,
        event.uncached_cost,
        _milliseconds(event.latency_ms),
        None if event.ttft_ms is None else _milliseconds(event.ttft_ms),
        event.error_code,
        None if event.queue_ms is None else _milliseconds(event.queue_ms),
        event.client_request_id,
        event.service_tier,
    )


def owner_rows(events: Sequence[UsageEvent]) -> list[OwnerRow]:
    """The owner row of each event that carries a response id."""
    return [
        (event.response_id, event.team_id, datetime.fromtimestamp(event.created_at, UTC))
        for event in events
        if event.response_id and len(event.response_id) <= MAX_RESPONSE_ID
    ]


def record_row(event: UsageEvent) -> dict[str, object]:
    return dict(zip(COLUMNS, record_values(event), strict=True))


def _milliseconds(value: float) -> Decimal:
    if not math.isfinite(value):
        return Decimal(0)
    return Decimal(repr(value)).quantize(_MILLISECONDS)


def is_refused_record(exc: BaseException) -> bool:
    """The rows themselves are the trouble (too long, out of range, a constraint, a value the driver
    cannot encode), not the database's being away: writing them again would fail again."""
    if isinstance(exc, DataError | IntegrityError):
        return True
    original = getattr(exc, "orig", None) or exc  # raw asyncpg errors (COPY) too
    if isinstance(original, _UNENCODABLE):
        return True
    sqlstate = getattr(original, "sqlstate", None)
    return isinstance(sqlstate, str) and sqlstate[:2] in _REFUSED_SQLSTATE_CLASSES


def describe_error(exc: BaseException) -> str:
    """`OperationalError (ConnectionRefusedError)`: the kind of failure, never its parameters."""
    original = getattr(exc, "orig", None)
    if original is None:  # a driver's own error (the COPY path), or not a database error at all
        sqlstate = getattr(exc, "sqlstate", None)
        return type(exc).__name__ if sqlstate is None else f"{type(exc).__name__} (SQLSTATE {sqlstate})"
    sqlstate = getattr(original, "sqlstate", None)
    detail = (
        type(original).__name__ if sqlstate is None else f"{type(original).__name__}, SQLSTATE {sqlstate}"
    )
    return f"{type(exc).__name__} ({detail})"
