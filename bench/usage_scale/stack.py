"""What the usage benchmark runs on: its own PostgreSQL database (`gateway_bench_usage`, recreated
and migrated), its teams and keys made through the admin repositories, and usage records written
by the gateway's own writer (binary COPY, the daily totals kept by the database's triggers) into
usage_records' month partitions (made ahead for the records' months, as the upkeep makes them for
the months to come), so the tables hold what production would after as many requests."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from itertools import islice

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from bench.stack import POSTGRES_ADMIN_URL
from bench.usage_scale.dataset import KEYS_PER_TEAM, TEAMS, Tenant
from gateway.db import keys, teams
from gateway.db.migrate import upgrade_head_async
from gateway.db.models import ApiKey, Team
from gateway.metering.events import UsageEvent
from gateway.metering.storage.buffer import MemoryBuffer
from gateway.metering.storage.partitions import add_months, create_months, month_of
from gateway.metering.storage.writer import UsageWriter
from gateway.schemas.admin import KeyCreate, TeamCreate

DATABASE = "gateway_bench_usage"
WRITER_DATABASE = "gateway_bench_usage_writer"  # the writer's rate with and without the daily totals
SERVER = POSTGRES_ADMIN_URL.rsplit("/", 1)[0]
APPEND_CHUNK = 50_000  # events buffered at a time, then written: the buffer stays small
WRITER_BATCH = 1000  # the writer's default batch size (GATEWAY_METERING_BATCH_SIZE)
Sessions = async_sessionmaker[AsyncSession]


def database_url(name: str) -> str:
    return f"{SERVER}/{name}"


async def recreate(name: str) -> str:
    """A fresh, migrated database; its URL."""
    import asyncpg

    connection = await asyncpg.connect(POSTGRES_ADMIN_URL)
    try:
        await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await connection.execute(f'CREATE DATABASE "{name}"')
    finally:
        await connection.close()
    url = database_url(name)
    await upgrade_head_async(url)
    return url


async def create_tenants(sessions: Sessions) -> tuple[list[Tenant], str]:
    """TEAMS teams of KEYS_PER_TEAM keys each; and the secret of the first team's first key."""
    tenants, secret = [], ""
    async with sessions.begin() as session:
        for n in range(TEAMS):
            team = await teams.create_team(session, TeamCreate(name=f"team-{n:02d}"))
            made = [
                await keys.create_key(session, KeyCreate(team_id=team.id, name=f"key-{k}"))
                for k in range(KEYS_PER_TEAM)
            ]
            secret = secret or made[0][1]
            tenants.append(Tenant(team.id, tuple(key.id for key, _ in made)))
    return tenants, secret


async def stored_tenants(sessions: Sessions) -> tuple[list[Tenant], str]:
    """The teams and keys of a database loaded before (`--reuse`), in the order they were made;
    and the secret of a new key of the first team (a secret is never stored)."""
    async with sessions() as session:
        query = select(Team.id, ApiKey.id).join(ApiKey).order_by(Team.name, ApiKey.name)
        rows = (await session.execute(query)).all()
    by_team: dict[str, list[str]] = {}
    for team_id, key_id in rows:
        by_team.setdefault(team_id, []).append(key_id)
    tenants = [Tenant(team_id, tuple(key_ids)) for team_id, key_ids in by_team.items()]
    async with sessions.begin() as session:
        _, secret = await keys.create_key(session, KeyCreate(team_id=tenants[0].team_id, name="reused"))
    return tenants, secret


async def create_partitions(sessions: Sessions, first: float, last: float) -> list[str]:
    """The month partitions from `first`'s month to `last`'s (unix seconds); the names created."""
    month, end = month_of(datetime.fromtimestamp(first, UTC)), month_of(datetime.fromtimestamp(last, UTC))
    months = [month]
    while months[-1] < end:
        months.append(add_months(months[-1], 1))
    async with sessions.begin() as session:
        return await create_months(session, months)


async def write(
    sessions: Sessions,
    events: Iterable[UsageEvent],
    *,
    batch_size: int = WRITER_BATCH,
    progress: Callable[[int, float], None] | None = None,
) -> tuple[int, float]:
    """Write the events through the usage writer, as the gateway does; (records, seconds spent
    writing: the appends to the buffer are not counted). `progress(records, seconds)` after each
    chunk."""
    writer = UsageWriter(MemoryBuffer(maxlen=APPEND_CHUNK), sessions, batch_size=batch_size)
    source = iter(events)
    written, writing_s = 0, 0.0
    while chunk := list(islice(source, APPEND_CHUNK)):
        for event in chunk:
            await writer.buffer.append(event)
        started = time.perf_counter()
        await writer.flush()
        writing_s += time.perf_counter() - started
        written += len(chunk)
        if progress is not None:
            progress(written, writing_s)
    return written, writing_s


async def analyze(engine: AsyncEngine) -> None:
    """What autovacuum does soon after a bulk load: statistics for the planner, and the visibility
    map that lets index-only scans skip the table."""
    async with engine.connect() as connection:
        await connection.execution_options(isolation_level="AUTOCOMMIT")
        for table in ("usage_records", "usage_daily"):  # a partitioned table: each of its partitions
            await connection.execute(text(f"VACUUM ANALYZE {table}"))


async def count(engine: AsyncEngine, table: str) -> int:
    async with engine.connect() as connection:
        return int((await connection.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one())  # noqa: S608 - fixed names
