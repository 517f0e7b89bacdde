"""The response_owners table: which team created which response id.

Rows are written by the usage writer in the transaction of the records they came with (never on
the request path), idempotently: an id is owned by the first team recorded for it. Read by the
ownership check of the Responses API (gateway.responses_store.owners).
"""

from __future__ import annotations

from datetime import datetime

import asyncpg
from sqlalchemy import Table, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import ResponseOwner

OwnerRow = tuple[str, str, datetime]  # (response_id, team_id, created_at)
# The column's width. Real ids are a few dozen characters; a longer one is never recorded (its
# follow-ups are refused), rather than having its usage record refused with it.
MAX_RESPONSE_ID = 255
_OWNERS: Table = ResponseOwner.__table__  # type: ignore[assignment]
# One statement for a whole batch: the rows as three arrays, unnested.
_INSERT_UNNESTED = (
    "INSERT INTO response_owners (response_id, team_id, created_at) "
    "SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[]) ON CONFLICT DO NOTHING"
)


async def insert_owners(session: AsyncSession, rows: list[OwnerRow]) -> None:
    """Add `rows` in the session's transaction; an id already owned keeps its owner."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    insert = (postgresql if dialect == "postgresql" else sqlite).insert(_OWNERS).on_conflict_do_nothing()
    await session.execute(insert, [{"response_id": r, "team_id": t, "created_at": c} for r, t, c in rows])


async def insert_owners_raw(connection: asyncpg.Connection, rows: list[OwnerRow]) -> None:
    """`insert_owners` on a PostgreSQL driver connection, inside the transaction it has open (the
    writer's COPY of the records)."""
    if not rows:
        return
    ids, teams, times = (list(column) for column in zip(*rows, strict=True))
    await connection.execute(_INSERT_UNNESTED, ids, teams, times)


async def owner_of(session: AsyncSession, response_id: str) -> str | None:
    """The team that created `response_id`, or None if no team did (as far as is written)."""
    owner = await session.scalar(select(_OWNERS.c.team_id).where(_OWNERS.c.response_id == response_id))
    return None if owner is None else str(owner)
