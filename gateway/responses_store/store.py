"""The store of Responses kept for their team: readable the moment a Response is complete, written
to the database off the request path, purged past the retention.

A Response is kept (`keep`) synchronously in this process's cache of recent Responses, before the
client has its last byte, so that a follow-up here (a `previous_response_id`, a GET) always finds
it; with Redis a copy is shared for a few minutes (`share`, one SET, awaited while the answer
completes), so that a follow-up at another process finds it too. The writer task moves what is
kept into stored_responses in batches, one transaction each, as soon as there is something to
write; the database is what every process reads once the copy is gone. A read is always of one
team's Responses: the cache, the Redis keys and the table are all keyed by team and id.

A delete at one process must hold at the others, whose caches and unwritten batches may still
hold the Response: with Redis it leaves a tombstone, which every read checks (in the round trip
that reads the copy) and every writer checks after its commit, deleting what it wrote meanwhile.
The cache answers only for LOCAL_TTL_S after a keep (and while unwritten): without Redis, a
delete at another process holds here after that at most.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec
import structlog
from redis.exceptions import RedisError
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db import stored_responses as table
from gateway.db.models import StoredResponse
from gateway.errors import ServiceUnavailable
from gateway.redis.client import RedisClient

log = structlog.get_logger("gateway.responses_store")

CACHE_BYTES = 64 * 1024 * 1024  # the recent Responses kept in memory, JSON bytes
SHARED_TTL_S = 600  # the Redis copy and tombstone: far past the writer's lag and LOCAL_TTL_S
LOCAL_TTL_S = 60.0  # the cache answers this long after a keep; the copy and database after that
WRITE_BATCH = 200  # Responses per transaction
MAX_PENDING = 10_000  # kept, not yet written: past this (a database down for long) the oldest go
WRITE_RETRY_S = 1.0
PURGE_INTERVAL_S = 300.0
PURGE_BATCH = 1000  # rows per DELETE: no long lock, however much is due
MAX_CHAIN = 10_000  # responses a continuation walks back through


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One stored Response: its own input items and the Response, both JSON; `upstream_provider`
    names the provider that stores it too (its Responses API served natively)."""

    team_id: str
    response_id: str
    created_at: float
    model: str
    previous_response_id: str | None
    upstream_provider: str | None
    input_items: bytes
    response: bytes

    @property
    def size(self) -> int:
        return len(self.input_items) + len(self.response) + 256


def shared_key(team_id: str, response_id: str) -> str:
    # a hash tag: the copy and the tombstone in one slot, read together on a cluster too
    return f"gateway:stored-response:{{{team_id}:{response_id}}}"


def tombstone_key(team_id: str, response_id: str) -> str:
    return f"gateway:stored-response-deleted:{{{team_id}:{response_id}}}"


def _row(record: StoredRecord) -> dict[str, object]:
    return {
        "team_id": record.team_id,
        "response_id": record.response_id,
        "created_at": datetime.fromtimestamp(record.created_at, UTC),
        "model": record.model[:200],
        "previous_response_id": record.previous_response_id,
        "upstream_provider": record.upstream_provider,
        "input_items": record.input_items.decode(),
        "response": record.response.decode(),
    }


def _record(row: StoredResponse) -> StoredRecord:
    created = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=UTC)  # SQLite
    return StoredRecord(
        team_id=row.team_id,
        response_id=row.response_id,
        created_at=created.timestamp(),
        model=row.model,
        previous_response_id=row.previous_response_id,
        upstream_provider=row.upstream_provider,
        input_items=row.input_items.encode(),
        response=row.response.encode(),
    )


class ResponseStore:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        redis: RedisClient | None,
        retention_days: int,
        *,
        cache_bytes: int = CACHE_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sessions = sessions  # the primary's: a row is read as soon as it is written
        self._redis = redis
        self.retention_s = retention_days * 86_400
        # (record, when it was kept: time.monotonic()), oldest first
        self._cache: OrderedDict[tuple[str, str], tuple[StoredRecord, float]] = OrderedDict()
        self._cache_bytes, self._cache_limit = 0, cache_bytes
        self._pending: dict[tuple[str, str], StoredRecord] = {}  # kept, not yet written, oldest first
        self._wake = asyncio.Event()
        self._stopping = False
        self._now = clock

    # --- keeping ----------------------------------------------------------------------------

    def keep(self, record: StoredRecord) -> None:
        """Keep `record`: readable here at once, written to the database by the writer task."""
        if len(record.response_id) > table.MAX_RESPONSE_ID:
            return  # no real id is this long; its follow-ups are refused as unknown
        key = (record.team_id, record.response_id)
        self._remember(key, record)
        self._pending[key] = record
        if len(self._pending) > MAX_PENDING:  # the database has been down for a long while
            lost = self._pending.pop(next(iter(self._pending)))
            log.warning("stored_response_dropped", team=lost.team_id, reason="write backlog full")
        self._wake.set()

    async def share(self, record: StoredRecord) -> None:
        """With Redis, a copy of `record` for the other processes until the database has it."""
        if self._redis is None or len(record.response_id) > table.MAX_RESPONSE_ID:
            return
        try:
            await self._redis.set(
                shared_key(record.team_id, record.response_id),
                msgspec.msgpack.encode(record),
                ex=SHARED_TTL_S,
            )
        except (RedisError, OSError) as exc:  # other processes read it from the database once written
            log.warning("stored_response_not_shared", error=type(exc).__name__)

    def _remember(self, key: tuple[str, str], record: StoredRecord) -> None:
        self._drop_cached(key)
        self._cache[key] = (record, time.monotonic())
        self._cache_bytes += record.size
        while self._cache_bytes > self._cache_limit and len(self._cache) > 1:
            _, (evicted, _kept_at) = self._cache.popitem(last=False)
            self._cache_bytes -= evicted.size

    def _drop_cached(self, key: tuple[str, str]) -> bool:
        found = self._cache.pop(key, None)
        if found is not None:
            self._cache_bytes -= found[0].size
        return found is not None

    def _forget(self, key: tuple[str, str]) -> bool:
        cached = self._drop_cached(key)
        return self._pending.pop(key, None) is not None or cached

    def _cached(self, key: tuple[str, str]) -> StoredRecord | None:
        """The cache's copy while it may answer: unwritten, or kept within LOCAL_TTL_S, and
        within the retention."""
        found = self._cache.get(key)
        if found is None:
            return None
        record, kept_at = found
        if record.created_at < self._now() - self.retention_s:
            return None
        if key in self._pending or time.monotonic() - kept_at < LOCAL_TTL_S:
            return record
        return None

    # --- reading ----------------------------------------------------------------------------

    async def get(self, team_id: str, response_id: str) -> StoredRecord | None:
        """The team's stored Response, or None (another team's, a deleted or purged one, or none)."""
        key = (team_id, response_id)
        record = self._cached(key)
        if self._redis is not None:
            shared, deleted = await self._shared(team_id, response_id)
            if deleted:  # at another process: what this one holds goes too
                self._forget(key)
                return None
            record = record or shared
        if record is None:
            try:
                async with self._sessions() as session:
                    row = await table.stored_response(session, team_id, response_id)
            except (SQLAlchemyError, OSError) as exc:
                raise ServiceUnavailable(
                    "Cannot read stored responses: the database is unreachable. Retry later."
                ) from exc
            record = None if row is None else _record(row)
        if record is None or record.created_at < self._now() - self.retention_s:
            return None
        return record

    async def chain(self, record: StoredRecord) -> list[StoredRecord] | str:
        """`record` and the Responses it continues, oldest first; or the id of the first one of
        them that is gone (deleted, purged). Each step is read from this process's cache, else the
        rest of the chain from the database in one query, else (a Response not written yet) as
        `get` reads it."""
        team_id, chain = record.team_id, [record]
        while (previous := chain[-1].previous_response_id) is not None and len(chain) < MAX_CHAIN:
            found = self._cached((team_id, previous))
            if found is not None:
                chain.append(found)
                continue
            written = await self._written_chain(team_id, previous, MAX_CHAIN - len(chain))
            if written:
                chain += written
                continue
            found = await self.get(team_id, previous)
            if found is None:
                return previous
            chain.append(found)
        chain.reverse()
        return chain

    async def _written_chain(self, team_id: str, response_id: str, limit: int) -> list[StoredRecord]:
        """The chain from `response_id` back, newest first, as the database holds it, up to the
        first Response past the retention."""
        try:
            async with self._sessions() as session:
                rows = await table.stored_chain(session, team_id, response_id, limit)
        except (SQLAlchemyError, OSError) as exc:
            raise ServiceUnavailable(
                "Cannot read stored responses: the database is unreachable. Retry later."
            ) from exc
        kept_since = self._now() - self.retention_s
        records = []
        for record in map(_record, rows):
            if record.created_at < kept_since:
                break
            records.append(record)
        return records

    async def _shared(self, team_id: str, response_id: str) -> tuple[StoredRecord | None, bool]:
        """The Redis copy, and whether the Response was deleted, in one round trip."""
        assert self._redis is not None
        try:
            value, deleted = await self._redis.mget(
                shared_key(team_id, response_id), tombstone_key(team_id, response_id)
            )
        except (RedisError, OSError) as exc:  # the database has every written Response
            log.debug("stored_response_unread", error=type(exc).__name__)
            return None, False
        if value is None:
            return None, deleted is not None
        copy = msgspec.msgpack.decode(value.encode() if isinstance(value, str) else value, type=StoredRecord)
        return copy, deleted is not None

    # --- deleting ---------------------------------------------------------------------------

    async def delete(self, team_id: str, response_id: str) -> bool:
        """Delete the team's stored Response everywhere it is kept; whether it existed."""
        found = self._forget((team_id, response_id))
        if self._redis is not None:
            try:  # the tombstone first: a process reading or writing it from now on drops it
                await self._redis.set(tombstone_key(team_id, response_id), b"1", ex=SHARED_TTL_S)
                found = bool(await self._redis.delete(shared_key(team_id, response_id))) or found
            except (RedisError, OSError) as exc:
                raise ServiceUnavailable(
                    "Cannot delete the stored response: Redis is unreachable. Retry later."
                ) from exc
        try:
            async with self._sessions.begin() as session:
                found = await table.delete_stored(session, team_id, response_id) or found
        except (SQLAlchemyError, OSError) as exc:
            raise ServiceUnavailable(
                "Cannot delete the stored response: the database is unreachable. Retry later."
            ) from exc
        return found

    # --- the writer and the purge -----------------------------------------------------------

    async def run(self) -> None:
        """Write what is kept, a batch at a time, until `stop`; purge every PURGE_INTERVAL_S."""
        purge = asyncio.create_task(self._purge_every(), name="stored-responses-purge")
        try:
            while not self._stopping:
                await self._wake.wait()
                self._wake.clear()
                await self.flush()
        finally:
            purge.cancel()
            await asyncio.gather(purge, return_exceptions=True)

    async def flush(self) -> None:
        """Write everything kept and not yet written; on a database error, retry a moment later."""
        while self._pending:
            batch = list(itertools.islice(self._pending.values(), WRITE_BATCH))
            try:
                async with self._sessions.begin() as session:
                    await table.insert_stored(session, [_row(record) for record in batch])
                await self._drop_deleted(batch)
            except (SQLAlchemyError, OSError) as exc:
                log.warning(
                    "stored_responses_unwritten", error=type(exc).__name__, pending=len(self._pending)
                )
                if self._stopping:
                    return
                await asyncio.sleep(WRITE_RETRY_S)
                continue
            for record in batch:  # a delete meanwhile may have taken some already
                key = (record.team_id, record.response_id)
                if self._pending.get(key) is record:
                    del self._pending[key]

    async def _drop_deleted(self, written: list[StoredRecord]) -> None:
        """Delete again what another process deleted while this one was writing it: its delete,
        after its tombstone, found no row yet; this check, after the commit, finds the tombstone."""
        if self._redis is None:
            return
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for record in written:
                    pipe.exists(tombstone_key(record.team_id, record.response_id))
                deleted = await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("stored_responses_tombstones_unread", error=type(exc).__name__)
            return
        for record, gone in zip(written, deleted, strict=True):
            if gone:
                async with self._sessions.begin() as session:
                    await table.delete_stored(session, record.team_id, record.response_id)

    async def stop(self, drain_timeout_s: float) -> None:
        """Stop the writer after writing what is kept (given up at the timeout)."""
        self._stopping = True
        self._wake.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(drain_timeout_s):
                await self.flush()
        if self._pending:
            log.warning("stored_responses_not_drained", pending=len(self._pending))

    async def purge(self) -> int:
        """Delete the Responses past the retention, a batch at a time; how many went."""
        cutoff = self._now() - self.retention_s
        for key in [k for k, (r, _kept_at) in self._cache.items() if r.created_at < cutoff]:
            self._drop_cached(key)
        before = datetime.fromtimestamp(cutoff, UTC)
        purged = 0
        while True:
            async with self._sessions.begin() as session:
                deleted = await table.purge_stored(session, before, PURGE_BATCH)
            purged += deleted
            if deleted < PURGE_BATCH:
                return purged

    async def _purge_every(self) -> None:
        while True:
            try:
                purged = await self.purge()
                if purged:
                    log.info("stored_responses_purged", count=purged)
            except (SQLAlchemyError, OSError) as exc:  # the next round tries again
                log.warning("stored_responses_purge_failed", error=type(exc).__name__)
            await asyncio.sleep(PURGE_INTERVAL_S)
